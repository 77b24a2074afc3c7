"""``python -m geocon_torch ...`` runs the ``geocon`` command (the same as ``python -m
geocon_torch.cli``)."""
import sys

from .cli import main

if __name__ == "__main__":  # pragma: no branch
    sys.exit(main())
