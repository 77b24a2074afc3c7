"""One module per result block, each a public function ``Clip (+ masks, poses, config) -> block``:

* :mod:`.background`: the ``background`` and ``gate`` blocks (paper Algorithm 1 A-C, E);
* :mod:`.foreground`: the ``foreground`` block (AdaDFRC-W2, Algorithm 1 D);
* :mod:`.epipolar`: the ``epipolar`` block (WorldAtlas trio, GVGC).

:func:`geocon_torch.score_clip` is the list of these calls.
"""
