"""checkpoints: the model cache of the heavy learned backends."""
from __future__ import annotations

import os

import pytest


def test_cached_model_reloads_only_when_the_checkpoint_or_options_change(tmp_path):
    from geocon_torch.checkpoints import cached_model

    ckpt = tmp_path / "m.pt"
    ckpt.write_bytes(b"v1")
    built = []

    def build():
        built.append(ckpt.read_bytes())
        return object()

    a = cached_model("test-kind", ckpt, (1,), build)
    assert cached_model("test-kind", ckpt, (1,), build) is a and len(built) == 1
    b = cached_model("test-kind", ckpt, (2,), build)  # another option: a new model
    assert b is not a and len(built) == 2
    os.utime(ckpt, ns=(1, 1))  # touched, same content: the same model (keyed on content)
    assert cached_model("test-kind", ckpt, (2,), build) is b and len(built) == 2
    ckpt.write_bytes(b"v2")  # the content changed: a new model
    os.utime(ckpt, ns=(2, 2))
    assert cached_model("test-kind", ckpt, (2,), build) is not b and len(built) == 3


def test_a_checkpoint_for_a_backend_without_weights_is_a_clear_error(tmp_path):
    """features.checkpoint set for a weight-free or pip-weights backend: an InputError naming
    it (was a cv2.error from SIFT_create or a TypeError about an unexpected keyword)."""
    from geocon_torch.errors import InputError
    from geocon_torch.features import get_extractor

    for name in ("opencv-sift", "torch-sift"):
        with pytest.raises(InputError, match=f"backend '{name}' loads no checkpoint"):
            get_extractor(name, device="cpu", checkpoint=tmp_path / "w.pt")


def test_unreadable_checkpoints_say_why_without_unsafe_advice(tmp_path):
    """The message names the file and the cause: empty, truncated, not a torch checkpoint, or
    the global a safe load refused; never torch's "Re-running torch.load with weights_only set
    to False will likely succeed" (it contradicts the safe loading) nor "[Errno 22]"."""
    import argparse

    import torch

    from geocon_torch.checkpoints import load_weights_only, read_state_dict
    from geocon_torch.errors import CheckpointError

    good = tmp_path / "good.pt"
    torch.save({"w": torch.zeros(2000)}, good)
    data = good.read_bytes()
    ns = tmp_path / "ns.pt"
    torch.save({"args": argparse.Namespace(a=1)}, ns)
    cases = {"empty.pt": (b"", "the file is empty"),
             "head.pt": (data[:64], "truncated or corrupted"),
             "half.pt": (data[: len(data) // 2], "truncated or corrupted"),
             "garbage.pt": (b"not a torch file", "not a torch checkpoint"),
             "ns.pt": (None, "Unsupported global: GLOBAL argparse.Namespace")}
    for name, (content, phrase) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        for load in (lambda: load_weights_only(path, "X"), lambda: read_state_dict(path, "X")):
            with pytest.raises(CheckpointError, match=f"X checkpoint .*{name} could not be read"
                               ) as info:
                load()
            msg = str(info.value)
            assert phrase in msg, msg
            for advice in ("False", "will likely succeed", "Errno", "add_safe_globals"):
                assert advice not in msg, msg
    assert load_weights_only(good, "X")["w"].shape == (2000,)
