"""Warnings on the command line: a command's UserWarning is one line, ``geocon <command>:
warning: <message>`` (DeprecationWarnings keep Python's format, recorders still see them);
``geocon calibrate --refit`` of clips scored by another version warns and keeps that version
in the document."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from geocon_torch import __version__
from geocon_torch.bench.calibration import CalibrationPlan, calibration_document, fit_thresholds
from geocon_torch.cli import main
from geocon_torch.io.calibration import calibration_hash

DATA = REPO_ROOT / "geocon_torch" / "data" / "calibration"


def _warn_run(args) -> int:
    warnings.warn("the rows hold results of 2 geocon_torch versions\n  (0.1.0: 4 clips)",
                  UserWarning)
    warnings.warn("key 'model' is deprecated: use 'generator'", DeprecationWarning)
    return 0


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    """What Python's default ``warnings.showwarning`` does (pytest records warnings instead,
    which shows nothing): the formatted warning on stderr."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def test_a_commands_user_warning_is_one_line(monkeypatch, capsys):
    from geocon_torch.commands import merge as merge_cmd

    monkeypatch.setattr(merge_cmd, "run", _warn_run)
    monkeypatch.setattr(warnings, "showwarning", _show)
    before = warnings.formatwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["merge", "out.sqlite", "a.sqlite"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("geocon merge: warning: the rows hold results of 2 geocon_torch versions "
                      "(0.1.0: 4 clips)")
    # the DeprecationWarning keeps Python's format: file:line: category: message
    assert err[1].endswith("DeprecationWarning: key 'model' is deprecated: use 'generator'")
    assert "test_cli_warnings.py:" in err[1] and len(err) == 3  # + its source line
    assert warnings.formatwarning is before  # restored after the command


def test_recorded_warnings_still_reach_the_recorder(monkeypatch):
    from geocon_torch.commands import merge as merge_cmd

    monkeypatch.setattr(merge_cmd, "run", _warn_run)
    with pytest.warns(UserWarning, match="2 geocon_torch versions"), \
            pytest.deprecated_call(match="is deprecated"):
        assert main(["merge", "out.sqlite", "a.sqlite"]) == 0


@pytest.mark.slow
def test_one_line_warning_from_a_fresh_interpreter(tmp_path: Path):
    """The real stderr of ``geocon``: Python's own showwarning, no pytest recorder."""
    code = ("import warnings, sys\n"
            "from geocon_torch.commands import merge\n"
            "merge.run = lambda a: warnings.warn('two\\n versions', UserWarning) or 0\n"
            "from geocon_torch.cli import main\n"
            "sys.exit(main(['merge', 'o.sqlite', 's.sqlite']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert (done.returncode, done.stderr) == (0, "geocon merge: warning: two versions\n")


def _source(tmp_path: Path, version: str) -> Path:
    """The shipped opencv-sift calibration as a --refit source scored by ``version`` (its
    clips taken as scored with the plan's config as it is today)."""
    doc = json.loads((DATA / "opencv-sift.json").read_text())
    plan = CalibrationPlan(**{k: (tuple(v) if isinstance(v, list) else v)
                              for k, v in doc["plan"].items()})
    doc.update(score_config_hash=plan.config().config_hash(), version=version)
    doc["content_hash"] = calibration_hash(doc)
    path = tmp_path / f"cal_{version}.json"
    path.write_text(json.dumps(doc))
    return path


def _refit(tmp_path: Path, source: Path, capsys) -> tuple:
    """(document written, stderr) of geocon calibrate --refit SOURCE at target 0.1."""
    out = tmp_path / f"refit_{source.stem}"
    assert main(["calibrate", str(out), "--refit", str(source),
                 "--target-false-pass", "0.1"]) == 0
    return json.loads((out / "calibration.json").read_text()), capsys.readouterr().err


def test_refit_of_another_versions_clips_keeps_their_version_and_warns(tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.setattr("geocon_torch.bench.calibration.plot_roc", lambda *a, **k: [])
    source = _source(tmp_path, "0.1.0")
    src = json.loads(source.read_text())
    doc, err = _refit(tmp_path, source, capsys)
    assert (doc["version"], doc["refit_by"]) == ("0.1.0", __version__)
    assert doc["content_hash"] == calibration_hash(doc)
    assert doc["clips"] == src["clips"] and doc["target_false_pass"] == 0.1
    assert doc["thresholds"] == json.loads(json.dumps(fit_thresholds(src["clips"], 0.1, 0.5)))
    assert err == (f"geocon calibrate: warning: the clips of {source} were scored by "
                   f"geocon_torch 0.1.0, this is {__version__}: the refit keeps their scores "
                   f"(its calibration.json records version 0.1.0, refit_by {__version__}); "
                   f"drop --refit to score them again\n")
    # clips of this version: no warning, no refit_by, the document as before this check
    same, err = _refit(tmp_path, _source(tmp_path, __version__), capsys)
    assert err == "" and "refit_by" not in same and same["version"] == __version__
    plan = CalibrationPlan(**{k: (tuple(v) if isinstance(v, list) else v)
                              for k, v in same["plan"].items()})
    assert same == json.loads(json.dumps(calibration_document(plan, src["clips"])))
