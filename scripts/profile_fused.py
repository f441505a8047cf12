"""One fused_mma call of a shape, after two warm-up calls, for Nsight Compute:

    ncu -k regex:fused_mma_kernel --launch-skip 2 --launch-count 1 --section ... \\
        python scripts/profile_fused.py N K M [SPLITS] [LIBRARY] [--tiled]

SPLITS defaults to the host's count for the library's occupancy; LIBRARY to the build's own.
--tiled: the weights in the tile-contiguous layout (nvfp4_kernels.layout), through
nvfp4_launch_fused_tiled.
"""

from __future__ import annotations

import sys

import torch
from nvfp4_kernels import cuda_backend, layout
from nvfp4_kernels.tiling import fused_split_count

sys.path.insert(0, "scripts")
from fused_dev import make, to_dev  # noqa: E402


def main() -> int:
    tiled = "--tiled" in sys.argv
    argv = [a for a in sys.argv if a != "--tiled"]
    n, k, m = (int(v) for v in argv[1:4])
    lib = cuda_backend.load_library(argv[5]) if len(argv) > 5 else cuda_backend.load_library()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    splits = int(argv[4]) if len(argv) > 4 and int(argv[4]) > 0 else \
        fused_split_count(n, k, m, sms, int(lib.nvfp4_fused_occupancy(m)))
    packed, scales = make(n, k, 1)
    p, s = to_dev(packed), to_dev(scales)
    scale_bytes = layout.scale_byte_range(s) if tiled else 0
    if tiled:
        p, s = layout.tile_weights(p, s)
    launch = lib.nvfp4_launch_fused_tiled if tiled else lib.nvfp4_launch_fused
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    g = torch.tensor([0.0123], dtype=torch.float32, device="cuda")
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    workspace = torch.empty(max(1, splits * m * n), dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    extra = (scale_bytes,) if tiled else ()
    for _ in range(3):
        err = launch(a.data_ptr(), p.data_ptr(), s.data_ptr(), g.data_ptr(), None, out.data_ptr(),
                     workspace.data_ptr() if splits > 1 else None, None, m, n, k, 1, splits, stream, *extra)
        assert err == 0, err
    torch.cuda.synchronize()
    print(f"fused_mma{'_tiled' if tiled else ''} {n}x{k} M={m} splits={splits}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
