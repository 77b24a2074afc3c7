"""Preference pairs for DPO: group a manifest's clips by prompt, choose best vs worst by reward.

Every clip is scored through the resumable store (:func:`~geocon_torch.bench.runner.run_manifest`
with the preset of the reward kind: ``background`` -> "background", ``epipolar`` ->
"worldatlas", ``epipolar-dpo`` -> "epipolar-dpo"), so a rerun recomputes nothing. The reward of a
clip is :func:`geocon_torch.rewards.reward_from_result` of its stored result: the very fold
:func:`~geocon_torch.rewards.geometric_reward` uses (higher is better, in [0, 1]), frozen-video
rule included: a clip whose row records it frozen (``result["motion"]``; for "epipolar-dpo" its
``epipolar_dpo`` entry) is unscored (``not_applicable``, listed in ``unscored``), so it is never
chosen nor rejected; rows of a store written before the field keep their fold (a still clip
then folds to ~1.0: rescore such a store with a new ``--db`` to get the rule). The manifest's
rows are read under the kind's config hash, which a package upgrade keeps: when they record
several geocon_torch versions, or one that is not the running one, :func:`preference_pairs`
warns (UserWarning naming the versions: :func:`~.stats.warn_mixed_versions`), since a pair may
then compare clips scored by different releases; ``preference_pairs(...,
rescore_versions=True)`` (``geocon pairs --rescore-versions``) re-scores the older rows of the
kind's config in place (``geocon bench`` scores another config unless given the kind's
preset).

One record per prompt (in the order prompts first appear in the manifest):

* ``{"status": "pair", "prompt", "kind", "chosen", "rejected", "chosen_reward",
  "rejected_reward", "margin", "num_clips", "num_scored", "unscored"}``: ``chosen`` /
  ``rejected`` are clip ids (the highest / lowest reward; ties go to the clip listed first /
  last), ``margin = chosen_reward - rejected_reward``, ``unscored`` maps the clip ids left out
  to their reason.
* ``{"status": "skipped", "prompt", "kind", "reason", "num_clips", "num_scored", "unscored"}``
  when fewer than two clips of the prompt could be scored, when the best and the worst reward
  tie (margin 0: a tie is no preference, whatever ``min_margin``), when the best reward is
  below ``min_chosen_reward`` (no clip of the prompt is good enough to be a winner) or when the
  margin is below ``min_margin`` (``reason`` says which, its numbers printed with as many digits
  as tell them apart; ``margin``, ``chosen`` and ``rejected`` are given in the latter three
  cases). Kupyn et al. drop a prompt whose best clip's mean error is 8 px or more: for kind
  "epipolar-dpo" (reward ``exp(-error / 5 px)``) that is ``min_chosen_reward = exp(-8 / 5)``
  = 0.2019 (:data:`DPO_MIN_CHOSEN_REWARD`; an error of exactly 8 px is kept here). A margin
  equal to ``min_margin`` up to round-off (:data:`MARGIN_ULPS` ulps of the larger of the two
  rewards and ``min_margin``: 0.6 - 0.5 is 0.09999999999999998) is not below it. Clips
  without a prompt form no group: each is one skipped record with ``prompt: null``.
"""
from __future__ import annotations

import math
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..config import ConfigLike, GeoConConfig, load_config
from ..errors import InputError
from ..measures.calibration import fmt_apart
from ..pipeline import pinned_config
from ..presets import PRESETS, preset_for_kind
from ..rewards import ClipReward, reward_from_result
from .manifest import ManifestEntry, check_unique_ids, load_manifest
from .runner import RunSummary, run_manifest
from .stats import rescore_advice, warn_mixed_versions
from .store import ResultStore

#: reward kind -> the preset it is scored with (from the preset table)
KIND_PRESETS = {p.reward_kind: p.name for p in PRESETS.values() if p.reward_kind}
#: a margin this many ulps (of the larger of the rewards and ``min_margin``) below
#: ``min_margin`` still meets it: the round-off of the rewards and of their difference
MARGIN_ULPS = 4
#: Kupyn et al.'s winner bound (best mean Sampson error < 8 px) as an "epipolar-dpo" reward
DPO_MIN_CHOSEN_REWARD = math.exp(-8.0 / 5.0)


def kind_config(config: ConfigLike, kind: str) -> GeoConConfig:
    """The config scored for reward ``kind``: ``config`` with the kind's preset chosen
    (:func:`~geocon_torch.presets.preset_for_kind`, ``GeoConConfig.with_preset``)."""
    return load_config(config).with_preset(preset_for_kind(kind).name)


def group_by_prompt(entries: Sequence[ManifestEntry]) -> List[Tuple[Optional[str],
                                                                    List[ManifestEntry]]]:
    """(prompt, entries) groups in order of first appearance; an entry without a prompt is a
    group of its own with prompt None."""
    groups: "OrderedDict[Any, List[ManifestEntry]]" = OrderedDict()
    for e in entries:
        key = ("prompt", e.prompt) if e.prompt else ("clip", e.clip_id)
        groups.setdefault(key, []).append(e)
    return [(k[1] if k[0] == "prompt" else None, v) for k, v in groups.items()]


def choose_pair(prompt: Optional[str], rewards: Sequence[Tuple[str, ClipReward]], kind: str,
                min_margin: float = 0.0, min_chosen_reward: float = 0.0) -> Dict[str, Any]:
    """The record of one prompt from its clips' (clip_id, ClipReward) (module docstring): a
    pair of the best and the worst reward, or skipped when fewer than two clips are scored,
    the rewards tie (margin <= 0 is no preference), the best reward is below
    ``min_chosen_reward`` or the margin is below ``min_margin`` by more than round-off
    (:data:`MARGIN_ULPS`)."""
    scored = [(cid, r.reward) for cid, r in rewards if r.status == "ok"]
    rec: Dict[str, Any] = {"prompt": prompt, "kind": kind, "num_clips": len(rewards),
                           "num_scored": len(scored),
                           "unscored": {cid: f"{r.status}: {r.reason}" for cid, r in rewards
                                        if r.status != "ok"}}
    if prompt is None:
        return {"status": "skipped", **rec, "reason": "the clip has no prompt"}
    if len(scored) < 2:
        return {"status": "skipped", **rec,
                "reason": f"{len(scored)} scoreable clip(s) of {len(rewards)}; a pair needs 2"}
    best = max(range(len(scored)), key=lambda i: (scored[i][1], -i))
    worst = min(range(len(scored)), key=lambda i: (scored[i][1], -i))
    margin = scored[best][1] - scored[worst][1]
    pair = {"chosen": scored[best][0], "rejected": scored[worst][0],
            "chosen_reward": scored[best][1], "rejected_reward": scored[worst][1],
            "margin": margin}
    if margin <= 0:
        return {"status": "skipped", **rec, **pair,
                "reason": f"the {len(scored)} scored clips tie (reward {scored[best][1]:.4g}): "
                          "no preference"}
    top = scored[best][1]
    if top < min_chosen_reward:
        return {"status": "skipped", **rec, **pair,
                "reason": f"the best reward {fmt_apart(top, min_chosen_reward, max_digits=17)} "
                          f"is below the minimum chosen reward "
                          f"{fmt_apart(min_chosen_reward, top, max_digits=17)}"}
    scale = max(abs(float(min_margin)), abs(scored[best][1]), abs(scored[worst][1]))
    if margin < min_margin - MARGIN_ULPS * sys.float_info.epsilon * scale:
        return {"status": "skipped", **rec, **pair,  # 17 digits tell any two floats apart
                "reason": f"margin {fmt_apart(margin, min_margin, max_digits=17)} is below the "
                          f"minimum {fmt_apart(min_margin, margin, max_digits=17)}"}
    return {"status": "pair", **rec, **pair}


def preference_records(entries: Sequence[ManifestEntry], results: Mapping[str, Mapping[str, Any]],
                       kind: str, config: Optional[GeoConConfig] = None,
                       min_margin: float = 0.0, min_chosen_reward: float = 0.0
                       ) -> List[Dict[str, Any]]:
    """One record per prompt from the results of the entries (``clip_id -> result dict``; a
    clip without a result is unscored with reason "no stored result")."""
    out = []
    for prompt, group in group_by_prompt(entries):
        rewards = []
        for e in group:
            res = results.get(e.clip_id)
            rewards.append((e.clip_id, reward_from_result(res, kind, config) if res is not None
                            else ClipReward(0.0, "error", "no stored result", 0, 0)))
        out.append(choose_pair(prompt, rewards, kind, min_margin, min_chosen_reward))
    return out


def preference_pairs(manifest: Union[str, Path, Sequence[ManifestEntry]], db: Union[str, Path],
                     *, kind: str = "epipolar-dpo", config: ConfigLike = None,
                     min_margin: float = 0.0, min_chosen_reward: float = 0.0,
                     device: Optional[str] = None,
                     progress: bool = False, rescore_versions: bool = False
                     ) -> Tuple[List[Dict[str, Any]], RunSummary]:
    """Score the manifest into ``db`` (resumable) and build one record per prompt.

    Args:
        manifest: a CSV / JSONL manifest path or ManifestEntry list (``prompt`` groups clips).
        db: the store, a SQLite file or a PostgreSQL URL (shared with ``geocon bench``; rows are
            keyed by content and by the config with the kind's preset).
        kind: "epipolar-dpo" (default, as ``geometric_reward`` and ``geocon pairs``),
            "epipolar" or "background" (:data:`KIND_PRESETS`).
        config: anything :func:`~geocon_torch.config.load_config` takes.
        min_margin: prompts whose best - worst reward is below it (by more than round-off:
            :func:`choose_pair`) are skipped (a tie, margin 0, is always skipped: no
            preference).
        min_chosen_reward: prompts whose best reward is below it are skipped: no clip is good
            enough to be chosen (a number in [0, 1]; :data:`DPO_MIN_CHOSEN_REWARD` is Kupyn et
            al.'s 8 px winner bound for kind "epipolar-dpo").
        device, progress: as :func:`run_manifest`.
        rescore_versions: as :func:`run_manifest`: re-score (in place) the manifest's stored
            ok / not_applicable rows of the kind's config that another geocon_torch version
            wrote, before the pairs are built.
    Returns:
        (records (module docstring), the run's :class:`RunSummary`).
    """
    if not min_margin >= 0:
        raise InputError(f"min_margin must be >= 0, got {min_margin!r}")
    if not 0.0 <= min_chosen_reward <= 1.0:
        raise InputError(f"min_chosen_reward must be a number in [0, 1] (rewards are), got "
                         f"{min_chosen_reward!r}")
    entries = list(load_manifest(manifest) if isinstance(manifest, (str, Path)) else manifest)
    check_unique_ids(entries, "manifest entries")
    if entries and not any(e.prompt for e in entries):
        raise InputError(f"no manifest entry has a prompt: pairs are built per prompt, from the "
                         f"manifest's 'prompt' column / field (lower case; {len(entries)} "
                         f"entries, none scored)")
    cfg = kind_config(config, kind)
    summary = run_manifest(entries, db, config=cfg, device=device, progress=progress,
                           distributed=False, rescore_versions=rescore_versions)
    cfg_hash = pinned_config(cfg, device).config_hash()
    with ResultStore(db) as store:
        rows = store.rows(cfg_hash)
    ids = {e.clip_id for e in entries}
    rows = [row for row in rows if row["clip_id"] in ids]
    warn_mixed_versions(rows, stacklevel=3, how=rescore_advice("pairs", cfg_hash, kind))
    results = {row["clip_id"]: row["result"] for row in rows}
    return (preference_records(entries, results, kind, cfg, min_margin, min_chosen_reward),
            summary)
