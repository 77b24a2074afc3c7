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
    os.utime(ckpt, ns=(1, 1))  # the file changed: a new model
    assert cached_model("test-kind", ckpt, (2,), build) is not b and len(built) == 3


def test_a_checkpoint_for_a_backend_without_weights_is_a_clear_error(tmp_path):
    """features.checkpoint set for a weight-free or pip-weights backend: an InputError naming
    it (was a cv2.error from SIFT_create or a TypeError about an unexpected keyword)."""
    from geocon_torch.errors import InputError
    from geocon_torch.features import get_extractor

    for name in ("opencv-sift", "torch-sift"):
        with pytest.raises(InputError, match=f"backend '{name}' loads no checkpoint"):
            get_extractor(name, device="cpu", checkpoint=tmp_path / "w.pt")
