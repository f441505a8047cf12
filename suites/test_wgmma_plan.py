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
from nvfp4_kernels.tiling import (
    H200_SMS,
    WGMMA_FUSED_MMA_PLAN_MAX_M,
    WGMMA_TILE_ROWS,
    fused_split_count,
    wgmma_call_plan,
    wgmma_plan,
)


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
        for m in (1, 200):
            with pytest.raises(ValueError):
                wgmma_call_plan(n, k, m, sms)
    for m in (0, -1, True, 1.0):
        with pytest.raises(ValueError, match="m must be an int >= 1"):
            wgmma_call_plan(128, 128, m)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 300 * WGMMA_TILE_ROWS), steps=st.integers(1, 200), m=st.integers(1, 256),
       sms=st.sampled_from([7, 114, 132]), occupancy=st.sampled_from([None, 1, 3, 8]))
def test_a_call_of_at_most_64_rows_sums_fused_mmas_k_ranges(n: int, steps: int, m: int, sms: int,
                                                           occupancy: int | None) -> None:
    """Up to the 64-row activation tile, every tile is split (no whole tiles) into the K ranges of
    fused_mma's split count for the same shape, M and GPU: ranges of ceil(steps / count) steps,
    counted as the kernel counts them (none empty). Above it, the whole-tile plan."""
    k = 128 * steps
    whole, splits = wgmma_call_plan(n, k, m, sms, occupancy)
    if m > WGMMA_FUSED_MMA_PLAN_MAX_M:
        assert (whole, splits) == wgmma_plan(n, k, sms)
        return
    count = fused_split_count(n, k, m, sms, occupancy)
    assert whole == 0 and 1 <= splits <= count
    assert -(-steps // splits) == -(-steps // count)  # the same range length, so the same ranges
    assert -(-steps // -(-steps // splits)) == splits  # none empty: what the launcher accepts


def test_the_call_plans_of_the_bench_shapes() -> None:
    """At M = 64 the H200 runs fused_mma's 3 and 6 splits (benchmarks/NOTES.md, twenty-third
    session), at M = 65 the whole-tile plans."""
    assert wgmma_call_plan(17408, 5120, 64) == (0, fused_split_count(17408, 5120, 64)) == (0, 3)
    assert wgmma_call_plan(5120, 17408, 64) == (0, fused_split_count(5120, 17408, 64)) == (0, 6)
    assert wgmma_call_plan(17408, 5120, 65) == (132, 20) and wgmma_call_plan(5120, 17408, 65) == (0, 3)


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


@pytest.mark.parametrize("m", [1, 33, 64])
def test_up_to_64_rows_the_cpu_backends_fused_wgmma_has_fused_mmas_bits(m: int) -> None:
    """The dispatcher's CPU backend runs the call's plan, which up to 64 rows is fused_mma's split
    count: forcing either path gives the same bits, on a shape the H200 splits at these M (the
    operand tells split sums from unsplit ones, checked at M = 1)."""
    n, k = 600, 4096
    a, packed, scales, bias = _operands(n, k, m, seed=m)
    g = np.float32(0.0123)
    assert fused_split_count(n, k, m) > 1
    runs = {path: nvfp4_matmul(a, packed, scales, g, 16, bias, policy=Policy(force_path=path, wgmma_min_m=1))
            for path in ("fused_wgmma", "fused_mma")}
    assert np.array_equal(runs["fused_wgmma"].view(np.uint16), runs["fused_mma"].view(np.uint16))
    if m == 1:
        unsplit = reference.fused_mma(a, packed, scales, g, 16, bias, splits=1)
        assert not np.array_equal(runs["fused_mma"].view(np.uint16), unsplit.view(np.uint16))


def test_the_cpu_algorithm_refuses_a_bad_row_count() -> None:
    a, packed, scales, _ = _operands(10, 128, 2, seed=1)
    for whole_rows in (-1, 11, True):
        with pytest.raises(ValueError, match="whole_rows"):
            reference.fused_wgmma(a, packed, scales, np.float32(1.0), 16, whole_rows=whole_rows)
