"""The geocon CLI: score (table + JSON lines), bench (resume, export), report, --help texts."""
from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import pytest

from geocon_torch.pipeline import pinned_config
from geocon_torch.bench import ResultStore
from geocon_torch.cli import build_parser, main
from geocon_torch.commands._common import expand_inputs, per_clip_file
from geocon_torch.config import GeoConConfig

SMALL = ["--long-side", "128", "--max-frames", "5"]


def _small_cfg() -> GeoConConfig:
    return GeoConConfig().replace(io={"long_side": 128, "max_frames": 5})


def test_help_documents_every_option(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"score", "bench", "report", "demo"} <= set(sub.choices)
    for name in ("score", "bench", "report", "demo"):
        p = sub.choices[name]
        text = p.format_help()
        assert "Examples:" in text, name
        for action in p._actions:
            for opt in action.option_strings:
                assert opt in text, (name, opt)
            if action.help is None and action.option_strings:
                pytest.fail(f"{name} {action.option_strings} has no help")
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    assert "--json OUT" in capsys.readouterr().out


def test_expand_inputs_files_folders_globs(tmp_path: Path):
    (tmp_path / "v").mkdir()
    # hidden files: an interrupted write's temporary file, a macOS resource fork
    for n in ("b.mp4", "a.webm", "notes.txt", ".b.partial-1-ab.mp4", "._a.webm"):
        (tmp_path / "v" / n).write_bytes(b"x")
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "1.png").write_bytes(b"x")
    got = expand_inputs([str(tmp_path / "v"), str(tmp_path / "imgs"), str(tmp_path / "v/*.mp4"),
                         str(tmp_path / "missing.mp4")])
    assert [p.name for p in got] == ["a.webm", "b.mp4", "imgs", "missing.mp4"]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "b_masks.npz").write_bytes(b"x")
    assert per_clip_file(str(tmp_path / "m"), Path("x/b.mp4"), 2).endswith("b_masks.npz")
    assert per_clip_file(str(tmp_path / "m"), Path("x/c.mp4"), 2) is None
    assert per_clip_file(None, Path("b.mp4"), 1) is None


def test_score_prints_table_and_writes_json_lines(shared_data: Path, tmp_path: Path, capsys):
    good = shared_data / "real" / "realshort.mp4"
    missing = tmp_path / "missing.mp4"
    out = tmp_path / "r.jsonl"
    rc = main(["score", str(good), str(missing), "--json", str(out), "--no-progress", *SMALL])
    assert rc == 1  # one clip is an error
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["clip", "status", "score", "regime", "IR"]
    assert any(line.startswith("realshort") and " ok " in line for line in lines)
    assert any(line.startswith("missing") and "error" in line for line in lines)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["clip"] for r in rows] == ["realshort", "missing"]
    ok, err = rows
    assert ok["schema_version"] == "3.0"
    assert ok["config_hash"] == pinned_config(_small_cfg()).config_hash()
    assert ok["status"] == "ok" and 0.5 < ok["background"]["ir"] <= 1.0
    (shown,) = [line.split() for line in lines if line.startswith("realshort")]
    assert shown[2] == f"{ok['score']:.3f}" and 0.0 <= ok["score"] <= 1.0  # the headline
    assert set(ok["backends"]) >= {"features", "flow", "masks", "gate"}
    assert ok["version"] and "VideoReadError" in err["reason"]
    assert err["config_hash"] == ok["config_hash"]  # a failed clip: the same pinned record


def test_score_with_a_missing_calibration_file_is_one_line(tmp_path: Path, capsys):
    """A config that cannot be pinned is a config error (exit 2, one line), found before any
    clip is read (was an error row per clip, exit 1)."""
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"background": {"calibration": str(tmp_path / "nope.json")}}))
    rc = main(["score", str(tmp_path / "missing.mp4"), "--config", str(cfg), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "calibration" in err and "nope.json" in err


def test_bench_resume_export_and_report(shared_data: Path, tmp_path: Path, capsys):
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "clip_id,path,generator,category,seed\n"
        f"short,{shared_data / 'real' / 'realshort.mp4'},wan,C3,1\n"
        "gone,nope.mp4,wan,C1,2\n")
    db = tmp_path / "r.sqlite"
    rc = main(["bench", str(manifest), "--db", str(db), "--no-progress", *SMALL,
               "--export-csv", str(tmp_path / "t.csv")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "2 clips on 1 rank(s): 2 scored (1 ok, 0 not applicable, 1 error)" in out
    table = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["clip_id"], r["status"]) for r in table] == [("gone", "error"), ("short", "ok")]
    assert table[1]["config_hash"] == pinned_config(_small_cfg()).config_hash()
    assert table[1]["generator"] == "wan"
    rc = main(["bench", str(manifest), "--db", str(db), "--no-progress", *SMALL, "--strict"])
    out2, err2 = capsys.readouterr()
    assert "0 scored" in out2 and "2 already stored" in out2
    # --strict: the stored error row of "gone" counts on a re-run that scores nothing
    assert rc == 1 and "--strict: 1 clip(s) stored with status error" in err2 and "gone" in err2
    with ResultStore(db) as s:
        assert s.count() == 2
    rc = main(["report", str(db), "--out", str(tmp_path / "rep"), "--boot", "200",
               "--cards", "2"])
    assert rc == 0
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "short" in page and "gone" in page and "Audit cards (2)" in page
    assert len(list((tmp_path / "rep" / "img").glob("card_short_*_matches.png"))) == 1
    assert main(["bench", "--db", str(db)]) == 2
    # export only: the flags the results were scored with, else a clear error (was an empty
    # table with exit 0)
    capsys.readouterr()
    assert main(["bench", "--db", str(db), *SMALL, "--export-csv", str(tmp_path / "e.csv")]) == 0
    assert len(list(csv.DictReader((tmp_path / "e.csv").open()))) == 2
    assert main(["bench", "--db", str(db), "--export-csv", str(tmp_path / "f.csv")]) == 2
    err = capsys.readouterr().err
    assert "holds no result of this configuration" in err and "--all-configs" in err


def test_table_shows_the_epipolar_numbers_of_every_epipolar_preset():
    """gvgc / epipolar-dpo clips were ok with an empty table row: the epi columns read only the
    WorldAtlas block."""
    from geocon_torch.commands._common import SUMMARY_COLUMNS, summary_row

    err, inl = SUMMARY_COLUMNS.index("epi err"), SUMMARY_COLUMNS.index("epi inl")
    rows = {"worldatlas": {"epipolar": {"epipolar_error": 0.1, "epipolar_inlier_rate": 0.9}},
            "gvgc": {"epipolar_gvgc": {"median_error": 0.2249, "keep_rate": 0.8}},
            "dpo": {"epipolar_dpo": {"mean_epipolar_error": 3.746, "mean_inlier_rate": 0.761}},
            "none": {}}
    got = {k: (summary_row({"clip": k, "status": "ok", **v})[err],
               summary_row({"clip": k, "status": "ok", **v})[inl]) for k, v in rows.items()}
    assert got == {"worldatlas": ("0.100", "0.900"), "gvgc": ("0.225", "0.800"),
                   "dpo": ("3.746", "0.761"), "none": ("-", "-")}


def test_an_existing_path_is_never_a_glob(tmp_path: Path):
    """'clip[1].mp4' that exists is that file (it was globbed to clip1.mp4 and scored that);
    a pattern that is not a path still globs."""
    (tmp_path / "clip[1].mp4").write_bytes(b"x")
    (tmp_path / "clip1.mp4").write_bytes(b"x")
    assert expand_inputs([str(tmp_path / "clip[1].mp4")]) == [tmp_path / "clip[1].mp4"]
    assert expand_inputs([str(tmp_path / "clip[0-9].mp4")]) == [tmp_path / "clip1.mp4"]
    assert expand_inputs([str(tmp_path / "c*[1].mp4")]) == [tmp_path / "clip1.mp4"]


def _animation(path: Path, frames: int = 3) -> Path:
    """An animated WebP / PNG (APNG, from the suffix) of ``frames`` distinct 32x24 frames."""
    from PIL import Image

    images = [Image.new("RGB", (32, 24), (40 * k, 90, 200 - 40 * k)) for k in range(frames)]
    images[0].save(path, save_all=True, append_images=images[1:], duration=100, loop=0)
    return path


def test_animated_webp_and_apng_are_videos(tmp_path: Path, capsys, monkeypatch):
    """A folder of animated WebP / APNG files gives one clip per file (it was one image
    sequence that failed on its first file); still images stay one image-sequence clip; explain
    scores an animated file first (it refused it as "not a result store")."""
    from types import SimpleNamespace

    from PIL import Image

    from geocon_torch.commands import explain as explain_cmd
    from geocon_torch.commands._common import is_video_file
    from helpers import fake_result

    anim = tmp_path / "anim"
    anim.mkdir()
    webp, apng = _animation(anim / "a.webp"), _animation(anim / "b.png")
    still = tmp_path / "still"
    still.mkdir()
    for name in ("1.png", "2.webp"):
        Image.new("RGB", (32, 24)).save(still / name)
    assert is_video_file(webp) and is_video_file(apng)
    assert not any(is_video_file(p) for p in still.iterdir())
    assert expand_inputs([str(anim), str(still)]) == [webp, apng, still]
    scored = []

    def score_clip(path, **kw):
        scored.append(path)
        return SimpleNamespace(to_dict=lambda: fake_result("a"))
    monkeypatch.setattr(explain_cmd, "score_clip", score_clip)
    assert main(["explain", str(webp), "--no-evidence"]) == 0
    assert main(["explain", str(still / "1.png"), "--no-evidence"]) == 0
    assert scored == [str(webp), str(still / "1.png")]


def test_masks_and_poses_folders_pick_their_own_files(tmp_path: Path):
    """A geocon synth / demo folder holds <id>.json (poses) and <id>_masks.npz side by side:
    --poses reads the JSON (it used to pick the masks file and fail every clip), --masks the
    npz; a folder without a pose file gives no poses, never the folder itself."""
    clip = tmp_path / "C2_pan.mp4"
    for name in ("C2_pan.mp4", "C2_pan.json", "C2_pan_masks.npz"):
        (tmp_path / name).write_bytes(b"")
    assert per_clip_file(str(tmp_path), clip, 2, kind="poses") == str(tmp_path / "C2_pan.json")
    assert per_clip_file(str(tmp_path), clip, 2) == str(tmp_path / "C2_pan_masks.npz")
    other = tmp_path / "x.mp4"
    assert per_clip_file(str(tmp_path), other, 1, kind="poses") is None
    assert per_clip_file(str(tmp_path), other, 1) == str(tmp_path)  # PNG masks of the one clip


def test_progress_bars_only_on_a_terminal(monkeypatch):
    """Bars and stage lines go to a terminal only; --no-progress turns them off there too."""
    import io

    from geocon_torch.commands._common import show_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not show_progress(argparse.Namespace(no_progress=False))
    monkeypatch.setattr("sys.stderr", Tty())
    assert show_progress(argparse.Namespace(no_progress=False))
    assert not show_progress(argparse.Namespace(no_progress=True))
    assert show_progress(argparse.Namespace())  # commands without the flag


def test_score_json_keeps_the_clips_scored_before_an_interruption(tmp_path: Path, monkeypatch):
    """``--json OUT`` gets each group's lines when the group is scored: a run stopped in the
    second group keeps the first group's results (everything used to be written at the end)."""
    import geocon_torch.commands.score as score_cmd
    from geocon_torch.io import write_video
    from geocon_torch.synth import render_scene

    frames = render_scene("C3", num_frames=4, size=(96, 128), seed=0).frames
    paths = [write_video(tmp_path / f"c{k}.mp4", frames, 8.0) for k in range(3)]
    monkeypatch.setattr(score_cmd, "GROUP_CLIPS", 2)  # groups (c0, c1), (c2)
    real, calls = score_cmd.score_clips, []

    def stop_on_second(videos, **kw):
        calls.append(videos)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(videos, **kw)

    monkeypatch.setattr(score_cmd, "score_clips", stop_on_second)
    out = tmp_path / "r.jsonl"
    assert main(["score", *map(str, paths), "--json", str(out), "--long-side", "128",
                 "--preset", "background", "--device", "cpu", "--no-progress"]) == 130
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["clip"] for r in rows] == ["c0", "c1"] and [len(c) for c in calls] == [2, 1]
    assert rows[0]["status"] in ("ok", "not_applicable") and rows[0]["score"] == rows[1]["score"]


def test_score_folder_batches_files_and_rows_equal_a_per_file_run(tmp_path: Path, monkeypatch):
    """``geocon score FOLDER`` passes its files to score_clips in groups (one call for a small
    folder: batching saves the per-call overhead of many small clips); the rows (a truncated
    file's error row included) equal those of a run that scores each file alone, timings aside,
    and the exit status is the same."""
    import geocon_torch.commands.score as score_cmd
    from geocon_torch.io import write_video
    from geocon_torch.synth import render_scene

    folder = tmp_path / "clips"
    folder.mkdir()
    for k, cat in enumerate(("C2", "C3", "C3")):
        frames = render_scene(cat, num_frames=4, size=(64, 96), seed=k).frames
        write_video(folder / f"c{k}.mp4", frames, 8.0)
    data = (folder / "c0.mp4").read_bytes()
    (folder / "cut.mp4").write_bytes(data[: len(data) // 2])  # truncated: an error row
    real, calls = score_cmd.score_clips, []

    def counting(videos, **kw):
        calls.append(list(videos))
        return real(videos, **kw)

    monkeypatch.setattr(score_cmd, "score_clips", counting)
    argv = ["score", str(folder), "--long-side", "96", "--preset", "background",
            "--device", "cpu", "--no-progress", "--json"]
    rc = main([*argv, str(tmp_path / "grouped.jsonl")])
    assert [len(c) for c in calls] == [4]
    monkeypatch.setattr(score_cmd, "GROUP_CLIPS", 1)  # one file per call, as it used to be
    assert main([*argv, str(tmp_path / "alone.jsonl")]) == rc == 1
    assert [len(c) for c in calls] == [4, 1, 1, 1, 1]

    def rows(name: str) -> list:
        out = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        for r in out:
            r.pop("timing_s")
        return out
    grouped = rows("grouped.jsonl")
    assert [(r["clip"], r["status"]) for r in grouped] == [
        ("c0", "ok"), ("c1", "ok"), ("c2", "ok"), ("cut", "error")]
    assert grouped == rows("alone.jsonl")
