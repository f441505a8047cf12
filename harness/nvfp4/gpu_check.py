"""``python -m nvfp4_harness gpu-check``: verify the CUDA kernels on this machine's GPU, write results.

What it checks, and what it writes under ``--out`` (default ``fixtures/gpu``):

* ``nv_cvt_fp4x2_to_halfraw2.csv`` - NVIDIA's own ``__nv_cvt_fp4x2_to_halfraw2`` run on the GPU
  for all 256 bytes; must equal ``fixtures/tables/e2m1x2_to_float16.csv``.
* ``gpu_check.json`` - provenance, and per check its outcome:
  - ``dequant``: every dequant kernel whose guards admit a case, over the foundation matrix plus
    large shapes (N, K up to 5120 and N > 65,535), hashed (SHA-256) next to the CPU reference's
    hash; CPU CI regenerates the inputs from the seeds in :mod:`nvfp4_harness.nvfp4.gpu_cases` and checks
    the committed GPU hashes against its own reference;
  - ``matmul``: GEMV and prefill outputs against a float64 reference, within the stated bound;
  - ``misaligned``: sliced views of B and of the output fall back to the scalar kernel, same bits;
  - ``observe``: the operator observed as a black box (kernel names through the model's
    patterns) takes the path its dispatcher announced, call for call;
  - ``sanitizer``: compute-sanitizer memcheck and racecheck over ``--workload`` report no error.

Exit status 0 only when every check passes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import nvfp4_kernels
from nvfp4_harness.engine.observe import observe
from nvfp4_harness.nvfp4 import gpu_cases, tables
from nvfp4_harness.nvfp4.provenance import REPO, gpu_provenance
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY
from nvfp4_harness.nvfp4.verify import compare_bitwise, tensor_sha256
from nvfp4_kernels import layout, nvfp4, reference
from nvfp4_kernels.model import Policy

DEFAULT_OUT = REPO / "fixtures" / "gpu"
#: unit roundoff of each output type: the bound's factor for each rounding to T
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _to_gpu(x: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).cuda()


def check_fp4_table(out: Path, provenance: dict) -> dict:
    """NVIDIA's conversion intrinsic on the GPU against the committed fp16 byte table."""
    from nvfp4_kernels import cuda_backend

    gpu = cuda_backend.fp4x2_to_halfraw2_table().astype(np.uint16)
    header = "".join(f"# {k}: {provenance[k]}\n" for k in ("gpu", "driver", "cuda_runtime", "torch", "date",
                                                           "command", "git_commit"))
    header += "# produced by __nv_cvt_fp4x2_to_halfraw2(byte, __NV_E2M1) on the GPU (cuda_fp4.h)\n"
    (out / "nv_cvt_fp4x2_to_halfraw2.csv").write_text(header + tables.render_fp4x2(gpu))
    expected = tables.parse_table((tables.TABLE_DIR / "e2m1x2_to_float16.csv").read_text()).astype(np.uint16)
    diff = compare_bitwise(expected, gpu)
    return {"passed": bool(diff), "detail": str(diff)}


def check_dequant(quick: bool) -> dict:
    """Every admitted dequant kernel vs the CPU reference, hashed, over the case matrix."""
    import torch
    from nvfp4_kernels import cuda_backend

    records, failures = [], []
    cases = gpu_cases.dequant_cases()
    if quick:
        cases = cases[::7] + [c for c in cases if c.name.startswith("large")][-2:]
    for case in cases:
        packed, scales, g = gpu_cases.operands(case)
        cpu_hash = tensor_sha256(reference.dequantize(packed, scales, g, case.block_size, case.dtype))
        b, s = _to_gpu(packed), _to_gpu(scales)
        g_dev = torch.tensor([g], dtype=torch.float32, device="cuda")
        hashes = {}
        for path in case.paths():
            out = torch.full((case.n, case.k), float("nan"), dtype=_torch_dtype(case.dtype), device="cuda")
            cuda_backend.dequantize(path, b, s, g_dev, case.block_size, out)
            hashes[path] = tensor_sha256(out)
            if hashes[path] != cpu_hash:
                failures.append(f"{case.name} {path}")
        records.append({**case.to_dict(), "cpu_reference": cpu_hash, "gpu": hashes})
    return {"passed": not failures, "failures": failures, "cases": records}


def _matmul_bound(a64: np.ndarray, w64: np.ndarray, bias64: np.ndarray, dtype: str, path: str):
    dot = a64 @ w64.T
    ref = dot + bias64
    u = UNIT_ROUNDOFF[dtype]
    # prefill rounds the dot and then the sum with the bias; the fused paths round once; all
    # accumulate in fp32 (error <= K * 2^-24 * |a| @ |w| in the worst case)
    rounding = u * (np.abs(ref) + (np.abs(dot) if path not in ("gemv", "fused_mma", "fused_wgmma") else 0.0))
    accumulation = a64.shape[1] * 2.0**-24 * (np.abs(a64) @ np.abs(w64).T)
    return ref, rounding + accumulation + 1e-30


#: each path forced with its M guard opened to its kernel's limit and the GEMV's layer limit lifted
#: (a forced path's guards must hold)
FORCED = {path: Policy(force_path=path, gemv_max_m=8, gemv_max_weights=None, fused_max_m=256, wgmma_min_m=1)
          for path in ("gemv", "fused_mma", "fused_wgmma", "prefill_vec8", "prefill_scalar")}


def check_matmul(quick: bool) -> dict:
    """GEMV, fused_mma, fused_wgmma and prefill outputs within the stated bound of a float64 reference."""
    import torch

    rows = []
    shapes = [(4096, 4096), (512, 5120)] if quick else [(4096, 4096), (512, 5120), (17408, 5120), (5120, 17408)]
    rng = np.random.default_rng(11)
    for n, k in shapes:
        packed, scales, g = nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), 16)
        b, s = _to_gpu(packed), _to_gpu(scales)
        for dtype in ("bfloat16", "float16"):
            w64 = reference.dequantize(packed, scales, g, 16, dtype).astype(np.float64)
            bias = torch.randn(n, dtype=_torch_dtype(dtype), device="cuda")
            bias64 = bias.double().cpu().numpy()
            for m, path in ((1, "gemv"), (3, "gemv"), (8, "gemv"), (1, "fused_mma"), (16, "fused_mma"),
                            (64, "fused_mma"), (256, "fused_mma"), (129, "fused_wgmma"), (256, "fused_wgmma"),
                            (16, "prefill_vec8"), (16, "prefill_scalar"),
                            (64, "prefill_vec8")):
                a = torch.randn(m, k, dtype=_torch_dtype(dtype), device="cuda")
                y = nvfp4_kernels.nvfp4_matmul(a, b, s, g, 16, bias, policy=FORCED[path])
                a64 = a.double().cpu().numpy()
                ref, bound = _matmul_bound(a64, w64, bias64, dtype, path)
                err = np.abs(y.double().cpu().numpy() - ref)
                rel = float(np.linalg.norm(err) / np.linalg.norm(ref))
                worst = float(np.max(err / bound))
                rows.append({"n": n, "k": k, "m": m, "dtype": dtype, "path": path, "relative_error": rel,
                             "worst_error_over_bound": worst, "passed": bool(worst <= 1.0)})
    return {"passed": all(r["passed"] for r in rows),
            "bound": "|y - ref| <= u_T*(|ref| + |dot| for prefill) + K*2^-24*(|a| @ |w|)", "rows": rows}


def check_misaligned() -> dict:
    """Sliced views that break vec8's alignment go to the scalar kernel, with the same bits."""
    import torch

    events: list = []
    nvfp4_kernels.add_listener(events.append)
    try:
        rng = np.random.default_rng(5)
        packed, scales, g = nvfp4.quantize(rng.standard_normal((256, 512)).astype(np.float32), 16)
        want = reference.dequantize(packed, scales, g, 16, "bfloat16")
        storage = torch.zeros(packed.size + 4, dtype=torch.uint8, device="cuda")
        b_view = storage[1:1 + packed.size].view(packed.shape)
        b_view.copy_(_to_gpu(packed))
        s = _to_gpu(scales)
        got_b = nvfp4_kernels.dequantize(b_view, s, g, 16, "bfloat16")
        path_b, reason_b = events[-1].path, events[-1].reason
        out_store = torch.zeros(256 * 512 + 8, dtype=torch.bfloat16, device="cuda")
        out_view = out_store[2:2 + 256 * 512].view(256, 512)
        nvfp4_kernels.dequantize(_to_gpu(packed), s, g, 16, "bfloat16", out=out_view)
        path_o, reason_o = events[-1].path, events[-1].reason
        untouched = bool((out_store[:2] == 0).all() and (out_store[2 + 256 * 512:] == 0).all())
    finally:
        nvfp4_kernels.remove_listener(events.append)
    ok = (path_b == path_o == "prefill_scalar" and "misaligned" in reason_b and "misaligned" in reason_o
          and bool(compare_bitwise(want, got_b)) and bool(compare_bitwise(want, out_view)) and untouched)
    return {"passed": ok, "b_view": [path_b, reason_b], "out_view": [path_o, reason_o],
            "neighbours_untouched": untouched}


def check_observe() -> dict:
    """Our own operator observed as a black box: the path its kernel names show (through the
    model's patterns) must equal the path its dispatcher announced, call for call."""
    import torch
    from nvfp4_kernels.model import MODEL, Problem

    rng = np.random.default_rng(9)
    packed, scales, g = nvfp4.quantize(rng.standard_normal((1024, 1024)).astype(np.float32), 16)
    packed7, scales7, g7 = nvfp4.quantize(rng.standard_normal((1024, 1022)).astype(np.float32), 7)
    b, s, b7, s7 = map(_to_gpu, (packed, scales, packed7, scales7))
    a1 = torch.randn(1, 1024, dtype=torch.bfloat16, device="cuda")
    a32 = torch.randn(32, 1024, dtype=torch.float16, device="cuda")
    a192 = torch.randn(192, 1024, dtype=torch.float16, device="cuda")
    a300 = torch.randn(300, 1024, dtype=torch.float16, device="cuda")
    a7 = torch.randn(64, 1022, dtype=torch.bfloat16, device="cuda")
    default = nvfp4_kernels.current_policy()
    large = LARGE_LAYERS_POLICY  # every layer too large for the GEMV: decode goes fused

    def problem(op: str, m: int | None, k: int, bs: int, dtype: str) -> Problem:
        return Problem(op, m, 1024, k, bs, dtype, "cuda", True)

    calls = {
        "matmul M=1 (gemv)": (lambda: nvfp4_kernels.nvfp4_matmul(a1, b, s, g),
                              problem("matmul", 1, 1024, 16, "bfloat16"), default),
        "matmul M=1, gemv_max_weights=0 (fused_mma)": (
            lambda: nvfp4_kernels.nvfp4_matmul(a1, b, s, g, policy=large),
            problem("matmul", 1, 1024, 16, "bfloat16"), large),
        "matmul M=32 (fused_mma)": (lambda: nvfp4_kernels.nvfp4_matmul(a32, b, s, g),
                                    problem("matmul", 32, 1024, 16, "float16"), default),
        "matmul M=192 (fused_wgmma)": (lambda: nvfp4_kernels.nvfp4_matmul(a192, b, s, g),
                                       problem("matmul", 192, 1024, 16, "float16"), default),
        "matmul M=300 (prefill_vec8)": (lambda: nvfp4_kernels.nvfp4_matmul(a300, b, s, g),
                                        problem("matmul", 300, 1024, 16, "float16"), default),
        "matmul block 7 (prefill_scalar)": (lambda: nvfp4_kernels.nvfp4_matmul(a7, b7, s7, g7, 7),
                                            problem("matmul", 64, 1022, 7, "bfloat16"), default),
        "dequantize (prefill_vec8)": (lambda: nvfp4_kernels.dequantize(b, s, g),
                                      problem("dequantize", None, 1024, 16, "bfloat16"), default),
        "dequantize block 7 (prefill_scalar)": (lambda: nvfp4_kernels.dequantize(b7, s7, g7, 7),
                                                problem("dequantize", None, 1022, 7, "bfloat16"), default),
    }
    rows = []
    for name, (fn, prob, policy) in calls.items():
        fn()  # warm-up: library load and first launch stay out of the profile
        obs = observe(MODEL, fn, prob, op=prob.op, policy=policy, publish=False)
        problems = obs.agreement() + ([obs.event.finding] if obs.event.finding else [])
        # every operand is already on the device: a host-to-device copy here is dispatcher overhead
        problems += [f"unexpected {k!r} inside the call" for k in obs.launched if "Memcpy HtoD" in k]
        rows.append({"call": name, "observed": obs.event.path,
                     "instrumented": [e.path for e in obs.instrumented],
                     "kernels": sorted(set(obs.launched)), "unmatched": sorted(set(obs.event.unmatched)),
                     "problems": problems})
    return {"passed": all(not r["problems"] for r in rows), "rows": rows}


def run_workload() -> None:
    """A small run of every kernel and guard side, for compute-sanitizer to watch."""
    import torch

    rng = np.random.default_rng(3)
    for n, k, block_size, dtype in ((33, 24, 6, "bfloat16"), (17, 70, 7, "float16"), (9, 1020, 12, "float16"),
                                    (70000, 16, 16, "bfloat16"), (8, 2, 1, "bfloat16")):
        packed, scales, g = nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), block_size)
        nvfp4_kernels.dequantize(_to_gpu(packed), _to_gpu(scales), g, block_size, dtype)
        a = torch.randn(20, k, dtype=_torch_dtype(dtype), device="cuda")
        nvfp4_kernels.nvfp4_matmul(a, _to_gpu(packed), _to_gpu(scales), g, block_size)
    packed, scales, g = nvfp4.quantize(rng.standard_normal((200, 320)).astype(np.float32), 16)
    b, s = _to_gpu(packed), _to_gpu(scales)
    for m in (1, 5, 8):
        bias = torch.randn(200, dtype=torch.bfloat16, device="cuda")
        nvfp4_kernels.nvfp4_matmul(torch.randn(m, 320, dtype=torch.bfloat16, device="cuda"), b, s, g, 16, bias,
                                   policy=Policy(gemv_max_m=8))
    # the fused kernel: every M tile configuration, a partial row tile, split K (N = 200, K = 2048)
    packed, scales, g = nvfp4.quantize(rng.standard_normal((200, 2048)).astype(np.float32), 16)
    b, s = _to_gpu(packed), _to_gpu(scales)
    for m in (1, 9, 17, 33, 64, 200):
        bias = torch.randn(200, dtype=torch.float16, device="cuda")
        nvfp4_kernels.nvfp4_matmul(torch.randn(m, 2048, dtype=torch.float16, device="cuda"), b, s, g, 16, bias,
                                   policy=Policy(gemv_max_weights=0, fused_max_m=256, wgmma_max_m=0))  # M = 1 too
    # the same on tile-contiguous weights (nvfp4_kernels.layout): N = 130 leaves the last 128-row
    # block a 64-row tile that the layout does not have, whose copies must read nothing
    for n in (200, 130):
        packed_t, scales_t, g_t = nvfp4.quantize(rng.standard_normal((n, 2048)).astype(np.float32), 16)
        b_t, s_t = _to_gpu(packed_t), _to_gpu(scales_t)
        layout.register(b_t, s_t)
        for m in (1, 9, 17, 33, 64, 200):
            nvfp4_kernels.nvfp4_matmul(torch.randn(m, 2048, dtype=torch.bfloat16, device="cuda"), b_t, s_t, g_t, 16,
                                       policy=Policy(gemv_max_weights=0, fused_max_m=256, wgmma_max_m=0))
        layout.unregister(b_t)
    # fused_wgmma (Hopper only): a plan that splits both tiles in K (N = 200), and one with a wave of
    # whole tiles and a split partial one (N = 132 x 128 + 70); rows past M and N read nothing. Each
    # on the row-major weights, then registered (the tile-contiguous copy, whose last 64-row tile
    # at N = 200 is partly padding and whose 128-row block at N = 132 x 128 + 70 has no second
    # tile), both in fused_mma's K order after the activation permutation
    if torch.cuda.get_device_capability() == (9, 0):
        for n, k in ((200, 2048), (132 * 128 + 70, 256)):
            packed_w, scales_w, g_w = nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), 16)
            b_w, s_w = _to_gpu(packed_w), _to_gpu(scales_w)
            for registered in (False, True):
                if registered:
                    layout.register(b_w, s_w, paths=("fused_wgmma",))
                for m in (1, 129, 256):
                    bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
                    nvfp4_kernels.nvfp4_matmul(torch.randn(m, k, dtype=torch.bfloat16, device="cuda"), b_w, s_w, g_w,
                                               16, bias, policy=Policy(force_path="fused_wgmma", wgmma_min_m=1))
            layout.unregister(b_w)
    storage = torch.zeros(packed.size + 1, dtype=torch.uint8, device="cuda")
    view = storage[1:].view(packed.shape)
    view.copy_(b)
    nvfp4_kernels.dequantize(view, s, g, 16)
    torch.cuda.synchronize()


def check_sanitizer() -> dict:
    """compute-sanitizer memcheck and racecheck over :func:`run_workload`."""
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        return {"passed": False, "detail": "compute-sanitizer is not on PATH"}
    rows = []
    for name in ("memcheck", "racecheck"):
        cmd = [tool, "--tool", name, "--error-exitcode", "3", sys.executable, "-m", "nvfp4_harness", "gpu-check",
               "--workload"]
        started = time.time()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=200)
        except subprocess.TimeoutExpired:
            rows.append({"tool": name, "returncode": None, "summary": ["timed out after 200 s"]})
            continue
        summary = [line for line in (proc.stdout + proc.stderr).splitlines() if "SUMMARY" in line]
        rows.append({"tool": name, "returncode": proc.returncode, "summary": summary[-1:] or
                     [(proc.stdout + proc.stderr)[-400:]], "seconds": round(time.time() - started, 1)})
    return {"passed": all(r["returncode"] == 0 for r in rows), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness gpu-check", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where results go (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="a subset of cases and shapes")
    parser.add_argument("--no-sanitizer", action="store_true", help="skip compute-sanitizer")
    parser.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu-check needs torch with CUDA", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu-check needs a CUDA GPU; none is visible to torch", file=sys.stderr)
        return 2
    if args.workload:
        run_workload()
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    provenance = gpu_provenance()
    results: dict[str, Any] = {"provenance": provenance, "checks": {}}
    checks = [("fp4_table", lambda: check_fp4_table(args.out, provenance)),
              ("dequant", lambda: check_dequant(args.quick)), ("matmul", lambda: check_matmul(args.quick)),
              ("misaligned", check_misaligned), ("observe", check_observe)]
    if not args.no_sanitizer:
        checks.append(("sanitizer", check_sanitizer))
    for name, fn in checks:
        started = time.time()
        try:
            results["checks"][name] = fn()
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            results["checks"][name] = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
        results["checks"][name]["seconds"] = round(time.time() - started, 1)
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"\n{'check':<12} {'result':<7} seconds  detail")
    for name, outcome in results["checks"].items():
        detail = outcome.get("error") or ", ".join(outcome.get("failures", [])[:3]) or ""
        print(f"{name:<12} {'PASS' if outcome['passed'] else 'FAIL':<7} {outcome['seconds']:>7}  {detail}")
    return 0 if all(o["passed"] for o in results["checks"].values()) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
