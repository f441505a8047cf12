"""Tensor hashing and bitwise comparison (nvfp4_harness.nvfp4.verify)."""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np
import pytest
import torch
from nvfp4_harness.nvfp4.verify import assert_bitwise_equal, compare_bitwise, relative_error, tensor_sha256


def test_hash_is_the_documented_header_plus_little_endian_bytes():
    x = np.array([[1.0, -2.0, 0.5]], dtype=np.float16)
    expected = hashlib.sha256(b"float16|1,3|" + x.astype("<f2").tobytes()).hexdigest()
    assert tensor_sha256(x) == expected


@pytest.mark.parametrize("torch_dtype,numpy_dtype", [(torch.float16, np.float16),
                                                     (torch.bfloat16, ml_dtypes.bfloat16),
                                                     (torch.uint8, np.uint8),
                                                     (torch.float32, np.float32)])
def test_numpy_and_torch_give_the_same_hash(torch_dtype, numpy_dtype):
    t = (torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) - 7).to(torch_dtype)
    a = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7).astype(numpy_dtype)
    assert tensor_sha256(t) == tensor_sha256(a)
    non_contiguous = t.transpose(0, 1).contiguous().transpose(0, 1)  # same values, other strides
    assert not non_contiguous.is_contiguous() and tensor_sha256(non_contiguous) == tensor_sha256(a)


def test_hash_depends_on_shape_dtype_and_every_bit():
    x = np.zeros(4, dtype=np.float16)
    base = tensor_sha256(x)
    assert tensor_sha256(x.reshape(2, 2)) != base
    assert tensor_sha256(x.view(np.uint16)) != base
    y = x.copy()
    y[3] = -0.0
    assert tensor_sha256(y) != base


def test_negative_zero_and_nan_payloads_are_differences():
    a = np.array([0.0, np.nan], dtype=np.float32)
    b = a.copy()
    b[0] = -0.0
    diff = compare_bitwise(a, b)
    assert not diff and diff.mismatches == 1 and diff.first[0] == ((0,), 0, 0x80000000)
    c = a.copy()
    c.view(np.uint32)[1] = 0x7FC00001
    assert compare_bitwise(a, c).mismatches == 1


def test_diff_report_counts_and_shows_bits():
    a = np.zeros((3, 3), dtype=ml_dtypes.bfloat16)
    b = a.copy()
    b[1, 2] = 1.0
    b[2, 0] = -2.0
    diff = compare_bitwise(a, b)
    text = str(diff)
    assert diff.mismatches == 2 and diff.total == 9
    assert "2 of 9 elements differ" in text and "[1, 2]: expected 0x0000, got 0x3f80" in text
    with pytest.raises(AssertionError, match="scratch: 2 of 9"):
        assert_bitwise_equal(a, b, "scratch")


def test_dtype_and_shape_mismatch_are_reported_before_bits():
    assert "dtype differs" in str(compare_bitwise(np.zeros(2, np.float16), np.zeros(2, np.float32)))
    assert "shape differs" in str(compare_bitwise(np.zeros(2, np.float16), np.zeros(3, np.float16)))
    assert compare_bitwise(np.ones(2, np.float16), torch.ones(2, dtype=torch.float16))


def test_relative_error():
    ref = np.array([3.0, 4.0])
    assert relative_error(ref, ref) == 0.0
    assert relative_error(ref, np.array([3.0, 4.5])) == pytest.approx(0.1)
    assert relative_error(ref, np.array([np.nan, 4.0])) == float("inf")
