"""checkpoints: the model cache of the heavy learned backends."""
from __future__ import annotations

import os


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
