"""Matplotlib figures of the audit report (Agg backend, PNG files, no display needed).

Every function takes plain numbers / numpy arrays, writes one PNG and returns its path.
Pixel coordinates are at the clip's working resolution, (x, y) with x to the right. Text is
drawn as written: generator and prompt-category names, clip ids and threshold keys are free
text, so matplotlib's mathtext (``$...$``) is off while a figure is made (:func:`_verbatim`).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from ..errors import OptionalDependencyError
from ..io._atomic import atomic_output
from .text import label

PathLike = Union[str, Path]


class _Figures:
    """The part of ``pyplot`` the figures use, without pyplot: each figure is a
    ``matplotlib.figure.Figure`` of its own (drawn by Agg when saved as PNG), so the caller's
    backend (a notebook's inline one) and pyplot's list of open figures are left as they were."""

    def __init__(self) -> None:
        import matplotlib  # lazy: optional plotting dependency
        from matplotlib.figure import Figure  # lazy: optional plotting dependency
        from matplotlib.ticker import MaxNLocator  # lazy: optional plotting dependency

        self.rc_context, self.MaxNLocator = matplotlib.rc_context, MaxNLocator
        self._figure, self._colormaps = Figure, matplotlib.colormaps

    def subplots(self, figsize: Tuple[float, float], **kw: Any):
        """(figure, axes) as ``pyplot.subplots(figsize=..., **kw)``."""
        fig = self._figure(figsize=figsize)
        return fig, fig.subplots(**kw)

    def close(self, fig: Any) -> None:
        """Nothing to close: no figure is registered with pyplot."""

    def get_cmap(self, name: str) -> Any:
        return self._colormaps[name]


@functools.lru_cache(maxsize=1)
def _plt() -> _Figures:
    try:
        return _Figures()
    except ImportError as exc:  # pragma: no cover - matplotlib is in the report / test extras
        raise OptionalDependencyError(
            "the HTML report needs matplotlib: pip install 'geocon_torch[report]'") from exc


_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _verbatim(fn: _Fn) -> _Fn:
    """Make the figure of ``fn`` with mathtext off (``text.parse_math`` False, restored after):
    a ``$`` in a name is drawn as a dollar sign instead of being parsed as math (where
    ``model_$x^$`` failed the whole report and ``a $2 vs $3 b`` was drawn in math italics)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _plt().rc_context({"text.parse_math": False}):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def _save(fig, path: PathLike) -> Path:
    """Write ``fig`` as a PNG (90 dpi, atomically: a failed write, a full disk, leaves no
    partial image and its OSError names ``path``) and close it; a legend outside the axes
    (:func:`_outside_legend`) widens the image instead of narrowing the axes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.tight_layout()
        outside = [ax.get_legend() for ax in fig.axes
                   if ax.get_legend() is not None and not ax.get_legend().get_in_layout()]
        extra = dict(bbox_inches="tight", bbox_extra_artists=outside) if outside else {}
        with atomic_output(path) as tmp:
            fig.savefig(tmp, dpi=90, **extra)
    finally:
        _plt().close(fig)
    return path


def _colors(n: int):
    cmap = _plt().get_cmap("tab10")
    return [cmap(i % 10) for i in range(n)]


#: marker / line style of the k-th round of the 10 tab10 colours: series 11-20 differ from
#: series 1-10 by marker and line style, not by colour alone
MARKERS = "osD^v<>ph*"
LINESTYLES = ("-", "--", ":", "-.")
LEGEND_CHARS = 32  # longer names are cut with an ellipsis in legends and tick labels


def _styles(n: int) -> List[Dict[str, Any]]:
    """Matplotlib keywords (color, marker, linestyle) of ``n`` series: the tab10 colour cycle,
    with a new marker and line style each time the colours repeat."""
    return [{"color": c, "marker": MARKERS[(i // 10) % len(MARKERS)],
             "linestyle": LINESTYLES[(i // 10) % len(LINESTYLES)]}
            for i, c in enumerate(_colors(n))]


def _short(name: Any, limit: int = LEGEND_CHARS) -> str:
    """A legend / tick label: :func:`label` of ``name``, cut to ``limit`` characters with an
    ellipsis (a 200-character generator name would cover the plot); the page tables keep the
    full names."""
    text = label(name)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def _outside_legend(ax) -> None:
    """The per-generator legend right of the axes, so that it never covers the data (left out
    of ``tight_layout``: :func:`_save` widens the image for it); labels are cut by
    :func:`_short`."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0).set_in_layout(False)


def _finish_categories(fig, ax, cats: List[str], metric: str, title: str, generators: List[str],
                       path: PathLike) -> Path:
    ax.set_xticks(range(len(cats)), [_short(c) for c in cats])
    ax.set_ylabel(metric)
    ax.set_title(title)
    if generators:
        _outside_legend(ax)
    return _save(fig, path)


@_verbatim
def distributions(values: Dict[str, Dict[str, Sequence[float]]], metric: str,
                  path: PathLike) -> Path:
    """Per-prompt-category strip + box plots of one metric, one colour per generator (the
    same figure for the values in any order: each group's are sorted before their jitter).

    Args:
        values: {prompt_category: {generator: [clip values]}}.
    """
    plt = _plt()
    values = {label(c): {label(m): v for m, v in per.items()} for c, per in values.items()}
    cats = sorted(values)
    generators = sorted({m for c in cats for m in values[c]})
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(cats) + 2), 3.4))
    width = 0.8 / max(len(generators), 1)
    rng = np.random.default_rng(0)
    for k, (generator, style) in enumerate(zip(generators, _styles(len(generators)))):
        color = style["color"]
        data = [(i, np.sort(np.asarray(values[c].get(generator, []), dtype=float)))
                for i, c in enumerate(cats)]  # sorted: the jitter ignores the row order
        data = [(i, v) for i, v in data if v.size]
        if not data:
            continue
        pos = [i - 0.4 + width * (k + 0.5) for i, _ in data]
        ax.boxplot([v for _, v in data], positions=pos, widths=width * 0.8, showfliers=False,
                   medianprops={"color": color}, manage_ticks=False)
        xs = np.concatenate([p + rng.uniform(-width / 4, width / 4, v.size)
                             for p, (_, v) in zip(pos, data)])
        ax.scatter(xs, np.concatenate([v for _, v in data]), s=10, color=color, alpha=0.7,
                   marker=style["marker"], label=_short(generator))
    return _finish_categories(fig, ax, cats, metric, f"{metric} per prompt category", generators,
                              path)


@_verbatim
def prompt_category_cis(groups: List[Dict], metric: str, path: PathLike) -> Path:
    """Scene-balanced medians with 95% bootstrap CIs per prompt category (rows of
    ``stats.scene_balanced`` grouped by ("generator", "prompt_category"))."""
    plt = _plt()
    groups = [dict(g, prompt_category=label(g["prompt_category"]), generator=label(g["generator"]))
              for g in groups]
    cats = sorted({g["prompt_category"] for g in groups})
    generators = sorted({g["generator"] for g in groups})
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(cats) + 2), 3.2))
    width = 0.8 / max(len(generators), 1)
    for k, (generator, style) in enumerate(zip(generators, _styles(len(generators)))):
        gs = [g for g in groups if g["generator"] == generator and g["value"] is not None]
        if not gs:
            continue
        x = [cats.index(g["prompt_category"]) - 0.4 + width * (k + 0.5) for g in gs]
        v = np.array([g["value"] for g in gs])
        err = np.clip([v - np.array([g["lo"] for g in gs]), np.array([g["hi"] for g in gs]) - v],
                      0, None)
        ax.errorbar(x, v, yerr=err, fmt=style["marker"], color=style["color"], capsize=3,
                    label=_short(generator))
    return _finish_categories(fig, ax, cats, metric,
                              f"scene-balanced median {metric}, 95% bootstrap CI", generators,
                              path)


@_verbatim
def gate_histogram(t: Sequence[float], thresholds: Dict[str, float], path: PathLike,
                   labels: Optional[Sequence[bool]] = None, name: str = "gate statistic") -> Path:
    """Histogram of the gate statistic with its thresholds (split by designed regime when
    ``labels`` (True = F-expected) are given); ``name`` is the x label (with its unit)."""
    plt = _plt()
    t = np.asarray(t, dtype=float)
    fig, ax = plt.subplots(figsize=(6, 3))
    bins = np.histogram_bin_edges(t, bins=min(30, max(5, t.size // 3))) if t.size else 10
    if labels is not None and t.size:
        y = np.asarray(labels, dtype=bool)
        ax.hist([t[~y], t[y]], bins=bins, stacked=True, label=["H-expected", "F-expected"],
                color=["tab:blue", "tab:orange"])
    else:
        ax.hist(t, bins=bins, color="tab:gray")
    marks = sorted((v, k) for k, v in thresholds.items() if isinstance(v, (int, float)))
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * (1.12 + 0.1 * len(marks)))  # room for one label row per threshold
    for row, (value, key) in enumerate(marks):  # staggered rows: close thresholds stay legible
        ax.axvline(value, ls="--", color="k", lw=1)
        ax.text(value, top * (1.05 + 0.1 * row), f" {key} = {value:g}", fontsize=8,
                va="bottom", bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.5})
    ax.set_xlabel(label(name))
    ax.set_ylabel("clips")
    if labels is not None and t.size:
        ax.legend(fontsize=8)
    return _save(fig, path)


@_verbatim
def calibration(curve: Dict[str, np.ndarray], path: PathLike, tau: Optional[float] = None,
                xlabel: str = "gate statistic (bin mean)") -> Path:
    """P(F | t) per equal-count bin with Wilson 95% CIs (paper Fig. 4b)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    x, p = curve["t_mean"], curve["p_hat"]
    ax.errorbar(x, p, yerr=np.clip([p - curve["lo"], curve["hi"] - p], 0, None), fmt="o-",
                capsize=3)
    ax.axhline(0.5, color="gray", lw=0.8)
    if tau is not None:
        ax.axvline(tau, ls="--", color="k", lw=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("P(F-expected | t)")
    ax.set_title("gate calibration, equal-count bins, Wilson 95% CI")
    return _save(fig, path)


@_verbatim
def net_benefit(nb: Dict[str, np.ndarray], path: PathLike,
                xlabel: str = "threshold tau") -> Path:
    """NB(tau) curves for each false-positive cost c (appendix B, eq. 18); ``xlabel`` names
    the threshold with the statistic's unit ("threshold tau (ref px)")."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for c, row in zip(nb["costs"], nb["nb"]):
        ax.plot(nb["thresholds"], row, marker=".", label=f"c = {c:g}")
    ax.set_xlabel(label(xlabel))
    ax.set_ylabel("net benefit (TP - c FP) / N")
    ax.legend(fontsize=8)
    return _save(fig, path)


@_verbatim
def sensitivity(curves: List[Dict], path: PathLike, *, x_key: str, y_key: str, label_key: str,
                xlabel: str, ylabel: str, title: str) -> Path:
    """Generic threshold-score curves: one line per record (e.g. per generator; colour,
    marker and line style from :func:`_styles`)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    for rec, style in zip(curves, _styles(len(curves))):
        x = np.asarray(rec[x_key], dtype=float)
        y = np.asarray([np.nan if v is None else v for v in rec[y_key]], dtype=float)
        ax.plot(x, y, label=_short(rec.get(label_key)), **style)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if curves:
        _outside_legend(ax)
    return _save(fig, path)


#: the least span (px) of the timeline's GE axis, from 0
GE_SPAN_PX = 0.5


def _span(values: np.ndarray, low: float, high: float, pad: float) -> Tuple[float, float]:
    """(bottom, top) of an axis from ``low`` to ``high``, widened to the finite ``values``
    (the top to ``pad`` times the largest): nothing is drawn off the axis."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return low, high
    return min(low, float(finite.min())), max(high, float(finite.max()) * pad)


@_verbatim
def timeline(pairs: Sequence[int], ir: Sequence[Optional[float]],
             ge: Sequence[Optional[float]], valid: Sequence[bool], path: PathLike,
             title: str = "", ge_span: float = GE_SPAN_PX) -> Path:
    """Per-pair IR (left axis, 0 to 1.05 or the largest IR) and GE px (right axis, from 0 to
    at least ``ge_span`` px: a change of 5e-5 px does not fill the axis); invalid pairs
    marked with x."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    x = np.asarray(pairs, dtype=float)
    v = np.asarray(valid, dtype=bool)
    irv = np.asarray([np.nan if a is None else a for a in ir], dtype=float)
    gev = np.asarray([np.nan if a is None else a for a in ge], dtype=float)
    ax.plot(x[v], irv[v], "o-", color="tab:green", ms=3, label="IR")
    ax.set_ylim(*_span(irv[v], 0.0, 1.05, 1.05))
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_xlabel("pair index")
    ax.set_ylabel("IR", color="tab:green")
    ax2 = ax.twinx()
    ax2.plot(x[v], gev[v], "s-", color="tab:purple", ms=3, label="GE")
    ax2.set_ylabel("GE (px)", color="tab:purple")
    ax2.set_ylim(*_span(gev[v], 0.0, ge_span, 1.1))
    if (~v).any():
        ax.plot(x[~v], np.zeros((~v).sum()), "x", color="tab:red", label="invalid pair")
    ax.set_title(title, fontsize=9)
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="lower left", fontsize=7)
    return _save(fig, path)


@_verbatim
def matches(frame1: np.ndarray, frame2: np.ndarray, x1: np.ndarray, x2: np.ndarray,
            inliers: np.ndarray, path: PathLike, title: str = "", max_lines: int = 120) -> Path:
    """Two frames side by side (H, W, 3 uint8) with inlier (green, solid lines, dots) /
    outlier (red, dashed lines, crosses: not told by colour alone) matches (x1 (N, 2) in
    frame 1, x2 (N, 2) in frame 2; at most ``max_lines`` of each kind drawn)."""
    plt = _plt()
    h = max(frame1.shape[0], frame2.shape[0])
    canvas = np.zeros((h, frame1.shape[1] + frame2.shape[1], 3), dtype=np.uint8)
    canvas[:frame1.shape[0], :frame1.shape[1]] = frame1
    canvas[:frame2.shape[0], frame1.shape[1]:] = frame2
    fig, ax = plt.subplots(figsize=(8, 8 * h / canvas.shape[1] + 0.5))
    ax.imshow(canvas)
    off = frame1.shape[1]
    inl = np.asarray(inliers, dtype=bool)
    rng = np.random.default_rng(0)
    # outliers: dashed lines and crosses drawn above the inliers (z-order 3 over 2)
    for sel, color, ls, marker, size, z in ((~inl, "tab:red", "--", "x", 14, 3),
                                            (inl, "lime", "-", "o", 3, 2)):
        idx = np.flatnonzero(sel)
        if idx.size > max_lines:  # a readable subset, the same on every run
            idx = np.sort(rng.choice(idx, max_lines, replace=False))
        if idx.size:
            a, b = x1[idx], x2[idx]
            ax.plot(np.stack([a[:, 0], b[:, 0] + off]), np.stack([a[:, 1], b[:, 1]]), ls,
                    color=color, lw=0.7 if z == 3 else 0.5, alpha=0.8 if z == 3 else 0.6,
                    zorder=z)
            ax.scatter(a[:, 0], a[:, 1], s=size, color=color, marker=marker, linewidths=0.9,
                       zorder=z + 0.5)
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


@_verbatim
def epipolar_lines(frame2: np.ndarray, F: np.ndarray, x1: np.ndarray, x2: np.ndarray,
                   path: PathLike, title: str = "") -> Path:
    """Epipolar lines l = F x1 (x2^T F x1 = 0) drawn on frame j with the matched points x2."""
    plt = _plt()
    h, w = frame2.shape[:2]
    fig, ax = plt.subplots(figsize=(6, 6 * h / w + 0.4))
    ax.imshow(frame2)
    hom = np.concatenate([x1, np.ones((x1.shape[0], 1))], 1)
    lines = hom @ F.T  # (N, 3): a x + b y + c = 0
    xs = np.array([0.0, w - 1.0])
    for (a, b, c), color in zip(lines, _colors(len(lines))):
        if abs(b) > 1e-12:
            ax.plot(xs, -(a * xs + c) / b, color=color, lw=0.8)
        elif abs(a) > 1e-12:
            ax.axvline(-c / a, color=color, lw=0.8)
    ax.scatter(x2[:, 0], x2[:, 1], s=8, c=_colors(len(x2)), edgecolors="k", linewidths=0.3)
    ax.set_xlim(0, w - 1)
    ax.set_ylim(h - 1, 0)
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


@_verbatim
def masks_overlay(frame: np.ndarray, masks: np.ndarray, path: PathLike, title: str = "") -> Path:
    """Object masks (K, H, W) bool over a frame (H, W, 3 uint8), one colour per object."""
    plt = _plt()
    h, w = frame.shape[:2]
    fig, ax = plt.subplots(figsize=(6, 6 * h / w + 0.4))
    img = frame.astype(np.float32) / 255.0
    for m, color in zip(masks, _colors(len(masks))):
        img[m] = 0.5 * img[m] + 0.5 * np.asarray(color[:3], dtype=np.float32)
    ax.imshow(img)
    ax.set_axis_off()
    ax.set_title(title, fontsize=9)
    return _save(fig, path)
