"""Mutation-found gaps of the leaderboard runner, manifests, prune, clip ids and the result
schema (session 26): what an error row and a scored row store, the run summary's error
lines, the end-of-run completeness check past one lookup chunk, the lease check, and the
manifest / prune / schema rules below. Each test pins one behaviour no
other default test pinned."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, run_manifest
from geocon_torch.errors import InputError


def _run(m, db, scorer, **kw):
    return run_manifest(m, db, score_fn=scorer, progress=False, **kw)


def _rows(db):
    with ResultStore(db) as s:
        return {r["clip_id"]: r for r in s.rows()}


# --- runner.py --------------------------------------------------------------------------------
def test_an_error_row_keeps_the_manifest_prompt_family(tmp_path: Path):
    """A clip whose scorer raises is stored as an error row whose result still names the
    manifest's prompt family (the statistics group error rates by it)."""
    rows = write_clips(tmp_path / "clips", 3)  # categories C1, C2, C3
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    s = _run(m, db, CountingScorer(fail_on={"c1"}))
    assert (s.ok, s.error) == (2, 1)
    res = _rows(db)["c1"]["result"]
    assert res["status"] == "error" and res["prompt_category"] == "C2"


class _StemScorer(CountingScorer):
    """Names the clip by its file stem, as the real pipeline's result does."""

    def __call__(self, entry, config, device):
        res = super().__call__(entry, config, device)
        res["clip"] = Path(entry.path).stem
        return res


def test_a_stored_result_names_the_manifest_clip_id_not_the_file_stem(tmp_path: Path):
    """The manifest id "sora/a0" of a file a0.mp4 is the result's ``clip`` (two generators'
    "3.mp4" would otherwise carry the same name in every result)."""
    rows = write_clips(tmp_path / "clips", 2, prefix="a")
    for r in rows:
        r["clip_id"] = "sora/" + r["clip_id"]
    db = tmp_path / "r.sqlite"
    _run(write_jsonl(tmp_path / "m.jsonl", rows), db, _StemScorer())
    assert {cid: r["result"]["clip"] for cid, r in _rows(db).items()} == {
        "sora/a0": "sora/a0", "sora/a1": "sora/a1"}


def test_retrying_an_error_row_is_not_counted_as_a_rescored_version(tmp_path: Path):
    """retry_errors recomputes the error row; the summary counts no re-scored row of another
    release (that line is for rescore_versions)."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    db = tmp_path / "r.sqlite"
    _run(m, db, CountingScorer(fail_on={"c0"}))
    again = CountingScorer()
    s = _run(m, db, again, retry_errors=True)
    assert again.calls == ["c0"] and (s.computed, s.ok, s.skipped) == (1, 1, 1)
    assert s.rescored_versions == {} and s.rescored == 0 and s.rescored_note() == ""


def test_the_summary_lists_each_new_error_row_with_its_reason(tmp_path: Path):
    """``summary.errors`` (printed by ``geocon bench``): one "clip_id: reason" line per error
    row written by this run (an unreadable path at once, scored clips as their group is
    stored)."""
    rows = write_clips(tmp_path / "clips", 4)
    rows.append({"clip_id": "gone", "path": str(tmp_path / "nope.mp4"), "generator": "m"})
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    s = _run(m, tmp_path / "r.sqlite", CountingScorer(fail_on={"c1", "c3"}))
    assert s.error == 3 and len(s.errors) == 3
    by_id = dict(e.split(": ", 1) for e in s.errors)
    assert sorted(by_id) == ["c1", "c3", "gone"]
    assert by_id["c1"].startswith("RuntimeError: boom on c1 (at helpers.py:")
    assert "nope.mp4" in by_id["gone"]


def test_end_check_looks_up_every_clip_across_lookup_chunks(tmp_path: Path, monkeypatch):
    """Chunks of 2 ids: a complete run of 5 clips ends without IncompleteRunError, and a row
    deleted afterwards is found missing whichever chunk holds it."""
    from geocon_torch.bench import runner

    monkeypatch.setattr(runner, "LOOKUP_CHUNK", 2)
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 5))
    db = tmp_path / "r.sqlite"
    s = _run(m, db, CountingScorer())
    assert s.missing == [] and s.computed == 5
    ids = [f"c{i}" for i in range(5)]
    with ResultStore(db) as st:
        assert runner.missing_clips(st, ids, s.config_hash) == []
        st._write([("DELETE FROM clips WHERE clip_id IN ('c1', 'c4')", ())])
        assert runner.missing_clips(st, ids, s.config_hash) == ["c1", "c4"]


def test_the_manifest_generator_version_is_stored_with_the_clip(tmp_path: Path):
    rows = write_clips(tmp_path / "clips", 2)
    rows[0]["generator_version"] = "v1.5-turbo"
    db = tmp_path / "r.sqlite"
    _run(write_jsonl(tmp_path / "m.jsonl", rows), db, CountingScorer())
    got = _rows(db)
    assert (got["c0"]["generator_version"], got["c1"]["generator_version"]) == ("v1.5-turbo",
                                                                                  None)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_lease_must_be_positive(tmp_path: Path, bad):
    """A lease of 0 s (or NaN) would expire as it is taken: refused before any clip."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 1))
    scorer = CountingScorer()
    with pytest.raises(InputError, match="lease_s must be > 0"):
        _run(m, tmp_path / "r.sqlite", scorer, lease_s=bad)
    assert scorer.calls == []


def test_missing_files_of_one_name_in_two_folders_get_their_own_error_rows(tmp_path: Path):
    """An unreadable path is keyed by its absolute path: a/x.mp4 and b/x.mp4, both missing,
    are two error rows, each naming its own path (not one linked to the other)."""
    import hashlib

    rows = [{"clip_id": f"{d}-x", "path": str(tmp_path / d / "x.mp4"), "generator": "m"}
            for d in ("a", "b")]
    db = tmp_path / "r.sqlite"
    scorer = CountingScorer()
    s = _run(write_jsonl(tmp_path / "m.jsonl", rows), db, scorer)
    assert scorer.calls == [] and (s.error, s.linked, s.computed) == (2, 0, 2)
    got = _rows(db)
    for d in ("a", "b"):
        path = str((tmp_path / d / "x.mp4").resolve())
        key = "unreadable:" + hashlib.sha256(path.encode()).hexdigest()[:32]
        assert got[f"{d}-x"]["content_hash"] == key
        assert str(Path(d) / "x.mp4") in got[f"{d}-x"]["reason"]


def test_incomplete_run_error_names_ten_clips_then_a_count():
    from geocon_torch.bench.runner import IncompleteRunError, RunSummary

    ids = [f"c{i:02d}" for i in range(12)]
    err = IncompleteRunError(RunSummary(missing=ids, config_hash="cfg"), 20, "r.sqlite")
    msg = str(err)
    assert "r.sqlite: 12 of the 20 clips of the manifest have no stored row under config cfg"\
        in msg
    assert ", ".join(ids[:10]) + ", ... (2 more);" in msg and "c10" not in msg
    assert err.summary.missing == ids


# --- manifest.py ------------------------------------------------------------------------------
def _load(tmp_path: Path, text: str, suffix: str = ".csv", **kw):
    from geocon_torch.bench import load_manifest

    p = tmp_path / f"m{suffix}"
    p.write_text(text)
    return load_manifest(p, **kw)


@pytest.mark.parametrize("value, want", [('"1280,720"', (1280, 720)), ("640*480", (640, 480)),
                                         ('" 320 X 240 "', (320, 240))])
def test_resolution_separators_x_comma_and_star(tmp_path: Path, value, want):
    (e,) = _load(tmp_path, f"clip_id,path,generator,resolution\na,a.mp4,m,{value}\n")
    assert e.resolution == want


def test_csv_header_names_are_read_without_surrounding_spaces(tmp_path: Path):
    (e,) = _load(tmp_path, "clip_id, path , generator,seed\na,a.mp4,wan,7\n")
    assert (e.clip_id, Path(e.path).name, e.generator, e.seed, e.extra) == (
        "a", "a.mp4", "wan", 7, {})


def test_csv_with_the_retired_model_column_is_read_as_generator(tmp_path: Path):
    """A manifest written before the rename (``model`` / ``model_version`` columns, no
    ``generator``) still loads, with a DeprecationWarning."""
    with pytest.warns(DeprecationWarning) as seen:
        (e,) = _load(tmp_path, "clip_id,path,model,model_version\na,a.mp4,sora,2\n")
    assert (e.generator, e.generator_version) == ("sora", "2")
    said = " ".join(str(w.message) for w in seen)
    assert "column 'model' is deprecated" in said and "'model_version'" in said


def test_confine_paths_refuses_a_poses_file_outside_the_folder(tmp_path: Path):
    from geocon_torch.bench import ManifestError

    sub = tmp_path / "alice"
    sub.mkdir()
    (sub / "a.mp4").write_bytes(b"x")
    (tmp_path / "secret.json").write_text("[]")
    text = "clip_id,path,generator,poses_path\na,a.mp4,g,../secret.json\n"
    with pytest.raises(ManifestError, match=r"line 2: poses_path .* lies outside"):
        _load(sub, text, confine=True)
    (e,) = _load(sub, text.replace("../secret.json", "a.mp4"), confine=True)
    assert e.poses_path == str(sub / "a.mp4")


# --- prune.py ---------------------------------------------------------------------------------
def test_an_orphan_delete_spares_a_result_a_clip_row_points_at_again(tmp_path: Path):
    """Between finding the orphans and deleting them a run may write a clip row pointing at one
    of them: the delete re-checks, in the same statement, and keeps that result."""
    from geocon_torch.bench import prune as prune_mod

    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    db = str(tmp_path / "r.sqlite")
    cfg = _run(m, db, CountingScorer()).config_hash
    with ResultStore(db) as st:
        live = st._select("SELECT content_hash FROM clips WHERE clip_id = 'c0'")[1][0][0]
        st._write([("DELETE FROM clips WHERE clip_id = 'c1'", ())])
        (orphan,) = prune_mod.orphan_results(st)[cfg]
        got = prune_mod.delete_keys(st, prune_mod._DELETE_ORPHANS, {cfg: [live, orphan]})
        assert got == 1
        assert [tuple(r) for r in st._select("SELECT content_hash FROM results")[1]] == [(live,)]


# --- ids.py -----------------------------------------------------------------------------------
def test_file_key_slug_drops_edge_underscores_and_names_an_empty_one_clip():
    from geocon_torch.bench import file_key

    assert file_key("/sora/3.mp4/").rsplit("_", 1)[0] == "sora_3_mp4"
    assert file_key("***").rsplit("_", 1)[0] == "clip"
    assert file_key("é").startswith("clip_")


# --- schema.py --------------------------------------------------------------------------------
def _valid():
    from helpers import fake_result

    return fake_result("c0")


def test_schema_regime_is_h_f_or_null():
    from geocon_torch.bench.schema import result_problems

    assert result_problems(_valid()) == []
    assert result_problems({**_valid(), "regime": None}) == []
    assert result_problems({**_valid(), "regime": "h"}) == [
        "regime must be 'H', 'F' or null, got 'h'"]


def test_a_scorer_result_with_an_unknown_regime_is_stored_as_an_error_row(tmp_path: Path):
    class Lower(CountingScorer):
        def __call__(self, entry, config, device):
            return {**super().__call__(entry, config, device), "regime": "static"}

    db = tmp_path / "r.sqlite"
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 1))
    s = _run(m, db, Lower())
    row = _rows(db)["c0"]
    assert (s.ok, s.error) == (0, 1) and row["status"] == "error"
    assert "regime must be 'H', 'F' or null, got 'static'" in row["reason"]


@pytest.mark.parametrize("version, ok", [("1.0", True), ("2.3", True), ("3.0", True),
                                         ("4.0", False), ("0.9", False), ("3", True)])
def test_schema_versions_readable_are_majors_1_to_3(version, ok):
    from geocon_torch.bench.schema import result_problems

    problems = result_problems({**_valid(), "schema_version": version})
    assert (problems == []) is ok
    if not ok:
        assert problems[0].startswith("schema_version must be '3.x'")


def test_schema_prompt_category_must_be_text_or_null():
    from geocon_torch.bench.schema import result_problems

    assert result_problems({**_valid(), "prompt_category": "C3"}) == []
    assert result_problems({**_valid(), "prompt_category": 3}) == [
        "prompt_category must be a string or null"]
