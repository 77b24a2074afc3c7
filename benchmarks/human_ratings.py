"""Agreement of geocon_torch's per-clip numbers with people's ratings (FETV).

FETV (Liu et al. 2023, https://github.com/llyx97/FETV) publishes, in
``generated_video_examples/README.md``, small GIFs of 39 prompts: the real stock clip ("gt",
WebVid / MSR-VTT) and four text-to-video models (CogVideo, Text2Video-zero, ModelScopeT2V =
"videofusion", ZeroScope), 160-288 px, 16-33 frames; for the 17 prompts of the "temporal major
content" part each clip carries the mean of three raters' static-quality (SQ) and
temporal-quality (TQ) ratings (1-5), the others an alignment rating. Nothing of FETV is committed
here: pass the path of a checkout (or of a bare mirror: its files are read with ``git show``)::

    python benchmarks/human_ratings.py /path/to/FETV [--extract /tmp/fetv] [--cache scores.jsonl]

Every GIF is scored once at its native size (``io.long_side`` null) with the "all" preset
(background + foreground + WorldAtlas epipolar trio) and the result dicts are cached in a JSONL
(``--cache``), so a rerun only recomputes the statistics. ``--config`` (a JSON mapping merged
into the scoring config) and ``--tag`` score variants (e.g. another feature backend) into the
same cache.

Reported per number (the headline ``score``, IR, -GE, the epipolar reward, -GE_F):

* coverage: fraction of the GIFs with a real value (status ok, not ``not_applicable``);
* Spearman rho with the TQ ratings over the TQ-rated clips that have a value (rank ties
  averaged), and rho_all: the same with unscored clips at the bottom (rank as the worst);
* real-above-generated: over the (real, generated) pairs of one prompt where people rated the
  real clip's TQ strictly higher, the fraction where the number ranks the real clip higher (ties
  0.5; a missing value loses against a present one); and over every prompt (all 39, without
  the people's filter);
* within-source rho: the mean over the five sources of the Spearman rho among one source's
  TQ-rated clips (how well the number orders clips of one model, where the source's own look
  cannot help).

Ceiling (``source_ceiling``): the rho that a number equal to the people's own mean TQ of each
clip's source would reach. A number that only tells the sources apart, perfectly, gets this;
beyond it a number must also order clips within a source as the raters did.
The last line is ``RESULT {json}``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from geocon_torch import score_clip
from geocon_torch.measures.headline import headline_score
from geocon_torch.rewards import reward_from_result

MODELS = ("cogvideo", "text2video-zero", "videofusion", "zeroscope", "gt")
README = "generated_video_examples/README.md"
_GIF = re.compile(r"!\[\]\((assets/[^)]+\.gif)\)")
_RATING = re.compile(r"(SQ|TQ|Alignment)=([0-9.]+)")


def _read_text(repo: Path, rel: str) -> str:
    if (repo / rel).is_file():
        return (repo / rel).read_text()
    return subprocess.run(["git", "-C", str(repo), "show", f"HEAD:{rel}"], check=True,
                          capture_output=True, text=True).stdout


def parse_ratings(text: str) -> List[Dict[str, Any]]:
    """One entry per GIF cell of the README tables: {"gif", "model", "prompt", "section",
    "sq", "tq", "alignment"} (ratings None where the table has none)."""
    out: List[Dict[str, Any]] = []
    section, pending = None, None
    for line in text.splitlines():
        if line.startswith("###"):
            section = line.strip("# ").strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2:
            continue
        gifs = [_GIF.search(c) for c in cells[1:]]
        if any(gifs):
            pending = [(cells[0], g.group(1) if g else None) for g in gifs]
            continue
        if pending and any(_RATING.search(c) for c in cells[1:]):
            for (prompt, gif), cell in zip(pending, cells[1:]):
                if gif is None:
                    continue
                r = {k.lower(): float(v) for k, v in _RATING.findall(cell)}
                out.append({"gif": gif, "model": gif.split("/")[-2], "prompt": prompt,
                            "section": section, "sq": r.get("sq"), "tq": r.get("tq"),
                            "alignment": r.get("alignment")})
            pending = None
    return out


def extract(repo: Path, dest: Path) -> Path:
    """The GIFs under ``dest`` (once: ``git archive`` of a mirror, or the checkout itself)."""
    if (repo / "generated_video_examples").is_dir():
        return repo / "generated_video_examples"
    root = dest / "generated_video_examples"
    if not root.is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        arc = subprocess.run(["git", "-C", str(repo), "archive", "HEAD",
                              "generated_video_examples"], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(dest)], input=arc.stdout, check=True)
    return root


def _slim(res: Dict[str, Any]) -> Dict[str, Any]:
    res = dict(res)
    res.pop("config", None)
    return res


def score_all(entries: List[Dict[str, Any]], root: Path, cache: Path, tag: str,
              config: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """gif -> result dict for ``tag`` (cached in ``cache``; missing ones scored now)."""
    done: Dict[str, Dict[str, Any]] = {}
    if cache.is_file():
        for line in cache.read_text().splitlines():
            row = json.loads(line)
            if row["tag"] == tag:
                done[row["gif"]] = row["result"]
    cfg = {"io": {"long_side": None}}
    cfg.update(config)
    todo = sorted({e["gif"] for e in entries} - set(done))
    with cache.open("a") as fh:
        for k, gif in enumerate(todo):
            t0 = time.perf_counter()
            try:
                res = _slim(score_clip(str(root / gif), config=cfg, preset="all", device="cpu",
                                       progress=False).to_dict())
            except Exception as exc:  # noqa: BLE001 - one unreadable GIF is an error row
                res = {"status": "error", "reason": f"{type(exc).__name__}: {exc}"}
            done[gif] = res
            fh.write(json.dumps({"tag": tag, "gif": gif, "result": res}) + "\n")
            fh.flush()
            print(f"[{k + 1}/{len(todo)}] {gif}: {res.get('status')} "
                  f"{time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return done


def _epipolar_reward(res: Dict[str, Any]) -> Optional[float]:
    info = reward_from_result(res, "epipolar")
    return info.reward if info.status == "ok" else None


def _bg(key: str, sign: float = 1.0) -> Callable[[Dict[str, Any]], Optional[float]]:
    def get(res: Dict[str, Any]) -> Optional[float]:
        v = (res.get("background") or {}).get(key)
        return None if res.get("status") != "ok" or v is None else sign * float(v)
    return get


NUMBERS: Dict[str, Callable[[Dict[str, Any]], Optional[float]]] = {
    "score": headline_score, "IR": _bg("ir"), "-GE": _bg("ge_px", -1.0),
    "-GE_F": _bg("ge_f_px", -1.0), "epipolar reward": _epipolar_reward}


def _ranks(x: torch.Tensor) -> torch.Tensor:
    """Average ranks (ties share the mean rank) of a (N,) tensor."""
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x)
    ranks[order] = torch.arange(x.numel(), dtype=x.dtype)
    for v in torch.unique(x):
        tie = x == v
        ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: List[float], b: List[float]) -> Optional[float]:
    """Spearman rho of two equal-length lists (None when fewer than 3 values)."""
    if len(a) < 3:
        return None
    ra, rb = _ranks(torch.tensor(a, dtype=torch.float64)), _ranks(torch.tensor(b,
                                                                         dtype=torch.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float((ra * rb).sum()) / den if den > 0 else None


def _above(real: Optional[float], gen: Optional[float]) -> float:
    if real is None and gen is None:
        return 0.5
    if gen is None:
        return 1.0
    if real is None:
        return 0.0
    return 1.0 if real > gen else 0.5 if real == gen else 0.0


def _tq_by_source(entries: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    out: Dict[str, List[Dict[str, Any]]] = {}
    for e in entries:
        if e["tq"] is not None:
            out.setdefault(e["model"], []).append(e)
    return out


def source_ceiling(entries: List[Dict[str, Any]]) -> Optional[float]:
    """Spearman rho of the TQ ratings with each clip's source mean TQ (module docstring)."""
    groups = _tq_by_source(entries)
    mean = {m: sum(e["tq"] for e in g) / len(g) for m, g in groups.items()}
    rated = [e for g in groups.values() for e in g]
    return spearman([mean[e["model"]] for e in rated], [e["tq"] for e in rated])


def within_source(entries: List[Dict[str, Any]], vals: Dict[str, Optional[float]]
                  ) -> Optional[float]:
    """Mean over sources of the Spearman rho of ``vals`` (gif -> number or None) with TQ among
    that source's TQ-rated clips that have a value (sources with < 3 such clips left out)."""
    rhos = []
    for group in _tq_by_source(entries).values():
        have = [(vals[e["gif"]], e["tq"]) for e in group if vals[e["gif"]] is not None]
        rho = spearman([v for v, _ in have], [t for _, t in have])
        if rho is not None:
            rhos.append(rho)
    return sum(rhos) / len(rhos) if rhos else None


def evaluate(entries: List[Dict[str, Any]], results: Dict[str, Dict[str, Any]],
             fn: Callable[[Dict[str, Any]], Optional[float]]) -> Dict[str, Any]:
    """Coverage, Spearman with TQ and real-above-generated accuracy of one number."""
    vals = {e["gif"]: fn(results[e["gif"]]) for e in entries}
    n_ok = sum(v is not None for v in vals.values())
    tq = [(vals[e["gif"]], e["tq"]) for e in entries if e["tq"] is not None]
    have = [(v, t) for v, t in tq if v is not None]
    rho = spearman([v for v, _ in have], [t for _, t in have])
    low = min([v for v, _ in have], default=0.0) - 1.0
    rho_all = spearman([low if v is None else v for v, _ in tq], [t for _, t in tq])
    by_prompt: Dict[Tuple[str, str], Dict[str, Dict[str, Any]]] = {}
    for e in entries:
        by_prompt.setdefault((e["section"], e["prompt"]), {})[e["model"]] = e
    agree, every, per_model = [], [], {}
    for group in by_prompt.values():
        real = group.get("gt")
        if real is None:
            continue
        for m, e in group.items():
            if m == "gt":
                continue
            won = _above(vals[real["gif"]], vals[e["gif"]])
            every.append(won)
            per_model.setdefault(m, []).append(won)
            if real["tq"] is not None and e["tq"] is not None and real["tq"] > e["tq"]:
                agree.append(won)
    mean = (lambda xs: sum(xs) / len(xs) if xs else None)  # noqa: E731
    return {"coverage": n_ok / max(1, len(vals)), "n": len(vals), "n_ok": n_ok,
            "spearman_tq": rho, "spearman_tq_all": rho_all, "n_tq": len(have),
            "spearman_within_source": within_source(entries, vals),
            "real_above_agreed": mean(agree), "n_agreed": len(agree),
            "real_above_all": mean(every), "n_pairs": len(every),
            "real_above_by_model": {m: mean(v) for m, v in sorted(per_model.items())}}


def _f(v: Any) -> str:
    return "  n/a" if v is None else f"{v:5.3f}"


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("fetv", type=Path, help="FETV checkout or bare mirror")
    ap.add_argument("--extract", type=Path, default=Path("/tmp/fetv"))
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fetv_scores.jsonl"))
    ap.add_argument("--tag", default="native")
    ap.add_argument("--config", default="{}", help="JSON mapping merged into the config")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    entries = parse_ratings(_read_text(args.fetv, README))
    root = extract(args.fetv, args.extract)
    results = score_all(entries, root, args.cache, args.tag, json.loads(args.config))
    print(f"FETV: {len(entries)} rated GIFs, {sum(e['tq'] is not None for e in entries)} with "
          f"TQ, tag {args.tag!r}; scored at native size")
    ceiling = source_ceiling(entries)
    print(f"ceiling (each clip's source mean TQ as the number): rho_TQ {_f(ceiling)}")
    print(f"{'number':>16} {'cover':>6} {'rho_TQ':>6} {'rho_all':>7} {'within':>6} "
          f"{'real>gen':>8} {'(n)':>4} {'all':>6}  per model (all prompts)")
    out: Dict[str, Any] = {"tag": args.tag, "n_gifs": len(entries), "source_ceiling": ceiling}
    for name, fn in NUMBERS.items():
        r = evaluate(entries, results, fn)
        out[name] = r
        per = ", ".join(f"{m} {_f(v)}" for m, v in r["real_above_by_model"].items())
        print(f"{name:>16} {_f(r['coverage']):>6} {_f(r['spearman_tq']):>6} "
              f"{_f(r['spearman_tq_all']):>7} {_f(r['spearman_within_source']):>6} "
              f"{_f(r['real_above_agreed']):>8} "
              f"{r['n_agreed']:>4} {_f(r['real_above_all']):>6}  {per}")
    print("RESULT " + json.dumps(out))
    return out


if __name__ == "__main__":
    main()
