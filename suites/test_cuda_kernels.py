"""GPU tests of the CUDA kernels: dequantized bits identical to the CPU reference, GEMV within a
stated tolerance of a float64 reference, NVIDIA's own E2M1 conversion equal to the project's table.

Every test is skipped with "needs a CUDA GPU" where torch sees none (the CPU CI machine).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nvfp4_kernels  # noqa: E402
from nvfp4_kernels import cuda_backend, dispatch, reference  # noqa: E402
from nvfp4_kernels.nvfp4 import E2M1_TABLE  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.dispatch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

BLOCK_SIZES = (1, 2, 5, 6, 7, 12, 16, 32, 64)
KS = (2, 8, 12, 24, 70, 120, 1004, 1020, 4096)
DTYPES = ("bfloat16", "float16")
#: scale bytes that exercise every decoder branch: zeros, subnormals, negatives, NaN, the largest
SPECIAL_SCALES = (0x00, 0x80, 0x01, 0x81, 0x07, 0x87, 0x08, 0x7E, 0xFE, 0x7F, 0xFF)


@pytest.fixture(scope="module")
def backend_ready():
    ok, why = cuda_backend.available()
    if not ok:
        pytest.fail(f"a CUDA GPU is present but the CUDA backend is unavailable: {why}")


def _weights(n: int, k: int, bs: int, seed: int, special: bool = True):
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
    nsc = -(-k // bs)
    if special:
        scales = rng.integers(0, 256, size=(n, nsc), dtype=np.uint8)
        flat = scales.reshape(-1)
        count = min(flat.size, len(SPECIAL_SCALES))
        flat[:count] = SPECIAL_SCALES[:count]
    else:
        scales = rng.integers(0x20, 0x58, size=(n, nsc), dtype=np.uint8)
    return packed, scales


def _dev(x: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def _bits(t) -> np.ndarray:
    return t.view(torch.int16).cpu().numpy().view(np.uint16)


def _run(path: str, packed, scales, g: float, bs: int, dtype: str):
    n, k = packed.shape[0], 2 * packed.shape[1]
    out = torch.full((n, k), -1, dtype=torch.int16, device="cuda").view(getattr(torch, dtype))
    gd = torch.tensor([g], dtype=torch.float32, device="cuda")
    cuda_backend.dequantize(path, _dev(packed), _dev(scales), gd, bs, out)
    torch.cuda.synchronize()
    return _bits(out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bs", BLOCK_SIZES)
def test_dequant_bits_match_reference(backend_ready, dtype: str, bs: int) -> None:
    """Both kernels (where their guards allow) reproduce the CPU reference bit for bit."""
    for i, k in enumerate(KS):
        for g in (1.0, 3.0e-3, 1.0e-38):  # 1e-38: products in the fp32 subnormal range
            packed, scales = _weights(4, k, bs, seed=1000 * bs + 10 * i + int(g > 0.5))
            want = reference.dequantize_scalar(packed, scales, np.float32(g), bs, dtype).view(np.uint16)
            paths = ["prefill_scalar"] + (["prefill_vec8"] if reference.vec8_supported(k, bs) else [])
            for path in paths:
                got = _run(path, packed, scales, g, bs, dtype)
                bad = np.argwhere(got != want)
                assert bad.size == 0, (f"{path} K={k} bs={bs} g={g} {dtype}: {len(bad)} mismatches, "
                                       f"first at {bad[0].tolist()}: got {got[tuple(bad[0])]:#06x} "
                                       f"want {want[tuple(bad[0])]:#06x}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_vec8_more_rows_than_grid_y(backend_ready, dtype: str) -> None:
    """N = 70,000 > 65,535: the row-stride loop covers every row."""
    packed, scales = _weights(70000, 64, 16, seed=7)
    want = reference.dequantize_vec8(packed, scales, np.float32(0.5), 16, dtype).view(np.uint16)
    assert np.array_equal(_run("prefill_vec8", packed, scales, 0.5, 16, dtype), want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_large_shape_bits(backend_ready, dtype: str) -> None:
    packed, scales = _weights(1024, 5120, 16, seed=11)
    want = reference.dequantize_scalar(packed, scales, np.float32(0.01), 16, dtype).view(np.uint16)
    for path in ("prefill_vec8", "prefill_scalar"):
        assert np.array_equal(_run(path, packed, scales, 0.01, 16, dtype), want), path


def test_vec8_rejects_what_it_cannot_do(backend_ready) -> None:
    packed, scales = _weights(4, 64, 16, seed=3)
    gd = torch.tensor([1.0], device="cuda")
    base = torch.empty(4 * 64 + 8, dtype=torch.bfloat16, device="cuda")
    misaligned = base[1:1 + 4 * 64].view(4, 64)  # 2 bytes past a 16-byte boundary
    with pytest.raises(ValueError, match="16-byte aligned"):
        cuda_backend.dequantize("prefill_vec8", _dev(packed), _dev(scales), gd, 16, misaligned)
    p5, s5 = _weights(4, 64, 5, seed=3)
    with pytest.raises(ValueError, match="even block_size"):
        cuda_backend.dequantize("prefill_vec8", _dev(p5), _dev(s5), gd, 5,
                                torch.empty(4, 64, dtype=torch.bfloat16, device="cuda"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_views_go_scalar_and_are_correct(backend_ready, dtype: str) -> None:
    """A packed view starting 1 byte into a row, and an output 2 bytes off, take the scalar path."""
    n, k = 8, 64
    rng = np.random.default_rng(5)
    big = rng.integers(0, 256, size=(n, k // 2 + 1), dtype=np.uint8)
    scales = rng.integers(0x20, 0x58, size=(n, k // 16), dtype=np.uint8)
    packed_view = _dev(big).reshape(-1)[1:1 + n * k // 2].view(n, k // 2)
    assert packed_view.data_ptr() % 4 != 0
    events = []
    listener = nvfp4_kernels.add_listener(events.append)
    try:
        out = dispatch.dequantize(packed_view, _dev(scales), np.float32(0.25), 16, dtype)
    finally:
        nvfp4_kernels.remove_listener(listener)
    assert events[-1].path == "prefill_scalar" and "misaligned" in events[-1].reason
    want = reference.dequantize_scalar(packed_view.cpu().numpy(), scales, np.float32(0.25), 16, dtype)
    assert np.array_equal(_bits(out), want.view(np.uint16))


def _gemv_case(m: int, n: int, k: int, dtype: str, bias: bool, seed: int, path: str = "gemv", splits=None):
    packed, scales = _weights(n, k, 16, seed=seed, special=False)
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen).to(tdt)
    b = torch.randn(n, device="cuda", generator=gen).to(tdt) if bias else None
    gd = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    pd, sd = _dev(packed), _dev(scales)
    w = torch.empty(n, k, dtype=tdt, device="cuda")
    cuda_backend.dequantize("prefill_vec8", pd, sd, gd, 16, w)
    out = torch.full((m, n), float("nan"), dtype=tdt, device="cuda")
    if path == "gemv":
        cuda_backend.gemv(a, pd, sd, gd, b, out)
    else:
        cuda_backend.fused_mma(a, pd, sd, gd, b, out, splits=splits)
    torch.cuda.synchronize()
    return a, w, b, out


def _assert_single_rounding_bound(a, w, b, out, dtype: str) -> None:
    ref = a.double() @ w.double().t()
    if b is not None:
        ref = ref + b.double()
    magnitude = a.double().abs() @ w.double().abs().t()
    ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    allowed = ulp * ref.abs() + 1e-5 * magnitude
    err = (out.double() - ref).abs()
    assert not torch.isnan(out).any()
    assert bool((err <= allowed).all()), f"max excess {float((err - allowed).max()):.3g}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", (1, 2, 3, 5, 8))
@pytest.mark.parametrize("n,k", ((64, 256), (100, 96), (4096, 4096), (5120, 17408)))
def test_gemv_matches_float64(backend_ready, dtype: str, m: int, n: int, k: int) -> None:
    """Tolerance: one unit in the last place of T (the single final rounding) plus 1e-5 of the
    sum of |a * w| (fp32 accumulation in any order), per element; NaN never passes."""
    _assert_single_rounding_bound(*_gemv_case(m, n, k, dtype, bias=m % 2 == 1, seed=m * 7 + n), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", (1, 7, 8, 9, 16, 17, 31, 33, 64, 65, 200, 256))
@pytest.mark.parametrize("n,k,splits", ((64, 256, None), (100, 640, 3), (1000, 2048, None), (129, 4096, 12),
                                        (5120, 17408, None)))
def test_fused_mma_matches_float64(backend_ready, dtype: str, m: int, n: int, k: int, splits) -> None:
    """The fused tensor-core kernel under the same single-rounding bound as the GEMV, at every M
    tile configuration and its edges (8, 16, 32, 64 rows), partial row tiles (N % 64 != 0) and
    forced split counts (the finalize kernel, an uneven last split)."""
    a, w, b, out = _gemv_case(m, n, k, dtype, bias=m % 2 == 1, seed=m * 11 + n, path="fused_mma", splits=splits)
    _assert_single_rounding_bound(a, w, b, out, dtype)


def test_fused_mma_refuses_what_it_cannot_do(backend_ready) -> None:
    a = torch.zeros(4, 96, dtype=torch.bfloat16, device="cuda")
    packed, scales = _dev(np.zeros((8, 48), np.uint8)), _dev(np.zeros((8, 6), np.uint8))
    g = torch.ones(1, dtype=torch.float32, device="cuda")
    out = torch.empty(4, 8, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=r"K % 128 == 0, got K=96"):
        cuda_backend.fused_mma(a, packed, scales, g, None, out)
    a = torch.zeros(257, 128, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=r"1 <= M <= 256 activation rows, got M=257"):
        cuda_backend.fused_mma(a, _dev(np.zeros((8, 64), np.uint8)), _dev(np.zeros((8, 8), np.uint8)), g, None,
                               torch.empty(257, 8, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match=r"splits must be an int in \[1, K/128 = 1\], got 2"):
        cuda_backend.fused_mma(a[:4], _dev(np.zeros((8, 64), np.uint8)), _dev(np.zeros((8, 8), np.uint8)), g, None,
                               torch.empty(4, 8, dtype=torch.bfloat16, device="cuda"), splits=2)


def test_fused_mma_agrees_with_its_cpu_algorithm(backend_ready) -> None:
    """The CPU backend's fused algorithm (same split structure) against the GPU kernel: equal
    within one bf16 ulp of the result plus fp32 summation error (sum order inside a split differs)."""
    n, k, m = 64, 2048, 9
    splits = cuda_backend.fused_splits(n, k, m)
    a, w, b, out = _gemv_case(m, n, k, "bfloat16", bias=True, seed=98, path="fused_mma")
    packed, scales = _weights(n, k, 16, seed=98, special=False)
    a_np = a.float().cpu().numpy().astype(reference.numpy_dtype("bfloat16"))
    b_np = b.float().cpu().numpy().astype(reference.numpy_dtype("bfloat16"))
    want = reference.fused_mma(a_np, packed, scales, np.float32(0.0123), 16, b_np, splits=splits).astype(np.float64)
    magnitude = np.abs(a_np.astype(np.float64)) @ np.abs(w.double().cpu().numpy()).T
    got = out.double().cpu().numpy()
    assert np.all(np.abs(got - want) <= 2.0 ** -7 * np.abs(want) + 1e-5 * magnitude)


def test_gemv_agrees_with_cpu_reference(backend_ready) -> None:
    """Same problem through the CPU reference GEMV: equal within one bf16 ulp (sum order differs)."""
    a, w, b, out = _gemv_case(3, 48, 128, "bfloat16", bias=True, seed=99)
    packed, scales = _weights(48, 128, 16, seed=99, special=False)
    a_np = a.float().cpu().numpy().astype(reference.numpy_dtype("bfloat16"))
    b_np = b.float().cpu().numpy().astype(reference.numpy_dtype("bfloat16"))
    want = reference.gemv(a_np, packed, scales, np.float32(0.0123), 16, b_np).astype(np.float64)
    got = out.double().cpu().numpy()
    assert np.all(np.abs(got - want) <= 2.0 ** -7 * np.abs(want) + 1e-6)


def test_fp4_probe_matches_project_table(backend_ready) -> None:
    """NVIDIA's __nv_cvt_fp4x2_to_halfraw2 on the GPU equals the table from E2M1_TABLE."""
    table = cuda_backend.fp4x2_to_halfraw2_table()
    f16 = E2M1_TABLE.astype(np.float16).view(np.uint16)
    expect = np.array([(f16[b & 0xF], f16[b >> 4]) for b in range(256)], dtype=np.uint16)
    assert table.shape == (256, 2) and table.dtype == np.uint16
    assert np.array_equal(table, expect)


@pytest.mark.parametrize("m", (1, 9, 33, 64, 200))
@pytest.mark.parametrize("n,k,splits", ((100, 640, 2), (129, 4096, 12), (64, 2048, 16), (300, 1024, 3)))
def test_fused_mma_split_k_sums_give_the_same_bits(backend_ready, m: int, n: int, k: int, splits: int) -> None:
    """The two ways of summing the splits (the tile's last block inside the launch, the finalize
    kernel after it) both sum in split order from +0.0 and add the bias before the one rounding:
    the same bits, at every M tile configuration, with partial row tiles and uneven last splits.
    Repeated calls check that the last-block counters are left at 0 (a stale count would skip or
    repeat a tile's sum)."""
    a, w, b, _ = _gemv_case(m, n, k, "bfloat16", bias=m % 2 == 1, seed=m * 13 + n, path="fused_mma", splits=1)
    packed, scales = _weights(n, k, 16, seed=m * 13 + n, special=False)
    pd, sd = _dev(packed), _dev(scales)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    outs = {}
    for reduction in ("finalize", "last_block", "last_block", "auto"):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        cuda_backend.fused_mma(a, pd, sd, g, b, out, splits=splits, reduction=reduction)
        outs.setdefault(reduction, []).append(out)
    want = outs["finalize"][0].view(torch.int16)
    for reduction, results in outs.items():
        for out in results:
            assert torch.equal(out.view(torch.int16), want), reduction
    _assert_single_rounding_bound(a, w, b, outs["last_block"][0], "bfloat16")


@pytest.mark.parametrize("m", (1, 3, 8))
@pytest.mark.parametrize("n,k", ((512, 16384), (300, 11264), (300, 11296)))
def test_gemv_split_k_sums_give_the_same_bits(backend_ready, m: int, n: int, k: int) -> None:
    """The GEMV's two ways of summing its K splits (the tile's last block inside the launch, the
    finalize kernel after it) give the same bits, with a partial row tile (N = 300), an uneven
    last split (88 steps in 3) and a partial last K step (K % 128 = 32). Repeated calls check
    that the last-block counters are left at 0."""
    dtype = "bfloat16" if m != 3 else "float16"
    assert cuda_backend.gemv_splits(n, k) > 1, "the shape must split K across blocks on this GPU"
    a, w, b, _ = _gemv_case(m, n, k, dtype, bias=m != 8, seed=m * 7 + n)
    packed, scales = _weights(n, k, 16, seed=m * 7 + n, special=False)
    pd, sd = _dev(packed), _dev(scales)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    outs = {}
    for reduction in ("finalize", "last_block", "last_block", "auto"):
        out = torch.full((m, n), float("nan"), dtype=getattr(torch, dtype), device="cuda")
        cuda_backend.gemv(a, pd, sd, g, b, out, reduction=reduction)
        outs.setdefault(reduction, []).append(out)
    want = outs["finalize"][0].view(torch.int16)
    for reduction, results in outs.items():
        for out in results:
            assert torch.equal(out.view(torch.int16), want), reduction
    _assert_single_rounding_bound(a, w, b, outs["last_block"][0], dtype)


@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
@pytest.mark.parametrize("m", (17, 32, 33, 64, 100, 256))
def test_fused_mma_wide_and_narrow_blocks_give_the_same_bits(backend_ready, m: int, dtype: str) -> None:
    """Above M = 16 the kernel runs a small grid's blocks wide (8 warps of one row tile) and a
    large grid's narrow (4 warps of two row tiles; nvfp4_kernels.tiling.fused_block_warps). Each
    output is one weight row's dot products in the same K order either way, so the first 300 rows
    of a 6000-row layer, computed narrow, must equal the 300-row layer of the same weights,
    computed wide, bit for bit, at the same split count (with a bias and partial tiles)."""
    from nvfp4_kernels.tiling import FUSED_WARPS, FUSED_WIDE_WARPS, fused_block_warps

    n_big, n_small, k, splits = 6000, 300, 2048, 4
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert fused_block_warps(m, n_big, splits, sms) == FUSED_WARPS
    assert fused_block_warps(m, n_small, splits, sms) == FUSED_WIDE_WARPS
    tdt = getattr(torch, dtype)
    packed, scales = _weights(n_big, k, 16, seed=m + 7, special=False)
    gen = torch.Generator().manual_seed(m)
    a = torch.randn(m, k, generator=gen).to(tdt).cuda()
    bias = torch.randn(n_big, generator=gen).to(tdt).cuda()
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    big = torch.empty((m, n_big), dtype=tdt, device="cuda")
    small = torch.empty((m, n_small), dtype=tdt, device="cuda")
    cuda_backend.fused_mma(a, _dev(packed), _dev(scales), g, bias, big, splits=splits)
    cuda_backend.fused_mma(a, _dev(packed[:n_small]), _dev(scales[:n_small]), g, bias[:n_small].contiguous(), small,
                           splits=splits)
    assert torch.equal(big[:, :n_small].contiguous().view(torch.int16), small.view(torch.int16))


def test_fused_mma_last_block_counters_serve_calls_of_different_shapes_on_one_stream(backend_ready) -> None:
    """One counter buffer per stream serves every shape: calls with more tiles, then fewer, then
    more again must each equal the finalize kernel's bits."""
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    for m, n, k, splits in ((8, 4096, 1024, 4), (1, 64, 512, 2), (64, 1000, 2048, 7), (16, 4096, 1024, 8)):
        a, _, _, _ = _gemv_case(m, n, k, "bfloat16", bias=False, seed=n + m, path="fused_mma", splits=1)
        packed, scales = _weights(n, k, 16, seed=n + m, special=False)
        pd, sd = _dev(packed), _dev(scales)
        got, want = (torch.empty((m, n), dtype=torch.bfloat16, device="cuda") for _ in range(2))
        cuda_backend.fused_mma(a, pd, sd, g, None, got, splits=splits, reduction="last_block")
        cuda_backend.fused_mma(a, pd, sd, g, None, want, splits=splits, reduction="finalize")
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), (m, n, k, splits)


def test_fused_mma_last_block_sum_holds_over_many_launches_back_to_back(backend_ready) -> None:
    """A stress run of the ordering the last-block sum relies on (every split's partials visible
    to the tile's last block, the counters back at 0 for the next launch): 300 single-row launches
    queued without a sync, 64 tiles of 15 splits each, every output equal to the finalize
    kernel's bits. A missing fence shows up as a rare wrong tile, so many launches are checked."""
    m, n, k, splits = 1, 4096, 4096, 15
    a, _, b, _ = _gemv_case(m, n, k, "bfloat16", bias=True, seed=77, path="fused_mma", splits=1)
    packed, scales = _weights(n, k, 16, seed=77, special=False)
    pd, sd = _dev(packed), _dev(scales)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    want = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    cuda_backend.fused_mma(a, pd, sd, g, b, want, splits=splits, reduction="finalize")
    outs = torch.full((300, m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    for i in range(outs.shape[0]):
        cuda_backend.fused_mma(a, pd, sd, g, b, outs[i], splits=splits, reduction="last_block")
    torch.cuda.synchronize()
    wrong = (outs.view(torch.int16) != want.view(torch.int16)).any(dim=-1).any(dim=-1).nonzero().flatten()
    assert wrong.numel() == 0, f"launches {wrong.tolist()[:10]} differ from the finalize kernel's bits"


def test_fused_mma_refuses_an_unknown_reduction(backend_ready) -> None:
    n, k, m = 64, 256, 4
    a = torch.zeros(m, k, dtype=torch.bfloat16, device="cuda")
    packed, scales = _dev(np.zeros((n, k // 2), np.uint8)), _dev(np.full((n, k // 16), 0x38, np.uint8))
    g = torch.ones(1, dtype=torch.float32, device="cuda")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=r"reduction must be one of \('auto', 'last_block', 'finalize'\), got 'tree'"):
        cuda_backend.fused_mma(a, packed, scales, g, None, out, splits=2, reduction="tree")


@pytest.mark.parametrize("path,m,tiled", [("gemv", 5, False), ("fused_mma", 1, False), ("fused_mma", 16, True),
                                          ("fused_wgmma", 64, False), ("fused_wgmma", 160, True)])
def test_a_prepared_launch_writes_the_bits_of_the_checked_call_every_time(backend_ready, path: str, m: int,
                                                                          tiled: bool) -> None:
    """cuda_backend.prepare_* (what the benchmark times) checks once and launches as often as it is
    called: each launch into a NaN-poisoned output gives the eager call's bits (the last-block
    counters and workspaces are reused correctly across launches), and a call it refuses is
    refused when preparing, with the eager call's message."""
    from nvfp4_kernels import layout

    if path == "fused_wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fused_wgmma runs on sm_90 only")
    n, k = 300, 4096
    packed, scales = _weights(n, k, 16, seed=m + n, special=False)
    pd, sd = _dev(packed), _dev(scales)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
    extra = {"tiled": layout.tiled_weight(pd, sd)} if tiled else {}
    eager, prepare = getattr(cuda_backend, path), getattr(cuda_backend, f"prepare_{path}")
    want = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    eager(a, pd, sd, g, bias, want, **extra)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch = prepare(a, pd, sd, g, bias, out, **extra)
    for _ in range(3):
        out.fill_(float("nan"))
        launch()
        assert torch.equal(out.view(torch.int16), want.view(torch.int16))
    too_many = torch.zeros(300, k, dtype=torch.bfloat16, device="cuda")
    wide = torch.empty(300, n, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError) as eager_error:
        eager(too_many, pd, sd, g, None, wide)
    with pytest.raises(ValueError) as prepare_error:
        prepare(too_many, pd, sd, g, None, wide)
    assert str(prepare_error.value) == str(eager_error.value)
