"""The first table-decode GEMV candidate is bit-exact wherever its fast path is taken.

The candidate (benchmarks/experiments/gemv_table_decode.patch, 8-10% faster than the multiply
decode on the H200, never shipped as such; benchmarks/NOTES.md) looked codes up with its own
selector sequence. The shipped GEMV now takes the fused kernel's table decode from
kernels/cuda/mma_decode.cuh instead, which suites/test_fused_table_decode.py checks the same way;
this suite keeps the candidate's lookup proven, as the record of the patch it describes. It
decodes a 16-value scale block through a table built from two rounded values,
P = (to_T(s), to_T(fp32(1.5 s))), by adding multiples of one binade to their bit patterns, and
looks codes up with PRMT; blocks whose s = fp32(e4m3 * g) fails ``table_ok`` take the exact
per-value path. This suite emulates the kernel's integer steps (``build_table``, ``lookup_word``,
PRMT with its sign-replicate selector bit) in numpy and checks, over all 256 scale bytes x a grid
of g (subnormal-producing, fp16-overflowing, fp32-overflowing, negative, zero, inf, NaN) x all
16 codes x fp16/bf16, that wherever ``table_ok`` holds the table gives the reference bits of
nvfp4_kernels.reference. A deliberately weakened condition must be caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from nvfp4_harness.nvfp4 import table_decode as td
from nvfp4_kernels.nvfp4 import E2M1_TABLE, E4M3_TABLE

# mirrors TableT<T> in benchmarks/experiments/gemv_table_decode.patch: (binade unit in T bits, kLo bits, kHi bits)
TABLE_PARAMS = {
    "bfloat16": (0x80, 0x01000000, 0x7E000000),   # [2^-125, 2^125]
    "float16": (0x400, 0x39000000, 0x46000000),   # [2^-13, 2^13]
}


#: the patch's build_table selectors (the same table layout the fused kernel's header uses)
GEMV_TABLE_SELECTORS = {"kSelLo03": 0x640D, "kSelLo47": 0x6420, "kSelHi03": 0x751D, "kSelHi47": 0x7531}


def lookup_word(w: np.ndarray, table: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    l0, l1, h0, h1 = table
    w = np.asarray(w, dtype=np.uint64) & td.M32
    x = td.prmt(w, np.uint64(0), 0x3120) & np.uint64(0x77777777)
    y = x >> np.uint64(16)
    la, ha, lb, hb = td.prmt(l0, l1, x), td.prmt(h0, h1, x), td.prmt(l0, l1, y), td.prmt(h0, h1, y)
    sg = np.uint64(0x80008000)
    return [
        td.prmt(la, ha, 0x6240) ^ ((w << np.uint64(12)) & sg),
        td.prmt(la, ha, 0x7351) ^ ((w << np.uint64(8)) & sg),
        td.prmt(lb, hb, 0x6240) ^ ((w << np.uint64(4)) & sg),
        td.prmt(lb, hb, 0x7351) ^ (w & sg),
    ]


def mismatches(dtype: str, lo: int, hi: int) -> tuple[int, int]:
    """(table-path blocks checked, mismatching values) over scale bytes x g grid x codes."""
    unit = TABLE_PARAMS[dtype][0]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        s = (E4M3_TABLE[None, :] * td.g_grid()[:, None]).reshape(-1).astype(np.float32)
        ok = td.table_ok(s, lo, hi)
        s = s[ok]
        table = td.build_table(td.pair_bits(s, dtype), unit, GEMV_TABLE_SELECTORS)
        bad = 0
        # word c * 0x11111111 puts code c in every nibble; the rotated words mix codes so the
        # (v_i, v_i+4) pairing and the per-nibble sign shifts are exercised too
        words = [c * 0x11111111 for c in range(16)] + [0x76543210, 0xFEDCBA98, 0x8F7E6D5C, 0x1A2B3C4D]
        for w in words:
            got = lookup_word(np.full(s.shape, w, dtype=np.uint64), table)
            codes = [(w >> (4 * i)) & 0xF for i in range(8)]
            ref = [td.t_bits((E2M1_TABLE[c] * s).astype(np.float32), dtype) for c in codes]
            for i in range(4):
                want = ref[i] | (ref[i + 4] << np.uint64(16))
                bad += int(np.count_nonzero(got[i] != want))
    return int(ok.sum()), bad


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_table_path_is_bit_exact(dtype: str) -> None:
    _, lo, hi = TABLE_PARAMS[dtype]
    checked, bad = mismatches(dtype, lo, hi)
    assert checked > 10_000, "the grid should put many blocks on the table path"
    assert bad == 0


@pytest.mark.parametrize(("dtype", "g"), [("bfloat16", 1 / 2688), ("float16", 1 / 16)])
def test_table_path_covers_ordinary_scales(dtype: str, g: float) -> None:
    """Every positive normal e4m3 scale is a table block for these g. (fp16 sends s < 2^-13,
    where 0.5 s would round as an fp16 subnormal, to the exact path: with g = 1/2688 that is
    the scale bytes below 0x36.)"""
    _, lo, hi = TABLE_PARAMS[dtype]
    s = (E4M3_TABLE[0x08:0x7F] * np.float32(g)).astype(np.float32)
    assert td.table_ok(s, lo, hi).all()


@pytest.mark.parametrize(
    ("dtype", "lo", "hi"),
    td.WEAKENED_RANGES,
)
def test_weakened_condition_is_caught(dtype: str, lo: int, hi: int) -> None:
    """The check has teeth: a condition that admits unsafe blocks produces mismatches."""
    _, bad = mismatches(dtype, lo, hi)
    assert bad > 0
