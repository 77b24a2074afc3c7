"""geocon pairs / geocon_torch.bench.preferences: grouping by prompt, best vs worst choice, skipped
prompts with reasons, resumable scoring, and the clean grounded clip chosen over its corrupted
versions (the clean static one, a frozen video, left unscored)."""
from __future__ import annotations

import json

import pytest

from geocon_torch.bench import ResultStore, write_manifest
from geocon_torch.bench.preferences import choose_pair, kind_config, preference_records
from geocon_torch.bench.manifest import ManifestEntry
from geocon_torch.cli import main
from geocon_torch.pipeline import score_clip
from geocon_torch.rewards import FROZEN_REASON, ClipReward, geometric_reward, reward_from_result
from geocon_torch.synth import grounded_clip

pytest.importorskip("cv2")

CORRUPTIONS = ("rubber_sheet", "background_slide", "breathing")
NATIVE = {"io": {"long_side": None}}


def ok(r: float) -> ClipReward:
    return ClipReward(r, "ok", None, 3, 3)


def test_choose_pair_best_worst_ties_and_margin():
    rec = choose_pair("p", [("a", ok(0.5)), ("b", ok(0.9)), ("c", ok(0.1)),
                            ("d", ClipReward(0.0, "not_applicable", "textureless", 0, 3))],
                      "background")
    assert rec["status"] == "pair" and (rec["chosen"], rec["rejected"]) == ("b", "c")
    assert rec["margin"] == pytest.approx(0.8) and rec["num_scored"] == 3
    assert rec["unscored"] == {"d": "not_applicable: textureless"}
    tie = choose_pair("p", [("a", ok(0.5)), ("b", ok(0.5)), ("c", ok(0.2))], "background")
    assert tie["chosen"] == "a"
    small = choose_pair("p", [("a", ok(0.5)), ("b", ok(0.45))], "background", min_margin=0.1)
    assert small["status"] == "skipped" and "below the minimum" in small["reason"]
    assert small["chosen"] == "a"
    one = choose_pair("p", [("a", ok(0.5)), ("b", ClipReward(0.0, "error", "boom", 0, 0))],
                      "background")
    assert one["status"] == "skipped" and "1 scoreable" in one["reason"]


def test_choose_pair_worst_tie_goes_to_the_last_clip_and_the_margin_bound_is_inclusive():
    """Ties: the best reward goes to the clip listed first, the worst to the clip listed last;
    a margin equal to min_margin makes a pair (only a smaller one is skipped)."""
    rec = choose_pair("p", [("a", ok(0.2)), ("b", ok(0.9)), ("c", ok(0.2)), ("d", ok(0.9))],
                      "background")
    assert (rec["chosen"], rec["rejected"]) == ("b", "c")
    at = choose_pair("p", [("a", ok(0.75)), ("b", ok(0.5))], "background", min_margin=0.25)
    assert at["status"] == "pair" and at["margin"] == 0.25
    assert (at["chosen"], at["rejected"]) == ("a", "b")


def test_records_group_by_prompt_and_missing_results():
    entries = [ManifestEntry("a", "a.mp4", "m", prompt="cat"),
               ManifestEntry("b", "b.mp4", "m", prompt="dog"),
               ManifestEntry("c", "c.mp4", "m", prompt="cat"),
               ManifestEntry("d", "d.mp4", "m")]
    res = {cid: {"status": "ok", "background": {"ir": ir, "ge_px": 0.0}}
           for cid, ir in (("a", 0.9), ("b", 0.8), ("c", 0.6), ("d", 0.7))}
    del res["b"]
    recs = preference_records(entries, res, "background", kind_config(None, "background"))
    assert [r["prompt"] for r in recs] == ["cat", "dog", None]
    assert recs[0]["status"] == "pair" and (recs[0]["chosen"], recs[0]["rejected"]) == ("a", "c")
    assert recs[1]["status"] == "skipped"
    assert recs[1]["unscored"] == {"b": "error: no stored result"}
    assert recs[2]["status"] == "skipped" and "no prompt" in recs[2]["reason"]


def test_stored_result_reward_is_geometric_reward():
    """geocon pairs and geometric_reward fold a result with the same function."""
    frames = grounded_clip("C2", num_frames=6, size=(120, 160)).frames
    rewards, diag = geometric_reward(frames[None], kind="background")
    res = score_clip(frames, preset="background", config=NATIVE, device="cpu").to_dict()
    assert reward_from_result(res, "background").reward == pytest.approx(float(rewards[0]),
                                                                         rel=1e-6)
    assert diag.clips[0].status == "ok"


@pytest.fixture(scope="module")
def grounded_manifest(tmp_path_factory):
    """Two prompts (C1 static, C3 truck), each: clean + rubber_sheet / background_slide /
    breathing at severity 0.8; 16 frames (one breathing period) of 120 x 160 px, written as mp4
    + a JSONL manifest. (With 8 frames the breathing clips are gated to F, which absorbs half a
    period of radial scaling: the gated-model reward then ranks them with the clean clip.)"""
    root = tmp_path_factory.mktemp("prefs")
    rows = []
    for cat in ("C1", "C3"):
        for kind in (None,) + CORRUPTIONS:
            clip = grounded_clip(cat, num_frames=16, size=(120, 160), corruption=kind,
                                 severity=0.8 if kind else 0.0)
            clip.clip_id = f"{cat}_{kind or 'clean'}"
            clip.save(root)
            rows.append({"clip_id": clip.clip_id, "path": f"{clip.clip_id}.mp4",
                         "generator": "synth", "prompt": f"scene {cat}"})
    (root / "native.json").write_text(json.dumps(NATIVE))
    return write_manifest(root / "manifest.jsonl", rows), root


def test_pairs_cli_chooses_clean_and_resumes(grounded_manifest, capsys):
    manifest, root = grounded_manifest
    db, out = root / "results.sqlite", root / "prefs.jsonl"
    argv = ["pairs", str(manifest), "--db", str(db), "--out", str(out), "--kind", "background",
            "--config", str(root / "native.json"), "--no-progress"]
    assert main(argv) == 0
    assert "8 clip(s) scored" in capsys.readouterr().out
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in recs] == ["scene C1", "scene C3"]
    for r in recs:
        assert r["status"] == "pair" and r["margin"] > 0, r
    # C3 (the camera trucks): the clean clip is chosen over its three corruptions
    assert recs[1]["chosen"] == "C3_clean" and recs[1]["num_scored"] == 4
    # C1 (locked-off camera, nothing moves): the clean clip is a frozen video, unscored like
    # the reward leaves it (its row records motion.frozen); the corruptions, which move, pair
    assert recs[0]["unscored"] == {"C1_clean": f"not_applicable: {FROZEN_REASON}"}
    assert recs[0]["num_scored"] == 3 and "C1_clean" not in (recs[0]["chosen"],
                                                            recs[0]["rejected"])
    with ResultStore(db) as store:
        assert store.count("results") == 8
    assert main(argv + ["--min-margin", "2"]) == 0  # rerun: nothing recomputed
    assert "0 clip(s) scored, 8 already stored" in capsys.readouterr().out
    skipped = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["status"] == "skipped" and "below the minimum" in r["reason"] for r in skipped)


def test_pairs_cli_user_errors(tmp_path, capsys):
    code = main(["pairs", str(tmp_path / "missing.csv"), "--db", str(tmp_path / "r.sqlite"),
                 "--out", str(tmp_path / "p.jsonl"), "--kind", "background"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "manifest not found" in err
    bad = tmp_path / "m.csv"  # "Prompt": not the manifest's column name
    bad.write_text("path,generator,Prompt\na.mp4,g,a cat\nb.mp4,h,a cat\n")
    code = main(["pairs", str(bad), "--db", str(tmp_path / "r.sqlite"),
                 "--out", str(tmp_path / "p.jsonl"), "--kind", "background"])
    err = capsys.readouterr().err
    assert code == 2 and "no manifest entry has a prompt" in err and not (tmp_path / "r.sqlite"
                                                                           ).exists()
