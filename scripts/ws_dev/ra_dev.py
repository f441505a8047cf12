"""Build the dev library of the fused_wgmma kernel (scripts/ws_dev/fused_ra.cu: the library's
kernel with template arguments the library does not launch) for scripts/ws_dev/mma_order_dev.py,
which loads it on the H200. nvcc runs here, on the CPU machine; a device call carries the result
(kernels/_build).

    python scripts/ws_dev/ra_dev.py --out DIR --prebuild      (writes kernels/_build/ws/ra/libra.so
        and ptxas's register report under DIR)
    python scripts/ws_dev/ra_dev.py --out DIR --prebuild --ablations
        (also kernels/_build/ws/ra/libra-ablate-N.so for each N of ABLATIONS: the kernel built with
        -DNVFP4_WGMMA_ABLATE=N, which scripts/ws_dev/ablate_dev.py times)

This script used to measure the natural-order kernel on its fragment-ordered weight layout as well
(thirteenth to fifteenth sessions, benchmarks/NOTES.md); that kernel form is retired and the
measurement is in git history.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PREBUILT = ROOT / "kernels" / "_build" / "ws" / "ra" / "libra.so"
#: NVFP4_WGMMA_ABLATE values (fused_wgmma.cu: 1 no decode, 2 no MMA, 4 no weight loads after the
#: first step, 8 no activation stream after the first stages, 16 no epilogue (no partial or output
#: stores, no finalize launch), 32 no activation permutation) and what is left of the launch in
#: each. A kernel with a ring of weight steps ignores bit 4 (it keeps copying its weights), so for
#: the library's launches 4, 5 and 6 read as 0, 1 and 2, and 15 as 11.
ABLATIONS: dict[int, str] = {1: "loads + MMA (no decode)", 2: "loads + decode (no MMA)",
                             4: "decode + MMA (no loads)", 3: "loads only", 5: "MMA only", 6: "decode only",
                             8: "all but the activation stream", 11: "loads only, no activation stream",
                             15: "skeleton only (no decode, MMA, loads or activation stream)",
                             16: "all but the epilogue", 48: "all but the epilogue and the permutation",
                             27: "loads only, no activation stream or epilogue",
                             31: "skeleton without its epilogue",
                             63: "skeleton without its epilogue or permutation"}


def ablation_library(n: int) -> Path:
    """Where the build with NVFP4_WGMMA_ABLATE=n goes."""
    return PREBUILT.with_name(f"libra-ablate-{n}.so")


def library(out: Path) -> ctypes.CDLL:
    """The dev library: the prebuilt one a device call carries, or built now into ``out``, with
    its entries' signatures declared (:func:`bind`)."""
    return bind(ctypes.CDLL(str(PREBUILT if PREBUILT.exists() else build(out))))


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the C signatures of fused_ra.cu's dev entries on a loaded dev library (the full one
    or an ablation build) and return it: the one place that states them."""
    vp, i32 = ctypes.c_void_p, ctypes.c_int32
    lib.nvfp4ra_launch_mma_order.restype = ctypes.c_int
    lib.nvfp4ra_launch_mma_order.argtypes = [vp] * 8 + [i32] * 12 + [vp]
    lib.nvfp4ra_permute_act.restype = ctypes.c_int
    lib.nvfp4ra_permute_act.argtypes = [vp, vp, i32, i32, i32, vp]
    lib.nvfp4ra_permuted_rows.restype = ctypes.c_int64
    lib.nvfp4ra_permuted_rows.argtypes = [i32, i32]
    return lib


def launch_mma_order(lib: ctypes.CDLL, a, act_ws, packed, scales, g, bias, out, workspace, plan: tuple[int, int],
                     variant: tuple, stream: int) -> None:
    """One launch of dev variant ``variant`` = (tiled, NACT, MIN_BLOCKS, STAGES, STAGED, RING) for
    out = a @ W^T (+ bias) on ``plan`` (whole tiles, splits). The caller sizes the buffers:
    ``act_ws`` 2 k nvfp4ra_permuted_rows(m, NACT) bytes (the permuted activations, padded to whole
    tiles), ``workspace`` plan[1] m n floats. Raises with the entry's CUDA error, or 1 for a variant
    the library does not build."""
    tiled, nact, minb, stages, staged, ring = variant
    m, k = a.shape
    n = out.shape[1]
    err = lib.nvfp4ra_launch_mma_order(a.data_ptr(), act_ws.data_ptr(), packed.data_ptr(), scales.data_ptr(),
                                       g.data_ptr(), None if bias is None else bias.data_ptr(), out.data_ptr(),
                                       workspace.data_ptr(), m, n, k, int(str(a.dtype) == "torch.bfloat16"),
                                       plan[0], plan[1], nact, minb, stages, int(staged), int(tiled), ring, stream)
    if err:
        raise RuntimeError(f"nvfp4ra_launch_mma_order: error {err} (m={m} n={n} k={k} plan={plan} {variant})")


def build(out: Path, flags: tuple[str, ...] = (), target: Path = PREBUILT) -> Path:
    """nvcc-build fused_ra.cu into ``target`` (sm_90a, the library's flags), ptxas's report into ``out``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["nvcc", "-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "-ftz=false", "-prec-div=true",
           "-prec-sqrt=true", "-fmad=true", "-gencode=arch=compute_90a,code=sm_90a", "-shared", "-cudart", "static",
           f"-I{ROOT / 'kernels' / 'cuda'}", f"-I{HERE}", "-Xptxas", "-v", str(HERE / "fused_ra.cu"),
           "-o", str(target), *flags]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    (out / f"{target.stem}.ptxas.txt").write_text(res.stdout + res.stderr)
    if res.returncode:
        raise SystemExit(res.stderr[-4000:])
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for ptxas's register report")
    parser.add_argument("--prebuild", action="store_true", help="build the library (the only action)")
    parser.add_argument("--ablations", action="store_true", help="also build each ablation of ABLATIONS")
    args = parser.parse_args()
    if not args.prebuild:
        parser.error("nothing to do: pass --prebuild (the measurements are scripts/ws_dev/mma_order_dev.py's "
                     "and ablate_dev.py's)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("built", build(out))
    if args.ablations:
        for n in ABLATIONS:
            print("built", build(out, (f"-DNVFP4_WGMMA_ABLATE={n}",), ablation_library(n)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
