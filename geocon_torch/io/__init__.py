"""Video in: decoding, frame sampling, working resolution, content masks, pair lists.

Reading video
-------------
``read_clip(source)`` turns a video file (mp4, webm, avi, mkv, mov, gif: anything PyAV decodes),
a folder of images (png / jpg / jpeg / bmp / webp / tif / tiff / exr, natural order: ``2.png``
before ``10.png``),
one image file, or a tensor (T, C, H, W) with C in {1, 3}, uint8 or float in [0, 1], into a
:class:`~geocon_torch.types.Clip`:

* ``frames`` (T, 3, h, w) uint8 RGB at the **working resolution**: long side ``long_side``
  (default 1024, the paper's), aspect kept, sides rounded to even; ``long_side=None`` keeps native
  pixels. Every pixel result of the package (GE, epipolar error, keypoints) is in these pixels.
  ``clip.scale`` = working / source long side, ``clip.meta["scale_xy"]`` = exact (sx, sy).
* ``content_mask`` (h, w) bool: False on letterbox / pillarbox bars (rows / columns touching the
  border whose max luminance over time stays below ``letterbox_threshold``, default 16/255; bars
  thinner than ``letterbox_min_fraction`` (2 %) of the side are ignored).
* ``fps`` (source fps / stride), ``frame_indices`` (source index of each frame), ``source_size``,
  ``meta`` (path, codec, source_fps, container_frames, decoded_frames, num_source_frames,
  truncated, display_rotation, ...). Frames are in display orientation: a video's display
  rotation by quarter turns is applied (:func:`~geocon_torch.io.decode.display_rgb`).

Streaming: ``read_clip(path, stream=True)`` (what ``score_clip`` uses for clips of more than
``io.stream_min_frames`` frames) decodes a video file, or the images of a folder, once for the
metadata, motion statistic and letterbox mask and keeps no frame: ``clip.frames`` is a
:class:`~geocon_torch.io.framestore.VideoFrames` (same shape / dtype / indexing API as the
tensor, bit-identical frames) that decodes requested frames through one sequential decoder, or
for a folder an :class:`~geocon_torch.io.framestore.ImageFrames` that reads each requested image
file again, so a clip's memory does not grow with its length.

Files are decoded frame by frame: frames that are not selected are never converted to RGB, kept
frames are resized at once (cv2.INTER_AREA when shrinking), so a long 4K clip never sits in
memory at full resolution. Tensors are resized on their own device (antialiased bilinear).
``read_clips`` reads a (B, T, C, H, W) batch or a list of sources.

One tensor -> Clip path: ``check_clip_tensor`` (the rule) and ``clips_from_tensor`` /
``clip_from_tensor`` / ``clips_from_tensors`` (the conversion, of a batch, one clip or a list of
clips read as batches of one shape; ``long_side`` defaults to None = native pixels there) are
what ``read_clip``'s tensor branch, ``score_clip``, the epipolar sections and every Metric class
use, so a batch is accepted or rejected the same way everywhere; ``tensor_frames`` gives the
same frames of a batch as one (B, T', 3, H', W') uint8 tensor without building Clips.

Sampling: ``stride`` / ``max_frames`` (the first ``max_frames`` after striding) or explicit
``indices``. Pairs: ``make_pairs(T, "adjacent" | s | [(i, j), ...], max_pairs=None)``; with
``max_pairs`` the pairs are spread evenly, positions ``round(linspace(0, P - 1, max_pairs))``.
A 1-frame clip is valid and has no pairs. Held frames (a frame still against the one before
it, ``clip.meta["motion"]["held"]``, read by ``held_of(clip)``) drop the protocols' pairs of two
identical frames (``drop_held_pairs``).

Bad input raises :class:`~geocon_torch.errors.VideoReadError` with the path and the cause: missing
path, empty (0-byte) file, a non-video file, a file truncated before its first frame, 0 frames,
images of different sizes, indices past the end; tensors of the wrong shape / dtype / range raise
its subclass :class:`~geocon_torch.errors.ClipTensorError` (also a ShapeError). A
file cut mid-way gives the frames that decode and ``meta["truncated"] = True``.

Lens: ``read_clip(..., lens=...)`` (``io.lens``: OpenCV camera matrix and distortion
coefficients) undistorts the working frames of every reader, eager, streamed or tensor, and maps
the content mask through the same map (:mod:`geocon_torch.io.lens`, ``meta["lens"]``); without
it the frames are taken as a pinhole camera's.

``probe_video(path)`` gives fps, frame count (by decoding: containers can be off, e.g.
``box.mp4`` announces 456 frames and 455 decode), size and codec. ``content_hash(path_or_tensor)``
is the SHA-256 of the file bytes (or the tensor's dtype, shape and bytes).
"""
from .hashing import content_hash
from .framestore import VideoFrames
from .letterbox import ContentMaskAccumulator, detect_content_mask
from .probe import VideoInfo, probe_video
from .reader import (DEFAULT_FPS, check_clip_tensor, clip_from_tensor, clips_from_tensor,
                     clips_from_tensors, read_clip, read_clips, tensor_frames)
from .resize import WorkingSize, working_size
from .pairs import (background_pairs, drop_held_pairs, foreground_pairs, gvgc_pairs,
                    held_of, make_pairs, gate_pair_tiers, parallax_gate_pairs, spread_evenly,
                    worldatlas_pairs)
from .sampling import FrameSelection, frame_selection
from .writer import write_gif, write_image_folder, write_video

__all__ = [
    "read_clip", "read_clips", "clip_from_tensor", "clips_from_tensor", "clips_from_tensors",
    "tensor_frames", "check_clip_tensor",
    "probe_video", "VideoInfo", "make_pairs", "spread_evenly",
    "background_pairs", "parallax_gate_pairs", "gate_pair_tiers", "worldatlas_pairs",
    "gvgc_pairs", "foreground_pairs", "drop_held_pairs", "held_of",
    "detect_content_mask", "content_hash", "working_size", "WorkingSize", "frame_selection",
    "FrameSelection", "DEFAULT_FPS", "write_video", "write_image_folder", "write_gif",
    "VideoFrames", "ContentMaskAccumulator",
]
