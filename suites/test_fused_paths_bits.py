"""The decoded weights of the fused paths (the GEMV and the tensor-core ``fused_mma`` and
``fused_wgmma``), read out through each kernel itself, against the contract.

With A = rows of the identity (8 per call for the GEMV, which takes M <= 8; 256 per call for
``fused_mma`` and ``fused_wgmma``, K split as on the GPU), each output element has one non-zero product,
1 * W[n, k], so Y = W^T exactly (docs/contract.md). The sweep covers the global scales of the
contract's checks and the scale bytes of the special-byte table (NaN bytes apart: 0 * NaN is NaN,
so a NaN scale makes its whole output column NaN, which is checked on its own), including the
exact slow path (block scale times global scale times 2^14 overflowing fp32). GPU-keyed goldens
pin the output bits of a split-K call of each path, so a change in the fixed order of a
reduction is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.nvfp4 import table_decode
from nvfp4_harness.nvfp4.shapes import oracle_dequantize
from nvfp4_kernels.model import Policy
from nvfp4_kernels.nvfp4 import E4M3_TABLE

pytestmark = [pytest.mark.dispatch, pytest.mark.gpu]

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)

import nvfp4_kernels  # noqa: E402
from nvfp4_kernels import cuda_backend  # noqa: E402

#: finite special scale bytes: zero, subnormals, the largest, negative ones
SPECIAL = np.array([0x00, 0x01, 0x07, 0x08, 0x38, 0x7E, 0x80, 0x81, 0xB8, 0xFE], np.uint8)
#: (dtype, global scale): the contract's sweep; 2^120 with scale byte 1.0 takes the exact slow
#: path (2^120 * 2^14 overflows fp32) while every weight stays finite in bf16
SWEEP = [("bfloat16", 1.0), ("float16", 1.0), ("bfloat16", 0.0123), ("float16", 0.0123), ("bfloat16", 2.0**-133),
         ("float16", 2.0**-20), ("bfloat16", 1.0e3), ("bfloat16", 2.0**120)]
N, K = 40, 256
#: (path, identity rows per call): each path's largest M
PATHS = [("gemv", 8), ("fused_mma", 256), ("fused_wgmma", 256)]
#: each path forced with its M guard opened to the kernel's own limit (a forced path's guards must hold)
FORCE = {"gemv": Policy(force_path="gemv", gemv_max_m=8), "fused_mma": Policy(force_path="fused_mma", fused_max_m=256),
         "fused_wgmma": Policy(force_path="fused_wgmma", wgmma_min_m=1, wgmma_max_m=256)}


def weights(seed: int, dtype: str, g: float):
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (N, K // 2), dtype=np.uint8)
    scales = rng.choice(SPECIAL, size=(N, K // 16)).astype(np.uint8)
    scales[: len(SPECIAL), 0] = SPECIAL  # every special byte at least once
    if g == 2.0**120:
        scales[:] = 0x38  # scale 1.0: s = 2^120, s * 2^14 = 2^134 overflows fp32
    w = oracle_dequantize(packed, scales, np.float32(g), 16, dtype)
    keep = np.isfinite(w.astype(np.float32)).all(axis=1)  # a row with inf would make its column NaN
    return packed[keep], scales[keep], w[keep]


def read_out(packed, scales, g, dtype: str, path: str = "gemv", rows_per_call: int = 8) -> np.ndarray:
    """Y = I @ W^T through ``path``, ``rows_per_call`` identity rows per call; returns W as the
    path decoded it."""
    k = 2 * packed.shape[1]
    tdt = getattr(torch, dtype)
    b, s = torch.from_numpy(packed).cuda(), torch.from_numpy(scales).cuda()
    eye = torch.eye(k, dtype=tdt, device="cuda")
    rows = []
    with recording(f"{path} readout") as rec:
        for k0 in range(0, k, rows_per_call):
            rows.append(nvfp4_kernels.nvfp4_matmul(eye[k0:k0 + rows_per_call], b, s, np.float32(g), 16,
                                                   policy=FORCE[path]))
    assert {r.event.path for r in rec.events} == {path}
    y = torch.cat(rows).t().contiguous()  # [N, K]
    return y.view(torch.int16).cpu().numpy().view(np.uint16)


@pytest.mark.parametrize("path,rows_per_call", PATHS, ids=[p for p, _ in PATHS])
@pytest.mark.parametrize("dtype,g", SWEEP, ids=[f"{d}-g{g:.3g}" for d, g in SWEEP])
def test_the_fused_paths_decode_every_weight_to_the_contracts_bits(dtype, g, path, rows_per_call):
    packed, scales, w = weights(7, dtype, g)
    assert len(packed) >= N // 2, "most rows must stay finite for the case to mean something"
    got = read_out(packed, scales, g, dtype, path, rows_per_call)
    want = w.view(np.uint16).copy()
    want[want == 0x8000] = 0  # -0.0 reads out as +0.0: its sum with the other products' +0.0
    assert np.array_equal(got, want), f"first difference at {np.argwhere(got != want)[0].tolist()}"


#: (dtype, global scale, scale bytes) whose every block takes fused_mma's table decode (every
#: block of a warp's K step must, mma_decode.cuh), from ordinary scales to each end of the table's
#: range, and one just below it: s = 1.5 * 2^-126 must take the multiply path (there 0.5 s is a
#: bf16 subnormal, which the table's binade arithmetic would get wrong)
TABLE_SWEEP = [
    ("bfloat16", 0.0123, range(0x08, 0x7F)),
    ("float16", 0.0123, range(0x28, 0x7F)),
    ("bfloat16", 2.0**-125, range(0x38, 0x40)),   # s from kLo = 2^-125 up
    ("bfloat16", 2.0**125 / 1.875, range(0x30, 0x3F)),  # s up to kHi = 2^125
    ("float16", 2.0**-13, range(0x38, 0x48)),     # s from kLo = 2^-13 up
    ("float16", 2.0**13 / 1.875, range(0x30, 0x3F)),  # s up to kHi = 2^13
    ("bfloat16", 1.5 * 2.0**-126, range(0x38, 0x39)),  # below kLo: the multiply path
]


@pytest.mark.parametrize("path", ["fused_mma", "fused_wgmma"])
@pytest.mark.parametrize("dtype,g,scale_bytes", TABLE_SWEEP,
                         ids=[f"{d}-g{g:.3g}-{min(b):#04x}" for d, g, b in TABLE_SWEEP])
def test_the_table_decode_reads_out_to_the_contracts_bits(dtype, g, scale_bytes, path):
    """fused_mma's table decode, and fused_wgmma's (two tables per word: its codes 0-3 and 4-7 lie
    in two scale blocks), at each end of the table's range and just below it."""
    bounds = table_decode.header_constants().ranges[dtype]
    s = (E4M3_TABLE[np.array(scale_bytes)] * np.float32(g)).astype(np.float32)
    on_table = table_decode.table_ok(s, bounds.lo, bounds.hi)
    # the sweep means what it says: all blocks on the table, or (the last case) none
    assert on_table.all() or not on_table.any(), (dtype, g)
    rng = np.random.default_rng(11)
    packed = rng.integers(0, 256, (N, K // 2), dtype=np.uint8)
    scales = rng.choice(np.array(scale_bytes, np.uint8), size=(N, K // 16)).astype(np.uint8)
    w = oracle_dequantize(packed, scales, np.float32(g), 16, dtype)
    assert np.isfinite(w.astype(np.float32)).all()
    got = read_out(packed, scales, g, dtype, path, 256)
    want = w.view(np.uint16).copy()
    want[want == 0x8000] = 0  # -0.0 reads out as +0.0 (see above)
    assert np.array_equal(got, want), f"first difference at {np.argwhere(got != want)[0].tolist()}"


@pytest.mark.parametrize("path,rows_per_call", PATHS, ids=[p for p, _ in PATHS])
def test_a_nan_scale_makes_its_whole_column_nan_and_no_other(path, rows_per_call):
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, (16, K // 2), dtype=np.uint8)
    scales = np.full((16, K // 16), 0x38, np.uint8)
    scales[5, 2] = 0x7F
    scales[9, 0] = 0xFF
    got = read_out(packed, scales, 0.5, "bfloat16", path, rows_per_call).view(np.int16)
    nan = (got & 0x7F80) == 0x7F80
    nan &= (got & 0x007F) != 0
    assert nan[5].all() and nan[9].all()
    assert not np.delete(nan, [5, 9], axis=0).any()


def test_a_split_k_gemv_has_golden_bits(golden):
    n, k = 512, 16384  # 32 row tiles: far fewer than an H200's 264 block slots, so K is split
    assert cuda_backend.gemv_splits(n, k) > 1, "the shape must split K across blocks on this GPU"
    rng = np.random.default_rng(42)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
    gen = torch.Generator(device="cuda").manual_seed(42)
    a = torch.randn(4, k, device="cuda", generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    with recording("gemv split-K") as rec:
        y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias, policy=FORCE["gemv"])
        again = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias, policy=FORCE["gemv"])
    assert {r.event.path for r in rec.events} == {"gemv"}
    assert torch.equal(y.view(torch.int16), again.view(torch.int16)), "the split-K order must be fixed"
    golden.check(f"gemv/splitk-{n}x{k}-m4-bf16-bias", y, key=golden.key_for("cuda"))


def test_a_split_k_fused_mma_has_golden_bits(golden):
    from nvfp4_kernels.tiling import fused_split_count

    n, k, m = 320, 8192, 24  # 3 row tiles of 128 x 1 activation tile of 32: K is split to fill the GPU
    assert cuda_backend.fused_splits(n, k, m) > 1, "the shape must split K across blocks on this GPU"
    props = torch.cuda.get_device_properties(0)
    assert cuda_backend.fused_splits(n, k, m) == fused_split_count(n, k, m, props.multi_processor_count,
                                                                    cuda_backend.load_library().nvfp4_fused_occupancy(m))
    rng = np.random.default_rng(43)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
    gen = torch.Generator(device="cuda").manual_seed(43)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    with recording("fused split-K") as rec:
        y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias)
        again = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias)
    assert {r.event.path for r in rec.events} == {"fused_mma"}
    assert torch.equal(y.view(torch.int16), again.view(torch.int16)), "the split-K order must be fixed"
    golden.check(f"fused_mma/splitk-{n}x{k}-m{m}-bf16-bias", y, key=golden.key_for("cuda"))


def test_a_split_fused_wgmma_plan_has_golden_bits(golden):
    """Both kinds of tile of the plan in one call: 132 whole 128-row tiles (one block each, no
    partial sums) and a partial left-over tile split in K, whose partials the finalize kernel sums
    in split order; the plan is tiling.wgmma_call_plan's for this GPU, as the CPU backend runs it."""
    from nvfp4_kernels.tiling import WGMMA_TILE_ROWS, wgmma_call_plan

    n, k, m = 132 * WGMMA_TILE_ROWS + 70, 1024, 200
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    whole, splits = wgmma_call_plan(n, k, m, sms)
    if sms == 132:
        assert (whole, splits) == (132, 8), "an H200's plan: every whole tile unsplit, the left-over one in 8"
    assert whole >= 1 and splits > 1, "the shape must have whole tiles and split ones on this GPU"
    assert cuda_backend.load_library().nvfp4_fused_wgmma_tile_rows() == WGMMA_TILE_ROWS
    rng = np.random.default_rng(44)
    packed = torch.from_numpy(rng.integers(0, 256, (n, k // 2), dtype=np.uint8)).cuda()
    scales = torch.from_numpy(rng.integers(0x28, 0x48, (n, k // 16), dtype=np.uint8)).cuda()
    gen = torch.Generator(device="cuda").manual_seed(44)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16)
    with recording("fused_wgmma plan") as rec:
        y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias)
        again = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias)
    assert {r.event.path for r in rec.events} == {"fused_wgmma"}
    assert torch.equal(y.view(torch.int16), again.view(torch.int16)), "the split-K order must be fixed"
    golden.check(f"fused_wgmma/plan-{n}x{k}-m{m}-bf16-bias", y, key=golden.key_for("cuda"))


def test_the_fused_kernel_occupancy_matches_the_cpu_stand_in():
    """The CPU backend chooses split counts with the H200 occupancy table; on an H200 it must be
    what the device reports, or the CPU runs a split structure the GPU does not."""
    from nvfp4_kernels.tiling import FUSED_OCCUPANCY_H200, fused_tile

    if "H200" not in torch.cuda.get_device_name(0) and "H100" not in torch.cuda.get_device_name(0):
        pytest.skip(f"the table is the H200's; this GPU is {torch.cuda.get_device_name(0)}")
    for m in (1, 16, 32, 64):
        assert cuda_backend.load_library().nvfp4_fused_occupancy(m) == FUSED_OCCUPANCY_H200[fused_tile(m)], m
