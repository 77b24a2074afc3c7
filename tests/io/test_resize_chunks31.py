"""Upscaling tensor clips keeps its float copies bounded (memory audit s30 F2, the part left
then): the resize cut its chunks by the *input* frame's size, so a 4x upscale held 16x the
budget of floats (8 clips of 16 x 120 x 160 at long side 640: +744 MB over the input, now
+290 MB), and float clips were mapped to uint8 all at once. The chunks now count the larger of
input and output values, and the frames are bit-identical whatever the chunk."""
from __future__ import annotations

from typing import List

import pytest
import torch
import torch.nn.functional as F

from geocon_torch.io import clips_from_tensor, reader, resize


def _interpolate_sizes(monkeypatch) -> List[int]:
    """The output values of every ``F.interpolate`` call the resize makes from now on."""
    seen: List[int] = []
    real = F.interpolate

    def spy(x, *args, **kwargs):
        out = real(x, *args, **kwargs)
        seen.append(out.numel())
        return out

    monkeypatch.setattr(resize.F, "interpolate", spy)
    return seen


def _float_chunks(monkeypatch) -> List[int]:
    """The values of every float chunk :func:`reader._to_uint8` maps from now on."""
    seen: List[int] = []
    real = torch.Tensor.float

    def spy(self):
        out = real(self)
        seen.append(out.numel())
        return out

    monkeypatch.setattr(torch.Tensor, "float", spy)
    return seen


def test_an_upscale_is_resized_in_chunks_of_output_values(monkeypatch):
    x = torch.rand(2, 5, 3, 30, 40, generator=torch.Generator().manual_seed(0))
    whole = clips_from_tensor(x, long_side=160)  # 4x: 120 x 160 output frames
    monkeypatch.setattr(resize, "RESIZE_CHUNK_VALUES", 3 * 120 * 160 * 3)  # three frames out
    sizes = _interpolate_sizes(monkeypatch)
    chunked = clips_from_tensor(x, long_side=160)
    assert sizes == [3 * 120 * 160 * 3] * 3 + [3 * 120 * 160]  # 10 frames: 3 + 3 + 3 + 1
    for a, b in zip(whole, chunked):
        assert torch.equal(a.frames, b.frames)


def test_a_shrink_still_counts_its_input_values(monkeypatch):
    x = torch.randint(0, 256, (1, 4, 3, 80, 120), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(1))
    whole = clips_from_tensor(x, long_side=60)
    monkeypatch.setattr(resize, "RESIZE_CHUNK_VALUES", 2 * 3 * 80 * 120)  # two input frames
    sizes = _interpolate_sizes(monkeypatch)
    chunked = clips_from_tensor(x, long_side=60)
    assert sizes == [2 * 3 * 40 * 60] * 2
    assert torch.equal(whole[0].frames, chunked[0].frames)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_floats_are_mapped_to_uint8_in_chunks(monkeypatch, dtype):
    x = torch.rand(1, 7, 3, 16, 24, dtype=dtype, generator=torch.Generator().manual_seed(2))
    x[0, 0, 0, 0, :4] = torch.tensor([0.0, 1.0, 0.5 / 255, 254.5 / 255], dtype=dtype)
    expect = (x.float() * 255.0).round().clamp(0, 255).to(torch.uint8)
    monkeypatch.setattr(reader, "RESIZE_CHUNK_VALUES", 2 * 3 * 16 * 24)
    chunks = _float_chunks(monkeypatch)
    got = reader._to_uint8(x)
    assert chunks == [2 * 3 * 16 * 24] * 3 + [3 * 16 * 24]
    assert got.dtype == torch.uint8 and torch.equal(got, expect)
    assert got[0, 0, 0, 0, :4].tolist() == [0, 255, 0, 254]  # round half to even, as before
