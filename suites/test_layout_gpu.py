"""The fused kernels on their registered layout (nvfp4_kernels.layout: the tile-contiguous copy,
which fused_mma and fused_wgmma both read) give the bits they give on the contract's row-major
weights, and the dispatcher hands a kernel a registered weight's copy only
while that copy matches the weight.

The layout only changes where the kernel's copies read a step's bytes and where a word of codes
keeps its sign bits (which the kernel's decode of tiled words reads there, and its multiply path
puts back first), and a tiled launch given the weight's scale-byte range only skips a range test
that every block would pass, so every output must be the same bits as on row-major weights: over row tails
(N not a multiple of 64), M tails, both output types, a bias, forced split counts and both
split-K sums. The row-major outputs are pinned by the fused path's own suites and GPU-keyed
goldens, so equality here carries those checks over.
"""

from __future__ import annotations

import numpy as np
import pytest
from nvfp4_kernels.model import Policy

pytestmark = [pytest.mark.dispatch, pytest.mark.gpu]

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import nvfp4_kernels  # noqa: E402
from nvfp4_kernels import cuda_backend, fast, layout  # noqa: E402

FUSED = Policy(force_path="fused_mma", fused_max_m=256)
#: (N, K): one row, a partial tile, one row past a tile, several tiles with a partial last one
SHAPES = [(1, 128), (63, 256), (65, 384), (200, 1024), (1000, 2048)]
MS = [1, 5, 8, 9, 16, 17, 33, 64, 100, 256]


def _weights(n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    # scale bytes 0.25..3 (the table decode) and a few out-of-range ones (the multiply decode)
    scales = rng.integers(0x28, 0x44, (n, k // 16), dtype=np.uint8)
    scales[::7, ::5] = rng.choice(np.array([0x00, 0x01, 0x7E, 0x80], np.uint8), scales[::7, ::5].shape)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    return packed, torch.from_numpy(scales).cuda(), g


def _bits(x: torch.Tensor) -> np.ndarray:
    return x.view(torch.int16).cpu().numpy()


@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_tiled_weights_give_the_row_major_bits(n: int, k: int, dtype: str) -> None:
    packed, scales, g = _weights(n, k, n + k)
    tiled = layout.tile_weights(packed, scales)
    tdt = getattr(torch, dtype)
    bias = torch.randn(n, device="cuda").to(tdt)
    steps = k // 128
    for m in MS:
        a = torch.randn(m, k, device="cuda").to(tdt)
        for splits in sorted({None, 1, min(2, steps), min(3, steps)}, key=lambda s: s or 0):
            for reduction in ("last_block", "finalize") if splits and splits > 1 else ("auto",):
                outs = []
                for how in (None, tiled):
                    out = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
                    cuda_backend.fused_mma(a, packed, scales, g, bias if m % 2 else None, out, splits=splits,
                                           reduction=reduction, tiled=how)
                    outs.append(_bits(out))
                assert np.array_equal(outs[0], outs[1]), (m, splits, reduction)


@pytest.mark.parametrize("ordinary", [False, True], ids=["mixed-scales", "ordinary-scales"])
def test_the_dispatcher_reads_a_registered_weight_on_both_of_its_paths(monkeypatch: pytest.MonkeyPatch,
                                                                      ordinary: bool) -> None:
    n, k = 1000, 2048
    packed, scales, g = _weights(n, k, 11)
    if ordinary:  # every scale byte ordinary: the registration carries its range to the kernel
        scales = scales.clamp(0x28, 0x44)
    a = torch.randn(3, k, device="cuda").to(torch.bfloat16)
    want = _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED))
    plan = fast._plans[(id(packed), a.shape)]
    assert plan.kernel == cuda_backend.PACKED_KERNEL["fused_mma"] and plan.tiled is None
    layout.register(packed, scales)
    try:
        assert (id(packed), a.shape) not in fast._plans  # registering drops the weight's plans
        assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED)), want)
        plan = fast._plans[(id(packed), a.shape)]
        assert plan.kernel == cuda_backend.FUSED_TILED_KERNEL and plan.tiled is not None
        scale_bytes = layout.scale_byte_range(scales)
        assert (scale_bytes != 0) == ordinary
        assert plan.template[cuda_backend.ARG_SCALE_BYTES] == scale_bytes
        assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED)), want)
        # the full path (no plans) hands the kernel the same copy
        monkeypatch.setattr(fast, "ENABLED", False)
        launched = []
        real = cuda_backend.launch_fused
        monkeypatch.setattr(cuda_backend, "launch_fused",
                            lambda *args, **kw: launched.append((kw.get("tiled", False), kw.get("scale_bytes")))
                            or real(*args, **kw))
        assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED)), want)
        assert launched == [(True, scale_bytes)]
    finally:
        layout.unregister(packed)


def test_a_weight_changed_after_registration_is_read_as_it_is_now() -> None:
    n, k = 200, 1024
    packed, scales, g = _weights(n, k, 12)
    a = torch.randn(8, k, device="cuda").to(torch.bfloat16)
    layout.register(packed, scales)
    try:
        nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED)  # a plan on the tiled copy
        packed[::3].bitwise_xor_(0x5A)  # an in-place update of the weight
        got = _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED))
        assert layout.registered(packed, scales) is None  # the stale copy was dropped
        out = torch.empty(8, n, dtype=torch.bfloat16, device="cuda")
        cuda_backend.fused_mma(a, packed, scales, g, None, out)
        assert np.array_equal(got, _bits(out))
    finally:
        layout.unregister(packed)


def test_a_freed_weight_leaves_no_tiled_copy_behind() -> None:
    """The registry owns a weight's tiled copy and the fast path's plans only refer to it, so
    freeing the weight frees the copy (a second copy of every layer's bytes otherwise)."""
    import gc
    import weakref

    packed, scales, g = _weights(200, 1024, 13)
    a = torch.randn(2, 1024, device="cuda").to(torch.bfloat16)
    layout.register(packed, scales)
    nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=FUSED)
    copy = weakref.ref(layout.registered(packed, scales)[0])
    assert fast._plans[(id(packed), a.shape)].tiled is not None
    del packed
    gc.collect()
    assert copy() is None


#: (dtype, g, lo, hi): weights whose scale bytes all lie in [lo, hi] (both present), so the tiled
#: launch carries that range. Where both ends' s are inside the table's range the kernel skips its
#: per-step range test; where one is not (fp16 s below 2^-13, bf16 s above 2^125, a negative g) it
#: must test every step as before and send those blocks to the multiply decode.
RANGED = [
    ("bfloat16", 0.0123, 0x01, 0x7E),  # the whole ordinary range, in the table: no per-step test
    ("float16", 1.0, 0x30, 0x40),  # s in [0.5, 2]: no per-step test
    ("float16", 0.0123, 0x01, 0x7E),  # small bytes give s < 2^-13: per-step test
    ("float16", 1.0, 0x01, 0x7E),  # both ends outside fp16's table
    ("bfloat16", 2.0 ** 120, 0x01, 0x7E),  # 448 * 2^120 > 2^125: per-step test
    ("bfloat16", -0.0123, 0x01, 0x7E),  # a negative global scale: never the table
]


@pytest.mark.parametrize(("dtype", "g_value", "lo", "hi"), RANGED)
def test_a_launch_with_the_scale_byte_range_gives_the_row_major_bits(dtype: str, g_value: float, lo: int,
                                                                     hi: int) -> None:
    rng = np.random.default_rng(lo + hi)
    tdt = getattr(torch, dtype)
    g = torch.tensor([g_value], dtype=torch.float32, device="cuda")
    for n, k in ((65, 384), (200, 1024)):
        packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
        scales = rng.integers(lo, hi + 1, (n, k // 16), dtype=np.uint8)
        scales[0, 0], scales[-1, -1] = lo, hi
        scales = torch.from_numpy(scales).cuda()
        ranged = layout.tiled_weight(packed, scales)
        assert ranged.scale_bytes == lo | hi << 8
        unranged = (ranged.packed, ranged.scales)
        for m in (1, 9, 17, 64, 256):
            a = torch.randn(m, k, device="cuda").to(tdt)
            for splits in (1, 2):
                outs = []
                for how in (None, unranged, ranged):
                    out = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
                    cuda_backend.fused_mma(a, packed, scales, g, None, out, splits=splits, tiled=how)
                    outs.append(_bits(out))
                assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2]), (n, m, splits)


def test_an_ill_formed_scale_byte_range_is_refused() -> None:
    packed, scales, g = _weights(64, 256, 14)
    tiled = layout.tile_weights(packed, scales)
    a = torch.randn(1, 256, device="cuda").to(torch.bfloat16)
    out = torch.empty(1, 64, dtype=torch.bfloat16, device="cuda")
    for bad in (0x7F01, 0x0102, 0x0100, 1 << 16 | 0x7E01):
        with pytest.raises(ValueError, match="scale_bytes"):
            cuda_backend.fused_mma(a, packed, scales, g, None, out, tiled=(*tiled, bad))
        # the library refuses it too (cudaErrorInvalidValue), for callers that skip the Python checks
        err = cuda_backend.load_library().nvfp4_launch_fused_tiled(
            a.data_ptr(), tiled[0].data_ptr(), tiled[1].data_ptr(), g.data_ptr(), None, out.data_ptr(), None, None,
            1, 64, 256, 1, 1, torch.cuda.current_stream().cuda_stream, bad)
        assert err == 1, (hex(bad), err)


@pytest.mark.parametrize("m", [1, 8, 9, 16, 17, 32, 64, 256])
def test_every_launch_runs_at_the_occupancy_its_split_count_assumes(m: int) -> None:
    """The host picks a split count for nvfp4_fused_occupancy(m) resident blocks per SM (the
    row-major kernel's). The tile-contiguous kernel needs fewer registers at M = 1 with the
    last-block sum (56, not 64), which alone would fit 9 blocks where 8 were assumed (3% slower
    with the L2 flushed); its launch holds it to the assumed occupancy by shared memory."""
    lib = cuda_backend.load_library()
    assumed = lib.nvfp4_fused_occupancy(m)
    assert assumed >= 1
    for tiled in (0, 1):
        for last_block in (0, 1):
            got = lib.nvfp4_fused_launch_occupancy(m, tiled, last_block)
            if last_block and m > cuda_backend.LAST_BLOCK_MAX_M:
                assert 1 <= got <= assumed, (m, tiled)  # a sum no launch of this M takes: never more
            else:
                assert got == assumed, (m, tiled, last_block)
    assert lib.nvfp4_fused_launch_occupancy(0, 1, 0) < 0 and lib.nvfp4_fused_launch_occupancy(257, 0, 0) < 0


# --- fused_wgmma on the tile-contiguous copy (Hopper) ---------------------------------------------

_HOPPER = torch.cuda.get_device_capability(0) == (9, 0)
needs_hopper = pytest.mark.skipif(not _HOPPER, reason="the fused_wgmma kernel is built for sm_90a only")
WGMMA = Policy(force_path="fused_wgmma", wgmma_min_m=1, wgmma_max_m=256)
#: (N, K): the fused_mma shapes, and one whose plan has whole tiles and split ones on a 132-SM GPU
WGMMA_SHAPES = SHAPES + [(132 * 128 + 70, 256)]


def _wgmma_plans(n: int, k: int) -> list[tuple[int, int] | None]:
    """The default plan (None: the library's for the call's M), every tile unsplit, every tile split
    in 3 (or fewer steps), and a mixed one."""
    tiles, steps = -(-n // 128), k // 128
    split = min(3, steps)
    split = -(-steps // -(-steps // split))  # the equal non-empty ranges the launcher accepts
    return [None, (tiles, 1), (0, split), (max(0, tiles - 1), split)]


def _fused_mma_at_plan(a, packed, scales, g, bias, plan: tuple[int, int]) -> np.ndarray:
    """fused_mma's bits at a fused_wgmma plan's K ranges: the first 128 * whole_tiles rows at one
    split, the rest at the plan's splits (each element's sum depends only on its K range)."""
    n = packed.shape[0]
    cut = min(n, 128 * plan[0])
    parts = []
    for r0, r1, splits in ((0, cut, 1), (cut, n, plan[1])):
        if r1 > r0:
            out = torch.full((a.shape[0], r1 - r0), float("nan"), dtype=a.dtype, device="cuda")
            cuda_backend.fused_mma(a, packed[r0:r1], scales[r0:r1], g, None if bias is None else bias[r0:r1], out,
                                   splits=splits)
            parts.append(_bits(out))
    return np.concatenate(parts, axis=1)


@needs_hopper
@pytest.mark.parametrize(("n", "k"), WGMMA_SHAPES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("g_value", [0.0123, 2.0 ** 110], ids=["table", "exact-overflow"])
def test_fused_wgmma_in_fused_mma_order_gives_fused_mmas_bits(n: int, k: int, dtype: str, g_value: float) -> None:
    """fused_wgmma, in fused_mma's K order (benchmarks/NOTES.md, sixteenth session), puts in every
    k16 MMA's slots what fused_mma.cu puts there, so its bits are fused_mma's at the
    same K ranges: on row-major weights and on fused_mma's tile-contiguous copy, over N and M tails
    (M on both sides of each activation tile's edge: the launch takes the narrowest of 64, 128,
    192 and 256 rows that holds M, and pads the permuted copy with zero rows up to it), both
    types, bias, every kind of plan and the exact decode's overflow path."""
    packed, scales, _ = _weights(n, k, n + 5 * k)
    g = torch.tensor([g_value], dtype=torch.float32, device="cuda")
    tiled = layout.tile_weights(packed, scales)
    tdt = getattr(torch, dtype)
    bias = torch.randn(n, device="cuda").to(tdt)
    for m in (1, 17, 33, 64, 65, 100, 128, 129, 192, 193, 256):
        a = (torch.randn(m, k, device="cuda") * (1.0 if g_value < 1 else 2.0 ** -112)).to(tdt)
        b = bias if m % 2 else None
        for plan in _wgmma_plans(n, k):
            plan = plan or cuda_backend.fused_wgmma_plan(n, k, m, 0)  # the library's plan for this M
            want = _fused_mma_at_plan(a, packed, scales, g, b, plan)
            for copy in (None, tiled):
                out = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
                cuda_backend.fused_wgmma(a, packed, scales, g, b, out, plan=plan, tiled=copy)
                assert np.array_equal(_bits(out), want), (m, plan, copy is not None)


@needs_hopper
def test_fused_wgmma_refuses_a_bad_tiled_copy_or_activation_workspace() -> None:
    packed, scales, g = _weights(200, 1024, 17)
    a = torch.randn(4, 1024, device="cuda").to(torch.bfloat16)
    out = torch.empty(4, 200, dtype=torch.bfloat16, device="cuda")
    tiled = layout.tile_weights(packed, scales)
    with pytest.raises(ValueError, match=r"layout\.tile_weights\), got"):
        cuda_backend.fused_wgmma(a, packed, scales, g, None, out, tiled=(tiled[0][:1], tiled[1]))
    with pytest.raises(ValueError, match="tiled must be"):
        cuda_backend.fused_wgmma(a, packed, scales, g, None, out, tiled=(tiled[0],))
    with pytest.raises(TypeError, match="CUDA torch tensor"):
        cuda_backend.fused_wgmma(a, packed, scales, g, None, out, tiled=(tiled[0].cpu(), tiled[1]))
    # the library refuses a missing or misaligned activation workspace (cudaErrorInvalidValue)
    lib = cuda_backend.load_library()
    act = torch.empty(2 * 1024 * lib.nvfp4_fused_wgmma_act_rows(4) + 16, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for act_ptr in (None, act.data_ptr() + 8):
        err = lib.nvfp4_launch_fused_wgmma_mma_order(a.data_ptr(), act_ptr, packed.data_ptr(), scales.data_ptr(),
                                                     g.data_ptr(), None, out.data_ptr(), None, 4, 200, 1024, 1, 2, 1,
                                                     0, stream)
        assert err == 1, act_ptr
    # one activation tile, the narrowest of 64, 128, 192 and 256 rows that holds M
    ms = (0, 1, 64, 65, 128, 129, 192, 193, 256)
    assert [lib.nvfp4_fused_wgmma_act_rows(m) for m in ms] == [0, 64, 64, 128, 128, 192, 192, 256, 256]


@needs_hopper
def test_the_dispatcher_hands_fused_wgmma_its_registered_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    n, k = 1000, 2048
    packed, scales, g = _weights(n, k, 15)
    a = torch.randn(200, k, device="cuda").to(torch.bfloat16)
    want = _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=WGMMA))
    key = (id(packed), a.shape)

    def fast_kernel() -> int:
        """The packed kernel of the eager fast path's plan for the call, made afresh."""
        fast.forget_weight(packed)
        monkeypatch.setattr(fast, "ENABLED", True)
        assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=WGMMA)), want)
        return fast._plans[key].kernel

    handed = []
    real = cuda_backend.fused_wgmma

    def full_path_copy() -> object:
        """The copy the full path (no plans) hands the kernel: None for the row-major weight."""
        monkeypatch.setattr(fast, "ENABLED", False)
        got = _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=WGMMA))
        monkeypatch.setattr(fast, "ENABLED", True)
        assert np.array_equal(got, want)
        return handed[-1]

    monkeypatch.setattr(cuda_backend, "fused_wgmma",
                        lambda *args, **kw: handed.append(kw.get("tiled")) or real(*args, **kw))
    try:
        assert fast_kernel() == cuda_backend.PACKED_KERNEL["fused_wgmma"]
        layout.register(packed, scales)  # on an H200 the default keeps fused_wgmma's copy
        assert layout.default_paths(packed.device) == ("fused_mma", "fused_wgmma")
        assert key not in fast._plans  # registering drops the weight's plans
        assert fast_kernel() == cuda_backend.FUSED_WGMMA_TILED_KERNEL
        assert fast._plans[key].tiled[0]() is layout.registered(packed, scales, "fused_wgmma").packed
        assert full_path_copy().packed is layout.registered(packed, scales, "fused_wgmma").packed
        layout.register(packed, scales, paths=("fused_mma",))  # without it: the row-major weight
        assert fast_kernel() == cuda_backend.PACKED_KERNEL["fused_wgmma"]
        assert full_path_copy() is None
        layout.register(packed, scales, paths=("fused_wgmma",))
        assert fast_kernel() == cuda_backend.FUSED_WGMMA_TILED_KERNEL
        packed[::5].bitwise_xor_(0x33)  # changed in place: the stale copy is not read, by either path
        monkeypatch.setattr(fast, "ENABLED", False)
        changed = _bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=WGMMA))
        assert handed[-1] is None and not np.array_equal(changed, want)
        monkeypatch.setattr(fast, "ENABLED", True)
        assert np.array_equal(_bits(nvfp4_kernels.nvfp4_matmul(a, packed, scales, g, policy=WGMMA)), changed)
        assert fast._plans[key].kernel == cuda_backend.PACKED_KERNEL["fused_wgmma"]
        out = torch.empty(200, n, dtype=torch.bfloat16, device="cuda")
        real(a, packed, scales, g, None, out)  # the dispatcher's launch on the row-major weight
        assert np.array_equal(changed, _bits(out))
    finally:
        layout.unregister(packed)


def _misaligned_copy(x: torch.Tensor, offset: int) -> torch.Tensor:
    """``x``'s values in a view ``offset`` bytes past an aligned allocation (contiguous)."""
    flat = torch.empty(x.numel() * x.element_size() + offset, dtype=torch.uint8, device=x.device)
    view = flat[offset:].view(x.dtype).view(x.shape)
    view.copy_(x)
    return view


@needs_hopper
@pytest.mark.parametrize("captured", [False, True], ids=["eager", "graph"])
def test_fused_wgmma_on_misaligned_views_gives_the_aligned_bits(captured: bool) -> None:
    """The launch takes aligned copies of misaligned operands (A and the weights here, with a plan
    that splits K, so a workspace too). Each must still be held when the kernel is enqueued: a copy
    dropped after taking its address goes back to the caching allocator, which may hand its memory
    to the next copy, or inside a graph capture to the workspace."""
    n, k, m = 1000, 2048, 200
    packed, scales, g = _weights(n, k, 21)
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    assert cuda_backend.fused_wgmma_workspace_floats(m, n, cuda_backend.fused_wgmma_plan(n, k, m, 0)) > 0
    want = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    cuda_backend.fused_wgmma(a, packed, scales, g, None, want)
    a_v, p_v, s_v = _misaligned_copy(a, 2), _misaligned_copy(packed, 1), _misaligned_copy(scales, 1)
    assert a_v.data_ptr() % 16 and p_v.data_ptr() % 16 and s_v.data_ptr() % 8
    got = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    if not captured:
        cuda_backend.fused_wgmma(a_v, p_v, s_v, g, None, got)
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            cuda_backend.fused_wgmma(a_v, p_v, s_v, g, None, got)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            cuda_backend.fused_wgmma(a_v, p_v, s_v, g, None, got)
        got.fill_(float("nan"))
        graph.replay()
    torch.cuda.synchronize()
    assert np.array_equal(_bits(got), _bits(want))
