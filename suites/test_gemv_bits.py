"""The GEMV's decoded weights, read out through the kernel itself, against the contract.

With A = rows of the identity (8 at a time: the GEMV takes M <= 8), each output element has one
non-zero product, 1 * W[n, k], so Y = W^T exactly (docs/contract.md). The sweep covers the
global scales of the contract's checks and the scale bytes of the special-byte table (NaN bytes
apart: 0 * NaN is NaN, so a NaN scale makes its whole output column NaN, which is checked on its
own), including the exact slow path (block scale times global scale times 2^14 overflowing
fp32). A GPU-keyed golden pins the output bits of a split-K GEMV, so a change in the fixed order
of its reduction is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.nvfp4.shapes import oracle_dequantize

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
N, K = 40, 96


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


def read_out(packed, scales, g, dtype: str) -> np.ndarray:
    """Y = I @ W^T through the GEMV, 8 identity rows per call; returns W as the GEMV decoded it."""
    k = 2 * packed.shape[1]
    tdt = getattr(torch, dtype)
    b, s = torch.from_numpy(packed).cuda(), torch.from_numpy(scales).cuda()
    eye = torch.eye(k, dtype=tdt, device="cuda")
    rows = []
    with recording("gemv readout") as rec:
        for k0 in range(0, k, 8):
            rows.append(nvfp4_kernels.nvfp4_matmul(eye[k0:k0 + 8], b, s, np.float32(g), 16))
    assert {r.event.path for r in rec.events} == {"gemv"}
    y = torch.cat(rows).t().contiguous()  # [N, K]
    return y.view(torch.int16).cpu().numpy().view(np.uint16)


@pytest.mark.parametrize("dtype,g", SWEEP, ids=[f"{d}-g{g:.3g}" for d, g in SWEEP])
def test_the_gemv_decodes_every_weight_to_the_contracts_bits(dtype, g):
    packed, scales, w = weights(7, dtype, g)
    assert len(packed) >= N // 2, "most rows must stay finite for the case to mean something"
    got = read_out(packed, scales, g, dtype)
    want = w.view(np.uint16).copy()
    want[want == 0x8000] = 0  # -0.0 reads out as +0.0: its sum with the other products' +0.0
    assert np.array_equal(got, want), f"first difference at {np.argwhere(got != want)[0].tolist()}"


def test_a_nan_scale_makes_its_whole_column_nan_and_no_other():
    rng = np.random.default_rng(3)
    packed = rng.integers(0, 256, (16, K // 2), dtype=np.uint8)
    scales = np.full((16, K // 16), 0x38, np.uint8)
    scales[5, 2] = 0x7F
    scales[9, 0] = 0xFF
    got = read_out(packed, scales, 0.5, "bfloat16").view(np.int16)
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
    y = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias)
    again = nvfp4_kernels.nvfp4_matmul(a, packed, scales, np.float32(0.0123), 16, bias)
    assert torch.equal(y.view(torch.int16), again.view(torch.int16)), "the split-K order must be fixed"
    golden.check(f"gemv/splitk-{n}x{k}-m4-bf16-bias", y, key=golden.key_for("cuda"))
