"""Round trips of the result store (store audit s19): text no store can keep (NUL, names that
are not UTF-8), seeds, row order under a PostgreSQL collation, merge conflicts of equal numbers,
manifests that are not UTF-8, `$` in names drawn by the report, the audit card's object id and
stores in a folder that may not be written. PostgreSQL tests use the ``any_db`` / ``pg_url``
fixtures of tests/pg_server.py and skip without server binaries."""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import uuid
from pathlib import Path

import pytest
from helpers import _FORMAT_2, CountingScorer, fake_result, format_2_rows, write_clips, write_jsonl

from geocon_torch.bench import (ManifestError, ResultSchemaError, ResultStore, StoreError,
                                file_key, is_server_url, load_manifest, load_results,
                                merge_stores, result_problems, run_manifest)
from geocon_torch.bench import store as store_mod
from geocon_torch.bench.manifest import ManifestEntry
from geocon_torch.bench.merge import differences
from geocon_torch.cli import main
from geocon_torch.errors import InputError
from geocon_torch.report import build_report, plots

CLIP = {"clip_id": "c0", "generator": "g", "prompt_category": "C1", "seed": 1, "scene": "s"}


class _NulScorer(CountingScorer):
    """Raises on c1 with a NUL in the message (a decoder quoting a bad atom)."""

    def __call__(self, entry, config, device):
        if entry.clip_id == "c1":
            raise RuntimeError("decoder said: bad atom 'mo\x00ov' in caf\udce9.mp4")
        return super().__call__(entry, config, device)


# --- F1: NUL in an error reason ------------------------------------------------------------

def test_nul_in_error_reason_is_an_error_row_on_both_back_ends(tmp_path, any_db):
    """The run goes on and stores all 4 clips; the reason is written with ``\\x00`` (and the
    lone surrogate with ``\\udce9``), the same on SQLite and PostgreSQL; a re-run scores
    nothing."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 4))
    s = run_manifest(m, any_db, score_fn=_NulScorer(), progress=False, batch_clips=1)
    assert (s.ok, s.error, s.computed) == (3, 1, 4)
    with ResultStore(any_db) as st:
        assert st.count("clips") == 4 and st.count() == 4
        (cid, reason), = st.error_clips(s.config_hash)
        row = [r for r in st.rows() if r["clip_id"] == "c1"][0]
    assert cid == "c1"
    assert reason.startswith("RuntimeError: decoder said: bad atom 'mo\\x00ov' in "
                             "caf\\udce9.mp4 (at test_store_roundtrip.py:")
    assert row["result"]["reason"] == reason and "\x00" not in reason
    again = run_manifest(m, any_db, score_fn=_NulScorer(), progress=False)
    assert (again.computed, again.skipped) == (0, 4)


def test_put_escapes_nul_in_result_columns_refuses_it_in_clip_rows(any_db):
    """A result's reason with a NUL: the ``reason`` column holds ``\\x00``, the result JSON the
    NUL itself; a NUL in a clip-row field is an InputError naming the column (nothing stored),
    on both back ends."""
    res = fake_result("c0", status="error")
    res["reason"] = "bad\x00atom"
    res["version"] = "0.1.0\x00"
    with ResultStore(any_db) as s:
        s.put(CLIP, "h0", "cfg", res)
        assert s.error_clips("cfg") == [("c0", "bad\\x00atom")]
        raw, = list(s.raw_results())
        assert raw["version"] == "0.1.0\\x00"
        assert s.rows()[0]["result"]["reason"] == "bad\x00atom"
        for col in ("generator", "prompt", "path", "clip_id"):
            with pytest.raises(InputError, match=f"{col} holds a NUL character"):
                s.put({**CLIP, "clip_id": "c1", col: "x\x00y"}, "h1", "cfg",
                      fake_result("c1"))
        assert s.count("clips") == 1 and s.count() == 1


def test_sqlite_shard_with_nul_reason_merges_into_postgresql(tmp_path, pg_url):
    lite = str(tmp_path / "n0.sqlite")
    res = fake_result("c0", status="error")
    res["reason"] = "bad\x00atom"
    with ResultStore(lite) as s:
        s.put(CLIP, "h0", "cfg", res)
    rep = merge_stores(pg_url, [lite])
    assert (rep.results_added, rep.clips_added, rep.conflicts) == (1, 1, [])
    with ResultStore(pg_url) as s:
        assert s.error_clips("cfg") == [("c0", "bad\\x00atom")]


# --- F2: names that are not UTF-8 ----------------------------------------------------------

def test_manifest_refuses_a_path_that_is_not_utf8(tmp_path, capsys, monkeypatch):
    """A JSONL manifest listing ``caf\\xe9.mp4`` (json.dumps of os.listdir: "caf\\udce9"):
    ManifestError naming the file, the line and the field; geocon bench exits 2 with one line
    and stores nothing."""
    rows = write_clips(tmp_path / "clips", 2)
    rows[1] = {"path": "vids/caf\udce9.mp4", "generator": "g"}
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    with pytest.raises(ManifestError, match=re.escape(
            f"{m}, line 2: field 'path' is not UTF-8 text (\\udce9 at character 8")):
        load_manifest(m)
    scorer = CountingScorer()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", scorer)
    db = tmp_path / "r.sqlite"
    assert main(["bench", str(m), "--db", str(db), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2: field 'path' is not UTF-8 text" in err[0]
    assert scorer.calls == [] and not db.exists()


def test_manifest_in_a_folder_that_is_not_utf8(tmp_path):
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))
    folder.mkdir()
    (folder / "m.csv").write_text("path,generator\na.mp4,g\n")
    with pytest.raises(ManifestError, match="line 2: field 'path' is not UTF-8 text"):
        load_manifest(folder / "m.csv")


def test_result_problems_and_report_on_names_that_are_not_utf8(tmp_path, capsys):
    """``geocon score`` on ``caf\\xe9.mp4`` writes clip / path with a lone surrogate: the
    JSONL is refused with one line naming the line and the fields (no traceback), and
    ResultStore.put refuses the result with a ResultSchemaError."""
    res = fake_result("caf\udce9", status="error", path="/v/caf\udce9.mp4")
    assert result_problems(res) == [
        "text that is not UTF-8 at clip, path (a file or folder name in another encoding?), "
        "which no result store can keep; rename the file in UTF-8"]
    jl = tmp_path / "res.jsonl"
    jl.write_text(json.dumps(fake_result("ok")) + "\n" + json.dumps(res) + "\n")
    with pytest.raises(ResultSchemaError, match=f"{re.escape(str(jl))}, line 2: text that is "
                                                "not UTF-8 at clip, path"):
        load_results(jl)
    assert main(["report", str(jl), "--out", str(tmp_path / "rep"), "--no-draw", "--boot",
                 "10", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2: text that is not UTF-8 at clip, path" in err[0]
    with ResultStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(ResultSchemaError, match="not UTF-8 at clip, path"):
            s.put(CLIP, "h0", "cfg", res)
        with pytest.raises(InputError, match="clip row 'c0': path is not UTF-8 text"):
            s.put(dict(CLIP, path="/v/caf\udce9.mp4"), "h0", "cfg", fake_result("c0"))
        assert s.count("clips") == 0


def test_file_key_of_an_id_that_is_not_utf8():
    """No crash, distinct from its escaped spelling; a UTF-8 id keeps its key (bit-identical:
    the same SHA-1 of the UTF-8 bytes as before)."""
    key = file_key("caf\udce9", "h")
    assert key.startswith("caf_") and key != file_key("caf\\udce9", "h")
    digest = hashlib.sha1("café/3\x00h".encode()).hexdigest()[:8]
    assert file_key("café/3", "h") == f"caf__3_{digest}"


# --- F3 / F4: the report ---------------------------------------------------------------------

def test_dollar_names_are_drawn_verbatim(tmp_path, monkeypatch):
    """A generator ``model_$x^$`` (mathtext that does not parse) renders, and every text of
    the figures is drawn as written; matplotlib's rcParams are left as they were."""
    import matplotlib
    names = ["model_$x^$", "sora $2 vs $3 budget", r"gen $\badcommand$"]
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:
        for i in range(6):
            cat = f"C{1 + 2 * (i % 2)} $cat$"
            s.put({"clip_id": f"c{i}", "generator": names[i % 3], "prompt_category": cat,
                   "seed": i}, f"h{i}", "cfg",
                  fake_result(f"c{i}", ir=0.9 + 0.01 * i, ge=0.5 + 0.1 * i,
                              prompt_category=cat, objects=[1.0 + i]))
    drawn = []
    save = plots._save

    def spy(fig, path):
        for ax in fig.axes:
            legend = ax.get_legend()
            texts = list(legend.get_texts()) if legend else []
            texts += list(ax.get_xticklabels())
            drawn.extend((t.get_text(), t.get_parse_math()) for t in texts)
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", spy)
    before = matplotlib.rcParams["text.parse_math"]
    build_report(db, tmp_path / "out", cards=2, draw=False, n_boot=20)
    assert matplotlib.rcParams["text.parse_math"] == before
    shown = {t for t, _ in drawn}
    assert set(names) | {"C1 $cat$", "C3 $cat$"} <= shown
    assert all(parse is False for t, parse in drawn if "$" in t)


def test_audit_card_escapes_the_object_id(tmp_path):
    res = fake_result("c0", objects=[2.0])
    res["foreground"]["objects"][0]["id"] = "<img src=x onerror=alert(1)>"
    jl = tmp_path / "res.jsonl"
    jl.write_text(json.dumps(res) + "\n")
    page = build_report(jl, tmp_path / "rep", cards=1, draw=False, n_boot=10).read_text()
    assert "<img src=x" not in page
    assert "#&lt;img src=x onerror=alert(1)&gt;: AdaDFRC 1.6" in page


# --- F5: row order ---------------------------------------------------------------------------

IDS = ["Zeta", "alpha", "Beta", "_under", "a-b", "ab", "a b", "Émile", "émile", "e2", "10", "9"]
CODE_POINT_ORDER = ['10', '9', 'Beta', 'Zeta', '_under', 'a b', 'a-b', 'ab', 'alpha', 'e2',
                    'Émile', 'émile']


def _icu_db(pg_server) -> str:
    """A database with an ICU en-US collation (a managed server's usual order), or a skip."""
    import psycopg
    name = "icu_" + uuid.uuid4().hex[:10]
    try:
        with psycopg.connect(host=str(pg_server.root), port=pg_server.port, user="geocon",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu "
                         "ICU_LOCALE 'en-US' LOCALE 'C'")
    except psycopg.Error as exc:
        pytest.skip(f"no ICU collation on this server: {' '.join(str(exc).split())[:120]}")
    return pg_server.url(name)


def _fill(db: str) -> None:
    with ResultStore(db) as s:
        for i, cid in enumerate(IDS):
            s.put({"clip_id": cid, "generator": "g", "prompt_category": "C1", "seed": i},
                  f"h{i}", "cfg" if i % 2 else "cfg2",
                  fake_result(cid, status="ok" if i < 6 else "error",
                              config_hash="cfg" if i % 2 else "cfg2"))


def test_row_order_does_not_follow_the_postgresql_collation(tmp_path, pg_server):
    lite = str(tmp_path / "r.sqlite")
    icu = _icu_db(pg_server)
    out = {}
    for db in (lite, icu):
        _fill(db)
        with ResultStore(db) as s:
            out[db] = ([(r["config_hash"], r["clip_id"]) for r in s.rows()],
                       [r["clip_id"] for r in s.raw_clips()],
                       [r["content_hash"] for r in s.raw_results()],
                       s.error_clips("cfg"), s.error_clips("cfg2"), s.config_hashes())
            s.export_csv(tmp_path / f"{'pg' if is_server_url(db) else 'lite'}.csv")
    assert out[icu] == out[lite]
    assert out[lite][0] == ([("cfg", c) for c in sorted(IDS[1::2])]
                            + [("cfg2", c) for c in sorted(IDS[0::2])])
    assert sorted(IDS) == CODE_POINT_ORDER  # SQLite's BINARY order of the audit's listing
    assert (tmp_path / "pg.csv").read_bytes() == (tmp_path / "lite.csv").read_bytes()


# --- F6: merge conflicts of equal numbers ----------------------------------------------------

@pytest.mark.parametrize("a, b, same", [(0.0, -0.0, True), (1, 1.0, True), (True, 1, False),
                                        (0.5, 0.5000001, False)])
def test_merge_conflict_always_lists_a_field(tmp_path, a, b, same):
    """Equal numbers are the same value (0.0 / -0.0, 1 / 1.0: no conflict); anything else the
    digest calls different is a conflict naming the differing field with both values."""
    shards = []
    for node, v in (("n0", a), ("n1", b)):
        r = fake_result("c0")
        r["gate"]["statistic"] = v
        shards.append(str(tmp_path / f"{node}.sqlite"))
        with ResultStore(shards[-1]) as s:
            s.put(dict(CLIP), "h0", "cfg", r)
    rep = merge_stores(str(tmp_path / "out.sqlite"), shards)
    if same:
        assert (rep.results_same, rep.conflicts) == (1, [])
    else:
        assert rep.results_same == 0
        assert [c["differences"] for c in rep.conflicts] == [{"gate.statistic": [a, b]}]


def test_differences_never_empty_for_different_results():
    a, b = fake_result("c0"), fake_result("c0")
    a["extra.x"] = 1
    b["extra"] = {"x": 1}  # the same leaf path, another nesting
    assert differences(json.dumps(a), json.dumps(b)) == {
        "result_json": [json.dumps(a), json.dumps(b)]}


# --- F7: seeds and clip-row types ------------------------------------------------------------

@pytest.mark.parametrize("seed, stored", [("7", 7), (2.0, 2), (-0.0, 0), (None, None),
                                          (2 ** 63 - 1, 2 ** 63 - 1), (-2 ** 63, -2 ** 63)])
def test_put_stores_the_same_seed_on_both_back_ends(any_db, seed, stored):
    with ResultStore(any_db) as s:
        s.put(dict(CLIP, seed=seed), "h0", "cfg", fake_result("c0"))
        got = s.rows()[0]["seed"]
    assert got == stored and type(got) is type(stored)


@pytest.mark.parametrize("seed, message", [
    (1.5, "seed must be an integer, got 1.5"), (2.5, "seed must be an integer, got 2.5"),
    ("abc", "seed must be an integer, got 'abc'"), (True, "seed must be an integer, got True"),
    (2 ** 63, "seed 9223372036854775808 is outside the signed 64-bit range"),
    (1e300, f"seed {int(1e300)} is outside the signed 64-bit range")])
def test_put_refuses_a_bad_seed_on_both_back_ends(any_db, seed, message):
    with ResultStore(any_db) as s:
        with pytest.raises(InputError, match=re.escape(f"clip row 'c0': {message}")):
            s.put(dict(CLIP, seed=seed), "h0", "cfg", fake_result("c0"))
        assert s.count("clips") == 0 and s.count() == 0


def test_put_refuses_text_columns_that_are_not_text(any_db):
    with ResultStore(any_db) as s:
        with pytest.raises(InputError, match="clip row 'c0': generator must be a string or "
                                             "None, got int 5"):
            s.put(dict(CLIP, generator=5), "h0", "cfg", fake_result("c0"))
        assert s.count("clips") == 0


def test_run_refuses_entries_built_in_code_before_scoring(tmp_path):
    bad = ManifestEntry(clip_id="c0", path=str(tmp_path / "a.mp4"), generator="g", seed=2 ** 63)
    scorer = CountingScorer()
    with pytest.raises(InputError, match="clip row 'c0': seed 9223372036854775808 is outside"):
        run_manifest([bad], tmp_path / "r.sqlite", score_fn=scorer, progress=False)
    assert scorer.calls == [] and not (tmp_path / "r.sqlite").exists()


# --- F8: manifests that are not UTF-8, byte-order marks --------------------------------------

@pytest.mark.parametrize("data, message", [
    (b"clip_id,path,generator\r\nx,a.mp4,g\xe9n\r\n",
     "m.csv, line 2: not UTF-8 text (byte 0xe9 at offset 33: cp1252 / Latin-1?); save the "
     "manifest as 'CSV UTF-8'"),
    ("clip_id,path,generator\r\nx,a.mp4,g\r\n".encode("utf-16"),
     "m.csv: UTF-16 text (a UTF-16 byte-order mark), not UTF-8; save the manifest as "
     "'CSV UTF-8'")])
def test_manifest_that_is_not_utf8_is_one_line_exit_2(tmp_path, capsys, data, message):
    m = tmp_path / "m.csv"
    m.write_bytes(data)
    with pytest.raises(ManifestError, match=re.escape(message)):
        load_manifest(m)
    assert main(["bench", str(m), "--db", str(tmp_path / "r.sqlite"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_utf8_byte_order_mark_in_jsonl_manifest_and_results(tmp_path):
    (tmp_path / "a.mp4").write_bytes(b"x")
    m = tmp_path / "m.jsonl"
    m.write_bytes(b"\xef\xbb\xbf" + json.dumps({"path": "a.mp4", "generator": "g",
                                                 "seed": 3}).encode() + b"\n")
    e, = load_manifest(m)
    assert (e.clip_id, e.generator, e.seed) == ("a", "g", 3)
    jl = tmp_path / "res.jsonl"
    jl.write_bytes(b"\xef\xbb\xbf" + json.dumps(fake_result("c0", ir=0.93)).encode() + b"\n")
    row, = load_results(jl)
    assert row["clip_id"] == "c0" and row["result"]["background"]["ir"] == 0.93


# --- F9: stores a reader may not write -------------------------------------------------------

def _store(folder: Path) -> Path:
    folder.mkdir()
    db = folder / "lb.sqlite"
    with ResultStore(db) as s:
        s.put(CLIP, "h0", "cfg", fake_result("c0", ir=0.91))
    return db


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores folder permissions")
def test_store_in_a_read_only_folder_is_readable(tmp_path, capsys):
    """chmod 0555: load_results, geocon report, bench --export-csv and a merge shard read it;
    a writer's error says the folder is not writable."""
    ro = tmp_path / "ro"
    db = _store(ro)
    before = _files(ro)
    ro.chmod(0o555)
    try:
        assert [r["result"]["background"]["ir"] for r in load_results(db)] == [0.91]
        assert main(["report", str(db), "--out", str(tmp_path / "rep"), "--no-draw", "--boot",
                     "10", "--no-progress"]) == 0
        assert main(["bench", "--db", str(db), "--all-configs", "--export-csv",
                     str(tmp_path / "t.csv")]) == 0
        rep = merge_stores(str(tmp_path / "m.sqlite"), [str(db)])
        assert (rep.results_added, rep.clips_added) == (1, 1)
        with pytest.raises(StoreError, match="is not writable"):
            ResultStore(db).put(dict(CLIP, clip_id="c1"), "h1", "cfg", fake_result("c1"))
        assert _files(ro) == before
    finally:
        ro.chmod(0o755)
    assert "c0" in (tmp_path / "t.csv").read_text()


@pytest.fixture
def unwritable(monkeypatch):
    """Folders named ``ro`` (and files in them) count as not writable, as for a user without
    write permission (root ignores chmod)."""
    real = store_mod._writable
    monkeypatch.setattr(store_mod, "_writable",
                        lambda p: "ro" not in Path(p).absolute().parts and real(p))


def test_reader_opens_a_store_it_may_not_write_read_only(tmp_path, unwritable):
    """No -wal / -shm file, no schema written: the folder's bytes are unchanged."""
    ro = tmp_path / "ro"
    db = _store(ro)
    before = _files(ro)
    assert [r["result"]["background"]["ir"] for r in load_results(db)] == [0.91]
    with store_mod.open_readable(db) as s:
        assert isinstance(s, store_mod.SQLiteStore) and s.read_only
        assert s.config_hashes() == ["cfg"]
    rep = merge_stores(str(tmp_path / "m.sqlite"), [str(db)])
    assert (rep.results_added, rep.clips_added) == (1, 1)
    assert _files(ro) == before


def test_read_only_store_refuses_a_migration_and_unfolded_writes(tmp_path, unwritable):
    ro = tmp_path / "ro"
    ro.mkdir()
    old = ro / "f2.sqlite"
    with sqlite3.connect(old) as conn:
        conn.executescript(_FORMAT_2)
        results, clips = format_2_rows()
        conn.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?)", results)
        conn.executemany("INSERT INTO clips VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", clips)
    conn.close()
    with pytest.raises(StoreError, match="store format 2 must be migrated to format 3 before "
                                         "it is read, which needs write access"):
        load_results(old)
    (ro / "f2.sqlite-wal").write_bytes(b"\x00" * 32)
    with pytest.raises(StoreError, match="f2.sqlite-wal holds writes not yet in the store file"):
        load_results(old)
