"""CPU tests of scripts/fused_timeline.py, the per-block timeline of a fused_mma launch
(benchmarks/NOTES.md, thirty-third session): its edits still apply to this tree's fused_mma.cu and
record every field, and its summary turns records into the durations they were made from."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def timeline():
    pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import fused_timeline
    finally:
        sys.path.pop(0)
    return fused_timeline


def test_the_instrumentation_applies_to_this_tree_s_kernel_and_writes_every_field(timeline) -> None:
    """Every anchor occurs once in kernels/cuda/fused_mma.cu (a kernel change that moves one makes the
    probe stop with the anchor, not build a kernel that records nothing), and the instrumented source
    writes each record field and exports the reader."""
    source = (REPO / "kernels" / "cuda" / "fused_mma.cu").read_text()
    out = timeline.instrumented_source(source)
    assert out.count("g_timeline[blockIdx.x]") >= 3
    for field in ("gt_start", "c_start", "smid", "steps", "c_first", "wait_cycles", "c_loop_end", "c_end", "gt_end"):
        assert f".{field} =" in out, field
    assert 'int nvfp4_timeline_read(void* dst, int blocks)' in out
    # the kernel without one of its anchors (here the K loop's wait) is refused, naming the anchor
    broken = source.replace("    cp_async_wait<kRing - 2>();\n    __syncthreads();  // step s", "    // step s", 1)
    with pytest.raises(SystemExit, match="anchor found 0 times"):
        timeline.instrumented_source(broken)


def test_the_summary_recovers_the_durations_the_records_were_made_from(timeline) -> None:
    """Synthetic records of a launch of two waves on 4 SMs at 2 GHz: each block starts, waits 3000
    cycles for its first step's data, runs 6 steps with 1000 cycles of waits, and takes 2000 cycles
    after its loop; the summary must give those times back in us and the waves' shape."""
    blocks = 16
    rec = np.zeros(blocks, dtype=timeline.RECORD_DTYPE)
    rec["smid"] = np.arange(blocks) % 4
    rec["steps"] = 6
    wave = np.arange(blocks) // 8  # 8 resident blocks: the second 8 start as the first 8 end
    duration_ns = 10_000
    rec["gt_start"] = 10**12 + wave * duration_ns + 100 * (np.arange(blocks) % 8)
    rec["gt_end"] = rec["gt_start"] + duration_ns
    rec["c_start"] = 7_000_000 + 13 * np.arange(blocks)  # SM clocks need not agree
    rec["c_first"] = rec["c_start"] + 3000
    rec["c_end"] = rec["c_start"] + 2 * duration_ns
    rec["c_loop_end"] = rec["c_end"] - 2000
    rec["wait_cycles"] = 1000
    s = timeline.summarize(rec)
    assert s["sm_clock_ghz"] == pytest.approx(2.0)
    assert s["blocks"] == 16 and s["sms_used"] == 4 and s["blocks_per_sm"] == {"min": 4, "max": 4}
    assert s["globaltimer_resolution_ns"] == 100
    assert s["first_data_us"]["p50"] == pytest.approx(1.5)
    assert s["epilogue_us"]["p50"] == pytest.approx(1.0)
    assert s["block_total_us"]["max"] == pytest.approx(10.0)
    loop_us = 10.0 - 1.5 - 1.0
    assert s["loop_us"]["p50"] == pytest.approx(loop_us)
    assert s["per_step_us"]["p50"] == pytest.approx(loop_us / 5)
    assert s["loop_wait_share"] == pytest.approx(0.5 / loop_us, abs=1e-4)
    assert s["span_us"] == pytest.approx(20.7)
    assert s["tail_after_p90_end_us"] == pytest.approx(20.7 - np.percentile(rec["gt_end"] - rec["gt_start"].min(),
                                                                            90) / 1000.0)
    # every SM ran 4 blocks; its last end, worked out block by block
    last_end = [max((int(rec["gt_end"][b]) - int(rec["gt_start"].min())) / 1000.0 for b in range(blocks) if b % 4 == sm)
                for sm in range(4)]
    assert s["sm_last_end_us_by_blocks"] == {"4": pytest.approx(float(np.median(last_end)))}
    # each block's 6 steps end evenly over its loop (1.5 us to 9 us after its start): 2.75, 4.0, ...
    expected = [0] * 21
    for b in range(blocks):
        block_start_us = (int(rec["gt_start"][b]) - int(rec["gt_start"].min())) / 1000.0
        for i in range(1, 7):
            expected[int(block_start_us + 1.5 + i * 7.5 / 6)] += 1
    assert s["steps_done_every_1us"] == expected[:len(s["steps_done_every_1us"])]
    assert sum(s["steps_done_every_1us"]) == 6 * blocks
    resident = s["resident_blocks_every_0.5us"]
    assert resident[0] == 1 and max(resident) == 8 and resident[-1] == 0
    # a block whose first-data stamp was never written (0) is refused, not summarized
    rec["c_first"][3] = 0
    with pytest.raises(ValueError, match="1 of 16 timeline records out of order"):
        timeline.summarize(rec)
