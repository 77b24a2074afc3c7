"""Files from untrusted hands outside the leaderboard: crafted checkpoints, connection strings
with secrets, deeply nested JSON, calibration files with odd numbers (security audit s20:
L1, L2, L3, L4)."""
from __future__ import annotations

import builtins
import json
import os
import warnings
from pathlib import Path

import pytest
import torch

from geocon_torch.bench.pg_store import mask_url
from geocon_torch.checkpoints import load_weights_only, read_state_dict
from geocon_torch.cli import main
from geocon_torch.errors import CheckpointError, ConfigError
from geocon_torch.io.calibration import DEFAULT_DIR, load_calibration
from geocon_torch.measures.calibration import calibrated_pass

#: deeper than the interpreter's recursion limit (1000): json raises RecursionError
DEEP = "[" * 100_000 + "]" * 100_000
#: words of torch's advice to load unsafely (its UNSAFE_MESSAGE) and to allow-list globals
ADVICE = ("False", "will likely succeed", "trusted source", "arbitrary code", "add_safe_globals",
          "Re-running")


class _Payload:
    """Pickles as ``func(*args)``: what a malicious checkpoint runs on an unsafe load."""

    def __init__(self, func, *args) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def test_malicious_checkpoints_are_refused_without_unsafe_advice(tmp_path: Path):
    """L1: a checkpoint whose pickle calls os.system (a blocked module: torch words that refusal
    without "WeightsUnpickler error:"), eval / exec, or a TorchScript archive is a
    CheckpointError naming the global, without torch's advice to re-run with
    weights_only=False; the payload never runs."""
    marker = tmp_path / "PAYLOAD_RAN"
    payloads = {"system.pt": _Payload(os.system, f"touch {marker}"),
                "eval.pt": _Payload(builtins.eval, f"open({str(marker)!r}, 'w')"),
                "exec.pt": _Payload(builtins.exec, f"open({str(marker)!r}, 'w')")}
    reason = {"system.pt": "Trying to load unsupported GLOBAL posix.system whose module posix "
                           "is blocked." if os.name == "posix" else "is blocked",
              "eval.pt": "Unsupported global: GLOBAL eval was not an allowed global by default.",
              "exec.pt": "Unsupported global: GLOBAL exec was not an allowed global by default.",
              "script.pt": "Cannot use ``weights_only=True`` with TorchScript archives passed "
                           "to ``torch.load``."}
    for name, obj in payloads.items():
        torch.save({"model": obj}, tmp_path / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "looks like a TorchScript archive"
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), str(tmp_path / "script.pt"))
        for name, why in reason.items():
            path = tmp_path / name
            for load in (lambda: load_weights_only(path, "X"),
                         lambda: read_state_dict(path, "X")):
                with pytest.raises(CheckpointError) as info:
                    load()
                msg = str(info.value)
                head = f"X checkpoint {path} could not be read: "
                if name != "script.pt":
                    head += "a safe (weights_only) load refuses it: "
                assert msg.startswith(head) and msg.endswith(why), msg
                assert not [a for a in ADVICE if a in msg], msg
    assert not marker.exists()


@pytest.mark.parametrize("dsn, masked", [
    ("postgresql://u@h/db?sslkey=/k.pem&sslpassword=KEY&sslmode=require",
     "postgresql://u@h/db?sslkey=/k.pem&sslpassword=***&sslmode=require"),
    ("postgresql://u:pw@h/db?password=pw2&SSLPASSWORD=k",
     "postgresql://u:***@h/db?password=***&SSLPASSWORD=***"),
    ("postgresql://u@h/db?%70assword=pw&passfile=/p",
     "postgresql://u@h/db?%70assword=***&passfile=/p"),
    ("host=h sslpassword=KEYPASS dbname=x", "host=h sslpassword=*** dbname=x"),
    (r"host=h password=sec\ ret dbname=x", "host=h password=*** dbname=x"),
    (r"host=h password='a b\' c' sslpassword=k\\ dbname=x",
     "host=h password=*** sslpassword=*** dbname=x"),
    ("host=h password=ab'cd dbname=x", "host=h password=*** dbname=x"),
    ("host=h dbname=x", "host=h dbname=x"),
])
def test_mask_url_hides_key_passphrases_and_escaped_passwords(dsn: str, masked: str):
    """L2: sslpassword is masked as password is (URL query, %-escaped name, any case), and a
    bare key=value password with backslash escapes is masked whole (libpq's grammar): no part
    of a secret is printed."""
    assert mask_url(dsn) == masked


def test_deep_json_config_is_a_one_line_error(tmp_path: Path, capsys):
    """L3: a JSON config (or pose log, prompt file, calibration) nested deeper than the
    recursion limit is the usual "not valid JSON" error: geocon score prints one line and
    exits 2 (was a RecursionError traceback, exit 1)."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"io": ' + DEEP + "}")
    video = tmp_path / "v.mp4"
    video.write_bytes(b"never read")
    assert main(["score", str(video), "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{cfg} is not valid JSON: nested deeper than" in err[0], err
    cal = tmp_path / "cal.json"
    cal.write_text('{"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 2.0}}, "x": ' + DEEP
                   + "}")
    with pytest.raises(ConfigError, match="is not valid JSON: nested deeper than Python's"):
        load_calibration(str(cal))


_GOOD = {"ir_min": 0.9, "ge_norm_max": 2.0}


@pytest.mark.parametrize("text, key, got", [
    ('{"thresholds": {"H": {"ir_min": NaN, "ge_norm_max": 2.0}}}', "thresholds.H.ir_min", "nan"),
    ('{"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 1e999}}}', "thresholds.H.ge_norm_max",
     "inf"),
    (json.dumps({"thresholds": {"F": dict(_GOOD, ge_fine_norm_max="1.0")}}),
     "thresholds.F.ge_fine_norm_max", "'1.0'"),
    (json.dumps({"thresholds": {"H": dict(_GOOD, n_clean=float("-inf"))}}),
     "thresholds.H.n_clean", "-inf"),
    (json.dumps({"thresholds": {"H": _GOOD}, "ref_long_side": "1024px"}), "ref_long_side",
     "'1024px'"),
    (json.dumps({"thresholds": {"H": _GOOD}, "ref_long_side": -1024}), "ref_long_side", "-1024"),
    (json.dumps({"thresholds": {"H": _GOOD}, "ref_long_side": 0}), "ref_long_side", "0"),
    ('{"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 2.0}}, "ref_long_side": NaN}',
     "ref_long_side", "nan"),
    ('{"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 2.0}}, "long_side": 1e999}',
     "long_side", "inf"),
    (json.dumps({"thresholds": {"H": _GOOD}, "long_side": -256}), "long_side", "-256"),
    (json.dumps({"thresholds": {"H": _GOOD}, "long_side": True}), "long_side", "True"),
    ('{"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 2.0}}, "ref_long_side": 1' + "0" * 400
     + "}", "ref_long_side", "1" + "0" * 400),
])
def test_calibration_values_must_be_finite_and_sides_positive(tmp_path: Path, text: str, key: str,
                                                              got: str):
    """L4: a bound, long_side or ref_long_side that is NaN, infinite or text, and a long side
    <= 0, is a ConfigError naming the key (were tracebacks; a negative ref_long_side let every
    GE bound pass)."""
    path = tmp_path / "cal.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_calibration(str(path))
    assert str(info.value).endswith(f"cal.json: {key} must be a finite number"
                                    f"{' > 0' if 'side' in key else ''}, got {got}"), info.value


def test_calibration_nan_outside_the_thresholds_and_good_files(tmp_path: Path):
    """L4: NaN anywhere else in the file is a ConfigError (its content hash cannot be taken);
    a valid file loads with its numbers, and its GE bound still decides; the shipped files keep
    their recorded hashes."""
    path = tmp_path / "cal.json"
    path.write_text('{"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 2.0}}, "rates": [NaN]}')
    with pytest.raises(ConfigError, match="cal.json holds NaN or infinity"):
        load_calibration(str(path))
    path.write_text(json.dumps({"thresholds": {"H": dict(_GOOD, pooled=False)},
                                "ref_long_side": 512, "long_side": 256}))
    cal = load_calibration(str(path))
    assert (cal.ref_long_side, cal.long_side, cal.thresholds) == (512.0, 256, {"H": _GOOD})
    # GE 50 px at a 1024 px long side is 25 px at 512: far above the bound of 2
    assert calibrated_pass(0.95, 50.0, 1024, "H", cal.thresholds, cal.ref_long_side) is False
    assert calibrated_pass(0.95, 1.0, 1024, "H", cal.thresholds, cal.ref_long_side) is True
    for backend in ("opencv-sift", "kornia-sift"):
        recorded = json.loads((DEFAULT_DIR / f"{backend}.json").read_text())["content_hash"]
        assert load_calibration("default", backend).hash == recorded


def test_every_gate_bound_is_named_as_the_calibration_reader_checks_it():
    """io.calibration checks the bounds by their name ending (it sits below measures): every
    bound of ``measures.calibration.BOUNDS`` ends in one of those endings."""
    from geocon_torch.io import calibration as io_cal
    from geocon_torch.measures.calibration import BOUNDS

    assert all(key.endswith(io_cal._BOUND_SUFFIXES) for key, _, _ in BOUNDS)


def test_the_unsafe_advice_pattern_covers_torchs_whole_message():
    """checkpoints strips torch's "re-run with weights_only=False" advice by one pattern: it
    must match this torch's UNSAFE_MESSAGE from its first to its last character."""
    import torch

    from geocon_torch.checkpoints import _UNSAFE

    message = getattr(torch.serialization, "UNSAFE_MESSAGE", None)
    if message is None:
        pytest.skip("this torch has no UNSAFE_MESSAGE")
    assert _UNSAFE.fullmatch(message.strip()) is not None
