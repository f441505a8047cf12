"""How the fused tensor-core kernel (kernels/cuda/fused_mma.cu) tiles a problem and splits K.

The kernel's bits depend on its K split count (each split sums its own K range in fp32, the
partials are then summed in split order), so the count is chosen here, on the host, by one
function that the CUDA backend and the CPU backend's faithful algorithm both call: the CPU run
of a shape exercises the same split structure the H200 runs.

The tile table mirrors ``config_for`` in fused_mma.cu (the library exports ``nvfp4_fused_tile``
and a CPU test compares the two); the occupancy table is what ``nvfp4_fused_occupancy`` reports
on an H200 (a GPU test compares the two), used where no GPU is there to ask.
"""

from __future__ import annotations

from nvfp4_kernels.model import FUSED_MAX_M
from nvfp4_kernels.reference import FUSED_STEP_K

#: multiprocessors of an H200 / H100 SXM: the CPU backend's stand-in for the device
H200_SMS = 132
#: (weight rows, activation rows) per block -> resident blocks per multiprocessor on an H200
FUSED_OCCUPANCY_H200: dict[tuple[int, int], int] = {(64, 8): 8, (64, 16): 7, (128, 32): 3, (128, 64): 2}
#: (weight rows, activation rows) -> the most resident blocks per multiprocessor the split model
#: counts. The 16-row tile's kernel has 7 since its copies use fixed offsets (72 registers, was 80
#: and 6), but on the H200 the counts the model picks for 7 were up to 12% slower than the ones
#: it picks for 6 (5120 x 17408, 4096 x 4096, M = 9 and 16; within 3% either way on 17408 x 5120:
#: benchmarks/experiments/fused-loader-and-placed-signs-2026-12-02.json): its fill term asks for
#: enough splits to fill 7 slots per SM, more blocks than this kernel needs to keep memory busy.
SPLIT_MODEL_MAX_BLOCKS: dict[tuple[int, int], int] = {(64, 16): 6}
#: the most K splits the host asks for
MAX_SPLITS = 16
#: each split keeps at least this many 128-value steps (the kernel keeps 2 steps in flight)
MIN_STEPS_PER_SPLIT = 3
#: how much the partial sums' traffic weighs against the weight stream (they mostly stay in L2)
PARTIAL_WEIGHT = 0.25
#: how much of a partial last wave's idle slots cost, by activation rows per block: thin tiles
#: (8 or more resident blocks per SM, memory-bound) let the last wave's blocks stream faster,
#: the 64-row tile (2 resident blocks, MMA-bound) gains almost nothing from the idle slots
#: (benchmarks/NOTES.md, "The split model at M > 64")
TAIL_WEIGHT: dict[int, float] = {8: 0.3, 16: 0.3, 32: 0.3, 64: 0.8}
#: The thin tiles' (M <= 16) single-wave regime (fused_split_count): where the fill model's count
#: leaves every block resident at once with more than this many blocks per multiprocessor ...
LATENCY_MIN_BLOCKS_PER_SM = 2
#: ... the call lasts one block's K walk, slowed once more than this many blocks share a
#: multiprocessor (they divide its decode throughput) ...
LATENCY_BLOCKS_PER_SM = 5.0
#: ... plus a fixed cost per block (the pipeline's fill), in K steps ...
LATENCY_FIXED_STEPS = 1.0
#: ... plus the split-K sum, which reads one more partial per output for every split, in K steps
#: per split. Fitted on the H200's sweeps of every count at M = 1, 8 and 16 on six layer shapes
#: (benchmarks/NOTES.md, eleventh session): the same counts for every fixed cost from 0 to 2
#: steps, split costs from 0.5 to 0.8 and a minimum of 2 or 3 blocks per SM.
LATENCY_SPLIT_STEPS = 0.8


def fused_tile(m: int) -> tuple[int, int]:
    """(weight rows, activation rows) per block of the fused kernel for ``m`` activation rows."""
    if not 1 <= m <= FUSED_MAX_M:
        raise ValueError(f"the fused kernel takes 1 <= M <= {FUSED_MAX_M}, got M={m}")
    if m <= 8:
        return 64, 8
    if m <= 16:
        return 64, 16
    if m <= 32:
        return 128, 32
    return 128, 64


def fused_grid_tiles(n: int, m: int) -> int:
    """(N, M) tiles of the fused kernel's launch for ``n`` weight rows and ``m`` activation rows:
    its blocks per K split (fused_mma.cu, grid_tiles)."""
    rows, act_rows = fused_tile(m)
    return -(-n // rows) * -(-m // act_rows)


#: warps of the fused kernel's block, and of its wide block (fused_mma.cu, block_warps)
FUSED_WARPS, FUSED_WIDE_WARPS = 4, 8
#: a grid of at most this many blocks per multiprocessor runs its two-row-tile blocks wide
FUSED_WIDE_BLOCKS_PER_SM = 1


def fused_block_warps(m: int, n: int, splits: int, sms: int = H200_SMS) -> int:
    """Warps per block of the fused kernel's launch for ``m`` activation rows, ``n`` weight rows
    and ``splits`` K splits on ``sms`` multiprocessors; mirrors ``block_warps`` in fused_mma.cu
    (exported as ``nvfp4_fused_block_warps``, compared by a CPU test).

    The tiles above M = 16 give each of 4 warps two 16-row tiles. When their grid has at most one
    block per multiprocessor, every SM holds a single block and the call lasts one block's
    latency, so the kernel runs the same 128 rows as 8 warps of one row tile each: the same split
    count and K order, so the same bits, 1.04-1.19x faster on the H200 at up to 132 blocks
    (benchmarks/experiments/fused-wide-blocks-2026-12-02.json), and slower where the grid fills
    the GPU (0.83-1.06x from 192 blocks on, faster narrow on most rows).
    """
    if splits < 1 or sms < 1 or n < 1:
        raise ValueError(f"splits, sms and n must be >= 1, got {splits}, {sms}, {n}")
    if fused_tile(m)[0] == 64:  # one row tile per warp already (M <= 16)
        return FUSED_WARPS
    blocks = fused_grid_tiles(n, m) * splits
    return FUSED_WIDE_WARPS if blocks <= sms * FUSED_WIDE_BLOCKS_PER_SM else FUSED_WARPS


def fused_split_count(n: int, k: int, m: int, sms: int = H200_SMS, blocks_per_sm: int | None = None) -> int:
    """The K split count for an [m, k] x [n, k]^T problem on a GPU with ``sms`` multiprocessors.

    The kernel streams its weights, so what matters first is enough resident blocks to keep
    the memory system busy (``fill``: resident blocks over block slots), then how evenly the
    last wave fills the slots (``tail``), against the fp32 [m, n] partial each extra split
    writes and the finalize kernel re-reads (weighed at :data:`PARTIAL_WEIGHT` of the weight
    bytes, since they mostly stay in L2). A larger count must beat the best score by 3%. On
    the H200 this model picks within 4% of the fastest count measured on 17408 x 5120 and
    5120 x 17408 at M = 1, 8, 16, 64 and 256 (benchmarks/NOTES.md). ``blocks_per_sm`` (the
    kernel's occupancy) is capped at :data:`SPLIT_MODEL_MAX_BLOCKS` for the tiles it lists.

    A thin-tile grid (M <= 16) that this count leaves in one wave of more than
    :data:`LATENCY_MIN_BLOCKS_PER_SM` blocks per SM is not memory-bound but waits on its blocks'
    decode; its count comes from :func:`_single_wave_split_count` instead (the small and mid-size
    layers: 4096 x 4096, 5120 x 5120, 2048 x 6144, 6144 x 2048, 5120 x 17408).
    """
    rows, act_rows = fused_tile(m)
    if k % FUSED_STEP_K:
        raise ValueError(f"the fused kernel needs K % {FUSED_STEP_K} == 0, got K={k}")
    if blocks_per_sm is None:
        blocks_per_sm = FUSED_OCCUPANCY_H200[(rows, act_rows)]
    if sms < 1 or blocks_per_sm < 1:
        raise ValueError(f"sms and blocks_per_sm must be >= 1, got {sms} and {blocks_per_sm}")
    blocks_per_sm = min(blocks_per_sm, SPLIT_MODEL_MAX_BLOCKS.get((rows, act_rows), blocks_per_sm))
    tiles = fused_grid_tiles(n, m)
    steps = k // FUSED_STEP_K
    slots = sms * blocks_per_sm
    weight_bytes = n * k * 9 / 16
    tail_weight = TAIL_WEIGHT[act_rows]

    def score(s: int) -> float:
        blocks = tiles * s
        fill = min(blocks, slots) / slots
        waves = -(-blocks // slots)
        tail = blocks / (waves * slots) if blocks > slots else 1.0
        partial_bytes = 0 if s == 1 else 8 * s * m * n
        return fill * (1 - tail_weight + tail_weight * tail) / (1 + PARTIAL_WEIGHT * partial_bytes / weight_bytes)

    counts = [s for s in range(1, min(MAX_SPLITS, steps) + 1) if s == 1 or -(-steps // s) >= MIN_STEPS_PER_SPLIT]
    best, best_score = 1, score(1)
    for s in counts[1:]:
        current = score(s)
        if current > best_score * 1.03:
            best, best_score = s, current
    if act_rows <= 16 and LATENCY_MIN_BLOCKS_PER_SM * sms < tiles * best <= slots:
        return _single_wave_split_count(tiles, steps, sms, counts)
    return best


def _single_wave_split_count(tiles: int, steps: int, sms: int, counts: list[int]) -> int:
    """The count with the shortest estimated call among ``counts`` for a thin-tile grid that fits
    in one wave (fused_split_count): the K steps of one block (plus its fixed cost), stretched by
    how far its SM is shared beyond :data:`LATENCY_BLOCKS_PER_SM`, plus the split sum's cost.

    Why a second model: the fill model asks such grids for as many splits as fill every block
    slot (15 on 4096 x 4096 at M = 1, 13 on 5120 x 17408); on the H200 those ran 1.03-1.22x
    slower than 4-8 splits, whose blocks each walk more steps while fewer of them share an SM.
    Grids of at most :data:`LATENCY_MIN_BLOCKS_PER_SM` blocks per SM (256 x 5120, 1024 x 2048)
    keep the fill model's count, which the 2026-12-01 sweep (an older kernel) measured fastest
    there; today's kernel favours this estimate on them too (benchmarks/NOTES.md, tiny layers)."""

    def estimate(s: int) -> float:
        per_sm = tiles * s / sms
        sum_cost = LATENCY_SPLIT_STEPS * s if s > 1 else 0.0
        return (-(-steps // s) + LATENCY_FIXED_STEPS) * max(1.0, per_sm / LATENCY_BLOCKS_PER_SM) + sum_cost

    best, best_estimate = counts[0], estimate(counts[0])
    for s in counts[1:]:
        current = estimate(s)
        if current < best_estimate * 0.999:  # a larger count must be strictly faster
            best, best_estimate = s, current
    return best


# --- the fused_wgmma kernel (kernels/cuda/fused_wgmma.cu) ----------------------------------------

#: weight rows a block of the fused_wgmma kernel owns (two warpgroups of 64; the library's
#: ``nvfp4_fused_wgmma_tile_rows``, which a CPU test compares)
WGMMA_TILE_ROWS = 128


def nonempty_ranges(steps: int, splits: int) -> int:
    """How many K ranges ``splits`` equal ranges of ceil(steps / splits) steps make once the empty
    ones at the end are dropped: the count the fused_wgmma kernel takes for the same ranges (it
    accepts ``splits`` only where this equals it)."""
    return -(-steps // -(-steps // splits))


def _check_wgmma_shape(n: int, k: int) -> None:
    if n < 1 or k < FUSED_STEP_K or k % FUSED_STEP_K:
        raise ValueError(f"the fused_wgmma kernel needs N >= 1 and K a positive multiple of {FUSED_STEP_K}, "
                         f"got N={n}, K={k}")


#: the largest M whose fused_wgmma call runs fused_mma's split count (wgmma_call_plan): the M
#: the kernel's narrowest activation tile holds (kMmaOrderActTiles[0] in fused_wgmma.cu, which
#: ``nvfp4_fused_wgmma_act_rows`` reports and a CPU test compares)
WGMMA_FUSED_MMA_PLAN_MAX_M = 64


def wgmma_call_plan(n: int, k: int, m: int, sms: int = H200_SMS,
                    fused_blocks_per_sm: int | None = None) -> tuple[int, int]:
    """The (whole_tiles, splits) plan a fused_wgmma call of ``m`` rows runs on a GPU of ``sms``
    multiprocessors: the call's summation order, so the CUDA backend and the CPU backend's
    faithful algorithm both take it from here.

    Up to :data:`WGMMA_FUSED_MMA_PLAN_MAX_M` rows (the 64-row activation tile) it is fused_mma's
    split count for the same M (:func:`fused_split_count`, with ``fused_blocks_per_sm`` the
    fused_mma kernel's occupancy on the GPU, the H200's table when None) over every tile, no
    whole tiles: the K ranges fused_mma sums, so the call has fused_mma's bits. On the H200
    (benchmarks/NOTES.md, twenty-third session) that plan was the fastest timed for the 64-row
    tile with its ring at M = 48..64 on 5120 x 17408, and within 4% of the fastest 64-row launch
    elsewhere (17408 x 5120, M = 64: 52.6 us against 50.8 at two blocks an SM and 4 splits), where
    :func:`wgmma_plan`'s plan (132 whole tiles, 4 split in 20) took 64.0 us. Above it,
    :func:`wgmma_plan`."""
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m must be an int >= 1, got {m!r}")
    if m > WGMMA_FUSED_MMA_PLAN_MAX_M:
        return wgmma_plan(n, k, sms)
    _check_wgmma_shape(n, k)
    return 0, nonempty_ranges(k // FUSED_STEP_K, fused_split_count(n, k, m, sms, fused_blocks_per_sm))


def wgmma_plan(n: int, k: int, sms: int = H200_SMS) -> tuple[int, int]:
    """The fused_wgmma kernel's K split plan for an [n, k] weight on a GPU of ``sms``
    multiprocessors at M > :data:`WGMMA_FUSED_MMA_PLAN_MAX_M` (its 128- to 256-row activation
    tiles; :func:`wgmma_call_plan` gives every M's): (whole_tiles, splits). The kernel runs one
    block per multiprocessor (its accumulators take most of the register file), so a row tile of
    128 that waits for a second wave costs a whole tile's K walk. The plan gives whole waves of
    tiles one block each (every K step, no partial sums) and splits the tiles left over (all of
    them when there are fewer tiles than multiprocessors) into ``splits`` equal K ranges, as many
    as fill the multiprocessors, none empty; the finalize kernel sums those in split order. On
    the H200 (benchmarks/NOTES.md, fourteenth session) this was the fastest plan timed on both
    large shapes at M = 128..256: 17408 x 5120 (136 tiles) runs 132 whole tiles and splits 4 in
    20 (99.7 us at M = 256, against 165.3 with one split and 155.3 with two), 5120 x 17408 (40
    tiles) splits all in 3 (107.5 us, against 142.3 and 149.5 with 2 and 4)."""
    _check_wgmma_shape(n, k)
    if sms < 1:
        raise ValueError(f"sms must be >= 1, got {sms}")
    tiles, steps = -(-n // WGMMA_TILE_ROWS), k // FUSED_STEP_K
    whole = (tiles // sms) * sms
    left = tiles - whole
    if left == 0:
        return whole, 1
    return whole, nonempty_ranges(steps, max(1, min(sms // left, steps)))
