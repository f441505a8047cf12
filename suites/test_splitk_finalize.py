"""The split-K finalize kernel's body, run on the host: the sums, the bias, the rounding and which
outputs each thread writes, at both vector widths.

kernels/cuda/mma_decode.cuh's ``splitk_finalize_thread`` is ``__host__ __device__``: the kernel is
that function behind one wait for its split kernel. suites/host/splitk_finalize_on_host.cu runs
it for every thread of the grid ``launch_splitk_finalize`` would launch (nvcc, host code, so no
GPU is needed), and these tests compare every output with numpy: fp32 sums of the partials in
split order from +0.0, the bias added in fp32, one rounding to T by torch. The GPU suites pin the
same kernel's bits on the device (split-K goldens and the ``splitk-order-reversed`` mutant).
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from nvfp4_kernels import build

HOST_SOURCE = Path(__file__).resolve().parent / "host" / "splitk_finalize_on_host.cu"
KERNEL_HEADERS = Path(build.__file__).resolve().parent / "cuda"
#: kernels/cuda/mma_decode.cuh's kFinalizeThreads (its kFinalizeChunk, 8, is what SHAPES' split
#: counts straddle)
THREADS = 128
POISON = 0xBEEF


@pytest.fixture(scope="module")
def host_lib(tmp_path_factory) -> ctypes.CDLL:
    try:
        nvcc = build.find_nvcc()
    except build.NvccNotFound as exc:
        pytest.skip(str(exc))
    out = tmp_path_factory.mktemp("finalize") / "libfinalize_on_host.so"
    done = subprocess.run([nvcc, *build.BASE_FLAGS, "-arch=sm_90", "-shared", f"-I{KERNEL_HEADERS}", "-o", str(out),
                           str(HOST_SOURCE)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lib = ctypes.CDLL(str(out))
    lib.nvfp4_test_finalize_on_host.restype = ctypes.c_longlong
    lib.nvfp4_test_finalize_on_host.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                ctypes.c_int]
    lib.nvfp4_test_finalize_vector_width.restype = ctypes.c_int
    lib.nvfp4_test_finalize_vector_width.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                                     ctypes.c_int]
    return lib


TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def to_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """fp32 -> T (round to nearest even, by torch) -> the uint16 bits."""
    return torch.from_numpy(np.ascontiguousarray(values)).to(TORCH_DTYPES[dtype]).view(torch.int16).numpy().view(
        np.uint16)


def from_bits(bits: np.ndarray, dtype: str) -> np.ndarray:
    return torch.from_numpy(bits.view(np.int16)).view(TORCH_DTYPES[dtype]).to(torch.float32).numpy()


def expected(partial: np.ndarray, bias_bits: np.ndarray | None, col0: int, dtype: str) -> np.ndarray:
    """The contract's epilogue in numpy: [splits, m, cols] fp32 -> [m, cols] bits of T."""
    acc = np.zeros(partial.shape[1:], dtype=np.float32)  # +0.0
    with np.errstate(over="ignore", invalid="ignore"):  # the overflows and inf - inf are meant
        for split in partial:
            acc = (acc + split).astype(np.float32)
        if bias_bits is not None:
            acc = (acc + from_bits(bias_bits[col0:], dtype)[None, :]).astype(np.float32)
    return to_bits(acc, dtype)


def partials(rng: np.random.Generator, splits: int, m: int, cols: int, dtype: str) -> np.ndarray:
    """Random partial sums with the values a sum must get right sprinkled in: signed zeros, NaN,
    infinities, fp32 subnormals, and magnitudes whose sum overflows T (fp16) or fp32 (bf16)."""
    p = (rng.standard_normal((splits, m, cols)) * rng.choice([1e-3, 1.0, 300.0], (splits, m, cols))).astype(np.float32)
    big = 40000.0 if dtype == "float16" else 2.0e38
    specials = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-40, -3e-42, big, -big], dtype=np.float32)
    mask = rng.random(p.shape) < 0.05
    p[mask] = rng.choice(specials, int(mask.sum()))
    return p


def run(lib: ctypes.CDLL, dtype: str, vec: int, partial: np.ndarray, bias_bits: np.ndarray | None, m: int, n: int,
        col0: int) -> tuple[np.ndarray, int]:
    out = np.full((m, n), POISON, dtype=np.uint16)
    part = np.ascontiguousarray(partial, dtype=np.float32)
    threads = lib.nvfp4_test_finalize_on_host(int(dtype == "bfloat16"), vec, part.ctypes.data,
                                              None if bias_bits is None else bias_bits.ctypes.data, out.ctypes.data,
                                              m, n, partial.shape[0], col0)
    return out, threads


def assert_same_outputs(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    """Bit for bit, except that any NaN matches any NaN (the device rounds NaN to its canonical
    bits, torch to its own)."""
    got_nan = np.isnan(from_bits(got, dtype))
    want_nan = np.isnan(from_bits(want, dtype))
    np.testing.assert_array_equal(got_nan, want_nan)
    np.testing.assert_array_equal(got[~got_nan], want[~want_nan])


#: (m, n, col0, splits): fused_mma's and the GEMV's whole outputs (col0 = 0) and fused_wgmma's
#: left-over tiles (col0 a multiple of 128), split counts inside one chunk of loads, at its end and
#: past it, and rows whose length is not a multiple of 4 (only the one-output threads take them)
SHAPES = [(1, 64, 0, 7), (16, 1024, 0, 5), (3, 260, 128, 9), (2, 384, 256, 8), (4, 300, 128, 1), (1, 4096, 0, 16),
          (2, 250, 0, 17), (5, 37, 0, 3)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize(("m", "n", "col0", "splits"), SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_every_covered_output_is_the_split_order_sum_at_each_width(host_lib, dtype: str, m: int, n: int, col0: int,
                                                                   splits: int, with_bias: bool) -> None:
    rng = np.random.default_rng([m, n, col0, splits, int(with_bias), len(dtype)])
    cols = n - col0
    part = partials(rng, splits, m, cols, dtype)
    bias_bits = to_bits((rng.standard_normal(n) * 4).astype(np.float32), dtype) if with_bias else None
    want = expected(part, bias_bits, col0, dtype)
    widths = [1, 4] if n % 4 == 0 and col0 % 4 == 0 else [1]
    for vec in widths:
        out, threads = run(host_lib, dtype, vec, part, bias_bits, m, n, col0)
        # whole blocks of threads, the last one with at least one thread that has outputs
        assert threads % THREADS == 0 and (threads - THREADS) * vec < m * cols <= threads * vec, (vec, threads)
        assert_same_outputs(out[:, col0:], want, dtype)
        # the columns before col0 (fused_wgmma's whole tiles, written by its own kernel) are not touched
        assert (out[:, :col0] == POISON).all(), vec


def test_the_sum_starts_from_positive_zero_in_split_order(host_lib) -> None:
    """-0.0 + -0.0 ... summed from +0.0 is +0.0 (IEEE: x + (-0) = x, +0 + -0 = +0), and an order
    change shows: with 1, 2^24 and -2^24 the split order (1 + 2^24 rounds to 2^24, then - 2^24)
    gives 0, the reverse order 1."""
    m, n = 1, 8
    zeros = np.full((3, m, n), -0.0, dtype=np.float32)
    for vec in (1, 4):
        out, _ = run(host_lib, "bfloat16", vec, zeros, None, m, n, 0)
        assert (out == 0x0000).all(), (vec, out)
    order = np.zeros((3, m, n), dtype=np.float32)
    order[0], order[1], order[2] = 1.0, 2.0 ** 24, -(2.0 ** 24)
    for vec in (1, 4):
        out, _ = run(host_lib, "bfloat16", vec, order, None, m, n, 0)
        assert (out == 0x0000).all(), (vec, out)
    reverse = order[::-1].copy()
    out, _ = run(host_lib, "bfloat16", 4, reverse, None, m, n, 0)
    assert (from_bits(out, "bfloat16") == 1.0).all(), out


def test_the_vector_width_is_4_only_where_loads_and_stores_stay_aligned_in_one_row(host_lib) -> None:
    buf = np.zeros(64, dtype=np.float32)
    base = (buf.ctypes.data + 15) // 16 * 16  # a 16-byte aligned address inside buf
    width = host_lib.nvfp4_test_finalize_vector_width
    assert width(base, base, base, 4096, 0) == 4
    assert width(base, None, base, 17408, 256) == 4  # no bias
    assert width(base, base, base, 4096, 128) == 4
    assert width(base + 4, base, base, 4096, 0) == 1  # partials not 16-byte aligned
    assert width(base + 8, base, base, 4096, 0) == 1
    assert width(base, base, base + 2, 4096, 0) == 1  # output not 8-byte aligned
    assert width(base, base + 4, base, 4096, 0) == 1  # bias not 8-byte aligned
    assert width(base, base, base, 4098, 0) == 1  # rows of n % 4 != 0 outputs
    assert width(base, base, base, 37, 0) == 1
    assert width(base, base, base, 4096, 130) == 1  # covered columns not a multiple of 4


def test_a_planted_wrong_sum_is_caught(host_lib) -> None:
    """The comparison above can fail: the last split dropped from the reference, or the split
    order reversed, must not match what the kernel's body gives. Splits 0..2 are a in [1, 2),
    2^20 and -2^20: in split order a is rounded to a multiple of 1/8 on the way (T keeps 2^-7),
    in reverse order it stays whole."""
    rng = np.random.default_rng(7)
    m, n, splits = 4, 256, 9
    part = (rng.standard_normal((splits, m, n)) * 1e-3).astype(np.float32)
    part[0] = rng.uniform(1.0, 2.0, (m, n)).astype(np.float32)
    part[1], part[2] = 2.0 ** 20, -(2.0 ** 20)
    out, _ = run(host_lib, "bfloat16", 4, part, None, m, n, 0)
    assert_same_outputs(out, expected(part, None, 0, "bfloat16"), "bfloat16")
    with pytest.raises(AssertionError):
        assert_same_outputs(out, expected(part[:-1], None, 0, "bfloat16"), "bfloat16")
    with pytest.raises(AssertionError):
        assert_same_outputs(out, expected(part[::-1], None, 0, "bfloat16"), "bfloat16")
