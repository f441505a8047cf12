"""The fused_wgmma kernel (kernels/cuda/fused_wgmma.cu) on the GPU, through its launcher
:func:`nvfp4_kernels.cuda_backend.fused_wgmma`: every output within the single-rounding bound of
float64 at each M edge (one row, a partial 8-row group, and each of its activation tiles of 64,
128, 192 and 256 rows full or partly filled: M = 64, 128, 129, 200, 256), partial weight tiles
and both kinds of tile of its split plan; the plan's two kinds of tile give the bits of the
uniform plans row for row; what it cannot do is refused with the reason. Its decoded weights
are read out in suites/test_fused_paths_bits.py.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
_CAPABILITY = torch.cuda.get_device_capability(0)
if _CAPABILITY != (9, 0):
    pytest.skip(f"the fused_wgmma kernel is built for sm_90a; this GPU is sm_{_CAPABILITY[0]}{_CAPABILITY[1]}",
                allow_module_level=True)

from nvfp4_kernels import cuda_backend  # noqa: E402
from nvfp4_kernels.tiling import WGMMA_TILE_ROWS, wgmma_plan  # noqa: E402

G = 0.0123


def _operands(m: int, n: int, k: int, dtype: str, bias: bool, seed: int):
    rng = np.random.default_rng(seed)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x20, 0x58, (n, k // 16), dtype=np.uint8)).cuda()
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=gen).to(tdt)
    b = torch.randn(n, device="cuda", generator=gen).to(tdt) if bias else None
    g = torch.tensor([G], dtype=torch.float32, device="cuda")
    return a, packed, scales, g, b


def _run(a, packed, scales, g, b, plan=None):
    out = torch.full((a.shape[0], packed.shape[0]), float("nan"), dtype=a.dtype, device="cuda")
    cuda_backend.fused_wgmma(a, packed, scales, g, b, out, plan=plan)
    torch.cuda.synchronize()
    return out


def _weights_t(packed, scales, dtype: str):
    w = torch.empty(packed.shape[0], 2 * packed.shape[1], dtype=getattr(torch, dtype), device="cuda")
    cuda_backend.dequantize("prefill_vec8", packed, scales, torch.tensor([G], dtype=torch.float32, device="cuda"), 16,
                            w)
    return w


def _assert_single_rounding_bound(a, w, b, out, dtype: str) -> None:
    """One unit in the last place of T (the single final rounding) plus 1e-5 of the sum of
    |a * w| (fp32 accumulation in any order), per element; NaN never passes."""
    ref = a.double() @ w.double().t()
    if b is not None:
        ref = ref + b.double()
    magnitude = a.double().abs() @ w.double().abs().t()
    ulp = 2.0 ** -8 if dtype == "bfloat16" else 2.0 ** -11
    err = (out.double() - ref).abs()
    assert not torch.isnan(out).any()
    assert bool((err <= ulp * ref.abs() + 1e-5 * magnitude).all()), f"max error {float(err.max()):.3g}"


@pytest.mark.parametrize("dtype", ("bfloat16", "float16"))
@pytest.mark.parametrize("m", (1, 17, 64, 128, 129, 200, 256))
@pytest.mark.parametrize("n,k", ((64, 256), (200, 640), (1000, 2048), (129, 4096), (132 * 128 + 70, 256)))
def test_fused_wgmma_matches_float64(dtype: str, m: int, n: int, k: int) -> None:
    a, packed, scales, g, b = _operands(m, n, k, dtype, bias=m % 2 == 1, seed=m * 17 + n)
    out = _run(a, packed, scales, g, b)
    _assert_single_rounding_bound(a, _weights_t(packed, scales, dtype), b, out, dtype)


@pytest.mark.parametrize("m", (5, 256))
@pytest.mark.parametrize("n,k", ((300, 1024), (1000, 2048)))
def test_each_tile_of_a_split_plan_has_the_bits_of_the_uniform_plan(m: int, n: int, k: int) -> None:
    """A plan's whole tiles sum K as the one-split plan does and its left-over tiles as the
    uniform plan of the same split count: the same bits row for row, on every call."""
    a, packed, scales, g, b = _operands(m, n, k, "bfloat16", bias=True, seed=n + m)
    tiles, steps = -(-n // WGMMA_TILE_ROWS), k // 128
    one = _run(a, packed, scales, g, b, plan=(0, 1))
    assert torch.equal(one.view(torch.int16), _run(a, packed, scales, g, b, plan=(tiles, 1)).view(torch.int16))
    for splits in sorted({2, steps // 2, steps}):
        uniform = _run(a, packed, scales, g, b, plan=(0, splits))
        for whole in range(1, tiles):
            mixed = _run(a, packed, scales, g, b, plan=(whole, splits))
            cut = whole * WGMMA_TILE_ROWS
            assert torch.equal(mixed[:, :cut].view(torch.int16), one[:, :cut].view(torch.int16)), (whole, splits)
            assert torch.equal(mixed[:, cut:].view(torch.int16), uniform[:, cut:].view(torch.int16)), (whole, splits)
        assert torch.equal(uniform.view(torch.int16), _run(a, packed, scales, g, b, plan=(0, splits)).view(torch.int16))


def test_the_default_plan_is_tiling_for_this_gpu() -> None:
    n, k = 17408, 5120
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, packed, scales, g, _ = _operands(130, n, k, "bfloat16", bias=False, seed=5)
    want = _run(a, packed, scales, g, None, plan=wgmma_plan(n, k, sms))
    assert torch.equal(_run(a, packed, scales, g, None).view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("m", [1, 33, 64])
def test_up_to_64_rows_the_default_plan_gives_fused_mmas_default_bits(m: int) -> None:
    """Up to its 64-row activation tile the launch runs fused_mma's split count for the shape and M
    (nvfp4_kernels.tiling.wgmma_call_plan), so its default call has the bits of fused_mma's default
    call, element for element, on a shape whose split count is more than one at these M; at
    M = 65 (the 128-row tile, the whole-tile plan) the sums differ."""
    n, k = 17408, 5120
    a, packed, scales, g, b = _operands(m, n, k, "bfloat16", bias=True, seed=6 + m)
    assert cuda_backend.fused_splits(n, k, m, 0) > 1
    mma = torch.full((m, n), float("nan"), dtype=a.dtype, device="cuda")
    cuda_backend.fused_mma(a, packed, scales, g, b, mma)
    assert torch.equal(_run(a, packed, scales, g, b).view(torch.int16), mma.view(torch.int16))
    a65, packed, scales, g, b = _operands(65, n, k, "bfloat16", bias=True, seed=7)
    mma65 = torch.full((65, n), float("nan"), dtype=a65.dtype, device="cuda")
    cuda_backend.fused_mma(a65, packed, scales, g, b, mma65)
    assert not torch.equal(_run(a65, packed, scales, g, b).view(torch.int16), mma65.view(torch.int16))


def test_fused_wgmma_refuses_what_it_cannot_do() -> None:
    g = torch.ones(1, dtype=torch.float32, device="cuda")
    packed, scales = torch.zeros(8, 64, dtype=torch.uint8, device="cuda"), torch.zeros(8, 8, dtype=torch.uint8,
                                                                                        device="cuda")
    with pytest.raises(ValueError, match=r"K % 128 == 0, got K=96"):
        cuda_backend.fused_wgmma(torch.zeros(4, 96, dtype=torch.bfloat16, device="cuda"), packed[:, :48],
                                 scales[:, :6], g, None, torch.empty(4, 8, dtype=torch.bfloat16, device="cuda"))
    with pytest.raises(ValueError, match=r"1 <= M <= 256 activation rows, got M=257"):
        cuda_backend.fused_wgmma(torch.zeros(257, 128, dtype=torch.bfloat16, device="cuda"), packed, scales, g, None,
                                 torch.empty(257, 8, dtype=torch.bfloat16, device="cuda"))
    a = torch.zeros(4, 1024, dtype=torch.bfloat16, device="cuda")
    wide_p, wide_s = torch.zeros(8, 512, dtype=torch.uint8, device="cuda"), torch.zeros(8, 64, dtype=torch.uint8,
                                                                                         device="cuda")
    out = torch.empty(4, 8, dtype=torch.bfloat16, device="cuda")
    for plan in ((0, 5), (2, 1), (0, 9), (-1, 2)):  # 5 splits of 8 steps leave one empty; 2 tiles of 1; 9 > 8
        with pytest.raises(ValueError, match="plan must be"):
            cuda_backend.fused_wgmma(a, wide_p, wide_s, g, None, out, plan=plan)
