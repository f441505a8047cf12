"""What each piece of an eager fast-path call costs the host (GPU machine), one line per piece.

    python scripts/host_pieces.py [M] [N] [K]      # default 1 17408 5120

cProfile (scripts/host_profile.py) attributes time to Python functions but not to the
attribute reads, torch calls and ctypes calls inside ``nvfp4_kernels.fast.matmul``; this times
each of those alone, in a loop, so the remaining cost of a call can be split into what Python
does, what torch does (allocation, stream lookup) and what the CUDA launch costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import nvfp4_kernels
import torch
from host_profile import decode_operands, shape_from_argv  # scripts/ is the script's own folder
from nvfp4_kernels import cuda_backend, fast

#: calls per loop: few enough that launches never fill the GPU's queue (the host would then wait
#: for the GPU and the loop would time kernels), as in the benchmark's host section
CALLS = 100
LOOPS = 31


def per_call_us(fn: Callable[[], object], calls: int = CALLS) -> float:
    """Median over LOOPS loops of host microseconds per call; the GPU is drained between loops."""
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    loops = []
    for _ in range(LOOPS):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        loops.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return float(np.median(loops))


def inference_alloc(a: torch.Tensor, m: int, n: int) -> Callable[[], object]:
    """An allocation inside torch.inference_mode (skips autograd's version counter set-up)."""
    def alloc() -> object:
        with torch.inference_mode():
            return a.new_empty((m, n))
    return alloc


def main() -> None:
    m, n, k = shape_from_argv()
    a, packed, scales, g = decode_operands(m, n, k)
    nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)
    lib = cuda_backend.load_library()
    plan = next(iter(fast._plans.values()))
    words, address = plan.per_thread.get(fast.get_ident()) or plan.args()
    raw_stream = cuda_backend.raw_stream_getter()
    out = a.new_empty((m, n))
    ws = cuda_backend.gemv_workspace(0, raw_stream(0), 16 * m * n)
    probe_out = torch.empty(512, dtype=torch.int16, device="cuda")
    call, kind = cuda_backend.launch_call(), cuda_backend.launch_call_kind()[0]
    through_ctypes = cuda_backend.ctypes_launch_call(cuda_backend.packed_launcher())
    counters = cuda_backend.splitk_counters(0, raw_stream(0), 1 << 16)
    split = plan.splits > 1
    call_args = (plan.kernel, words, address, a.data_ptr(), out.data_ptr(), ws.data_ptr() if split else 0,
                 counters.data_ptr() if split and plan.counter_count else 0, raw_stream(0), g.data_ptr())

    def launch_fused(splits: int, tiny: bool = False, reduction: str = "last_block") -> Callable[[], object]:
        """A direct launch; ``tiny`` uses a 1 x 64 x 256 problem whose kernels take ~2 us, so the
        loop times the host side of the launch (one launch for a last-block sum, the kernel and
        the finalize launch for "finalize")."""
        count = counters.data_ptr() if reduction == "last_block" and splits > 1 else None
        mnk = (1, 64, 256) if tiny else (m, n, k)
        args = (a.data_ptr(), packed.data_ptr(), scales.data_ptr(), g.data_ptr(), None, out.data_ptr(),
                ws.data_ptr(), count, *mnk, 1, splits, raw_stream(0))
        return lambda: lib.nvfp4_launch_fused(*args)

    pieces: dict[str, Callable[[], object]] = {
        "python: empty lambda call": lambda: None,
        "torch: a.shape": lambda: a.shape,
        "torch: a.is_cuda": lambda: a.is_cuda,
        "torch: a.get_device()": lambda: a.get_device(),
        "torch: a.data_ptr()": lambda: a.data_ptr(),
        "torch: a.is_contiguous()": lambda: a.is_contiguous(),
        "torch: raw stream getter(0)": lambda: raw_stream(0),
        "torch: cuda.is_current_stream_capturing()": torch.cuda.is_current_stream_capturing,
        "torch: a.new_empty((m, n))": lambda: a.new_empty((m, n)),
        "torch: torch.empty((m, n), dtype, device)": lambda: torch.empty((m, n), dtype=a.dtype, device=a.device),
        "torch: a.new_empty(m, n)": lambda: a.new_empty(m, n),
        "torch: torch.empty(m, n, dtype, device=int)": lambda: torch.empty(m, n, dtype=a.dtype, device=0),
        "torch: torch.empty_strided((m, n), (n, 1), ...)": lambda: torch.empty_strided((m, n), (n, 1), dtype=a.dtype,
                                                                                        device=a.device),
        "torch: a.new_empty((m, n)) under no_grad-free inference_mode": inference_alloc(a, m, n),
        "cuda_backend.gemv_workspace(...)": lambda: cuda_backend.gemv_workspace(0, raw_stream(0), m * n),
        "ctypes: nvfp4_launch_args_size()": lib.nvfp4_launch_args_size,
        "ctypes+launch: fp4 probe kernel": lambda: lib.nvfp4_launch_fp4_probe(probe_out.data_ptr(), raw_stream(0)),
        "launch fused 1x64x256 splits=1 (14-arg ctypes)": launch_fused(1, tiny=True),
        "launch fused 1x64x256 splits=2, last block": launch_fused(2, tiny=True),
        "launch fused 1x64x256 splits=2, + finalize": launch_fused(2, tiny=True, reduction="finalize"),
        f"launch call of the plan, {kind} (splits={plan.splits})": lambda: call(*call_args),
        f"launch call of the plan, ctypes (splits={plan.splits})": lambda: through_ctypes(*call_args),
        "fast.matmul (whole fast path)": lambda: fast.matmul(torch, a, packed, scales, g, 16, None, "auto", None),
        "nvfp4_matmul (public entry)": lambda: nvfp4_kernels.nvfp4_matmul(a, packed, scales, g),
    }
    print(f"M={m} N={n} K={k}, plan path {plan.path}, splits {plan.splits}; host us per call (median of 5 loops)")
    for name, fn in pieces.items():
        print(f"{per_call_us(fn):8.3f}  {name}")
    from nvfp4_harness.engine.recorder import Recorder

    recorder = Recorder(keep_events=False, models=[nvfp4_kernels.MODEL]).start()
    try:
        print(f"{per_call_us(lambda: nvfp4_kernels.nvfp4_matmul(a, packed, scales, g)):8.3f}  "
              f"nvfp4_matmul with a recorder")
    finally:
        recorder.stop()


if __name__ == "__main__":
    main()
