"""``geocon report`` on a store that has served several configs: only the shown config's rows
are loaded (counted per config first), the page is the one built from every row as before,
and rows of several package versions get a visible warning."""
from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from helpers import _clip, fake_result, write_jsonl

from geocon_torch import __version__
from geocon_torch.bench import ResultStore, load_results
from geocon_torch.errors import InputError
from geocon_torch.report import build_report, plots
from geocon_torch.report import html as html_mod

#: rows per config of the store: cfgB is the most common
COUNTS = {"cfgA": 4, "cfgB": 6, "cfgC": 2, "cfgD": 4}
#: rows per config of the JSONL file, in the order of their first lines: cfgD and cfgA tie,
#: cfgD comes first and is chosen (as when every row was loaded and counted)
JSONL_COUNTS = {"cfgD": 4, "cfgA": 4, "cfgB": 3, "cfgC": 2}


@pytest.fixture(autouse=True)
def _no_png(monkeypatch):
    """Figures are made but not rendered to PNG (the page names the same files; most of a
    report's time is matplotlib's layout and PNG writing, tested elsewhere)."""
    def close(fig, path):
        plots._plt().close(fig)
        return Path(path)

    monkeypatch.setattr(plots, "_save", close)


def _results(cfg: str, n: int) -> list:
    return [fake_result(f"{cfg}-{i}", ir=0.9 + 0.01 * i, ge=0.5 + 0.3 * i, config_hash=cfg,
                        prompt_category=f"C{i % 6 + 1}", objects=[2.0 + i],
                        regime="F" if i % 2 else "H", statistic=0.01 * (i + 1),
                        path=f"/v/g{i % 2}/{cfg}-{i}.mp4",
                        status="ok" if i != 1 else "error") for i in range(n)]


def _store(db: Path, counts=COUNTS) -> Path:
    with ResultStore(db) as s:
        for cfg, n in counts.items():
            for i, res in enumerate(_results(cfg, n)):
                s.put(_clip(res["clip"], generator=f"g{i % 2}",
                            prompt_category=res["prompt_category"]), f"{cfg}-h{i}", cfg, res)
    return db


def _jsonl(path: Path) -> Path:
    """Lines of the configs of :data:`JSONL_COUNTS` interleaved."""
    per = {cfg: _results(cfg, n) for cfg, n in JSONL_COUNTS.items()}
    lines = [per[c][i] for i in range(max(JSONL_COUNTS.values())) for c in JSONL_COUNTS
             if i < JSONL_COUNTS[c]]
    for r in lines:
        r["meta"] = {"generator": "g" + r["path"][4]}
    return write_jsonl(path, lines)


def _recorded(monkeypatch) -> tuple:
    """What the report loads: (config_hash asked, configs returned, rows) per load_results
    call, and the config_hash of every ResultStore.rows call."""
    loads, store_rows = [], []
    real_load, real_rows = html_mod.load_results, ResultStore.rows

    def load(source, **kw):
        rows = real_load(source, **kw)
        loads.append((kw.get("config_hash"), sorted({r["config_hash"] for r in rows}),
                      len(rows)))
        return rows

    def rows(self, config_hash=None, **kw):
        store_rows.append(config_hash)
        return real_rows(self, config_hash, **kw)

    monkeypatch.setattr(html_mod, "load_results", load)
    monkeypatch.setattr(ResultStore, "rows", rows)
    return loads, store_rows


def _page(source, out: Path, config_hash=None) -> str:
    """The page without what differs between two builds: the generation minute."""
    text = build_report(source, out, draw=False, n_boot=40, cards=2,
                        config_hash=config_hash).read_text()
    return re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "generated -", text)


@pytest.mark.parametrize("kind, asked, chosen", [
    ("sqlite", None, "cfgB"), ("sqlite", "cfgC", "cfgC"), ("sqlite", "cfgD", "cfgD"),
    ("jsonl", None, "cfgD"), ("jsonl", "cfgA", "cfgA")])
def test_report_loads_only_the_chosen_config_and_builds_the_same_page(
        tmp_path: Path, monkeypatch, kind: str, asked, chosen: str):
    """The page equals the one built from every row of the source (the rows given as a list
    take the former way: load all, count, filter), but only the chosen config is read."""
    src = _store(tmp_path / "s.sqlite") if kind == "sqlite" else _jsonl(tmp_path / "r.jsonl")
    counts = COUNTS if kind == "sqlite" else JSONL_COUNTS
    every = load_results(src)
    assert len(every) == sum(counts.values())
    before = _page(every, tmp_path / "all", asked)
    loads, store_rows = _recorded(monkeypatch)
    page = _page(src, tmp_path / "one", asked)
    assert loads == [(chosen, [chosen], counts[chosen])]
    assert store_rows == ([chosen] if kind == "sqlite" else [])
    assert f"{counts[chosen]} clips, config <code>{chosen}</code>" in page
    others = ", ".join(h for h in counts if h != chosen)  # store: code-point order
    assert f"(other configs in the source: {others})" in page
    assert page.replace(f"<code>{html.escape(str(src))}</code>", "<code>rows</code>") == before


def test_config_errors_name_the_source_and_its_configs(tmp_path: Path):
    db = _store(tmp_path / "s.sqlite")
    with pytest.raises(InputError, match=r"--config-hash nope: no result in .*s\.sqlite has it "
                       r"\(its config hashes: cfgB \(6 rows\), cfgA \(4 rows\), cfgD \(4 rows\), "
                       r"cfgC \(2 rows\)\)"):
        build_report(db, tmp_path / "rep", draw=False, n_boot=40, config_hash="nope")
    empty = _store(tmp_path / "e.sqlite", counts={})
    with pytest.raises(InputError, match=r"e\.sqlite holds no results \(0 rows\)"):
        build_report(empty, tmp_path / "rep", draw=False, n_boot=40)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(fake_result("a", config_hash="cfgA")) + "\n"
                   + json.dumps({**fake_result("b", config_hash="cfgB"), "status": "??"}) + "\n")
    with pytest.raises(Exception, match=r"bad\.jsonl, line 2: status must be one of"):
        build_report(bad, tmp_path / "rep", draw=False, n_boot=40)  # other configs' lines too
    assert not (tmp_path / "rep").exists()


def _versioned_store(db: Path, versions) -> Path:
    with ResultStore(db) as s:
        for i, (version, status) in enumerate(versions):
            res = fake_result(f"c{i}", ir=0.9 + 0.01 * i, status=status, prompt_category="C1")
            res["version"] = version
            s.put(_clip(f"c{i}", generator=f"g{i % 2}"), f"h{i}", "cfg", res)
    return db


def test_mixed_package_versions_get_a_visible_warning(tmp_path: Path):
    """Scored rows of 0.1.0 and 0.2.0 (an error row of 0.3.0 is retried, not re-scored, and
    is left out): a warning box names the versions with their clips and the re-scoring."""
    db = _versioned_store(tmp_path / "s.sqlite", [("0.1.0", "ok")] * 3 + [("0.2.0", "ok")] * 2
                          + [("0.3.0", "error")])
    page = _page(db, tmp_path / "rep")
    box = re.search(r"<p class='warn'>(.*?)</p>", page, re.S)
    assert box is not None
    text = re.sub(r"<[^>]+>", "", box.group(1))
    assert "Warning: mixed package versions." in text
    assert "come from 2 geocon_torch versions: 0.1.0 (3 clips); 0.2.0 (2 clips)." in text
    assert "numbers of different versions may not be comparable" in text
    assert "geocon bench MANIFEST --db DB --rescore-versions" in text
    assert page.index("class='warn'") < page.index("id='leaderboard'")
    assert "package version (clips): 0.1.0 (3); 0.2.0 (2); 0.3.0 (1)" in page  # muted line kept
    assert ".warn{" in page  # styled as a box, not muted


def test_one_package_version_gets_no_warning(tmp_path: Path):
    """Rows of the installed version only, an error row among them: no box; an error row of
    an older release is named (upgrade audit s32 F2: re-scoring may turn it into a score)."""
    db = _versioned_store(tmp_path / "s.sqlite",
                          [(__version__, "ok")] * 3 + [(__version__, "error")])
    page = _page(db, tmp_path / "rep")
    assert "class='warn'" not in page and "mixed package versions" not in page
    old = _versioned_store(tmp_path / "o.sqlite", [(__version__, "ok")] * 3 + [("0.1.0", "error")])
    assert "1 error row of geocon_torch 0.1.0" in _page(old, tmp_path / "rep_o")
