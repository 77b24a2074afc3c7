"""A rank scores its clips in groups of ``batch_clips`` (one ``score_fn.batch`` call, i.e. one
``score_clips`` call, per group) and stores exactly the rows it stores clip by clip."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import (
    CountingScorer,
    _clip,
    bad_input_corpus,
    bad_rows_manifest,
    fake_result,
    write_clips,
    write_jsonl,
)

from geocon_torch.bench import ResultStore, run_manifest
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.bench.runner import PipelineScorer
from geocon_torch.cli import main
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import InputError
from geocon_torch.io import write_video
from geocon_torch.synth import render_scene


class BatchScorer(CountingScorer):
    """CountingScorer with a ``batch`` form: records each group; a clip of ``fail_on`` is its
    exception; ``broken`` makes the whole batch call raise."""

    def __init__(self, *a, broken: bool = False, **kw):
        super().__init__(*a, **kw)
        self.groups: list = []
        self.broken = broken

    def batch(self, entries, config, device):
        self.groups.append([e.clip_id for e in entries])
        if self.broken:
            raise RuntimeError("the whole batch fell over")
        out = []
        for e in entries:
            try:
                out.append(CountingScorer.__call__(self, e, config, device))
            except RuntimeError as exc:
                out.append(exc)
        return out


class SpyPipeline(PipelineScorer):
    """The real scorer, recording what reaches it."""

    def __init__(self):
        self.groups: list = []
        self.alone: list = []

    def __call__(self, entry, config, device):
        self.alone.append(entry.clip_id)
        return super().__call__(entry, config, device)

    def batch(self, entries, config, device):
        self.groups.append([e.clip_id for e in entries])
        return super().batch(entries, config, device)


def _table(db: Path) -> list:
    """Every stored row (clip metadata, key, result) without the result's stage timings."""
    with ResultStore(db) as s:
        rows = s.rows()
    for r in rows:
        r["result"].pop("timing_s")
    return rows


def _run(m: Path, db: Path, scorer, n: int, **kw):
    return run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=n, **kw)


def _counts(s) -> tuple:
    return (s.total, s.computed, s.ok, s.not_applicable, s.error, s.skipped, s.linked)


def test_groups_of_three_store_the_rows_of_one_by_one(tmp_path: Path):
    m = bad_rows_manifest(tmp_path, 7)  # c0..c6, "gone" (missing file), "dup" (bytes of c0)
    one, three = tmp_path / "one.sqlite", tmp_path / "three.sqlite"
    s1 = _run(m, one, BatchScorer(fail_on={"c2"}), 1)
    scorer = BatchScorer(fail_on={"c2"})
    s3 = _run(m, three, scorer, 3)
    # groups of the next 3 unscored clips; "gone" is an error row without a scorer call and
    # "dup" is linked to c0's row, so the last group holds c6 alone (scored on its own)
    assert scorer.groups == [["c0", "c1", "c2"], ["c3", "c4", "c5"]]
    assert scorer.calls == [f"c{i}" for i in range(7)]
    assert _counts(s1) == _counts(s3) == (9, 8, 6, 0, 2, 0, 1)
    rows = _table(three)
    assert rows == _table(one) and len(rows) == 9
    by_id = {r["clip_id"]: r for r in rows}
    assert by_id["c2"]["status"] == "error"
    assert by_id["c2"]["reason"].startswith("RuntimeError: boom on c2 (at helpers.py:")
    assert by_id["gone"]["status"] == "error" and by_id["c3"]["status"] == "ok"
    assert by_id["dup"]["content_hash"] == by_id["c0"]["content_hash"]
    # a re-run in groups scores nothing
    again = BatchScorer()
    s = _run(m, three, again, 3)
    assert again.groups == [] and again.calls == [] and s.skipped == 9


def test_same_bytes_twice_in_a_group_are_scored_once_then_linked(tmp_path: Path):
    rows = write_clips(tmp_path / "clips", 4)
    shutil.copy(tmp_path / "clips" / "c0.mp4", tmp_path / "clips" / "twin.mp4")
    rows.insert(1, {"clip_id": "twin", "path": str(tmp_path / "clips" / "twin.mp4"),
                    "generator": "m2"})
    m = write_jsonl(tmp_path / "m.jsonl", rows)  # c0, twin, c1, c2, c3
    _run(m, tmp_path / "one.sqlite", BatchScorer(), 1)
    scorer = BatchScorer()
    s = _run(m, tmp_path / "three.sqlite", scorer, 3)
    # twin waits until c0 is stored (its group is flushed), then it is linked, not scored
    assert scorer.groups == [["c1", "c2", "c3"]] and scorer.calls == ["c0", "c1", "c2", "c3"]
    assert (s.computed, s.linked) == (4, 1)
    assert _table(tmp_path / "three.sqlite") == _table(tmp_path / "one.sqlite")


def test_a_failing_batch_call_falls_back_to_one_by_one(tmp_path: Path, caplog):
    m = bad_rows_manifest(tmp_path, 4)
    _run(m, tmp_path / "one.sqlite", BatchScorer(fail_on={"c1"}), 1)
    scorer = BatchScorer(fail_on={"c1"}, broken=True)
    s = _run(m, tmp_path / "four.sqlite", scorer, 4)
    assert scorer.groups == [["c0", "c1", "c2", "c3"]]
    assert scorer.calls == ["c0", "c1", "c2", "c3"]  # each scored alone after the failure
    assert (s.ok, s.error) == (3, 2)
    assert "scoring a group of 4 clips failed" in caplog.text
    assert _table(tmp_path / "four.sqlite") == _table(tmp_path / "one.sqlite")


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_batch_clips_must_be_a_positive_integer(tmp_path: Path, bad):
    m = bad_rows_manifest(tmp_path, 1)
    with pytest.raises(InputError, match="batch_clips must be an integer >= 1"):
        _run(m, tmp_path / "r.sqlite", BatchScorer(), bad)


def test_real_pipeline_in_groups_stores_the_rows_of_one_by_one(tmp_path: Path):
    """The default scorer (score_clip alone, score_clips for a group) on real clips and bad
    inputs: the same stored rows, reasons included (an undecodable file's exception is
    recorded where it was raised, as for a clip scored alone)."""
    clips = tmp_path / "clips"
    rows = bad_input_corpus(clips)
    trans = render_scene("C3", num_frames=6, size=(96, 128), seed=3).frames
    write_video(clips / "trans.mp4", trans, fps=8)
    shutil.copy(clips / "good.mp4", clips / "again.mp4")
    rows += [{"clip_id": "trans", "path": str(clips / "trans.mp4"), "generator": "m2",
              "category": "C3"},
             {"clip_id": "again", "path": str(clips / "again.mp4"), "generator": "m2"}]
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    cfg = GeoConConfig().replace(io={"long_side": 128, "max_frames": 6})
    one, three = SpyPipeline(), SpyPipeline()
    s1 = _run(m, tmp_path / "one.sqlite", one, 1, config=cfg, device="cpu")
    s3 = _run(m, tmp_path / "three.sqlite", three, 3, config=cfg, device="cpu")
    assert one.groups == [] and len(one.alone) == 9  # 12 rows: 2 unhashable, 1 linked
    assert three.groups == [["good", "truncated", "text"], ["one_frame", "grey", "noise"],
                            ["tiny16", "cuts", "trans"]] and three.alone == []
    assert _counts(s1) == _counts(s3)
    # tiny16 is ok too (one more than without the lk-tracks fallback, which scores the crop)
    assert (s3.total, s3.computed, s3.linked, s3.ok) == (12, 11, 1, 4)
    table = _table(tmp_path / "three.sqlite")
    assert table == _table(tmp_path / "one.sqlite")
    by_id = {r["clip_id"]: r for r in table}
    assert by_id["text"]["status"] == "error" and "VideoReadError" in by_id["text"]["reason"]
    assert " (at " in by_id["text"]["reason"]
    assert by_id["trans"]["status"] == "ok" and by_id["trans"]["result"]["background"]["ir"] > 0.5
    assert by_id["again"]["content_hash"] == by_id["good"]["content_hash"]


def test_cli_batch_clips_option(tmp_path: Path, capsys, monkeypatch):
    scorer = BatchScorer()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", scorer)
    m = bad_rows_manifest(tmp_path, 5)
    rc = main(["bench", str(m), "--db", str(tmp_path / "r.sqlite"), "--no-progress",
               "--batch-clips", "2"])
    assert rc == 0 and "7 clips on 1 rank(s): 6 scored (5 ok" in capsys.readouterr().out
    assert scorer.groups == [["c0", "c1"], ["c2", "c3"]] and scorer.calls[-1] == "c4"
    with pytest.raises(SystemExit) as exc:  # an argparse usage error, named by its flag
        main(["bench", str(m), "--db", str(tmp_path / "r.sqlite"), "--batch-clips", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and "argument --batch-clips: must be >= 1, got 0" in err[-1]


def test_claim_many_takes_the_next_rows_and_skips_the_ones_held(pg_url):  # noqa: F811
    a_store, b_store = ResultStore(pg_url), ResultStore(pg_url)
    try:
        a = WorkQueue(a_store, "job1", "cfg", "A", lease_s=30)
        b = WorkQueue(b_store, "job1", "cfg", "B", lease_s=30)
        a.enqueue(["u", "v", "w", "x", "y", "z"])
        assert a.claim_many(2) == ["u", "v"] and b.claim_many(3) == ["w", "x", "y"]
        # A's own unfinished rows are claimable by A again (a lost reply), unless it names
        # them as held: then it gets the next free row
        assert a.claim_many(3) == ["u", "v", "z"]
        assert a.claim_many(3, exclude=["u", "v", "z"]) == []
        a_store.put(_clip("u"), "hu", "cfg", fake_result("u"), also=[a.done_statement("u")])
        assert a.claim_many(5, exclude=["z"]) == ["v"] and a.claimed == 6
        with pytest.raises(InputError, match="n >= 1"):
            a.claim_many(0)
    finally:
        a_store.close()
        b_store.close()


def test_dynamic_claims_in_groups_store_the_rows_of_one_by_one(tmp_path: Path,
                                                               pg_url):  # noqa: F811
    m = bad_rows_manifest(tmp_path, 7)
    _run(m, tmp_path / "one.sqlite", BatchScorer(fail_on={"c2"}), 1)
    scorer = BatchScorer(fail_on={"c2"})
    s = _run(m, pg_url, scorer, 3)
    assert s.assign == "dynamic"
    assert scorer.groups == [["c0", "c1", "c2"], ["c3", "c4", "c5"]]
    assert _counts(s) == (9, 8, 6, 0, 2, 0, 1)
    assert _table(pg_url) == _table(tmp_path / "one.sqlite")
    with ResultStore(pg_url) as st:  # rank 0 dropped the finished job's work rows
        assert st.select("SELECT COUNT(*) FROM work")[0][0] == 0
