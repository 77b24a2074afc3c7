"""Exception types raised by geocon_torch.

Every error the package raises on purpose is a :class:`GeoConError`; errors caused by user input
(arguments, options, config values, files) also subclass :class:`ValueError` (``InputError``,
``ConfigError``, ``VideoReadError``, ``ShapeError``, ...), so ``except ValueError`` keeps working.

Every bad-input path raises one of these with a message that says what was wrong and what to do.
A clip that is readable but cannot be scored (too little texture, too few valid pairs) is *not* an
error: it comes back as a result with ``status == "not_applicable"`` and a ``reason``.
"""
from __future__ import annotations


class GeoConError(Exception):
    """Base class of every error raised on purpose by geocon_torch."""


class InputError(GeoConError, ValueError):
    """A user-supplied argument, option or file content is invalid (bad option string, value out
    of range, malformed mask / pose / prompt file, ...). The message names the argument, what was
    given and what is allowed."""


class ConfigError(InputError):
    """A configuration value is invalid: unknown key, wrong type, out of range or not one of the
    allowed option strings. The message gives the field's dotted name (``io.long_side``)."""


class ArgumentTypeError(InputError, TypeError):
    """A function got an argument of the wrong type or an unexpected keyword argument."""


class VideoReadError(GeoConError, ValueError):
    """A video or image sequence could not be read: missing, zero-byte, not a video, truncated,
    0 frames, or an unsupported tensor layout. The message names the path and the cause."""


class ShapeError(GeoConError, ValueError):
    """A tensor argument has the wrong shape or dtype; the message shows the bad shape."""


class ClipTensorError(VideoReadError, ShapeError):
    """An in-memory clip / batch tensor is malformed (wrong ndim, C not in {1, 3}, 0 frames, a
    dtype other than uint8 / float, float values outside [0, 1], NaN / inf). Raised by the one
    tensor -> Clip path (:func:`geocon_torch.io.clip_from_tensor`) for ``read_clip``, the
    epipolar sections and every Metric class alike; both a VideoReadError and a ShapeError."""


class CheckpointError(GeoConError, FileNotFoundError):
    """A learned backend was requested without a usable local checkpoint (nothing is ever
    downloaded): the path is missing, unreadable, or does not match the architecture."""


class OptionalDependencyError(GeoConError, ImportError):
    """An optional backend (dust3r, sam2, pyarrow, ...) was requested but is not importable."""


class ResourceExhaustedError(GeoConError, OSError):
    """A resource of the machine ran out while a clip was read or scored (too many open files,
    no memory or threads, an out-of-memory GPU, a full disk or quota): the run's failure, not
    the clip's. Nothing is stored for the clip (the rows stored before stay), so running the
    same command again, once the resource is back, scores it. The message names the resource,
    the clip and what to do; ``errno`` is the cause's (EMFILE, ENOMEM, ...) when it had one."""
