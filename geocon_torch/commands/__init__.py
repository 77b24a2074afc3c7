"""Subcommands of the ``geocon`` CLI (one module each)."""
