"""The headline ``ge`` term of a background block with too few valid pairs (GE = tau_H) reads the
row's own ``background.tau_h``, in px at the row's working size, and falls back to the 2-px
default only when the row records none."""
import math

import pytest

from geocon_torch.measures.headline import (FEW_VALID_PAIRS, GE_SCALE_PX, headline_score,
                                            headline_terms)


def _few_pairs_row(config):
    return {"status": "not_applicable", "working_size": [512, 512], "config": config,
            "background": {"status": "not_applicable", "pairs": 4, "ge_px": None,
                           "reason": f"{FEW_VALID_PAIRS}: 0 of 4 (pair, scale) entries valid"}}


@pytest.mark.parametrize("config, px_at_1024", [
    ({"background": {"tau_h": 3.0}}, 6.0),  # 3 px at 512 = 6 px at 1024
    ({"background": {"tau_h": 0.5}}, 1.0),
    ({"background": {}}, 4.0),  # no tau_h recorded: the default 2 px
    (None, 4.0),
])
def test_few_valid_pairs_ge_term_reads_the_rows_tau_h(config, px_at_1024):
    row = _few_pairs_row(config)
    want = math.exp(-px_at_1024 / GE_SCALE_PX)
    assert headline_terms(row) == {"ge": pytest.approx(want, rel=1e-12)}
    assert headline_score(row) == pytest.approx(want, rel=1e-12)  # the only term
