"""The eager fast path for CUDA tensors (nvfp4_kernels.fast) against the full path, and CUDA
graph capture as a supported use.

The fast path must change nothing but the host time: the same bits, the same events, the same
fallbacks (a misaligned view still goes to the scalar kernel) and the same errors. Each check
runs a call with the fast path off (every call validated and selected from scratch) and on.
"""

from __future__ import annotations

import numpy as np
import pytest
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY, NO_WGMMA_POLICY
from nvfp4_harness.nvfp4.verify import compare_bitwise
from nvfp4_kernels import fast, nvfp4
from nvfp4_kernels.model import Policy

pytestmark = [pytest.mark.dispatch, pytest.mark.gpu]

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import nvfp4_kernels  # noqa: E402

#: the default's GEMV range spelled out (M <= 8 on layers of at most 2^24 weights: every layer
#: here), and a policy under which every layer is too large for the GEMV, so decode goes fused;
#: one object each, so the fast path's plans (kept per policy object) are reused from call to call
GEMV_ON = Policy(gemv_max_m=8)
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)
NO_WGMMA = NO_WGMMA_POLICY  # fused_wgmma off, as on a GPU without it: fused_mma keeps M <= 128
#: (name, M, N, K, block size, dtype, with bias, policy (None: the default), the path the dispatcher takes)
CALLS = [
    ("gemv-m1", 1, 256, 512, 16, torch.bfloat16, False, GEMV_ON, "gemv"),
    ("gemv-m8-bias", 8, 200, 320, 16, torch.float16, True, GEMV_ON, "gemv"),
    ("gemv-m1-default", 1, 256, 512, 16, torch.bfloat16, False, None, "gemv"),  # decode on a small layer, default
    ("fused-m1", 1, 256, 512, 16, torch.bfloat16, False, LARGE, "fused_mma"),  # decode, the GEMV refusing the layer
    ("fused-m1-split", 1, 1024, 4096, 16, torch.bfloat16, True, LARGE, "fused_mma"),  # K split, summed in the launch
    ("fused-m8-split", 8, 1024, 4096, 16, torch.bfloat16, False, LARGE, "fused_mma"),  # K split, finalize kernel
    ("fused-m32-bias", 32, 256, 512, 16, torch.bfloat16, True, None, "fused_mma"),  # the default's last M (Hopper)
    ("fused-m128-bias", 128, 256, 512, 16, torch.bfloat16, True, NO_WGMMA, "fused_mma"),  # its last M elsewhere
    ("vec8-m300", 300, 256, 512, 16, torch.bfloat16, True, None, "prefill_vec8"),  # past both fused paths' M
    ("vec8-lead", (4, 16), 128, 256, 32, torch.float16, False, None, "prefill_vec8"),
    ("scalar-bs7", 16, 96, 70, 7, torch.bfloat16, True, None, "prefill_scalar"),
]
#: calls the default policy sends to fused_wgmma (M = 33..256), on a Hopper GPU only (its kernel is
#: built for sm_90a; elsewhere those M take fused_mma or prefill and the rows above cover them)
HOPPER_CALLS = [
    ("wgmma-m33-bias", 33, 256, 512, 16, torch.bfloat16, True, None, "fused_wgmma"),  # its first M, 64-row tile
    ("wgmma-m64-split", 64, 1024, 4096, 16, torch.bfloat16, False, None, "fused_wgmma"),  # fused_mma's K split
    ("wgmma-m65-bias", 65, 256, 512, 16, torch.bfloat16, True, None, "fused_wgmma"),  # the 128-row tile
    ("wgmma-m200-split-bias", 200, 1000, 2048, 16, torch.bfloat16, True, None, "fused_wgmma"),  # K split, finalize
    ("wgmma-m256-one-step", 256, 520, 128, 16, torch.float16, False, None, "fused_wgmma"),  # one K step: no split
    ("wgmma-lead", (3, 50), 384, 1024, 16, torch.bfloat16, False, None, "fused_wgmma"),  # 150 rows in a [3, 50, K]
]
_HOPPER = torch.cuda.get_device_capability(0) == (9, 0)
#: every call, as parameters: the Hopper ones skip elsewhere
PARAMS = [pytest.param(*c, id=c[0]) for c in CALLS] + [
    pytest.param(*c, id=c[0], marks=pytest.mark.skipif(not _HOPPER, reason="fused_wgmma's kernel needs sm_90"))
    for c in HOPPER_CALLS]


def operands(m, n, k, block_size, dtype, with_bias, seed=0):
    rng = np.random.default_rng(seed)
    packed, scales, g = nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), block_size)
    lead = m if isinstance(m, tuple) else (m,)
    a = torch.from_numpy(rng.uniform(-2, 2, lead + (k,)).astype(np.float32)).to("cuda", dtype)
    bias = torch.from_numpy(rng.uniform(-1, 1, n).astype(np.float32)).to("cuda", dtype) if with_bias else None
    return a, torch.from_numpy(packed).cuda(), torch.from_numpy(scales).cuda(), g, bias


def call_recorded(args, block_size, enabled, monkeypatch, policy=None):
    monkeypatch.setattr(fast, "ENABLED", enabled)
    a, b, s, g, bias = args
    with recording("t") as rec:
        y = nvfp4_kernels.nvfp4_matmul(a, b, s, g, block_size, bias, policy=policy)
    return y, [r.event.to_dict() for r in rec.events]


@pytest.mark.parametrize("name,m,n,k,bs,dtype,with_bias,policy,path", PARAMS)
def test_fast_and_full_path_agree_bit_for_bit_and_event_for_event(monkeypatch, name, m, n, k, bs, dtype,
                                                                   with_bias, policy, path):
    args = operands(m, n, k, bs, dtype, with_bias)
    full, full_events = call_recorded(args, bs, False, monkeypatch, policy)
    first, first_events = call_recorded(args, bs, True, monkeypatch, policy)   # builds the plan
    again, again_events = call_recorded(args, bs, True, monkeypatch, policy)   # runs the plan
    assert full_events[0]["path"] == path
    assert full_events == first_events == again_events
    assert compare_bitwise(full, first) and compare_bitwise(full, again)
    assert again.shape == full.shape and again.dtype == full.dtype and again.device == full.device
    if path in fast.ONE_LAUNCH_PATHS:  # the calls above ran a plan of the packed launcher, not the full path
        from nvfp4_kernels import cuda_backend

        plan = fast._plans[(id(args[1]), args[0].shape)]
        assert plan.path == path and plan.kernel == cuda_backend.PACKED_KERNEL[path]


def test_a_host_global_scale_and_a_device_one_give_the_same_bits(monkeypatch):
    a, b, s, g, bias = operands(1, 256, 512, 16, torch.bfloat16, True)
    g_dev = torch.tensor([g], dtype=torch.float32, device="cuda")
    host = nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias)
    device = nvfp4_kernels.nvfp4_matmul(a, b, s, g_dev, 16, bias)
    assert compare_bitwise(host, device)


def test_a_misaligned_view_after_an_aligned_call_still_takes_the_scalar_kernel(monkeypatch):
    a, b, s, g, bias = operands(300, 256, 512, 16, torch.bfloat16, False)  # M = 300: past both fused paths
    aligned, events = call_recorded((a, b, s, g, None), 16, True, monkeypatch)
    assert events[0]["path"] == "prefill_vec8"
    storage = torch.zeros(b.numel() + 4, dtype=torch.uint8, device="cuda")
    view = storage[1:1 + b.numel()].view(b.shape)
    view.copy_(b)
    for _ in range(2):  # the second call meets a plan for the misaligned signature
        shifted, events = call_recorded((a, view, s, g, None), 16, True, monkeypatch)
        assert events[0]["path"] == "prefill_scalar" and "misaligned" in events[0]["reason"]
        assert compare_bitwise(aligned, shifted)


def test_errors_are_the_full_paths_errors(monkeypatch):
    a, b, s, g, bias = operands(1, 256, 512, 16, torch.bfloat16, False)
    messages = []
    for enabled in (False, True, True):
        monkeypatch.setattr(fast, "ENABLED", enabled)
        with pytest.raises(TypeError) as info:
            nvfp4_kernels.nvfp4_matmul(a.float(), b, s, g)
        messages.append(str(info.value))
        with pytest.raises(ValueError, match="must be contiguous"):
            nvfp4_kernels.nvfp4_matmul(a, b.t().contiguous().t(), s, g)
        with pytest.raises(ValueError, match="must be finite"):
            nvfp4_kernels.nvfp4_matmul(a, b, s, float("inf"))
    assert len(set(messages)) == 1 and "A must have dtype float16 or bfloat16" in messages[0]


@pytest.mark.parametrize("name,m,n,k,bs,dtype,with_bias,policy,path", PARAMS)
def test_each_path_captured_in_a_cuda_graph_replays_the_eager_bits(name, m, n, k, bs, dtype, with_bias, policy,
                                                                   path):
    """Capture records one event, at capture time; replays run the kernels without Python and
    record nothing (docs/dispatch-models.md, "CUDA graphs")."""
    a, b, s, g, bias = operands(m, n, k, bs, dtype, with_bias, seed=7)

    def call():
        return nvfp4_kernels.nvfp4_matmul(a, b, s, g, bs, bias, policy=policy)

    eager = call()  # warm-up outside capture: library load, plan, the device copy of g
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with recording("capture") as rec:
        with torch.cuda.graph(graph):
            out = call()
        captured = len(rec.events)
        out.zero_()
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    assert captured == 1 and len(rec.events) == 1 and rec.events[0].event.path == path
    assert compare_bitwise(eager, out)
    a.copy_(torch.flip(a, dims=[-1]))  # new inputs in the captured buffers: the replay follows them
    graph.replay()
    torch.cuda.synchronize()
    assert compare_bitwise(call(), out)


@pytest.mark.parametrize("g", [float("inf"), float("-inf"), float("nan")])
def test_a_non_finite_device_global_scale_gives_the_contracts_ieee_result(g):
    """A global scale in device memory is not read on the host (that would cost a sync per
    call), so it is not refused like a host one: the kernels apply the contract's arithmetic to
    it, and the bits are the CPU reference's for the same value (docs/contract.md)."""
    from nvfp4_kernels import reference

    rng = np.random.default_rng(5)
    packed = rng.integers(0, 256, (16, 64), dtype=np.uint8)
    scales = rng.integers(0, 256, (16, 8), dtype=np.uint8)
    g_dev = torch.tensor([g], dtype=torch.float32, device="cuda")
    got = nvfp4_kernels.dequantize(torch.from_numpy(packed).cuda(), torch.from_numpy(scales).cuda(), g_dev, 16,
                                   "bfloat16")
    want = reference.dequantize(packed, scales, np.float32(g), 16, "bfloat16")
    assert np.array_equal(got.view(torch.int16).cpu().numpy().view(np.uint16), want.view(np.uint16))


def test_a_plan_announces_one_event_object_and_a_recorder_counts_every_call(monkeypatch):
    """The fast path builds a plan's event once; the recorder counts its repeats without
    re-checking them, and the totals are those of the calls made."""
    monkeypatch.setattr(fast, "ENABLED", True)
    a, b, s, g, bias = operands(1, 256, 512, 16, torch.bfloat16, True, seed=5)
    with recording("t") as rec:
        for _ in range(7):
            nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias)
    events = [r.event for r in rec.events]
    assert len(events) == 7 and all(e is events[1] for e in events[1:])
    op = rec.coverage().operator("nvfp4")
    assert op.paths["gemv"].hits == 7 and op.paths["gemv"].tests["t"] == 7  # M = 1 on a small layer
    assert len(rec) == 7


@pytest.mark.parametrize("change", ["resize_", "unsqueeze_", "copy_"])
def test_weights_changed_in_place_are_validated_again(monkeypatch, change):
    """A plan is found by the weights' identity; an in-place change keeps the object and its
    address, so the plan also checks the version counters: a shrunk ``resize_`` and an
    ``unsqueeze_`` get the full path's errors, an in-place weight update the new weights' bits."""
    monkeypatch.setattr(fast, "ENABLED", True)
    a, b, s, g, bias = operands(1, 256, 512, 16, torch.bfloat16, True, seed=3)
    nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias)
    nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias)  # the plan runs
    if change == "resize_":
        b.resize_(128, 256)  # same storage and address, half the rows
        with pytest.raises(ValueError, match="N"):
            nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias)
    elif change == "unsqueeze_":
        b.unsqueeze_(0)
        with pytest.raises(ValueError, match="2-D"):
            nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias)
    else:
        _, new_b, _, _, _ = operands(1, 256, 512, 16, torch.bfloat16, True, seed=4)
        b.copy_(new_b)
        monkeypatch.setattr(fast, "ENABLED", False)
        want = nvfp4_kernels.nvfp4_matmul(a, new_b, s, g, 16, bias)
        monkeypatch.setattr(fast, "ENABLED", True)
        for _ in range(2):  # the re-made plan, then a call of it
            assert compare_bitwise(nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias), want)


def test_inference_tensors_are_checked_by_shape(monkeypatch):
    """Weights made under ``torch.inference_mode`` keep no version counter; their plan checks
    their shapes instead (addresses and contiguity as for every tensor)."""
    monkeypatch.setattr(fast, "ENABLED", True)
    with torch.inference_mode():
        a, b, s, g, bias = operands(1, 256, 512, 16, torch.bfloat16, False, seed=3)
        first = nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16)
        assert compare_bitwise(nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16), first)
        b.resize_(128, 256)
        with pytest.raises(ValueError, match="N"):
            nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16)


@pytest.mark.parametrize("name,m,n,k,bs,dtype,with_bias,policy,path", PARAMS)
def test_the_ctypes_launch_call_gives_the_extensions_bits(monkeypatch, name, m, n, k, bs, dtype, with_bias, policy,
                                                          path):
    """The fast path's two ways into the library (the C extension where it builds, ctypes where
    it does not: nvfp4_kernels.cuda_backend.launch_call) launch the same kernels."""
    from nvfp4_kernels import cuda_backend

    monkeypatch.setattr(fast, "ENABLED", True)
    args = operands(m, n, k, bs, dtype, with_bias, seed=11)
    results = {}
    for mode in ("extension", "ctypes"):
        monkeypatch.setenv(cuda_backend.LAUNCH_CALL_ENV, mode)
        monkeypatch.setattr(cuda_backend, "_launch_call", None)
        fast._plans.clear()
        assert cuda_backend.launch_call_kind()[0] == mode
        calls = [call_recorded(args, bs, True, monkeypatch, policy) for _ in range(2)]
        assert calls[0][1] == calls[1][1] and calls[0][1][0]["path"] == path
        assert compare_bitwise(calls[0][0], calls[1][0])
        results[mode] = calls[1][0]
    fast._plans.clear()
    assert compare_bitwise(results["extension"], results["ctypes"])


#: (M, policy, path) of calls on 1024 x 4096 whose kernels split K
SPLIT_CALLS = [
    pytest.param(1, LARGE, "fused_mma", id="fused_mma"),  # M = 1 on a layer too large for the GEMV
    pytest.param(200, None, "fused_wgmma", id="fused_wgmma",
                 marks=pytest.mark.skipif(not _HOPPER, reason="fused_wgmma's kernel needs sm_90")),
]


@pytest.mark.parametrize("m,policy,path", SPLIT_CALLS)
def test_split_calls_on_two_streams_each_get_their_own_workspace(monkeypatch, m, policy, path):
    """A plan keeps the split-K workspace of the stream it last ran on; calls alternating between
    two streams (each its own workspace, or the kernels of one would overwrite the other's
    partials) give the bits of calls on one stream."""
    monkeypatch.setattr(fast, "ENABLED", True)
    a, b, s, g, bias = operands(m, 1024, 4096, 16, torch.bfloat16, True, seed=9)  # a split fused call
    with recording("path") as rec:
        want = nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias, policy=policy)
    assert rec.events[-1].event.path == path
    plan = next(p for p in fast._plans.values() if p.b_ref() is b)
    assert plan.workspace_floats > 0
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    outs = []
    for i in range(8):
        with torch.cuda.stream(streams[i % 2]):
            outs.append(nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias, policy=policy))
    torch.cuda.synchronize()
    assert all(compare_bitwise(out, want) for out in outs)


def _kernels_launched(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


@pytest.mark.parametrize("m,launches", ((1, 1), (8, 2), (32, 2)))
def test_a_single_row_split_k_call_is_one_launch(monkeypatch, m, launches):
    """Host time: an eager single-row call whose fused kernel splits K launches that kernel alone
    (the tile's last block sums the splits); more rows keep the finalize kernel after it (measured
    faster there). Either way the bits equal the full path's."""
    from nvfp4_kernels import cuda_backend

    n, k = 1024, 4096
    assert cuda_backend.fused_splits(n, k, m) > 1  # the shape must split K for the check to mean anything
    a, b, s, g, _ = operands(m, n, k, 16, torch.bfloat16, False, seed=m)
    monkeypatch.setattr(fast, "ENABLED", False)
    want = nvfp4_kernels.nvfp4_matmul(a, b, s, g, policy=LARGE)  # the full path
    monkeypatch.setattr(fast, "ENABLED", True)
    nvfp4_kernels.nvfp4_matmul(a, b, s, g, policy=LARGE)  # builds the plan
    got = []
    names = _kernels_launched(lambda: got.append(nvfp4_kernels.nvfp4_matmul(a, b, s, g, policy=LARGE)))
    assert len(names) == launches and "nvfp4_fused_mma_kernel" in names[0], names
    assert launches == 1 or "splitk_finalize" in names[1], names
    assert compare_bitwise(want, got[0])


def test_threads_on_their_own_streams_share_a_plan_and_keep_their_workspaces(monkeypatch):
    """Four threads, each on its own stream, call one plan of a split fused call (last-block sum
    at M = 1, finalize at M = 4) over and over: the plan keeps one stream's split-K buffers at a
    time and a thread must never launch with another stream's, or two kernels would share
    partials (and counters). Every output equals a single-threaded call's bits."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(fast, "ENABLED", True)
    for m in (1, 4):
        a, b, s, g, bias = operands(m, 1024, 4096, 16, torch.bfloat16, True, seed=21 + m)
        want = nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias, policy=LARGE)
        torch.cuda.synchronize()

        def worker(_, a=a, b=b, s=s, g=g, bias=bias):
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.default_stream())
            outs = []
            with torch.cuda.stream(stream):
                for _ in range(100):
                    outs.append(nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias, policy=LARGE))
            stream.synchronize()
            return outs

        with ThreadPoolExecutor(4) as pool:
            results = [out for outs in pool.map(worker, range(4)) for out in outs]
        assert len(results) == 400
        assert all(compare_bitwise(out, want) for out in results), m
