"""Motion masks from the preliminary fits: a batch of clips gets what each clip gets alone."""
import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.segment.seeds import motion_masks, motion_masks_batch
from geocon_torch.types import Clip, Fit


def _clip_and_rows(t: int, size, n: int, extra_rows: int, seed: int):
    """A clip (T, 3, H, W) uint8 of a static noise background with a bright square moving 3 px
    per frame, its adjacent pairs plus (0, 2), and for every pair (P, n) matches (a third on
    the square, moving with it, the rest static background), padded with ``extra_rows`` rows
    (gate rows: ignored); H fits: identity (one invalid pair), F fits: a skew-symmetric F."""
    h, w = size
    g = torch.Generator().manual_seed(seed)
    bg = torch.rand(h, w, generator=g) * 0.3
    frames = []
    for k in range(t):
        img = bg.clone()
        img[10:26, 4 + 3 * k:20 + 3 * k] = 0.9 + 0.05 * torch.rand(16, 16, generator=g)
        frames.append((img * 255).round().to(torch.uint8).expand(3, h, w))
    clip = Clip(frames=torch.stack(frames), fps=10.0, content_mask=torch.ones(h, w,
                dtype=torch.bool), frame_indices=torch.arange(t), source_size=(h, w))
    pairs = torch.tensor([(k, k + 1) for k in range(t - 1)] + [(0, 2)])
    p, r = pairs.shape[0], pairs.shape[0] + extra_rows
    x1 = torch.stack([torch.rand(n, generator=g) * (w - 1), torch.rand(n, generator=g)
                      * (h - 1)], -1).expand(r, n, 2).clone()
    x2 = x1.clone()
    on = torch.arange(n) % 3 == 0  # on the square: moving 3 px per frame
    for row in range(p):
        i, j = pairs[row].tolist()
        x1[row, on, 0] = 6 + 3 * i + torch.rand(int(on.sum()), generator=g) * 12
        x1[row, on, 1] = 12 + torch.rand(int(on.sum()), generator=g) * 12
        x2[row, on] = x1[row, on] + torch.tensor([3.0 * (j - i), 0.0])
    mask = torch.rand(r, n, generator=g) > 0.1
    valid = torch.ones(r, dtype=torch.bool)
    valid[1] = False

    def fit(kind, model):
        return Fit(kind, model.expand(r, 3, 3).clone(), mask.clone(), torch.zeros(r, n), valid,
                   mask.sum(1), torch.ones(r, dtype=torch.long), torch.zeros(r))

    skew = torch.tensor([[0.0, -1.0, 0.2], [1.0, 0.0, -0.3], [-0.2, 0.3, 0.0]])
    return clip, pairs, x1, x2, mask, (fit("H", torch.eye(3)), fit("F", skew))


def test_motion_masks_of_a_batch_equal_each_clip_alone():
    """Clips of two sizes, lengths and match counts (the point axis padded in the batch), with
    and without gate rows, given residuals or not, one under F (no dense residuals), get the
    masks and evidence they get alone, bit for bit."""
    cfg = GeoConConfig.from_dict({"segment": {"motion_min_area": 20, "motion_min_frames": 2,
                                              "motion_min_seeds": 3}})
    specs = [(6, (48, 64), 30, 2, "H"), (5, (48, 64), 20, 0, "F"), (7, (48, 64), 24, 1, "H"),
             (4, (40, 56), 18, 0, "H")]
    data = [_clip_and_rows(t, s, n, e, k) for k, (t, s, n, e, _) in enumerate(specs)]
    regimes = [r for *_, r in specs]
    residuals = [None, torch.rand(5, 20, generator=torch.Generator().manual_seed(9)),
                 None, None]
    cols = list(zip(*data))
    batch = motion_masks_batch(*cols[:5], cols[5], cfg, regimes, residuals)
    for k, (clip, pairs, x1, x2, mask, fits) in enumerate(data):
        if residuals[k] is None:
            alone = motion_masks(clip, pairs, x1, x2, mask, fits, cfg, regimes[k])
        else:
            alone = motion_masks_batch([clip], [pairs], [x1], [x2], [mask], [fits], cfg,
                                       [regimes[k]], [residuals[k]])[0]
        assert torch.equal(batch[k][0], alone[0]) and batch[k][1] == alone[1], k
    assert [ev["objects"] for _, ev in batch] == [1, 0, 1, 1]
    assert batch[0][1]["seeds"] > 0 and "dense" in batch[1][1]
