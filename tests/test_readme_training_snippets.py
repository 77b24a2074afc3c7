"""Every code block of the README's "Training loop" section runs as written (python blocks in
one namespace, in order; ``geocon ...`` bash lines through the CLI's ``main``), on tiny inputs
in a temporary folder that holds the manifest the section refers to."""
from __future__ import annotations

import json
import re
import shlex
from typing import List, Tuple

import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch.bench import write_manifest
from geocon_torch.cli import main
from geocon_torch.synth import grounded_clip

pytest.importorskip("cv2")

README = REPO_ROOT / "README.md"


def training_blocks() -> List[Tuple[str, str]]:
    """(language, code) of each fenced block in the "## Training loop" section."""
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Training loop\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"```(\w+)\n(.*?)```", text[start:end], flags=re.S)


def test_section_has_the_three_snippets():
    langs = [lang for lang, _ in training_blocks()]
    assert langs.count("python") == 3 and langs.count("bash") == 1


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    """manifest.jsonl: one prompt with a clean C3 clip (the camera trucks: a locked-off C1 clip
    is a frozen video, which the pairs leave unscored) and a rubber-sheet version, one prompt
    with a single clip (skipped); native.json."""
    rows = []
    for cid, prompt, corruption in (("clean", "a room", None), ("warped", "a room", "rubber_sheet"),
                                    ("alone", "a hall", None)):
        clip = grounded_clip("C3", num_frames=16, size=(120, 160), corruption=corruption,
                             severity=0.8 if corruption else 0.0)
        clip.clip_id = cid
        clip.save(tmp_path)
        rows.append({"clip_id": cid, "path": f"{cid}.mp4", "generator": "gen", "prompt": prompt})
    write_manifest(tmp_path / "manifest.jsonl", rows)
    (tmp_path / "native.json").write_text(json.dumps({"io": {"long_side": None}}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_training_loop_snippets_run(workdir, capsys):
    namespace: dict = {}
    for lang, code in training_blocks():
        if lang == "python":
            exec(compile(code, "README.md (Training loop)", "exec"), namespace)
            continue
        for line in code.strip().splitlines():
            argv = shlex.split(line)
            assert argv[0] == "geocon"
            assert main(argv[1:]) == 0
    rewards, adv = namespace["rewards"], namespace["advantages"]
    assert rewards.shape == (4,) and bool(rewards[0] > rewards[1])
    assert bool(adv[0] > 0) and bool(adv[1] < 0)
    assert torch.allclose(adv.view(2, 2).sum(1), torch.zeros(2, dtype=adv.dtype), atol=1e-5)
    assert namespace["dpo"] == [("clean", "warped")]
    assert namespace["soft"].shape == (4,) and namespace["frames"].grad is not None
    assert "pair" in (workdir / "prefs.jsonl").read_text()
