"""``geocon explain`` / ``explain_result`` on grounded clips written to tmp_path: a static H clip
that passes, a translating F clip that passes, and a breathing-corrupted rotation clip gated H
by its true poses that fails the report gate."""
import json

import numpy as np
import pytest

from geocon_torch import score_clip
from geocon_torch.cli import main
from geocon_torch.report.explain import explain_result, failing_pairs, worst_pair
from geocon_torch.config import GeoConConfig
from geocon_torch.synth import grounded_clip

CFG = {"background": {"sensitivity": True}, "preset": "background"}
CLIPS = {"static": ("C1", {}), "truck": ("C3", {}),
         "breathing": ("C2", {"corruption": "breathing", "severity": 1.0})}


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """name -> (video path, poses path or None, result dict), scored once."""
    out = tmp_path_factory.mktemp("explain")
    got = {}
    for name, (cat, kw) in CLIPS.items():
        clip = grounded_clip(cat, num_frames=6, size=(120, 160), **kw)
        video = clip.save(out).with_suffix(".mp4")
        poses = None
        if kw:  # the true poses gate the corrupted clip H (the camera only rotates)
            poses = out / f"{name}_poses.npz"
            np.savez(poses, absolute_poses=clip.poses.numpy())
        res = score_clip(str(video), poses=None if poses is None else str(poses), config=CFG,
                         device="cpu", progress=False).to_dict()
        got[name] = (video, poses, res)
    return got


def test_passing_h_clip(scored):
    _, _, res = scored["static"]
    assert res["regime"] == "H" and res["background"]["pass"] is True
    text = explain_result(res, device="cpu")
    assert "Regime H" in text and "Report gate (paper): PASS" in text
    assert "report_ir 0.97: ok" in text and "report_ge_px 3.5: ok" in text
    gate = res["gate"]
    assert (f"the gate would flip to F if {gate['evidence']['statistic_name']} rose to >= "
            f"{gate['thresholds']['high']:g}") in text
    assert "Worst pair #" in text


def test_passing_f_clip(scored):
    _, _, res = scored["truck"]
    assert res["regime"] == "F"
    text = explain_result(res, device="cpu", evidence=False)
    assert "Regime F" in text and "decision F" in text and "-> F" in text
    assert "would flip to H if parallax_magnitude fell to <= " in text
    assert "Worst pair" not in text  # evidence=False: stored numbers only
    # a 160-px file scored upscaled: the view reads the file at its own size, not the upscaled
    # working frames shrunk back
    view = res["gate"]["evidence"]["view"]
    assert view == {"backend": "opencv-sift", "long_side": 160, "source": "file"}
    assert "read on the gate's own view: opencv-sift at 160 px (file)" in text


def test_failing_corrupted_clip(scored):
    video, poses, res = scored["breathing"]
    bg = res["background"]
    assert res["regime"] == "H" and bg["pass"] is False
    text = explain_result(res, poses=str(poses), device="cpu")
    assert "Regime H: gate method 'poses'" in text and "Report gate (paper): FAIL" in text
    assert "< report_ir 0.97: FAILS" in text
    cfg = GeoConConfig.from_dict(res["config"])
    bad = failing_pairs(bg, cfg)
    k = worst_pair(bg)
    assert bad and bad[0]["index"] == k and min(r["ir"] for r in bad) == bad[0]["ir"]
    assert f"#{k} {bad[0]['pair']} H: IR {bad[0]['ir']:.4f} < 0.97" in text
    assert f"Worst pair #{k} ({bad[0]['pair'][0]}, {bad[0]['pair'][1]}) (H)" in text
    assert "outliers by quadrant" in text
    assert "the report gate would pass at tau_H >=" in text or "no tau_H in the" in text
    other = next(i for i in range(len(bg["per_pair"])) if i != k)  # a pair the user picks
    picked = explain_result(res, pair=other, poses=str(poses), device="cpu")
    assert f"\nPair #{other} " in picked and "Worst pair" not in picked


def test_cli_result_files_and_exit_codes(scored, tmp_path, capsys):
    results = [scored[n][2] for n in ("static", "truck")]
    one = tmp_path / "one.json"
    one.write_text(json.dumps(results[1], indent=1))
    jsonl = tmp_path / "all.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in results))
    assert main(["explain", str(one), "--no-evidence"]) == 0
    assert "Regime F" in capsys.readouterr().out
    assert main(["explain", str(jsonl), "--clip", results[0]["clip"], "--no-evidence"]) == 0
    assert "Regime H" in capsys.readouterr().out
    assert main(["explain", str(jsonl)]) == 2  # two clips, no --clip
    assert "pick one with --clip" in capsys.readouterr().err
    assert main(["explain", str(jsonl), "--clip", "nope"]) == 2
    assert "0 matching clips" in capsys.readouterr().err
    assert main(["explain", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "geocon explain: error: not found" in err
    assert main(["explain", str(one), "--pair", "99"]) == 2
    assert "--pair must be in [0, 5)" in capsys.readouterr().err


def test_cli_scores_a_video(scored, tmp_path, capsys):
    video, poses, _ = scored["breathing"]
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(CFG))
    rc = main(["explain", str(video), "--poses", str(poses), "--config", str(cfg),
               "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0 and "Report gate (paper): FAIL" in out and "Worst pair #" in out


def test_a_parallax_u_names_why_not_the_value_side():
    """A U of the parallax gate comes from the interval / noise floor: explain printed
    "7.783, <= low 11.98 -> H" above "decision U"; it now gives the gate's own reason and what
    would decide it."""
    from geocon_torch.report.explain import gate_lines

    gate = {"method": "parallax", "decision": "U", "statistic": 7.783,
            "thresholds": {"low": 11.98, "high": 16.0},
            "evidence": {"statistic_name": "parallax_magnitude", "u_resolved": "F",
                         "why_u": "parallax 7.78 ref px, 2-sigma interval [5.1, 13.2] not "
                                  "clear of the band [11.98, 16.00]",
                         "magnitude_ci_ref_px": [5.1, 13.2]}}
    lines = gate_lines(gate, "F")
    assert "-> H" not in lines[1] and "U: parallax 7.78 ref px, 2-sigma interval" in lines[1]
    h = {**gate, "decision": "H", "evidence": {"statistic_name": "parallax_magnitude"}}
    assert "<= low 11.98 -> H" in gate_lines(h, "H")[1]
