"""The ``geocon`` command. Each subcommand lives in ``geocon_torch/commands/<name>.py`` and
exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

User errors (a bad option or config value, a missing file, an invalid manifest, ``--device
cuda`` without a GPU) end the command with ONE line on stderr, ``geocon <command>: error:
<message>``, and exit status 2; ``--debug`` shows the traceback instead. Anything else is a bug
and keeps its traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from typing import List, NoReturn, Optional

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
    try:
        if hasattr(args, "device"):  # "auto" -> None: the commands' automatic choice
            args.device = check_device(args.device)
        return int(args._run(args) or 0)
    except Exception as exc:  # noqa: BLE001 - sorted into user errors and bugs below
        if args.debug or not is_user_error(exc):
            raise
        print(f"geocon {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
