"""Leaderboard statistics (paper sec. 4.4, 6.2-6.7, appendix B), vectorised numpy.

Rows are the joined rows of :func:`geocon_torch.bench.load_results` (clip metadata + result)
of ONE configuration (rows of several config hashes are an InputError naming them: load with
``config_hash=``; rows of several package versions under one config hash, kept across an
upgrade, are pooled with a UserWarning naming the versions, and rows of one older version get a
softer one naming the running version; error rows of an older release are named too, rows of a
newer release (by release order: :func:`is_newer_version`) are told to upgrade:
:func:`warn_mixed_versions`);
metrics are the flat columns of :func:`geocon_torch.bench.flatten_row`
("ir", "ge_px", "adadfrc_mean", "epipolar_error", ...). Only rows with ``status == "ok"`` and a
finite metric enter a statistic; everything reports how many clips and scenes it used.

Scene balance (sec. 4.4): within a group (generator, prompt_category) every scene —
(prompt_category, prompt, seed), or the clip itself when the seed is unknown — contributes ONE
value (the median, or for mean statistics the mean, of its clips, i.e. regenerations), then the
statistic is taken over scenes. ``prompt_category`` is the prompt family the clip was generated
for (C1-C6 or a manifest label); the designed regime of the gate calibration comes from it, never
from the post-hoc ``behaviour``. Bootstrap CIs resample scenes with replacement (B = 10,000, seeded
``numpy.random.Generator``) and take the 2.5 / 97.5 percentiles of the replicated statistic;
replicates are computed as one (B, S) array (in blocks bounded in memory), never a Python loop.
"""
from __future__ import annotations

import sys
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import retired_name
from .._version import __version__
from ..categories import expected_regime
from .manifest import RETIRED_COLUMNS, scene_key
from .store import flatten_row
from ..config import GeoConConfig
from ..errors import GeoConError, InputError

Z95 = 1.959963984540054


# --- intervals ------------------------------------------------------------------------------
def wilson_interval(k: Union[int, np.ndarray], n: Union[int, np.ndarray], z: float = Z95
                    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Wilson score interval (paper eq. 16) for k successes in n trials, elementwise.

    Returns (p_hat, lo, hi): float arrays (floats for scalar input). For n = 0 the interval
    is its limit [0, 1] and
    p_hat is 0.5 (no information), never NaN.
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(k < 0) or np.any(k > n):
        raise InputError("wilson_interval needs 0 <= k <= n")
    empty = n == 0
    m = np.where(empty, 1.0, n)
    p = np.where(empty, 0.5, k / m)
    denom = 1.0 + z * z / m
    center = (p + z * z / (2 * m)) / denom
    half = z / denom * np.sqrt(p * (1 - p) / m + z * z / (4 * m * m))
    # the interval contains p_hat; min / max only absorb rounding at p_hat in {0, 1}
    lo = np.where(empty, 0.0, np.minimum(np.clip(center - half, 0.0, 1.0), p))
    hi = np.where(empty, 1.0, np.maximum(np.clip(center + half, 0.0, 1.0), p))
    if p.ndim == 0:
        return float(p), float(lo), float(hi)
    return p, lo, hi


_STATS: Dict[str, Callable[..., np.ndarray]] = {"median": np.median, "mean": np.mean}


@dataclass
class Estimate:
    """A point estimate with its 95% bootstrap CI over ``n`` resampling units."""

    value: Optional[float]
    lo: Optional[float]
    hi: Optional[float]
    n: int

    def to_dict(self) -> Dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n}


def bootstrap_ci(values: Sequence[float], *, statistic: str = "median", n_boot: int = 10_000,
                 ci: float = 0.95, seed: int = 0, block_elements: int = 1 << 22) -> Estimate:
    """Percentile bootstrap CI of ``statistic`` ("median" | "mean") of ``values``.

    The B resamples are drawn as one (B, n) index array per memory block (at most
    ``block_elements`` entries) from ``numpy.random.default_rng(seed)``. Empty input gives
    ``Estimate(None, None, None, 0)``; one value gives a zero-width interval.
    """
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    if statistic not in _STATS:
        raise InputError(f"statistic must be one of {sorted(_STATS)}, got {statistic!r}")
    fn = _STATS[statistic]
    n = x.size
    if n == 0:
        return Estimate(None, None, None, 0)
    point = float(fn(x))
    if n == 1:
        return Estimate(point, point, point, 1)
    rng = np.random.default_rng(seed)
    per_block = max(1, block_elements // n)
    reps = np.empty(n_boot)
    for start in range(0, n_boot, per_block):  # memory blocks, each vectorised
        b = min(per_block, n_boot - start)
        reps[start:start + b] = fn(x[rng.integers(0, n, size=(b, n))], axis=1)
    alpha = (1 - ci) / 2
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return Estimate(point, float(lo), float(hi), n)


# --- row access -----------------------------------------------------------------------------
def is_newer_version(version: str, than: str) -> bool:
    """Whether the geocon_torch release ``version`` comes after ``than`` in release order
    (PEP 440, :class:`packaging.version.Version`: ``0.2.10`` after ``0.2.9``, ``1.0rc1`` after
    ``0.9``; ``0.1`` and ``0.1.0`` are one release). A version that does not parse ("unknown":
    a row that records none; hand-edited text) is older than every one that does, and never
    newer than another that does not. Rows of a newer release are never re-scored by an older
    one (``rescore_versions``): its messages say to upgrade."""
    return version_order(version) > version_order(than)


def version_order(version: Any) -> Tuple[Any, ...]:
    """A sort key of a geocon_torch ``version`` (a row's ``version`` column or a result's
    ``version``) by release order (PEP 440: ``0.2.10`` after ``0.2.9``, ``0.2.7rc1`` before
    ``0.2.7``): compare two keys to tell which release is newer. "unknown", None and text that
    is no version sort before every release (rows of an unknown build count as older)."""
    from packaging.version import InvalidVersion, Version  # lazy: a torchmetrics dependency
    try:
        return (1, Version(version)) if isinstance(version, str) else (0,)
    except InvalidVersion:
        return (0,)


def is_older_version(version: str) -> bool:
    """Whether rows recording ``version`` are of another release than the running
    ``__version__`` and not a newer one (:func:`is_newer_version`; "unknown" counts as older):
    the rows ``rescore_versions`` re-scores."""
    return version != __version__ and not is_newer_version(version, __version__)


def row_version(row: Dict[str, Any]) -> str:
    """The geocon_torch version a joined or flat row records (the store's ``version`` column,
    else its result's), "unknown" when none."""
    res = _row_result(row)
    return str(row.get("version") or res.get("version") or "unknown")


def _row_result(row: Dict[str, Any]) -> Dict[str, Any]:
    """The result dict of a joined (``result``) or flat (``_result``) row, {} when none."""
    for key in ("result", "_result"):
        if isinstance(row.get(key), dict):
            return row[key]
    return {}


def _counts_by_version(rows: Iterable[Dict[str, Any]], errors: bool) -> Dict[str, int]:
    counts: Counter = Counter()
    for r in rows:
        if ((r.get("status") or _row_result(r).get("status")) == "error") == errors:
            counts[row_version(r)] += 1
    return dict(sorted(counts.items()))


def version_counts(rows: Iterable[Dict[str, Any]]) -> Dict[str, int]:
    """Scored rows (status ok or not_applicable; error rows left out) per geocon_torch
    ``version`` their result records ("unknown" when it records none), by version. Takes
    joined rows (the store's ``version`` / ``status`` columns, else the ``result``'s) or flat
    rows (:func:`flatten_row`)."""
    return _counts_by_version(rows, errors=False)


def error_version_counts(rows: Iterable[Dict[str, Any]]) -> Dict[str, int]:
    """Error rows per geocon_torch ``version`` they record (as :func:`version_counts`). They
    enter no statistic, but an older release's refusal (a clip it could not decode, say) may
    be a score of the installed one: the version warnings name them, ``rescore_versions``
    re-scores them."""
    return _counts_by_version(rows, errors=True)


def older_rows(rows: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows (any status) of a release older than the running one
    (:func:`is_older_version`): those the re-score advice is about."""
    return [r for r in rows if is_older_version(row_version(r))]


#: the config sections every release recorded (the first store format on): a result whose
#: ``config`` holds them all recorded its whole config; a partial one (hand-made rows) is not
#: judged by :func:`unreachable_config`
RECORDED_SECTIONS = ("io", "features", "ransac", "gate", "background", "epipolar", "preset")


def unreachable_config(rows: Iterable[Dict[str, Any]]) -> Optional[str]:
    """Why this version cannot score the rows' configuration again under the config hash
    they are stored with, or None when it can (or they record no whole config to judge).

    A run finds stored rows by the hash of the config it is given; when the hash a row's own
    recorded config gives today (``GeoConConfig.from_dict(result["config"]).config_hash()``)
    is not its stored one (the protocol changed since: a field added to the hash), or that
    config no longer loads (a retired key, a refused value), no option set reaches the rows,
    and ``rescore_versions`` cannot replace them. One config is read per stored hash.
    """
    seen = set()
    for r in rows:
        res = _row_result(r)
        stored, cfg = r.get("config_hash") or res.get("config_hash"), res.get("config")
        if (stored is None or str(stored) in seen or not isinstance(cfg, dict)
                or not all(k in cfg for k in RECORDED_SECTIONS)):
            continue
        seen.add(str(stored))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the DeprecationWarnings of migrated keys
            try:
                now = GeoConConfig.from_dict(cfg).config_hash()
            except (GeoConError, TypeError, ValueError) as exc:
                why = str(exc).split("; known:")[0][:160]
                return f"their config, stored as {stored}, no longer loads: {why}"
        if now != str(stored):
            return f"their config, stored as {stored}, is config {now} when this version reads it"
    return None


def rescore_advice(source: str = "rows", config_hash: Optional[str] = None,
                   kind: Optional[str] = None, *, unreachable: Optional[str] = None) -> str:
    """How to re-score rows of another geocon_torch version with the installed one, for a
    warning (commands in backticks), by where the rows come from:

    * ``"store"``: ``geocon bench MANIFEST --db DB --rescore-versions`` with the preset /
      config the rows were scored with (``run_manifest(..., rescore_versions=True)``);
    * ``"pairs"``: ``geocon pairs MANIFEST --db DB --kind KIND --rescore-versions`` with the
      run's configuration options (``preference_pairs(..., rescore_versions=True)``): the
      rows are those of the kind's preset, which ``geocon bench`` does not score by default;
    * ``"jsonl"``: results files of ``geocon score --json`` (no store): score the clips again
      with ``geocon score ... --json``;
    * ``"rows"``: rows of an unknown source: the store's advice, then the results files'.

    ``config_hash`` (the rows' one) is named when given; ``kind`` is the reward kind of
    ``"pairs"``. ``unreachable`` (:func:`unreachable_config`: why this version cannot score
    the rows' configuration again) gives the advice for such rows instead: no option reaches
    them, so the manifest is scored again into a new store.
    """
    cfg = f" (config {config_hash})" if config_hash else ""
    if unreachable is not None:
        return _unreachable_advice(source, config_hash, unreachable)
    bench = ("`geocon bench MANIFEST --db DB --rescore-versions` with the --preset / --config / "
             f"size options these rows were scored with{cfg} "
             "(`run_manifest(..., rescore_versions=True)`)")
    score = ("score the clips again with `geocon score CLIP... --json` and the --preset / "
             f"--config / size options they were scored with{cfg}")
    if source == "store":
        return bench
    if source == "pairs":
        return (f"`geocon pairs MANIFEST --db DB --kind {kind or 'KIND'} --rescore-versions` "
                f"with the --config / --long-side / --max-frames / --stride of this run{cfg} "
                "(`preference_pairs(..., rescore_versions=True)`)")
    if source == "jsonl":
        return score
    if source == "rows":
        return f"{bench} for the rows of a store; for results files of geocon score --json, {score}"
    raise InputError(f"rescore_advice: source must be store, pairs, jsonl or rows, got "
                     f"{source!r}")


def _unreachable_advice(source: str, config_hash: Optional[str], why: str) -> str:
    """:func:`rescore_advice` for rows whose configuration this version cannot score again."""
    if source not in ("store", "pairs", "jsonl", "rows"):
        raise InputError(f"rescore_advice: source must be store, pairs, jsonl or rows, got "
                         f"{source!r}")
    old = f"config {config_hash}" if config_hash else "their old config"
    lead = (f"these rows' configuration is not one this version can score ({why}; the "
            "protocol changed since they were scored), so no re-scoring option reaches them: ")
    store = ("score the manifest again into a new --db with the options you mean (in this "
             f"store the rows stay under {old}, which a report shows while it holds the most "
             "rows: give `geocon report` the new config's --config-hash)")
    score = ("score the clips again with `geocon score CLIP... --json` and the options you "
             f"mean (this version cannot give {old})")
    if source in ("store", "pairs"):
        return lead + store
    if source == "jsonl":
        return lead + score
    return (f"{lead}{store} for the rows of a store; for results files of geocon score "
            f"--json, {score}")


def _outside_level() -> int:
    """The ``warnings.warn`` stacklevel, counted from the function that calls this one
    (level 1), of the first frame outside this module: the caller of the public statistic
    that led there, however deep the helpers in between."""
    frame = sys._getframe(2)  # the caller of the function that called this one: level 2
    level = 2
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    return level


def versions_to_warn(counts: Dict[str, int], errors: Optional[Dict[str, int]] = None) -> bool:
    """Whether scored rows with these :func:`version_counts` call for a version warning: more
    than one version, or one that is not the running ``__version__`` (rows that record none,
    "unknown", only beside another version); or error rows (``errors``:
    :func:`error_version_counts`) of another version than the running one ("unknown" left
    out)."""
    scored = len(counts) > 1 or (len(counts) == 1 and
                                 next(iter(counts)) not in (__version__, "unknown"))
    return scored or any(v not in (__version__, "unknown") for v in (errors or {}))


def _clips(n: int) -> str:
    return f"{n} clip{'s' if n != 1 else ''}"


def error_rows_by_age(errors: Dict[str, int]) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Error-row counts by version (:func:`error_version_counts`) split into (those of an
    older release, "unknown" left out: a hand-made row alone calls for no warning; those of a
    newer release), as the version warnings name them."""
    old = {v: n for v, n in errors.items() if v != "unknown" and is_older_version(v)}
    new = {v: n for v, n in errors.items() if is_newer_version(v, __version__)}
    return old, new


def error_rows_text(errors: Dict[str, int]) -> str:
    """``"1 error row of geocon_torch 0.2.4"`` (several versions: ``"2 error rows of
    geocon_torch 0.2.3, 1 error row of 0.2.4"``) for error-row counts by version."""
    return ", ".join(f"{n} error row{'s' if n != 1 else ''} of "
                     f"{'geocon_torch ' if i == 0 else ''}{v}"
                     for i, (v, n) in enumerate(errors.items()))


def _scored_text(counts: Dict[str, int], how: str, reachable: bool) -> str:
    """The warning's part about the scored rows (:func:`warn_mixed_versions`)."""
    newer = [v for v in counts if is_newer_version(v, __version__)]
    older = [v for v in counts if is_older_version(v)]
    redo = "to re-score them with it: " if reachable else ""
    upgrade = ("upgrade geocon_torch to compare them with it (re-scoring them with this one "
               "would replace a newer release's numbers with an older one's)")
    if len(counts) == 1:
        alone, n = next(iter(counts.items()))
        if newer:
            return (f"the rows hold results of geocon_torch {alone} ({_clips(n)}), newer than "
                    f"this {__version__}: their numbers may differ from those this version "
                    f"gives; {upgrade}")
        return (f"the rows hold results of geocon_torch {alone} ({_clips(n)}), and this is "
                f"{__version__}: a release keeps the config hash, so their numbers may differ "
                f"from those this version gives; {redo}{how}")
    listed = ", ".join(f"{v}: {_clips(n)}" for v, n in counts.items())
    text = (f"the rows hold results of {len(counts)} geocon_torch versions ({listed}) under one "
            f"config hash, which a release keeps: their numbers may differ; this is "
            f"{__version__}: ")
    which = "other versions" if not newer else f"older versions ({', '.join(older)})"
    parts = [(f"re-score the rows of the {which} with {how}" if reachable else
              f"the rows of the {which}: {how}")] if older else []
    if newer:
        parts.append(f"the rows of {', '.join(newer)} are newer than this version: {upgrade}")
    return text + "; ".join(parts)


def version_warning_text(counts: Dict[str, int], errors: Dict[str, int], how: str,
                         reachable: bool = True) -> str:
    """The text of :func:`warn_mixed_versions` for scored rows ``counts`` and error rows
    ``errors`` by version (:func:`version_counts`, :func:`error_version_counts`), the advice
    ``how`` that re-scores the older rows (:func:`rescore_advice`; ``reachable`` False: the
    advice for rows this version cannot score again), "" when nothing calls for a warning.
    Rows of a newer release get "upgrade" advice, never re-scoring."""
    parts = [_scored_text(counts, how, reachable)] if versions_to_warn(counts) else []
    old_err, new_err = error_rows_by_age(errors)
    if old_err:
        told = any(is_older_version(v) for v in counts) and bool(parts)
        redo = ("the same advice re-scores them" if told else
                f"to re-score them with it: {how}" if reachable else how)
        parts.append(f"the rows {'also ' if parts else ''}hold {error_rows_text(old_err)}, "
                     f"and this is {__version__}: an older release's refusal, which this "
                     f"version may score (error rows enter no statistic); {redo}")
    if new_err:
        parts.append(f"the rows {'also ' if parts else ''}hold {error_rows_text(new_err)}, "
                     f"newer than this {__version__}: upgrade geocon_torch to compare")
    return "; ".join(parts)


def warn_mixed_versions(rows: Iterable[Dict[str, Any]], *, stacklevel: Optional[int] = None,
                        how: Optional[str] = None) -> Dict[str, int]:
    """Warn (UserWarning) when the scored rows record more than one geocon_torch version, or
    (a softer text) one version that is not the running ``geocon_torch.__version__``, or when
    error rows record another version than the running one.

    The config hash names the protocol, not the package, so a store keeps the rows of an older
    release after an upgrade and new clips get rows of the new one: a statistic over both may
    pool different numbers for the same clip, and one over the old rows only ranks with the
    old release's numbers. This warns rather than raises (an upgrade that changed no number
    must not break the statistics), naming each version with its number of clips, the running
    version and the way to re-score the older rows (``how``, naming the rows' config hash when
    they have one). Rows that record no version (hand-made rows: "unknown") warn only beside
    another version. Error rows of an older release are named too (a refusal the running
    version may not give; they enter no statistic); rows of a newer release (by release
    order, :func:`is_newer_version`) get "upgrade geocon_torch", never re-score advice. When
    the older rows' configuration cannot be scored again by this version
    (:func:`unreachable_config`) the advice says so instead of naming a re-scoring option.

    Args:
        rows: joined or flat rows (:func:`version_counts`).
        stacklevel: as ``warnings.warn``'s, counted from this function (2: its caller); None:
            the first caller outside this module (the caller of the public statistic).
        how: the command that re-scores these rows (:func:`rescore_advice`; default its
            advice for rows of an unknown source).

    Returns:
        :func:`version_counts` of ``rows``.
    """
    rows = list(rows)
    counts, errors = version_counts(rows), error_version_counts(rows)
    if not versions_to_warn(counts, errors):
        return counts
    hashes = {str(r["config_hash"]) for r in rows if r.get("config_hash") is not None}
    cfg = next(iter(hashes)) if len(hashes) == 1 else None
    why = unreachable_config(older_rows(rows))
    if why is not None:  # a caller's `how` names an option that cannot reach these rows
        how = rescore_advice("rows" if how is None else "store", cfg, unreachable=why)
    how = how or rescore_advice("rows", cfg)
    level = _outside_level() if stacklevel is None else stacklevel
    text = version_warning_text(counts, errors, how, reachable=why is None)
    if text:
        warnings.warn(text, UserWarning, stacklevel=level)
    return counts


def _flat(rows: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Flat rows (:func:`flatten_row`, the result under ``_result``) of ONE configuration:
    rows of several config hashes are an InputError naming them (a statistic never pools
    configurations; pick one with ``load_results(db, config_hash=...)``); rows of several
    package versions are pooled with a UserWarning (:func:`warn_mixed_versions`)."""
    flat: List[Dict[str, Any]] = []
    fresh: List[Dict[str, Any]] = []  # not flattened here before (by a calling statistic)
    for r in rows:
        if "result" in r:
            r = {**flatten_row(r), "_result": r["result"]}
            fresh.append(r)
        elif "_result" not in r:
            fresh.append(r)
        flat.append(r)
    hashes = sorted({str(r["config_hash"]) for r in flat if r.get("config_hash") is not None})
    if len(hashes) > 1:
        raise InputError(f"the rows hold results of {len(hashes)} configurations "
                         f"({', '.join(hashes[:5])}{', ...' if len(hashes) > 5 else ''}): a "
                         "statistic never pools configurations; pass the rows of one, e.g. "
                         "load_results(db, config_hash=...)")
    # once per statistic: rows a calling statistic flattened here were counted there
    warn_mixed_versions(fresh)
    return flat


def _number(v: Any) -> bool:
    """A finite int or float (not a bool): a value the statistics may use."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))


def _ok_values(flat: List[Dict[str, Any]], metric: str) -> List[Tuple[Dict[str, Any], float]]:
    return [(r, float(r[metric])) for r in flat
            if r.get("status") == "ok" and _number(r.get(metric))]


def scene_values(rows: Iterable[Dict[str, Any]], metric: str, *, reduce: str = "median"
                 ) -> Dict[str, float]:
    """One value per scene: the ``reduce`` of the metric over the scene's ok clips."""
    per_scene: Dict[str, List[float]] = defaultdict(list)
    for r, v in _ok_values(_flat(rows), metric):
        per_scene[str(r.get("scene") or scene_key(r.get("prompt_category"), r.get("prompt"),
                                                  r.get("seed"), r.get("clip_id")))].append(v)
    fn = _STATS[reduce]
    return {s: float(fn(np.asarray(v))) for s, v in sorted(per_scene.items())}


def _group(flat: List[Dict[str, Any]], by: Sequence[str]) -> Dict[Tuple, List[Dict[str, Any]]]:
    """Rows grouped by the values of the ``by`` columns (missing: "-"). A retired column name
    (``model``: the generator) still groups by its column now, with a DeprecationWarning."""
    cols = []
    for k in by:
        if k in RETIRED_COLUMNS:
            retired_name(f"grouping by {k!r}", repr(RETIRED_COLUMNS[k]), stacklevel=4)
        cols.append(RETIRED_COLUMNS.get(k, k))
    groups: Dict[Tuple, List[Dict[str, Any]]] = defaultdict(list)
    for r in flat:
        groups[tuple(str(r.get(k)) if r.get(k) is not None else "-" for k in cols)].append(r)
    return dict(sorted(groups.items()))


def scene_balanced(rows: Iterable[Dict[str, Any]], metric: str, *,
                   by: Sequence[str] = ("generator", "prompt_category"),
                   statistic: str = "median",
                   n_boot: int = 10_000, seed: int = 0) -> List[Dict[str, Any]]:
    """Scene-balanced ``statistic`` of ``metric`` per group with its bootstrap CI (sec. 4.4).

    Returns one dict per group: the ``by`` keys, ``metric``, ``value``, ``lo``, ``hi``,
    ``n_scenes``, ``n_clips`` (ok clips with the metric) and ``n_rows`` (all rows).
    """
    out = []
    for key, members in _group(_flat(rows), by).items():
        sv = scene_values(members, metric, reduce=statistic)
        est = bootstrap_ci(list(sv.values()), statistic=statistic, n_boot=n_boot, seed=seed)
        out.append({**dict(zip(by, key)), "metric": metric, "value": est.value, "lo": est.lo,
                    "hi": est.hi, "n_scenes": est.n,
                    "n_clips": len(_ok_values(members, metric)), "n_rows": len(members)})
    return out


def status_counts(rows: Iterable[Dict[str, Any]], by: Sequence[str] = ("generator",)
                  ) -> List[Dict[str, Any]]:
    """Counts of ok / not_applicable / error per group (nothing is silently dropped)."""
    out = []
    for key, members in _group(_flat(rows), by).items():
        c = Counter(r.get("status") for r in members)
        out.append({**dict(zip(by, key)), "n": len(members), "ok": c.get("ok", 0),
                    "not_applicable": c.get("not_applicable", 0), "error": c.get("error", 0)})
    return out


def _per_generator(rows: Iterable[Dict[str, Any]], columns: Sequence[Tuple[str, str, float]],
                   statistic: str, n_boot: int, seed: int) -> List[Dict[str, Any]]:
    """Per generator, per ``(column, metric, scale)``: the scene-balanced ``statistic`` of the
    metric with its bootstrap CI (``column``, ``_lo``, ``_hi``, times ``scale``) and
    ``_scenes``."""
    out = []
    for (generator,), members in _group(_flat(rows), ("generator",)).items():
        rec: Dict[str, Any] = {"generator": generator}
        for col, metric, scale in columns:
            sv = scene_values(members, metric, reduce=statistic)
            est = bootstrap_ci(list(sv.values()), statistic=statistic, n_boot=n_boot, seed=seed)
            f = (lambda v: None if v is None else v * scale)  # noqa: E731
            rec.update({col: f(est.value), f"{col}_lo": f(est.lo), f"{col}_hi": f(est.hi),
                        f"{col}_scenes": est.n})
        out.append(rec)
    return out


def table1(rows: Iterable[Dict[str, Any]], *, statistic: str = "mean", n_boot: int = 10_000,
           seed: int = 0) -> List[Dict[str, Any]]:
    """Table-1 style summary per generator: IR (%), GE (px), AdaDFRC (clip mean over objects) as
    scene-balanced ``statistic`` over all prompt categories (the paper's table uses means), with
    CIs and the number of scenes behind each column."""
    return _per_generator(rows, (("ir_pct", "ir", 100.0), ("ge_px", "ge_px", 1.0),
                             ("adadfrc", "adadfrc_mean", 1.0)), statistic, n_boot, seed)


def headline(rows: Iterable[Dict[str, Any]], *, statistic: str = "mean", n_boot: int = 10_000,
             seed: int = 0) -> List[Dict[str, Any]]:
    """Per generator: the scene-balanced ``statistic`` of the clips' headline ``score``
    (``result["score"]``, in [0, 1], higher is better; :mod:`geocon_torch.measures.headline`)
    with its bootstrap CI (``score``, ``score_lo``, ``score_hi``) and ``score_scenes``."""
    return _per_generator(rows, (("score", "score", 1.0),), statistic, n_boot, seed)


PASS_FLAGS = (("pass", "background_pass"), ("pass_calibrated", "background_pass_calibrated"))


def pass_rates(rows: Iterable[Dict[str, Any]], *, n_boot: int = 10_000, seed: int = 0
               ) -> List[Dict[str, Any]]:
    """Per generator: the scene-balanced fraction of ok clips that pass the paper's report gate
    (``pass``: the flat rows' ``background_pass``) and the calibrated one (``pass_calibrated``:
    ``background_pass_calibrated``), each with its bootstrap CI (``_lo``, ``_hi``) and
    ``_scenes``. A clip whose flag is not recorded (no background block, calibration off)
    counts in neither numerator nor denominator; a generator without any gets ``None``."""
    flat = [{**r, **{f"_{col}": float(r[flag]) for col, flag in PASS_FLAGS
                     if isinstance(r.get(flag), bool)}} for r in _flat(rows)]
    return _per_generator(flat, tuple((col, f"_{col}", 1.0) for col, _ in PASS_FLAGS), "mean",
                          n_boot, seed)


EPIPOLAR_TRIO = ("epipolar_error", "epipolar_inlier_rate", "feature_match_coverage")


def epipolar_trio(rows: Iterable[Dict[str, Any]], *, statistic: str = "median",
                  n_boot: int = 10_000, seed: int = 0) -> List[Dict[str, Any]]:
    """Per generator: scene-balanced epipolar_error (px), epipolar_inlier_rate and
    feature_match_coverage with CIs (the WorldAtlas / GVGC trio)."""
    return _per_generator(rows, tuple((m, m, 1.0) for m in EPIPOLAR_TRIO), statistic, n_boot,
                          seed)


# --- gate calibration (sec. 6.2, appendix B) -------------------------------------------------
def calibration_curve(t: Sequence[float], is_f: Sequence[bool], n_bins: int = 12,
                      z: float = Z95) -> Dict[str, np.ndarray]:
    """Empirical P(F | t) with equal-count bins and Wilson CIs (paper sec. 6.2, eq. 16).

    Samples are sorted by t and split into ``n_bins`` consecutive bins whose sizes differ by at
    most one (``numpy.array_split`` of the sorted order; ties may straddle a bin edge).

    Returns arrays of length K = min(n_bins, n): ``t_mean``, ``t_median``, ``t_min``,
    ``t_max``, ``count``, ``k`` (F count), ``p_hat``, ``lo``, ``hi``.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(is_f, dtype=bool)
    if t.shape != y.shape or t.ndim != 1:
        raise InputError(f"t and is_f must be 1-D of equal length, got {t.shape} and {y.shape}")
    keep = np.isfinite(t)
    t, y = t[keep], y[keep]
    n = t.size
    k_bins = min(int(n_bins), n)
    if k_bins == 0:
        empty = np.zeros(0)
        return {k: empty for k in ("t_mean", "t_median", "t_min", "t_max", "count", "k",
                                   "p_hat", "lo", "hi")}
    order = np.argsort(t, kind="stable")
    ts, ys = t[order], y[order].astype(np.float64)
    counts = np.array([len(c) for c in np.array_split(np.arange(n), k_bins)])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    k = np.add.reduceat(ys, starts)
    t_mean = np.add.reduceat(ts, starts) / counts
    ends = starts + counts - 1
    mid_lo, mid_hi = starts + (counts - 1) // 2, starts + counts // 2
    p, lo, hi = wilson_interval(k, counts, z)
    return {"t_mean": t_mean, "t_median": (ts[mid_lo] + ts[mid_hi]) / 2, "t_min": ts[starts],
            "t_max": ts[ends], "count": counts, "k": k, "p_hat": p, "lo": lo, "hi": hi}


def gate_observations(rows: Iterable[Dict[str, Any]], method: Optional[str] = None
                      ) -> Dict[str, Any]:
    """(t, is_f_expected, method) from ok rows with a finite gate statistic and a designed
    regime (the expected regime of the row's ``prompt_category``: C1/C2/C4 -> H, C3/C5/C6 ->
    F), sorted by (t, clip id, prompt category, generator): the same rows in any order give the
    same observations (and the same seeded bootstrap over them).

    ``method`` defaults to the most common gate method (statistics of different methods are
    not comparable and are never mixed)."""
    flat = [r for r in _flat(rows) if r.get("status") == "ok"
            and _number(r.get("gate_statistic"))  # NaN / inf: missing, as every statistic
            and expected_regime(r.get("prompt_category")) is not None]
    if method is None and flat:
        method = Counter(r.get("gate_method") for r in flat).most_common(1)[0][0]
    flat = sorted((r for r in flat if r.get("gate_method") == method),
                  key=lambda r: (float(r["gate_statistic"]), str(r.get("clip_id")),
                                 str(r.get("prompt_category")), str(r.get("generator"))))
    return {"t": np.array([r["gate_statistic"] for r in flat], dtype=np.float64),
            "is_f": np.array([expected_regime(r["prompt_category"]) == "F" for r in flat],
                             dtype=bool),
            "method": method, "clips": [r.get("clip_id") for r in flat]}


def net_benefit(t: Sequence[float], is_f: Sequence[bool], thresholds: Sequence[float],
                costs: Sequence[float] = (0.5, 1.0, 2.0)) -> Dict[str, np.ndarray]:
    """Net benefit NB(tau) = (TP - c FP) / N (appendix B, eq. 18), predicting F when t > tau.

    TP: F-expected samples gated F; FP: H-expected samples gated F. Returns ``thresholds``
    (T,), ``costs`` (C,), ``tp``, ``fp`` (T,) and ``nb`` (C, T); one broadcast, no loops.
    """
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(is_f, dtype=bool)
    tau = np.asarray(thresholds, dtype=np.float64)
    c = np.asarray(costs, dtype=np.float64)
    pred = t[None, :] > tau[:, None]  # (T, N)
    tp = (pred & y[None]).sum(1).astype(np.float64)
    fp = (pred & ~y[None]).sum(1).astype(np.float64)
    n = max(t.size, 1)
    return {"thresholds": tau, "costs": c, "tp": tp, "fp": fp,
            "nb": (tp[None, :] - c[:, None] * fp[None, :]) / n}


def balanced_accuracy_bootstrap(t: Sequence[float], is_f: Sequence[bool],
                                thresholds: Sequence[float] = (0.02, 0.03, 0.04, 0.06, 0.08),
                                *, n_boot: int = 400, seed: int = 0) -> Dict[str, np.ndarray]:
    """Appendix B: balanced accuracy of "F iff t > tau" per threshold, bootstrapped over
    observations (B = 400): ``mean``, ``lo``, ``hi`` (95%), ``point`` (on the data) per
    threshold and ``best_counts`` (how often each threshold is the best of a resample).
    Balanced accuracy needs both classes: ``point`` is NaN when the data lack one, and the
    resamples that lack one are left out of ``mean`` / ``lo`` / ``hi`` / ``best_counts``
    (NaN / 0 when none has both)."""
    t = np.asarray(t, dtype=np.float64)
    y = np.asarray(is_f, dtype=bool)
    tau = np.asarray(thresholds, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = np.concatenate([np.arange(t.size)[None], rng.integers(0, t.size, (n_boot, t.size))])
    tb, yb = t[idx], y[idx]  # (B+1, N)
    pred = tb[None] > tau[:, None, None]  # (T, B+1, N)
    pos = yb.sum(1)
    neg = (~yb).sum(1)
    both = (pos > 0) & (neg > 0)  # (B+1,) resamples with both classes
    tpr = (pred & yb[None]).sum(2) / np.maximum(pos, 1)
    tnr = (~pred & ~yb[None]).sum(2) / np.maximum(neg, 1)
    bacc = np.where(both[None], 0.5 * (tpr + tnr), np.nan)  # (T, B+1)
    reps = bacc[:, 1:][:, both[1:]]
    if reps.shape[1] == 0:
        nan = np.full(tau.size, np.nan)
        return {"thresholds": tau, "point": bacc[:, 0], "mean": nan, "lo": nan, "hi": nan.copy(),
                "best_counts": np.zeros(tau.size, dtype=np.int64)}
    best = np.bincount(reps.argmax(0), minlength=tau.size)
    lo, hi = np.quantile(reps, [0.025, 0.975], axis=1)
    return {"thresholds": tau, "point": bacc[:, 0], "mean": reps.mean(1), "lo": lo, "hi": hi,
            "best_counts": best}


# --- sensitivity, percentile alignment ------------------------------------------------------
def report_gate_sensitivity(rows: Iterable[Dict[str, Any]], *,
                            ir_thresholds: Sequence[float] = (0.90, 0.93, 0.95, 0.97, 0.99),
                            ge_thresholds: Sequence[float] = (1.0, 2.0, 3.5, 5.0, 8.0),
                            by: Sequence[str] = ("generator",)) -> List[Dict[str, Any]]:
    """Threshold-score sensitivity of the report gate (IR >= a and GE <= d): per group the
    pass fraction on the (A, D) grid with Wilson CIs, ``pass`` / ``lo`` / ``hi`` as (A, D)
    nested lists, over ok clips having both IR and GE."""
    a = np.asarray(ir_thresholds, dtype=np.float64)
    d = np.asarray(ge_thresholds, dtype=np.float64)
    out = []
    for key, members in _group(_flat(rows), by).items():
        both = [(r["ir"], r["ge_px"]) for r in members if r.get("status") == "ok"
                and _number(r.get("ir")) and _number(r.get("ge_px"))]
        ir = np.array([b[0] for b in both])
        ge = np.array([b[1] for b in both])
        k = ((ir[None, None] >= a[:, None, None]) & (ge[None, None] <= d[None, :, None])).sum(-1)
        p, lo, hi = wilson_interval(k, np.full(k.shape, len(both)))
        out.append({**dict(zip(by, key)), "ir_thresholds": a.tolist(),
                    "ge_thresholds": d.tolist(), "n": len(both), "pass": p.tolist(),
                    "lo": lo.tolist(), "hi": hi.tolist()})
    return out


def inlier_threshold_sensitivity(rows: Iterable[Dict[str, Any]], *,
                                 by: Sequence[str] = ("generator",)) -> List[Dict[str, Any]]:
    """Threshold-score scans over the inlier thresholds (tau_H, tau_F) stored by the pipeline
    in ``background.sensitivity`` ({"tau_h": [...], "ir_h": [...], "ge_h_px": [...],
    "tau_f": [...], "ir_f": [...], "ge_f_px": [...]}; null entries for unfit thresholds):
    per group and threshold the median over clips of IR / GE and the clip count."""
    out = []
    for key, members in _group(_flat(rows), by).items():
        rec: Dict[str, Any] = dict(zip(by, key))
        for fam in ("h", "f"):
            taus: Optional[List[float]] = None
            irs, ges = [], []
            for r in members:
                sens = ((r.get("_result") or {}).get("background") or {}).get("sensitivity")
                if r.get("status") != "ok" or not isinstance(sens, dict):
                    continue
                tau = sens.get(f"tau_{fam}")
                if not tau or (taus is not None and list(tau) != taus):
                    continue
                taus = list(tau)
                irs.append([np.nan if v is None else v for v in sens.get(f"ir_{fam}", [])])
                ges.append([np.nan if v is None else v for v in sens.get(f"ge_{fam}_px", [])])
            if taus is None:
                continue
            irs_a = np.asarray([v for v in irs if len(v) == len(taus)], dtype=np.float64)
            ges_a = np.asarray([v for v in ges if len(v) == len(taus)], dtype=np.float64)
            rec[f"tau_{fam}"] = taus
            for name, arr in ((f"ir_{fam}", irs_a), (f"ge_{fam}_px", ges_a)):
                if arr.size == 0:
                    rec[name], rec[f"{name}_n"] = [None] * len(taus), [0] * len(taus)
                    continue
                n = np.isfinite(arr).sum(0)
                med = np.nanmedian(np.where(n[None] > 0, arr, 0.0), axis=0)
                rec[name] = [float(m) if c else None for m, c in zip(med, n)]
                rec[f"{name}_n"] = n.tolist()
        out.append(rec)
    return out


def percentile_aligned(rows: Iterable[Dict[str, Any]], *, x: str = "ir", y: str = "ge_px",
                       percentiles: Sequence[float] = (10, 25, 50, 75, 90), band: float = 10.0,
                       by: Sequence[str] = ("generator",)) -> List[Dict[str, Any]]:
    """Percentile-aligned summaries: for each percentile q of ``x`` within a group, the value
    ``x_q`` and the median of ``y`` over clips whose ``x`` lies between the (q - band) and
    (q + band) percentiles ("GE at matched IR percentiles"), so groups are compared at the same
    rank instead of the same absolute score. Also the plain q-quantile of ``y``."""
    q = np.asarray(percentiles, dtype=np.float64)
    out = []
    for key, members in _group(_flat(rows), by).items():
        pairs = [(r[x], r[y]) for r in members if r.get("status") == "ok"
                 and _number(r.get(x)) and _number(r.get(y))]
        rec = {**dict(zip(by, key)), "x": x, "y": y, "percentiles": q.tolist(), "n": len(pairs)}
        if not pairs:
            rec.update({"x_q": [None] * q.size, "y_at_x_q": [None] * q.size,
                        "y_q": [None] * q.size, "band_n": [0] * q.size})
            out.append(rec)
            continue
        xv = np.array([p[0] for p in pairs], dtype=np.float64)
        yv = np.array([p[1] for p in pairs], dtype=np.float64)
        lo = np.percentile(xv, np.clip(q - band, 0, 100))
        hi = np.percentile(xv, np.clip(q + band, 0, 100))
        inside = (xv[None] >= lo[:, None]) & (xv[None] <= hi[:, None])  # (Q, n)
        yy = np.where(inside, yv[None], np.nan)
        cnt = inside.sum(1)
        med = np.nanmedian(np.where(cnt[:, None] > 0, yy, 0.0), axis=1)
        rec.update({"x_q": np.percentile(xv, q).tolist(),
                    "y_at_x_q": [float(m) if c else None for m, c in zip(med, cnt)],
                    "y_q": np.percentile(yv, q).tolist(), "band_n": cnt.tolist()})
        out.append(rec)
    return out


# --- dynamics (sec. 6.6) --------------------------------------------------------------------
def object_table(rows: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """One record per foreground object of ok clips: generator, prompt_category, clip_id, object
    id, adap90, adadfrc_mean and the clip's background pass flag."""
    out = []
    for r in _flat(rows):
        if r.get("status") != "ok":
            continue
        fg = (r.get("_result") or {}).get("foreground") or {}
        for o in fg.get("objects") or []:
            if isinstance(o, dict) and isinstance(o.get("adap90"), (int, float)):
                out.append({"generator": r.get("generator"),
                            "prompt_category": r.get("prompt_category"),
                            "clip_id": r.get("clip_id"), "object": o.get("id"),
                            "adap90": float(o["adap90"]),
                            "adadfrc_mean": o.get("adadfrc_mean"),
                            "background_pass": r.get("background_pass")})
    return out


def adap90_anomalies(rows: Iterable[Dict[str, Any]], *, quantile: float = 0.8,
                     by: Sequence[str] = ("generator", "prompt_category")) -> Dict[str, Any]:
    """AdaP90 (eq. 17) audit: per (generator, prompt category) the P80 threshold of object AdaP90,
    the anomaly rate (objects above it; ~20% by construction, descriptive only) with a Wilson
    CI, median, P90 and max, plus the rate of "dynamic anomaly & background good" clips
    (an object above its group's P80 while the background passes the report gate)."""
    objs = object_table(rows)
    groups = _group(objs, by)  # the same group labels as the other tables
    table = []
    anomalous_clips = set()
    for key, members in groups.items():
        v = np.array([o["adap90"] for o in members])
        thr = float(np.quantile(v, quantile))
        above = v > thr
        p, lo, hi = wilson_interval(int(above.sum()), v.size)
        for o, a in zip(members, above):
            o["anomaly"] = bool(a)
            if a:
                anomalous_clips.add((o["clip_id"], o["background_pass"]))
        table.append({**dict(zip(by, key)), "n_objects": int(v.size), "p80": thr,
                      "anomaly_rate": float(p), "lo": float(lo), "hi": float(hi),
                      "median": float(np.median(v)), "p90": float(np.quantile(v, 0.9)),
                      "max": float(v.max())})
    clips_with_objects = {o["clip_id"] for o in objs}
    both = {c for c, good in anomalous_clips if good}
    k, n = len(both), len(clips_with_objects)
    p, lo, hi = wilson_interval(k, n)
    return {"groups": table, "objects": objs,
            "dynamic_anomaly_background_good": {"k": k, "n": n, "rate": float(p) if n else None,
                                                "lo": float(lo), "hi": float(hi)}}
