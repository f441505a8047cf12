"""An independent oracle for the NVFP4 contract, element by element in exact arithmetic.

It shares nothing with :mod:`kernels`: E2M1 and E4M3 values come from ml_dtypes, every
product is formed exactly in Python (a float64 holds the product of a 4-bit and a 24-bit
significand exactly) and every rounding is done here, on integers, by
:func:`round_to_binary`. So a bug in the project's lookup tables, in numpy's casts, or in
a path's index arithmetic cannot hide in the oracle as well.

Because one dequantized element depends only on (code, scale byte, g, dtype), the oracle
builds a 16 x 256 table of exact results per (g, dtype) and then indexes it with
``k // block_size`` computed per element.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import ml_dtypes
import numpy as np

#: (exponent bits, mantissa bits) of the binary formats the contract rounds to.
FORMATS = {"float32": (8, 23), "float16": (5, 10), "bfloat16": (8, 7)}
#: NVIDIA's f32 -> f16/bf16 conversions return this NaN for any NaN input.
CANONICAL_NAN_16 = 0x7FFF


def round_to_binary(x: float, fmt: str) -> int:
    """Bits of ``x`` (an exact value) rounded to nearest-even in ``fmt``; overflow gives inf.

    NaN gives the format's quiet NaN with a clear sign (0x7FC00000 / 0x7FFF).
    """
    ebits, mbits = FORMATS[fmt]
    width = 1 + ebits + mbits
    sign = (1 << (width - 1)) if math.copysign(1.0, x) < 0 else 0
    exp_all_ones = ((1 << ebits) - 1) << mbits
    if math.isnan(x):
        return 0x7FC00000 if fmt == "float32" else CANONICAL_NAN_16
    if math.isinf(x):
        return sign | exp_all_ones
    mag = Fraction(abs(x))
    if mag == 0:
        return sign
    bias = (1 << (ebits - 1)) - 1
    emin, emax = 1 - bias, bias
    exponent = max(math.frexp(abs(x))[1] - 1, emin)  # floor(log2 |x|), clamped to subnormals
    ulp = Fraction(2) ** (exponent - mbits)
    q, r = divmod(mag, ulp)
    q = int(q)
    if r > ulp / 2 or (r == ulp / 2 and q % 2 == 1):
        q += 1
    if q == 1 << (mbits + 1):  # rounding carried into the next binade
        q >>= 1
        exponent += 1
    if exponent > emax:
        return sign | exp_all_ones
    if q < (1 << mbits):  # subnormal (only possible at emin)
        return sign | q
    return sign | ((exponent + bias) << mbits) | (q - (1 << mbits))


def bits_to_float(bits: int, fmt: str) -> float:
    """The value of a bit pattern of ``fmt`` as a Python float (exact)."""
    dtype = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}[fmt]
    view = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[fmt]
    return float(np.array([bits], dtype=dtype).view(view)[0])


def e2m1_value(code: int) -> float:
    """E2M1 code -> value, by ml_dtypes (independent of nvfp4_kernels.nvfp4)."""
    return float(np.array([code], dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)[0])


def e4m3_value(byte: int) -> float:
    """E4M3FN byte -> value, by ml_dtypes (independent of nvfp4_kernels.nvfp4)."""
    return float(np.array([byte], dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)[0])


def dequant_element_bits(code: int, scale_byte: int, g: float, dtype: str) -> int:
    """Contract bits of one element: to_T(fp32(e2m1 * fp32(e4m3 * g)))."""
    g32 = bits_to_float(round_to_binary(g, "float32"), "float32")
    scale = bits_to_float(round_to_binary(e4m3_value(scale_byte) * g32, "float32"), "float32")
    if math.isnan(scale):
        return CANONICAL_NAN_16
    value = e2m1_value(code)
    if math.isinf(scale) and value == 0:
        return CANONICAL_NAN_16  # 0 * inf is NaN in IEEE arithmetic
    product = value * scale  # exact: at most 2 + 24 significant bits
    if math.isnan(product):
        return CANONICAL_NAN_16
    rounded = bits_to_float(round_to_binary(product, "float32"), "float32")
    return round_to_binary(rounded, dtype)


@lru_cache(maxsize=64)
def dequant_table(g: float, dtype: str) -> np.ndarray:
    """uint16 [16 codes, 256 scale bytes] of contract bits for one global scale and dtype."""
    table = np.empty((16, 256), dtype=np.uint16)
    for code in range(16):
        for byte in range(256):
            table[code, byte] = dequant_element_bits(code, byte, g, dtype)
    table.flags.writeable = False
    return table


def dequantize_bits(packed: np.ndarray, weight_scale: np.ndarray, g: float, block_size: int,
                    dtype: str) -> np.ndarray:
    """uint16 [N, K] contract bits for a whole packed matrix, element by element."""
    packed = np.asarray(packed, dtype=np.uint8)
    element = np.arange(2 * packed.shape[1])
    byte_of = element // 2
    code = np.where(element % 2 == 0, packed[:, byte_of] & 0x0F, packed[:, byte_of] >> 4)
    scale = np.asarray(weight_scale)[:, element // block_size]
    return dequant_table(float(g), dtype)[code, scale]
