"""The fused kernel's table decode, emulated in numpy from the constants of its CUDA header.

kernels/cuda/mma_decode.cuh decodes a 16-value scale block through a table built from two rounded
values, P = (to_T(s), to_T(fp32(1.5 s))), by adding binades to their bit patterns and looking
codes up with PRMT; a block whose s fails ``table_ok`` takes the exact multiply path. A GPU run
can only show the table right for the scales it happens to see, so the integer steps are
replayed here, over every scale byte on a grid of global scales, and compared with the
contract's bits (:func:`nvfp4_kernels.reference.round_fp32_to` of the fp32 product).

The selector constants and the range of each output type are parsed from the header itself
(:func:`header_constants`), so an edit there is checked here without a second copy to keep in
step; only the order of the steps is written twice (here and in the header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from nvfp4_kernels.build import CUDA_SOURCE_DIR
from nvfp4_kernels.nvfp4 import E2M1_TABLE, E4M3_TABLE
from nvfp4_kernels.reference import round_fp32_to

HEADER = CUDA_SOURCE_DIR / "mma_decode.cuh"
M32 = np.uint64(0xFFFFFFFF)
_CUDA_TYPE = {"bfloat16": "__nv_bfloat16", "float16": "__half"}


@dataclass(frozen=True)
class TableRange:
    """``TableT<T>`` of the header: one binade in T's bits and the scale range [lo, hi] (fp32 bits)."""

    unit: int
    lo: int
    hi: int


@dataclass(frozen=True)
class HeaderConstants:
    selectors: dict[str, int]  # kSelLo03, kSelLo47, kSelHi03, kSelHi47, kSelPair01, kSelPair23
    ranges: dict[str, TableRange]  # by numpy dtype name


def header_constants(header: Path = HEADER) -> HeaderConstants:
    """The PRMT selectors and the TableT ranges as written in the CUDA header."""
    text = header.read_text()
    selectors = {name: int(value, 16) for name, value in
                 re.findall(r"constexpr uint32_t (kSel\w+) = (0x[0-9A-Fa-f]+)u;", text)}
    ranges = {}
    for dtype, cuda_type in _CUDA_TYPE.items():
        body = re.search(r"struct TableT<" + re.escape(cuda_type) + r"> \{(.*?)\};", text, re.S)
        if body is None:
            raise ValueError(f"{header}: no TableT<{cuda_type}> specialisation")
        fields = dict(re.findall(r"(kUnit|kLo|kHi) = (0x[0-9A-Fa-f]+)u;", body.group(1)))
        ranges[dtype] = TableRange(int(fields["kUnit"], 16), int(fields["kLo"], 16), int(fields["kHi"], 16))
    wanted = {"kSelLo03", "kSelLo47", "kSelHi03", "kSelHi47", "kSelPair01", "kSelPair23"}
    if not wanted <= selectors.keys():
        raise ValueError(f"{header}: missing selector constants {sorted(wanted - selectors.keys())}")
    return HeaderConstants(selectors, ranges)


def prmt(a: np.ndarray, b: np.ndarray, sel: np.ndarray | int) -> np.ndarray:
    """PTX ``prmt.b32`` (default mode), elementwise on uint32 values held in uint64 arrays: byte j
    of the result is byte sel[4j+2:4j] of {b, a} (a = bytes 0..3), or that byte's sign bit
    replicated when sel[4j+3] is set. Only the selector's low 16 bits are read."""
    a = np.asarray(a, dtype=np.uint64) & M32
    b = np.asarray(b, dtype=np.uint64) & M32
    sel = np.asarray(sel, dtype=np.uint64)
    src = a | (b << np.uint64(32))
    out = np.zeros(np.broadcast(a, b, sel).shape, dtype=np.uint64)
    for j in range(4):
        nib = (sel >> np.uint64(4 * j)) & np.uint64(0xF)
        byte = (src >> ((nib & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
        byte = np.where(nib & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
        out |= byte << np.uint64(8 * j)
    return out


def table_ok(s: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The header's ``table_ok``: lo <= bits(s) <= hi as one unsigned compare of fp32 bits."""
    bits = np.asarray(s, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits - np.uint64(lo)) & M32) <= np.uint64(hi - lo)


def t_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    """The contract's rounding of fp32 values to T, as uint64 bit patterns."""
    return round_fp32_to(np.asarray(x, dtype=np.float32), dtype).view(np.uint16).astype(np.uint64)


def pair_bits(s: np.ndarray, dtype: str) -> np.ndarray:
    """P = to_T(s) | to_T(fp32(1.5 s)) << 16 (the header's ``OutT<T>::pack2(s, 1.5f * s)``)."""
    s = np.asarray(s, dtype=np.float32)
    return t_bits(s, dtype) | (t_bits((np.float32(1.5) * s).astype(np.float32), dtype) << np.uint64(16))


def build_table(p: np.ndarray, unit: int, sel: dict[str, int]) -> tuple[np.ndarray, ...]:
    """``build_table``: (lo03, lo47, hi03, hi47) from P."""
    u = np.uint64(unit)
    both = u | (u << np.uint64(16))
    q0 = (p - u) & M32
    q1 = (p + both) & M32
    q2 = (p + np.uint64(2) * both) & M32
    return (prmt(q0, p, sel["kSelLo03"]), prmt(q1, p, sel["kSelLo47"]),
            prmt(q0, p, sel["kSelHi03"]), prmt(q1, q2, sel["kSelHi47"]))


def interleave_bytes(lo03: np.ndarray, hi03: np.ndarray, lo47: np.ndarray, hi47: np.ndarray,
                     sel: dict[str, int]) -> list[np.ndarray]:
    """``interleave_bytes``: the looked-up low and high bytes -> registers (v0,v1) .. (v6,v7)."""
    return [prmt(lo03, hi03, sel["kSelPair01"]), prmt(lo03, hi03, sel["kSelPair23"]),
            prmt(lo47, hi47, sel["kSelPair01"]), prmt(lo47, hi47, sel["kSelPair23"])]


def decode_word_table(w: np.ndarray, table: tuple[np.ndarray, ...], sel: dict[str, int]) -> list[np.ndarray]:
    """``decode_word_table``: the word's eight codes -> registers (v0,v1), (v2,v3), (v4,v5), (v6,v7)."""
    lo03_t, lo47_t, hi03_t, hi47_t = table
    w = np.asarray(w, dtype=np.uint64) & M32
    mag = w & np.uint64(0x77777777)
    mag47 = mag >> np.uint64(16)
    w4 = (w << np.uint64(4)) & M32
    signs = np.uint64(0x80808080)
    sign03 = prmt(w4, w, sel["kSelPair01"]) & signs
    sign47 = prmt(w4, w, sel["kSelPair23"]) & signs
    lo03, hi03 = prmt(lo03_t, lo47_t, mag), prmt(hi03_t, hi47_t, mag) ^ sign03
    lo47, hi47 = prmt(lo03_t, lo47_t, mag47), prmt(hi03_t, hi47_t, mag47) ^ sign47
    return interleave_bytes(lo03, hi03, lo47, hi47, sel)


def decode_word_table_placed(w: np.ndarray, table: tuple[np.ndarray, ...], sel: dict[str, int]) -> list[np.ndarray]:
    """``decode_word_table_placed``: the same registers from a word whose signs are placed
    (``place_signs``: code i's sign at bit 8 i + 7 for i < 4, 8 (i - 4) + 3 for i >= 4)."""
    lo03_t, lo47_t, hi03_t, hi47_t = table
    w = np.asarray(w, dtype=np.uint64) & M32
    mag = w & np.uint64(0x77777777)
    mag47 = mag >> np.uint64(16)
    signs = np.uint64(0x80808080)
    lo03, hi03 = prmt(lo03_t, lo47_t, mag), prmt(hi03_t, hi47_t, mag) ^ (w & signs)
    lo47 = prmt(lo03_t, lo47_t, mag47)
    hi47 = prmt(hi03_t, hi47_t, mag47) ^ (((w << np.uint64(4)) & M32) & signs)
    return interleave_bytes(lo03, hi03, lo47, hi47, sel)


def placed_word(w: int) -> int:
    """Word ``w`` as the tile-contiguous layout stores it (:func:`nvfp4_kernels.layout.place_signs`)."""
    from nvfp4_kernels.layout import place_signs

    return int.from_bytes(bytes(place_signs(np.frombuffer(w.to_bytes(4, "little"), np.uint8))), "little")


def reference_word(w: int, s: np.ndarray, dtype: str) -> list[np.ndarray]:
    """The contract's registers for word w: to_T(fp32(e2m1(code) * s)), paired as the MMA takes them."""
    s = np.asarray(s, dtype=np.float32)
    values = [t_bits((E2M1_TABLE[(w >> (4 * i)) & 0xF] * s).astype(np.float32), dtype) for i in range(8)]
    return [values[2 * j] | (values[2 * j + 1] << np.uint64(16)) for j in range(4)]


def g_grid() -> np.ndarray:
    """Global scales that put s = e4m3 * g everywhere that matters: every power of two, specials
    (zero, negative, inf, NaN, subnormal), values just either side of each table bound and of
    the fp16 / fp32 overflow points, and random magnitudes over the whole fp32 range."""
    rng = np.random.default_rng(1234)
    pow2 = [2.0 ** e for e in range(-149, 128)]
    special = [0.0, -0.0, 1.0, -1.0, -0.37, np.inf, -np.inf, np.nan, 1e-45, 1e-40, 1e-38, 1e-30,
               6.1e-5, 1e-4, 0.01, 1 / 448, 1 / 2688, 5e4, 65504.0, 1e5, 1e6, 1e30, 1e37, 1e38, 3.4e38]
    edges = [2.0 ** -13, 2.0 ** 13, 2.0 ** -125, 2.0 ** 125, 2.0 ** -14, 2.0 ** 14, 2.0 ** 126]
    near = [e / v * f for e in edges for v in (1.0, 1.5, 448.0, 0.001953125, 3.0)
            for f in (1 - 2 ** -20, 1.0, 1 + 2 ** -20)]
    rand = list(np.exp(rng.uniform(np.log(1e-44), np.log(3e38), 400)))
    rand += list(rng.uniform(-2, 2, 50))
    return np.array(pow2 + special + near + rand, dtype=np.float32)


#: (dtype, lo, hi): scale ranges one step too wide, each admitting blocks the table gets wrong; a
#: check of the table must find mismatches with every one of them
WEAKENED_RANGES: tuple[tuple[str, int, int], ...] = (
    ("float16", 0x38800000, 0x46000000),   # kLo = 2^-14: t1 / 2 becomes an fp16 subnormal
    ("float16", 0x39000000, 0x46800000),   # kHi = 2^14: 4 * to_T(1.5 s) overflows fp16
    ("bfloat16", 0x00800000, 0x7E000000),  # kLo = 2^-126: 0.5 s is an fp32 subnormal
    ("bfloat16", 0x01000000, 0x7E800000),  # kHi = 2^126: 6 s overflows
    ("bfloat16", 0x00000000, 0x7E000000),  # zero scales on the table path
    ("float16", 0x00000000, 0x7F800000),   # any non-negative finite (and inf) s
)


#: words that put every code at every nibble position, with different codes side by side (so a
#: swapped pair, a sign taken from the wrong nibble or a wrong half of the table shows up)
TEST_WORDS: tuple[int, ...] = tuple(
    sum(((j + 5 * i) % 16) << (4 * i) for i in range(8)) for j in range(16)
) + (0x00000000, 0x88888888, 0x76543210, 0xFEDCBA98)


def mismatches(dtype: str, lo: int | None = None, hi: int | None = None,
               constants: HeaderConstants | None = None, *, stored: str = "contract",
               decoder: str | None = None) -> tuple[int, int]:
    """(scale blocks that take the table path, registers that differ from the contract) over every
    scale byte x :func:`g_grid` x :data:`TEST_WORDS`. ``lo`` / ``hi`` override the header's range
    (to show that a weaker condition is caught). ``stored`` is how the words reach the decoder:
    ``"contract"`` (row-major weights) or ``"placed"`` (the tile-contiguous layout's
    :func:`placed_word`); ``decoder`` is the decode applied (by default the one the kernel uses for
    that storage: ``decode_word_table``, resp. ``decode_word_table_placed``)."""
    if stored not in ("contract", "placed"):
        raise ValueError(f"stored must be 'contract' or 'placed', got {stored!r}")
    decoder = decoder or stored
    decode = {"contract": decode_word_table, "placed": decode_word_table_placed}[decoder]
    constants = constants or header_constants()
    bounds = constants.ranges[dtype]
    lo = bounds.lo if lo is None else lo
    hi = bounds.hi if hi is None else hi
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        s = (E4M3_TABLE[None, :] * g_grid()[:, None]).reshape(-1).astype(np.float32)
        s = s[table_ok(s, lo, hi)]
        table = build_table(pair_bits(s, dtype), bounds.unit, constants.selectors)
        bad = 0
        for w in TEST_WORDS:
            word = placed_word(w) if stored == "placed" else w
            got = decode(np.full(s.shape, word, dtype=np.uint64), table, constants.selectors)
            want = reference_word(w, s, dtype)
            bad += sum(int(np.count_nonzero(g != x)) for g, x in zip(got, want, strict=True))
    return int(s.size), bad
