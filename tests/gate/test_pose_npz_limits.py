"""A pose-log .npz from elsewhere (a manifest's poses_path) is checked on its arrays' .npy
headers before any array is read: a small file declaring a huge array is an InputError naming
the file, the array and its shape (audit s20 M3)."""
import io
import zipfile

import numpy as np
import pytest
import torch

from geocon_torch.errors import InputError
from geocon_torch.gate import poses
from geocon_torch.gate.poses import load_pose_log


def _npz_declaring(path, arrays):
    """An .npz of members ``{key: (shape, dtype)}``, each a .npy header followed by 64 zero
    bytes only (a reader that trusts the header would read far more)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for key, (shape, dtype) in arrays.items():
            head = io.BytesIO()
            np.lib.format.write_array_header_1_0(head, {
                "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                "fortran_order": False, "shape": tuple(shape)})
            z.writestr(f"{key}.npy", head.getvalue() + b"\0" * 64)
    return path


@pytest.mark.parametrize("arrays, phrase", [
    ({"poses": ((2_000_000, 4, 4), "<f8")},
     r"array 'poses' declares shape \(2000000, 4, 4\), more than 1000000 entries"),
    ({"valid": ((10, ), "|b1"), "pairs": ((10**9, 2), "<i8")},
     r"array 'pairs' declares shape \(1000000000, 2\), more than 1000000 entries"),
    ({"poses": ((10**6, 4, 4), "<f8"), "absolute_poses": ((10**6, 4, 4), "<f8"),
      "world_to_camera": ((10**6, 4, 4), "<f8"), "pairs": ((10**6, 2), "<i8")},
     r"array 'pairs' declares shape \(1000000, 2\) \(int64\): its arrays declare more "
     r"than 384 MB together"),
    ({"generator": ((), "<U200000000")},  # one 800 MB string
     r"array 'generator' declares shape \(\) \(<U200000000\): its arrays declare more than"),
])
def test_a_pose_npz_declaring_too_much_is_refused_from_its_headers(tmp_path, arrays, phrase):
    src = _npz_declaring(tmp_path / "poses.npz", arrays)
    with pytest.raises(InputError, match=phrase) as exc:
        load_pose_log(src)
    assert str(exc.value).startswith(f"pose log {src}: array '")
    assert poses.MAX_POSE_LOG_ENTRIES == 10**6 and poses.MAX_POSE_NPZ_BYTES == 384_000_000


def test_pose_npz_logs_within_the_bounds_load_as_before(tmp_path):
    """Headers pass for ordinary logs, which load exactly as their arrays do."""
    rel = np.tile(np.eye(4), (5, 1, 1))
    rel[:, 0, 3] = np.arange(5) * 0.1
    pairs = np.stack([np.arange(5), np.arange(5) + 1], 1)
    np.savez(tmp_path / "log.npz", poses=rel, pairs=pairs, valid=np.ones(5, bool),
             note=np.array("run 3"))
    log = load_pose_log(tmp_path / "log.npz")
    want = load_pose_log({"poses": rel, "pairs": pairs, "valid": np.ones(5, bool)})
    assert torch.equal(log.relative, want.relative) and torch.equal(log.pairs, want.pairs)
    assert log.present.tolist() == [True] * 5 and log.source == str(tmp_path / "log.npz")
    assert log.relative[:, 0, 3].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])


def test_a_pose_npz_member_that_is_not_an_array_is_an_input_error(tmp_path):
    with zipfile.ZipFile(tmp_path / "log.npz", "w") as z:
        z.writestr("poses.npy", b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(InputError, match="member 'poses.npy' is not a readable NumPy .npy"):
        load_pose_log(tmp_path / "log.npz")
    src = _npz_declaring(tmp_path / "short.npz", {"poses": ((20, 4, 4), "<f8")})
    with pytest.raises(InputError, match=r"an array cannot be read \(EOF: reading array data"):
        load_pose_log(src)  # before: "holds an object array", which it does not
