"""Dispatcher edges the cosmic-ray run over kernels/dispatch.py found untested.

Each test here was written against a surviving mutant of ``scripts/mutation_tool.sh``'s
``dispatcher`` session (docs/mutation-testing.md lists them) and fails with that mutant
applied. They run on the CPU; nothing here is recorded as dispatch coverage.
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import nvfp4_kernels
import pytest
import torch
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4 import oracle
from nvfp4_kernels import dispatch, nvfp4
from nvfp4_kernels.model import DEFAULT_POLICY, MODEL, Policy, Problem


def _weights(n: int = 32, k: int = 64, block_size: int = 16):
    rng = np.random.default_rng(0)
    return nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), block_size)


def _acts(m: int, k: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((m, k)).astype(np.float32).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("bad_b", [np.zeros((32, 32, 1), np.uint8), np.zeros((1, 32, 32), np.uint8)],
                         ids=["trailing-axis", "leading-axis"])
def test_a_three_dimensional_b_is_refused_not_only_a_one_dimensional_one(bad_b: np.ndarray) -> None:
    """B with more than two axes is refused like B with fewer (a ``< 2`` test would let it in);
    the weight-scale check cannot stand in for it: [32, 32, 1] gives the same N and K/2."""
    _, scales, g = _weights()
    with pytest.raises(ValueError, match=r"B must be 2-D \[N, K/2\], got shape \(" + ", ".join(
            str(d) for d in bad_b.shape) + r"\)"):
        nvfp4_kernels.nvfp4_matmul(_acts(2, 64), bad_b, scales, g, backend="cpu")
    with pytest.raises(ValueError, match="B must be 2-D"):
        nvfp4_kernels.dequantize(bad_b, scales, g, backend="cpu")


@pytest.mark.parametrize("shape", [(33,), (32, 1), (1, 32), (2, 32)])
def test_a_bias_longer_or_with_more_axes_than_n_is_refused(shape: tuple[int, ...]) -> None:
    """Every bias shape other than [N] is refused, also those that compare greater than (N,) as
    tuples ((33,), (32, 1)) and would broadcast silently into Y ((1, 32), (2, 32) for M = 2)."""
    packed, scales, g = _weights()
    bias = np.zeros(shape, ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match=r"bias must have shape \[N\] = \[32\], got " + re_list(shape)):
        nvfp4_kernels.nvfp4_matmul(_acts(2, 64), packed, scales, g, 16, bias, backend="cpu")


def re_list(shape: tuple[int, ...]) -> str:
    """``[33]`` / ``[32, 1]`` as a regular expression."""
    return r"\[" + ", ".join(str(d) for d in shape) + r"\]"


@pytest.mark.parametrize("op,m,path", [("matmul", 1, "gemv"), ("matmul", 4, "fused_mma"),
                                       ("matmul", 300, "prefill_vec8"), ("dequantize", None, "prefill_scalar")])
def test_an_event_of_a_cuda_call_names_the_cuda_kernels_and_a_cpu_call_the_reference(
        monkeypatch: pytest.MonkeyPatch, op: str, m: int | None, path: str) -> None:
    """The kernels an event names come from the table of the problem's backend: the CUDA
    kernels for "cuda", the reference functions for "cpu". No CUDA device is needed: the
    announcement is built from a problem and a simulated H200, and caught before the bus, so no
    recorder files it."""
    announced: list = []
    monkeypatch.setattr(dispatch.bus, "listening", lambda: True)
    monkeypatch.setattr(dispatch.bus, "announce", announced.append)
    policy = Policy(gemv_max_m=8, force_path=path)
    for backend, device in (("cuda", DeviceCaps.simulated_gpu(9, 0, "H200")), ("cpu", DeviceCaps.cpu())):
        problem = Problem(op, m, 64, 128, 16, "bfloat16", backend, True, "")
        selection = MODEL.select(problem, device, policy, op=op, force=path)
        dispatch._announce(op, path, problem, device, policy, selection)
    cuda_event, cpu_event = announced
    assert (cuda_event.backend, cuda_event.kernels) == ("cuda", dispatch._CUDA_KERNELS[(op, path)])
    assert (cpu_event.backend, cpu_event.kernels) == ("cpu", dispatch._CPU_KERNELS[(op, path)])
    assert cuda_event.kernels != cpu_event.kernels


def test_scopes_closed_out_of_order_by_two_threads_leave_no_policy_behind() -> None:
    """Thread 1 opens scope A, thread 2 opens scope B, then A closes before B: closing must find
    A below B in the process-wide stack (a search that skips entries would leave A there, and
    every later call without a scope of its own would still be forced down A's path)."""
    a, b = Policy(force_path="prefill_scalar"), Policy(force_path="prefill_vec8")
    a_open, b_open, a_closed = threading.Event(), threading.Event(), threading.Event()
    seen_between: list[Policy] = []

    def first() -> None:
        with nvfp4_kernels.policy_scope(a):
            a_open.set()
            b_open.wait(5)
        a_closed.set()

    def second() -> None:
        a_open.wait(5)
        with nvfp4_kernels.policy_scope(b):
            b_open.set()
            a_closed.wait(5)
            seen_between.append(_policy_of_a_fresh_thread())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert a_closed.is_set() and seen_between == [b]  # A closed while B was open: B governs
    assert dispatch.current_policy() is DEFAULT_POLICY, "a closed scope still governs calls"
    assert _policy_of_a_fresh_thread() is DEFAULT_POLICY


def _policy_of_a_fresh_thread() -> Policy:
    """What a call from a new thread with no scope of its own would be governed by."""
    found: list[Policy] = []
    t = threading.Thread(target=lambda: found.append(dispatch.current_policy()))
    t.start()
    t.join(5)
    return found[0]


def _bits(y: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(y).view(np.uint16)


def test_the_largest_block_size_is_accepted_and_is_one_block_per_row() -> None:
    """block_size = 2**31 - 1 is the last one the kernels can index, so it is accepted (only
    larger ones are refused); with K = 64 it means one scale per row, exactly as block_size = 64
    does, so both calls give the same bits."""
    packed, scales, g = _weights(block_size=64)
    assert scales.shape == (32, 1)
    a = _acts(3, 64)
    one_block = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, 64, backend="cpu")
    largest = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, dispatch.MAX_BLOCK_SIZE, backend="cpu")
    assert dispatch.MAX_BLOCK_SIZE == 2**31 - 1
    assert np.array_equal(_bits(one_block), _bits(largest))
    assert np.array_equal(_bits(nvfp4_kernels.dequantize(packed, scales, g, dispatch.MAX_BLOCK_SIZE)),
                          _bits(nvfp4_kernels.dequantize(packed, scales, g, 64)))


def test_a_one_dimensional_activation_is_one_row_and_returns_a_vector() -> None:
    """A of shape [K] is a problem with M = 1 (no leading dimensions): Y has shape [N] and the
    bits of the same row passed as [1, K]."""
    packed, scales, g = _weights()
    a = _acts(1, 64)
    vector = nvfp4_kernels.nvfp4_matmul(a[0], packed, scales, g, backend="cpu")
    assert vector.shape == (32,)
    assert np.array_equal(_bits(vector), _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, backend="cpu")[0]))


def test_a_zero_dimensional_activation_is_refused_with_the_shape_it_needs() -> None:
    packed, scales, g = _weights()
    with pytest.raises(ValueError, match=r"A must have shape \[..., K\] with K = 2 \* B.shape\[1\] = 64, got \[\]$"):
        nvfp4_kernels.nvfp4_matmul(np.asarray(1.0, ml_dtypes.bfloat16), packed, scales, g, backend="cpu")


@pytest.mark.parametrize("k,odd", [(65, True), (63, True), (66, False), (62, False)])
def test_the_k_must_be_even_hint_appears_exactly_for_an_odd_k(k: int, odd: bool) -> None:
    """The hint is for an odd K only (65 and 63 differ in bit 1, so a hint keyed on ``K & 2``
    or on any non-zero K is told apart); an even wrong K gets the plain shape error."""
    packed, scales, g = _weights()
    with pytest.raises(ValueError, match=r"A must have shape") as raised:
        nvfp4_kernels.nvfp4_matmul(_acts(2, k), packed, scales, g, backend="cpu")
    assert ("K must be even" in str(raised.value)) is odd


def test_bias_may_be_passed_by_keyword_and_the_options_only_by_keyword() -> None:
    """The documented call ``nvfp4_matmul(a, b, s, g, bias=...)`` works; ``backend`` and
    ``policy`` are keyword-only, so a seventh positional argument is refused rather than taken
    as a backend name."""
    packed, scales, g = _weights()
    a, bias = _acts(2, 64), np.linspace(-1, 1, 32).astype(ml_dtypes.bfloat16)
    by_keyword = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, bias=bias, backend="cpu")
    by_position = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, 16, bias, backend="cpu")
    assert np.array_equal(_bits(by_keyword), _bits(by_position))
    with pytest.raises(TypeError):
        nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, 16, bias, "cpu")


def test_backend_cpu_named_explicitly_runs_on_the_cpu_like_auto() -> None:
    """``backend="cpu"`` is accepted whether or not CUDA is available (only ``"cuda"`` asks
    the CUDA backend whether it can run) and gives the bits of ``"auto"`` on host
    arrays."""
    packed, scales, g = _weights()
    a = _acts(5, 64)
    for call in (lambda be: nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, backend=be),
                 lambda be: nvfp4_kernels.dequantize(packed, scales, g, backend=be)):
        assert np.array_equal(_bits(call("cpu")), _bits(call("auto")))


def test_a_scope_opened_twice_with_the_same_policy_survives_its_inner_close() -> None:
    """The same Policy object opened in two nested scopes is two entries of the process-wide
    stack: closing the inner one removes one entry, so a thread started inside the outer scope
    after that is still governed by it."""
    p = Policy(force_path="prefill_scalar")
    with nvfp4_kernels.policy_scope(p):
        with nvfp4_kernels.policy_scope(p):
            assert _policy_of_a_fresh_thread() is p
        assert _policy_of_a_fresh_thread() is p, "closing the inner scope closed the outer one too"
    assert _policy_of_a_fresh_thread() is DEFAULT_POLICY


@pytest.mark.parametrize("g", [np.ones(0, np.float32), torch.ones(0, dtype=torch.float32),
                               torch.ones(2, dtype=torch.float32)], ids=["numpy-empty", "torch-empty", "torch-two"])
def test_a_global_scale_of_other_than_one_value_is_refused(g) -> None:
    """A global scale with no element, or two, is refused with the words of the check (a check
    for "more than one" or "fewer than one" would let the other case through to a reshape error
    that names no argument)."""
    packed, scales, _ = _weights()
    with pytest.raises(ValueError, match="weight_scale_2 must hold exactly one value"):
        nvfp4_kernels.dequantize(packed, scales, g, backend="cpu")


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32])
def test_a_global_scale_array_of_any_other_dtype_than_float32_is_refused(dtype) -> None:
    """float16 too, which casts safely to float32 (a dtype ordering test, ``>``, would accept
    it while refusing float64)."""
    packed, scales, _ = _weights()
    with pytest.raises(TypeError, match="weight_scale_2 must be float32"):
        nvfp4_kernels.dequantize(packed, scales, np.ones(1, dtype), backend="cpu")


def test_an_out_buffer_of_the_wrong_shape_is_refused() -> None:
    packed, scales, g = _weights()
    for shape in [(32, 66), (64, 32), (32 * 64,), (32, 62), (31, 64)]:  # larger and smaller than (32, 64)
        out = np.zeros(shape, ml_dtypes.bfloat16)
        with pytest.raises(ValueError, match=r"out must have shape \[N, K\] = \[32, 64\], got " + re_list(shape)):
            nvfp4_kernels.dequantize(packed, scales, g, out=out, backend="cpu")


def test_a_wrong_k_is_reported_from_the_last_axis_of_a() -> None:
    """The K in the shape error (and the odd-K hint) is A's last axis, whatever A's rank: [65]
    and [2, 4, 65] are both odd-K errors (axis 1 of the second is an even 4)."""
    packed, scales, g = _weights()
    for shape in [(65,), (2, 4, 65)]:
        a = np.zeros(shape, ml_dtypes.bfloat16)
        with pytest.raises(ValueError, match=r"got " + re_list(shape) + r" \(K must be even"):
            nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, backend="cpu")


def test_backend_names_built_at_run_time_work_like_literals() -> None:
    """A backend read from a command line or a config file is an equal string, not the same
    object as the literal in the source: the dispatcher compares names by value."""
    packed, scales, g = _weights()
    a = _acts(3, 64)
    want = _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g))
    for name in ("auto", "cpu"):
        built = "".join(list(name))
        assert built == name and built is not name
        assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, backend=built)), want)
        assert np.array_equal(_bits(nvfp4_kernels.dequantize(packed, scales, g, backend=built)),
                              _bits(nvfp4_kernels.dequantize(packed, scales, g)))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="backend='cuda' is unavailable"):
            nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, backend="".join(list("cuda")))


def test_three_nested_scopes_close_innermost_first_and_leave_none_behind() -> None:
    """With three scopes open, each close finds its own entry at the top of the stack (a search
    that started lower would miss it and leave a closed scope governing later calls)."""
    policies = [Policy(force_path="prefill_scalar"), Policy(force_path="prefill_vec8"), Policy(gemv_max_m=4)]
    with nvfp4_kernels.policy_scope(policies[0]):
        with nvfp4_kernels.policy_scope(policies[1]):
            with nvfp4_kernels.policy_scope(policies[2]):
                assert _policy_of_a_fresh_thread() is policies[2]
            assert _policy_of_a_fresh_thread() is policies[1]
        assert _policy_of_a_fresh_thread() is policies[0]
    assert _policy_of_a_fresh_thread() is DEFAULT_POLICY


@pytest.mark.parametrize("g", [np.ones(1, np.float32), np.asarray(1.0, np.float32)], ids=["[1]", "0-d"])
def test_a_float32_array_global_scale_is_taken_like_the_scalar(g: np.ndarray) -> None:
    """The global scale may be a one-element float32 array (what a checkpoint stores) as well as
    a Python or numpy scalar; the bits are the same."""
    packed, scales, g0 = _weights()
    a = _acts(2, 64)
    as_array = np.asarray(g * np.float32(g0), np.float32).reshape(g.shape)
    assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, as_array, backend="cpu")),
                          _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g0, backend="cpu")))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_a_torch_global_scale_of_another_dtype_is_refused(dtype: torch.dtype) -> None:
    """Also float16 and bfloat16, whose names sort before "torch.float32"."""
    packed, scales, _ = _weights()
    with pytest.raises(TypeError, match="weight_scale_2 must be float32"):
        nvfp4_kernels.dequantize(packed, scales, torch.ones(1, dtype=dtype), backend="cpu")


def test_a_torch_dtype_passed_as_the_global_scale_is_refused_as_not_a_float() -> None:
    """Passing ``torch.float32`` (the dtype) for the value is a plausible slip; it comes from
    the torch package but is no tensor, so it gets the not-a-float message."""
    packed, scales, _ = _weights()
    with pytest.raises(TypeError, match="weight_scale_2 must be a float"):
        nvfp4_kernels.dequantize(packed, scales, torch.float32, backend="cpu")


@pytest.mark.parametrize("dtype", [3, object(), "int8", np.float32])
def test_an_output_dtype_numpy_cannot_read_is_refused_with_the_choices(dtype: object) -> None:
    packed, scales, g = _weights()
    with pytest.raises(ValueError, match=r"dtype must be float16 or bfloat16 \(a name"):
        nvfp4_kernels.dequantize(packed, scales, g, dtype=dtype, backend="cpu")


def test_the_event_records_why_a_call_is_aligned_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The alignment detail an event carries names the misaligned buffer, and says both are
    aligned when they are."""
    announced: list = []
    monkeypatch.setattr(dispatch.bus, "listening", lambda: True)
    monkeypatch.setattr(dispatch.bus, "announce", announced.append)
    packed, scales, g = _weights()
    nvfp4_kernels.dequantize(packed, scales, g, backend="cpu")
    offset = np.zeros(packed.size + 4, np.uint8)
    start = next(i for i in range(4) if (offset[i:].ctypes.data % 4) == 1)
    misaligned = offset[start:start + packed.size].reshape(packed.shape)
    misaligned[...] = packed
    nvfp4_kernels.dequantize(misaligned, scales, g, backend="cpu")
    aligned_event, misaligned_event = announced
    assert aligned_event.problem_dict()["alignment_detail"] == "B 4-byte and output 16-byte aligned"
    assert misaligned_event.problem_dict()["alignment_detail"] == (
        f"B at address {misaligned.ctypes.data:#x} is not 4-byte aligned")


#: the reference entry points a CPU path can run; each path's event must name the ones it ran
ENTRIES = ("gemv", "fused_mma", "dequantize_vec8", "dequantize_scalar", "accumulate_fp32")


def _spy(name: str, real, ran: list[str]):
    """``real``, noting ``name`` in ``ran`` on every call."""
    def wrapper(*args, **kwargs):
        ran.append(name)
        return real(*args, **kwargs)
    return wrapper


@pytest.mark.parametrize("op,path", [("matmul", "gemv"), ("matmul", "fused_mma"), ("matmul", "prefill_vec8"),
                                     ("matmul", "prefill_scalar"), ("dequantize", "prefill_vec8"),
                                     ("dequantize", "prefill_scalar")])
def test_a_cpu_call_runs_the_reference_functions_its_event_names(monkeypatch: pytest.MonkeyPatch, op: str,
                                                                 path: str) -> None:
    """Paths give the same bits (prefill_vec8 and prefill_scalar always; the GEMV and fused_mma
    often), so only spies tell which code ran: the entry points the event names, and no other
    path's. Coverage claims a path was exercised on the strength of this."""
    ran: list[str] = []
    for name in ENTRIES:
        monkeypatch.setattr(dispatch.reference, name, _spy(name, getattr(dispatch.reference, name), ran))
    announced: list = []
    monkeypatch.setattr(dispatch.bus, "listening", lambda: True)
    monkeypatch.setattr(dispatch.bus, "announce", announced.append)
    packed, scales, g = _weights(k=128)
    policy = Policy(gemv_max_m=8, force_path=path)
    if op == "matmul":
        nvfp4_kernels.nvfp4_matmul(_acts(4, 128), packed, scales, g, backend="cpu", policy=policy)
    else:
        nvfp4_kernels.dequantize(packed, scales, g, backend="cpu", policy=policy)
    (event,) = announced
    named = {kernel.removeprefix("reference.") for kernel in event.kernels}
    assert named <= set(ran), f"the event names {sorted(named)}, the call ran {ran}"
    others = {"gemv", "fused_mma", "dequantize_vec8", "dequantize_scalar"} - named
    assert not others & set(ran), f"{path} ran another path's code: {sorted(others & set(ran))}"


@pytest.mark.parametrize("path", ["gemv", "fused_mma", "prefill_vec8", "prefill_scalar"])
def test_a_k_beyond_the_small_integers_runs_every_path(path: str) -> None:
    """K = 1024 (CPython caches the ints up to 256, so a shape check written with ``is`` would
    pass the small K of the other tests and refuse this one) through every path, against a
    float64 product of the oracle's dequantized weights."""
    n, k, m = 8, 1024, 4
    packed, scales, g = _weights(n=n, k=k)
    a = _acts(m, k)
    y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, backend="cpu",
                                   policy=Policy(gemv_max_m=8, force_path=path))
    w = oracle.dequantize_bits(packed, scales, float(g), 16, "bfloat16").view(ml_dtypes.bfloat16)
    want = a.astype(np.float64) @ w.astype(np.float64).T
    assert y.shape == (m, n)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-2, atol=2e-2 * np.abs(want).max())


@pytest.mark.parametrize("block_size", [-16, -1])
def test_a_negative_block_size_is_refused_as_not_positive(block_size: int) -> None:
    packed, scales, g = _weights()
    with pytest.raises(ValueError, match=f"block_size must be a positive integer, got {block_size}$"):
        nvfp4_kernels.dequantize(packed, scales, g, block_size, backend="cpu")


@pytest.mark.parametrize("shape", [(32, 3), (32, 5), (33, 4), (31, 4)])
def test_weight_scales_of_any_other_shape_than_n_by_blocks_are_refused(shape: tuple[int, ...]) -> None:
    """Larger ones too ([32, 5], [33, 4] compare greater than the [32, 4] wanted)."""
    packed, _, g = _weights()
    with pytest.raises(ValueError, match=r"weight_scale must have shape \[N, ceil\(K/block_size\)\] = \[32, 4\]"):
        nvfp4_kernels.dequantize(packed, np.zeros(shape, np.uint8), g, backend="cpu")
