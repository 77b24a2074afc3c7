"""Reading the JSON files users hand in (configs, pose logs, prompts, ground truth)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Type, Union

from .errors import InputError


def read_json_file(path: Union[str, Path], what: str,
                   error: Type[Exception] = InputError) -> Any:
    """The parsed content of the JSON file ``path``.

    Raises ``error`` with ``"{what} not found: {path}"`` when it is not a file and
    ``"{what} {path} is not valid JSON: ..."`` when it does not parse (or is not UTF-8).
    """
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} {path} is not valid JSON: {exc}") from exc
