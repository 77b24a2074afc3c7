"""geocon explain names the geocon_torch version that scored the row it explains when it is
not the running one (the stored numbers are that version's, the re-derived evidence this
one's), from a result and from a store row."""
from __future__ import annotations

from pathlib import Path

from helpers import fake_result

from geocon_torch import __version__
from geocon_torch.bench import ResultStore
from geocon_torch.cli import main
from geocon_torch.report.explain import explain_result


def test_explain_says_which_version_scored_the_row():
    old = fake_result("c", ir=0.91)
    old["version"] = "0.1.0"
    lines = explain_result(old, evidence=False).splitlines()
    assert lines[1] == f"Scored by geocon_torch 0.1.0 (this is {__version__})."
    same = explain_result(fake_result("c", ir=0.91), evidence=False)
    assert "Scored by geocon_torch" not in same
    # the rest of the account is unchanged: the same lines without the version line
    assert lines[:1] + lines[2:] == same.splitlines()
    del old["version"]
    assert explain_result(old, evidence=False).splitlines()[1] == \
        f"Scored by geocon_torch unknown (this is {__version__})."


def test_explain_cli_of_an_old_store_row(tmp_path: Path, capsys):
    db = tmp_path / "r.sqlite"
    res = fake_result("c", ir=0.91)
    res["version"] = "0.2.0"
    with ResultStore(db) as s:
        s.put({"clip_id": "c", "generator": "m"}, "hc", "cfg", res)
    assert main(["explain", str(db), "--no-evidence"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == f"Scored by geocon_torch 0.2.0 (this is {__version__})."
