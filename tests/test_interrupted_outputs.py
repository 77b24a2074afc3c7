"""Interrupted writes (audit s20 "interrupt"): every output file is either the complete new one
or what was there before (never a playable fragment, a half JSON / CSV, or a page over another
store's images); Ctrl-C / SIGTERM end a command with one line and exit status 130 / 143.

Interrupts are raised from a monkeypatched function at a chosen moment (a frame of the encoder,
a row of the CSV, half of a text file), except the end-to-end signal test (slow)."""
from __future__ import annotations

import csv
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import av
import numpy as np
import pytest
import torch
from helpers import CountingScorer, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ResultStore
from geocon_torch.bench.calibration import refit_plan, run_calibration
from geocon_torch.bench.merge import MergeReport
from geocon_torch.bench.store import FLAT_COLUMNS, write_csv
from geocon_torch.cli import main
from geocon_torch.errors import ShapeError
from geocon_torch.io.writer import write_gif, write_video
from geocon_torch.report import build_report
from geocon_torch.synth import render_scene
from geocon_torch.synth.clip import load_synth

DATA = Path(__file__).resolve().parents[1] / "geocon_torch" / "data" / "calibration"
#: clip length and the frame the encoder is interrupted at: x264 holds ~4 frames back (its
#: lookahead), so 4 frames were already in the file
FRAMES, STOP_AT = 12, 8


def _interrupt_frames(monkeypatch, after: int) -> List[int]:
    """Make the video / gif writers raise KeyboardInterrupt when they build frame ``after``
    (0-based): ``av.VideoFrame`` is replaced by a stand-in counting ``from_ndarray`` calls."""
    real, calls = av.VideoFrame, []

    class Frame:
        @staticmethod
        def from_ndarray(arr, format):
            calls.append(1)
            if len(calls) > after:
                raise KeyboardInterrupt
            return real.from_ndarray(arr, format=format)

    monkeypatch.setattr(av, "VideoFrame", Frame)
    return calls


def _half_then_interrupt(monkeypatch, suffix: str, skip: int = 0) -> None:
    """A slow disk: ``Path.write_text`` of a ``suffix`` file (after the first ``skip`` ones)
    writes half of the text, then the user presses Ctrl-C."""
    real, seen = Path.write_text, []

    def write_text(self, data, *a, **k):
        if self.name.endswith(suffix):
            seen.append(self.name)
        if not self.name.endswith(suffix) or len(seen) <= skip:
            return real(self, data, *a, **k)
        with open(self, "w", encoding="utf-8") as fh:
            fh.write(data[: len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", write_text)


def _frame_count(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(video=0))


def _names(folder: Path) -> List[str]:
    """Every file name under ``folder`` (hidden temporaries included), sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _status(argv: List[str]) -> int:
    """``main(argv)``; a KeyboardInterrupt escaping it fails the test (instead of stopping
    pytest)."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail(f"geocon {argv[0]}: KeyboardInterrupt escaped main (traceback printed)")


def test_atomic_output_replaces_on_success_and_keeps_the_old_file_on_interrupt(tmp_path):
    from geocon_torch.io._atomic import atomic_output, atomic_write_text

    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_output(target) as tmp:
            assert tmp.parent == tmp_path and tmp.suffix == ".json" and tmp.name[0] == "."
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert target.read_text() == "old" and _names(tmp_path) == ["a.json"]
    with pytest.raises(RuntimeError, match="nothing written"):  # the temporary never existed
        with atomic_output(target):
            raise RuntimeError("nothing written")
    with atomic_output(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and _names(tmp_path) == ["a.json"]
    assert atomic_write_text(tmp_path / "b.txt", "é\n") == tmp_path / "b.txt"
    assert (tmp_path / "b.txt").read_bytes() == "é\n".encode() and len(_names(tmp_path)) == 2


def test_atomic_output_keeps_symlinks_and_writes_fifos_in_place(tmp_path):
    """A link to a result file stays a link (its target is replaced); a FIFO (or /dev/stdout)
    is written in place instead of being replaced by a regular file."""
    from geocon_torch.io._atomic import atomic_write_text

    (tmp_path / "data").mkdir()
    target, link = tmp_path / "data" / "r.csv", tmp_path / "r.csv"
    target.write_text("old")
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert _names(tmp_path / "data") == ["r.csv"]
    fifo, got = tmp_path / "fifo", []
    os.mkfifo(fifo)
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    atomic_write_text(fifo, "through the pipe")
    reader.join(10)
    assert got == ["through the pipe"] and stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.parametrize("kind", ["mp4", "gif"])
def test_interrupted_video_keeps_the_previous_file_and_leaves_no_fragment(tmp_path, monkeypatch,
                                                                          kind):
    """Ctrl-C while the encoder is at frame 8 of 12: the earlier 3-frame file stays as it was
    (it used to become a playable 4-frame fragment); a new path is not created at all."""
    write = write_video if kind == "mp4" else write_gif
    frames = render_scene("C3", num_frames=FRAMES, size=(48, 64), seed=0).frames
    old_path, new_path = tmp_path / f"old.{kind}", tmp_path / f"new.{kind}"
    write(old_path, frames[:3])
    old = old_path.read_bytes()
    for path in (old_path, new_path):
        calls = _interrupt_frames(monkeypatch, after=STOP_AT)
        with pytest.raises(KeyboardInterrupt):
            write(path, frames)
        monkeypatch.undo()
        assert len(calls) == STOP_AT + 1  # frames 0-7 encoded, the 9th interrupted
    assert _frame_count(old_path) == 3 and old_path.read_bytes() == old
    assert _names(tmp_path) == [old_path.name]
    write(new_path, frames)
    assert _frame_count(new_path) == FRAMES and _names(tmp_path) == sorted([old_path.name,
                                                                            new_path.name])


def test_a_video_of_no_frame_is_a_shape_error_not_a_missing_file(tmp_path):
    """An encoder given no frame writes no file: write_video used to return a path that did not
    exist (the atomic move would now fail on the missing temporary)."""
    for write, name in ((write_video, "x.mp4"), (write_gif, "x.gif")):
        with pytest.raises(ShapeError, match="at least one frame"):
            write(tmp_path / name, torch.zeros(0, 3, 8, 8, dtype=torch.uint8))
    assert _names(tmp_path) == []
    fast = write_video(tmp_path / "f.mp4", torch.zeros(2, 3, 8, 8, dtype=torch.uint8),
                       faststart=True)  # the muxer's second pass reopens the temporary
    assert _frame_count(fast) == 2 and _names(tmp_path) == ["f.mp4"]


def test_interrupted_synth_save_never_leaves_a_clip_beside_another_ground_truth(tmp_path,
                                                                                monkeypatch):
    """SynthClip.save interrupted in the mp4: nothing is left; interrupted over an earlier
    clip of the same id (in the masks, or half-way through the JSON): no JSON describes the new
    mp4 (the JSON, written last, marks a complete clip)."""
    first = render_scene("C4", num_frames=4, size=(48, 64), seed=0)
    second = render_scene("C4", num_frames=FRAMES, size=(48, 64), seed=0)
    assert first.clip_id == second.clip_id
    name = first.clip_id
    fresh = tmp_path / "fresh"
    _interrupt_frames(monkeypatch, after=STOP_AT)
    with pytest.raises(KeyboardInterrupt):
        second.save(fresh)
    monkeypatch.undo()
    assert _names(fresh) == []  # was [<id>.mp4]: 4 of 12 frames, no ground truth

    for where in ("masks", "json"):
        out = tmp_path / where
        first.save(out)
        if where == "masks":
            def boom(*a, **k):
                raise KeyboardInterrupt
            monkeypatch.setattr(np, "savez_compressed", boom)
        else:
            _half_then_interrupt(monkeypatch, ".json")
        with pytest.raises(KeyboardInterrupt):
            second.save(out)
        monkeypatch.undo()
        json_path = out / f"{name}.json"
        if json_path.exists():  # before: the 4-frame clip's JSON (or half of the new one)
            text = json_path.read_text()
            frames = json.loads(text)["num_frames"] if text.endswith("}") else text[-20:]
            pytest.fail(f"interrupted in the {where}: {name}.json ({frames!r} frames) beside "
                        f"a {_frame_count(out / f'{name}.mp4')}-frame mp4")
        assert not any(n.startswith(".") for n in _names(out)), _names(out)
        second.save(out)
        back = load_synth(json_path)
        assert back.num_frames == FRAMES and back.masks.shape == second.masks.shape
        assert _names(out) == sorted(f"{name}{s}" for s in (".json", ".mp4", "_masks.npz"))


def test_ctrl_c_is_one_line_and_status_130_and_debug_keeps_the_traceback(tmp_path, monkeypatch,
                                                                        capsys):
    out = tmp_path / "clips"
    argv = ["synth", str(out), "--category", "C3", "--size", "64x48", "--frames", str(FRAMES),
            "--no-progress"]
    _interrupt_frames(monkeypatch, after=STOP_AT)
    assert _status(argv) == 130
    cap = capsys.readouterr()
    assert cap.err == "geocon synth: interrupted\n" and cap.out == ""
    assert not out.exists() or _names(out) == []
    with pytest.raises(KeyboardInterrupt):
        main(["--debug"] + argv)
    with pytest.raises(KeyboardInterrupt):
        main(argv + ["--debug"])


def test_ctrl_c_in_bench_says_a_rerun_resumes_and_the_rerun_scores_the_rest(tmp_path,
                                                                          monkeypatch, capsys):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 4))
    db = str(tmp_path / "r.sqlite")

    class StopAtC2(CountingScorer):
        def __call__(self, entry, config, device):
            if entry.clip_id == "c2":
                raise KeyboardInterrupt
            return super().__call__(entry, config, device)

    argv = ["bench", str(m), "--db", db, "--batch-clips", "1", "--no-progress"]
    first = StopAtC2()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", first)
    assert _status(argv) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("geocon bench: interrupted")
    assert "run the same command again" in err and "without a stored row" in err
    with ResultStore(db) as s:
        assert sorted(r["clip_id"] for r in s.rows()) == ["c0", "c1"] and first.calls == [
            "c0", "c1"]
    again = CountingScorer()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", again)
    assert main(argv) == 0 and again.calls == ["c2", "c3"]


def test_sigterm_is_an_interrupt_with_status_143_and_the_handler_is_restored(tmp_path,
                                                                           monkeypatch,
                                                                           capsys):
    before = signal.getsignal(signal.SIGTERM)
    real = av.VideoFrame

    class Frame:  # at frame STOP_AT a scheduler's SIGTERM arrives
        n = 0

        @staticmethod
        def from_ndarray(arr, format):
            Frame.n += 1
            if Frame.n == STOP_AT + 1:
                if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                    pytest.fail("geocon installed no SIGTERM handler: SIGTERM would kill it "
                                "with the partial mp4 on disk")
                os.kill(os.getpid(), signal.SIGTERM)
            return real.from_ndarray(arr, format=format)

    monkeypatch.setattr(av, "VideoFrame", Frame)
    out = tmp_path / "clips"
    rc = _status(["synth", str(out), "--category", "C3", "--size", "64x48", "--frames",
                  str(FRAMES), "--no-progress"])
    assert rc == 143 and capsys.readouterr().err == "geocon synth: terminated (SIGTERM)\n"
    assert Frame.n == STOP_AT + 1 and (not out.exists() or _names(out) == [])
    assert signal.getsignal(signal.SIGTERM) == before


_CHILD = """
import sys, time, av
real = av.VideoFrame
class Frame:
    n = 0
    @staticmethod
    def from_ndarray(arr, format):
        Frame.n += 1
        if Frame.n == 9:
            print("encoding", flush=True)
            time.sleep(60)
        return real.from_ndarray(arr, format=format)
av.VideoFrame = Frame
from geocon_torch.cli import main
from geocon_torch.errors import ShapeError
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_real_signal_during_synth_leaves_nothing_and_prints_one_line(tmp_path, sig):
    out = tmp_path / "clips"
    p = subprocess.Popen([sys.executable, "-c", _CHILD, "synth", str(out), "--category", "C3",
                          "--size", "64x48", "--frames", str(FRAMES), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "encoding\n"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    word = "interrupted" if sig == signal.SIGINT else "terminated (SIGTERM)"
    assert (p.returncode, err) == (128 + sig, f"geocon synth: {word}\n")
    assert _names(out) == []


def _report_rows(n: int, ir: float) -> List[dict]:
    rows = []
    for i in range(n):
        res = fake_result(f"c{i}", ir=ir + 0.001 * i, ge=0.5 + i, prompt_category=f"C{i % 3 + 1}",
                          config_hash="cfg", score=0.5 + 0.05 * i)
        rows.append({"clip_id": f"c{i}", "generator": "AB"[i % 2], "prompt": "p", "seed": i,
                     "prompt_category": f"C{i % 3 + 1}", "scene": f"s{i}",
                     "config_hash": "cfg", "status": "ok", "result": res})
    return rows


def test_interrupted_report_over_an_old_one_leaves_no_page_of_the_old_store(tmp_path,
                                                                          monkeypatch):
    """The images are replaced as the new report renders: the old page (4 clips) must not be
    left describing them (it was, audit F4), nor half of the new page."""
    out, page = tmp_path / "rep", tmp_path / "rep" / "index.html"
    build_report(_report_rows(4, 0.90), out, draw=False, n_boot=50, cards=1)
    old_img = {n: (out / n).read_bytes() for n in _names(out) if n.startswith("img/")}

    def boom(*a, **k):
        raise KeyboardInterrupt

    html_mod = "geocon_torch.report.html."
    monkeypatch.setattr(html_mod + "_gate_section", boom)  # after the ci_* / dist_* plots
    with pytest.raises(KeyboardInterrupt):
        build_report(_report_rows(8, 0.95), out, draw=False, n_boot=50, cards=1)
    monkeypatch.undo()
    replaced = sorted(n for n, b in old_img.items() if (out / n).read_bytes() != b)
    assert replaced  # the new run did replace images
    assert not page.exists(), f"the 4-clip page stays over the 8-clip run's {replaced}"
    # Ctrl-C half-way through writing the page (sections stubbed: only the page write matters)
    for name in ("_leaderboard_section", "_prompt_category_section", "_gate_section",
                 "_sensitivity_section", "_dynamics_section", "_problems_section",
                 "_cards_section"):
        monkeypatch.setattr(html_mod + name, lambda *a, **k: "<p>section</p>" * 50)
    _half_then_interrupt(monkeypatch, ".html")
    with pytest.raises(KeyboardInterrupt):
        build_report(_report_rows(8, 0.95), out, draw=False, n_boot=50, cards=1)
    assert not page.exists(), page.read_text()[-60:]  # was half a page
    assert not any(Path(n).name.startswith(".") for n in _names(out)), _names(out)


def test_interrupted_calibration_keeps_the_previous_roc_json(tmp_path, monkeypatch):
    doc = json.loads((DATA / "opencv-sift.json").read_text())
    doc["score_config_hash"] = None  # the plan and rows as they are (no rescoring here)
    plan, rows = refit_plan(doc, doc["target_false_pass"], doc["min_severity"])
    monkeypatch.setattr("geocon_torch.bench.calibration.plot_roc", lambda *a, **k: [])
    run_calibration(plan, tmp_path, rows=rows)
    old = {n: (tmp_path / n).read_bytes() for n in ("calibration.json", "roc.json")}
    assert len(json.loads(old["calibration.json"])["clips"]) == len(rows) == len(doc["clips"])
    _half_then_interrupt(monkeypatch, ".json", skip=1)  # calibration.json, then roc.json
    with pytest.raises(KeyboardInterrupt):
        run_calibration(plan, tmp_path, rows=rows)
    monkeypatch.undo()
    assert (tmp_path / "roc.json").read_bytes() == old["roc.json"]  # was half of it
    assert (tmp_path / "calibration.json").read_bytes() == old["calibration.json"]
    assert _names(tmp_path) == ["calibration.json", "roc.json"]


def test_interrupted_csv_export_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "x.csv"
    recs = [{"clip_id": f"c{i}", "ir": 0.5 + i} for i in range(3)]
    write_csv(path, recs)
    old = path.read_bytes()
    real, n = csv.DictWriter.writerow, []

    def writerow(self, row):
        n.append(1)
        if len(n) == 3:  # the header, the first row, then Ctrl-C
            raise KeyboardInterrupt
        return real(self, row)

    monkeypatch.setattr(csv.DictWriter, "writerow", writerow)
    with pytest.raises(KeyboardInterrupt):
        write_csv(path, [dict(r, ir=9.0) for r in recs])
    monkeypatch.undo()
    assert path.read_bytes() == old, path.read_text()  # was the header and one row
    back = list(csv.DictReader(path.open(encoding="utf-8")))
    assert [float(r["ir"]) for r in back] == [0.5, 1.5, 2.5] and len(back[0]) == len(FLAT_COLUMNS)
    assert _names(tmp_path) == ["x.csv"]


def test_interrupted_merge_conflicts_file_is_not_left_half_written(tmp_path, monkeypatch,
                                                                  capsys):
    conflicts = [{"table": "clips", "clip_id": f"c{i}", "config_hash": "cfg", "kept_from": "a",
                  "other_from": "b", "differences": {"generator": ["x", "y"]}}
                 for i in range(3)]

    class Stopping(list):  # the file loop is interrupted at its second conflict
        def __iter__(self):
            yield self[0]
            raise KeyboardInterrupt

    path = tmp_path / "conflicts.jsonl"
    path.write_text("earlier\n")
    monkeypatch.setattr("geocon_torch.commands.merge.merge_stores",
                        lambda out, shards, **kw: MergeReport(
                            out=out, shards=list(shards), conflicts=Stopping(conflicts)))
    assert _status(["merge", str(tmp_path / "o.sqlite"), str(tmp_path / "s.sqlite"),
                    "--conflicts", str(path)]) == 130
    assert capsys.readouterr().err.endswith("geocon merge: interrupted\n")
    assert path.read_text() == "earlier\n" and _names(tmp_path) == ["conflicts.jsonl"]
    monkeypatch.setattr("geocon_torch.commands.merge.merge_stores",
                        lambda out, shards, **kw: MergeReport(
                            out=out, shards=list(shards), conflicts=conflicts))
    assert main(["merge", str(tmp_path / "o"), "s", "--conflicts", str(path)]) == 1
    assert [json.loads(x)["clip_id"] for x in path.read_text().splitlines()] == ["c0", "c1", "c2"]


def test_interrupted_pairs_and_parquet_outputs_keep_the_previous_file(tmp_path, monkeypatch):
    """``geocon pairs --out`` / ``demo --json`` (``write_jsonl``) and ``--export-parquet`` go
    through the atomic writer: a write stopped part-way leaves the previous file whole."""
    from geocon_torch.commands._common import write_jsonl as write_results
    from geocon_torch.bench.store import write_parquet

    out = tmp_path / "pairs.jsonl"
    write_results(str(out), [{"a": 1}, {"a": 2}])
    old = out.read_bytes()
    real = Path.write_text

    def half_then_stop(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", half_then_stop)
    with pytest.raises(KeyboardInterrupt):
        write_results(str(out), [{"a": 3}, {"a": 4}])
    monkeypatch.undo()
    assert out.read_bytes() == old and _names(tmp_path) == ["pairs.jsonl"]

    pq = pytest.importorskip("pyarrow.parquet")
    table = tmp_path / "t.parquet"
    write_parquet(table, [{"clip_id": "c0", "ir": 0.5}])
    real_write = pq.write_table

    def partial_table(t, where, *args, **kwargs):
        Path(where).write_bytes(b"PAR1 half")  # a part of a file, then Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", partial_table)
    with pytest.raises(KeyboardInterrupt):
        write_parquet(table, [{"clip_id": "c1", "ir": 9.0}])
    monkeypatch.setattr(pq, "write_table", real_write)
    assert pq.read_table(table).column("ir").to_pylist() == [0.5]
    assert sorted(_names(tmp_path)) == ["pairs.jsonl", "t.parquet"]
