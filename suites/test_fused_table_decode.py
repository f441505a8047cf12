"""The table decode of the fused kernel and the GEMV (kernels/cuda/mma_decode.cuh) is bit-exact
wherever it is taken.

Both kernels decode a scale block through a table of eight T values built from to_T(s) and
to_T(fp32(1.5 s)) whenever every block of a warp's K step passes ``table_ok``, and by one
multiply per value otherwise. A GPU run sees only the scales of its inputs, so
:mod:`nvfp4_harness.nvfp4.table_decode` replays the kernel's integer steps in numpy, with the
selectors and ranges parsed from the header, over all 256 scale bytes x a grid of g x every code
at every position, against the contract's bits. Weakened ranges and wrong selectors must be
caught; the GPU suites then pin the kernel itself (identity read-out, goldens).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from nvfp4_harness.nvfp4 import table_decode as td
from nvfp4_kernels.nvfp4 import E4M3_TABLE

CONSTANTS = td.header_constants()


def test_header_constants_parse_and_the_binade_units_match_the_formats() -> None:
    # one binade is one unit of the exponent field: above bf16's 7 and fp16's 10 mantissa bits
    assert CONSTANTS.ranges["bfloat16"].unit == 1 << 7
    assert CONSTANTS.ranges["float16"].unit == 1 << 10
    assert len(CONSTANTS.selectors) == 6


def test_prmt_emulation_follows_the_ptx_definition() -> None:
    a, b = 0x33221100, 0x77665544
    assert int(td.prmt(a, b, 0x3210)) == 0x33221100
    assert int(td.prmt(a, b, 0x7654)) == 0x77665544
    assert int(td.prmt(a, b, 0x4725)) == 0x44772255
    # the selector's upper half is not read; bit 3 of a nibble replicates the byte's sign
    assert int(td.prmt(a, b, 0xFFFF0000 | 0x3210)) == 0x33221100
    assert int(td.prmt(0x80, 0, 0x8888)) == 0xFFFFFFFF
    assert int(td.prmt(0x7F, 0, 0x8888)) == 0


def test_test_words_put_every_code_at_every_position() -> None:
    for position in range(8):
        assert {(w >> (4 * position)) & 0xF for w in td.TEST_WORDS} == set(range(16))


@pytest.mark.parametrize("stored", ["contract", "placed"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_table_path_is_bit_exact(dtype: str, stored: str) -> None:
    """Both storages: the contract's codes (row-major weights) and the tile-contiguous layout's
    words with their signs placed, each through the decode the kernel applies to it."""
    checked, bad = td.mismatches(dtype, stored=stored)
    assert checked > 10_000, "the grid should put many scale blocks on the table path"
    assert bad == 0


@pytest.mark.parametrize(("stored", "decoder"), [("placed", "contract"), ("contract", "placed")])
def test_a_decode_of_the_other_storage_is_caught(stored: str, decoder: str) -> None:
    # the signs then land on the wrong values: the check must see it
    _, bad = td.mismatches("bfloat16", stored=stored, decoder=decoder)
    assert bad > 0


def test_placed_words_move_only_the_signs() -> None:
    for w in td.TEST_WORDS:
        placed = td.placed_word(w)
        assert placed & 0x77777777 == w & 0x77777777
        for i in range(8):
            assert (placed >> (8 * i + 7 if i < 4 else 8 * (i - 4) + 3)) & 1 == (w >> (4 * i + 3)) & 1


@pytest.mark.parametrize(("dtype", "g"), [("bfloat16", 1 / 2688), ("bfloat16", 0.0123), ("float16", 1 / 16)])
def test_table_path_covers_ordinary_scales(dtype: str, g: float) -> None:
    """Every positive normal e4m3 scale takes the table for these g (the bench's inputs use
    g = 0.0123). fp16 sends s < 2^-13, where 0.5 s would round as an fp16 subnormal, to the
    multiply path."""
    r = CONSTANTS.ranges[dtype]
    s = (E4M3_TABLE[0x08:0x7F] * np.float32(g)).astype(np.float32)
    assert td.table_ok(s, r.lo, r.hi).all()


@pytest.mark.parametrize(
    ("dtype", "lo", "hi"),
    td.WEAKENED_RANGES,
)
def test_a_weakened_range_is_caught(dtype: str, lo: int, hi: int) -> None:
    _, bad = td.mismatches(dtype, lo, hi)
    assert bad > 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("kSelLo03", 0x6400),     # entry 0 is no longer a zero byte
        ("kSelHi47", 0x7513),     # 4 t1 and 2 t15 swapped
        ("kSelPair01", 0x6240),   # the GEMV's (v0, v4) pairing instead of (v0, v1)
        ("kSelPair23", 0x7362 ^ 0x0010),
    ],
)
def test_a_wrong_selector_is_caught(name: str, value: int) -> None:
    selectors = dict(CONSTANTS.selectors, **{name: value})
    _, bad = td.mismatches("bfloat16", constants=dataclasses.replace(CONSTANTS, selectors=selectors))
    assert bad > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_range_ends_decide_for_every_byte_between(dtype: str) -> None:
    """The tiled kernel skips its per-step range test when s of both ends of the weight's scale-byte
    range passes table_ok (fused_mma.cu, scale_bytes_in_table). That is sound when, for every g,
    the ordinary bytes (0x01..0x7E) whose s passes form one run: then lo and hi passing puts every
    byte between them in the table's range. Checked over the whole g grid with the header's range
    (bytes outside 0x01..0x7E are zero, NaN or negative: their s never passes, so a range ending
    in one always sends the launch to the per-step test)."""
    r = CONSTANTS.ranges[dtype]
    values = E4M3_TABLE[0x01:0x7F].astype(np.float32)
    for g in td.g_grid():
        ok = td.table_ok((values * np.float32(g)).astype(np.float32), r.lo, r.hi)
        passing = np.flatnonzero(ok)
        assert passing.size == 0 or passing[-1] - passing[0] + 1 == passing.size, (dtype, float(g))

