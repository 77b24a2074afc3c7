"""Audit card fixes of session 30: string paths accepted, a backend that did not run says so."""
from pathlib import Path

from geocon_torch.report import audit_card


def _row(tmp_path: Path, flow):
    res = {"schema_version": "1.0", "clip": "x", "status": "ok", "reason": None,
           "config_hash": "c", "path": str(tmp_path / "gone.mp4"), "regime": "H", "gate": {},
           "background": {"ir": 0.9, "ge_px": 1.0},
           "backends": {"features": "opencv-sift", "flow": flow}}
    return {"clip_id": "x", "result": res}


def test_audit_card_takes_string_paths(tmp_path: Path):
    html = audit_card(_row(tmp_path, None), str(tmp_path / "img"), rel_to=str(tmp_path))
    assert (tmp_path / "img").is_dir()
    assert "drawings unavailable: VideoReadError" in html


def test_backend_that_did_not_run_reads_not_run(tmp_path: Path):
    html = audit_card(_row(tmp_path, None), tmp_path / "img", draw=False)
    assert "flow: not run" in html and "unknown" not in html.split("backends")[1][:200]
    html = audit_card(_row(tmp_path, "lk-dense"), tmp_path / "img", draw=False)
    assert "flow: lk-dense" in html
