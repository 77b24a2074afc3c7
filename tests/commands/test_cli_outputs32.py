"""``-`` as an output folder (left alone in s31, fixed in s32).

``geocon synth -``, ``geocon calibrate -``, ``report --out -`` and ``demo --out -`` passed the
up-front folder check and created a folder named ``-`` in the working directory (exit 0): a
user who reads ``-`` as stdout, as it is for ``score --json -``, got a stray folder. The folder
check now refuses ``-`` (exit 2, one line, before any clip is rendered); ``./-`` still names a
folder called ``-``."""
from __future__ import annotations

from pathlib import Path

import pytest

from geocon_torch.cli import main
from geocon_torch.commands import _common
from geocon_torch.errors import InputError


def test_check_output_dir_refuses_dash_and_takes_dot_slash_dash(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"^OUTDIR -: a folder cannot be stdout"):
        _common.check_output_dir("-", "OUTDIR")
    _common.check_output_dir("./-", "OUTDIR")  # a folder named "-": allowed, not created
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("argv", [["synth", "-"], ["calibrate", "-"],
                                  ["demo", "--out", "-"],
                                  ["report", "results.jsonl", "--out", "-"]])
def test_folder_commands_refuse_dash_before_any_work(tmp_path: Path, monkeypatch, capsys,
                                                     argv):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-: a folder cannot be stdout" in err[0], err
    assert list(tmp_path.iterdir()) == []
