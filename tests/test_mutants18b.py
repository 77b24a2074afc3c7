"""Mutation round 18b: the checkpoint hashing / cache (load_weights_only, loaded_digest,
_check_crc, file_digest, cached_model), the metrics' protocol key by device type under a
(simulated, single-process) sync, and the report / explain fixes of session 29 (escaping,
values told apart from thresholds, the out-of-range box, the timeline axes).

No real weights and no process group: tiny tensors saved in ``tmp_path``, a fake
``dist_sync_fn`` that plays rank 1, and synthetic results from ``helpers.fake_result``."""
from __future__ import annotations

import hashlib
import io
import json
import struct
import warnings
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import fake_result, parallax_gate

from geocon_torch import checkpoints
from geocon_torch.errors import CheckpointError, ConfigError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fresh(monkeypatch):
    """Empty model / load / digest caches for the test (the module's own come back after)."""
    monkeypatch.setattr(checkpoints, "_MODEL_CACHE", {})
    monkeypatch.setattr(checkpoints, "_LOADED", {})


# ------------------------------------------------------------------ checkpoints


def test_a_checkpoint_whose_pickle_is_damaged_is_named_corrupted(tmp_path: Path):
    """The pickle member's bytes flipped: torch.load fails, and the CRC check in the failure
    path names the damage (not the unpickler's complaint)."""
    path = tmp_path / "w.pt"
    torch.save({"w": torch.arange(4.0)}, path)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("data.pkl"))
    n_name, n_extra = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + n_name + n_extra
    data[start + 2:start + info.compress_size - 1] = b"\xff" * (info.compress_size - 3)
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"w\.pt is corrupted \(CRC mismatch in member "
                                              r".*data\.pkl\)"):
        checkpoints.load_weights_only(path, "T")


def test_loaded_digest_is_keyed_by_the_resolved_path(tmp_path: Path, fresh, monkeypatch):
    real = tmp_path / "real.pt"
    torch.save({"w": torch.ones(3)}, real)
    (tmp_path / "link.pt").symlink_to(real)
    monkeypatch.chdir(tmp_path)
    out = checkpoints.load_weights_only(Path("link.pt"), "T")
    assert torch.equal(out["w"], torch.ones(3))
    want = _sha(real.read_bytes())
    assert checkpoints.loaded_digest(real) == want
    assert checkpoints.loaded_digest("link.pt") == want
    assert checkpoints.loaded_digest(tmp_path / "link.pt") == want
    assert checkpoints.loaded_digest(tmp_path / "other.pt") is None


def test_a_file_rewritten_while_its_model_is_built_is_refused_and_cached_by_content(
        tmp_path: Path, fresh):
    """file_digest hashes the old bytes; build() loads new ones: the loaded hash wins (the
    pinned hash is not the model's: ConfigError) and keys the cache (the next call with the
    new file is a hit)."""
    path = tmp_path / "w.pt"
    torch.save({"w": torch.zeros(3)}, path)
    pinned = _sha(path.read_bytes())
    built = []

    def build():
        torch.save({"w": torch.full((3,), 7.0)}, path)  # a trainer writes meanwhile
        built.append(checkpoints.load_weights_only(path, "T"))
        return built[-1]

    with pytest.raises(ConfigError, match="changed during the run") as err:
        checkpoints.cached_model("t18b", path, (1,), build, expect_sha256=pinned)
    assert str(err.value).endswith(f"pinned sha256 {pinned}, the model was built from "
                                   f"{_sha(path.read_bytes())}")
    again = checkpoints.cached_model("t18b", path, (1,), build)
    assert len(built) == 1 and again is built[0] and float(again["w"][0]) == 7.0


def test_no_checkpoint_with_a_pinned_hash_is_no_error(fresh):
    model = checkpoints.cached_model("t18b-none", None, (), object, expect_sha256="ab" * 32)
    assert checkpoints.cached_model("t18b-none", None, (), object) is model


def test_folder_digest_is_name_size_content_in_name_order_links_followed(tmp_path: Path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "d.bin").write_bytes(b"DDDD")
    root = tmp_path / "ckpt"
    (root / "a").mkdir(parents=True)
    files = {"z.bin": b"zz", "b.bin": b"xyz", "a/c.bin": b"12", "ext/d.bin": b"DDDD"}
    for rel in ("z.bin", "b.bin", "a/c.bin"):
        (root / rel).write_bytes(files[rel])
    (root / "ext").symlink_to(other, target_is_directory=True)
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{len(files[rel])}\0".encode() + files[rel])
    assert checkpoints.file_digest(root) == h.hexdigest()
    assert checkpoints.file_digest(root / "b.bin") == _sha(b"xyz")  # a file: its bytes only


def test_dust3r_keys_one_missing_or_unused_weight_is_refused():
    from geocon_torch.gate.dust3r import _check_keys

    with pytest.raises(CheckpointError, match=r"x\.pth lacks 1 weights, e\.g\. \['enc\.w'\]"):
        _check_keys(Path("x.pth"), ["enc.w"], [])
    with pytest.raises(CheckpointError, match=r"holds 1 weights its model does not use"):
        _check_keys(Path("x.pth"), [], ["foo.w"])
    _check_keys(Path("x.pth"), [], [])


def test_raft_prefix_hint_only_when_every_key_shares_one_foreign_prefix():
    from geocon_torch.flow.raft import _load_strict

    lin = torch.nn.Linear(2, 2)
    one = {"m.weight": torch.zeros(2, 2), "m.bias": torch.zeros(2)}
    with pytest.raises(CheckpointError, match="every key starts with 'm.'"):
        _load_strict(lin, one, "lin", Path("w.pt"))
    two = {"p.weight": torch.zeros(2, 2), "q.bias": torch.zeros(2)}
    with pytest.raises(CheckpointError) as err:
        _load_strict(lin, two, "lin", Path("w.pt"))
    assert "2 missing key(s)" in str(err.value) and "every key starts" not in str(err.value)


# ------------------------------------------------------------------ metrics: protocol key

CFG = {"io": {"long_side": None}, "segment": {"method": "none"}}


def _bg(device):
    from geocon_torch.metrics import BackgroundConsistency

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BackgroundConsistency(config=CFG, scoring_device=device)


def _key(settings: list) -> torch.Tensor:
    text = json.dumps(settings, sort_keys=True, default=str)
    return torch.tensor(list(hashlib.sha256(text.encode()).digest()[:8]), dtype=torch.long)


def _saved(metric) -> dict:
    metric.num_clips += 2
    metric.persistent(True)
    buf = io.BytesIO()
    torch.save(metric.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


@pytest.mark.parametrize("device", ["cuda", "cuda:5", "cuda:63"])
def test_legacy_state_keys_of_any_cuda_spelling_load(device):
    src = _saved(_bg("cuda:1"))
    assert "protocol_key" not in src and "protocol_key_min" not in src
    legacy = dict(src)
    legacy["protocol_key"] = _key([_bg("cuda").config.config_hash(), device])
    dst = _bg("cuda:2")
    dst.persistent(True)
    dst.load_state_dict(legacy)
    assert int(dst.num_clips) == 2
    far = dict(legacy, protocol_key=_key([dst.config.config_hash(), "cuda:64"]))
    with pytest.raises(ConfigError, match="another protocol"):
        _bg("cuda").load_state_dict(far)
    with pytest.raises(ConfigError, match="another protocol"):  # no device: no legacy form
        _bg(None).load_state_dict(legacy)


@pytest.mark.parametrize("settings", ["other-key", "three", "bad-device"])
def test_metadata_settings_must_match_their_key_and_form(settings):
    """Recorded settings are trusted only when they hash to the recorded key, hold
    [config hash, device] and name a device of this type."""
    sd = _saved(_bg("cuda:0"))
    h = _bg("cuda").config.config_hash()
    text = {"other-key": [h, "cuda:0"], "three": [h, "cuda:0", "x"],
            "bad-device": [h, "gpu:0"]}[settings]
    key = _key(["0" * 16, "cuda:0"] if settings == "other-key" else text)
    sd._metadata[""].update(protocol_key=bytes(key.tolist()).hex(),
                            protocol=json.dumps(text, sort_keys=True))
    dst = _bg("cuda:1")
    dst.persistent(True)
    with pytest.raises(ConfigError, match="another protocol"):
        dst.load_state_dict(sd)
    assert int(dst.num_clips) == 0


def test_a_loaded_min_key_never_replaces_the_metrics_own():
    src = _saved(_bg("cuda:0"))
    dst = _bg("cuda:0")
    dst.persistent(True)
    dst.load_state_dict({**src, "protocol_key_min": torch.zeros(8, dtype=torch.long)})
    assert torch.equal(dst.protocol_key_min, dst.protocol_key) and int(dst.num_clips) == 2


def _rank1(a, b):
    """A ``dist_sync_fn`` for ``a`` on rank 0 of 2, rank 1 holding ``b``: its protocol keys
    and settings text are ``b``'s, every other state a copy of ``a``'s."""
    def gather(t, group=None):
        if t.dtype == torch.uint8:  # the settings' text
            return [t, torch.tensor(list(b._protocol.encode()), dtype=torch.uint8)]
        if t.shape == (8,) and t.dtype == torch.long and torch.equal(t, a.protocol_key):
            return [t, b.protocol_key.clone()]
        return [t, t.clone()]
    return gather


def _fg(metric):
    g = torch.Generator().manual_seed(0)
    masks = torch.zeros(2, 2, 32, 32, dtype=torch.bool)
    masks[:, 0, 2:20, 2:20] = True
    metric.update(torch.randn(2, 2, 32, 32, generator=g) * 3, masks)
    return metric


def test_ranks_of_other_settings_raise_at_the_sync_and_keep_local_states():
    from geocon_torch.metrics import AdaDFRC

    a, b = _fg(AdaDFRC(grid=8, percentile=0.9)), AdaDFRC(grid=4, percentile=0.5)
    count = int(a.count)
    lo, hi = torch.minimum(a.protocol_key, b.protocol_key), torch.maximum(a.protocol_key,
                                                                         b.protocol_key)
    hexes = [bytes(k.tolist()).hex() for k in (lo, hi)]
    with pytest.raises(ConfigError) as err:
        a.sync(dist_sync_fn=_rank1(a, b), distributed_available=lambda: True)
    msg = str(err.value)
    assert f"(protocol keys {hexes[0]} ... {hexes[1]} after" in msg
    assert ("): settings differ (rank 1's vs rank 0's) at [0]: 4 vs 8, [3]: 0.5 vs 0.9; "
            "rank 0's are [8, ") in msg
    assert int(a.count) == count and a._is_synced is False


def test_ranks_of_one_settings_sync_and_keep_their_key():
    from geocon_torch.metrics import AdaDFRC

    a, b = _fg(AdaDFRC(grid=8)), AdaDFRC(grid=8)
    count = int(a.count)
    a.sync(dist_sync_fn=_rank1(a, b), distributed_available=lambda: True)
    assert int(a.count) == 2 * count and torch.equal(a.protocol_key, b.protocol_key)
    a.unsync()
    g0, g1 = _bg("cuda:0"), _bg("cuda:1")
    g0.num_clips += 1
    g0.sync(dist_sync_fn=_rank1(g0, g1), distributed_available=lambda: True)
    assert int(g0.num_clips) == 2 and torch.equal(g0.protocol_key, g0.protocol_key_min)


# ------------------------------------------------------------------ report: text, explain


def test_esc_and_printable_cover_arabic_c1_marks_and_separators():
    from geocon_torch.report.text import esc, printable

    assert esc("نموذج") == "<bdi>نموذج</bdi>" and esc("a<b") == "a&lt;b"
    assert printable("a\x9b2Jb\u2028c\u200fd\u200ee\x7f") == \
        "a\\x9b2Jb\\u2028c\\u200fd\\u200ee\\x7f"


def _explain(res) -> list:
    from geocon_torch.report.explain import explain_result

    return explain_result(res, evidence=False).splitlines()


def test_explain_tells_failing_values_from_the_thresholds_to_17_digits():
    lines = _explain(fake_result("a", ir=0.97 - 1e-10, ge=3.5 + 1e-9))
    assert "  IR 0.9699999999 < report_ir 0.97: FAILS (margin -0.0000000001)" in lines
    assert any(x.startswith("  GE 3.500000001 px > report_ge_px 3.5: FAILS") for x in lines)
    pair = next(x for x in lines if x.startswith("  #0 [0, 1]"))
    assert pair.endswith("IR 0.9699999999 < 0.97; GE 3.500000001 px > 3.5")
    lines = _explain(fake_result("b", ir=0.97, ge=1.0))
    assert "  IR 0.9700 >= report_ir 0.97: ok (margin +0.0000)" in lines


def test_explain_prints_a_configured_threshold_with_every_digit():
    res = fake_result("a", ir=0.99, ge=1.0)
    res["config"] = {"preset": "geocon", "background": {"report_ir": 0.9700001}}
    assert "  IR 0.9900 >= report_ir 0.9700001: ok (margin +0.0200)" in _explain(res)


def test_explain_pair_ge_and_scan_ir_are_told_apart():
    lines = _explain(fake_result("a", ge=3.50004))
    assert any(x.endswith(": GE 3.50004 px > 3.5") for x in lines)
    res = fake_result("b", ir=0.9)
    res["background"]["sensitivity"] = {"tau_h": [1.0, 2.0], "ir_h": [0.9, 0.99996],
                                        "ge_h_px": [1.0, 1.0]}
    assert "  the report gate would pass at tau_H >= 2 px (scan: IR 0.99996, GE 1 px)." \
        in lines + _explain(res)


def test_explain_an_errored_clip_with_a_scored_background_shows_its_gate():
    res = fake_result("a", ir=0.99, ge=1.0)
    res["status"], res["reason"] = "error", "ForegroundError: boom"
    lines = _explain(res)
    assert "Report gate (paper): PASS" in lines
    assert not any(x.startswith("Report gate: n/a") for x in lines)


def test_explain_of_an_unscored_clip_escapes_its_reason():
    res = fake_result("a", status="error")
    res["reason"] = "bad\x1b[2Kfile\nforged"
    text = "\n".join(_explain(res))
    assert "\x1b" not in text
    assert text.splitlines()[-1] == ("Report gate: n/a (clip not scored: error: "
                                     "bad\\x1b[2Kfile\\nforged)")


def test_explain_names_no_adapted_band_when_it_is_the_configured_one():
    res = dict(fake_result("c"), gate=parallax_gate(4.0, 3.0))
    line = next(x for x in _explain(res) if x.startswith("  parallax_magnitude = 4"))
    assert line.endswith("(H if <= 3 ref px, F if >= 16 ref px).")


def test_score_line_of_a_boolean_term_is_compact():
    from geocon_torch.report.text import score_line

    assert score_line({"status": "ok", "score": 0.5, "score_terms": {"flag": True}}) == \
        "Score 0.5 (flag yes) [0-1, higher is better]"


# ------------------------------------------------------------------ report: html, plots


def _flat(clip: str, score, ir) -> dict:
    return {"clip_id": clip, "score": score, "ir": ir}


def test_range_box_bounds_are_inclusive_and_long_lists_are_cut():
    from geocon_torch.report.html import RANGE_NAMED, _range_warning

    assert _range_warning([_flat("one", 1.0, 1.0), _flat("zero", 0.0, 0.0)]) == []
    (box,) = _range_warning([_flat("x", 1.0, 1.25)])
    assert "1 clip has a score or IR outside [0, 1]" in box and "x (IR 1.25)" in box
    odd = [_flat(f"c{i:02d}", 2.0, 0.5) for i in range(RANGE_NAMED + 2)]
    (box,) = _range_warning(odd)
    assert f"{RANGE_NAMED + 2} clips have a score" in box
    assert f"c{RANGE_NAMED - 1:02d} (score 2); and 2 more." in box
    assert f"c{RANGE_NAMED:02d}" not in box


@pytest.fixture
def ylims(monkeypatch):
    from geocon_torch.report import plots

    seen = {}
    orig = plots._save

    def spy(fig, path):
        seen[Path(path).name] = [ax.get_ylim() for ax in fig.axes]
        return orig(fig, path)
    monkeypatch.setattr(plots, "_save", spy)
    return seen


def test_timeline_axes_pad_the_largest_value_and_reach_the_smallest(tmp_path: Path, ylims):
    from geocon_torch.report import plots

    plots.timeline(range(3), [-0.2, 0.9, 1.5], [2.0, 9.0, 50.0], [True, True, False],
                   tmp_path / "a.png")
    ir_lim, ge_lim = ylims["a.png"]
    assert ir_lim == pytest.approx((-0.2, 1.05))  # the invalid pair's 1.5 is not drawn
    assert ge_lim == pytest.approx((0.0, 9.9))
    plots.timeline(range(2), [1.0, 1.0], [0.1, 0.2], [True, True], tmp_path / "b.png",
                   ge_span=2.0)
    assert ylims["b.png"][1] == pytest.approx((0.0, 2.0))

