"""The README's python examples outside "Training loop" (tests/test_readme_training_snippets.py
runs those) run as written and do what the text around them says: the quick start, the metric in
a training loop, io, synth and score_clip blocks.

Each block is found by a line of its code, not by its line number. It runs in a temporary folder
that holds tiny synthetic inputs under the names the block uses (``video.mp4``, ``clip.mp4``,
``a.mp4``, ``b.mp4``, ``../shared/data/real/hill``), so the code runs unchanged; only the synth
block's frame count and size are made small (by exact text replacement, so a README edit that
removes them fails here). Every top-level bare expression (``clip.masks  # (T, K, H, W)``) is
recorded with its value for the checks.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT

import geocon_torch.pipeline as pipeline
from geocon_torch.synth import grounded_clip

cv2 = pytest.importorskip("cv2")

README = REPO_ROOT / "README.md"
SIZE = (96, 160)  # (H, W) of the synthetic inputs


def readme_block(code_line: str) -> str:
    """The one ```python block of README.md that holds ``code_line``."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    found = [b for b in blocks if code_line in b]
    assert len(found) == 1, f"{len(found)} README python blocks hold {code_line!r}"
    return found[0]


def shrink(code: str, replacements: Dict[str, str]) -> str:
    """``code`` with each key (which must occur exactly once) replaced by its value."""
    for old, new in replacements.items():
        assert code.count(old) == 1, f"{old!r} is not in the README block once:\n{code}"
        code = code.replace(old, new)
    return code


def run_block(code: str, namespace: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """Execute ``code`` in ``namespace``; (source line, value) of each top-level bare
    expression, in order."""
    tree, lines = ast.parse(code), code.splitlines()
    values: List[Tuple[str, Any]] = []
    namespace["_record_"] = lambda i, v: values.append((lines[i], v))
    for node in tree.body:
        if isinstance(node, ast.Expr):
            node.value = ast.Call(ast.Name("_record_", ast.Load()),
                                  [ast.Constant(node.lineno - 1), node.value], [])
    exec(compile(ast.fix_missing_locations(tree), "README.md", "exec"), namespace)
    return values


def save_clip(folder: Path, name: str, category: str, num_frames: int = 6) -> Path:
    """A tiny grounded clip written as ``folder/<name>.mp4`` (+ its .json / _masks.npz)."""
    clip = grounded_clip(category, num_frames=num_frames, size=SIZE)
    clip.clip_id = name
    clip.save(folder)
    return folder / f"{name}.mp4"


def printed_keys(text: str) -> List[str]:
    """Keys of the dict printed on the last line of ``text``."""
    line = text.strip().splitlines()[-1]
    assert line.startswith("{") and line.endswith("}"), line
    return re.findall(r"'(\w+)': ", line)


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch) -> Path:
    """An empty working folder (``tmp_path/work``), the current directory."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


def hill_folder(workdir: Path) -> None:
    """``../shared/data/real/hill`` below ``workdir``'s parent: 5 PNG frames of a synthetic pan
    (a pure rotation, regime H) at 96 x 160."""
    hill = workdir.parent / "shared" / "data" / "real" / "hill"
    hill.mkdir(parents=True)
    frames = grounded_clip("C2", num_frames=5, size=SIZE).frames  # (T, 3, H, W) uint8 RGB
    for i, frame in enumerate(frames.permute(0, 2, 3, 1).numpy()):
        assert cv2.imwrite(str(hill / f"{i + 1}.png"), frame[..., ::-1])


@pytest.mark.parametrize("source", ["synthetic", "hill"])
def test_quick_start(source: str, workdir: Path, request, monkeypatch, capsys):
    """README "Quick start": an image folder scored at long side 400 prints the regime and the
    IR, ``H 0.99...`` for the real hill (from the repository root, as the README runs it;
    skipped without ../shared/data); a synthetic pan in its place prints H and an IR near 1."""
    if source == "hill":
        request.getfixturevalue("shared_data")  # skips without ../shared/data
        monkeypatch.chdir(REPO_ROOT)
    else:
        hill_folder(workdir)
    ns: Dict[str, Any] = {}
    run_block(readme_block('res = score_clip("../shared/data/real/hill"'), ns)
    regime, ir = capsys.readouterr().out.split()
    assert regime == "H" and float(ir) >= (0.99 if source == "hill" else 0.95)
    d = ns["res"].to_dict()
    assert d["status"] == "ok" and max(d["working_size"]) == 400


def test_metric_in_a_training_loop(workdir: Path, capsys):
    """README "Inside a training loop": BackgroundConsistency over (B, T, C, H, W) uint8
    batches prints ``{'ir': ..., 'ge_px': ..., 'pass_rate': ..., ...}``."""
    batches = [torch.stack([grounded_clip(cat, num_frames=4, size=SIZE, seed=s).frames
                            for cat in ("C2", "C3")]) for s in (0, 1)]  # (2, 4, 3, 96, 160)
    ns: Dict[str, Any] = {"device": "cpu", "loader": batches}
    run_block(readme_block("bg = BackgroundConsistency().to(device)"), ns)
    keys = printed_keys(capsys.readouterr().out)
    assert keys[:2] == ["ir", "ge_px"] and "pass_rate" in keys
    out = ns["bg"].compute()
    assert int(out["num_clips"]) == 4 and int(out["num_ok"]) == 4 and int(out["num_error"]) == 0
    assert 0.9 < float(out["ir"]) <= 1.0 and 0.0 <= float(out["pass_rate"]) <= 1.0


def test_io(workdir: Path):
    """README "io": read at long side 1024 with stride 2, 8 pairs spread by
    round(linspace(0, P-1, 8)), ``probe_video`` gives fps, num_frames, height, width, codec."""
    save_clip(workdir, "video", "C3", num_frames=24)
    ns: Dict[str, Any] = {}
    values = run_block(readme_block('clip = read_clip("video.mp4"'), ns)
    clip, pairs = ns["clip"], ns["pairs"]
    assert tuple(clip.frames.shape) == (12, 3, 614, 1024)  # 96 x 160 -> long side 1024
    assert clip.frame_indices.tolist() == list(range(0, 24, 2)) and clip.fps == 12.0
    spread = np.round(np.linspace(0, 10, 8)).astype(int).tolist()  # 11 pairs of 12 frames
    assert pairs.tolist() == [[i, i + 1] for i in spread]
    (line, probe), = values
    assert line.startswith("probe_video(")
    assert (probe.fps, probe.num_frames, probe.height, probe.width) == (24.0, 24, 96, 160)
    assert probe.counted == "decoded" and probe.codec == "h264"


def test_synth(workdir: Path):
    """README "Grounded scenes (synth)" (6 frames at 96 x 160 instead of 48 at 384 x 640): the
    shapes in the comments, a zero F for a pan, the files and JSON fields ``save`` writes, a
    corrupted render."""
    code = shrink(readme_block('clip = render_scene("C2"'), {
        "num_frames=48, size=(384, 640)": "num_frames=6, size=(96, 160)",
        "severity=0.6)": "severity=0.6, num_frames=6, size=(96, 160))"})
    ns: Dict[str, Any] = {}
    values = {line.split("#")[0].strip(): v for line, v in run_block(code, ns)}
    t, (h, w) = 6, SIZE
    assert values["clip.true_homographies"].shape == (t - 1, 3, 3)
    f01 = values["clip.fundamental(0, 1)"]
    assert f01.shape == (3, 3) and not f01.any()  # a still camera centre has no F
    assert values["clip.masks"].shape == (t, 0, h, w)  # a pan: no objects
    json_path = values['clip.save("out/")']
    cid = ns["clip"].clip_id
    assert sorted(p.name for p in (workdir / "out").iterdir()) == \
        sorted([f"{cid}.json", f"{cid}.mp4", f"{cid}_masks.npz"])
    gt = json.loads(Path(json_path).read_text())
    assert {"prompt", "generator", "generator_version", "seed", "resolution", "fps", "duration",
            "clip_id", "masks_path", "true_homographies", "poses", "intrinsics"} <= set(gt)
    assert gt["resolution"] == "160x96" and gt["masks_path"] == f"{cid}_masks.npz"
    bad, clean = ns["bad"], grounded_clip("C3", num_frames=6, size=SIZE)
    assert bad.corruption == "rubber_sheet" and bad.severity == 0.6
    assert bad.frames.shape == clean.frames.shape and not torch.equal(bad.frames, clean.frames)


@pytest.mark.parametrize("file_long_side", [
    160, pytest.param(None, marks=pytest.mark.slow, id="1024")])
def test_score_clip(workdir: Path, monkeypatch, file_long_side):
    """README "score_clip and the result": the documented fields, preset "geocon" by default, a
    file scored at the file working size with ``long_side`` "auto", and ``score_clips`` returns
    an error row for a missing file instead of raising. The fast case lowers the files' working
    size (1024 px, the slow case) to 160 px."""
    if file_long_side is not None:
        monkeypatch.setattr(pipeline, "FILE_LONG_SIDE", file_long_side)
    for name, category in (("clip", "C4"), ("a", "C2"), ("b", "C3")):
        save_clip(workdir, name, category)
    ns: Dict[str, Any] = {}
    values = run_block(readme_block("results = score_clips(["), ns)
    (line, (ir, regime, behaviour, objects)), = values
    d = ns["d"]
    assert d["status"] == "ok" and d["config"]["preset"] == "geocon"
    assert "foreground" in d and "epipolar" not in d  # geocon: background + foreground
    assert 0.0 <= ir <= 1.0 and regime in ("H", "F") and isinstance(behaviour, str)
    assert isinstance(objects, list) and d["scored_at"]["long_side"] == "auto"
    assert max(d["working_size"]) == (file_long_side or 1024)
    rows = [r.to_dict() for r in ns["results"]]
    assert [r["status"] for r in rows] == ["ok", "ok", "error"]
    assert "missing.mp4" in rows[2]["reason"] and "no such file" in rows[2]["reason"]
