"""The ``geocon`` command. Each subcommand lives in ``geocon_torch/commands/<name>.py`` and
exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

User errors (a bad option or config value, a missing file, an invalid manifest, ``--device
cuda`` without a GPU) end the command with ONE line on stderr, ``geocon <command>: error:
<message>``, and exit status 2; ``--debug`` shows the traceback instead. Anything else is a bug
and keeps its traceback.

Ctrl-C (and SIGTERM, which a command turns into the same exception while it runs) is neither:
the command unwinds (temporary output files removed, a dynamic bench hands its claims back,
stores closed) and ends with ONE line, ``geocon <command>: interrupted`` (``terminated
(SIGTERM)``), and exit status 130 (143), as a shell reports a process stopped by the signal;
``--debug`` shows the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from typing import Iterator, List, NoReturn, Optional

from . import __version__, commands
from .commands._common import check_device
from .bench.store import StoreError
from .errors import GeoConError

# builtin exceptions that are the user's doing (a path that is not there / not readable, or
# a file where a folder is to be created)
USER_OS_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
                  PermissionError)


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


def is_user_error(exc: BaseException) -> bool:
    """True for errors caused by the input (GeoConError that is a ValueError, OSError or
    ImportError: bad option / config / manifest / file, missing checkpoint or optional
    package; a missing or unreadable path), which get one line instead of a traceback."""
    if isinstance(exc, GeoConError):
        return isinstance(exc, (ValueError, OSError, ImportError, StoreError))
    return isinstance(exc, USER_OS_ERRORS)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, USER_OS_ERRORS) and not isinstance(exc, GeoConError):
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename}" if exc.filename else text
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


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``geocon`` with ``argv`` (default ``sys.argv[1:]``) and return the exit status."""
    # retired names (config keys, manifest columns, result keys) warn with a DeprecationWarning,
    # which Python hides outside __main__: a command shows them, once per place
    warnings.filterwarnings("default", message=r".* is deprecated", category=DeprecationWarning)
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # told by the command's parser: "geocon score: error: unrecognized arguments"
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    signalled: List[int] = []
    try:
        with _sigterm_as_interrupt(signalled):
            if hasattr(args, "device"):  # "auto" -> None: the commands' automatic choice
                args.device = check_device(args.device)
            return int(args._run(args) or 0)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(_interrupted_line(args.command, signalled), file=sys.stderr)
        return 128 + int(signal.SIGTERM if signalled else signal.SIGINT)
    except Exception as exc:  # noqa: BLE001 - sorted into user errors and bugs below
        if args.debug or not is_user_error(exc):
            raise
        print(f"geocon {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
