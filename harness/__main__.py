"""``python -m nvfp4_harness SUBCOMMAND``: the harness's command-line entry.

Each subcommand lives in its own module with a ``main(argv) -> int``; this file only routes.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "tables": ("nvfp4_harness.nvfp4.tables", "write or check the byte tables in fixtures/tables"),
    "combine": ("nvfp4_harness.engine.combine", "merge dispatch-coverage JSON files from several runs"),
    "report": ("nvfp4_harness.engine.report", "print or write a report from a dispatch-coverage JSON file"),
    "gpu-check": ("nvfp4_harness.nvfp4.gpu_check", "verify the CUDA kernels on this machine's GPU and write results"),
    "bench": ("nvfp4_harness.nvfp4.bench", "time the kernels beside the copy ceiling (GPU)"),
    "bench-report": ("nvfp4_harness.nvfp4.bench_report", "write BENCHMARKS.md and its plot from a results JSON"),
    "multi-gpu": ("nvfp4_harness.nvfp4.multi_gpu", "the GPU dispatch suites on one GPU and on every GPU of the host"),
    "onnxruntime": ("nvfp4_harness.nvfp4.onnxruntime.run",
                    "ONNX Runtime's own FP4 op observed: paths, coverage, bits and times (GPU + onnxruntime-gpu)"),
    "mutate": ("nvfp4_harness.nvfp4.mutation",
               "plant typical kernel bugs one at a time and check the suites catch each"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in SUBCOMMANDS:
        width = max(map(len, SUBCOMMANDS))
        lines = [f"  {name:<{width}}  {doc}" for name, (_, doc) in SUBCOMMANDS.items()]
        print("usage: python -m nvfp4_harness SUBCOMMAND [options]\n\nsubcommands:\n" + "\n".join(lines))
        if argv and argv[0] not in ("-h", "--help"):
            print(f"\nunknown subcommand {argv[0]!r}", file=sys.stderr)
            return 2
        return 0
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
