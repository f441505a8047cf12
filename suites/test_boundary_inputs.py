"""Inputs that used to fail deep inside a call now get a clear error at the boundary, or a
defined result; a forced policy reaches the threads a scope starts."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import nvfp4_kernels
import pytest
import torch
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.model import InvalidArgument
from nvfp4_kernels import nvfp4, reference
from nvfp4_kernels.model import Policy

pytestmark = pytest.mark.dispatch


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(11)
    return nvfp4.quantize(rng.standard_normal((8, 32)).astype(np.float32), 16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, "bfloat16", np.float16, ml_dtypes.bfloat16])
def test_dequantize_takes_torch_numpy_and_named_dtypes(weights, dtype):
    b, s, g = weights
    out = nvfp4_kernels.dequantize(b, s, g, 16, dtype=dtype)
    name = str(dtype).replace("torch.", "") if not isinstance(dtype, type) else np.dtype(dtype).name
    assert out.dtype.name == name
    assert np.array_equal(out.view(np.uint16), reference.dequantize(b, s, g, 16, name).view(np.uint16))


@pytest.mark.parametrize("a_kind, bias_kind", [("torch", "numpy"), ("numpy", "torch")])
def test_k_zero_with_mixed_containers_returns_the_bias_in_a_s_container(a_kind, bias_kind):
    bias = np.arange(6).astype(np.float16)
    a = np.zeros((3, 0), np.float16)
    a = torch.from_numpy(a) if a_kind == "torch" else a
    bias_in = torch.from_numpy(bias) if bias_kind == "torch" else bias
    y = nvfp4_kernels.nvfp4_matmul(a, np.zeros((6, 0), np.uint8), np.zeros((6, 0), np.uint8), 1.0, 16, bias_in)
    assert type(y) is type(a)
    got = y.numpy() if a_kind == "torch" else y
    assert np.array_equal(got, np.broadcast_to(bias, (3, 6)))


def test_a_big_endian_activation_is_refused_with_the_fix(weights):
    b, s, g = weights
    with pytest.raises(TypeError, match=r"byte order '>'.*newbyteorder\('='\)"):
        nvfp4_kernels.nvfp4_matmul(np.zeros((2, 32), ">f2"), b, s, g)


@pytest.mark.parametrize("block_size", [2**31, 2**63, 2**70])
def test_huge_block_sizes_are_refused_not_overflowed(weights, block_size):
    b, s, g = weights
    with pytest.raises(ValueError, match="block_size must be at most 2147483647"):
        nvfp4_kernels.dequantize(b, s[:, :1], g, block_size)


@pytest.mark.parametrize("kwargs, message", [
    (dict(gemv_max_m="8"), r"gemv_max_m=...\) must be an int, got '8'"),
    (dict(gemv_max_m=1.5), r"gemv_max_m=...\) must be an int, got 1.5"),
    (dict(gemv_max_m=True), r"gemv_max_m=...\) must be an int, got True"),
    (dict(gemv_max_weights="1024"), r"gemv_max_weights=...\) must be an int >= 0 .* or None \(any layer\), got '1024'"),
    (dict(gemv_max_weights=-1), r"gemv_max_weights=...\) must be an int >= 0 .*got -1"),
    (dict(gemv_max_weights=True), r"gemv_max_weights=...\) must be an int >= 0 .*got True"),
    (dict(gemv_max_weights=2.0**24), r"gemv_max_weights=...\) must be an int >= 0 .*got 16777216.0"),
    (dict(fused_max_m="8"), r"fused_max_m=...\) must be an int, got '8'"),
    (dict(fused_max_m=True), r"fused_max_m=...\) must be an int, got True"),
    (dict(fused_max_m=-1), r"fused_max_m=...\) must be in \[0, 256\] .*got -1"),
    (dict(fused_max_m=257), r"fused_max_m=...\) must be in \[0, 256\] .*got 257"),
    (dict(wgmma_min_m="65"), r"wgmma_min_m=...\) must be an int, got '65'"),
    (dict(wgmma_min_m=False), r"wgmma_min_m=...\) must be an int, got False"),
    (dict(wgmma_min_m=0), r"wgmma_min_m=...\) must be in \[1, 256\] .*wgmma_max_m=0 turns the path off.*got 0"),
    (dict(wgmma_min_m=257), r"wgmma_min_m=...\) must be in \[1, 256\] .*got 257"),
    (dict(wgmma_max_m=257), r"wgmma_max_m=...\) must be in \[0, 256\] .*got 257"),
    (dict(native_fp4_enabled="no"), r"native_fp4_enabled=...\) must be True or False, got 'no'"),
    (dict(force_path="fast"), r"force_path=...\) must be one of"),
])
def test_policy_fields_are_type_checked(kwargs, message):
    with pytest.raises(InvalidArgument, match=message):
        Policy(**kwargs)


def test_the_gemv_layer_limit_ends_are_accepted_and_decide_by_n_times_k():
    """0 refuses every layer to the GEMV, None takes any; the limit compares N * K, inclusive."""
    assert Policy(gemv_max_weights=0).gemv_max_m_for(1, 2) == 0
    assert Policy(gemv_max_weights=None).gemv_max_m_for(10**6, 10**6) == 8
    assert Policy(gemv_max_weights=3072).gemv_max_m_for(24, 128) == 8  # 3072 weights: at the limit
    assert Policy(gemv_max_weights=3071).gemv_max_m_for(24, 128) == 0
    assert Policy(gemv_max_m=0).gemv_max_m_for(1, 2) == 0


def test_the_fused_range_ends_are_accepted():
    """0 turns the fused path off; 256 is the largest M the fused kernel's tiles take."""
    assert (Policy(fused_max_m=0).fused_max_m, Policy(fused_max_m=256).fused_max_m) == (0, 256)


def test_a_policy_dict_is_refused_with_the_fix(weights):
    b, s, g = weights
    with pytest.raises(TypeError, match=r"got dict \(write Policy\(\*\*\{\.\.\.\}\)\)"):
        nvfp4_kernels.nvfp4_matmul(np.zeros((2, 32), np.float16), b, s, g, policy={"force_path": "gemv"})


def test_a_read_only_out_is_refused_before_any_work(weights, monkeypatch):
    b, s, g = weights
    out = np.zeros((8, 32), ml_dtypes.bfloat16)
    out.flags.writeable = False
    computed = []
    monkeypatch.setattr(reference, "dequantize_vec8", lambda *a, **k: computed.append(1))
    with pytest.raises(ValueError, match="out is a read-only array"):
        nvfp4_kernels.dequantize(b, s, g, 16, "bfloat16", out=out)
    assert computed == []


@pytest.mark.parametrize("g", [1e39, -3.5e38, np.float64(1e300)])
def test_a_finite_global_scale_beyond_fp32_is_named_as_such(weights, g):
    b, s, _ = weights
    with pytest.raises(ValueError, match=r"beyond the float32 range \(largest finite 3.402823e\+38\)"):
        nvfp4_kernels.dequantize(b, s, g)


@pytest.mark.parametrize("g", [float("inf"), float("nan")])
def test_a_non_finite_host_global_scale_is_refused(weights, g):
    b, s, _ = weights
    with pytest.raises(ValueError, match="must be finite"):
        nvfp4_kernels.dequantize(b, s, g)


def _paths_in_threads(run_in_threads):
    b, s, g = nvfp4.quantize(np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32), 16)
    a = np.random.default_rng(3).standard_normal((16, 64)).astype(np.float16)
    with recording("threads") as rec:
        with nvfp4_kernels.policy_scope(Policy(force_path="prefill_scalar")):
            run_in_threads(lambda: nvfp4_kernels.nvfp4_matmul(a, b, s, g))
        nvfp4_kernels.nvfp4_matmul(a, b, s, g)  # after the scope: the default policy again
    return [(r.event.path, r.event.forced) for r in rec.events]


def test_a_forced_policy_reaches_a_thread_pool_started_in_its_scope():
    def pool(call):
        with ThreadPoolExecutor(max_workers=3) as executor:
            for future in [executor.submit(call) for _ in range(6)]:
                future.result()

    assert _paths_in_threads(pool) == [("prefill_scalar", True)] * 6 + [("prefill_vec8", False)]


def test_a_forced_policy_reaches_a_thread_and_a_threads_own_scope_wins():
    seen = []

    def threads(call):
        def own():
            with nvfp4_kernels.policy_scope(Policy(force_path="prefill_vec8")):
                call()
            seen.append(nvfp4_kernels.current_policy().force_path)

        for target in (call, own):
            worker = threading.Thread(target=target)
            worker.start()
            worker.join()

    assert _paths_in_threads(threads) == [("prefill_scalar", True), ("prefill_vec8", True), ("prefill_vec8", False)]
    assert seen == ["prefill_scalar"], "after its own scope, the thread falls back to the open scope"


def test_gemv_max_m_outside_what_the_kernel_takes_is_refused():
    with pytest.raises(InvalidArgument, match=r"gemv_max_m=...\) must be in \[0, 8\].*got -1"):
        Policy(gemv_max_m=-1)
    with pytest.raises(InvalidArgument, match=r"the decode GEMV kernel takes at most 8 rows of A\), got 9"):
        Policy(gemv_max_m=9)
    assert Policy(gemv_max_m=8).gemv_max_m == 8
    assert Policy(gemv_max_m=0).gemv_max_m == 0


def test_problems_are_hashable_and_equal_whatever_their_alignment_wording():
    """Selections are cached on problems: they must hash, and the addresses in the alignment
    detail (only words for messages) must not make two otherwise equal problems differ."""
    from dataclasses import FrozenInstanceError

    from nvfp4_kernels.model import Problem

    a = Problem("matmul", 9, 32, 64, 16, "float16", "cpu", False, "B at address 0x1001 is not 4-byte aligned")
    b = Problem("matmul", 9, 32, 64, 16, "float16", "cpu", False, "B at address 0x2003 is not 4-byte aligned")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(FrozenInstanceError):
        a.m = 1  # type: ignore[misc]


@pytest.mark.parametrize("sm, native", [(119, False), (120, True), (121, True), (129, True), (130, False)])
def test_native_fp4_is_reachable_exactly_on_sm120_to_sm129(sm, native):
    from nvfp4_harness.model import DeviceCaps
    from nvfp4_kernels.model import MODEL, Problem, select_path

    device = DeviceCaps.simulated_gpu(sm // 10, sm % 10)
    assert (MODEL.path("native_fp4").unreachable_reason(device) is None) == native
    problem = Problem("matmul", 64, 64, 64, 16, "bfloat16", "cuda")
    assert (select_path(problem, device).path == "native_fp4") == native
