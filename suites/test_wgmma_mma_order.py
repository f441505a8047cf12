"""fused_mma's K order for the wgmma kernel (fused_wgmma.cu's MMA_ORDER, the dispatcher's launch;
first measured as a dev variant by scripts/ws_dev/mma_order_dev.py): the order's definition
against the two kernels it must agree with, and the permutation kernel's index arithmetic.

The variant's claim is that it pairs every weight with its activation (so it computes the product)
and that k16 MMA j of a step takes exactly the values that fused_mma.cu's MMA j takes at the same
columns (so its bits are fused_mma's at the same K ranges, which the GPU suites then check).
Both sides are derived here independently of `mma_k_order`'s formula: fused_mma's from its
thread mapping (lane t decodes codes 32 t .. 32 t + 31, word q into the registers of MMAs 2 q and
2 q + 1; its activations from 16-byte chunk 4 t + q of the row) and PTX's m16n8k16 fragment
layouts; the wgmma variant's from its decode's register assignment. The GPU confirms the rest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "ws_dev"))
try:
    from mma_order_dev import mma_k_order, permute_act
finally:
    sys.path.pop(0)

#: PTX m16n8k16 A fragment (bf16/fp16): register r of lane (g, t) holds row g + 8 (r % 2), columns
#: 2 t + 8 (r // 2) and the next one (registers a0 .. a3 as 32-bit pairs)
A_COLUMNS = {r: (8 * (r // 2), r % 2) for r in range(4)}
#: PTX m16n8k16 B fragment: register b of lane (g, t) holds rows (K) 2 t + 8 b and the next one
B_ROWS = {b: 8 * b for b in range(2)}


def _fused_mma_weight_slots() -> dict[tuple[int, int], int]:
    """(MMA j, column c) -> the K offset whose weight fused_mma.cu puts there. Its decode of word q
    (decode_word_table) returns registers r[0..3] = codes (0, 1), (2, 3), (4, 5), (6, 7) of the
    word; mma_word runs MMA 2 q with A = (f[g][0], f[g+8][0], f[g][1], f[g+8][1]) and MMA 2 q + 1
    with registers 2 and 3; word q of lane t holds codes 32 t + 8 q .. 32 t + 8 q + 7."""
    slots = {}
    for t in range(4):
        for q in range(4):
            for x in range(2):  # MMA 2 q + x
                for reg in range(2):  # its A registers of row g: a0 (reg 0) and a2 (reg 1)
                    word_register = 2 * x + reg  # decode_word_table's r[...]
                    for e in range(2):
                        k = 32 * t + 8 * q + 2 * word_register + e
                        column = 2 * t + A_COLUMNS[2 * reg][0] + e
                        slots[(2 * q + x, column)] = k
    return slots


def _fused_mma_activation_slots() -> dict[tuple[int, int], int]:
    """(MMA j, B row k) -> the K offset of the activation fused_mma.cu puts there: load_act reads
    chunk 4 t + q (values 32 t + 8 q .. + 7) as b.x .. b.w, and MMA 2 q takes (b.x, b.y), MMA 2 q + 1
    (b.z, b.w) as its B registers 0 and 1."""
    slots = {}
    for t in range(4):
        for q in range(4):
            for x in range(2):
                for b in range(2):
                    for e in range(2):
                        k = 32 * t + 8 * q + 4 * x + 2 * b + e
                        slots[(2 * q + x, 2 * t + B_ROWS[b] + e)] = k
    return slots


def _wgmma_mma_order_weight_slots() -> dict[tuple[int, int], int]:
    """(MMA j, column c) -> K offset in the MMA_ORDER kernel: decode_half_mma_order decodes words
    2 h + qq (lane t's codes 32 t + 8 (2 h + qq) ..) and gives MMA 4 h + 2 qq + x the A registers
    (f[qq][row g][2 x], f[qq][row g+8][2 x], f[qq][g][2 x + 1], f[qq][g+8][2 x + 1])."""
    slots = {}
    for t in range(4):
        for h in range(2):
            for qq in range(2):
                for x in range(2):
                    for a_reg, word_register in ((0, 2 * x), (2, 2 * x + 1)):  # a0 and a2: row g
                        for e in range(2):
                            k = 32 * t + 8 * (2 * h + qq) + 2 * word_register + e
                            column = 2 * t + A_COLUMNS[a_reg][0] + e
                            slots[(4 * h + 2 * qq + x, column)] = k
    return slots


def test_the_order_is_a_permutation_of_each_step() -> None:
    order = mma_k_order()
    assert sorted(order.tolist()) == list(range(128))


def test_the_order_puts_in_each_mma_column_what_fused_mma_puts_there() -> None:
    order = mma_k_order()
    by_order = {(j, c): int(order[16 * j + c]) for j in range(8) for c in range(16)}
    assert _fused_mma_weight_slots() == by_order
    # fused_mma pairs each weight with its own activation, and so does the permuted B operand
    assert _fused_mma_activation_slots() == by_order


def test_the_wgmma_variants_decode_fills_the_same_slots() -> None:
    order = mma_k_order()
    assert _wgmma_mma_order_weight_slots() == {(j, c): int(order[16 * j + c]) for j in range(8) for c in range(16)}


def test_each_lane_meets_two_scale_blocks_a_row_and_step() -> None:
    """The point of the order: lane t's values of a step (its columns 2 t, 2 t + 1, 2 t + 8, 2 t + 9
    of every MMA) lie in scale blocks 2 t and 2 t + 1 only, one per half step."""
    order = mma_k_order()
    for t in range(4):
        for h in range(2):
            columns = (2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9)
            ks = [int(order[16 * j + c]) for j in range(4 * h, 4 * h + 4) for c in columns]
            assert {k // 16 for k in ks} == {2 * t + h}


def _permute_like_the_kernel(pairs: np.ndarray, rows_out: int, k: int) -> np.ndarray:
    """nvfp4_wgmma_permute_act_kernel's index arithmetic on a flat array of 4-byte pairs: output
    chunk i (four pairs) takes the pairs src, src + 16, src + 32, src + 48 with
    src = ((i >> 4) << 6) + (i & 15), or zeros from chunk chunks_in = pairs / 4 on."""
    chunks_in, chunks_out = pairs.size // 4, rows_out * k // 8
    out = np.empty(4 * chunks_out, dtype=pairs.dtype)
    for i in range(chunks_out):
        src = ((i >> 4) << 6) + (i & 15)
        out[4 * i:4 * i + 4] = pairs[[src, src + 16, src + 32, src + 48]] if i < chunks_in else 0
    return out


@pytest.mark.parametrize(("m", "rows_out", "k"), [(1, 1, 128), (3, 3, 384), (2, 2, 1024), (1, 16, 256), (3, 8, 128)])
def test_the_permutation_kernels_indexing_is_the_order(m: int, rows_out: int, k: int) -> None:
    values = np.random.default_rng(m * k).integers(1, 2**16, (m, k), dtype=np.uint16)
    want = np.concatenate([permute_act(values), np.zeros((rows_out - m, k), np.uint16)])
    got = _permute_like_the_kernel(values.reshape(-1).view(np.uint32), rows_out, k).view(np.uint16)
    assert np.array_equal(got.reshape(rows_out, k), want)


def test_permute_act_takes_torch_as_numpy() -> None:
    torch = pytest.importorskip("torch")
    values = np.arange(2 * 256, dtype=np.float32).reshape(2, 256)
    assert np.array_equal(permute_act(torch.from_numpy(values)).numpy(), permute_act(values))
    assert np.array_equal(permute_act(values)[:, :128], values[:, mma_k_order()])
