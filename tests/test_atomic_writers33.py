"""Audit s33 "enospc": outputs written when the disk fills up (or a quota / file-size limit is
met). Calibrate's ROC plots and ``write_manifest`` are atomic (complete or as before) and their
error names the file (F1, F5); ``write_image_folder`` raises on a frame it could not write
(F5); a named output error reads ``...: 'out.png'``, not ``... -> None`` (F7); ``geocon report``
fails (exit 2, one line naming the PNG) when a card's drawing cannot be written, and keeps its
"drawings unavailable" note for failures of the clip (F2).

Failures are simulated by monkeypatched writers raising ``OSError(errno.ENOSPC, ...)`` as the
system does (a partial write first, naming no file), or in a child process under
``RLIMIT_FSIZE`` with SIGXFSZ ignored (EFBIG, a real failed write)."""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest
from helpers import cli_error_line, fake_result, write_jsonl

from geocon_torch import __version__
from geocon_torch.bench.manifest import load_manifest, write_manifest
from geocon_torch.io._atomic import atomic_output, name_output_error
from geocon_torch.report import audit

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "geocon_torch" / "data" / "calibration"
ENOSPC = os.strerror(errno.ENOSPC)
LIMITED = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
           "resource.setrlimit(resource.RLIMIT_FSIZE, ({n}, resource.RLIM_INFINITY))\n")


def _names(folder: Path) -> List[str]:
    return sorted(os.listdir(folder)) if folder.is_dir() else []


_error_line = cli_error_line


def _limited(code: str, limit: int) -> subprocess.CompletedProcess:
    """Run ``code`` in a child Python whose files may not grow past ``limit`` bytes (EFBIG)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", LIMITED.format(n=limit) + code],
                          capture_output=True, text=True, env=env, timeout=300)


# ------------------------------------------------------------------ F1: calibrate's ROC plots

def test_calibrate_roc_png_on_a_full_disk_is_kept_and_named(tmp_path: Path, capsys,
                                                            monkeypatch):
    """calibrate --refit whose roc_H.png write fails half-way (ENOSPC): one line naming
    OUTDIR/roc_H.png, exit 2; the previous roc_H.png is left as it was, no temporary."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    doc = json.loads((DATA / "opencv-sift.json").read_text())
    doc["score_config_hash"], doc["version"] = None, __version__  # no rescoring, no warning
    src = tmp_path / "source.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "cal"
    out.mkdir()
    (out / "roc_H.png").write_bytes(b"old plot")
    real = Figure.savefig

    def savefig(self, fname, *args: Any, **kwargs: Any) -> None:
        if "roc_H" in os.fspath(fname):
            Path(fname).write_bytes(b"\x89PNG partial")  # what fitted, then the error
            raise OSError(errno.ENOSPC, ENOSPC)
        return real(self, fname, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    line = _error_line(capsys, ["calibrate", str(out), "--refit", str(src)])
    assert line == f"geocon calibrate: error: {ENOSPC}: {out / 'roc_H.png'}"
    assert (out / "roc_H.png").read_bytes() == b"old plot"
    assert not [n for n in _names(out) if ".partial-" in n]


# ------------------------------------------------------------ F5: image folder and manifest

def test_write_image_folder_raises_naming_the_frame_it_could_not_write(tmp_path: Path):
    """A frame whose PNG cannot be written (file-size limit: EFBIG) raises an OSError naming
    that frame's file (it returned normally with fewer frames); no partial PNG is left."""
    code = ("import torch\nfrom geocon_torch.io import write_image_folder\n"
            "torch.manual_seed(0)\n"
            "f = torch.zeros(6, 3, 96, 128, dtype=torch.uint8)\n"
            "f[3:] = (torch.rand(3, 3, 96, 128) * 255).to(torch.uint8)\n"
            "try:\n    write_image_folder(sys.argv[1], f)\n"
            "except OSError as e:\n    print('raised', e.errno, e.filename); sys.exit(3)\n"
            "print('returned')\n")
    p = _limited(code.replace("sys.argv[1]", repr(str(tmp_path))), 20000)
    assert p.returncode == 3, p.stdout + p.stderr
    assert p.stdout.split() == ["raised", str(errno.EFBIG), str(tmp_path / "00003.png")]
    assert _names(tmp_path) == ["00000.png", "00001.png", "00002.png"]


def test_write_image_folder_frames_are_unchanged(tmp_path: Path):
    """The PNGs are the ones cv2.imwrite writes (lossless, same bytes)."""
    cv2 = pytest.importorskip("cv2")
    import torch

    from geocon_torch.io import write_image_folder
    torch.manual_seed(1)
    frames = (torch.rand(2, 3, 20, 30) * 255).to(torch.uint8)
    write_image_folder(tmp_path / "a", frames, prefix="f_")
    for i, frame in enumerate(frames.permute(0, 2, 3, 1).numpy()):
        ref = tmp_path / f"ref{i}.png"
        cv2.imwrite(str(ref), frame[..., ::-1].copy())
        assert (tmp_path / "a" / f"f_{i:05d}.png").read_bytes() == ref.read_bytes()
    assert _names(tmp_path / "a") == ["f_00000.png", "f_00001.png"]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_write_manifest_on_a_full_disk_keeps_the_previous_manifest(tmp_path: Path, suffix):
    """A manifest rewrite that fails (EFBIG) leaves the previous manifest whole (it left a
    cut one: a CSV that loads with fewer rows) and its error names the manifest."""
    path = tmp_path / f"m{suffix}"
    write_manifest(path, [{"path": f"/v/c{i:03d}.mp4", "generator": "g"} for i in range(200)])
    before = path.read_bytes()
    assert len(before) > 3000 and len(load_manifest(path)) == 200
    code = ("from geocon_torch.bench.manifest import write_manifest\n"
            "rows = [{'path': f'/w/clip{i:03d}.mp4', 'generator': 'h'} for i in range(200)]\n"
            "try:\n    write_manifest(sys.argv[1], rows)\n"
            "except OSError as e:\n    print('raised', e.errno, e.filename); sys.exit(3)\n")
    p = _limited(code.replace("sys.argv[1]", repr(str(path))), 3000)
    assert p.returncode == 3, p.stdout + p.stderr
    assert p.stdout.split() == ["raised", str(errno.EFBIG), str(path)]
    assert path.read_bytes() == before
    assert _names(tmp_path) == [path.name]


# ------------------------------------------------------------------ F7: "-> None"

def test_named_output_error_has_no_stray_none():
    """An output error named by name_output_error reads "...: 'out/roc.png'" (it read
    "... -> None"), whether the write named no file or the temporary and the output."""
    exc = name_output_error(OSError(errno.ENOSPC, ENOSPC), "out/roc.png")
    assert str(exc) == f"[Errno {errno.ENOSPC}] {ENOSPC}: 'out/roc.png'"
    tmp = Path("out/.roc.partial-1-abcdef.png")
    exc = name_output_error(OSError(errno.ENOSPC, ENOSPC, str(tmp), None, "out/roc.png"),
                            "out/roc.png", tmp)
    assert str(exc) == f"[Errno {errno.ENOSPC}] {ENOSPC}: 'out/roc.png'"
    assert exc.filename == "out/roc.png" and exc.filename2 is None


# ------------------------------------------------------- F2: report's card drawings, full disk

def _draw_fails(img_dir: Path, slug: str, code: int):
    """A _draw_pair whose first PNG's write fails with ``code`` (through atomic_output, as
    plots._save writes)."""
    def draw(d, img_dir, slug, seg):
        with atomic_output(img_dir / f"card_{slug}_matches.png") as tmp:
            tmp.write_bytes(b"\x89PNG partial")
            raise OSError(code, os.strerror(code))
    return draw


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO,
                                  errno.EROFS])
def test_card_drawing_on_a_full_disk_raises(tmp_path: Path, monkeypatch, code):
    """A card drawing whose PNG write fails for the output disk raises its OSError naming the
    PNG (it became a "drawings unavailable" note)."""
    monkeypatch.setattr(audit, "pair_evidence", lambda *a, **k: object())
    monkeypatch.setattr(audit, "_draw_pair", _draw_fails(tmp_path, "c", code))
    with pytest.raises(OSError) as info:
        audit._drawings({}, fake_result("c", path="/x/c.mp4"), tmp_path, "c", None)
    assert info.value.errno == code
    assert info.value.filename == str(tmp_path / "card_c_matches.png")
    assert "None" not in str(info.value)
    assert _names(tmp_path) == []


@pytest.mark.parametrize("exc", [
    OSError(errno.EIO, os.strerror(errno.EIO), "/x/c.mp4"),  # reading the clip
    FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "/x/c.mp4"),
    OSError(errno.ENOSPC, ENOSPC, "/x/c_masks.npz")])  # any error that names the clip's files
def test_card_drawing_failing_on_the_clip_keeps_the_note(tmp_path: Path, monkeypatch, exc):
    def fail(*args, **kwargs):
        raise exc
    monkeypatch.setattr(audit, "pair_evidence", fail)
    imgs, notes = audit._drawings({}, fake_result("c", path="/x/c.mp4"), tmp_path, "c", None)
    assert imgs == [] and notes[0].startswith(f"drawings unavailable: {type(exc).__name__}")


def test_report_with_a_card_drawing_on_a_full_disk_fails(tmp_path: Path, capsys, monkeypatch):
    """geocon report whose card drawing meets a full disk: one line naming the card's PNG,
    exit 2, no index.html (it printed "wrote index.html", exit 0, with a note in the page)."""
    pytest.importorskip("matplotlib")
    results = write_jsonl(tmp_path / "r.jsonl",
                          [fake_result(f"c{i}", path=f"/x/c{i}.mp4") for i in range(4)])
    out = tmp_path / "rep"
    monkeypatch.setattr(audit, "pair_evidence", lambda *a, **k: object())
    monkeypatch.setattr(audit, "_draw_pair", _draw_fails(out / "img", "c", errno.ENOSPC))
    line = _error_line(capsys, ["report", str(results), "--out", str(out), "--boot", "20",
                                "--no-progress"])
    assert line.startswith(f"geocon report: error: {ENOSPC}: {out}{os.sep}")
    assert line.endswith("_matches.png") and "None" not in line
    assert not (out / "index.html").exists()
