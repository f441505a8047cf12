"""The instrumented dispatcher: validation, path selection, events, containers, shortcuts."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import nvfp4_kernels
import pytest
import torch
from nvfp4_harness.model import DeviceCaps, PathNotAllowed
from nvfp4_harness.nvfp4.shapes import FUSED_FULL_POLICY, LARGE_LAYERS_POLICY, NO_WGMMA_POLICY
from nvfp4_harness.nvfp4.verify import compare_bitwise
from nvfp4_kernels import nvfp4, reference
from nvfp4_kernels.model import MODEL, Policy, Problem, select_path

GUARD_KEYS = {f"{p.name}.{g.name}" for p in MODEL.paths for g in p.guards}

pytestmark = pytest.mark.dispatch


def _weights(n=32, k=64, block_size=16, seed=0):
    rng = np.random.default_rng(seed)
    return nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), block_size)


def _acts(m, k, dtype=ml_dtypes.bfloat16, seed=1):
    return np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32).astype(dtype)


@pytest.fixture
def events():
    seen: list[nvfp4_kernels.DispatchEvent] = []
    nvfp4_kernels.add_listener(seen.append)
    yield seen
    nvfp4_kernels.remove_listener(seen.append)


GEMV_ON = Policy(gemv_max_m=8)  # the default's GEMV range, spelled out
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)
FUSED_256 = FUSED_FULL_POLICY  # fused_mma's own limit (M <= 256), fused_wgmma off
NO_WGMMA = NO_WGMMA_POLICY  # fused_wgmma off: fused_mma keeps its default range (M <= 128)


# Expected paths are the table of docs/paths.md read by hand for each shape and policy.
@pytest.mark.parametrize("m,k,block_size,policy,path", [
    (1, 64, 16, GEMV_ON, "gemv"), (8, 64, 16, GEMV_ON, "gemv"), (9, 64, 16, GEMV_ON, "prefill_vec8"),
    (1, 64, 16, None, "gemv"),              # default policy: decode on a small layer takes the GEMV
    (1, 64, 16, LARGE, "prefill_vec8"),     # layer too large for the GEMV, and K % 128 != 0 refuses fused
    (1, 128, 16, LARGE, "fused_mma"),       # layer too large for the GEMV: decode goes fused
    (4, 40, 16, GEMV_ON, "prefill_vec8"),   # K % 32 != 0 with M <= 8: prefill
    (4, 64, 32, GEMV_ON, "prefill_vec8"),   # block size != 16: no gemv
    (4, 64, 6, None, "prefill_vec8"),       # even block size crossing chunks
    (4, 64, 7, None, "prefill_scalar"),     # odd block size
    (16, 36, 16, None, "prefill_scalar"),   # K % 8 == 4
    (16, 70, 14, None, "prefill_scalar"),   # K % 8 == 6
    (1, 128, 16, GEMV_ON, "gemv"),          # the fused guards hold too, but the GEMV comes first
    (9, 128, 16, GEMV_ON, "fused_mma"),     # past the GEMV, K % 128 == 0, block 16
    (32, 128, 16, None, "fused_mma"),       # the last M before wgmma_min_m (33): fused_mma
    (33, 128, 16, None, "fused_wgmma"),     # wgmma_min_m: fused_wgmma comes before fused_mma
    (32, 128, 16, Policy(wgmma_min_m=32), "fused_wgmma"),  # its range starts where the policy says
    (64, 128, 16, Policy(wgmma_min_m=65), "fused_mma"),  # and no earlier
    (128, 128, 16, NO_WGMMA, "fused_mma"),  # fused_wgmma off: the last M fused_mma takes by default
    (129, 128, 16, NO_WGMMA, "prefill_vec8"),  # and past it, prefill
    (129, 128, 16, None, "fused_wgmma"),    # M past the default fused_max_m: the wgmma path
    (129, 128, 16, Policy(wgmma_max_m=128), "prefill_vec8"),  # and past wgmma_max_m too
    (256, 256, 16, FUSED_256, "fused_mma"),  # the last M the fused kernel takes
    (257, 128, 16, FUSED_256, "prefill_vec8"),  # M past fused_max_m = 256
    (16, 128, 32, None, "prefill_vec8"),    # block size != 16: no fused path
])
def test_path_selection_follows_the_guards(events, m, k, block_size, policy, path):
    packed, scales, g = _weights(k=k, block_size=block_size)
    nvfp4_kernels.nvfp4_matmul(_acts(m, k), packed, scales, g, block_size, policy=policy)
    event = events[-1]
    assert event.path == path and event.op == "matmul" and event.backend == "cpu"
    p = event.problem
    assert (p.m, p.n, p.k, p.block_size) == (m, 32, k, block_size)
    assert {o.key for o in event.outcomes} == GUARD_KEYS  # every guard evaluated


def test_event_reason_names_the_failed_guards(events):
    packed, scales, g = _weights(k=70, block_size=7)
    nvfp4_kernels.nvfp4_matmul(_acts(2, 70), packed, scales, g, 7, policy=GEMV_ON)  # M = 2 in the GEMV's range
    reason = events[-1].reason
    assert "gemv (" in reason and "k_mod_32: K=70" in reason and "block_size_even: block_size=7" in reason
    outcomes = {o.key: o.passed for o in events[-1].outcomes}
    assert outcomes["gemv.m_in_range"] and not outcomes["prefill_vec8.k_mod_8"]


def test_native_fp4_is_unreachable_on_cpu_and_hopper_and_taken_on_simulated_blackwell():
    problem = Problem("matmul", 64, 64, 64, 16, "bfloat16", "cuda")
    assert select_path(problem, DeviceCaps.cpu()).path == "prefill_vec8"
    assert select_path(problem, DeviceCaps.simulated_gpu(9, 0)).path == "prefill_vec8"
    assert select_path(problem, DeviceCaps.simulated_gpu(12, 0)).path == "native_fp4"
    assert select_path(problem, DeviceCaps.simulated_gpu(12, 0), Policy(native_fp4_enabled=False)).path \
        == "prefill_vec8"
    assert "sm_120" in nvfp4_kernels.MODEL.path("native_fp4").unreachable_reason(DeviceCaps.cpu())
    assert "sm_90" in nvfp4_kernels.MODEL.path("native_fp4").unreachable_reason(DeviceCaps.simulated_gpu(9, 0))
    assert nvfp4_kernels.MODEL.path("native_fp4").unreachable_reason(DeviceCaps.simulated_gpu(12, 0)) is None

def test_fused_wgmma_needs_hopper_or_the_cpu_backend_and_only_other_gpus_can_fail_its_arch_guard():
    problem = Problem("matmul", 200, 64, 256, 16, "bfloat16", "cuda")
    assert select_path(problem, DeviceCaps.simulated_gpu(9, 0)).path == "fused_wgmma"
    for major, minor in ((8, 0), (8, 9), (10, 0), (12, 0)):
        chosen = select_path(problem, DeviceCaps.simulated_gpu(major, minor), Policy(native_fp4_enabled=False))
        assert chosen.path == "prefill_vec8", (major, minor)
        assert {o.key: o.passed for o in chosen.outcomes}["fused_wgmma.arch_sm90"] is False
    # below M = 129 the other GPUs keep fused_mma, which Hopper gives fused_wgmma from wgmma_min_m on
    medium = Problem("matmul", 100, 64, 256, 16, "bfloat16", "cuda")
    assert select_path(medium, DeviceCaps.simulated_gpu(9, 0)).path == "fused_wgmma"
    for major, minor in ((8, 0), (8, 9)):
        assert select_path(medium, DeviceCaps.simulated_gpu(major, minor)).path == "fused_mma", (major, minor)
    on_cpu = Problem("matmul", 200, 64, 256, 16, "bfloat16", "cpu")
    assert select_path(on_cpu, DeviceCaps.cpu()).path == "fused_wgmma"
    sides = nvfp4_kernels.MODEL.unreachable_sides
    assert "CPU backend" in sides(DeviceCaps.cpu())["fused_wgmma.arch_sm90=false"]
    assert "sm_90" in sides(DeviceCaps.simulated_gpu(9, 0))["fused_wgmma.arch_sm90=false"]
    # on another GPU the path itself is unreachable (its True side cannot occur), with the reason
    assert "sm_90a" in nvfp4_kernels.MODEL.path("fused_wgmma").unreachable_reason(DeviceCaps.simulated_gpu(8, 0))
    assert nvfp4_kernels.MODEL.path("fused_wgmma").unreachable_reason(DeviceCaps.cpu()) is None
    assert nvfp4_kernels.MODEL.path("fused_wgmma").unreachable_reason(DeviceCaps.simulated_gpu(9, 0)) is None
    assert not any(key.startswith("fused_wgmma.") and key.endswith("=true")
                   for device in (DeviceCaps.cpu(), DeviceCaps.simulated_gpu(9, 0)) for key in sides(device))



def test_gemv_max_m_policy_moves_the_threshold(events):
    packed, scales, g = _weights()
    nvfp4_kernels.nvfp4_matmul(_acts(4, 64), packed, scales, g, policy=Policy(gemv_max_m=2))
    assert events[-1].path == "prefill_vec8"
    nvfp4_kernels.nvfp4_matmul(_acts(6, 64), packed, scales, g, policy=Policy(gemv_max_m=8))
    assert events[-1].path == "gemv"
    nvfp4_kernels.nvfp4_matmul(_acts(6, 64), packed, scales, g, policy=Policy(gemv_max_m=5))
    assert events[-1].path == "prefill_vec8"


def test_the_fused_ranges_of_the_policy_move_the_thresholds(events):
    packed, scales, g = _weights(k=128)
    nvfp4_kernels.nvfp4_matmul(_acts(32, 128), packed, scales, g, policy=Policy(fused_max_m=16))
    assert events[-1].path == "prefill_vec8"  # past fused_mma's range and below fused_wgmma's
    nvfp4_kernels.nvfp4_matmul(_acts(32, 128), packed, scales, g, policy=Policy(fused_max_m=16, wgmma_min_m=17))
    assert events[-1].path == "fused_wgmma"
    nvfp4_kernels.nvfp4_matmul(_acts(32, 128), packed, scales, g, policy=Policy(fused_max_m=16, wgmma_min_m=17,
                                                                                 wgmma_max_m=31))
    assert events[-1].path == "prefill_vec8"
    nvfp4_kernels.nvfp4_matmul(_acts(100, 128), packed, scales, g, policy=Policy(wgmma_min_m=101))
    assert events[-1].path == "fused_mma"
    nvfp4_kernels.nvfp4_matmul(_acts(101, 128), packed, scales, g, policy=Policy(wgmma_min_m=101))
    assert events[-1].path == "fused_wgmma"
    nvfp4_kernels.nvfp4_matmul(_acts(100, 128), packed, scales, g, policy=Policy(fused_max_m=99, wgmma_min_m=101))
    assert events[-1].path == "prefill_vec8"


def test_forced_path_and_its_guards(events):
    packed, scales, g = _weights()
    nvfp4_kernels.nvfp4_matmul(_acts(2, 64), packed, scales, g, policy=Policy(force_path="prefill_scalar"))
    assert events[-1].path == "prefill_scalar" and events[-1].forced and "forced" in events[-1].reason
    with pytest.raises(PathNotAllowed, match=r"gemv.m_in_range \(1 <= M <= policy.gemv_max_m\) is false: M=20"):
        nvfp4_kernels.nvfp4_matmul(_acts(20, 64), packed, scales, g, policy=Policy(force_path="gemv"))
    with pytest.raises(PathNotAllowed, match="cannot take"):
        nvfp4_kernels.dequantize(packed, scales, g, policy=Policy(force_path="gemv"))
    with pytest.raises(ValueError, match=r"force_path=...\) must be one of"):
        Policy(force_path="fast")


def test_policy_scope_sets_the_default_policy(events):
    packed, scales, g = _weights()
    with nvfp4_kernels.policy_scope(Policy(force_path="prefill_scalar")):
        nvfp4_kernels.nvfp4_matmul(_acts(16, 64), packed, scales, g)
        assert nvfp4_kernels.current_policy().force_path == "prefill_scalar"
    nvfp4_kernels.nvfp4_matmul(_acts(16, 64), packed, scales, g)
    assert [e.path for e in events[-2:]] == ["prefill_scalar", "prefill_vec8"]


def test_numpy_in_numpy_out_and_torch_in_torch_out_give_the_same_bits():
    packed, scales, g = _weights()
    a = _acts(3, 64, np.float16)
    y_np = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)
    y_t = nvfp4_kernels.nvfp4_matmul(torch.from_numpy(a), torch.from_numpy(packed), torch.from_numpy(scales),
                               torch.tensor(g))
    assert isinstance(y_np, np.ndarray) and isinstance(y_t, torch.Tensor)
    assert y_t.dtype == torch.float16 and compare_bitwise(y_np, y_t)


def test_leading_dimensions_flatten_into_m(events):
    packed, scales, g = _weights()
    a = _acts(6, 64).reshape(2, 3, 64)
    y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)
    assert y.shape == (2, 3, 32) and events[-1].problem.m == 6
    assert compare_bitwise(nvfp4_kernels.nvfp4_matmul(a.reshape(6, 64), packed, scales, g).reshape(2, 3, 32), y)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_gemv_and_prefill_are_close_to_a_float64_reference(dtype):
    packed, scales, g = _weights(n=48, k=256)
    bias = np.random.default_rng(5).standard_normal(48).astype(dtype)
    w = reference.dequantize(packed, scales, g, 16, reference.dtype_name(dtype)).astype(np.float64)
    ulp = 2.0**-10 if dtype == np.float16 else 2.0**-7
    for m, path in ((4, "gemv"), (4, "prefill_vec8"), (4, "prefill_scalar"), (32, "prefill_vec8")):
        a = _acts(m, 256, dtype)
        dot = a.astype(np.float64) @ w.T
        ref = dot + bias.astype(np.float64)
        # a forced path's guards must hold: the GEMV's M range spelled out
        y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, 16, bias, policy=Policy(gemv_max_m=8, force_path=path))
        err = np.abs(y.astype(np.float64) - ref)
        # a rounding of the dot (prefill) and of the sum, plus fp32 accumulation error
        bound = ulp * (np.abs(dot) + np.abs(ref)) + 1e-5 * (np.abs(a).astype(np.float64) @ np.abs(w).T) + 1e-6
        assert np.all(err <= bound), f"{path}: max excess {np.max(err - bound)}"


def test_misaligned_b_falls_back_to_scalar_with_the_same_bits(events):
    packed, scales, g = _weights(k=64)
    buffer = np.zeros(packed.size + 1, dtype=np.uint8)
    view = buffer[1:].reshape(packed.shape)
    view[...] = packed
    assert view.flags.c_contiguous and view.ctypes.data % 4
    aligned = nvfp4_kernels.dequantize(packed, scales, g, 16)
    assert events[-1].path == "prefill_vec8"
    shifted = nvfp4_kernels.dequantize(view, scales, g, 16)
    assert events[-1].path == "prefill_scalar" and "misaligned" in events[-1].reason
    assert compare_bitwise(aligned, shifted)


def test_misaligned_output_buffer_falls_back_to_scalar(events):
    packed, scales, g = _weights(k=64)
    storage = np.zeros(32 * 64 + 8, dtype=np.float16)
    out = storage[1:1 + 32 * 64].reshape(32, 64)
    result = nvfp4_kernels.dequantize(packed, scales, g, 16, "float16", out=out)
    assert result is out and events[-1].path == "prefill_scalar" and "output" in events[-1].reason
    assert compare_bitwise(reference.dequantize(packed, scales, g, 16, "float16"), out)


def test_dequantize_events_only_evaluate_dequant_guards(events):
    packed, scales, g = _weights()
    nvfp4_kernels.dequantize(packed, scales, g, 16, "bfloat16")
    assert events[-1].op == "dequantize" and events[-1].problem.m is None
    assert {o.path for o in events[-1].outcomes} == {"prefill_vec8"}


def test_shortcuts_for_empty_problems(events):
    packed, scales, g = _weights()
    y = nvfp4_kernels.nvfp4_matmul(np.zeros((0, 64), ml_dtypes.bfloat16), packed, scales, g)
    assert y.shape == (0, 32) and events[-1].path == "empty" and events[-1].shortcut
    bias = np.arange(32).astype(ml_dtypes.bfloat16)
    empty_b, empty_s = np.zeros((32, 0), np.uint8), np.zeros((32, 0), np.uint8)
    y = nvfp4_kernels.nvfp4_matmul(np.zeros((3, 0), ml_dtypes.bfloat16), empty_b, empty_s, 1.0, 16, bias)
    assert events[-1].path == "bias_only" and compare_bitwise(np.broadcast_to(bias, (3, 32)), y)
    y = nvfp4_kernels.nvfp4_matmul(np.zeros((3, 0), np.float16), empty_b, empty_s, 1.0)
    assert y.dtype == np.float16 and not y.any() and y.shape == (3, 32)


@pytest.mark.parametrize("change,message", [
    (dict(a=np.zeros((2, 64), np.float32)), "A must have dtype float16 or bfloat16"),
    (dict(a=np.zeros((2, 63), ml_dtypes.bfloat16)), "K must be even"),
    (dict(a=np.zeros((2, 66), ml_dtypes.bfloat16)), r"A must have shape \[..., K\] with K = 2 \* B.shape\[1\] = 64"),
    (dict(b=np.zeros((32, 32), np.int8)), "B must have dtype uint8"),
    (dict(b=np.zeros((32, 64), np.uint8)[:, ::2]), "B must be contiguous"),
    (dict(b=np.zeros((32,), np.uint8)), "B must be 2-D"),
    (dict(weight_scale=np.zeros((32, 3), np.uint8)),
     r"weight_scale must have shape \[N, ceil\(K/block_size\)\] = \[32, 4\]"),
    (dict(weight_scale=np.zeros((32, 4), np.float32)), "weight_scale must have dtype uint8"),
    (dict(block_size=0), "block_size must be a positive integer"),
    (dict(block_size=16.0), "block_size must be an int"),
    (dict(weight_scale_2=float("nan")), "weight_scale_2 must be finite"),
    (dict(weight_scale_2=np.ones(2, np.float32)), "exactly one value"),
    (dict(weight_scale_2=np.ones(1, np.float64)), "weight_scale_2 must be float32"),
    (dict(weight_scale_2="1.0"), "weight_scale_2 must be a float"),
    (dict(bias=np.zeros(32, np.float16)), "bias must have dtype bfloat16"),
    (dict(bias=np.zeros(31, ml_dtypes.bfloat16)), r"bias must have shape \[N\] = \[32\]"),
    (dict(backend="gpu"), "backend must be one of"),
    (dict(a=[[1.0]]), "A must be a numpy array or a torch tensor"),
])
def test_invalid_input_is_rejected_with_a_message_that_says_what_to_fix(events, change, message):
    packed, scales, g = _weights()
    args = dict(a=_acts(2, 64), b=packed, weight_scale=scales, weight_scale_2=g, block_size=16, bias=None,
                backend="cpu")
    args.update(change)
    with pytest.raises((ValueError, TypeError), match=message):
        nvfp4_kernels.nvfp4_matmul(args.pop("a"), args.pop("b"), args.pop("weight_scale"),
                             args.pop("weight_scale_2"), args.pop("block_size"), args.pop("bias"),
                             backend=args.pop("backend"))
    assert events == []  # validation happens before anything runs or is announced


def test_mixed_devices_and_wrong_backend_are_rejected():
    packed, scales, g = _weights()
    with pytest.raises(ValueError, match="same dtype as A|one device"):
        nvfp4_kernels.nvfp4_matmul(torch.zeros(2, 64, dtype=torch.bfloat16, device="meta"), packed, scales, g)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="backend='cuda' is unavailable"):
            nvfp4_kernels.nvfp4_matmul(_acts(2, 64), packed, scales, g, backend="cuda")


def test_listeners_are_thread_safe_and_removable():
    packed, scales, g = _weights(k=32)
    seen = []
    lock = threading.Lock()

    def listener(event):
        with lock:
            seen.append(event.path)

    nvfp4_kernels.add_listener(listener)
    threads = [threading.Thread(target=nvfp4_kernels.dequantize, args=(packed, scales, g)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    nvfp4_kernels.remove_listener(listener)
    nvfp4_kernels.dequantize(packed, scales, g)
    assert seen == ["prefill_vec8"] * 8


def test_event_round_trips_through_a_dict(events):
    packed, scales, g = _weights()
    nvfp4_kernels.nvfp4_matmul(_acts(2, 64), packed, scales, g)
    event = events[-1]
    back = nvfp4_kernels.DispatchEvent.from_dict(event.to_dict())
    assert back.to_dict() == event.to_dict()
    assert (back.path, back.outcomes, back.device, back.reason) == (event.path, event.outcomes, event.device,
                                                                   event.reason)
    assert back.problem == event.problem_dict() and back.problem["m"] == 2


def test_every_guard_explains_a_call_in_the_words_of_docs_paths():
    """Each guard's detail (what a FAIL line and an event's reason print) for one problem; the
    strings are the documented wording, so a guard that reports the wrong number is caught."""
    # N = 70: 70 % 32 = 6, where 70 ^ 32, 70 // 32 and 70 - 32 all differ (N = 33 would not tell)
    problem = Problem("matmul", 9, 70, 70, 7, "bfloat16", "cpu", False, "B at address 0x1001 is not 4-byte aligned")
    # fused_max_m = 100, not the default 256: a detail printing the kernel's limit is caught
    policy = Policy(gemv_max_m=8, gemv_max_weights=4000, fused_max_m=100, wgmma_min_m=30, wgmma_max_m=200,
                    native_fp4_enabled=False)
    want = {
        "gemv.m_in_range": "M=9, gemv_max_m=8",
        "gemv.small_layer": "N*K=4900, gemv_max_weights=4000",
        "gemv.block_size_16": "block_size=7",
        "gemv.k_mod_32": "K=70, K % 32 = 6",
        "native_fp4.arch_sm120": "device cpu",
        "native_fp4.enabled": "native_fp4_enabled=False",
        "native_fp4.block_size_16": "block_size=7",
        "native_fp4.k_mod_32": "K=70, K % 32 = 6",
        "native_fp4.n_mod_32": "N=70, N % 32 = 6",
        "fused_mma.m_in_range": "M=9, fused_max_m=100",
        "fused_mma.block_size_16": "block_size=7",
        "fused_mma.k_mod_128": "K=70, K % 128 = 70",
        "fused_wgmma.m_in_range": "M=9, wgmma_min_m=30, wgmma_max_m=200",
        "fused_wgmma.arch_sm90": "backend cpu, device cpu",
        "fused_wgmma.block_size_16": "block_size=7",
        "fused_wgmma.k_mod_128": "K=70, K % 128 = 70",
        "prefill_vec8.k_mod_8": "K=70, K % 8 = 6",
        "prefill_vec8.block_size_even": "block_size=7",
        "prefill_vec8.aligned": "misaligned: B at address 0x1001 is not 4-byte aligned",
    }
    got = {f"{p.name}.{g.name}": g.explain(problem, DeviceCaps.cpu(), policy) for p in MODEL.paths for g in p.guards}
    assert got == want
    # K = 70 < 128 leaves K % 128 = K; K = 300: 300 % 128 = 44, where 300 ^ 128 = 428, 300 // 128 = 2,
    # 300 - 128 = 172 and K itself all differ
    wide = Problem("matmul", 9, 70, 300, 16, "bfloat16", "cpu", True, "buffers aligned")
    assert MODEL.guard("fused_mma", "k_mod_128").explain(wide, DeviceCaps.cpu(), policy) == "K=300, K % 128 = 44"
    aligned = Problem("dequantize", None, 70, 70, 7, "bfloat16", "cpu", True, "B 4-byte and output 16-byte aligned")
    assert MODEL.guard("prefill_vec8", "aligned").explain(aligned, DeviceCaps.cpu(), policy) == \
        "B 4-byte and output 16-byte aligned"
