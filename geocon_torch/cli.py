"""The ``geocon`` command. Each subcommand lives in ``geocon_torch/commands/<name>.py`` and
exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``."""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import List, Optional

from . import __version__, commands


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="geocon",
        description="Ground-truth-free geometric consistency scores for (generated) video.",
    )
    parser.add_argument("--version", action="version", version=f"geocon_torch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    return int(args._run(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
