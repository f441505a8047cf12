"""The CPU backend: one numpy implementation per dispatch path, each following its own kernel.

These are not one shared function behind several names. Each function below reproduces
the index arithmetic and scale bookkeeping of the CUDA kernel it stands for, so that a CPU
CI run exercises every path's own algorithm (an off-by-one in the vec8 scale tracking shows
up here, not only on a GPU):

* :func:`dequantize_scalar` - one packed byte at a time, row and block found by division of
  the flat byte index, a separate scale per nibble (odd block sizes split a byte).
* :func:`dequantize_vec8` - one 32-bit word (8 values) at a time, the starting block computed
  once per chunk and a remaining-pairs counter that advances the scale mid-chunk.
* :func:`gemv` - decode fused with an fp32 dot product; bias added before the single rounding.
* :func:`fused_mma` - the same decode, fp32 sums per K split, partials summed in split order.
* :func:`fused_wgmma` - fused_mma's sums with the wgmma kernel's plan: whole tiles unsplit, the rest split.
* :func:`prefill` - dequantize to a scratch buffer, fp32-accumulated matmul, round, add bias.

Every element follows the contract of docs/contract.md:
``W = to_T(e2m1(code) * (e4m3(scale) * g))`` with IEEE fp32 multiplies. NaN results are
written as the canonical NaN 0x7FFF, the pattern NVIDIA's f32->f16/bf16 conversions produce,
so the dequantized bits are identical on every backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import ml_dtypes
import numpy as np
from nvfp4_kernels.model import FUSED_K_MULTIPLE
from nvfp4_kernels.nvfp4 import CANONICAL_NAN_BITS, E2M1_TABLE, E4M3_TABLE

DTypeName = Literal["float16", "bfloat16"]
_NUMPY_DTYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
#: Bytes processed per step by the per-byte and per-chunk loops, to bound scratch memory.
_TILE_BYTES = 1 << 22


_F = TypeVar("_F", bound=Callable[..., Any])


def _ieee(fn: _F) -> _F:
    """Silence numpy's warnings for overflow to inf, 0 * inf and subnormal underflow: the
    contract asks for exactly those IEEE results, so they are answers, not accidents."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def numpy_dtype(dtype: str | np.dtype | type) -> np.dtype:
    """Map ``"float16"`` / ``"bfloat16"`` (or the numpy / ml_dtypes types) to a numpy dtype."""
    if isinstance(dtype, str):
        if dtype not in _NUMPY_DTYPES:
            raise ValueError(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
        return _NUMPY_DTYPES[dtype]
    resolved = np.dtype(dtype)
    if resolved not in _NUMPY_DTYPES.values():
        raise ValueError(f"dtype must be float16 or bfloat16, got {resolved}")
    return resolved


def dtype_name(dtype: str | np.dtype | type) -> DTypeName:
    """The canonical name (``"float16"`` or ``"bfloat16"``) of an output dtype."""
    resolved = numpy_dtype(dtype)
    return "float16" if resolved == np.float16 else "bfloat16"


@_ieee
def round_fp32_to(values: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """Round float32 values to fp16/bf16 (nearest even; fp16 overflow gives inf), NaN canonical."""
    target = numpy_dtype(dtype)
    out = np.asarray(values, dtype=np.float32).astype(target)
    nan = np.isnan(values)
    if nan.any():
        out.view(np.uint16)[nan] = CANONICAL_NAN_BITS
    return out


def _check_operands(packed: np.ndarray, weight_scale: np.ndarray, block_size: int) -> None:
    if packed.dtype != np.uint8 or packed.ndim != 2:
        raise ValueError(f"packed must be a 2-D uint8 array [N, K/2], got {packed.dtype} {packed.shape}")
    if weight_scale.dtype != np.uint8 or weight_scale.ndim != 2:
        raise ValueError(
            f"weight_scale must be a 2-D uint8 array [N, ceil(K/block_size)], got "
            f"{weight_scale.dtype} {weight_scale.shape}"
        )
    if block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    n, half = packed.shape
    expected = (n, -(-2 * half // block_size))
    if weight_scale.shape != expected:
        raise ValueError(f"weight_scale must have shape {expected} for K={2 * half}, "
                         f"block_size={block_size}; got {weight_scale.shape}")


@_ieee
def dequantize_scalar(
    packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float, block_size: int,
    dtype: str = "bfloat16",
) -> np.ndarray:
    """The scalar kernel: one packed byte per 'thread', two scales per byte, two stores."""
    packed = np.ascontiguousarray(packed)
    scales = np.ascontiguousarray(weight_scale)
    _check_operands(packed, scales, block_size)
    n, half = packed.shape
    k, nsc = 2 * half, scales.shape[1]
    flat_bytes, flat_scales = packed.reshape(-1), scales.reshape(-1)
    out = np.empty(n * k, dtype=numpy_dtype(dtype))
    for start in range(0, flat_bytes.size, _TILE_BYTES):
        idx = np.arange(start, min(start + _TILE_BYTES, flat_bytes.size), dtype=np.int64)
        g = np.float32(weight_scale_2)  # loaded by every thread
        row = idx // half
        k_even = 2 * (idx - row * half)
        scale_lo = E4M3_TABLE[flat_scales[row * nsc + k_even // block_size]] * g
        scale_hi = E4M3_TABLE[flat_scales[row * nsc + (k_even + 1) // block_size]] * g
        byte = flat_bytes[idx]
        out[2 * idx] = round_fp32_to(E2M1_TABLE[byte & 0x0F] * scale_lo, dtype)
        out[2 * idx + 1] = round_fp32_to(E2M1_TABLE[byte >> 4] * scale_hi, dtype)
    return out.reshape(n, k)


def vec8_supported(k: int, block_size: int) -> bool:
    """The vec8 kernel's shape guard: whole 8-value chunks and both nibbles under one scale."""
    return k % 8 == 0 and block_size % 2 == 0


@_ieee
def dequantize_vec8(
    packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float, block_size: int,
    dtype: str = "bfloat16",
) -> np.ndarray:
    """The vec8 kernel: one 32-bit word (8 values) per 'thread', incremental scale tracking."""
    packed = np.ascontiguousarray(packed)
    scales = np.ascontiguousarray(weight_scale)
    _check_operands(packed, scales, block_size)
    n, half = packed.shape
    k = 2 * half
    if not vec8_supported(k, block_size):
        raise ValueError(
            f"the vec8 path needs K % 8 == 0 and an even block_size (got K={k}, "
            f"block_size={block_size}); use path='scalar' or let the guards choose"
        )
    chunks_per_row = k // 8
    words = packed.reshape(n, chunks_per_row, 4).view("<u4")[..., 0]  # one 32-bit load per chunk
    out = np.empty((n, chunks_per_row, 8), dtype=numpy_dtype(dtype))
    g = np.float32(weight_scale_2)  # read once, kept in a register
    pairs_per_block = block_size // 2
    rows_per_tile = max(1, _TILE_BYTES // max(1, half))
    for r0 in range(0, n, rows_per_tile):
        w = words[r0:r0 + rows_per_tile]
        row_scales = scales[r0:r0 + rows_per_tile]
        k_start = 8 * np.arange(chunks_per_row, dtype=np.int64)
        block = np.broadcast_to(k_start // block_size, w.shape).copy()
        remaining = (block_size * (block + 1) - k_start) // 2  # pairs left in the current block
        rows = np.arange(w.shape[0])[:, None]
        for pair in range(4):  # byte `pair` of the word holds values 2*pair, 2*pair+1
            scale = E4M3_TABLE[row_scales[rows, np.minimum(block, row_scales.shape[1] - 1)]] * g
            byte = (w >> np.uint32(8 * pair)) & np.uint32(0xFF)
            out[r0:r0 + w.shape[0], :, 2 * pair] = round_fp32_to(E2M1_TABLE[byte & 0x0F] * scale, dtype)
            out[r0:r0 + w.shape[0], :, 2 * pair + 1] = round_fp32_to(E2M1_TABLE[byte >> 4] * scale, dtype)
            remaining -= 1
            advance = remaining == 0  # the scale boundary can fall inside this chunk
            block += advance
            remaining[advance] = pairs_per_block
    return out.reshape(n, k)


def dequantize(
    packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float, block_size: int,
    dtype: str = "bfloat16", path: str | None = None,
) -> np.ndarray:
    """Dequantize [N, K/2] packed codes to [N, K] fp16/bf16 on the CPU.

    ``path`` is ``None`` (vec8 where its shape guard holds, otherwise scalar), ``"scalar"`` or
    ``"vec8"``; every path returns the same bits.
    """
    packed = np.asarray(packed)
    if path is None:
        path = "vec8" if vec8_supported(2 * packed.shape[-1], block_size) else "scalar"
    if path == "scalar":
        return dequantize_scalar(packed, weight_scale, weight_scale_2, block_size, dtype)
    if path == "vec8":
        return dequantize_vec8(packed, weight_scale, weight_scale_2, block_size, dtype)
    raise ValueError(f"path must be None, 'scalar' or 'vec8', got {path!r}")


@_ieee
def accumulate_fp32(a32: np.ndarray, w32_t: np.ndarray) -> np.ndarray:
    """[M, K] @ [K, N] with float32 products and a float32 running sum in k order.

    Written as a k loop of elementwise IEEE operations rather than a BLAS call so that the
    CPU result is the same on every machine (BLAS picks its summation order per CPU).
    """
    m, n = a32.shape[0], w32_t.shape[1]
    acc = np.zeros((m, n), dtype=np.float32)
    for kk in range(a32.shape[1]):
        acc += a32[:, kk:kk + 1] * w32_t[kk]
    return acc


GEMV_ROWS_PER_TILE = 1024


def _decoded_rows_t(packed_tile: np.ndarray, scale_tile: np.ndarray, g: np.float32, dtype: str) -> np.ndarray:
    """W^T of a tile of rows (block size 16) as float32 values of T: what the fused kernels
    hold in their MMA fragments after decoding in registers."""
    rows, k = packed_tile.shape[0], 2 * packed_tile.shape[1]
    codes = np.empty((rows, k), dtype=np.uint8)
    codes[:, 0::2], codes[:, 1::2] = packed_tile & 0x0F, packed_tile >> 4
    block_scale = E4M3_TABLE[scale_tile] * g  # one per 16 values
    w = E2M1_TABLE[codes].reshape(rows, k // 16, 16) * block_scale[..., None]
    return np.ascontiguousarray(round_fp32_to(w.reshape(rows, k), dtype).astype(np.float32).T)


def _check_fused_operands(a: np.ndarray, packed: np.ndarray, weight_scale: np.ndarray, block_size: int,
                          k_multiple: int, path: str) -> None:
    _check_operands(packed, np.asarray(weight_scale), block_size)
    k = 2 * packed.shape[1]
    if block_size != 16 or k % k_multiple:
        raise ValueError(f"the {path} path needs block_size == 16 and K % {k_multiple} == 0 "
                         f"(got block_size={block_size}, K={k})")
    if a.ndim != 2 or a.shape[1] != k:
        raise ValueError(f"a must be [M, K={k}], got {list(a.shape)}")


@_ieee
def gemv(
    a: np.ndarray, packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float,
    block_size: int, bias: np.ndarray | None = None,
) -> np.ndarray:
    """The decode GEMV: weights decoded tile by tile (never a full scratch), fp32 dot products,
    bias added in fp32 before the single final rounding to A's dtype. ``a`` is [M, K]."""
    a = np.asarray(a)
    dtype = dtype_name(a.dtype)
    packed = np.ascontiguousarray(packed)
    _check_fused_operands(a, packed, weight_scale, block_size, 32, "gemv")
    n = packed.shape[0]
    a32 = a.astype(np.float32)
    g = np.float32(weight_scale_2)
    acc = np.empty((a.shape[0], n), dtype=np.float32)
    for r0 in range(0, n, GEMV_ROWS_PER_TILE):
        w_t = _decoded_rows_t(packed[r0:r0 + GEMV_ROWS_PER_TILE], weight_scale[r0:r0 + GEMV_ROWS_PER_TILE], g, dtype)
        acc[:, r0:r0 + w_t.shape[1]] = accumulate_fp32(a32, w_t)
    if bias is not None:
        acc = acc + np.asarray(bias).astype(np.float32)
    return round_fp32_to(acc, dtype)


#: K values per step of the fused tensor-core kernel (its K granularity)
FUSED_STEP_K = FUSED_K_MULTIPLE


@_ieee
def fused_mma(
    a: np.ndarray, packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float,
    block_size: int, bias: np.ndarray | None = None, splits: int = 1,
) -> np.ndarray:
    """The fused tensor-core path (kernels/cuda/fused_mma.cu): weights decoded in registers to
    T, fp32 accumulation over each split's contiguous range of 128-value K steps, the splits'
    fp32 partials summed in split order (starting from +0, as the finalize kernel does), then
    the bias added in fp32 before the single rounding. ``splits`` is the kernel's K split count
    (:func:`nvfp4_kernels.cuda_backend.fused_splits` chooses it from the shape and the GPU)."""
    a = np.asarray(a)
    dtype = dtype_name(a.dtype)
    packed = np.ascontiguousarray(packed)
    _check_fused_operands(a, packed, weight_scale, block_size, FUSED_STEP_K, "fused_mma")
    n, k = packed.shape[0], 2 * packed.shape[1]
    steps = k // FUSED_STEP_K
    if isinstance(splits, bool) or not isinstance(splits, (int, np.integer)) or not 1 <= splits <= max(1, steps):
        raise ValueError(f"splits must be an int in [1, K/{FUSED_STEP_K} = {steps}], got {splits!r}")
    per_split = -(-steps // splits) * FUSED_STEP_K
    a32 = a.astype(np.float32)
    g = np.float32(weight_scale_2)
    acc = np.empty((a.shape[0], n), dtype=np.float32)
    for r0 in range(0, n, GEMV_ROWS_PER_TILE):
        w_t = _decoded_rows_t(packed[r0:r0 + GEMV_ROWS_PER_TILE], weight_scale[r0:r0 + GEMV_ROWS_PER_TILE], g, dtype)
        partials = [accumulate_fp32(a32[:, k0:k0 + per_split], w_t[k0:k0 + per_split])
                    for k0 in range(0, k, per_split)]
        if splits == 1:
            acc[:, r0:r0 + w_t.shape[1]] = partials[0]
        else:
            total = np.zeros_like(partials[0])
            for part in partials + [np.zeros_like(total)] * (splits - len(partials)):
                total += part
            acc[:, r0:r0 + w_t.shape[1]] = total
    if bias is not None:
        acc = acc + np.asarray(bias).astype(np.float32)
    return round_fp32_to(acc, dtype)


def fused_wgmma(
    a: np.ndarray, packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float,
    block_size: int, bias: np.ndarray | None = None, whole_rows: int = 0, splits: int = 1,
) -> np.ndarray:
    """The fused_wgmma path (kernels/cuda/fused_wgmma.cu): weights decoded to T, fp32 sums. The
    first ``whole_rows`` weight rows (whole tiles of the kernel's plan,
    :func:`nvfp4_kernels.tiling.wgmma_plan`) sum all of K in one range; the rows after sum
    ``splits`` equal ranges of 128-value steps whose partials are added in split order from +0;
    then the bias in fp32 and the single rounding. Each half is :func:`fused_mma`'s algorithm at
    its split count, so the rows are computed by it."""
    a = np.asarray(a)
    packed = np.ascontiguousarray(packed)
    n = packed.shape[0]
    if isinstance(whole_rows, bool) or not isinstance(whole_rows, (int, np.integer)) or not 0 <= whole_rows <= n:
        raise ValueError(f"whole_rows must be an int in [0, N = {n}], got {whole_rows!r}")
    parts = []
    for r0, r1, count in ((0, whole_rows, 1), (whole_rows, n, splits)):
        if r1 > r0:
            parts.append(fused_mma(a, packed[r0:r1], np.asarray(weight_scale)[r0:r1], weight_scale_2, block_size,
                                   None if bias is None else np.asarray(bias)[r0:r1], splits=count))
    if not parts:
        raise ValueError("the weight has no rows (N = 0): nvfp4_matmul returns an empty output without a kernel")
    return np.concatenate(parts, axis=1)


@_ieee
def prefill(
    a: np.ndarray, packed: np.ndarray, weight_scale: np.ndarray, weight_scale_2: float,
    block_size: int, bias: np.ndarray | None = None, dequant_path: str | None = None,
) -> np.ndarray:
    """Prefill: dequantize into a scratch [N, K] buffer, fp32-accumulated A @ W^T rounded to
    A's dtype, then bias added in fp32 and rounded again (two roundings, as cuBLAS + add)."""
    a = np.asarray(a)
    dtype = dtype_name(a.dtype)
    scratch = dequantize(packed, weight_scale, weight_scale_2, block_size, dtype, dequant_path)
    y = round_fp32_to(accumulate_fp32(a.astype(np.float32), np.ascontiguousarray(scratch.astype(np.float32).T)), dtype)
    if bias is not None:
        y = round_fp32_to(y.astype(np.float32) + np.asarray(bias).astype(np.float32), dtype)
    return y
