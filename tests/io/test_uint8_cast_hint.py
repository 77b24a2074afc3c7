"""A uint8 clip tensor whose values are all 0 or 1 (not all 0): [0, 1] floats cast with
``.to(torch.uint8)`` without x 255. The reader warns, naming the clip, and the background's
"too little texture" reason ends with the same hint; every other input reads and scores as
before (a normal uint8 clip, a float clip, an all-black uint8 clip)."""
from __future__ import annotations

import warnings
from typing import List, Tuple

import torch

from geocon_torch import score_clip, score_clips
from geocon_torch.io import clip_from_tensor, clips_from_tensor
from geocon_torch.io.reader import UINT8_CAST_HINT, cast_hint
from geocon_torch.synth import grounded_clip


def _floats() -> torch.Tensor:
    """A small textured clip (5, 3, 96, 128), float in [0, 1]."""
    frames = grounded_clip("C3", num_frames=5, size=(96, 128)).frames
    return frames.float() / 255.0


#: meta keys of a tensor clip that tell its input (dtype, the tensor, motion on the values given)
_OWN = ("dtype", "source_tensor", "motion")


def _read(fn, x: torch.Tensor, **kw) -> Tuple[object, List[str]]:
    """``fn(x, **kw)`` and the texts of the warnings it gave that carry the hint."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = fn(x, **kw)
    return out, [str(w.message) for w in got if UINT8_CAST_HINT in str(w.message)]


def test_a_cast_batch_warns_per_clip_and_flags_only_those_clips():
    """Row 0: floats cast without x 255 (max 1); row 1: the same frames x 255 (max 255); row
    2: all 0 (black, not a cast to flag). One warning, naming row 0."""
    f = _floats()
    assert float(f.max()) > 0.99 and float(f.min()) > 0.0  # values of 1 (white) only at the top
    bad = f.to(torch.uint8)
    assert int(bad.max()) == 1 and int(bad.sum()) > 0
    good = (f * 255).round().to(torch.uint8)
    batch = torch.stack([bad, good, torch.zeros_like(good)])
    clips, texts = _read(clips_from_tensor, batch, name="gen")
    assert texts == [f"clip 'gen[0]': {UINT8_CAST_HINT}"]
    assert [c.meta.get("uint8_unit_values") for c in clips] == [True, None, None]
    assert [cast_hint(c) for c in clips] == [UINT8_CAST_HINT, None, None]
    # the frames are read as given: nothing is rescaled
    assert int(clips[0].frames.max()) == 1 and torch.equal(clips[1].frames, good)


def test_normal_uint8_and_float_clips_read_as_before_without_a_warning():
    """A uint8 clip x 255 and the float clip (even a float clip of 0 / 1 values) give no
    warning, no flag, and the same frames and meta (but the motion statistic, measured on the
    input as given: floats are not rounded)."""
    f = _floats()
    good = (f * 255).round().to(torch.uint8)
    a, ta = _read(clip_from_tensor, good, name="u8")
    b, tb = _read(clip_from_tensor, f, name="f")
    c, tc = _read(clip_from_tensor, (f > 0.5).float(), name="binary")  # float 0 / 1: a mask
    assert ta == tb == tc == []
    assert torch.equal(a.frames, b.frames)
    assert "uint8_unit_values" not in a.meta and "uint8_unit_values" not in b.meta
    assert cast_hint(c) is None and int(c.frames.max()) == 255
    meta_a = {k: v for k, v in a.meta.items() if k not in _OWN}
    meta_b = {k: v for k, v in b.meta.items() if k not in _OWN}
    assert meta_a == meta_b and a.meta["dtype"] == "uint8"


def test_score_clip_of_a_cast_clip_names_the_cast_in_its_reason():
    """score_clip of the 0 / 1 clip: not_applicable for texture, the reason ending with the
    hint once (after the lk-tracks fallback's reason); without a fallback too; a black uint8
    clip keeps its reason with no hint."""
    bad = _floats().to(torch.uint8)
    res, texts = _read(score_clip, bad, preset="background", progress=False)
    assert texts == [f"clip 'tensor': {UINT8_CAST_HINT}"]
    assert res.status == "not_applicable"
    assert res.reason.startswith("too little texture: median 0 matches per pair")
    assert "lk-tracks fallback: too little texture" in res.reason
    assert res.reason.endswith(f"; {UINT8_CAST_HINT}") and res.reason.count(UINT8_CAST_HINT) == 1
    assert res.background["reason"] == res.reason
    cfg = {"features": {"fallback": None}}
    alone, _ = _read(score_clip, bad, preset="background", progress=False, config=cfg)
    assert alone.reason == ("too little texture: median 0 matches per pair at scale 1.0 "
                            f"(< 30); {UINT8_CAST_HINT}")
    black, texts = _read(score_clip, torch.zeros_like(bad), preset="background",
                         progress=False, config=cfg)
    assert texts == [] and black.status == "not_applicable"
    assert UINT8_CAST_HINT not in (black.reason or "")


def test_a_normal_uint8_clip_scores_bit_identically_to_its_float_clip():
    """The uint8 x 255 clip and the float clip score the same (the blocks and the score; the
    content hash and the motion statistic tell the input as given), with no warning."""
    f = _floats()
    good = (f * 255).round().to(torch.uint8)
    a, ta = _read(score_clip, good, preset="background", progress=False)
    b, tb = _read(score_clip, f, preset="background", progress=False)
    assert ta == tb == [] and a.status == "ok" and a.warnings == []
    da, db = a.to_dict(), b.to_dict()
    for key in ("background", "gate", "score", "score_terms", "status", "reason", "regime",
                "warnings", "io"):
        assert da[key] == db[key], key
    assert 0.5 < da["score"] <= 1.0 and da["background"]["valid_pairs"] >= 1


def test_score_clips_warns_under_the_name_of_its_result():
    """score_clips names tensors clip{k}: the warning names the cast clip so, read in a batch
    (two tensors of one shape) or alone (one tensor); the black clip beside it gets neither
    the warning nor the hint."""
    bad = _floats().to(torch.uint8)
    cfg = {"features": {"fallback": None}}
    both, texts = _read(score_clips, [bad, torch.zeros_like(bad)], preset="background",
                        progress=False, config=cfg)
    assert texts == [f"clip 'clip0': {UINT8_CAST_HINT}"]
    assert [r.clip for r in both] == ["clip0", "clip1"]
    assert [r.reason.endswith(UINT8_CAST_HINT) for r in both] == [True, False]
    (alone,), texts = _read(score_clips, [bad], preset="background", progress=False, config=cfg)
    assert texts == [f"clip 'clip0': {UINT8_CAST_HINT}"] and alone.clip == "clip0"
    assert alone.reason == both[0].reason
