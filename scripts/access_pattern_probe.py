# ruff: noqa: B023  (each timed function runs inside the iteration that defines it)
"""How fast can the fused kernel's weight stream be read, by layout? A read-only probe on the GPU.

The fused kernel at M = 1 reads 64 rows x 64 bytes per block and K step from a row-major packed
weight (rows ``K / 2`` bytes apart), on a grid of (row tile, K split) blocks. This probe reads
exactly those bytes with the same grid and no decode, for the row-major layout and for a
tile-contiguous one (each tile's 64 rows x 64 bytes of a step stored as one 4 KB block, the steps
of a tile one after another), beside a device copy of the same bytes and a plain streaming read.
If the row-major read alone is far from the streaming read, the layout limits the kernel before
the decode does.

    python scripts/access_pattern_probe.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import cupy as cp
import torch

sys.path.insert(0, "scripts")
from fused_dev import timer  # noqa: E402

SOURCE = r"""
extern "C" __device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
// layout 0: row-major [n, row_bytes]; 1: tile-contiguous [tiles][steps][64 rows][64 bytes]
extern "C" __global__ void probe(const uint4* __restrict__ w, uint4* __restrict__ sink, int tiles, int steps_total,
                                 int steps_per_block, long long row_bytes, int layout) {
  extern __shared__ uint4 pad[];
  const int tile = blockIdx.x % tiles;
  const int split = blockIdx.x / tiles;
  const int s0 = split * steps_per_block;
  const int s1 = min(s0 + steps_per_block, steps_total);
  uint4 acc = make_uint4(0, 0, 0, 0);
#pragma unroll 3
  for (int s = s0; s < s1; ++s) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = threadIdx.x + j * 128;
      const int r = c >> 2, q = c & 3;
      const long long off = layout == 0 ? (static_cast<long long>(tile * 64 + r) * row_bytes + s * 64 + q * 16)
                                        : ((static_cast<long long>(tile) * steps_total + s) * 4096 + r * 64 + q * 16);
      const uint4 v = ld_stream(w + off / 16);
      acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
  }
  if ((acc.x & acc.y & acc.z & acc.w) == 0xFFFFFFFFu) sink[blockIdx.x * 128 + threadIdx.x] = acc;
}
// a plain grid-stride streaming read of `chunks` 16-byte chunks
extern "C" __global__ void stream_read(const uint4* __restrict__ w, uint4* __restrict__ sink, long long chunks) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (long long i = blockIdx.x * 256LL + threadIdx.x; i < chunks; i += 256LL * gridDim.x) {
    const uint4 v = ld_stream(w + i);
    acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if ((acc.x & acc.y & acc.z & acc.w) == 0xFFFFFFFFu) sink[blockIdx.x * 256 + threadIdx.x] = acc;
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    probe, stream = module.get_function("probe"), module.get_function("stream_read")
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for n, k in ((17408, 5120), (5120, 17408), (4096, 4096)):
        nbytes = n * k // 2
        w = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
        sink = torch.empty(1 << 22, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(w)
        wp, sp = cp.asarray(w).data.ptr, cp.asarray(sink).data.ptr
        tiles, steps = n // 64, k // 128
        row = {"n": n, "k": k, "bytes": nbytes}
        row["copy_us"] = timer(lambda: dst.copy_(w), flush, reps=25)
        stream_args = (cp.uint64(wp), cp.uint64(sp), cp.int64(nbytes // 16))
        row["stream_read_us"] = timer(lambda: stream((sms * 8,), (256,), stream_args), flush, reps=25)
        for splits in (1, 3, 7, 13):
            per = -(-steps // splits)
            for layout, name in ((0, "row_major"), (1, "tile_contiguous")):
                def run(splits=splits, per=per, layout=layout):
                    probe((tiles * splits,), (128,), (cp.uint64(wp), cp.uint64(sp), cp.int32(tiles), cp.int32(steps),
                                                      cp.int32(per), cp.int64(k // 2), cp.int32(layout)),
                          shared_mem=24 * 1024)  # 8 blocks per SM, as the fused kernel at M <= 8
                row[f"{name}_splits{splits}_us"] = timer(run, flush, reps=25)
        rows.append(row)
        print(" ".join(f"{key}={value:.2f}" if isinstance(value, float) else f"{key}={value}"
                       for key, value in row.items()))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
