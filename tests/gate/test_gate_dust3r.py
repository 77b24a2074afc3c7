"""The DUSt3R gate for real: the shared checkout (code, no weights) with a tiny random-init
model saved to tmp_path, loaded back through the safe loader, and the whole path first/last
pose -> t_inf -> hysteresis decision, in ``gate_from_dust3r`` and in ``score_clip``.

Needs ``../shared/third_party/dust3r`` and the ``dust3r`` extra (roma, huggingface_hub); the
``dust3r_checkout`` fixture (conftest.py) skips otherwise."""
import argparse
import pickle
import re

import pytest
import torch

from geocon_torch import score_clip, score_clips
from geocon_torch.checkpoints import _MODEL_CACHE
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import CheckpointError, OptionalDependencyError
from geocon_torch.gate import translation_inf
from geocon_torch.gate.dust3r import (Dust3rPoseEstimator, gate_from_dust3r, import_dust3r,
                                      model_kwargs)
from geocon_torch.synth import grounded_clip

SPEC = ("AsymmetricCroCo3DStereo(pos_embed='RoPE100', img_size=(64, 64), head_type='linear', "
        "output_mode='pts3d', depth_mode=('exp', -inf, inf), conf_mode=('exp', 1, inf), "
        "enc_embed_dim=64, enc_depth=1, enc_num_heads=2, dec_embed_dim=64, dec_depth=1, "
        "dec_num_heads=2)")


@pytest.fixture(scope="module")
def tiny_checkpoint(dust3r_checkout, tmp_path_factory):
    """A random-init DUSt3R (1 encoder / decoder block, width 64) saved as DUSt3R saves its
    checkpoints: ``{"args": Namespace(model=...), "model": state_dict}``."""
    from dust3r.model import AsymmetricCroCo3DStereo

    torch.manual_seed(0)
    model = AsymmetricCroCo3DStereo(**model_kwargs(SPEC))
    path = tmp_path_factory.mktemp("dust3r") / "tiny.pth"
    torch.save({"args": argparse.Namespace(model=SPEC), "model": model.state_dict()}, path)
    return path


@pytest.fixture(scope="module")
def clip():
    return grounded_clip("C3", num_frames=6, size=(96, 128)).to_clip()


def test_import_errors(tmp_path):
    with pytest.raises(OptionalDependencyError, match="not a folder"):
        import_dust3r(str(tmp_path / "nowhere"))


def test_model_string_is_parsed_not_evaluated():
    kw = model_kwargs(SPEC.replace("pos_embed", "patch_embed_cls='ManyAR_PatchEmbed', "
                                                "pos_embed"))
    assert kw["depth_mode"] == ("exp", -float("inf"), float("inf"))
    assert kw["img_size"] == (64, 64) and kw["landscape_only"] is False
    assert kw["patch_embed_cls"] == "PatchEmbedDust3R"
    for bad in ("__import__('os').system('true')", "AsymmetricCroCo3DStereo(x=open('f'))",
                "AsymmetricCroCo3DStereo(1)", "Other(a=1)", "AsymmetricCroCo3DStereo(**k)"):
        with pytest.raises(CheckpointError, match="not a plain"):
            model_kwargs(bad)


def test_loader_errors(dust3r_checkout, tmp_path):
    with pytest.raises(CheckpointError, match="needs a local checkpoint"):
        Dust3rPoseEstimator(None)
    with pytest.raises(CheckpointError, match="not found"):
        Dust3rPoseEstimator(str(tmp_path / "none.pth"))
    bad = tmp_path / "bad.pth"
    torch.save({"args": argparse.Namespace(model=SPEC), "model": {}}, bad)
    with pytest.raises(CheckpointError, match="lacks"):
        Dust3rPoseEstimator(str(bad))
    other = tmp_path / "other.pth"
    torch.save({"weights": {}}, other)
    with pytest.raises(CheckpointError, match="not a DUSt3R checkpoint"):
        Dust3rPoseEstimator(str(other))


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_loader_refuses_other_globals(dust3r_checkout, tmp_path):
    """Only argparse.Namespace is allow-listed: any other pickled global is refused unrun."""
    path = tmp_path / "evil.pth"
    with open(path, "wb") as fh:
        pickle.dump({"args": argparse.Namespace(model=SPEC), "model": {}, "x": _Evil()}, fh)
    with pytest.raises(CheckpointError, match="could not be read"):
        Dust3rPoseEstimator(str(path))


def test_plumbing_random_init(tiny_checkpoint):
    """Loaded back through the real loader: a proper rigid relative pose comes out."""
    est = Dust3rPoseEstimator(str(tiny_checkpoint), image_size=64)
    g = torch.Generator().manual_seed(0)
    f0 = torch.randint(0, 255, (3, 48, 64), dtype=torch.uint8, generator=g)
    rel = est.relative_pose(f0, f0.roll(2, -1))
    assert rel is not None and rel.shape == (4, 4) and torch.isfinite(rel).all()
    R = rel[:3, :3].double()
    torch.testing.assert_close(R @ R.T, torch.eye(3, dtype=torch.float64), atol=1e-4, rtol=0)
    assert float(torch.linalg.det(R)) == pytest.approx(1.0, abs=1e-4)


def _config(ckpt, checkout, low=0.03, high=0.05, **gate):
    return GeoConConfig().replace(gate={
        "method": "dust3r", "dust3r_checkpoint": str(ckpt), "dust3r_path": str(checkout),
        "dust3r_image_size": 64, "hysteresis_low": low, "hysteresis_high": high,
        "tau_t": (low + high) / 2, **gate})


def _rule(t, low, high):
    return "H" if t <= low else "F" if t >= high else "U"


def test_gate_end_to_end_follows_the_thresholds(tiny_checkpoint, dust3r_checkout, clip):
    """first/last pose -> t_inf -> decision: the recorded t_inf is the model's, and the decision
    is the hysteresis rule applied to it, for bands below, around and above it."""
    _MODEL_CACHE.pop("dust3r", None)
    est = Dust3rPoseEstimator(str(tiny_checkpoint), image_size=64)
    t_model = float(translation_inf(est.relative_pose(clip.frames[0], clip.frames[-1])))
    assert t_model > 0
    pairs = torch.stack([torch.arange(5), torch.arange(1, 6)], 1)
    bands = {"H": (2 * t_model, 3 * t_model), "U": (0.5 * t_model, 2 * t_model),
             "F": (0.25 * t_model, 0.5 * t_model)}
    models = set()
    for want, (low, high) in bands.items():
        cfg = _config(tiny_checkpoint, dust3r_checkout, low, high)
        d = gate_from_dust3r(clip, pairs, cfg.gate)
        models.add(id(_MODEL_CACHE["dust3r"][1]))
        assert d.method == "dust3r" and d.statistic == pytest.approx(t_model, rel=1e-9)
        assert d.evidence["t_inf"] == d.statistic
        assert d.decision == _rule(d.statistic, low, high) == want
        assert d.thresholds == {"tau_t": (low + high) / 2, "low": low, "high": high}
        assert d.evidence["source"] == f"dust3r:{tiny_checkpoint}"
    assert len(models) == 1  # the checkpoint is loaded once, then reused


def test_score_clip_with_the_dust3r_gate(tiny_checkpoint, dust3r_checkout, clip):
    """score_clip picks the DUSt3R gate (auto + a configured checkpoint), records its t_inf
    and decision, and scores the background with the decided model."""
    est = Dust3rPoseEstimator(str(tiny_checkpoint), image_size=64)
    t_model = float(translation_inf(est.relative_pose(clip.frames[0], clip.frames[-1])))
    for want, (low, high) in {"F": (0.25 * t_model, 0.5 * t_model),
                              "H": (2 * t_model, 3 * t_model)}.items():
        cfg = _config(tiny_checkpoint, dust3r_checkout, low, high, method="auto")
        res = score_clip(clip, config=cfg, preset="background", device="cpu").to_dict()
        gate = res["gate"]
        assert gate["method"] == "dust3r" and gate["decision"] == want
        assert gate["statistic"] == pytest.approx(t_model, rel=1e-9)
        assert res["regime"] == want


def _tensor_clips(clip):
    return [clip.frames, clip.frames.clone()]


def test_unusable_dust3r_raises_before_any_clip_is_read(dust3r_checkout, tmp_path, clip):
    """A DUSt3R gate that cannot be built (no checkpoint file, a junk file, a checkout path
    that is no folder) raises from score_clip, score_clips and geometric_reward before any
    clip is read (was: every clip an "error" row, every reward the neutral 0.0, silently)."""
    from geocon_torch import geometric_reward, score_clips
    from geocon_torch.metrics import BackgroundConsistency

    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"junk")
    cases = [({"dust3r_checkpoint": str(tmp_path / "none.pth")}, CheckpointError,
              f"the DUSt3R gate checkpoint not found: {tmp_path / 'none.pth'}"),
             ({"dust3r_checkpoint": str(junk)}, CheckpointError,
              "could not be read: it is not a torch checkpoint"),
             ({"dust3r_checkpoint": str(junk), "dust3r_path": str(tmp_path / "nowhere")},
              OptionalDependencyError, "is not a folder")]
    for gate, kind, phrase in cases:
        cfg = {"gate": {"method": "dust3r", "dust3r_path": str(dust3r_checkout), **gate}}
        with pytest.raises(kind, match=re.escape(phrase)):  # a missing file is never read
            score_clips([str(tmp_path / "missing.mp4")] + _tensor_clips(clip), config=cfg)
        with pytest.raises(kind, match=re.escape(phrase)):
            score_clip(str(tmp_path / "missing.mp4"), config=cfg)
        with pytest.raises(kind, match=re.escape(phrase)):
            geometric_reward(torch.stack(_tensor_clips(clip)), kind="background", config=cfg)
        with pytest.raises(kind, match=re.escape(phrase)):
            BackgroundConsistency(config=cfg).update(torch.stack(_tensor_clips(clip)))
    # poses given for every clip: the "auto" gate never runs DUSt3R, nothing to build
    auto = {"gate": {"dust3r_checkpoint": str(junk), "dust3r_path": str(dust3r_checkout)}}
    eye = torch.eye(4, dtype=torch.float64)[None].repeat(6, 1, 1)
    got = score_clips(_tensor_clips(clip), poses=[eye, eye], config=auto, preset="background",
                      device="cpu")
    assert [r.gate["method"] for r in got] == ["poses", "poses"]


def test_dust3r_is_loaded_once_for_the_preflight_and_the_gate(tiny_checkpoint, dust3r_checkout,
                                                              clip, monkeypatch):
    """The preflight builds the gate's model through the gate's own cache: one load for a
    batch, none for the next call."""
    import geocon_torch.gate.dust3r as d3

    loads = []
    real = d3.load_dust3r_model
    monkeypatch.setattr(d3, "load_dust3r_model", lambda p: loads.append(p) or real(p))
    _MODEL_CACHE.pop("dust3r", None)
    cfg = _config(tiny_checkpoint, dust3r_checkout)
    got = score_clips(_tensor_clips(clip), config=cfg, preset="background", device="cpu")
    assert [r.gate["method"] for r in got] == ["dust3r", "dust3r"] and len(loads) == 1
    score_clips(_tensor_clips(clip), config=cfg, preset="background", device="cpu")
    assert len(loads) == 1
