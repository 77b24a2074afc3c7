"""Leaderboard runs: manifests, SQLite / PostgreSQL result stores, the runner, merging, statistics.

Quick use::

    from geocon_torch.bench import load_manifest, run_manifest, load_results, stats
    run_manifest("manifest.csv", "results.sqlite", config={"io": {"long_side": 1024}})
    rows = load_results("results.sqlite")          # validated joined rows (one config; a
                                                   # store of several: config_hash=...)
    stats.scene_balanced(rows, "ir")               # per (generator, prompt_category), 95% CI
    stats.table1(rows)                             # IR %, GE px, AdaDFRC per generator
    stats.headline(rows)                           # the headline score per generator

* :mod:`.ids` — unique clip ids derived from paths (shortest unique suffix: ``sora/3``) and
  unique file-name keys of per-clip artefacts.
* :mod:`.manifest` — CSV / JSONL manifests with the paper's sec. 5.5 fields (clip_id, path,
  generator (the paper's "model"), generator_version, prompt, seed, resolution, fps, duration,
  masks_path) plus the prompt
  family (column ``category`` or ``prompt_category``, stored as ``prompt_category``) and
  poses_path; every error names the file and line (:class:`ManifestError`).
* :mod:`.store` — ``ResultStore(db)``: ``results`` keyed by (content hash, config hash),
  ``clips`` (clip_id -> result), view ``leaderboard``; idempotent writes, CSV / Parquet export;
  one SQLite file (WAL, the embedded default) or :mod:`.pg_store` (a PostgreSQL server, psycopg
  3, for jobs spanning nodes; passwords never printed: :func:`mask_url`).
* :mod:`.runner` — :func:`run_manifest`: resume by key, clips scored in batches
  (``batch_clips``, :class:`PipelineScorer`) and stored one transaction per clip, error rows
  with reasons, tqdm progress, torchrun ranks: static r::N on SQLite (one node), dynamic claims
  with expiring leases on PostgreSQL (:mod:`.claims`; any number of nodes).
* :mod:`.merge` — :func:`merge_stores`: per-node stores into one, deduplicated by key,
  conflicting results reported with both values (``geocon merge``).
* :mod:`.prune` — :func:`prune_store`: store maintenance (``geocon prune``): clip rows of
  clips a manifest left out, orphaned results, crashed jobs' work rows, VACUUM.
* :mod:`.stats` — scene-balanced medians / means with seeded, vectorised bootstrap CIs
  (B = 10,000), Wilson intervals (eq. 16), gate calibration with equal-count bins, net benefit
  (eq. 18), balanced-accuracy bootstrap, threshold-score sensitivity, percentile-aligned
  summaries, AdaP90 P80 anomaly rates, Table-1 and epipolar-trio summaries.
* :mod:`.schema` — validation of result rows (schema "3.x"; "1.x" and "2.x" rows are migrated)
  on store and on load.

See the README sections "Leaderboard runs", "Statistics and audit reports", "Result schema".
"""
from . import stats
from .ids import derive_clip_ids, file_key
from .manifest import (ManifestEntry, ManifestError, check_unique_ids, entry_from_mapping,
                       load_manifest, write_manifest)
from .runner import (PipelineScorer, RunSummary, content_key, default_score_fn, error_result,
                     run_manifest)
from .schema import ResultSchemaError, check_result, result_problems
from .store import (FLAT_COLUMNS, ResultStore, SQLiteStore, StoreConnectionError, StoreError,
                    flatten_row, is_server_url, load_results, write_csv, write_parquet)
from .pg_store import PostgresStore, mask_url
from .merge import MergeReport, merge_stores
from .prune import PruneReport, prune_store

__all__ = [
    "stats", "derive_clip_ids", "file_key", "ManifestEntry", "ManifestError",
    "check_unique_ids", "entry_from_mapping", "load_manifest", "write_manifest",
    "PipelineScorer", "RunSummary", "content_key", "default_score_fn", "error_result",
    "run_manifest",
    "ResultSchemaError", "check_result", "result_problems", "FLAT_COLUMNS", "ResultStore",
    "StoreError", "flatten_row", "load_results", "write_csv", "write_parquet", "SQLiteStore",
    "StoreConnectionError", "is_server_url", "PostgresStore", "mask_url", "MergeReport",
    "merge_stores", "PruneReport", "prune_store",
]
