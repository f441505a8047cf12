"""Finer split-K units, walked dynamically, against the drain at the end of fused_mma's M = 1 call
(benchmarks/NOTES.md, thirty-fifth session).

Question: the H200's per-block timeline (gpu_session.sh timeline at 37cf2e3) has every block of a
5120 x 17408 M = 1 call running until about 10 us, and then the blocks of one SM, which started
together with the same work, ending 5-11 us apart: the SM's last blocks run with few
neighbours, the stream falls from 4.3 TB/s to under 2, and about a third of the bytes go in that
drain. A block per (tile, split) unit cannot give an SM's late work to its early finishers. Does a
dynamic walk over finer units (more splits, a few steps each; a block takes its next unit from a
global counter while it streams the current one) shorten the drain enough to pay for the finer
units' extra partials and the walk itself?

Same run: the bench's copy of the row bytes and a read-only kernel over them; mimic_kernel
(scripts/l2_floor_probe.cu) as a block per unit at the host's split count of the tile-contiguous
launch (7 and 8), and, at each finer count, as a block per unit and as the dynamic walk with 3 and
4 stages on every resident slot, at 15 and 30 rounds of stand-in decode work a step. Before timing,
each walk must give the block-per-unit grid's partials at its split count word for word, the
dynamic one in two launches in a row (its counter back at 0).

    nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o kernels/_build/probe/libl2probe.so scripts/l2_floor_probe.cu
    cd scripts && python fine_unit_walk_probe.py --lib ../kernels/_build/probe/libl2probe.so --out FILE
"""
from __future__ import annotations

import torch
from l2_floor_probe import (
    MIMIC_EIGHT_PER_SM,
    MimicWalkProbe,
    mimic_reference_rows,
    print_share_of_copy,
    write_rows,
)

# (shape, 64-row tiles, 128-value K steps, the host's split count on registered weights, finer counts):
# every unit of a finer count has at least 4 steps, so both stage counts of the dynamic walk take it
SHAPES = (("17408x5120", 272, 40, 7, (10,)), ("5120x17408", 80, 136, 8, (17, 34)))
WORKS = (15, 30)


def main() -> int:
    probe = MimicWalkProbe(__doc__.split("\n\n")[0])
    lib, stream, sms, act, take = probe.lib, probe.stream, probe.sms, probe.act, probe.take
    flush_write = probe.flush_write
    reference = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    walked = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    resident = {stages: probe.resident(stages) for stages in (3, 4)}  # blocks an SM

    rows = mimic_reference_rows(lib, flush_write, 44)
    failures = 0
    for shape, tiles, steps, host_splits, finer in SHAPES:
        wt = torch.randint(0, 256, (tiles * steps * 4096,), dtype=torch.uint8, device="cuda")
        st = torch.randint(0, 256, (tiles * steps * 512,), dtype=torch.uint8, device="cuda")

        def launch(splits: int, stages: int, walk: str, work: int, out: torch.Tensor, wt=wt, st=st, tiles=tiles,
                   steps=steps, shape=shape) -> None:
            if walk == "dynamic":
                err = lib.probe_mimic_dynamic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits,
                                              work, stages, resident[stages] * sms, out.data_ptr(),
                                              take.data_ptr(), stream, MIMIC_EIGHT_PER_SM)
            else:
                err = lib.probe_mimic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits, work,
                                      stages, 0, out.data_ptr(), stream, MIMIC_EIGHT_PER_SM)
            assert err == 0, f"{shape} {walk} S{stages} at {splits} splits: launch error {err}"

        # (name, splits, stages, walk)
        forms = [(f"grid_S3_splits{host_splits}", host_splits, 3, "grid")]
        for splits in finer:
            forms += [(f"grid_S3_splits{splits}", splits, 3, "grid"),
                      (f"dynamic_S3_splits{splits}", splits, 3, "dynamic"),
                      (f"dynamic_S4_splits{splits}", splits, 4, "dynamic")]
        for name, splits, stages, walk in forms:
            if walk != "dynamic":
                continue
            words = tiles * splits * 128
            reference.zero_()
            launch(splits, 3, "grid", 15, reference)
            same = True
            for _ in range(2):  # the second launch must find the counter back at 0
                walked.zero_()
                launch(splits, stages, walk, 15, walked)
                torch.cuda.synchronize()
                same = same and torch.equal(reference[:words], walked[:words]) and int(take.abs().sum()) == 0
            print(f"check {shape} {name}: partials {'equal' if same else 'DIFFER'}", flush=True)
            rows.append({"subject": f"check_{shape}_{name}", "partials_equal_to_block_per_unit": same})
            failures += not same
        for work in WORKS:
            for name, splits, stages, walk in forms:
                probe.timed_row(rows, f"mimic_{shape}_{name}_work{work}",
                                lambda splits=splits, stages=stages, walk=walk, work=work:
                                launch(splits, stages, walk, work, walked), 44,
                                bytes=wt.numel() + st.numel(), blocks_per_sm=resident[stages], walk=walk,
                                stages=stages, work=work, splits=splits, units=tiles * splits)
        del wt, st
    print_share_of_copy(rows, 44)
    write_rows(probe.args.out, rows)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
