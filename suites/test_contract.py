"""Every CPU dequant path is bit-exact with the contract, checked against the exact oracle.

The oracle (:mod:`nvfp4_harness.nvfp4.oracle`) computes each element independently of kernels/ (ml_dtypes
decoding, exact products, integer rounding), so agreement here means the per-path index
arithmetic and scale tracking of :mod:`nvfp4_kernels.reference` reproduce docs/contract.md.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nvfp4_harness.nvfp4 import oracle
from nvfp4_harness.nvfp4.verify import compare_bitwise
from nvfp4_kernels import reference

pytestmark = pytest.mark.dispatch

BLOCK_SIZES = [1, 2, 5, 6, 7, 12, 16, 32, 64]
KS = [2, 8, 12, 24, 70, 120, 1004, 1020, 4096]
#: global scales: plain, arbitrary, products that go fp32-subnormal, fp16 overflow, fp32 overflow
GLOBAL_SCALES = [1.0, 0.0123, 2.0**-133, 1.0e3, 3.0e38]
#: scale bytes worth forcing: zero, subnormals, max normal, negatives, both NaNs
SPECIAL_SCALE_BYTES = np.array([0x00, 0x01, 0x07, 0x08, 0x7E, 0x80, 0x81, 0xFE, 0x7F, 0xFF], np.uint8)


def _paths(k: int, block_size: int) -> list[str]:
    return ["scalar", "vec8"] if reference.vec8_supported(k, block_size) else ["scalar"]


def _operands(rng: np.random.Generator, n: int, k: int, block_size: int):
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    nsc = -(-k // block_size)
    scales = rng.integers(0, 256, (n, nsc), dtype=np.uint8)
    # make sure the special bytes appear, including in the (possibly partial) last block
    flat = scales.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, len(SPECIAL_SCALE_BYTES)), replace=False)
    flat[picks] = SPECIAL_SCALE_BYTES[: len(picks)]
    scales[:, -1] = SPECIAL_SCALE_BYTES[rng.integers(0, len(SPECIAL_SCALE_BYTES), n)]
    return packed, scales


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
def test_every_path_matches_the_oracle(block_size, k):
    rng = np.random.default_rng(block_size * 10007 + k)
    n = 4 if k >= 1000 else 6
    packed, scales = _operands(rng, n, k, block_size)
    for g in GLOBAL_SCALES:
        for dtype in ("float16", "bfloat16"):
            want = oracle.dequantize_bits(packed, scales, g, block_size, dtype)
            for path in _paths(k, block_size):
                got = reference.dequantize(packed, scales, np.float32(g), block_size, dtype, path)
                diff = compare_bitwise(want, got.view(np.uint16))
                assert diff, f"path={path} dtype={dtype} g={g}: {diff}"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_code_at_every_chunk_position(dtype):
    # row r, position p inside an 8-value chunk holds code (r + p) % 16: all 16 codes x 8 positions
    n, k = 16, 64
    element = np.arange(k)
    codes = ((np.arange(n)[:, None] + element[None, :] % 8) % 16).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    for block_size in (2, 4, 6, 8, 10, 16):
        scales = np.random.default_rng(block_size).integers(0x30, 0x50, (n, -(-k // block_size)), np.uint8)
        want = oracle.dequantize_bits(packed, scales, 0.75, block_size, dtype)
        for path in _paths(k, block_size):
            got = reference.dequantize(packed, scales, np.float32(0.75), block_size, dtype, path)
            assert compare_bitwise(want, got.view(np.uint16)), (path, block_size)


def test_negative_zero_and_nan_bits():
    packed = np.array([[0x08, 0x80, 0x11]], np.uint8)  # codes: 8,0, 0,8, 1,1
    scales = np.array([[0x38, 0x7F, 0xB8]], np.uint8)  # block size 2: +1.0, NaN, -1.0
    # -0.0 from code 8 under a positive scale; canonical NaN under the NaN byte; -0.5 under -1.0
    for path in ("scalar", "vec8"):
        if path == "vec8":  # vec8 needs K % 8 == 0: pad to 8 values with a fourth byte/scale
            packed = np.append(packed, np.zeros((1, 1), np.uint8), 1)
            scales = np.append(scales, np.full((1, 1), 0x38, np.uint8), 1)
        got = reference.dequantize(packed, scales, np.float32(1.0), 2, "bfloat16", path).view(np.uint16)
        assert got[0, :6].tolist() == [0x8000, 0x0000, 0x7FFF, 0x7FFF, 0xBF00, 0xBF00], path


def test_vec8_refuses_shapes_outside_its_guard():
    packed = np.zeros((2, 5), np.uint8)
    with pytest.raises(ValueError, match="K % 8 == 0 and an even block_size"):
        reference.dequantize_vec8(packed, np.zeros((2, 1), np.uint8), 1.0, 16)
    with pytest.raises(ValueError, match="K % 8 == 0 and an even block_size"):
        reference.dequantize_vec8(np.zeros((2, 4), np.uint8), np.zeros((2, 2), np.uint8), 1.0, 7)


def test_reference_rejects_a_wrong_scale_shape():
    with pytest.raises(ValueError, match="weight_scale must have shape"):
        reference.dequantize(np.zeros((2, 4), np.uint8), np.zeros((2, 2), np.uint8), 1.0, 16)


@st.composite
def _problems(draw):
    block_size = draw(st.integers(1, 40))
    k = 2 * draw(st.integers(1, 80))
    n = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    g = draw(st.sampled_from(GLOBAL_SCALES) | st.floats(2.0**-20, 2.0**20, width=32).map(float))
    dtype = draw(st.sampled_from(["float16", "bfloat16"]))
    return block_size, k, n, seed, g, dtype


@given(_problems())
def test_paths_agree_with_the_oracle_on_random_problems(problem):
    block_size, k, n, seed, g, dtype = problem
    packed, scales = _operands(np.random.default_rng(seed), n, k, block_size)
    want = oracle.dequantize_bits(packed, scales, g, block_size, dtype)
    for path in _paths(k, block_size):
        got = reference.dequantize(packed, scales, np.float32(g), block_size, dtype, path)
        assert compare_bitwise(want, got.view(np.uint16)), path


def test_oracle_rounding_helper_against_known_formats():
    # cross-check the oracle's integer rounding against numpy's casts on values with exact answers
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(200) * 10.0 ** rng.integers(-8, 6, 200),
                             [65504.0, 65520.0, 65519.99, 2.0**-24, 2.0**-25, 3 * 2.0**-26, -0.0]])
    for v in values:
        with np.errstate(over="ignore"):  # 65520 rounds to fp16 inf, which is the point
            expected16 = int(np.float16(np.float32(v)).view(np.uint16))
        assert oracle.round_to_binary(float(v), "float32") == int(np.float32(v).view(np.uint32))
        v32 = float(np.float32(v))
        assert oracle.round_to_binary(v32, "float16") == expected16
