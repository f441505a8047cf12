"""The NVFP4 format: E2M1 codes, E4M3FN block scales, packing, and a quantizer.

Everything here is exact numpy arithmetic on bit patterns so that the CPU backend
and the tests share one definition of the format. Decoding is by lookup tables
built from the bit layout (not from ml_dtypes), which lets the tests compare the
tables against ml_dtypes as an independent implementation.
"""

from __future__ import annotations

import math

import numpy as np

#: Magnitudes of the eight non-negative E2M1 codes; bit 3 of a code is the sign.
E2M1_MAGNITUDES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0
E4M3_MAX = 448.0
#: fp16 / bf16 NaN produced by NVIDIA's f32 -> f16/bf16 conversion instructions.
CANONICAL_NAN_BITS = 0x7FFF


def _build_e2m1_table() -> np.ndarray:
    table = np.array(E2M1_MAGNITUDES + tuple(-m for m in E2M1_MAGNITUDES), dtype=np.float32)
    return table  # code 8 is -0.0 because -0.0 == -(0.0) keeps its sign in numpy


def _e4m3_bits_to_float(byte: int) -> float:
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> 3) & 0xF
    mantissa = byte & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.copysign(float("nan"), sign)  # 0xFF is a NaN with the sign bit set
    if exponent == 0:
        return sign * mantissa * 2.0**-9  # subnormal: m/8 * 2^(1-7)
    return sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7)


E2M1_TABLE: np.ndarray = _build_e2m1_table()
E2M1_TABLE.flags.writeable = False
#: All 256 E4M3FN bytes as float32 (bias 7, subnormals, no infinities, NaN at 0x7F/0xFF).
E4M3_TABLE: np.ndarray = np.array([_e4m3_bits_to_float(b) for b in range(256)], dtype=np.float32)
E4M3_TABLE.flags.writeable = False


def e2m1_decode(codes: np.ndarray) -> np.ndarray:
    """Decode 4-bit codes (uint8 values 0..15) to float32, keeping -0.0 for code 8."""
    codes = np.asarray(codes)
    if codes.size and int(codes.max()) > 15:
        raise ValueError("E2M1 codes are 4-bit: every value must be in 0..15")
    return E2M1_TABLE[codes.astype(np.intp)]


def e4m3_decode(raw: np.ndarray) -> np.ndarray:
    """Decode raw E4M3FN bytes (uint8) to float32."""
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise TypeError(f"E4M3 scale bytes must be uint8, got {raw.dtype}")
    return E4M3_TABLE[raw]


def unpack_codes(packed: np.ndarray) -> np.ndarray:
    """[N, K/2] packed bytes -> [N, K] codes; element 2j is the LOW nibble of byte j."""
    packed = np.asarray(packed, dtype=np.uint8)
    codes = np.empty(packed.shape[:-1] + (packed.shape[-1] * 2,), dtype=np.uint8)
    codes[..., 0::2] = packed & 0x0F
    codes[..., 1::2] = packed >> 4
    return codes


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """[N, K] codes (0..15, K even) -> [N, K/2] bytes, low nibble = even element."""
    codes = np.asarray(codes)
    if codes.shape[-1] % 2:
        raise ValueError(f"K must be even to pack two codes per byte, got K={codes.shape[-1]}")
    if codes.size and (int(codes.max()) > 15 or int(codes.min()) < 0):
        raise ValueError("E2M1 codes are 4-bit: every value must be in 0..15")
    codes = codes.astype(np.uint8)
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def num_scale_blocks(k: int, block_size: int) -> int:
    """Scale columns per row: ceil(K / block_size) (the last block may be partial)."""
    return -(-k // block_size)


# --- quantization ---------------------------------------------------------------------------

#: Midpoints between neighbouring E2M1 magnitudes, and whether a tie there rounds up: a tie
#: goes to the code with an even mantissa bit (code & 1 == 0), as round-to-nearest-even does.
_E2M1_MIDPOINTS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                   (2.5, False), (3.5, True), (5.0, False))


def round_to_e2m1_codes(x: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest E2M1 code, ties to even, saturating at +-6.

    The sign is kept, so negative values that round to zero become code 8 (-0.0).
    """
    x = np.asarray(x, dtype=np.float32)
    mag = np.abs(x)
    idx = np.zeros(x.shape, dtype=np.uint8)
    for midpoint, tie_rounds_up in _E2M1_MIDPOINTS:
        idx += (mag >= midpoint) if tie_rounds_up else (mag > midpoint)
    return idx | (np.signbit(x).astype(np.uint8) << 3)


def float_to_e4m3_bytes(x: np.ndarray) -> np.ndarray:
    """Round float32 values to E4M3FN bytes (nearest, ties to even, saturating at 448)."""
    import ml_dtypes

    clipped = np.clip(np.asarray(x, dtype=np.float32), -E4M3_MAX, E4M3_MAX)
    return clipped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def quantize(
    weight: np.ndarray, block_size: int = 16
) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Quantize float weights [N, K] to NVFP4 with NVIDIA's two-level recipe.

    The global scale g maps the tensor's amax onto the largest product of an E4M3 block
    scale and an E2M1 value (448 * 6), so every block scale amax_block / 6 / g fits in E4M3.
    Values are then divided by their block's decoded scale and rounded to E2M1 (ties to even,
    saturating). Returns ``(packed [N, K/2] uint8, weight_scale [N, ceil(K/bs)] uint8, g)``.
    """
    w = np.asarray(weight, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D [N, K], got shape {w.shape}")
    if w.shape[1] % 2:
        raise ValueError(f"K must be even (two codes per byte), got K={w.shape[1]}")
    if block_size <= 0:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    if not np.isfinite(w).all():
        raise ValueError("weight contains NaN or inf; NVFP4 can only encode finite values")
    n, k = w.shape
    nblocks = num_scale_blocks(k, block_size)
    amax = float(np.abs(w).max()) if w.size else 0.0
    g = np.float32(amax / (E4M3_MAX * E2M1_MAX)) if amax > 0 else np.float32(1.0)
    padded = np.zeros((n, nblocks * block_size), dtype=np.float32)
    padded[:, :k] = w
    blocks = padded.reshape(n, nblocks, block_size)
    block_amax = np.abs(blocks).max(axis=-1)
    scale_bytes = float_to_e4m3_bytes(block_amax / np.float32(E2M1_MAX) / g)
    block_scale = e4m3_decode(scale_bytes) * g  # the scale the decoder will apply
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(block_scale[..., None] > 0, blocks / block_scale[..., None], 0.0)
    codes = round_to_e2m1_codes(scaled.astype(np.float32)).reshape(n, -1)[:, :k]
    return pack_codes(codes), scale_bytes, np.float32(g)
