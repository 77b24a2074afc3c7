"""``geocon report``: one static HTML page (plus PNGs in ``img/``) from a results store or a
JSON-lines file: leaderboard (Table-1 style, epipolar trio, status counts), per-prompt-category
scene-balanced medians with bootstrap CIs, IR / GE distributions, the gate statistic histogram
with its configured thresholds (and the range of the per-clip, noise-adaptive bands, in
reference px for ``parallax_magnitude``), gate calibration (equal-count bins, Wilson CIs) and
net benefit, threshold-score sensitivity curves, percentile-aligned summaries, AdaP90 P80
anomaly rates, the list of clips that were not scored (with reasons), and per-clip audit cards.
"""
from __future__ import annotations

import datetime
import html
import re
from collections import Counter, defaultdict
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._progress_bar import tqdm
from .._version import __version__
from ..bench import stats
from ..bench.pg_store import mask_url
from ..bench.store import config_counts, flatten_row, load_results, results_file
from ..categories import expected_regime
from ..errors import InputError
from ..io._atomic import atomic_write_text
from ..measures.calibration import fmt_apart
from . import plots
from .audit import audit_card
from .text import compact, configured_band, counts_html, esc, gate_unit, label

CSS = """
body{font-family:system-ui,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;max-width:1200px;
color:#222}
h1{font-size:1.6em}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:2em}
table{border-collapse:collapse;margin:8px 0;font-size:0.9em}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.card{border:1px solid #bbb;border-radius:6px;padding:10px;margin:14px 0}
.card table.facts td{text-align:left}figure{display:inline-block;margin:6px;vertical-align:top}
figure img{max-width:560px;border:1px solid #eee}figcaption{font-size:0.8em;color:#555}
.err{color:#a00}.muted{color:#666;font-size:0.85em}
td,th,h2,h3,caption,figcaption,code{overflow-wrap:anywhere;word-break:break-word}
.tw{overflow-x:auto}caption{text-align:left;font-weight:bold;padding:2px 0}
.warn{background:#fff3cd;border:1px solid #d39e00;border-radius:4px;padding:6px 10px}
table.kv{font-size:0.85em;margin:4px 0}table.kv th,table.kv td{padding:1px 6px}
"""


#: stated once under the page header (what :func:`_f` does)
ROUNDING_NOTE = (
    "Numbers are rounded to 4 significant digits (scores, rates and fractions to 3), with more "
    "digits where they are needed to tell a value from its threshold or from 1 (100 %). IR is "
    "a fraction in [0, 1] except in the leaderboard's IR (%). 95% CIs in [brackets] "
    "(\"n/a: 1 scene\" where a group has one scene: the bootstrap has no spread).")
#: column / axis names of the per-clip metrics (IR is a fraction here, GE in px)
METRIC_NAMES = {"ir": "IR (fraction)", "ge_px": "GE (px)"}


def _f(v: Any, digits: int = 4, near: Optional[float] = None) -> str:
    """A number cell: ``digits`` significant digits, more where the value would print as
    ``near`` (an IR of 0.99996 against 1, a rate against 1, IR % against 100); "-" for None /
    NaN / inf; other values escaped."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if not np.isfinite(v):
            return "-"
        return fmt_apart(v, near, digits=digits) if near is not None else f"{v:.{digits}g}"
    return esc(v)


def _l(v: Any) -> str:
    """A label cell (generator, prompt category, behaviour): "unknown" when missing; escaped
    and bidi-isolated (:func:`~.text.esc`)."""
    return esc(label(v))


def _ci(rec: Dict[str, Any], key: str, digits: int = 4, near: Optional[float] = None) -> str:
    """``rec[key]`` with its 95% CI ``[key_lo, key_hi]``; "[n/a: 1 scene]" instead of the
    interval when ``rec[key_scenes]`` is 1 (one value: the bootstrap has no spread)."""
    v, lo, hi = rec.get(key), rec.get(f"{key}_lo"), rec.get(f"{key}_hi")
    if v is None:
        return "-"
    if rec.get(f"{key}_scenes") == 1:
        return f"{_f(v, digits, near)} <span class='muted'>[n/a: 1 scene]</span>"
    return (f"{_f(v, digits, near)} <span class='muted'>[{_f(lo, digits, near)}, "
            f"{_f(hi, digits, near)}]</span>")


def _table(header: Sequence[str], rows: List[Sequence[str]], left: int = 1,
           caption: Optional[str] = None) -> str:
    """A table (header cells ``scope="col"``, the first ``left`` columns left-aligned) with
    an optional ``<caption>``, in a horizontally scrolling wrapper."""
    th = "".join(f"<th scope='col' class='{'l' if i < left else ''}'>{html.escape(h)}</th>"
                 for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f"<td class='{'l' if i < left else ''}'>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<div class='tw'><table>{cap}<thead><tr>{th}</tr></thead>{body}</table></div>"


def _img(src: Path, out: Path, caption: str, alt: str) -> str:
    """A ``<figure>``: ``alt`` says what the image shows, ``caption`` what kind of figure it
    is (they differ: a screen reader reads both)."""
    rel = Path(src).relative_to(out).as_posix()
    return f'<figure><img src="{html.escape(rel)}" alt="{html.escape(alt)}">' \
           f"<figcaption>{html.escape(caption)}</figcaption></figure>"


def _thresholds(gate: Optional[Dict[str, Any]]) -> Dict[str, float]:
    th = (gate or {}).get("thresholds")
    if isinstance(th, dict):
        return {str(k): v for k, v in th.items() if isinstance(v, (int, float))}
    if isinstance(th, (list, tuple)):
        return {f"t{i}": v for i, v in enumerate(th) if isinstance(v, (int, float))}
    return {}


def _pick_cards(flat: List[Dict[str, Any]], n: int, explicit: Optional[Sequence[str]]) -> List[str]:
    if explicit:
        missing = [c for c in explicit if not any(r["clip_id"] == c for r in flat)]
        if missing:
            raise InputError(f"--clips: no clip {', '.join(map(repr, missing))} among the "
                             f"{len(flat)} results of the chosen config")
        return list(dict.fromkeys(explicit))  # a clip named twice gets one card (unique ids)
    ok = [r for r in flat if r.get("status") == "ok" and r.get("ir") is not None]
    ok.sort(key=lambda r: (bool(r.get("background_pass")), r["ir"], -(r.get("ge_px") or 0)))
    picked = [r["clip_id"] for r in ok[: max(0, n - n // 3)]]
    if ok and n // 3:
        picked += [r["clip_id"] for r in ok[::-1][: n // 3] if r["clip_id"] not in picked]
    others = [r["clip_id"] for r in flat if r.get("status") != "ok"]
    return (picked + others)[:n]


@dataclass
class _Page:
    """What every section reads: the flat rows of the chosen config (each with its result dict
    under ``_result``), the page folder, its image folder and the bootstrap settings."""

    flat: List[Dict[str, Any]]
    out: Path
    img: Path
    n_boot: int
    seed: int

    @property
    def boot(self) -> Dict[str, int]:
        """Keyword arguments of every bootstrap statistic on the page."""
        return {"n_boot": self.n_boot, "seed": self.seed}

    def figure(self, src: Path, caption: str, alt: str) -> str:
        """An ``<figure>`` for a PNG written under :attr:`img` (see :func:`_img`)."""
        return _img(src, self.out, caption, alt)


def _chosen_rows(source: Union[str, Path, List[Dict[str, Any]]], config_hash: Optional[str]
                 ) -> Tuple[List[Dict[str, Any]], str, Counter, Optional[str]]:
    """(rows of the chosen config, source name, config-hash counts, chosen hash); the chosen
    hash is ``config_hash`` or the most common one (the first of those with most rows in the
    source's order on a tie).

    A store or JSONL file is counted per config first (:func:`~geocon_torch.bench.store.
    config_counts`: SQL on a store, a light pass over a JSONL file) and only the chosen
    config's rows are loaded: the cost of a report follows the config shown, not the store's
    whole history. A JSONL file still has every line checked against the schema.
    """
    if isinstance(source, list):
        rows: Optional[List[Dict[str, Any]]] = list(source)
        src_name = "rows"
        hashes = Counter(r.get("config_hash") for r in rows)
    else:
        rows, src_name = None, mask_url(str(source))
        hashes = Counter(config_counts(source))
    chosen = config_hash or (hashes.most_common(1)[0][0] if hashes else None)
    if rows is None:  # schema errors of the source come first, as when everything was loaded
        rows = load_results(source, config_hash=chosen)
    if not hashes:
        raise InputError(f"{src_name} holds no results (0 rows): nothing to report; write some "
                         f"with geocon score --json or geocon bench")
    if config_hash is not None and config_hash not in hashes:
        known = ", ".join(f"{h} ({n} rows)" for h, n in hashes.most_common(5)) or "none"
        raise InputError(f"--config-hash {config_hash}: no result in {src_name} has it "
                         f"(its config hashes: {known})")
    return [r for r in rows if r.get("config_hash") == chosen], src_name, hashes, chosen


def _source_kind(source: Union[str, Path, List[Dict[str, Any]]]) -> str:
    """Where the rows come from, for :func:`~geocon_torch.bench.stats.rescore_advice`: "store"
    (a SQLite file or a server), "jsonl" (results files of ``geocon score --json``) or "rows"
    (rows given in code)."""
    if isinstance(source, list):
        return "rows"
    return "store" if results_file(source) is None else "jsonl"


def _versions_warning(flat: List[Dict[str, Any]], source: str = "rows",
                      config_hash: Optional[str] = None) -> List[str]:
    """A visible warning when the shown rows were not all scored by the installed
    geocon_torch (the config hash names the protocol, not the package, so a store keeps an
    older release's rows after an upgrade): scored rows of more than one version, or of one
    version that is not the installed one (rows that record none, "unknown", only beside
    another), naming each version with its number of scored clips
    (:func:`~geocon_torch.bench.stats.version_counts`), the installed version and how to
    re-score the older ones from this ``source``
    (:func:`~geocon_torch.bench.stats.rescore_advice`); error rows of another version
    (:func:`~geocon_torch.bench.stats.error_version_counts`: an older release's refusal,
    which the installed one may score); rows of a newer release (by release order) are told
    to upgrade, never to re-score; older rows whose configuration the installed version
    cannot score again (:func:`~geocon_torch.bench.stats.unreachable_config`) get that advice
    instead. Which rows enter the statistics does not change (ok rows). Nothing otherwise."""
    versions, errors = stats.version_counts(flat), stats.error_version_counts(flat)
    if not stats.versions_to_warn(versions, errors):
        return []
    why = stats.unreachable_config(stats.older_rows(flat))
    how = re.sub(r"`([^`]*)`", r"<code>\1</code>",
                 esc(stats.rescore_advice(source, config_hash, unreachable=why)))
    how = how[:1].upper() + how[1:] if why is not None else how
    older = [v for v in versions if stats.is_older_version(v)]
    newer = [v for v in versions if stats.is_newer_version(v, __version__)]
    text = _versions_found(versions, newer) if stats.versions_to_warn(versions) else ""
    if older and stats.versions_to_warn(versions):
        whose = ("these clips" if len(versions) == 1 else
                 "the clips of the other versions" if not newer else
                 f"the clips of the older versions ({esc(', '.join(older))})")
        text += (f"To re-score {whose} with the installed one: {how}; then build the report "
                 "again. " if why is None else f"{how}; then build the report again. ")
    if newer:
        text += (f"The clips of {esc(', '.join(newer))} were scored by a newer geocon_torch: "
                 "upgrade geocon_torch to compare them (re-scoring them with the installed one "
                 "would replace a newer release's numbers with an older one's). ")
    text += _error_rows_note(errors, how, told=bool(older) and stats.versions_to_warn(versions),
                             reachable=why is None, first=not text)
    return [f"<p class='warn'>{text.rstrip()}</p>"]


def _versions_found(versions: Dict[str, int], newer: List[str]) -> str:
    """The version box's opening sentences for the scored clips (:func:`_versions_warning`)."""
    listed = "; ".join(f"{esc(v)} ({n} clip{'s' if n != 1 else ''})"
                       for v, n in versions.items())
    installed = html.escape(__version__)
    if len(versions) > 1:
        return (f"<b>Warning: mixed package versions.</b> The scored clips of this config come "
                f"from {len(versions)} geocon_torch versions: {listed}. The installed one is "
                f"{installed}. The config hash does not change with the package, so a store "
                "keeps an older release's rows after an upgrade: numbers of different versions "
                "may not be comparable. ")
    if newer:
        return (f"<b>Warning: rows of a newer package version.</b> The scored clips of this "
                f"config were all scored by geocon_torch {listed}, newer than the installed "
                f"one ({installed}). The config hash does not change with the package, so a "
                "store can hold a newer release's rows (written by an upgraded node or run): "
                "these numbers may differ from those the installed version gives. ")
    return (f"<b>Warning: rows of another package version.</b> The scored clips of this "
            f"config were all scored by geocon_torch {listed}. The installed one is "
            f"{installed}. The config hash does not change with the package, so a store keeps "
            "an older release's rows after an upgrade: these numbers may differ from those "
            "the installed version gives. ")


def _error_rows_note(errors: Dict[str, int], how: str, told: bool, reachable: bool,
                     first: bool) -> str:
    """The version box's sentences about error rows of other versions (older: an older
    release's refusal, re-scored by ``how`` unless ``told`` already; newer: upgrade), with the
    box's title when they come ``first``."""
    old, new = stats.error_rows_by_age(errors)
    text = ""
    if old:
        head = "<b>Warning: error rows of an older package version.</b> " if first else ""
        redo = ("The same advice re-scores them. " if told else
                f"To re-score them with the installed one: {how}; then build the report "
                "again. " if reachable else f"{how}; then build the report again. ")
        text += (f"{head}The clips not scored include {esc(stats.error_rows_text(old))} "
                 f"(the installed one is {html.escape(__version__)}): an older release's "
                 f"refusal, which the installed version may score (error rows enter no "
                 f"statistic). {redo}")
    if new:
        text += ("<b>Warning: error rows of a newer package version.</b> "
                 if first and not text else "")
        text += (f"The clips not scored include {esc(stats.error_rows_text(new))}, newer than "
                 f"the installed {html.escape(__version__)}: upgrade geocon_torch to compare. ")
    return text


def _header_section(page: _Page, src_name: str, hashes: Counter, chosen: Optional[str],
                    source: str = "rows") -> str:
    """Source, config hash, package / schema versions (and the installed one), backends and
    bootstrap settings; the version box of :func:`_versions_warning` (``source``: its kind)."""
    flat = page.flat
    versions = Counter(label(r.get("version")) for r in flat)
    schemas = Counter(label(r.get("schema_version")) for r in flat)
    backends = Counter(compact(r["_result"].get("backends") or {}) for r in flat)
    head = [f"<p>Source <code>{esc(src_name)}</code>: {len(flat)} clips, config "
            f"<code>{_f(chosen)}</code>"
            + (f" (other configs in the source: {', '.join(_f(h) for h in hashes if h != chosen)})"
               if len(hashes) > 1 else "") + "</p>",
            f"<p class='muted'>package version (clips): {counts_html(versions)}; "
            f"installed geocon_torch {html.escape(__version__)}; result schema: "
            f"{counts_html(schemas)}; backends: "
            f"{counts_html(backends)}; bootstrap B = {page.n_boot}, seed "
            f"{page.seed}; generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
            " UTC</p>", f"<p class='muted'>{html.escape(ROUNDING_NOTE)}</p>"]
    return "\n".join(head + _versions_warning(flat, source, chosen) + _range_warning(flat))


#: clips named in the out-of-range box (the rest are counted)
RANGE_NAMED = 20


def _range_warning(flat: List[Dict[str, Any]]) -> List[str]:
    """A visible box naming the clips whose headline score or IR lies outside [0, 1] (values
    the scorer never writes: hand-edited or corrupted results; the schema does not bound
    them), or nothing when there is none."""
    odd = []
    for r in flat:
        bad = [f"{name} {_f(float(r[key]), near=1.0)}"
               for key, name in (("score", "score"), ("ir", "IR"))
               if stats._number(r.get(key)) and not 0.0 <= r[key] <= 1.0]
        if bad:
            odd.append(f"{esc(label(r.get('clip_id')))} ({', '.join(bad)})")
    if not odd:
        return []
    more = len(odd) - RANGE_NAMED
    listed = "; ".join(odd[:RANGE_NAMED]) + (f"; and {more} more" if more > 0 else "")
    return [f"<p class='warn'><b>Warning: values out of range.</b> {len(odd)} "
            f"clip{'s' if len(odd) != 1 else ''} ha{'ve' if len(odd) != 1 else 's'} a score "
            f"or IR outside [0, 1], which geocon never writes (a hand-edited or damaged "
            f"result?): {listed}. They are shown and counted as stored.</p>"]


def _leaderboard_section(page: _Page) -> str:
    """Leaderboard per generator, ranked by the headline score (highest first; generators
    without one last, by name): the score, the Table-1 columns and status counts, then the
    epipolar trio."""
    score = {r["generator"]: r for r in stats.headline(page.flat, **page.boot)}
    t1 = sorted(stats.table1(page.flat, **page.boot), key=lambda r: (
        score[r["generator"]].get("score") is None, -(score[r["generator"]].get("score") or 0.0)))
    counts = {c["generator"]: c for c in stats.status_counts(page.flat)}
    passed = {r["generator"]: r for r in stats.pass_rates(page.flat, **page.boot)}
    lb_rows = [[_l(r["generator"]), _ci(score[r["generator"]], "score", 3, near=1.0),
                _ci(r, "ir_pct", 4, near=100.0), _ci(r, "ge_px"), _ci(r, "adadfrc"),
                _ci(passed[r["generator"]], "pass", 3, near=1.0),
                _ci(passed[r["generator"]], "pass_calibrated", 3, near=1.0),
                f"{r['ir_pct_scenes']} / {r['adadfrc_scenes']}",
                f"{counts[r['generator']]['ok']} / {counts[r['generator']]['not_applicable']} / "
                f"{counts[r['generator']]['error']}"] for r in t1]
    lb = ["<h2 id='leaderboard'>Leaderboard</h2>",
          "<p>Generators ranked by the headline score. "
          "Scene-balanced means over all prompt categories (paper Table 1; each scene = "
          "(prompt category, prompt, seed) weighs once) with 95% bootstrap CIs over scenes. "
          "Score &uarr; (the headline score in [0, 1]), IR &uarr;, GE &darr; (px at working "
          "resolution), AdaDFRC &darr; (px&sup2;, clip mean over objects); pass &uarr;: the "
          "fraction "
          "of ok clips that pass the paper's report gate (IR / GE) and the calibrated one "
          "(clips without a recorded verdict left out).</p>",
          _table(["generator", "score", "IR (%)", "GE (px)", "AdaDFRC (px²)", "pass (paper)",
                  "pass (calibrated)", "scenes (bg / fg)", "ok / n.a. / error"], lb_rows,
                 caption="Leaderboard: generators by headline score")]
    lb.extend(_frozen_note(page.flat))
    trio = stats.epipolar_trio(page.flat, **page.boot)
    if any(r["epipolar_error_scenes"] for r in trio):
        lb.append("<p>Epipolar trio (WorldAtlas / GVGC), scene-balanced medians:</p>")
        lb.append(_table(["generator", "epipolar_error (px)", "epipolar_inlier_rate",
                          "feature_match_coverage"],
                         [[_l(r["generator"]), _ci(r, "epipolar_error"),
                           _ci(r, "epipolar_inlier_rate"), _ci(r, "feature_match_coverage")]
                          for r in trio], caption="Epipolar trio per generator"))
    return "\n".join(lb)


def _frozen_note(flat: List[Dict[str, Any]]) -> List[str]:
    """A line under the leaderboard naming the frozen (still) clips per generator (the flat
    rows' ``frozen``), or nothing when there is none: the scored ones (status ok; a row without
    a status as before) keep their geometric score; the others (not_applicable / error) are
    counted apart, having none."""
    frozen = [r for r in flat if r.get("frozen") is True]
    scored = Counter(r.get("generator") for r in frozen if r.get("status") in (None, "ok"))
    unscored = Counter(r.get("generator") for r in frozen if r.get("status") not in (None, "ok"))
    out = []
    if scored:
        out.append(f"<p>Frozen (still) clips, by generator: {counts_html(scored)}. They keep "
                   "their geometric score (a static camera on a static scene is category C1) "
                   "and are flagged in the rows' <code>frozen</code> column; the training "
                   "rewards and <code>geocon pairs</code> give them the neutral value.</p>")
    if unscored:
        out.append(f"<p>Frozen (still) clips not scored (not_applicable / error), by "
                   f"generator: {counts_html(unscored)}: they have no geometric score (see "
                   "\"Clips not scored\"); flagged in the rows' <code>frozen</code> "
                   "column.</p>")
    return out


def _prompt_category_section(page: _Page) -> str:
    """Per (generator, prompt category): scene-balanced medians of IR and GE with CIs, their plot
    and the per-clip distributions."""
    cat = ["<h2 id='prompt-categories'>Per prompt category</h2>",
           "<p>Scene-balanced medians (sec. 4.4) with 95% bootstrap CIs (resampling scenes, "
           f"B = {page.n_boot}).</p>"]
    for metric in ("ir", "ge_px"):
        name = METRIC_NAMES[metric]
        near = 1.0 if metric == "ir" else None
        groups = stats.scene_balanced(page.flat, metric, by=("generator", "prompt_category"),
                                      **page.boot)
        cat.append(_table(["generator", "prompt category", f"median {name}", "scenes", "clips"],
                          [[_l(g["generator"]), _l(g["prompt_category"]),
                            _ci({"v": g["value"], "v_lo": g["lo"], "v_hi": g["hi"],
                                 "v_scenes": g["n_scenes"]}, "v", near=near),
                            str(g["n_scenes"]), str(g["n_clips"])] for g in groups], left=2,
                          caption=f"Median {name} per generator and prompt category"))
        n_gen = len({label(g["generator"]) for g in groups})
        if any(g["value"] is not None for g in groups):
            cat.append(page.figure(
                plots.prompt_category_cis(groups, name, page.img / f"ci_{metric}.png"),
                f"{name}: scene-balanced median per prompt category with 95% CI",
                f"Dot plot: scene-balanced median {name} per prompt category with 95% "
                f"bootstrap error bars, one colour and marker per generator ({n_gen}); the "
                "numbers are in the table above"))
        values: Dict[str, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
        for r in page.flat:
            if r.get("status") == "ok" and r.get(metric) is not None:
                values[label(r.get("prompt_category"))][label(r.get("generator"))].append(r[metric])
        if values:
            n_clips = sum(len(v) for per in values.values() for v in per.values())
            cat.append(page.figure(
                plots.distributions(values, name, page.img / f"dist_{metric}.png"),
                f"{name} distribution per prompt category",
                f"Box and strip plot: {name} of {n_clips} ok clips per prompt category "
                f"({len(values)}), one colour and marker per generator"))
    return "\n".join(cat)


def _gate_calibration(page: _Page, obs: Dict[str, Any], thresholds: Dict[str, float],
                      unit: str = "") -> List[str]:
    """Calibration table + curve of P(F-expected | gate statistic) in equal-count bins
    (``unit``: of the statistic, e.g. "ref px")."""
    curve = stats.calibration_curve(obs["t"], obs["is_f"],
                                    n_bins=min(12, max(2, obs["t"].size // 5)))
    tau = thresholds.get("tau")
    u = f" ({unit})" if unit else ""
    return [
        "<p>Calibration P(F-expected | statistic), equal-count bins, Wilson 95% CIs (eq. 16); "
        "F-expected = prompt categories C3 / C5 / C6.</p>",
        _table(["bin", f"t range{u}", "n", "P(F)", "Wilson 95%"],
               [[str(b), f"{_f(curve['t_min'][b])} - {_f(curve['t_max'][b])}",
                 str(int(curve["count"][b])), _f(float(curve["p_hat"][b]), 3),
                 f"[{_f(float(curve['lo'][b]), 3)}, {_f(float(curve['hi'][b]), 3)}]"]
                for b in range(curve["count"].size)],
               caption="Gate calibration: P(F-expected) per equal-count bin"),
        page.figure(plots.calibration(curve, page.img / "gate_calibration.png",
                                      tau if isinstance(tau, (int, float)) else None,
                                      xlabel=f"gate statistic{u} (bin mean)"),
                    "gate calibration curve",
                    f"P(F-expected) in {curve['count'].size} equal-count bins of the gate "
                    "statistic with Wilson 95% error bars; the numbers are in the table above")]


def _gate_net_benefit(page: _Page, obs: Dict[str, Any], method: str, unit: str = ""
                      ) -> List[str]:
    """Net benefit (eq. 18) and bootstrap balanced accuracy over a grid of thresholds
    (``unit``: of the statistic)."""
    grid = (np.array([0.02, 0.03, 0.04, 0.05, 0.06, 0.08]) if method in ("poses", "dust3r")
            else np.unique(np.quantile(obs["t"], np.linspace(0.05, 0.95, 10))))
    nb = stats.net_benefit(obs["t"], obs["is_f"], grid)
    ba = stats.balanced_accuracy_bootstrap(obs["t"], obs["is_f"], grid, seed=page.seed)
    return [
        "<p>Net benefit NB = (TP - c FP) / N (eq. 18) and balanced accuracy (bootstrap "
        "B = 400) per threshold:</p>",
        _table([f"tau ({unit})" if unit else "tau", "NB c=0.5", "NB c=1", "NB c=2",
                "balanced acc.", "95% CI", "best in resamples"],
               [[_f(float(tv)), *(_f(float(nb["nb"][c, k]), 3) for c in range(3)),
                 _f(float(ba["point"][k]), 3),
                 f"[{_f(float(ba['lo'][k]), 3)}, {_f(float(ba['hi'][k]), 3)}]",
                 str(int(ba["best_counts"][k]))] for k, tv in enumerate(grid)], left=0,
               caption="Net benefit and balanced accuracy per gate threshold"),
        page.figure(plots.net_benefit(nb, page.img / "net_benefit.png",
                                      xlabel=f"threshold tau ({unit})" if unit else
                                      "threshold tau"), "net benefit sweep",
                    f"Net benefit against the threshold tau ({grid.size} thresholds) for the "
                    "false-positive costs c = 0.5, 1 and 2; the numbers are in the table above")]


def _most_common(counter: Counter) -> Any:
    """The most common key, the smallest (as text) of those tied: never the row order."""
    return min(counter.items(), key=lambda kv: (-kv[1], str(kv[0])))[0]


def _configured(gate: Optional[Dict[str, Any]]) -> Dict[str, float]:
    """The configured thresholds of a clip's gate: ``evidence.configured_band_ref_px`` of a
    noise-adaptive ``parallax_magnitude`` band, else the thresholds it applied."""
    band = configured_band(gate)
    return _thresholds(gate) if band is None else {"low": band[0], "high": band[1]}


def _gate_band(same: List[Dict[str, Any]]) -> Tuple[Dict[str, float], Dict[str, Tuple[float,
                                                                                    float]]]:
    """(the configured thresholds of the clips (the most common), per threshold key the (min,
    max) of the clips' own thresholds): the range is {} when every clip applied the configured
    ones, else it says how far the per-clip (noise-adaptive) bands reach. Order-independent."""
    gates = [r["_result"].get("gate") for r in same]
    conf = dict(_most_common(Counter(tuple(sorted(_configured(g).items())) for g in gates)))
    own = [_thresholds(g) for g in gates]
    if all(t == conf for t in own):
        return conf, {}
    keys = sorted({k for t in own for k in t})
    return conf, {k: (min(t[k] for t in own if k in t), max(t[k] for t in own if k in t))
                  for k in keys}


def _band_text(conf: Dict[str, float], spread: Dict[str, Tuple[float, float]], unit: str,
               adaptive: bool) -> str:
    """"thresholds (ref px): low 3, high 16" (keys in the order of their values) or, where the
    clips' bands differ from the configured one, both: the configured band and the per-clip
    range of each threshold."""
    u = f" ({unit})" if unit else ""
    keys = sorted(set(conf) | set(spread),
                  key=lambda k: (conf[k] if k in conf else spread[k][0], k))
    band = ", ".join(f"{k} {_f(float(conf[k]))}" for k in keys if k in conf) or "none"
    if not spread:
        return f"thresholds{u}: {band}"
    ranges = ", ".join(f"{k} {_f(float(spread[k][0]))}"
                       + (f" - {_f(float(spread[k][1]))}" if spread[k][1] != spread[k][0] else "")
                       for k in keys if k in spread)
    return (f"thresholds{u}: configured {band} (drawn on the histogram); per clip"
            f"{', noise-adaptive' if adaptive else ''}: {ranges}")


def _gate_section(page: _Page) -> str:
    """Gate statistic histogram of the ok clips with the configured thresholds (and the range
    of the per-clip, noise-adaptive bands where they differ), the statistic's unit ("ref px"
    for ``parallax_magnitude``); calibration and net benefit against the regime each prompt
    category is designed for (never the post-hoc behaviour)."""
    gate = ["<h2 id='gate'>Translation gate</h2>"]
    with_stat = [r for r in page.flat if r.get("status") == "ok"
                 and stats._number(r.get("gate_statistic"))]  # NaN / inf: missing
    if not with_stat:
        gate.append("<p class='muted'>No gate statistic among the ok results.</p>")
        return "\n".join(gate)
    method = _most_common(Counter(r.get("gate_method") for r in with_stat))
    same = [r for r in with_stat if r.get("gate_method") == method]
    stat_name = _most_common(Counter(
        ((r["_result"].get("gate") or {}).get("evidence") or {}).get("statistic_name")
        or "" for r in same))
    unit = gate_unit(stat_name)
    thresholds, spread = _gate_band(same)
    labels = [expected_regime(r.get("prompt_category")) for r in same]
    lab = [x == "F" for x in labels] if all(x is not None for x in labels) else None
    decisions = Counter(label(r.get("gate_decision")) for r in same)
    band = _band_text(thresholds, spread, unit, stat_name == "parallax_magnitude")
    gate.append(f"<p>method <b>{_l(method)}</b>"
                + (f" (statistic {_l(stat_name)})" if stat_name else "")
                + f", {len(same)} clips; decisions (clips): "
                f"{counts_html(decisions)}; {esc(band)}.</p>")
    drawn = {f"configured {k}" if spread else k: v for k, v in thresholds.items()}
    xlabel = (stat_name or f"{method} statistic") + (f" ({unit})" if unit else "")
    gate.append(page.figure(
        plots.gate_histogram([r["gate_statistic"] for r in same], drawn,
                             page.img / "gate_hist.png", labels=lab, name=xlabel),
        "gate statistic histogram with its thresholds",
        f"Histogram of {xlabel} over {len(same)} ok clips"
        + (", stacked H-expected / F-expected" if lab is not None else "")
        + "; dashed lines at the " + ("configured " if spread else "") + "thresholds "
        + ", ".join(f"{k} {v:g}" for k, v in sorted(thresholds.items(),
                                                    key=lambda kv: (kv[1], kv[0])))))
    obs = stats.gate_observations(page.flat, method)
    if obs["t"].size >= 4 and 0 < obs["is_f"].sum() < obs["t"].size:
        gate += (_gate_calibration(page, obs, thresholds, unit)
                 + _gate_net_benefit(page, obs, method, unit))
    else:
        gate.append("<p class='muted'>Calibration needs clips of both designed regimes "
                    "(prompt categories C1/C2/C4 and C3/C5/C6).</p>")
    return "\n".join(gate)


def _sensitivity_section(page: _Page) -> str:
    """Report-gate pass rate vs GE threshold ("-" for a generator without an ok clip having IR
    and GE), IR vs inlier thresholds, percentile-aligned GE."""
    flat, img = page.flat, page.img
    sens = ["<h2 id='sensitivity'>Threshold-score sensitivity</h2>"]
    rg = stats.report_gate_sensitivity(flat)
    curves = [{"generator": r["generator"], "ge": r["ge_thresholds"],
               "pass": r["pass"][r["ir_thresholds"].index(0.97)]} for r in rg if r["n"]]
    if curves:
        sens.append(page.figure(
            plots.sensitivity(curves, img / "sens_report_gate.png", x_key="ge", y_key="pass",
                              label_key="generator", xlabel="GE threshold delta (px)",
                              ylabel="fraction passing",
                              title="report gate IR >= 0.97 and GE <= delta"),
            "report-gate pass rate vs GE threshold",
            f"Line plot: fraction of ok clips passing IR >= 0.97 and GE <= delta against "
            f"delta (px), one line per generator ({len(curves)}); the numbers are in the "
            "table below"))
        sens.append(_table(["generator", "n"] + [f"IR>={a:g}, GE<={d:g} px" for a in
                                             rg[0]["ir_thresholds"][-2:] for d in
                                             rg[0]["ge_thresholds"]],
                           [[_l(r["generator"]), str(r["n"])] +
                            [_f(v, 3, near=1.0) if r["n"] else "-" for row in r["pass"][-2:]
                             for v in row] for r in rg],
                           caption="Fraction of ok clips passing the report gate per "
                                   "(IR, GE) threshold"))
    inl = stats.inlier_threshold_sensitivity(flat)
    for fam, tau_name in (("h", "tau_H (px)"), ("f", "tau_F")):
        cs = [r for r in inl if f"tau_{fam}" in r]
        if cs:
            sens.append(page.figure(
                plots.sensitivity(cs, img / f"sens_tau_{fam}.png", x_key=f"tau_{fam}",
                                  y_key=f"ir_{fam}", label_key="generator", xlabel=tau_name,
                                  ylabel="median clip IR",
                                  title=f"IR vs inlier threshold {tau_name}"),
                f"IR sensitivity to {tau_name}",
                f"Line plot: median clip IR against the inlier threshold {tau_name}, one line "
                f"per generator ({len(cs)})"))
    pa = stats.percentile_aligned(flat)
    if any(r["n"] for r in pa):
        sens.append("<p>Percentile-aligned summary: GE (px) at matched IR percentiles "
                    "(median GE of the clips within +-10 percentile points):</p>")
        sens.append(_table(["generator", "n"] +
                           [f"P{int(q)}: IR / GE (px)" for q in pa[0]["percentiles"]],
                           [[_l(r["generator"]), str(r["n"])] +
                            [f"{_f(x, 3, near=1.0)} / {_f(y, 3)}"
                             for x, y in zip(r["x_q"], r["y_at_x_q"])] for r in pa],
                           caption="GE at matched IR percentiles"))
    if len(sens) == 1:  # not a bare heading
        sens.append("<p class='muted'>No scored clip (status ok with IR and GE): no "
                    "sensitivity curves or tables.</p>")
    return "\n".join(sens)


def _dynamics_section(page: _Page) -> str:
    """Foreground: AdaP90 P80 anomaly rates per (generator, prompt category)."""
    dyn = stats.adap90_anomalies(page.flat, by=("generator", "prompt_category"))
    d = ["<h2 id='dynamics'>Dynamic coherence (AdaP90)</h2>"]
    if not dyn["groups"]:
        d.append("<p class='muted'>No foreground objects in the results.</p>")
        return "\n".join(d)
    d.append("<p>Per (generator, prompt category): P80 of object AdaP90 (eq. 17) and the fraction "
             "of objects above it (about 20% by construction: descriptive, not a ranking).</p>")
    d.append(_table(["generator", "prompt category", "objects", "P80 (px²)", "above P80",
                     "Wilson 95%", "median (px²)", "P90 (px²)", "max (px²)"],
                    [[_l(g["generator"]), _l(g["prompt_category"]), str(g["n_objects"]),
                      _f(g["p80"]), _f(g["anomaly_rate"], 3),
                      f"[{_f(g['lo'], 3)}, {_f(g['hi'], 3)}]", _f(g["median"]),
                      _f(g["p90"]), _f(g["max"])] for g in dyn["groups"]], left=2,
                    caption="Object AdaP90 per generator and prompt category"))
    j = dyn["dynamic_anomaly_background_good"]
    d.append(f"<p>Dynamic anomaly &amp; background good: {j['k']} of {j['n']} clips with "
             f"objects ({_f(j['rate'], 3)}, Wilson [{_f(j['lo'], 3)}, {_f(j['hi'], 3)}]).</p>")
    return "\n".join(d)


def _problems_section(page: _Page) -> str:
    """Status: every clip that was not scored (not applicable or error) with its reason."""
    bad = [r for r in page.flat if r.get("status") != "ok"]
    p = [f"<h2 id='problems'>Clips not scored ({len(bad)})</h2>"]
    if bad:
        p.append(_table(["clip", "generator", "status", "reason"],
                        [[_f(r["clip_id"]), _l(r["generator"]), _f(r["status"]),
                          f"<span class='err'>{_f(r['reason'])}</span>"] for r in bad], left=4,
                        caption="Clips not scored, with the reason"))
    warned = [r for r in page.flat if r.get("warnings")]  # e.g. frames lost while decoding
    if warned:
        p.append(f"<h2 id='warnings'>Clips scored with warnings ({len(warned)})</h2>")
        p.append(_table(["clip", "generator", "lost frames", "warnings"],
                        [[_f(r["clip_id"]), _l(r["generator"]), _f(r.get("lost_frames")),
                          f"<span class='err'>{_f(r['warnings'])}</span>"] for r in warned],
                        left=4, caption="Clips scored with warnings"))
    return "\n".join(p)


def _cards_section(page: _Page, rows: List[Dict[str, Any]], picked: List[str], *, draw: bool,
                   device: Optional[str], progress: bool) -> str:
    """One audit card per picked clip id."""
    by_id = {r.get("clip_id"): r for r in rows}
    c = [f"<h2 id='cards'>Audit cards ({len(picked)})</h2>"]
    for cid in tqdm(picked, desc="audit cards", disable=not progress):
        c.append(audit_card(by_id[cid], page.img, draw=draw, device=device, rel_to=page.out))
    return "\n".join(c)


NAV = (("leaderboard", "leaderboard"), ("prompt-categories", "prompt categories"),
       ("gate", "gate"), ("sensitivity", "sensitivity"), ("dynamics", "dynamics"),
       ("problems", "problems"), ("cards", "audit cards"))


def _page_html(title: str, sections: List[str]) -> str:
    nav = " | ".join(f"<a href='#{a}'>{t}</a>" for a, t in NAV)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><nav><p>{nav}</p></nav><main>"
            + "\n".join(sections) + "</main></body></html>")


def build_report(source: Union[str, Path, List[Dict[str, Any]]], out_dir: Union[str, Path], *,
                 cards: int = 6, card_clips: Optional[Sequence[str]] = None, draw: bool = True,
                 n_boot: int = 10_000, seed: int = 0, config_hash: Optional[str] = None,
                 title: str = "geocon audit report", device: Optional[str] = None,
                 progress: bool = False) -> Path:
    """Write ``out_dir/index.html`` (+ ``out_dir/img/*.png``) and return the HTML path.

    Over an earlier report, its ``index.html`` is removed before the first image is replaced
    and the new page is written last (atomically): an interrupted run leaves no page, never
    the old page over the new run's images (a re-run writes the whole report again).

    Tables and plots are grouped by the prompt category (``prompt_category``: C1-C6 or a
    manifest label); the designed regime of the gate calibration comes from it, never from the
    post-hoc ``behaviour``. Schema-1.x results are read through
    :func:`geocon_torch.result.migrate_result`.

    The header names the installed geocon_torch version beside the rows' ones, and warns (a
    visible box, not the muted provenance line) when the shown scored rows are not all of the
    installed version (several versions, or one older release), naming them and how to
    re-score them (a store: ``geocon bench --rescore-versions``; results files: ``geocon score
    --json`` again); error rows of an older release are named with the same advice, rows of a
    newer release are told to upgrade, and older rows whose configuration the installed
    version cannot score again are told to be scored into a new store.

    Args:
        source: results SQLite file, JSONL file, or already loaded rows.
        cards: number of audit cards (lowest-IR / failing clips first, then the best ones).
        card_clips: explicit clip ids for the cards (overrides ``cards``).
        draw: re-derive matches / epipolar lines / masks from the videos for the cards.
        n_boot, seed: bootstrap replicates and seed of every CI on the page.
        config_hash: restrict to one configuration (default: the most common one); only the
            rows of that configuration are read from a store or kept from a JSONL file.
    """
    out = Path(out_dir)
    img = out / "img"
    rows, src_name, hashes, chosen = _chosen_rows(source, config_hash)
    flat = [{**flatten_row(r), "_result": r.get("result") or {}} for r in rows]
    picked = _pick_cards(flat, cards, card_clips)  # bad input fails before anything is written
    path = out / "index.html"
    path.unlink(missing_ok=True)  # the old page would describe the new images (docstring)
    img.mkdir(parents=True, exist_ok=True)
    page = _Page(flat=flat, out=out, img=img, n_boot=n_boot, seed=seed)
    sections = [_header_section(page, src_name, hashes, chosen, _source_kind(source)),
                _leaderboard_section(page),
                _prompt_category_section(page), _gate_section(page), _sensitivity_section(page),
                _dynamics_section(page), _problems_section(page),
                _cards_section(page, rows, picked, draw=draw, device=device,
                               progress=progress)]
    return atomic_write_text(path, _page_html(title, sections))
