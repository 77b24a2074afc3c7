"""``geocon merge OUT SHARD`` while a job still writes the shard (audit s22 pgconc F4): the
shard's results and clip rows are read in one snapshot, so a clip committed (with its result)
between the two reads never reaches OUT without its result; the next merge brings both."""
from __future__ import annotations

from helpers import CountingScorer, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, merge_stores, run_manifest
from geocon_torch.bench.pg_store import PostgresStore
from geocon_torch.bench.store import SQLiteStore


def _dangling(db) -> int:
    """Clip rows of ``db`` that point at no result."""
    with ResultStore(db) as s:
        return int(s._select("SELECT count(*) FROM clips c WHERE NOT EXISTS (SELECT 1 FROM "
                             "results r WHERE r.content_hash = c.content_hash AND "
                             "r.config_hash = c.config_hash)")[1][0][0])


def test_a_clip_written_between_the_shard_reads_never_arrives_without_its_result(
        tmp_path, any_db, monkeypatch):
    n = 4
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))
    cfg = run_manifest(m, any_db, score_fn=CountingScorer(), progress=False).config_hash
    with ResultStore(any_db) as probe:
        shard_name = probe.name
    fired = []

    def job_writes():  # the shard's job stores one more clip, in one transaction
        with ResultStore(any_db) as job:
            job.put({"clip_id": "late", "generator": "m"}, "late-bytes", cfg,
                    fake_result("late", config_hash=cfg))

    def hooked(real):
        def read(self, sql, params=()):
            reads_clips = sql.lstrip().startswith("SELECT") and "FROM clips" in sql
            if self.name == shard_name and reads_clips and not fired:
                fired.append(sql)
                job_writes()
            return real(self, sql, params)
        return read

    for cls in (SQLiteStore, PostgresStore):
        for meth in ("_select", "_execute"):
            monkeypatch.setattr(cls, meth, hooked(getattr(cls, meth)))
    out = tmp_path / "out.sqlite"
    rep = merge_stores(out, [any_db])
    assert fired, "the shard's clip rows were never read"
    # before: results_added 4, clips_added 5 and one clip row of OUT pointing at no result
    assert (rep.results_added, rep.clips_added, _dangling(out)) == (n, n, 0)
    again = merge_stores(out, [any_db])
    assert (again.results_added, again.clips_added, _dangling(out)) == (1, 1, 0)
    with ResultStore(out) as s:
        assert sorted(r["clip_id"] for r in s.rows()) == sorted([f"c{i}" for i in range(n)]
                                                                + ["late"])
