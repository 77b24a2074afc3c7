"""``--confine-paths`` / ``load_manifest(confine=True)``: a submitted manifest may only name
files inside its own folder (links and ``..`` resolved), so it cannot make the operator score
(and the report publish) any file the operator can read."""
import os
from pathlib import Path

import pytest

from geocon_torch.bench import run_manifest
from geocon_torch.bench.manifest import ManifestError, load_manifest
from geocon_torch.cli import main


def _tree(tmp_path: Path) -> Path:
    sub = tmp_path / "alice"
    (sub / "clips").mkdir(parents=True)
    for name in ("clips/a.mp4", "clips/a_masks.npz"):
        (sub / name).write_bytes(b"x")
    (tmp_path / "secret.mp4").write_bytes(b"x")
    os.symlink(tmp_path / "secret.mp4", sub / "clips" / "link.mp4")
    return sub


def _manifest(folder: Path, rows) -> Path:
    path = folder / "m.csv"
    path.write_text("clip_id,path,generator,masks_path\n"
                    + "".join(f"c{k},{p},g,{m}\n" for k, (p, m) in enumerate(rows)))
    return path


def test_paths_inside_the_folder_are_accepted(tmp_path):
    sub = _tree(tmp_path)
    m = _manifest(sub, [("clips/a.mp4", "clips/a_masks.npz"),
                        (str(sub / "clips" / "a.mp4"), ""),  # absolute, inside
                        ("clips/../clips/a.mp4", "")])
    entries = load_manifest(m, confine=True)
    assert [Path(e.path).name for e in entries] == ["a.mp4"] * 3


@pytest.mark.parametrize("path, masks, field", [
    ("../secret.mp4", "", "path"),
    ("{root}/secret.mp4", "", "path"),
    ("clips/link.mp4", "", "path"),  # a link inside that points outside
    ("clips/a.mp4", "../secret.mp4", "masks_path"),
])
def test_paths_outside_the_folder_are_refused_naming_line_and_field(tmp_path, path, masks,
                                                                    field):
    sub = _tree(tmp_path)
    m = _manifest(sub, [("clips/a.mp4", ""), (path.format(root=tmp_path), masks)])
    assert len(load_manifest(m)) == 2  # without confine: read as before
    with pytest.raises(ManifestError, match=rf"m.csv, line 3: {field} .* lies outside the "
                                            rf"manifest's folder"):
        load_manifest(m, confine=True)


def test_run_manifest_and_the_cli_refuse_before_any_clip_is_scored(tmp_path, capsys):
    sub = _tree(tmp_path)
    m = _manifest(sub, [("../secret.mp4", "")])
    calls = []
    with pytest.raises(ManifestError, match="lies outside"):
        run_manifest(m, tmp_path / "r.sqlite", score_fn=lambda *a: calls.append(a),
                     confine_paths=True, progress=False)
    assert calls == [] and not (tmp_path / "r.sqlite").exists()
    code = main(["bench", str(m), "--db", str(tmp_path / "r.sqlite"), "--confine-paths",
                 "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "line 2: path" in err[0] and "lies outside" in err[0]
