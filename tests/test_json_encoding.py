"""JSON inputs (configs, pose logs, SAM-2 prompts, calibrations, synth ground truth) are UTF-8
whatever the locale says: a config naming a non-ASCII path reads the same under an ASCII locale
(``LC_ALL=C`` without Python's UTF-8 mode, as Windows' cp1252 would) as under a UTF-8 one, to
the same config hash; a byte-order mark (Notepad's "UTF-8 with BOM") is accepted."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geocon_torch import load_config
from geocon_torch._json import read_json_file
from geocon_torch.errors import InputError

_CONFIG = {"background": {"calibration": "/data/étalonnage/cal.json"}, "ransac": {"seed": 3}}

_CHILD = ("import sys; from geocon_torch import load_config\n"
          "c = load_config(sys.argv[1])\n"
          "print(ascii(c.background.calibration), c.config_hash())\n")


def _child(path: Path, **env: str) -> str:
    """stdout of a fresh interpreter that loads the config at ``path`` under ``env``."""
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True,
                         text=True, env=dict(os.environ, **env), encoding="utf-8",
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_a_utf8_config_reads_the_same_under_an_ascii_locale(tmp_path):
    path = tmp_path / "eval.json"
    path.write_text(json.dumps(_CONFIG, ensure_ascii=False), encoding="utf-8")
    here = load_config(path)
    assert here.background.calibration == "/data/étalonnage/cal.json"
    want = f"{ascii(here.background.calibration)} {here.config_hash()}"
    assert _child(path, LC_ALL="C", LANG="C", PYTHONUTF8="0") == want
    assert _child(path, LC_ALL="C.UTF-8", PYTHONUTF8="1") == want


def test_a_byte_order_mark_is_accepted_and_other_encodings_are_refused(tmp_path):
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(_CONFIG).encode("utf-8"))
    assert read_json_file(bom, "config file") == _CONFIG
    latin = tmp_path / "latin1.json"
    latin.write_bytes(json.dumps(_CONFIG, ensure_ascii=False).encode("latin-1"))
    with pytest.raises(InputError, match="is not valid JSON"):
        read_json_file(latin, "config file")
