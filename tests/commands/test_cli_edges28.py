"""The ``geocon`` CLI on odd but legitimate inputs (audit s28 / cli, F1-F7): an output that is
also an input (``score --json a.mp4 b.mp4``, ``merge --conflicts SHARD``, ``bench --export-csv
MANIFEST``), one file named in several spellings, folders of MPEG-TS / 3GP / FLV / WMV clips,
the clip path a result keeps, long output names in the atomic write, NFC ``--clip`` against an
NFD id, and a closed stdout. The CLI runs in-process through ``geocon_torch.cli.main``; the
scorers are replaced by stand-ins except in the one test that proves the recorded path changes
nothing else (a real 6-frame clip at 128 px) and lets ``geocon explain`` re-derive the evidence
from another folder."""
from __future__ import annotations

import json
import os
import sys
import unicodedata
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from geocon_torch.bench.ids import derive_clip_ids
from geocon_torch.cli import build_parser, main
from geocon_torch.commands import _common
from geocon_torch.errors import InputError
from geocon_torch.io import read_clip
from geocon_torch.io._atomic import atomic_output, atomic_write_text
from geocon_torch.io.writer import write_video
from geocon_torch.pipeline import score_clips
from geocon_torch.synth import render_scene

from helpers import encode_rgb, fake_result


class _Row:
    """A score_clips result stand-in."""

    def __init__(self, row: dict):
        self.row = row

    def to_dict(self) -> dict:
        return dict(self.row)


def _fake_score(monkeypatch) -> List[List[str]]:
    """``geocon score`` without scoring: one ok row per path (``path`` as given); returns the
    list of each call's paths."""
    calls: List[List[str]] = []

    def score_clips(paths, **kw):
        calls.append(list(paths))
        return [_Row({"clip": Path(p).stem, "path": str(p), "status": "ok", "score": 0.5,
                      "content_hash": f"h{Path(p).stem}"}) for p in paths]
    monkeypatch.setattr("geocon_torch.commands.score.score_clips", score_clips)
    return calls


def _no_work(monkeypatch, *targets: str) -> List[str]:
    """Replace each ``module.attr`` of geocon_torch.commands by a stand-in that records its
    name and fails (the command was to stop before its work)."""
    calls: List[str] = []
    for target in targets:
        def work(*args, _name=target, **kwargs):
            calls.append(_name)
            raise AssertionError(f"{_name} ran: the output was not refused first")
        monkeypatch.setattr(f"geocon_torch.commands.{target}", work)
    return calls


def _one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"geocon {command}: error: "), err
    return err[0]


# ------------------------------------------------------------------ F1: output == input

def test_score_json_typed_before_the_clips_leaves_the_first_clip_alone(tmp_path: Path,
                                                                       monkeypatch, capsys):
    """``geocon score --json a.mp4 b.mp4`` (``--json`` meant as a flag) replaced the video
    a.mp4 by b's JSON line, exit 0: now one line naming --json and a.mp4, exit 2, nothing
    scored, a.mp4 keeps its bytes."""
    calls = _fake_score(monkeypatch)
    a, b = tmp_path / "a.mp4", tmp_path / "b.mp4"
    a.write_bytes(b"\x00\x00\x00 ftypisom video a")
    b.write_bytes(b"\x00\x00\x00 ftypisom video b")
    assert main(["score", "--json", str(a), str(b), "--no-progress"]) == 2
    line = _one_error_line(capsys, "score")
    assert f"--json {a} " in line and "did you mean --json OUT before the paths?" in line
    assert a.read_bytes() == b"\x00\x00\x00 ftypisom video a" and calls == []


def test_score_refuses_json_onto_one_of_its_inputs(tmp_path: Path, monkeypatch, capsys):
    """An OUT that is one of the clips (another spelling, a later group), the --masks or
    --poses file (also a per-clip file found in a folder) or the --config file: exit 2 before
    any clip is scored; the input keeps its bytes."""
    calls = _fake_score(monkeypatch)
    clips = []
    for i in range(10):  # two groups: the 10th clip is read in the second one
        clips.append(tmp_path / f"c{i}.bin")
        clips[-1].write_bytes(b"clip %d" % i)
    (tmp_path / "masks").mkdir()
    per_clip = tmp_path / "masks" / "c3_masks.npz"
    per_clip.write_bytes(b"npz")
    cfg = tmp_path / "cfg.json"
    cfg.write_text("{}")
    monkeypatch.chdir(tmp_path)
    cases = [(["--json", "./sub/../c9.bin"], "c9.bin", "is one of the clips to score"),
             (["--json", "masks/c3_masks.npz", "--masks", "masks"], "masks/c3_masks.npz",
              "is the --masks file of clip c3"),
             (["--json", str(cfg), "--config", "cfg.json"], "cfg.json", "is the --config file")]
    for extra, victim, says in cases:
        before = Path(victim).read_bytes()
        assert main(["score", *map(str, clips), *extra, "--no-progress"]) == 2, extra
        line = _one_error_line(capsys, "score")
        assert f"--json {extra[1]} {says}" in line, line
        assert Path(victim).read_bytes() == before
    assert calls == []


def test_merge_conflicts_onto_a_shard_or_out_is_refused(tmp_path: Path, monkeypatch, capsys):
    """``geocon merge all.sqlite shard.sqlite --conflicts shard.sqlite`` left the shard at 0
    bytes (exit 0): now exit 2 before OUT is touched, the shard keeps its bytes."""
    calls = _no_work(monkeypatch, "merge.merge_stores")
    shard, out = tmp_path / "shard.sqlite", tmp_path / "all.sqlite"
    shard.write_bytes(b"SQLite format 3\x00 shard")
    for conflicts, says in ((shard, "is one of the SHARDs"), (out, "is OUT")):
        assert main(["merge", str(out), str(shard), "--conflicts", str(conflicts)]) == 2
        assert f"--conflicts {conflicts} {says}" in _one_error_line(capsys, "merge")
    assert shard.read_bytes() == b"SQLite format 3\x00 shard" and calls == []


def test_bench_and_pairs_refuse_an_export_onto_their_inputs(tmp_path: Path, monkeypatch,
                                                             capsys):
    """``geocon bench m.csv --db r.sqlite --export-csv m.csv`` replaced the manifest by the
    export (exit 0); the same for the store, the --config file, pairs --out: exit 2, before
    any clip is scored."""
    calls = _no_work(monkeypatch, "bench.run_manifest", "pairs.preference_pairs")
    manifest, db, cfg = tmp_path / "m.csv", tmp_path / "r.sqlite", tmp_path / "c.json"
    manifest.write_text("path,generator\na.mp4,g\n")
    cfg.write_text("{}")
    link = tmp_path / "link.csv"
    link.symlink_to(manifest)  # the manifest under another name
    cases = [(["bench", str(manifest), "--db", str(db), "--export-csv", str(link)],
              f"--export-csv {link} is the MANIFEST"),
             (["bench", str(manifest), "--db", str(db), "--export-parquet", str(db)],
              f"--export-parquet {db} is the --db store"),
             (["bench", str(manifest), "--db", str(db), "--export-csv", str(cfg), "--config",
               str(cfg)], f"--export-csv {cfg} is the --config file"),
             (["bench", str(manifest), "--db", str(db), "--export-csv", str(tmp_path / "t"),
               "--export-parquet", str(tmp_path / "t")],
              f"--export-parquet {tmp_path / 't'} is the --export-csv file"),
             (["pairs", str(manifest), "--db", str(db), "--out", str(manifest)],
              f"--out {manifest} is the MANIFEST")]
    for argv, says in cases:
        assert main(argv) == 2, argv
        assert says in _one_error_line(capsys, argv[0])
    assert manifest.read_text() == "path,generator\na.mp4,g\n" and not db.exists()
    assert calls == []


def test_check_not_input_compares_files_not_spellings(tmp_path: Path):
    """A hard link, a symlink, ``..`` and a missing input (its path) are the same file; a
    video / image suffix is never an output; None, "-" and other files pass."""
    clip = tmp_path / "x.dat"
    clip.write_bytes(b"x")
    os.link(clip, tmp_path / "hard.dat")
    (tmp_path / "soft.dat").symlink_to(clip)
    for out in ("hard.dat", "soft.dat", "sub/../x.dat"):
        with pytest.raises(InputError, match=r"--out .* is the input"):
            _common.check_not_input(str(tmp_path / out), "--out", [("the input", str(clip))])
    with pytest.raises(InputError, match="is the gone file"):
        _common.check_not_input(str(tmp_path / "gone"), "--out",
                                [("the gone file", str(tmp_path / "sub/../gone"))])
    for suffix in (".mp4", ".MOV", ".ts", ".png", ".jpg"):
        with pytest.raises(InputError, match="names a video or image file"):
            _common.check_not_input(str(tmp_path / f"new{suffix}"), "--json", [])
    for out in (None, "-", str(tmp_path / "r.jsonl"), str(tmp_path / "other.dat")):
        _common.check_not_input(out, "--json", [("the input", str(clip)), ("none", None)])


# ------------------------------------------------------------------ F2: one file, spellings

def test_one_file_in_several_spellings_is_one_clip(tmp_path: Path, monkeypatch, capsys):
    """``syn/x.mp4`` with ``syn/../syn/x.mp4``, its absolute path or its folder: one row under
    the first spelling (it was scored twice under an id holding "..", or exit 2 with a
    message about a manifest that geocon score does not have)."""
    calls = _fake_score(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "syn").mkdir()
    (tmp_path / "syn" / "x.mp4").write_bytes(b"x")
    c = "syn/x.mp4"
    for spelled in ([c, "syn/../" + c], [c, str(tmp_path / c)], ["syn", str(tmp_path / c)],
                    [c, "./" + c, "syn//x.mp4"]):
        assert _common.expand_inputs(spelled) == [Path(c)], spelled
        assert main(["score", *spelled, "--json", "r.jsonl", "--no-progress"]) == 0, spelled
        rows = [json.loads(line) for line in Path("r.jsonl").read_text().splitlines()]
        assert [r["clip"] for r in rows] == ["x"], spelled
    assert [len(paths) for paths in calls] == [1, 1, 1, 1]
    capsys.readouterr()


def test_clip_ids_never_hold_dot_dot_and_score_names_no_manifest(tmp_path: Path):
    """``..`` is folded before the suffixes are taken (it was ``../x``); the clash error of a
    caller without a manifest gives its own hint."""
    ids = derive_clip_ids([tmp_path / "d" / "x.mp4", tmp_path / "d/e/../../x.mp4"])
    assert ids == ["d/x", f"{tmp_path.name}/x"] and not any(".." in i for i in ids)
    assert derive_clip_ids(["syn/x.mp4", "syn/../syn/y.mp4"]) == ["x", "y"]
    with pytest.raises(InputError) as exc:
        derive_clip_ids([tmp_path / "x.mp4", tmp_path / "s/../x.mp4"], hint="give each clip once")
    assert str(exc.value).endswith("; give each clip once") and "manifest" not in str(exc.value)


# ------------------------------------------------------------------ F3: other containers

#: (suffix, codec) of containers PyAV writes here; the reader probes the content, not the name
CONTAINERS = ((".ts", "mpeg4"), (".mts", "mpeg4"), (".3gp", "mpeg4"), (".flv", "libx264"),
              (".wmv", "mpeg4"), (".vob", "mpeg4"), (".mxf", "libx264"))


def test_a_folder_gives_every_readable_video_and_names_what_it_skips(tmp_path: Path, capsys):
    """MPEG-TS, camcorder .mts, .3gp, .flv, .wmv, .vob and .mxf clips in a folder were dropped
    without a word (a folder of only such files was an image-folder error row): each is now a
    clip the reader decodes; a file that is neither a video, an image nor a clip's masks /
    poses companion is named on stderr."""
    folder = tmp_path / "clips"
    folder.mkdir()
    frames = [np.random.default_rng(i).integers(0, 255, (48, 64, 3), dtype=np.uint8)
              for i in range(4)]
    for suffix, codec in CONTAINERS:
        encode_rgb(folder / f"b{suffix}", frames, codec=codec)
    for name in ("a.mp4", "a_masks.npz", "a.json", "notes.txt", "x.srt", "thumb.jpg", ".h.ts"):
        (folder / name).write_bytes(b"x")
    notes: List[str] = []
    got = _common.expand_inputs([str(folder)], note=notes.append)
    assert [p.name for p in got] == ["a.mp4"] + sorted(f"b{s}" for s, _ in CONTAINERS)
    assert notes == [f"{folder}: skipped 2 files not read as videos (notes.txt, x.srt); name "
                     "a file to score it"]
    for path in got[1:]:
        assert read_clip(str(path), long_side=64).num_frames == 4, path
    only = tmp_path / "tsonly"
    only.mkdir()
    (only / "c.mts").write_bytes((folder / "b.mts").read_bytes())
    assert _common.expand_inputs([str(only)]) == [only / "c.mts"]


# ------------------------------------------------------------------ F4: absolute clip paths

def test_score_records_absolute_paths_keeping_a_links_name(tmp_path: Path, monkeypatch):
    """The result's ``path`` is absolute (abspath: a symlink keeps its own name), so readers
    in another folder find the clip."""
    _fake_score(monkeypatch)
    (tmp_path / "proj" / "clips").mkdir(parents=True)
    (tmp_path / "proj" / "clips" / "a.mp4").write_bytes(b"a")
    (tmp_path / "proj" / "clips" / "l.mp4").symlink_to("a.mp4")
    monkeypatch.chdir(tmp_path / "proj")
    assert main(["score", "clips/a.mp4", "clips/l.mp4", "--json", "r.jsonl",
                 "--no-progress"]) == 0
    rows = [json.loads(line) for line in Path("r.jsonl").read_text().splitlines()]
    assert [r["path"] for r in rows] == [str(tmp_path / "proj/clips/a.mp4"),
                                         str(tmp_path / "proj/clips/l.mp4")]


def test_an_absolute_path_changes_nothing_else_and_explain_finds_the_clip(tmp_path: Path,
                                                                         monkeypatch, capsys):
    """A real clip scored by its relative path: the result equals the one of its absolute
    path but for ``path`` and timings (clip id, content / config hash, every number), and
    ``geocon explain`` run from another folder re-derives the worst pair's outliers (it said
    "outlier locations unavailable (clips/a.mp4: no such file or folder)")."""
    proj = tmp_path / "proj"
    (proj / "clips").mkdir(parents=True)
    write_video(proj / "clips" / "a.mp4",
                render_scene("C2", num_frames=6, size=(96, 128), seed=0).frames, fps=8)
    monkeypatch.chdir(proj)
    opts = ["--long-side", "128", "--no-progress", "--device", "cpu"]
    assert main(["score", "clips/a.mp4", "--json", "out/r.jsonl", *opts]) == 0
    (row,) = [json.loads(line) for line in Path("out/r.jsonl").read_text().splitlines()]
    assert row["path"] == str(proj / "clips" / "a.mp4") and row["clip"] == "a"
    cfg = _common.build_config(build_parser().parse_args(["score", "x", *opts]))
    alone = score_clips([str(proj / "clips" / "a.mp4")], config=cfg, device="cpu",
                        progress=False)[0].to_dict()
    alone["clip"] = "a"
    strip = {"path", "timing_s"}
    assert {k: v for k, v in row.items() if k not in strip} == \
        json.loads(json.dumps({k: v for k, v in alone.items() if k not in strip}))
    assert row["content_hash"] == alone["content_hash"] and row["config_hash"] == \
        alone["config_hash"]
    capsys.readouterr()
    monkeypatch.chdir(proj / "out")
    assert main(["explain", "r.jsonl", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert "Worst pair #" in text and "unavailable" not in text, text


# ------------------------------------------------------------------ F5: long output names

@pytest.mark.parametrize("stem", ["日" * 82, "a" * 251, "é" * 125],
                         ids=["cjk", "ascii", "latin"])
def test_the_atomic_write_takes_any_name_the_file_system_takes(tmp_path: Path, stem: str):
    """A 250..255-byte name (legal) failed with "File name too long" after the work: the
    hidden temporary added ~23 bytes. It is cut now (on a character), the leading "." and the
    suffix kept."""
    name = tmp_path / f"{stem}.csv"
    assert len(os.fsencode(name.name)) <= 255
    seen: Dict[str, str] = {}
    with atomic_output(name) as tmp:
        seen["tmp"] = tmp.name
        tmp.write_text("a,b\n")
    assert name.read_text() == "a,b\n" and sorted(os.listdir(tmp_path)) == [name.name]
    assert seen["tmp"].startswith(".") and seen["tmp"].endswith(".csv")
    assert ".partial-" in seen["tmp"] and len(os.fsencode(seen["tmp"])) <= 255
    atomic_write_text(name, "c\n")
    assert name.read_text() == "c\n"


# ------------------------------------------------------------------ F6: NFC --clip

def test_explain_clip_matches_an_nfd_id_typed_in_nfc(tmp_path: Path, capsys):
    """A clip id in NFD (a macOS file name) and ``--clip café`` typed in NFC: "r.jsonl holds
    clip 'café'" / "0 matching clips" before; now the clip is explained."""
    nfd, nfc = unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFC", "café")
    one = tmp_path / "one.json"
    one.write_text(json.dumps(fake_result(nfd)))
    assert main(["explain", str(one), "--clip", nfc, "--no-evidence"]) == 0
    assert capsys.readouterr().out.startswith(f"Clip {nfd}: status ok")
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps(fake_result(c)) + "\n" for c in (nfd, "other")))
    assert main(["explain", str(many), "--clip", nfc, "--no-evidence"]) == 0
    assert capsys.readouterr().out.startswith(f"Clip {nfd}: status ok")


# ------------------------------------------------------------------ F7: closed stdout

def test_a_closed_stdout_keeps_the_commands_status(tmp_path: Path, monkeypatch, capsys):
    """fd 1 closed (Python's ``sys.stdout`` is None): an AttributeError traceback, exit 1,
    after the results file was complete; now exit 0. ``--json -`` needs stdout: one line,
    exit 2, before any clip is scored."""
    calls = _fake_score(monkeypatch)
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"a")
    monkeypatch.setattr(sys, "stdout", None)
    out = tmp_path / "r.jsonl"
    assert main(["score", str(clip), "--json", str(out), "--no-progress"]) == 0
    assert len(out.read_text().splitlines()) == 1 and len(calls) == 1
    assert main(["score", str(clip), "--json", "-", "--no-progress"]) == 2
    assert "--json -: stdout is closed" in _one_error_line(capsys, "score")
    assert len(calls) == 1
