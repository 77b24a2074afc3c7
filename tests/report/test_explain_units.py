"""`geocon explain` prints the gate statistic and its thresholds with their unit, as the HTML
card and page do ("ref px" for ``parallax_magnitude``; nothing for a ratio)."""
from geocon_torch.config import GeoConConfig
from geocon_torch.report.explain import change_lines, gate_lines

CFG = GeoConConfig()


def _gate(decision, statistic, name="parallax_magnitude", **evidence):
    return {"method": "parallax", "decision": decision, "statistic": statistic,
            "thresholds": {"low": 16.0, "high": 30.0},
            "evidence": dict(statistic_name=name, **evidence)}


def test_gate_line_has_ref_px_on_value_and_thresholds():
    line = gate_lines(_gate("F", 85.25), "F")[1]
    assert line == ("  parallax_magnitude = 85.25 ref px, >= high 30 -> F "
                    "(H if <= 16 ref px, F if >= 30 ref px).")


def test_flip_points_have_ref_px():
    change = change_lines({"gate": _gate("F", 85.25), "background": {}}, CFG)[1]
    assert change == ("  the gate would flip to H if parallax_magnitude fell to <= 16 ref px "
                      "(now 85.25 ref px; U below 30 ref px).")
    change = change_lines({"gate": _gate("H", 3.5), "background": {}}, CFG)[1]
    assert change == ("  the gate would flip to F if parallax_magnitude rose to >= 30 ref px "
                      "(now 3.5 ref px; U above 16 ref px).")
    u = _gate("U", 20.0, why_u="interval", magnitude_ci_ref_px=[12.0, 33.0])
    change = change_lines({"gate": u, "background": {}}, CFG)[1]
    assert change.endswith("(now 20 ref px, interval [12, 33] ref px).")


def test_ratio_statistic_has_no_unit():
    line = gate_lines(_gate("H", 0.25, name="parallax_fraction"), "H")[1]
    assert line == ("  parallax_fraction = 0.25, <= low 16 -> H (H if <= 16, F if >= 30).")
