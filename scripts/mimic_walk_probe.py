"""Dynamic unit walk against a block per unit, in the mimic of fused_mma's M = 1 K loop
(benchmarks/NOTES.md, thirty-fourth session).

Question: fused_mma launches a block per (tile, split) unit. On 17408 x 5120 at M = 1 that is
1904 blocks on 1056 slots, and the H100's per-block timeline (thirty-third session) shows the first
wave's blocks ending together and the stream falling to a third for about 4 us while the second
wave's blocks wait for their first data. The ninth session's persistent walk (one wave, each block
taking units blockIdx.x, + gridDim.x, ... with its pipeline running on across units) lost, because
a static walk keeps each block's units on its SM. Does a dynamic walk, where a block takes its next
unit from a global counter while it streams the current one (mimic_kernel, kWalkDynamic), keep the
pipeline full through the wave change without giving up the hardware's first-free-slot balance?

Same run: the bench's copy of the row bytes and a read-only kernel over them; mimic_kernel as a
block per unit (3 stages, 8 blocks of 128 threads an SM, as fused_mma), the static walk, and the
dynamic walk with 3 and 4 stages on every resident slot, each with 0, 15 and 30 rounds of stand-in
decode work a step, on both large shapes' tile and step counts. Before timing, each walk must give
the block-per-unit grid's partials word for word (every unit's bytes read in the same order), and
two dynamic launches in a row must too (each launch leaves its counter at 0 for the next).

    nvcc -O3 -arch=sm_90 -shared -Xcompiler -fPIC -o kernels/_build/probe/libl2probe.so scripts/l2_floor_probe.cu
    python scripts/mimic_walk_probe.py --lib kernels/_build/probe/libl2probe.so --out FILE
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

SHAPES = (("17408x5120", 272, 40, 7), ("5120x17408", 80, 136, 13))
WORKS = (0, 15, 30)
# (name, stages, walk): walk "grid" is a block per unit, "static" and "dynamic" one wave of walking blocks
WALKS = (("grid_S3", 3, "grid"), ("static_S3", 3, "static"), ("dynamic_S3", 3, "dynamic"),
         ("dynamic_S4", 4, "dynamic"))


def main() -> int:
    probe = MimicWalkProbe(__doc__.split("\n\n")[0])
    lib, stream, sms, act, take = probe.lib, probe.stream, probe.sms, probe.act, probe.take
    flush_write = probe.flush_write
    outs = {name: torch.zeros(1 << 20, dtype=torch.int32, device="cuda") for name, _, _ in WALKS}
    resident = {stages: probe.resident(stages) for _, stages, _ in WALKS}  # blocks an SM

    rows = mimic_reference_rows(lib, flush_write, 40)
    failures = 0
    for shape, tiles, steps, splits in SHAPES:
        wt = torch.randint(0, 256, (tiles * steps * 4096,), dtype=torch.uint8, device="cuda")
        st = torch.randint(0, 256, (tiles * steps * 512,), dtype=torch.uint8, device="cuda")
        units = tiles * splits

        def launch(name: str, stages: int, walk: str, work: int, wt=wt, st=st, tiles=tiles, steps=steps,
                   splits=splits) -> None:
            out = outs[name]
            if walk == "dynamic":
                blocks = resident[stages] * sms
                err = lib.probe_mimic_dynamic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits,
                                              work, stages, blocks, out.data_ptr(), take.data_ptr(), stream,
                                              MIMIC_EIGHT_PER_SM)
            else:
                blocks = resident[stages] * sms if walk == "static" else 0
                err = lib.probe_mimic(wt.data_ptr(), st.data_ptr(), act.data_ptr(), tiles, steps, splits, work,
                                      stages, blocks, out.data_ptr(), stream, MIMIC_EIGHT_PER_SM)
            assert err == 0, f"{name}: launch error {err}"

        for name, stages, walk in WALKS:
            for out in outs.values():
                out.zero_()
            launch("grid_S3", 3, "grid", 15)
            launch(name, stages, walk, 15)
            torch.cuda.synchronize()
            same = torch.equal(outs["grid_S3"][: units * 128], outs[name][: units * 128])
            if walk == "dynamic":  # a second launch must find the counter back at 0
                outs[name].zero_()
                launch(name, stages, walk, 15)
                torch.cuda.synchronize()
                same = same and torch.equal(outs["grid_S3"][: units * 128], outs[name][: units * 128])
                same = same and int(take.abs().sum()) == 0
            print(f"check {shape} {name}: partials {'equal' if same else 'DIFFER'}", flush=True)
            rows.append({"subject": f"check_{shape}_{name}", "partials_equal_to_block_per_unit": same})
            failures += not same
        for work in WORKS:
            for name, stages, walk in WALKS:
                probe.timed_row(rows, f"mimic_{shape}_{name}_work{work}",
                                lambda name=name, stages=stages, walk=walk, work=work: launch(name, stages, walk, work),
                                40, bytes=wt.numel() + st.numel(), blocks_per_sm=resident[stages], walk=walk,
                                stages=stages, work=work, units=units)
        del wt, st
    print_share_of_copy(rows, 40)
    write_rows(probe.args.out, rows)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
