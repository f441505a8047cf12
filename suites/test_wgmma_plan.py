"""The fused_wgmma path's K split plan and its CPU algorithm, on the CPU.

The plan (:func:`nvfp4_kernels.tiling.wgmma_plan`) sets the path's summation order, so it is
restated here as a search over every candidate plan: whole waves of 128-row tiles (a multiple of
the SM count, as many as fit) take all of K in one block; the left-over tiles take the most equal,
non-empty K ranges whose blocks still fit on the SMs at once. The CPU algorithm
(:func:`nvfp4_kernels.reference.fused_wgmma`) must give the whole tiles' rows the one-range sums
and the split tiles' rows the split sums, bit for bit, and the dispatcher's CPU backend must run
it with the plan the H200 runs.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nvfp4_kernels import Policy, nvfp4_matmul, reference
from nvfp4_kernels.tiling import H200_SMS, WGMMA_TILE_ROWS, wgmma_plan


def searched_plan(n: int, k: int, sms: int) -> tuple[int, int]:
    tiles, steps = -(-n // WGMMA_TILE_ROWS), k // 128
    whole = max(w for w in range(0, tiles + 1, sms))
    left = tiles - whole
    if left == 0:
        return whole, 1
    candidates = [s for s in range(1, steps + 1)
                  if -(-steps // -(-steps // s)) == s  # equal ranges, none empty
                  and (left * s <= sms or s == 1)]    # the split blocks fit on the SMs at once
    return whole, max(candidates)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300 * WGMMA_TILE_ROWS), steps=st.integers(1, 200), sms=st.sampled_from([1, 7, 114, 132]))
def test_the_plan_is_the_search_over_every_candidate(n: int, steps: int, sms: int) -> None:
    assert wgmma_plan(n, 128 * steps, sms) == searched_plan(n, 128 * steps, sms)


def test_the_plans_of_the_bench_shapes() -> None:
    # 136 tiles: one wave of 132 whole, 4 left over split in 20 (40 steps: 33 would leave ranges of
    # 2 steps with 13 empty); 40 tiles: all split in 3 (136 steps, 46 a range)
    assert searched_plan(17408, 5120, H200_SMS) == wgmma_plan(17408, 5120) == (132, 20)
    assert searched_plan(5120, 17408, H200_SMS) == wgmma_plan(5120, 17408) == (0, 3)


def test_the_plan_refuses_what_the_kernel_cannot_do() -> None:
    for n, k, sms in ((0, 128, 132), (8, 96, 132), (8, 0, 132), (8, 128, 0)):
        with pytest.raises(ValueError):
            wgmma_plan(n, k, sms)


def _operands(n: int, k: int, m: int, seed: int):
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
    scales = rng.integers(0x30, 0x40, (n, k // 16), dtype=np.uint8)
    a = rng.uniform(-2, 2, (m, k)).astype(ml_dtypes.bfloat16)
    bias = rng.uniform(-1, 1, n).astype(ml_dtypes.bfloat16)
    return a, packed, scales, bias


@pytest.mark.parametrize("whole_rows,splits", [(0, 3), (128, 3), (256, 6), (300, 1)])
def test_the_cpu_algorithm_sums_whole_and_split_rows_as_their_own_split_counts(whole_rows: int, splits: int) -> None:
    a, packed, scales, bias = _operands(300, 768, 5, seed=whole_rows + splits)
    g = np.float32(0.0123)
    got = reference.fused_wgmma(a, packed, scales, g, 16, bias, whole_rows=whole_rows, splits=splits)
    one = reference.fused_mma(a, packed, scales, g, 16, bias, splits=1)
    split = reference.fused_mma(a, packed, scales, g, 16, bias, splits=splits)
    assert np.array_equal(got[:, :whole_rows].view(np.uint16), one[:, :whole_rows].view(np.uint16))
    assert np.array_equal(got[:, whole_rows:].view(np.uint16), split[:, whole_rows:].view(np.uint16))


def test_the_cpu_backend_runs_the_h200_plan() -> None:
    """A weight of one wave of whole tiles and a partial left-over one: the dispatcher's CPU run
    has the bits of the plan's algorithm, which differ from the unsplit sums on this operand."""
    n, k, m = H200_SMS * WGMMA_TILE_ROWS + 70, 1024, 130
    a, packed, scales, bias = _operands(n, k, m, seed=5)
    g = np.float32(0.0123)
    y = nvfp4_matmul(a, packed, scales, g, 16, bias, policy=Policy(force_path="fused_wgmma", wgmma_min_m=1))
    whole, splits = wgmma_plan(n, k)
    assert (whole, splits) == (H200_SMS, 8)
    want = reference.fused_wgmma(a, packed, scales, g, 16, bias, whole_rows=whole * WGMMA_TILE_ROWS, splits=splits)
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
    unsplit = reference.fused_mma(a[:, :], packed, scales, g, 16, bias, splits=1)
    assert not np.array_equal(y[:, whole * WGMMA_TILE_ROWS:].view(np.uint16),
                              unsplit[:, whole * WGMMA_TILE_ROWS:].view(np.uint16)), \
        "the operand must tell the split sums from the unsplit ones"


def test_the_cpu_algorithm_refuses_a_bad_row_count() -> None:
    a, packed, scales, _ = _operands(10, 128, 2, seed=1)
    for whole_rows in (-1, 11, True):
        with pytest.raises(ValueError, match="whole_rows"):
            reference.fused_wgmma(a, packed, scales, np.float32(1.0), 16, whole_rows=whole_rows)
