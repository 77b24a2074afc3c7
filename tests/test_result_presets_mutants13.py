"""Behaviour of the result schema, the batch budget of ``score_clips`` and its error rows that
no other default test pinned (mutation audit s26/m13c): a mislabelled row's ``category``, the
exact byte budget of a batch (read and scored), the config an unreadable clip's error row is
recorded under, a failed Epipolar-DPO section's reason, a Clip's own name in a batch, and glibc's
``malloc_trim`` being found."""
from __future__ import annotations

import dataclasses
import platform
import sys

import pytest
import torch

from geocon_torch import pipeline
from geocon_torch.pipeline import load_clip, score_clip, score_clips
from geocon_torch.result import ClipResult

# (3, 3, 32, 32) uint8 black frames: 3 x 3 x 32 x 32 = 9216 decoded bytes at native size; too
# little texture, so the background stops at once (not_applicable) and the clips score fast
T, H, W = 3, 32, 32
CLIP_BYTES = T * 3 * H * W


def _flat(k: int) -> torch.Tensor:
    return torch.full((T, 3, H, W), 10 * k, dtype=torch.uint8)


# --- result.migrate_result -----------------------------------------------------------------


def test_a_category_key_is_migrated_whatever_the_declared_schema():
    """A row that declares schema 2.x / 3.x but still carries the 1.x ``category`` (a
    hand-edited or mislabelled row) is read as 1.x there: the prompt family goes to
    ``prompt_category``, a behaviour to ``behaviour``; nothing stays under ``category``."""
    for version in ("2.0", "3.0"):
        res = ClipResult.from_dict({"schema_version": version, "clip": "x", "category": "C3"})
        assert res.prompt_category == "C3" and res.behaviour is None
        assert "category" not in res.extra and "category" not in res.to_dict()
        res = ClipResult.from_dict({"schema_version": version, "clip": "y",
                                    "category": "Static"})
        assert res.behaviour == "Static" and res.prompt_category is None


# --- categories -----------------------------------------------------------------------------


def test_each_alias_names_its_own_prompt_family():
    """The aliases are the paper's family names (sec. 5), one per family and both ways: "stress"
    is C6 and "complex" C5 (both F, so the regime alone cannot tell them apart)."""
    from geocon_torch.categories import CATEGORY_NAMES, canonical_category

    names = ("static", "rotation", "translation", "moving_object", "complex", "stress")
    assert [canonical_category(n) for n in names] == ["C1", "C2", "C3", "C4", "C5", "C6"]
    assert [CATEGORY_NAMES[f"C{k}"] for k in range(1, 7)] == list(names)
    assert canonical_category(" Complex ") == "C5" and canonical_category("STRESS") == "C6"


# --- presets --------------------------------------------------------------------------------


def test_preset_table_lists_overrides_sorted_by_section(monkeypatch):
    """A preset row's config overrides are listed sorted by section name (the README table is
    this text, so its order must not follow how the entry was typed)."""
    from geocon_torch import presets

    row = presets.Preset("x", "a test row", ("background",), "background",
                         overrides={"io": {"stride": 2}, "features": {"backend": "opencv-sift"}})
    monkeypatch.setitem(presets.PRESETS, "x", row)
    line = presets.preset_table().splitlines()[-1]
    assert line == ("| `x` | `background` | `background` | - | "
                    "`features={'backend': 'opencv-sift'}`, `io={'stride': 2}` | a test row |")


# --- _morphology ----------------------------------------------------------------------------


def test_a_window_of_257_with_256_set_pixels_dilates():
    """Radius 128 (k = 257): a window can hold 256 set pixels, which a uint8 running count
    would read as 0 (256 mod 256): the counts must be int64 there. One row of 600 px, all set
    but pixel 300: every pixel stays set after dilation, and erosion clears 300 +- 128."""
    from geocon_torch._morphology import dilate_mask, erode_mask

    m = torch.ones(1, 1, 600, dtype=torch.bool)
    m[0, 0, 300] = False
    assert bool(dilate_mask(m, 128).all())
    want = torch.ones(600, dtype=torch.bool)
    want[172:429] = False
    assert torch.equal(erode_mask(m, 128)[0, 0], want)


# --- _precision -----------------------------------------------------------------------------


def test_full_precision_values_are_left_as_they_are():
    """Inside ``full_float32`` a per-backend value that already meant full float32 ("none":
    inherit, i.e. torch's default IEEE) is not rewritten: oneDNN's switches read back "none"
    inside the block, as the caller left them (only lowered ones are pinned)."""
    from geocon_torch import _precision

    if not _precision._PER_BACKEND:
        pytest.skip("per-backend fp32_precision switches: torch >= 2.9")
    ops = ("all", "matmul", "conv")
    before = [_precision._get("mkldnn", op) for op in ops]
    if before != ["none"] * 3:
        pytest.skip(f"oneDNN switches not at torch's defaults: {before}")
    with _precision.full_float32():
        assert [_precision._get("mkldnn", op) for op in ops] == ["none"] * 3
    assert [_precision._get("mkldnn", op) for op in ops] == before


# --- _memory --------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="glibc only")
def test_malloc_trim_is_found_on_glibc():
    """On glibc Linux the pipeline's memory release is live (the RSS test of
    test_memory_chunking skips itself when it is not, so it cannot see it switched off)."""
    from geocon_torch._memory import _malloc_trim, release_freed_memory

    assert _malloc_trim() is not None
    assert isinstance(release_freed_memory(), bool)


# --- pipeline: batch budget -----------------------------------------------------------------


@pytest.fixture
def calls(monkeypatch):
    """Records the clips per batched background call and per batched tensor read."""
    got = {"backgrounds": [], "reads": []}
    backgrounds, reads = pipeline.score_backgrounds, pipeline.clips_from_tensors

    def spy_backgrounds(clips, *args, **kwargs):
        got["backgrounds"].append(len(clips))
        return backgrounds(clips, *args, **kwargs)

    def spy_reads(tensors, *args, **kwargs):
        got["reads"].append(len(tensors))
        return reads(tensors, *args, **kwargs)

    monkeypatch.setattr(pipeline, "score_backgrounds", spy_backgrounds)
    monkeypatch.setattr(pipeline, "clips_from_tensors", spy_reads)
    return got


def test_a_batch_holds_exactly_batch_bytes_of_frames(calls):
    """``batch_bytes`` is an inclusive bound on the batch's decoded RGB bytes (T x 3 x H x W
    uint8 per clip): two clips of exactly the budget are read and scored together, one byte
    less splits them (three clips then: one per batch)."""
    clips = [_flat(k) for k in range(3)]
    got = score_clips(clips, preset="background", device="cpu", batch_bytes=2 * CLIP_BYTES)
    assert [r.clip for r in got] == ["clip0", "clip1", "clip2"]
    assert calls == {"backgrounds": [2, 1], "reads": [2]}
    calls["backgrounds"].clear()
    calls["reads"].clear()
    tight = score_clips(clips, preset="background", device="cpu",
                        batch_bytes=2 * CLIP_BYTES - 1)
    assert calls == {"backgrounds": [1, 1, 1], "reads": []}
    strip = [{k: v for k, v in r.to_dict().items() if k != "timing_s"} for r in got]
    assert [{k: v for k, v in r.to_dict().items() if k != "timing_s"} for r in tight] == strip


# --- pipeline: error rows and names ---------------------------------------------------------


def test_an_unreadable_clips_row_has_the_config_of_the_scored_rows(tmp_path):
    """The error row of a clip that cannot be read is recorded under the same pinned config
    (and hash) as the clips of its call that were scored: a store keys both alike."""
    got = score_clips([_flat(1), tmp_path / "gone.mp4"], preset="background", device="cpu")
    assert [r.status for r in got] == ["not_applicable", "error"]
    assert got[1].config == got[0].config and got[1].config_hash == got[0].config_hash
    assert got[1].config["features"]["backend"] != "auto"  # pinned, as the scored row's


def test_a_failed_epipolar_dpo_section_names_itself(monkeypatch):
    """Preset "epipolar-dpo" takes its status from its own block: when that section raises,
    the clip's reason starts with "epipolar_dpo section failed: " (as for "epipolar")."""
    def boom(*args, **kwargs):
        raise RuntimeError("sampler exploded")

    monkeypatch.setattr(pipeline, "epipolar_dpo_block", boom)
    res = score_clip(_flat(1), preset="epipolar-dpo", device="cpu", progress=False)
    assert res.status == "error" and res.epipolar_dpo["status"] == "error"
    assert res.reason == "epipolar_dpo section failed: RuntimeError: sampler exploded"


def test_a_clip_input_keeps_its_name_in_a_batch():
    """score_clips names tensors clip0, clip1, ... by position, but a Clip keeps its own name."""
    clip, _ = load_clip(_flat(1), device="cpu")
    mine = dataclasses.replace(clip, name="my_scene")
    got = score_clips([_flat(0), mine], preset="background", device="cpu")
    assert [r.clip for r in got] == ["clip0", "my_scene"]


def test_the_epipolar_backend_records_the_presets_protocol(monkeypatch):
    """``backends["epipolar"]`` names the protocol the preset ran: "gvgc" for preset "gvgc",
    "worldatlas" for "worldatlas" (the section itself is stubbed: only the record is tested)."""
    monkeypatch.setattr(pipeline, "epipolar_blocks",
                        lambda videos, *args, **kwargs: [{"status": "ok"} for _ in videos])
    for preset in ("gvgc", "worldatlas"):
        res = score_clip(_flat(1), preset=preset, device="cpu", progress=False)
        assert res.status == "ok" and res.backends["epipolar"] == preset
