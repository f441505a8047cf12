"""The NVFP4 format: decode tables, byte tables, packing and the quantizer."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from nvfp4_harness.nvfp4 import tables
from nvfp4_kernels import nvfp4

pytestmark = pytest.mark.dispatch


def test_e2m1_table_matches_ml_dtypes_bit_for_bit():
    independent = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    assert np.array_equal(nvfp4.E2M1_TABLE.view(np.uint32), independent.view(np.uint32))
    assert nvfp4.E2M1_TABLE.view(np.uint32)[8] == 0x80000000  # code 0x8 is -0.0


def test_e4m3_table_matches_ml_dtypes_including_nan_and_sign():
    independent = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(nvfp4.E4M3_TABLE.view(np.uint32), independent.view(np.uint32))
    assert np.isnan(nvfp4.E4M3_TABLE[[0x7F, 0xFF]]).all()
    assert np.signbit(nvfp4.E4M3_TABLE[0xFF]) and not np.signbit(nvfp4.E4M3_TABLE[0x7F])
    assert nvfp4.E4M3_TABLE[0x01] == 2.0**-9  # smallest subnormal
    assert nvfp4.E4M3_TABLE[0x7E] == 448.0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_committed_fp4x2_table_equals_ml_dtypes(dtype):
    stored = tables.parse_table((tables.TABLE_DIR / f"e2m1x2_to_{dtype}.csv").read_text())
    target = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    byte = np.arange(256, dtype=np.uint8)
    fp4 = ml_dtypes.float4_e2m1fn
    low = (byte & 0x0F).view(fp4).astype(np.float32).astype(target).view(np.uint16)
    high = (byte >> 4).view(fp4).astype(np.float32).astype(target).view(np.uint16)
    assert np.array_equal(stored[:, 0], low) and np.array_equal(stored[:, 1], high)
    assert stored[0x08, 0] == 0x8000 and stored[0x80, 1] == 0x8000  # -0.0 kept in both nibbles


def test_committed_e4m3_table_equals_ml_dtypes():
    stored = tables.parse_table((tables.TABLE_DIR / "e4m3_to_float32.csv").read_text())[:, 0]
    independent = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert np.array_equal(stored.astype(np.uint32), independent.view(np.uint32))


def test_committed_tables_match_their_sha256_sums():
    assert tables.check() == []


def test_table_check_reports_a_tampered_file(tmp_path):
    tables.write(tmp_path)
    path = tmp_path / "e2m1x2_to_float16.csv"
    path.write_text(path.read_text().replace("0x01,0x3800", "0x01,0x3801"))
    problems = tables.check(tmp_path)
    assert any("differs" in p for p in problems) and any("SHA-256" in p for p in problems)


def test_low_nibble_holds_the_even_element():
    codes = np.array([[1, 2, 3, 4]], dtype=np.uint8)
    packed = nvfp4.pack_codes(codes)
    assert packed.tolist() == [[0x21, 0x43]]
    assert np.array_equal(nvfp4.unpack_codes(packed), codes)


@given(st.integers(1, 6), st.integers(1, 40).map(lambda h: 2 * h), st.integers(0, 2**32 - 1))
def test_pack_unpack_round_trip(n, k, seed):
    codes = np.random.default_rng(seed).integers(0, 16, (n, k), dtype=np.uint8)
    assert np.array_equal(nvfp4.unpack_codes(nvfp4.pack_codes(codes)), codes)


def test_pack_rejects_odd_k_and_out_of_range_codes():
    with pytest.raises(ValueError, match="K must be even"):
        nvfp4.pack_codes(np.zeros((1, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="0..15"):
        nvfp4.pack_codes(np.full((1, 2), 16))


def test_round_to_e2m1_ties_to_even_and_saturates():
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -0.1, -5.0], dtype=np.float32)
    # expected from the E2M1 grid: ties go to the code whose mantissa bit is 0
    grid = np.array(nvfp4.E2M1_MAGNITUDES)
    want = []
    for v in x:
        mag = min(abs(float(v)), 6.0)
        dist = np.abs(grid - mag)
        best = np.flatnonzero(dist == dist.min())
        code = int(best[0] if len(best) == 1 else best[best % 2 == 0][0])
        want.append(code | (8 if v < 0 else 0))
    assert nvfp4.round_to_e2m1_codes(x).tolist() == want


def _dequant32(packed, scales, g, block_size):
    k = packed.shape[1] * 2
    values = nvfp4.e2m1_decode(nvfp4.unpack_codes(packed))
    block = np.arange(k) // block_size
    return values * (nvfp4.e4m3_decode(scales)[:, block] * np.float32(g))


@pytest.mark.parametrize("block_size", [16, 32, 7])
def test_quantization_error_is_bounded_by_the_block_scale(block_size):
    rng = np.random.default_rng(block_size)
    w = (rng.standard_normal((64, 224)) * rng.lognormal(0, 1, (64, 1))).astype(np.float32)
    packed, scales, g = nvfp4.quantize(w, block_size)
    deq = _dequant32(packed, scales, g, block_size)
    block_scale = nvfp4.e4m3_decode(scales)[:, np.arange(224) // block_size] * g
    # worst case: half the widest E2M1 gap (between 4 and 6) plus E4M3 rounding of the scale
    assert np.all(np.abs(deq - w) <= 1.0 * block_scale + 1e-30)
    assert np.abs(deq - w).mean() < 0.1 * np.abs(w).mean()


def test_quantize_of_dequantize_is_a_fixed_point():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 512)).astype(np.float32)  # block scales stay in E4M3's normal range
    packed, scales, g = nvfp4.quantize(w, 16)
    again = nvfp4.quantize(_dequant32(packed, scales, g, 16), 16)
    assert np.array_equal(again[0], packed) and np.array_equal(again[1], scales) and again[2] == g


def test_quantize_rejects_non_finite_weights_and_bad_arguments():
    with pytest.raises(ValueError, match="NaN or inf"):
        nvfp4.quantize(np.array([[np.nan, 1.0]], dtype=np.float32))
    with pytest.raises(ValueError, match="block_size"):
        nvfp4.quantize(np.ones((1, 2), dtype=np.float32), 0)
    with pytest.raises(ValueError, match="even"):
        nvfp4.quantize(np.ones((1, 3), dtype=np.float32))
