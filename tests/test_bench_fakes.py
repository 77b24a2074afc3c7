"""Fake results and scorers shared by the bench / report / cli tests (plus checks of the fakes).

``fake_result`` builds schema-conforming result dicts with chosen numbers; ``CountingScorer``
is an injectable ``score_fn`` that counts calls (in memory and in a file, so a killed
subprocess's calls are still counted) and can fail or sleep on chosen clips.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Optional, Sequence

from geocon_torch.bench import check_result, result_problems


def fake_result(clip: str, *, ir: float = 0.98, ge: float = 1.0, regime: str = "H",
                prompt_category: Optional[str] = None, behaviour: Optional[str] = None,
                statistic: float = 0.02,
                objects: Sequence[float] = (), epipolar=(0.5, 0.8, 0.6), status: str = "ok",
                config_hash: str = "cfg", per_pair: Optional[list] = None,
                path: Optional[str] = None) -> dict:
    ok = status == "ok"
    per_pair = per_pair if per_pair is not None else [
        {"pair": [t, t + 1], "ir": ir, "ge_px": ge, "valid": True, "num_matches": 100}
        for t in range(4)]
    return {
        "schema_version": "2.0", "clip": clip, "path": path, "content_hash": None,
        "status": status, "reason": None if ok else f"fake {status}",
        "regime": regime if ok else None,
        "gate": {"method": "poses", "statistic": statistic,
                 "thresholds": {"low": 0.03, "high": 0.05, "tau": 0.04},
                 "decision": regime, "evidence": {"t_inf": statistic}},
        "background": ({"ir": ir, "ge_px": ge, "ir_h": ir, "ge_h_px": ge, "ir_f": ir,
                        "ge_f_px": ge * 0.9, "valid_pairs": len(per_pair), "pairs": len(per_pair),
                        "pass": bool(ir >= 0.97 and ge <= 3.5), "per_pair": per_pair,
                        "status": "ok", "reason": None} if ok else None),
        "foreground": {"objects": [{"id": i, "frames": 8, "adadfrc_mean": float(v) * 0.8,
                                    "adap90": float(v)} for i, v in enumerate(objects)],
                       "status": "ok" if objects else "not_applicable",
                       "reason": None if objects else "no objects"},
        "epipolar": ({"epipolar_error": epipolar[0], "epipolar_error_score": 1 - epipolar[0] / 5,
                      "epipolar_inlier_rate": epipolar[1], "feature_match_coverage": epipolar[2],
                      "pairs": 4, "valid_pairs": 4, "fallback_used": False, "status": "ok",
                      "reason": None} if ok else None),
        "behaviour": behaviour, "prompt_category": prompt_category,
        "config": {"preset": "geocon"}, "config_hash": config_hash,
        "version": "0.1.0", "backends": {"features": "fake", "flow": "fake", "masks": "none",
                                         "gate": "poses"},
        "timing_s": {"total": 0.01},
    }


def _unit(s: str) -> float:
    return int(hashlib.sha256(s.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class CountingScorer:
    """Injectable score_fn: deterministic fake numbers per clip_id, call counting, failures.

    Args:
        log: file that gets one line per call (survives a killed process).
        fail_on: clip_ids whose scoring raises RuntimeError.
        sleep_s: seconds to sleep inside each call (gives a test time to kill the process).
    """

    def __init__(self, log: Optional[Path] = None, fail_on: Sequence[str] = (),
                 sleep_s: float = 0.0):
        self.log = Path(log) if log else None
        self.fail_on = set(fail_on)
        self.sleep_s = sleep_s
        self.calls: list = []

    def __call__(self, entry, config, device):
        self.calls.append(entry.clip_id)
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(entry.clip_id + "\n")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if entry.clip_id in self.fail_on:
            raise RuntimeError(f"boom on {entry.clip_id}")
        u = _unit(entry.clip_id)
        return fake_result(entry.clip_id, ir=0.9 + 0.1 * u, ge=0.5 + 2 * u,
                           regime="F" if u > 0.5 else "H",
                           prompt_category=entry.prompt_category,
                           statistic=0.1 * u, objects=[10 * u], path=entry.path,
                           config_hash=config.config_hash())


def write_clips(folder: Path, n: int, *, model: str = "m", prefix: str = "c") -> list:
    """n small distinct files standing in for videos + manifest rows pointing at them."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        p = folder / f"{prefix}{i}.mp4"
        p.write_bytes(f"fake video {prefix}{i}".encode())
        rows.append({"clip_id": f"{prefix}{i}", "path": str(p), "model": model,
                     "category": f"C{i % 6 + 1}", "seed": i // 6, "prompt": f"p{i % 6}"})
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_fake_result_is_valid():
    assert result_problems(fake_result("a")) == []
    assert result_problems(fake_result("a", status="error")) == []
    check_result(fake_result("a", objects=[1.0, 2.0]))


def test_schema_rejects_nan_and_bad_status():
    bad = fake_result("a", ir=float("nan"))
    problems = result_problems(bad)
    assert any("background.ir" in p for p in problems)
    bad = fake_result("a")
    bad["status"] = "fine"
    assert any("status" in p for p in result_problems(bad))
    bad = fake_result("a", status="not_applicable")
    bad["reason"] = ""
    assert any("reason" in p for p in result_problems(bad))
    assert result_problems([1]) == ["a result must be a JSON object, got list"]
