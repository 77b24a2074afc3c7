"""pair_evidence: the matches and inliers of a scored pair are the ones its stored IR counted.

Grounded synthetic clips are written as mp4 (+ masks .npz) with the synth writer, scored from
the file, the result goes through JSON, and every checked pair is re-derived from the result
alone: for a valid pair ``inliers.float().mean()`` equals the stored per-pair IR of the gated
model at the finest scale *exactly* (IR = |inliers| / |C_bg| in float32 either way).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.errors import InputError
from geocon_torch.report import PairEvidence, pair_evidence
from geocon_torch.synth import render_scene

SMALL, LARGE = (144, 192), (240, 320)  # (H, W); the motion masks need the larger one
SCENES = {  # name: (category, size, render options, scored with the masks file)
    # default: weight-free motion segmentation; the flicker leaves some H outliers, so a
    # finest row has an inlier ratio below 1 to check
    "motion_masks": ("C4", LARGE, {"corruption": "flicker", "severity": 0.3}, False),
    "masks_file": ("C4", SMALL, {}, True),
    "h_regime": ("C2", SMALL, {"motion": "pan"}, False),
    "f_regime": ("C3", SMALL, {"motion": "truck", "speed": 0.15, "corruption": "breathing",
                               "severity": 0.4}, False),
}


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    out = {}
    root = tmp_path_factory.mktemp("pair_evidence")
    for name, (category, size, options, use_masks) in SCENES.items():
        clip = render_scene(category, num_frames=5, size=size, seed=0, **options)
        clip.clip_id = name
        clip.save(root)
        masks = str(root / f"{name}_masks.npz") if use_masks else None
        cfg = {"io": {"long_side": size[1], "max_frames": 5}}
        res = score_clip(str(root / f"{name}.mp4"), masks=masks, config=cfg, device="cpu")
        out[name] = (json.loads(res.to_json()), masks)
    return out


def _finest_rows(result):
    bg = result["background"]
    return [r for r in bg["per_pair"] if r["scale"] == max(bg["scales"])]


def _checked_pairs(rows):
    """Pair 0 and the valid pair with the lowest IR of its model (the most telling one)."""
    ir = [(r[f"ir_{r['model'].lower()}"], k) for k, r in enumerate(rows)
          if r[f"valid_{r['model'].lower()}"]]
    return sorted({0, min(ir)[1]})


@pytest.mark.parametrize("name", list(SCENES))
def test_inliers_reproduce_the_stored_ir_exactly(scored, name):
    result, masks = scored[name]
    assert result["status"] == "ok"
    rows = _finest_rows(result)
    assert len(rows) == result["background"]["pairs"] == 4
    for k in _checked_pairs(rows):
        ev = pair_evidence(result, k, masks=masks, device="cpu")
        stored = rows[k]
        fam = stored["model"].lower()
        assert isinstance(ev, PairEvidence) and ev.index == k
        assert list(ev.pair) == stored["pair"] and ev.model == stored["model"]
        assert ev.regime == result["regime"] and ev.valid == stored[f"valid_{fam}"]
        assert ev.x1.shape == ev.x2.shape == (stored["matches"], 2)
        assert int(ev.inliers.sum()) == stored[f"inliers_{fam}"]
        assert ev.ir == stored[f"ir_{fam}"]
        assert float(ev.inliers.float().mean()) == stored[f"ir_{fam}"]  # exact, not approx
        assert ev.frame1.shape == (3,) + SCENES[name][1] and ev.frame1.dtype == torch.uint8


def test_scenes_cover_masks_and_both_regimes(scored):
    motion, _ = scored["motion_masks"]
    seg = motion["background"]["segment"]
    assert seg["method"] == "motion" and seg["objects"] >= 1 and seg["removed_matches"] > 0
    assert motion["regime"] == "H"
    assert any(r["ir_h"] < 1.0 for r in _finest_rows(motion))  # a non-trivial ratio is checked
    files, masks = scored["masks_file"]
    assert files["background"]["segment"]["method"] == "files"
    ev = pair_evidence(files, 0, masks=masks, device="cpu")
    assert ev.objects is not None and ev.objects.shape == (1, 144, 192)
    xy = ev.x1.round().long()
    assert not bool(ev.objects.any(0)[xy[:, 1].clamp(0, 143), xy[:, 0].clamp(0, 191)].any())
    assert scored["h_regime"][0]["regime"] == "H"
    f = scored["f_regime"][0]
    assert f["regime"] == "F" and any(r["ir_f"] < 1.0 for r in _finest_rows(f))


def test_a_result_that_does_not_match_its_inputs_is_refused(scored):
    result, _ = scored["h_regime"]
    with pytest.raises(InputError, match="pair_index"):
        pair_evidence(result, 4, device="cpu")
    tampered = json.loads(json.dumps(result))
    rows = _finest_rows(tampered)
    rows[1][f"ir_{rows[1]['model'].lower()}"] = 0.5
    with pytest.raises(InputError, match="differs from the stored"):
        pair_evidence(tampered, 1, device="cpu")
    no_path = dict(result, path=None)
    with pytest.raises(InputError, match="video"):
        pair_evidence(no_path, 0, device="cpu")
    # the video can be given explicitly (e.g. a result scored from a tensor)
    assert pair_evidence(no_path, 0, video=Path(result["path"]), device="cpu").index == 0
