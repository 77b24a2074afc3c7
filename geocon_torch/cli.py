"""The ``geocon`` command. Each subcommand lives in ``geocon_torch/commands/<name>.py`` and
exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

User errors (a bad option or config value, a missing file, an invalid manifest, ``--device
cuda`` without a GPU) end the command with ONE line on stderr, ``geocon <command>: error:
<message>``, and exit status 2; ``--debug`` shows the traceback instead. So do errors of the
environment, any ``OSError`` that carries an errno (a full disk, a read-only file system, a
disk quota, an I/O error; PyAV's ``av.error.OSError`` too): ``geocon <command>: error:
<strerror>: <path>``, naming the real output file (never the hidden temporary of an atomic
write). Anything else is a bug and keeps its traceback.

A warning a command gives (a Python ``UserWarning``: mixed package versions in a store, ...)
is ONE line on stderr too, ``geocon <command>: warning: <message>``, instead of Python's file,
line number and source line; other warnings (the DeprecationWarning of a retired name) keep
Python's format.

Ctrl-C (and SIGTERM, which a command turns into the same exception while it runs) is neither:
the command unwinds (temporary output files removed, a dynamic bench hands its claims back,
stores closed) and ends with ONE line, ``geocon <command>: interrupted`` (``terminated
(SIGTERM)``), and exit status 130 (143), as a shell reports a process stopped by the signal;
``--debug`` shows the traceback instead. Ctrl-C while :func:`main` builds the parser (it
imports every command) ends with ``geocon: interrupted``, 130; one during ``import geocon_torch``
itself (torch: most of the start-up), which the console script runs before :func:`main`, still
ends with Python's traceback.

A reader that goes away (``geocon score --json - | head -1``) ends the command quietly with exit
status 141 (128 + SIGPIPE), as other Unix tools; the rest of its output is dropped (Python's
"Note on SIGPIPE"). Text that a stream cannot encode (a file name in another encoding, whose
lone surrogates a strict UTF-8 stdout refuses) is written with backslash escapes (``caf\\udce9``)
instead of ending the command with a traceback after its work is done. A closed stdout (fd 1
closed: ``geocon score ... --json r.jsonl >&-``, some job runners) drops what would be printed
and keeps the command's exit status; an output that needs it (``--json -``) is a user error
before any work.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator, List, NoReturn, Optional, TextIO, Tuple

from . import __version__, commands
from .commands._common import check_device
from .bench.store import StoreError
from .errors import GeoConError
from .io._atomic import filename_text

# builtin exceptions that are the user's doing (a path that is not there / not readable, or
# a file where a folder is to be created)
USER_OS_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
                  PermissionError)

#: the exit status of a command whose stdout reader went away (128 + SIGPIPE, as a shell
#: reports a process the signal ended)
BROKEN_PIPE_STATUS = 128 + int(getattr(signal, "SIGPIPE", 13))

EXIT_STATUSES = """exit status (every command):
  0    done
  1    geocon score / demo: some clip has status error; merge: conflicts; bench --strict:
       error rows stored; bench: the run ended with clips of its manifest unstored
  2    a user error (bad option, input or output path, config, manifest, store) or an
       error of the environment (full disk, read-only file system, I/O error), one line
       on stderr, or no COMMAND given
  130  interrupted (Ctrl-C); 143: terminated (SIGTERM)
  141  the reader of stdout went away (geocon ... | head)"""


class GeoConArgumentParser(argparse.ArgumentParser):
    """argparse with one-line usage errors: ``geocon score: error: <message> (see geocon score
    --help)``, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = GeoConArgumentParser(
        prog="geocon",
        description="Ground-truth-free geometric consistency scores for (generated) video.",
        epilog=EXIT_STATUSES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"geocon_torch {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the full traceback of an error instead of one line")
        p.set_defaults(_run=module.run, _parser=p)
    return parser


def _is_environment_error(exc: BaseException) -> bool:
    """True for an OSError that carries an errno (the system refused: a full disk, a read-only
    file system, a quota, an I/O error; ``av.error.OSError`` too): the environment's doing,
    not a bug. An OSError made with a bare message (``OSError("...")``) has no errno."""
    return isinstance(exc, OSError) and exc.errno is not None


def is_user_error(exc: BaseException) -> bool:
    """True for errors caused by the input (GeoConError that is a ValueError, OSError or
    ImportError: bad option / config / manifest / file, missing checkpoint or optional
    package; a missing or unreadable path) or by the environment (any OSError with an errno:
    a full disk, a read-only file system, an I/O error), which get one line instead of a
    traceback."""
    if isinstance(exc, GeoConError):
        return isinstance(exc, (ValueError, OSError, ImportError, StoreError))
    return isinstance(exc, USER_OS_ERRORS) or _is_environment_error(exc)


def _one_line(exc: BaseException) -> str:
    """The message of the one-line error: ``<strerror>: <path>`` for an OSError of the user
    or the environment that names a file (``<path> -> <path2>`` for two), its text else."""
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and not isinstance(exc, GeoConError) and (
            isinstance(exc, USER_OS_ERRORS) or _is_environment_error(exc)):
        what = exc.strerror or type(exc).__name__
        if exc.filename is not None:
            text = f"{what}: {filename_text(exc.filename) or exc.filename}"
            if exc.filename2 is not None:
                text += f" -> {filename_text(exc.filename2) or exc.filename2}"
        elif exc.strerror:
            text = exc.strerror
    return text or type(exc).__name__


@contextmanager
def _sigterm_as_interrupt(signalled: List[int]) -> Iterator[None]:
    """While the block runs, SIGTERM (``kill``, a batch scheduler, torchrun stopping its
    workers) raises KeyboardInterrupt in the main thread, as Ctrl-C does, and appends its
    number to ``signalled``; the previous handler is restored afterwards. Nothing changes off
    the main thread or where the caller installed its own handler."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return

    def stop(signum: int, frame) -> None:
        signalled.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupted_line(command: str, signalled: List[int]) -> str:
    """The one line of a command stopped by Ctrl-C or SIGTERM (module doc)."""
    how = "terminated (SIGTERM)" if signalled else "interrupted"
    line = f"geocon {command}: {how}"
    if command == "bench":
        line += ("; the clips stored so far are kept: run the same command again to resume "
                 "(only clips without a stored row are scored)")
    elif command == "prune":
        line += ("; the rows deleted so far stay deleted (each chunk is one transaction): run "
                 "the same command again to finish")
    return line


@contextmanager
def _escaping_streams() -> Iterator[None]:
    """While the block runs, stdout and stderr write what they cannot encode with backslash
    escapes (``errors="backslashreplace"``) where they would raise (``errors="strict"``: a
    UTF-8 locale's stdout and a path holding a lone surrogate); the caller's setting is
    restored afterwards. Streams that cannot be reconfigured are left as they are."""
    changed: List[Tuple[TextIO, str]] = []
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
                changed.append((stream, "strict"))
            except (OSError, ValueError):
                pass
    try:
        yield
    finally:
        for stream, errors in changed:
            try:
                stream.reconfigure(errors=errors)
            except (OSError, ValueError):  # a closed or broken stream: nothing to restore
                pass


@contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """While the block runs, a ``UserWarning`` (or subclass) is shown as ``geocon <command>:
    warning: <message>`` (whitespace collapsed: one line; module doc) where Python would show
    its file, line and source line; other categories keep the previous format. Only the
    format changes (``warnings.formatwarning``): filters, ``-W error`` and recorders such as
    ``warnings.catch_warnings(record=True)`` see the same warnings. Restored afterwards."""
    previous = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None) -> str:
        if not issubclass(category, UserWarning):
            return previous(message, category, filename, lineno, line)
        return f"geocon {command}: warning: {' '.join(str(message).split())}\n"

    warnings.formatwarning = formatwarning
    try:
        yield
    finally:
        warnings.formatwarning = previous


def _drop_stdout() -> int:
    """After a reader of stdout went away: point stdout's file descriptor at the null device,
    so that the interpreter's last flush cannot fail again (Python's "Note on SIGPIPE"), and
    return :data:`BROKEN_PIPE_STATUS`."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture)
        return BROKEN_PIPE_STATUS
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    return BROKEN_PIPE_STATUS


def _parse(argv: Optional[List[str]]) -> Optional[argparse.Namespace]:
    """The parsed command line, or None when no COMMAND was given (the help then went to
    stderr). Usage errors exit 2 (SystemExit) as argparse does."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # told by the command's parser: "geocon score: error: unrecognized arguments"
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)  # a usage error: exit 2, nothing on stdout
        return None
    return args


def _run_command(args: argparse.Namespace) -> int:
    """Run the parsed command and return its exit status: user errors, Ctrl-C / SIGTERM and a
    reader of stdout that went away end as the module doc says; anything else raises."""
    signalled: List[int] = []
    try:
        with _sigterm_as_interrupt(signalled), _one_line_warnings(args.command):
            if hasattr(args, "device"):  # "auto" -> None: the commands' automatic choice
                args.device = check_device(args.device)
            status = int(args._run(args) or 0)
            if sys.stdout is not None:  # None: fd 1 closed, nothing was printed
                sys.stdout.flush()  # a reader that went away: found here, not at exit
            return status
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(_interrupted_line(args.command, signalled), file=sys.stderr)
        return 128 + int(signal.SIGTERM if signalled else signal.SIGINT)
    except BrokenPipeError:  # geocon ... | head: quiet, as other Unix tools
        if args.debug:
            raise
        return _drop_stdout()
    except Exception as exc:  # noqa: BLE001 - sorted into user errors and bugs below
        if args.debug or not is_user_error(exc):
            raise
        print(f"geocon {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``geocon`` with ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    # retired names (config keys, manifest columns, result keys) warn with a DeprecationWarning,
    # which Python hides outside __main__: a command shows them, once per place
    warnings.filterwarnings("default", message=r".* is deprecated", category=DeprecationWarning)
    try:
        args = _parse(argv)  # builds the parser: imports every command (a second or more)
    except KeyboardInterrupt:
        if "--debug" in (sys.argv[1:] if argv is None else argv):
            raise
        print("geocon: interrupted", file=sys.stderr)
        return 128 + int(signal.SIGINT)
    if args is None:
        return 2
    with _escaping_streams():  # also the error line, which may name such a path
        return _run_command(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
