"""Scoring's float32 products ignore the caller's float32 matmul / convolution precision.

Training code sets ``torch.set_float32_matmul_precision("high")`` (TF32 on CUDA) or "medium"
(bfloat16 on this CPU's oneDNN: a float32 ``bmm`` then differs by ~0.1), or the per-backend
``fp32_precision`` switches of torch >= 2.9. Scoring used to follow them: the background GE of a
clean clip moved by 0.003 px on the CPU under "medium" (0.003 -> 0.072 px under emulated TF32).
Every scoring entry point now runs its float32 matmuls and convolutions in full float32 and puts
the caller's settings back exactly afterwards (also after an exception, also when nested), with
no warning."""
from __future__ import annotations

import warnings
from typing import Callable, Dict

import pytest
import torch

from geocon_torch._precision import autocast_off, scoring_precision
from geocon_torch.features.sift_scale_space import _cudnn_tf32, gaussian_pyramid
from geocon_torch.geometry import ransac_fundamental, ransac_homography
from geocon_torch.rewards import geometric_reward
from geocon_torch.synth import grounded_clip

NEW_API = hasattr(torch._C, "_get_fp32_precision_getter")
needs_new_api = pytest.mark.skipif(not NEW_API, reason="torch without per-backend fp32_precision")
#: every (backend, op) of the per-backend API
KEYS = [("generic", "all"), ("cuda", "all"), ("cuda", "matmul"), ("cuda", "conv"),
        ("cuda", "rnn"), ("mkldnn", "all"), ("mkldnn", "matmul"), ("mkldnn", "conv"),
        ("mkldnn", "rnn")]


def _read(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except RuntimeError:  # torch refuses a legacy query in a mixed legacy / new state
        return "raises"


def _state() -> Dict[str, object]:
    """Everything a caller can read back: the legacy switches and each per-backend value."""
    s: Dict[str, object] = {
        "matmul_precision": _read(torch.get_float32_matmul_precision),
        "cuda.matmul.allow_tf32": _read(lambda: torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": _read(lambda: torch.backends.cudnn.allow_tf32)}
    if NEW_API:
        s.update({f"{b}.{o}": torch._C._get_fp32_precision_getter(b, o) for b, o in KEYS})
    return s


def _reset() -> None:
    """torch's start-up values (highest; cuDNN TF32 on, here held by conv / rnn themselves:
    the start-up state as such cannot be set back, see the last test; the rest inherited)."""
    if NEW_API:
        for b in ("generic", "cuda", "mkldnn"):
            torch._C._set_fp32_precision_setter(b, "all", "none")
    torch.set_float32_matmul_precision("highest")
    torch._C._set_cudnn_allow_tf32(True)  # conv / rnn then hold TF32 themselves
    if NEW_API:
        for b, o in (("cuda", "matmul"), ("mkldnn", "matmul"), ("mkldnn", "conv"),
                     ("mkldnn", "rnn")):
            torch._C._set_fp32_precision_setter(b, o, "none")


@pytest.fixture(autouse=True)
def caller_precision():
    """Each test starts from and leaves torch's start-up precision values."""
    _reset()
    try:
        yield
    finally:
        _reset()


def _medium() -> None:
    torch.set_float32_matmul_precision("medium")


def _set(backend: str, op: str, value: str) -> Callable[[], None]:
    return lambda: torch._C._set_fp32_precision_setter(backend, op, value)


def _attr(obj: object, name: str, value: object) -> Callable[[], None]:
    return lambda: setattr(obj, name, value)


#: what training code sets (the legacy switches and the per-backend ones, mixed states too)
SETUPS = {
    "startup": lambda: None,
    "legacy-high": lambda: torch.set_float32_matmul_precision("high"),
    "legacy-medium": _medium,
    "cublas-allow-tf32": _attr(torch.backends.cuda.matmul, "allow_tf32", True),
    "cudnn-tf32-off": _attr(torch.backends.cudnn, "allow_tf32", False),
}
NEW_SETUPS = {
    "generic-tf32": _set("generic", "all", "tf32"),
    "generic-bf16": _set("generic", "all", "bf16"),
    "cuda-all-tf32": _set("cuda", "all", "tf32"),
    "cuda-matmul-tf32-only": _set("cuda", "matmul", "tf32"),  # legacy getter then raises
    "cudnn-conv-ieee-only": _set("cuda", "conv", "ieee"),  # cudnn.allow_tf32 then raises
    "mkldnn-bf16": lambda: (_set("mkldnn", "matmul", "bf16")(), _set("mkldnn", "conv", "bf16")()),
}
ALL_SETUPS = {**SETUPS, **({} if not NEW_API else NEW_SETUPS)}
#: what the caller may do next: the state they then see must not depend on a scoring call
FOLLOW_UPS = {"nothing": lambda: None, "generic-none": _set("generic", "all", "none"),
              "generic-ieee": _set("generic", "all", "ieee"),
              "mkldnn-all-bf16": _set("mkldnn", "all", "bf16")} if NEW_API else {
                  "nothing": lambda: None}


FULL_INSIDE = {"matmul_precision": "highest", "cuda.matmul.allow_tf32": False}


def _assert_full(inside: Dict[str, object]) -> None:
    assert {k: inside[k] for k in FULL_INSIDE} == FULL_INSIDE
    if NEW_API:  # "none": nothing set anywhere, full float32
        for key in ("cuda.matmul", "cuda.conv", "mkldnn.matmul", "mkldnn.conv"):
            assert inside[key] in ("ieee", "none"), key
        # cuDNN's legacy switch is left alone: it may disagree (torch then raises)
        assert inside["cudnn.allow_tf32"] in (False, "raises")
    else:
        assert inside["cudnn.allow_tf32"] is False


@pytest.fixture(scope="module")
def clip() -> torch.Tensor:
    return grounded_clip("C4", num_frames=3, size=(64, 96), seed=0).frames[None]


@pytest.fixture(scope="module")
def reference(clip) -> dict:
    """The rewards at full float32 (torch's start-up state)."""
    _reset()
    return {kind: geometric_reward(clip, kind=kind) for kind in ("background", "epipolar")}


@pytest.mark.parametrize("kind", ["background", "epipolar"])
def test_reward_ignores_the_caller_float32_matmul_precision(clip, reference, kind):
    torch.set_float32_matmul_precision("medium")  # bfloat16 GEMMs on an AMX / avx512_bf16 CPU
    reward, diag = geometric_reward(clip, kind=kind)
    assert torch.get_float32_matmul_precision() == "medium"
    assert torch.equal(reward, reference[kind][0])
    assert diag.clips[0].raw == reference[kind][1].clips[0].raw


def _points() -> tuple:
    """(2, 200, 2) float32 matches under one homography plus 0.5 px noise."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(2, 200, 2, generator=g) * 100
    H = torch.tensor([[1.02, 0.01, 3.0], [-0.01, 0.98, -2.0], [1e-4, 0.0, 1.0]])
    xh = torch.cat([x1, torch.ones(2, 200, 1)], -1) @ H.T
    return x1, xh[..., :2] / xh[..., 2:] + torch.randn(2, 200, 2, generator=g) * 0.5


def _fits(x1: torch.Tensor, x2: torch.Tensor) -> list:
    h, f = ransac_homography(x1, x2, seed=0), ransac_fundamental(x1, x2, seed=0)
    return [h.model, h.residuals, h.inliers, f.model, f.residuals, f.inliers]


@pytest.mark.parametrize("setup", ["legacy-medium", "legacy-high", "generic-bf16"])
def test_robust_estimators_ignore_the_caller_precision(setup):
    if setup not in ALL_SETUPS:
        pytest.skip("torch without per-backend fp32_precision")
    x1, x2 = _points()
    expected = _fits(x1, x2)
    ALL_SETUPS[setup]()
    before = _state()
    got = _fits(x1, x2)
    assert _state() == before
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


@pytest.mark.parametrize("follow_up", sorted(FOLLOW_UPS))
@pytest.mark.parametrize("setup", sorted(ALL_SETUPS))
def test_caller_state_is_restored_exactly_and_quietly(setup, follow_up):
    """Full float32 inside; afterwards the caller reads back what they had, and what they do
    next (e.g. reset a parent switch the leaves inherited) behaves as if no call happened."""
    ALL_SETUPS[setup]()
    FOLLOW_UPS[follow_up]()
    untouched = _state()
    _reset()
    ALL_SETUPS[setup]()
    before = _state()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inside = scoring_precision(_state)()
    assert [str(w.message) for w in caught] == []
    _assert_full(inside)
    assert _state() == before
    FOLLOW_UPS[follow_up]()
    assert _state() == untouched


def test_restored_after_an_exception_inside():
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    before = _state()
    seen = {}

    @autocast_off  # the historical name: same guard
    def boom() -> None:
        seen.update(_state())
        raise KeyError("inside scoring")

    with pytest.raises(KeyError, match="inside scoring"):
        boom()
    _assert_full(seen)
    assert _state() == before == {**before, "matmul_precision": "high",
                                  "cuda.matmul.allow_tf32": True, "cudnn.allow_tf32": True}


def test_nested_calls_restore_the_outer_state():
    torch.set_float32_matmul_precision("medium")
    before = _state()
    trace = []

    @scoring_precision
    def inner() -> None:
        trace.append(("inner", _state()))

    @scoring_precision
    def outer() -> None:
        trace.append(("outer-before", _state()))
        inner()
        trace.append(("outer-after", _state()))
        x1, x2 = _points()
        ransac_homography(x1, x2, seed=0)  # a real guarded entry point, nested
        trace.append(("outer-end", _state()))

    outer()
    states = [s for _, s in trace]
    for s in states:
        _assert_full(s)
    assert all(s == states[0] for s in states)
    assert _state() == before and before["matmul_precision"] == "medium"


@needs_new_api
def test_pyramid_works_under_the_per_backend_cudnn_switch():
    """The documented new-API switch alone (conv IEEE, RNN still TF32) makes the legacy
    ``cudnn.allow_tf32`` query raise; the pyramid used to read it and crashed."""
    gray = torch.rand(1, 1, 40, 48, generator=torch.Generator().manual_seed(0))
    expected = gaussian_pyramid(gray)
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    before = _state()
    assert before["cudnn.allow_tf32"] == "raises"
    octaves = gaussian_pyramid(gray)
    assert [o.shape for o in octaves] == [(1, 6, 80, 96), (1, 6, 40, 48), (1, 6, 20, 24)]
    assert all(torch.equal(a, b) for a, b in zip(octaves, expected))
    assert _state() == before


def test_pyramid_tf32_knob_inside_a_guard():
    """``PYRAMID_TF32 = True`` (benchmarks/gpu_profile.py) still lets cuDNN use TF32 for the
    pyramid inside a guarded call, and the guard's full precision comes back after it."""
    seen = {}

    @scoring_precision
    def run() -> None:
        with _cudnn_tf32(True):
            seen["tf32"] = _state()
        seen["after"] = _state()

    torch.set_float32_matmul_precision("high")
    before = _state()
    run()
    assert seen["tf32"]["cudnn.allow_tf32"] is True
    assert seen["tf32"]["matmul_precision"] == "highest"
    if NEW_API:
        assert (seen["tf32"]["cuda.conv"], seen["tf32"]["cuda.rnn"]) == ("tf32", "tf32")
    _assert_full(seen["after"])
    assert _state() == before


PRISTINE = """
import torch
from geocon_torch._precision import scoring_precision
get = torch._C._get_fp32_precision_getter
scoring_precision(lambda: None)()  # at start-up cuDNN's TF32 is on and inherits the parents
torch.backends.fp32_precision = "ieee"
print(get("cuda", "conv"), get("cuda", "rnn"))
"""


@needs_new_api
def test_start_up_cudnn_state_still_follows_the_generic_switch():
    """At torch's start-up cuDNN's convolutions are TF32 yet follow a later
    ``torch.backends.fp32_precision``; no API sets that state back once a convolution value
    was set, so the guard pins through ``cudnn.fp32_precision`` ("cuda", "all") instead.
    A fresh interpreter: this process's start-up state is gone after the first test."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PRISTINE], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split() == ["ieee", "ieee"]  # set explicitly, they would stay "tf32"


def test_overlapping_calls_in_two_threads_keep_full_precision_and_restore():
    """Thread A enters, B enters while A is inside, A leaves while B is inside: B must keep
    full precision until it leaves (A used to put the caller's "medium" back under B's feet),
    and the caller's state comes back once both have left."""
    import threading

    _medium()
    before = _state()
    a_inside, b_inside, a_left = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    @scoring_precision
    def first() -> None:
        a_inside.set()
        assert b_inside.wait(10)

    @scoring_precision
    def second() -> None:
        b_inside.set()
        assert a_left.wait(10)
        seen["b_after_a_left"] = torch.get_float32_matmul_precision()

    def run_a() -> None:
        first()
        a_left.set()

    def run_b() -> None:
        assert a_inside.wait(10)
        second()

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"b_after_a_left": "highest"}
    assert _state() == before and torch.get_float32_matmul_precision() == "medium"
