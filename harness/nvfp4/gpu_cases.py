"""The deterministic problems the GPU check runs, regenerated bit for bit from their seeds.

The GPU run records a SHA-256 per (case, path); CPU CI regenerates each case from the same
seed and checks that the CPU reference hashes to the committed GPU hashes. Nothing here needs
a GPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from nvfp4_kernels import reference

#: block sizes and K of the foundation issue's matrix (odd, even, chunk-crossing, partial blocks)
BLOCK_SIZES = (1, 2, 5, 6, 7, 12, 16, 32, 64)
KS = (2, 8, 12, 24, 70, 120, 1004, 1020, 4096)
#: plain, arbitrary, fp32-subnormal products, fp16 overflow, fp32 overflow of the block scale
GLOBAL_SCALES = (1.0, 0.0123, 2.0**-133, 1.0e3, 3.0e38)
SPECIAL_SCALE_BYTES = np.array([0x00, 0x01, 0x07, 0x08, 0x7E, 0x80, 0x81, 0xFE, 0x7F, 0xFF], np.uint8)


@dataclass(frozen=True)
class DequantCase:
    """One dequantization problem: shape, block size, dtype, global scale and seed."""

    name: str
    n: int
    k: int
    block_size: int
    dtype: str
    g: float
    seed: int

    def paths(self) -> tuple[str, ...]:
        """The dequant paths whose guards admit this shape (alignment aside)."""
        if reference.vec8_supported(self.k, self.block_size):
            return ("prefill_vec8", "prefill_scalar")
        return ("prefill_scalar",)

    def to_dict(self) -> dict:
        return asdict(self)


def operands(case: DequantCase) -> tuple[np.ndarray, np.ndarray, np.float32]:
    """Packed codes, scale bytes (special bytes planted, last block included) and g."""
    rng = np.random.default_rng(case.seed)
    packed = rng.integers(0, 256, (case.n, case.k // 2), dtype=np.uint8)
    scales = rng.integers(0, 256, (case.n, -(-case.k // case.block_size)), dtype=np.uint8)
    if case.g < 1e30:  # keep most scales finite-range so the hashes are not all NaN/inf
        flat = scales.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, len(SPECIAL_SCALE_BYTES)), replace=False)
        flat[picks] = SPECIAL_SCALE_BYTES[: len(picks)]
    scales[:, -1] = SPECIAL_SCALE_BYTES[rng.integers(0, len(SPECIAL_SCALE_BYTES), case.n)]
    return packed, scales, np.float32(case.g)


def dequant_cases() -> list[DequantCase]:
    """The foundation matrix (both dtypes) plus large shapes, N up to 5120 and N > 65,535."""
    cases = []
    for i, block_size in enumerate(BLOCK_SIZES):
        for j, k in enumerate(KS):
            for dtype in ("float16", "bfloat16"):
                g = GLOBAL_SCALES[(i + j) % len(GLOBAL_SCALES)]
                seed = 1000 * block_size + 10 * k + (dtype == "bfloat16")
                cases.append(DequantCase(f"bs{block_size}-k{k}-{dtype}", 8, k, block_size, dtype, g, seed))
    large = [(5120, 5120, 16, "bfloat16"), (5120, 5120, 16, "float16"), (4096, 4096, 32, "bfloat16"),
             (2048, 5112, 6, "float16"), (1000, 5118, 7, "bfloat16"), (3000, 4100, 10, "bfloat16"),
             (70000, 64, 16, "bfloat16"), (65537, 40, 5, "float16")]
    for n, k, block_size, dtype in large:
        cases.append(DequantCase(f"large-{n}x{k}-bs{block_size}-{dtype}", n, k, block_size, dtype,
                                 0.0123, n + k + block_size))
    return cases
