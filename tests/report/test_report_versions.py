"""The report's version line names the installed geocon_torch, and its version box shows when
the rows are not all of the installed version, one older release included (audit s24 upgrade
F1), with advice that fits the source: a store is re-scored with ``geocon bench
--rescore-versions``, results files of ``geocon score --json`` are scored again (F2)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Optional, Sequence

from helpers import _clip, fake_result, write_jsonl

from geocon_torch import __version__
from geocon_torch.bench import ResultStore
from geocon_torch.report import build_report


def _results(versions: Sequence[str]) -> List[dict]:
    out = []
    for i, version in enumerate(versions):
        res = fake_result(f"c{i}", ir=0.9 + 0.01 * i, prompt_category="C1")
        res["version"] = version
        out.append(res)
    return out


def _store(db: Path, versions: Sequence[str]) -> Path:
    with ResultStore(db) as s:
        for i, res in enumerate(_results(versions)):
            s.put(_clip(f"c{i}", generator=f"g{i % 2}"), f"h{i}", "cfg", res)
    return db


def _box(source, out: Path) -> tuple:
    """(the page, the text of its version box or None)."""
    page = build_report(source, out, draw=False, n_boot=20, cards=0).read_text()
    box = re.search(r"<p class='warn'>(.*?)</p>", page, re.S)
    return page, None if box is None else re.sub(r"<[^>]+>", "", box.group(1))


def _version_line(page: str) -> Optional[str]:
    m = re.search(r"package version \(clips\): [^<]*", page)
    return None if m is None else m.group(0)


def test_a_store_of_one_older_release_gets_the_box(tmp_path: Path):
    page, box = _box(_store(tmp_path / "s.sqlite", ["0.1.0"] * 3), tmp_path / "rep")
    # before the fix: no box (one version), and the line named no installed version
    assert box is not None
    assert box.startswith(f"Warning: rows of another package version. The scored clips of this "
                          f"config were all scored by geocon_torch 0.1.0 (3 clips). The "
                          f"installed one is {__version__}. "), box
    assert "these numbers may differ from those the installed version gives" in box
    assert ("To re-score these clips with the installed one: geocon bench "
            "MANIFEST --db DB --rescore-versions with the --preset / --config / size options "
            "these rows were scored with (config cfg)") in box
    assert "<code>geocon bench MANIFEST --db DB --rescore-versions</code>" in page
    assert "geocon score" not in box
    assert _version_line(page).startswith(
        f"package version (clips): 0.1.0 (3); installed geocon_torch {__version__}; ")
    assert page.index("class='warn'") < page.index("id='leaderboard'")


def test_results_files_of_geocon_score_are_scored_again(tmp_path: Path):
    src = write_jsonl(tmp_path / "scores.jsonl", _results(["0.1.0", "0.1.0", __version__]))
    page, box = _box(src, tmp_path / "rep")
    assert box is not None and box.startswith(
        "Warning: mixed package versions. The scored clips of this config come from 2 "
        f"geocon_torch versions: 0.1.0 (2 clips); {__version__} (1 clip). The installed one is "
        f"{__version__}. ")
    # before the fix: "run geocon bench MANIFEST --db DB --rescore-versions" (there is no store)
    assert ("with the installed one: score the clips again with geocon score CLIP... --json "
            "and the --preset / --config / size options they were scored with (config cfg); "
            "then build the report again.") in box, box
    assert "geocon bench" not in box and "--db" not in box


def test_rows_of_an_unknown_source_get_both_ways(tmp_path: Path):
    from geocon_torch.bench import load_results

    rows = load_results(_store(tmp_path / "s.sqlite", ["0.1.0", "0.2.0"]))
    _, box = _box(rows, tmp_path / "rep")
    assert "geocon bench MANIFEST --db DB --rescore-versions" in box
    assert "for results files of geocon score --json, score the clips again" in box


def test_rows_of_the_installed_version_get_no_box(tmp_path: Path):
    page, box = _box(_store(tmp_path / "s.sqlite", [__version__] * 2), tmp_path / "rep")
    assert box is None and "package version" in page
    assert _version_line(page).startswith(
        f"package version (clips): {__version__} (2); installed geocon_torch {__version__}; ")
