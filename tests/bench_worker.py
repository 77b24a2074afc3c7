"""A `geocon bench` process with a fake scorer, for the fault tests and benchmarks/leaderboard.py:

    python bench_worker.py LOG SLEEP_S -- bench MANIFEST --db DB ...   (torchrun runs it too)

Every scorer call appends ``clip_id node rank unix_time`` to ``LOG`` (one file per rank:
``LOG.<RANK>``) before sleeping ``SLEEP_S`` seconds (times ``extra["cost"]`` of the manifest row
when given); then the command line after ``--`` runs as ``geocon ...``.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import CountingScorer  # noqa: E402

from geocon_torch.bench import runner  # noqa: E402
from geocon_torch.cli import main  # noqa: E402


class LoggingScorer(CountingScorer):
    def __init__(self, log: str, sleep_s: float):
        super().__init__()
        self.log_path = f"{log}.{os.environ.get('RANK', '0')}"
        self.base_s = sleep_s

    def __call__(self, entry, config, device):
        with open(self.log_path, "a") as fh:
            fh.write(f"{entry.clip_id} {os.environ.get('GROUP_RANK', '0')} "
                     f"{os.environ.get('RANK', '0')} {time.time():.3f}\n")
        time.sleep(self.base_s * float(entry.extra.get("cost", 1)))
        return super().__call__(entry, config, device)


if __name__ == "__main__":
    log, sleep_s, sep, *argv = sys.argv[1:]
    assert sep == "--", "usage: bench_worker.py LOG SLEEP_S -- geocon arguments"
    runner.default_score_fn = LoggingScorer(log, float(sleep_s))
    sys.exit(main(argv))
