"""User errors of the error-message audit s19 (E6-E11, E13): files that are not what they are
named, output paths checked before any work, messages that name the CLI flag or config field,
and synth option combinations. The CLI runs in-process through ``geocon_torch.cli.main``."""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch

from geocon_torch.bench.manifest import ManifestError, load_manifest
from geocon_torch.checkpoints import require_checkpoint
from geocon_torch.cli import is_user_error, main
from geocon_torch.commands import _common
from geocon_torch.commands._common import (bounded_frame_size, check_output_dir,
                                           check_output_file)
from geocon_torch.config import GeoConConfig, load_config
from geocon_torch.errors import CheckpointError, ConfigError, InputError
from geocon_torch.gate.poses import load_pose_log
from geocon_torch.segment.files import load_masks

from helpers import pose


def _fail(capsys, argv: List[str]) -> str:
    """The one stderr line of a user error (exit status 2, no traceback)."""
    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _usage(capsys, argv: List[str]) -> str:
    """The one stderr line of an argparse usage error (SystemExit 2)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1, lines
    return lines[0]


def _never(calls: list):
    """A stand-in for a command's work that records being called."""
    def work(*args, **kwargs):
        calls.append((args, kwargs))
        raise AssertionError("the work ran before the output check")
    return work


# ------------------------------------------------------------------ E6: non-zip .npz files

def test_fake_npz_masks_and_poses_name_the_path_not_allow_pickle(tmp_path: Path):
    """A text file named .npz is an InputError naming the file and what to give (it was
    numpy's ValueError advising to load it "unsafely" with allow_pickle)."""
    fake = tmp_path / "fake.npz"
    fake.write_text("not npz\n")
    with pytest.raises(InputError) as exc:
        load_masks(str(fake), num_frames=2)
    assert str(exc.value) == (
        f"masks {fake} is not a NumPy .npz archive (not a zip file); give an .npz written by "
        f"np.savez with a 'masks' array, or a PNG folder")
    with pytest.raises(InputError) as exc:
        load_pose_log(str(fake))
    assert str(exc.value).startswith(f"pose log {fake} is not a NumPy .npz archive (not a zip "
                                     f"file); give an .npz written by np.savez")
    assert "allow_pickle" not in str(exc.value)
    # a zip archive preceded by other bytes: numpy would take it for a pickle
    good = tmp_path / "good.npz"
    np.savez(good, masks=np.zeros((2, 4, 4), bool))
    prefixed = tmp_path / "prefixed.npz"
    prefixed.write_bytes(b"junk" + good.read_bytes())
    with pytest.raises(InputError, match="not a NumPy .npz archive") as exc:
        load_masks(str(prefixed))
    assert "allow_pickle" not in str(exc.value)
    # an object array in a pose log is refused by name too
    obj = tmp_path / "obj.npz"
    np.savez(obj, poses=np.array([None, 1], dtype=object))
    with pytest.raises(InputError, match=re.escape(f"pose log {obj}: holds an object array")):
        load_pose_log(str(obj))


def test_valid_npz_masks_and_poses_read_as_before(tmp_path: Path):
    """Real .npz files still load exactly (values, dtype, layout)."""
    labels = np.zeros((3, 6, 8), np.uint8)
    labels[:, 1:4, 2:5] = 1
    labels[1, 4:, 6:] = 2
    path = tmp_path / "m.npz"
    np.savez(path, masks=labels)
    masks = load_masks(str(path))
    assert masks.dtype == torch.bool and tuple(masks.shape) == (3, 2, 6, 8)
    assert torch.equal(masks[:, 0], torch.from_numpy(labels == 1))
    assert torch.equal(masks[:, 1], torch.from_numpy(labels == 2))
    rel = np.stack([pose([0.1, 0.0, 0.0]), pose([0.0, 0.2, 0.0], 3.0)])
    np.savez(tmp_path / "p.npz", poses=rel)
    log = load_pose_log(str(tmp_path / "p.npz"))
    assert torch.equal(log.relative, torch.from_numpy(rel))
    assert log.present.tolist() == [True, True]


# ------------------------------------------------------------ E7: OUTDIR that is a file

def test_outdir_that_is_a_file_is_one_line_before_any_work(tmp_path: Path, capsys,
                                                             monkeypatch):
    """synth / calibrate OUTDIR, demo / report --out naming an existing file: "OUTDIR x is a
    file: give a folder", exit 2, before rendering or reading anything (synth and calibrate
    printed a FileExistsError traceback after rendering, exit 1)."""
    calls: list = []
    monkeypatch.setattr("geocon_torch.commands.synth.render_scene", _never(calls))
    monkeypatch.setattr("geocon_torch.commands.calibrate.run_calibration", _never(calls))
    monkeypatch.setattr("geocon_torch.commands.demo.render_scene", _never(calls))
    monkeypatch.setattr("geocon_torch.commands.report.build_report", _never(calls))
    f = tmp_path / "m_ok.csv"
    f.write_text("path,generator\n")
    assert _fail(capsys, ["synth", str(f), "--category", "C2", "--frames", "2",
                          "--size", "32x32"]) == f"geocon synth: error: OUTDIR {f} is a file: " \
                                                 f"give a folder"
    assert _fail(capsys, ["calibrate", str(f), "--size", "64x48", "--frames", "2"]) == \
        f"geocon calibrate: error: OUTDIR {f} is a file: give a folder"
    assert _fail(capsys, ["demo", "--out", str(f), "--frames", "2"]) == \
        f"geocon demo: error: --out {f} is a file: give a folder"
    assert _fail(capsys, ["report", str(f), "--out", str(f)]) == \
        f"geocon report: error: --out {f} is a file: give a folder"
    line = _fail(capsys, ["synth", str(f / "sub"), "--category", "C2"])
    assert line == (f"geocon synth: error: OUTDIR {f / 'sub'}: it cannot be created, {f} is a "
                    f"file: give a folder")
    assert calls == [] and f.read_text() == "path,generator\n"


def test_check_output_dir_creates_nothing(tmp_path: Path):
    """A folder to be created passes and is not created by the check (a later option error
    leaves nothing behind); None passes; FileExistsError is a user error for the CLI."""
    check_output_dir(None, "--out")
    check_output_dir(str(tmp_path), "OUTDIR")
    check_output_dir(str(tmp_path / "a" / "b"), "OUTDIR")
    assert not (tmp_path / "a").exists()
    assert is_user_error(FileExistsError(17, "File exists", "x"))


# ------------------------------------------- E8: output files checked before the work

def test_output_files_are_checked_before_the_work(tmp_path: Path, capsys, monkeypatch):
    """pairs --out, demo --json and merge --conflicts naming a folder fail first, with the
    option and a file to give (pairs scored the whole manifest, demo rendered and scored and
    merge wrote OUT before a bare "Is a directory")."""
    calls: list = []
    monkeypatch.setattr("geocon_torch.commands.pairs.preference_pairs", _never(calls))
    monkeypatch.setattr("geocon_torch.commands.demo.render_scene", _never(calls))
    monkeypatch.setattr("geocon_torch.commands.merge.merge_stores", _never(calls))
    d = tmp_path / "emptydir"
    d.mkdir()
    out = tmp_path / "out.sqlite"
    assert _fail(capsys, ["pairs", str(tmp_path / "m.csv"), "--db", str(out), "--out",
                          str(d)]) == \
        f"geocon pairs: error: --out {d} is a folder: give a file, e.g. {d / 'pairs.jsonl'}"
    assert _fail(capsys, ["demo", "--json", str(d), "--frames", "2"]) == \
        f"geocon demo: error: --json {d} is a folder: give a file, e.g. {d / 'results.jsonl'}"
    assert _fail(capsys, ["merge", str(out), str(tmp_path / "a.sqlite"), "--conflicts",
                          str(d)]) == (f"geocon merge: error: --conflicts {d} is a folder: "
                                       f"give a file, e.g. {d / 'conflicts.jsonl'}")
    assert calls == [] and not out.exists()


# ------------------------------------------------- E9: a folder where a file is expected

def test_a_folder_where_a_file_is_expected_says_so(tmp_path: Path, capsys):
    """Config, manifest, pose log and checkpoint given as a folder: "is a folder" (it was "not
    found"); a missing path is still "not found"; an existing non-mask file given as masks is
    "not a masks source"."""
    d = tmp_path / "emptydir"
    d.mkdir()
    with pytest.raises(InputError, match=re.escape(f"config file {d} is a folder: give the "
                                                   f"JSON file")):
        load_config(str(d))
    with pytest.raises(ManifestError, match=re.escape(f"manifest {d} is a folder: give a "
                                                      f".csv or .jsonl file")):
        load_manifest(d)
    with pytest.raises(InputError, match=re.escape(f"pose log {d} is a folder: give a JSON "
                                                   f"or .npz pose file")):
        load_pose_log(str(d))
    with pytest.raises(CheckpointError, match=re.escape(f"the 'disk' backend checkpoint {d} "
                                                        f"is a folder: give the weights file")):
        require_checkpoint(d, "the 'disk' backend")
    with pytest.raises(CheckpointError, match=re.escape(f"RAFT checkpoint not found: "
                                                        f"{tmp_path / 'none.pth'}")):
        require_checkpoint(tmp_path / "none.pth", "RAFT")
    video = tmp_path / "fake.mp4"
    video.write_bytes(b"x")
    with pytest.raises(InputError) as exc:
        load_masks(str(video))
    assert str(exc.value) == f"{video} is not a masks source: give a folder of PNGs or an .npz"
    with pytest.raises(InputError) as exc:
        load_masks(str(tmp_path / "nope.npz"))
    assert str(exc.value) == f"mask source not found: {tmp_path / 'nope.npz'}"
    assert _fail(capsys, ["score", "x.mp4", "--config", str(d)]) == \
        f"geocon score: error: config file {d} is a folder: give the JSON file"


# ------------------------------------------------------------------------ E10: CLI hints

def test_checkpoint_hints_name_the_config_field(tmp_path: Path, capsys, monkeypatch):
    """A learned backend or RAFT without weights names the config field a CLI user sets
    (features.checkpoint / foreground.flow_checkpoint), not only the Python keyword; a RAFT
    checkpoint that is a folder says so."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    disk = tmp_path / "disk.json"
    disk.write_text(json.dumps({"features": {"backend": "disk"}}))
    assert _fail(capsys, ["score", "x.mp4", "--config", str(disk), "--device", "cpu"]) == (
        "geocon score: error: the 'disk' backend needs a local checkpoint: set "
        "features.checkpoint in the config, or checkpoint=PATH in Python (nothing is "
        "downloaded)")
    raft = tmp_path / "raft.json"
    raft.write_text(json.dumps({"foreground": {"flow": "raft_large"}}))
    line = _fail(capsys, ["score", "x.mp4", "--config", str(raft), "--device", "cpu"])
    assert line.startswith("geocon score: error: raft_large needs local weights: set "
                           "foreground.flow_checkpoint in the config, or checkpoint=PATH in "
                           "Python (a torchvision state_dict), or place torchvision's file in")
    from geocon_torch.flow.raft import RaftFlow

    with pytest.raises(CheckpointError, match=re.escape(f"RAFT checkpoint {tmp_path} is a "
                                                        f"folder: give the weights file")):
        RaftFlow("raft_small", checkpoint=str(tmp_path))


def test_lightglue_disk_features_ask_for_the_extractor_checkpoint(tmp_path: Path):
    """lightglue with features='disk' and no DISK weights names extractor_checkpoint (the
    DISK message would point to features.checkpoint, which is LightGlue's own file)."""
    from geocon_torch.features import LightGlueMatcher

    ckpt = tmp_path / "lg.pth"
    torch.save({"state_dict": {}}, ckpt)
    with pytest.raises(CheckpointError, match="pass extractor_checkpoint=PATH"):
        LightGlueMatcher(str(ckpt), "cpu", features="disk")


def test_output_folder_hint_has_the_option_s_extension(tmp_path: Path):
    """--export-csv / --export-parquet naming a folder suggest results.csv / results.parquet
    (both suggested results.jsonl); --json keeps results.jsonl."""
    for option, name in (("--export-csv", "results.csv"),
                         ("--export-parquet", "results.parquet"),
                         ("--json", "results.jsonl")):
        with pytest.raises(InputError) as exc:
            check_output_file(str(tmp_path), option)
        assert str(exc.value) == f"{option} {tmp_path} is a folder: give a file, e.g. " \
                                 f"{tmp_path / name}"


@pytest.mark.parametrize("argv, flag, message", [
    (["bench", "m.csv", "--db", "r.sqlite", "--lease-s", "-1"], "--lease-s",
     "must be a finite number > 0, got '-1'"),
    (["bench", "m.csv", "--db", "r.sqlite", "--lease-s", "nan"], "--lease-s",
     "must be a finite number > 0, got 'nan'"),
    (["bench", "m.csv", "--db", "r.sqlite", "--batch-clips", "0"], "--batch-clips",
     "must be >= 1, got 0"),
    (["pairs", "m.csv", "--db", "r.sqlite", "--out", "p.jsonl", "--min-margin", "-1"],
     "--min-margin", "must be a finite number >= 0, got '-1'"),
    (["demo", "--frames", "0"], "--frames", "must be >= 1, got 0"),
    (["synth", "s", "--frames", "0"], "--frames", "must be >= 1, got 0"),
    (["calibrate", "c", "--backend", "disk"], "--backend", "invalid choice: 'disk'"),
    (["synth", "s", "--size", "100000x100000"], "--size",
     "--size needs W and H <= 8192, got '100000x100000'"),
    (["synth", "s", "--category", "C4", "--num-objects", "4"], "--num-objects",
     "invalid choice: 4"),
])
def test_options_are_checked_by_flag(tmp_path: Path, capsys, monkeypatch, argv, flag,
                                     message):
    """The message names the flag the user typed (it named lease_s, batch_clips, min_margin,
    num_frames), before anything is written; calibrate offers no backend it cannot load
    (disk / loftr / lightglue need features.checkpoint); --size is bounded (100000x100000
    was an allocation traceback)."""
    monkeypatch.chdir(tmp_path)
    line = _usage(capsys, argv)
    assert line.startswith(f"geocon {argv[0]}: error: argument {flag}: {message}"), line
    assert list(tmp_path.iterdir()) == []


def test_valid_option_values_are_parsed_as_before():
    """The new parsers return the numbers the old ones did."""
    assert bounded_frame_size("8192x8") == (8192, 8) and bounded_frame_size("64x48") == (64, 48)
    with pytest.raises(argparse.ArgumentTypeError, match="<= 8192"):
        bounded_frame_size("8194x8")
    assert _common.non_negative_float("0") == 0.0 and _common.non_negative_float("0.05") == 0.05
    from geocon_torch.commands.calibrate import BACKEND_CHOICES

    assert "opencv-sift" in BACKEND_CHOICES and "auto" in BACKEND_CHOICES
    assert not {"disk", "loftr", "lightglue"} & set(BACKEND_CHOICES)


# ------------------------------------------------------------- E11: replace(dotted key)

def test_replace_with_a_dotted_key_points_to_sections():
    """replace(**{"io.long_side": 64}) says replace takes sections (it called the key
    unknown); the section form still works."""
    with pytest.raises(ConfigError) as exc:
        GeoConConfig().replace(**{"io.long_side": 64})
    assert str(exc.value) == ("replace() takes sections, not the dotted key 'io.long_side': "
                              "replace(io={'long_side': 64})")
    assert GeoConConfig().replace(io={"long_side": 64}).io.long_side == 64


# -------------------------------------------------------- E13: synth option combinations

def test_synth_num_objects_only_with_moving_objects(tmp_path: Path, capsys, monkeypatch):
    """--num-objects on a category without moving objects is refused like nonrigid_object
    (it was ignored silently); with C4 it reaches the renderer, and without it C4 renders
    one object, as before."""
    seen: list = []

    class _Clip:
        clip_id = "c"

        def save(self, outdir):
            return Path(outdir) / "c.json"

    def render(cat, **kw):
        seen.append((cat, kw.get("num_objects")))
        return _Clip()

    monkeypatch.setattr("geocon_torch.commands.synth.render_scene", render)
    out = tmp_path / "s"
    assert _fail(capsys, ["synth", str(out), "--category", "C2", "--num-objects", "3"]) == (
        "geocon synth: error: --num-objects applies to C4 (moving_object) only, not C2: give "
        "--category C4 (or all)")
    assert _fail(capsys, ["synth", str(out), "--category", "all", "--motion", "pan",
                          "--num-objects", "2"]).endswith("only, not C2: give --category C4 "
                                                          "(or all)")
    assert seen == [] and not out.exists()
    assert main(["synth", str(out), "--category", "C4", "--num-objects", "3"]) == 0
    assert main(["synth", str(out), "--category", "C4"]) == 0
    assert main(["synth", str(out), "--category", "C2"]) == 0
    assert seen == [("C4", 3), ("C4", 1), ("C2", None)]
