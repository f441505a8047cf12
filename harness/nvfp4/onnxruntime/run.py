"""``python -m nvfp4_harness onnxruntime``: ONNX Runtime's FP4 op through the harness, one GPU run.

On a GPU with onnxruntime-gpu 1.31.1 (the ``[onnxruntime]`` extra), in this order:

1. the **crossover searches**, one per GEMV kernel (M = 1..64 at 17408 x 5120, K % 128 == 0:
   the tensor-core GEMV; M = 1..12 and the row-tile boundaries at 4096 x 4064, K % 128 != 0: the
   warp GEMV): which path each M takes; the two limits found become the policy of everything
   after (they differ by design: 32 and 8 on the H200 observed);
2. the **suites**, observed: the full suite (the forcing matrix as ONNX Runtime accepts it, plus
   its own edge cases) and the decode-only suite, with coverage data, term and markdown reports,
   and the ``all-reachable`` verdict of each; then the GEMVs' block-size and K probes;
3. the **bits**: its dequantized weights read out of the matmul, against the CPU reference;
4. the **timings**: profiler kernel durations, warm and cold, beside a copy and beside this
   project's kernels.

Files under ``--out`` (default ``fixtures/gpu``), each with the run's provenance (including the
declared model's fingerprint, which tells CPU CI which model computed the recorded paths), each
written as soon as its part is done (and the long parts every few cases), so a crash leaves what ran:
``onnxruntime-suites.json``, ``onnxruntime-coverage-{full,decode}.json`` with ``.term.txt`` and
``.md``, ``onnxruntime-bits.json``, ``onnxruntime-timing.json``. A failing case is recorded with
its error and the run goes on; after an error that leaves the CUDA context unusable, the rest is
skipped and said so. A short summary table is printed last.

Also: ``--smoke`` (one session, one call per path, the kernel names printed: run it first), and
``--benchmarks-md TIMING.json`` (the BENCHMARKS.md section, on any machine).

Exit status: 0 when everything ran and every expectation held (each crossover search saw the GEMV
kernel the model declares for its shape stop at the declared M, no finding, every read-out equal,
the full suite meets ``all-reachable`` and the decode-only suite fails it naming the dequant
paths); 1 otherwise; 2 without a GPU or onnxruntime-gpu.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nvfp4_harness.nvfp4.onnxruntime.model import (
    DEFAULT_POLICY,
    DEQUANT_PATHS,
    GEMV_MMA_ENV,
    MODEL,
    NATIVE_SM120_ENV,
    ORT_VERSION,
    OrtPolicy,
)
from nvfp4_harness.nvfp4.provenance import REPO

#: when this process started importing the command: the budget counts start-up too
_PROCESS_START = time.monotonic()
DEFAULT_OUT = REPO / "fixtures" / "gpu"
PREFIX = "onnxruntime"
#: the 3-minute slot of the one H200 run, less a margin for the interpreter's start and the summary
DEFAULT_BUDGET_S = 165.0
#: seconds kept for the timing part when it is asked for: the suites and read-outs stop there
TIMING_RESERVE_S = 45.0
DEFAULT_REPS = 30
PARTS = ("crossover", "suites", "probes", "bits", "timing")


def result_path(out: Path, part: str, suffix: str = ".json") -> Path:
    return out / f"{PREFIX}-{part}{suffix}"


class Run:
    """The run's context: torch, the sessions, the device, the clock, the error log, the files."""

    def __init__(self, torch: Any, runtime: Any, out: Path, budget_s: float, argv: Sequence[str]) -> None:
        from nvfp4_harness.engine.observe import torch_device_caps

        self.torch, self.runtime, self.out = torch, runtime, out
        self.torch_device = runtime.device
        self.device = torch_device_caps(runtime.device_index)
        self.started = _PROCESS_START
        self.budget_s = budget_s
        #: seconds the parts before the timing leave to it (set by :func:`execute`)
        self.reserve_s = 0.0
        self.argv = list(argv)
        self.errors: list[dict[str, str]] = []
        self.skipped: list[dict[str, str]] = []
        self.aborted: str | None = None
        self._provenance: dict[str, Any] | None = None

    # clock and log -----------------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def out_of_time(self, reserve_s: float = 0.0) -> bool:
        return self.elapsed() > self.budget_s - reserve_s

    def skip(self, part: str, what: str) -> None:
        self.skipped.append({"part": part, "what": what, "why": self.aborted or "past the time budget"})

    def last_error(self, what: str) -> str | None:
        for e in reversed(self.errors):
            if e["what"] == what:
                return e["error"]
        return None

    def guarded(self, part: str, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, or None with the error recorded (and the run aborted when the CUDA context
        is no longer usable)."""
        if self.aborted:
            self.skip(part, what)
            return None
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - one failing case must not end the run
            message = f"{type(exc).__name__}: {str(exc)[:1500]}"
            self.errors.append({"part": part, "what": what, "error": message})
            print(f"[{self.elapsed():6.1f}s] {part}: {what}: ERROR {message[:300]}", file=sys.stderr, flush=True)
            if not self.context_usable():
                self.aborted = f"an error left the CUDA context unusable ({message[:200]})"
            return None

    def context_usable(self) -> bool:
        try:
            self.torch.cuda.synchronize()
            return bool(self.torch.ones(1, device=self.torch_device).add_(1).item() == 2.0)
        except Exception:  # noqa: BLE001
            return False

    # files -------------------------------------------------------------------------------------

    def provenance(self) -> dict[str, Any]:
        if self._provenance is None:
            self._provenance = provenance(self.torch, self.runtime, self.argv)
        return self._provenance

    def write(self, part: str, payload: dict[str, Any], complete: bool = True) -> Path:
        """``onnxruntime-PART.json`` with the provenance, atomically."""
        from nvfp4_harness.engine.data import write_atomic

        doc = {"provenance": {**self.provenance(), "wall_s": round(self.elapsed(), 1), **model_provenance()},
               "complete": complete, **payload}
        path = result_path(self.out, part)
        write_atomic(path, json.dumps(doc, indent=1, default=_json_default) + "\n")
        return path

    def save_partial(self, part: str, payload: dict[str, Any]) -> None:
        self.write(part, payload, complete=False)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def model_provenance() -> dict[str, Any]:
    """Which declared model computed the file's paths, predictions and verdicts: CPU CI checks
    the recorded ones only against the model with this fingerprint."""
    return {"model": MODEL.name, "model_fingerprint": MODEL.fingerprint, "declared_policy": DEFAULT_POLICY.to_dict()}


def provenance(torch: Any, runtime: Any, argv: Sequence[str]) -> dict[str, Any]:
    """GPU, driver, CUDA, torch, ONNX Runtime and onnx versions, date, command, commit."""
    from nvfp4_harness.nvfp4.provenance import gpu_provenance

    prov = gpu_provenance(["python", "-m", "nvfp4_harness", "onnxruntime", *argv])
    prov["cuda"] = str(torch.version.cuda)
    prov["onnxruntime"] = runtime.version
    prov["onnxruntime_declared"] = ORT_VERSION
    prov["onnxruntime_providers"] = list(runtime.ort.get_available_providers())
    build_info = getattr(runtime.ort, "get_build_info", None)
    prov["onnxruntime_build"] = str(build_info()) if callable(build_info) else ""
    prov["onnxruntime_environment"] = {name: os.environ.get(name) for name in (GEMV_MMA_ENV, NATIVE_SM120_ENV)}
    try:
        import onnx

        prov["onnx"] = onnx.__version__
    except ImportError:
        prov["onnx"] = "not installed"
    return prov


# --- the environment -----------------------------------------------------------------------------


def environment() -> tuple[Any, Any]:
    """torch with a GPU, and onnxruntime-gpu with its CUDA execution provider; else SystemExit(2)
    with what is missing."""
    try:
        import torch
    except ImportError as exc:
        raise SystemExit(_missing(f"torch is not installed ({exc})")) from exc
    if not torch.cuda.is_available():
        raise SystemExit(_missing("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)"))
    from nvfp4_harness.nvfp4.onnxruntime.session import OnnxRuntimeUnavailable, OrtRuntime

    try:
        runtime = OrtRuntime(torch)
    except OnnxRuntimeUnavailable as exc:
        raise SystemExit(_missing(str(exc))) from exc
    if runtime.version != ORT_VERSION:
        print(f"note: onnxruntime {runtime.version} is installed; the declared model is of {ORT_VERSION}",
              file=sys.stderr)
    return torch, runtime


def _missing(what: str) -> int:
    print(f"python -m nvfp4_harness onnxruntime needs a CUDA GPU and onnxruntime-gpu {ORT_VERSION}: {what}. "
          "On a machine without them, the CPU checks of committed results run with "
          "`pytest suites/test_onnxruntime.py`.", file=sys.stderr)
    return 2


# --- the command -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness onnxruntime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the JSON files go (default "
                        "%(default)s)")
    parser.add_argument("--smoke", action="store_true", help="one session, one call per path, print the kernel "
                        "names; writes nothing")
    parser.add_argument("--only", default=",".join(PARTS), metavar="PART[,...]",
                        help=f"run only these parts: {', '.join(PARTS)} (crossover always runs: it sets the policy)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="seconds from the process's start: the suites and read-outs stop in time to leave "
                             f"the timing {TIMING_RESERVE_S:.0f} s, the timing rows stop at the budget (default "
                             "%(default)s)")
    parser.add_argument("--reps", type=int, default=DEFAULT_REPS, help="timed repetitions per contender and mode")
    parser.add_argument("--benchmarks-md", metavar="TIMING.json", default=None,
                        help="print the BENCHMARKS.md section generated from a timing file (no GPU needed)")
    parser.add_argument("-o", "--output", default=None, help="with --benchmarks-md: write the section here")
    args = parser.parse_args(list(argv))
    parts = tuple(p.strip() for p in args.only.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    args.parts = parts
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.benchmarks_md:
        from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md

        return benchmarks_md.main(args.benchmarks_md, args.output)
    try:
        torch, runtime = environment()
    except SystemExit as exc:
        return int(exc.code or 2)
    from nvfp4_harness.nvfp4.onnxruntime import sections

    run = Run(torch, runtime, args.out, args.budget_s, argv)
    if args.smoke:
        return sections.smoke(run)
    args.out.mkdir(parents=True, exist_ok=True)
    return execute(run, args)


def execute(run: Run, args: argparse.Namespace) -> int:
    """Run the parts in order, writing each file as soon as its part is done; the summary last."""
    from nvfp4_harness.nvfp4.onnxruntime import sections

    status: dict[str, Any] = {}
    run.reserve_s = TIMING_RESERVE_S if "timing" in args.parts else 0.0
    cross = run.guarded("crossover", "search", lambda: sections.crossover(run)) or {}
    run.write("crossover", {"crossover": cross})
    policy = run_policy(cross)
    status["policy"] = policy
    if "suites" in args.parts:
        result = run.guarded("suites", "all", lambda: sections.suites(run, policy))
        if result is not None:
            coverage = result.pop("_coverage")
            for name, data in coverage.items():
                write_coverage(run.out, name, data)
            run.write("suites", result)
            status["suites"] = result
    if "probes" in args.parts:
        status["probes"] = sections.probes(run, policy)
        run.write("probes", {"probes": status["probes"], "policy": policy.to_dict()})
    if "bits" in args.parts:
        status["bits"] = sections.bits(run, policy)
        run.write("bits", {"cases": status["bits"], "method": BITS_METHOD, "policy": policy.to_dict()})
    if "timing" in args.parts:
        status["timing"] = run.guarded("timing", "all", lambda: sections.timing(run, policy, args.reps)) or {}
        run.write("timing", {**status["timing"], "policy": policy.to_dict()})
    run.write("errors", {"errors": run.errors, "skipped": run.skipped, "aborted": run.aborted})
    print(summary(run, cross, status))
    return 0 if verdict(run, cross, status) == [] else 1


def run_policy(cross: dict[str, Any]) -> OrtPolicy:
    """The policy of every call after the crossover: the GEMV limits the searches observed
    (the declared ones where a search failed), the environment's opt-ins."""
    observed = cross.get("observed_policy") or {}
    limits = {k: observed[k] for k in ("gemv_mma_max_m", "gemv_max_m") if isinstance(observed.get(k), int)}
    return OrtPolicy.from_environment(**limits)


BITS_METHOD = ("A = [I_K; 0] with M = max(K, 128) (dequant + cuBLAS path), Y[:K] = W^T exactly; a second run with "
               "A = -I reads -W. Compared on the observable bits: zeros as +0.0 (the sign of a zero weight does not "
               "survive accumulation from +0.0), rows holding a NaN weight as all canonical NaN (0 * NaN poisons "
               "the row). See harness/nvfp4/onnxruntime/readout.py.")


def write_coverage(out: Path, name: str, data: Any) -> None:
    """The coverage data document and its term and markdown reports."""
    from nvfp4_harness.engine.reports import write_report

    data.write(result_path(out, f"coverage-{name}"))
    write_report(data, "term", str(result_path(out, f"coverage-{name}", ".term.txt")))
    write_report(data, "markdown", str(result_path(out, f"coverage-{name}", ".md")))


def verdict(run: Run, cross: dict[str, Any], status: dict[str, Any]) -> list[str]:
    """What did not hold, one line each (empty: the run met every expectation)."""
    problems = [f"{e['part']}: {e['what']}: {e['error'][:200]}" for e in run.errors]
    if run.aborted:
        problems.append(f"aborted: {run.aborted}")
    suites = status.get("suites")
    if suites:
        findings = [c for c in suites["calls"] if c.get("finding")]
        problems += [f"finding in {c['id']}: {c['finding']}" for c in findings]
        for c in suites["calls"]:
            check = c.get("output_check") or {}
            if check.get("unwritten"):
                problems.append(f"ONNX Runtime output of {c['id']}: {check['unwritten']} element(s) never written")
            if check.get("checked") == "bias bitwise" and not check.get("equal"):
                problems.append(f"ONNX Runtime output of {c['id']}: K == 0 but the output is not the bias")
        if not suites["full"]["requirement"]["passed"]:
            problems.append("the full suite does not meet all-reachable")
        decode = suites["decode"]["requirement"]
        named = all(any(f"required path {MODEL.name}:{p} was never taken" in f for f in decode["failures"])
                    for p in DEQUANT_PATHS)
        if decode["passed"] or not named:
            problems.append("the decode-only suite does not fail all-reachable naming both dequant paths")
    for name in ("probes",):
        problems += [f"finding in {c['id']}: {c['finding']}" for c in status.get(name) or [] if c.get("finding")]
    for row in (status.get("timing") or {}).get("rows", []):
        finding = (row.get("onnxruntime_path") or {}).get("finding")
        if finding:
            problems.append(f"finding in timing {row['N']}x{row['K']} M={row['M']}: {finding}")
    problems += crossover_problems(cross)
    for case in status.get("bits") or []:
        if case.get("equal") is not True or case.get("negated_equal") is not True:
            problems.append(f"bits {case['id']}: read-out differs from the reference")
    if run.skipped:
        problems.append(f"{len(run.skipped)} item(s) skipped ({run.aborted or 'time budget'}): the results are "
                        "incomplete, see onnxruntime-errors.json")
    return problems


def crossover_problems(cross: dict[str, Any]) -> list[str]:
    """What the crossover searches saw that the declared model does not say. The two searches
    stopping at different M is no problem: each measures its own GEMV kernel's limit."""
    if not cross:
        return []
    problems = []
    for s in cross.get("searches", []):
        if not s.get("as_declared"):
            obs, dec = s["observed"], s["declared"]
            problems.append(f"crossover {s['name']} ({s['n']}x{s['k']}): saw {obs['gemv_path']} up to M = "
                            f"{obs['gemv_max_m']}, the model declares {dec['gemv_path']} up to M = {dec['gemv_max_m']}"
                            f" (calls not as declared at M = {s['calls_not_as_declared'][:8]})")
    problems += [f"crossover: {c}" for c in cross.get("conflicts", [])]
    observed, declared = cross.get("observed_policy"), cross.get("declared_policy")
    if observed and declared and observed != declared:
        problems.append(f"the crossover searches show the GEMV limits {observed}, the model declares {declared}: "
                        "update OBSERVED_GEMV_MMA_MAX_M / OBSERVED_GEMV_MAX_M in harness/nvfp4/onnxruntime/model.py")
    return problems


def summary(run: Run, cross: dict[str, Any], status: dict[str, Any]) -> str:
    """The short table printed last."""
    lines = ["", f"ONNX Runtime {run.runtime.version} MatMulBlockQuantizedFp4Weight on {run.device.label}, "
             f"{run.elapsed():.0f} s", "-" * 78]
    for s in cross.get("searches", []) if cross else []:
        obs, dec = s["observed"], s["declared"]
        lines.append(f"{'crossover':12} {s['name']} ({s['n']}x{s['k']}, K % 128 = {s['k'] % 128}): "
                     f"{obs['gemv_path']} for M <= {obs['gemv_max_m']}; declared {dec['gemv_path']} for M <= "
                     f"{dec['gemv_max_m']} {'ok' if s['as_declared'] else 'DIFFERS'}")
    suites = status.get("suites")
    if suites:
        calls = suites["calls"]
        paths: dict[str, int] = {}
        for c in calls:
            paths[str(c.get("path"))] = paths.get(str(c.get("path")), 0) + 1
        findings = sum(1 for c in calls if c.get("finding"))
        lines.append(f"{'suites':12} {len(calls)} calls; paths {paths}; findings {findings}; "
                     f"errors {sum(1 for c in calls if c.get('error'))}")
        checked = [c["output_check"] for c in calls if (c.get("output_check") or {}).get("checked") == "float64 bound"]
        inside = sum(1 for c in checked if c["within_bound"])
        lines.append(f"{'  outputs':12} {inside}/{len(checked)} within this project's float64 bound (informational: "
                     "ONNX Runtime promises none)")
        for name in ("full", "decode"):
            req = suites[name]["requirement"]
            first = "; ".join(f[:90] for f in req["failures"][:2])
            lines.append(f"{'  ' + name:12} all-reachable {'PASS' if req['passed'] else 'FAIL'}"
                         + (f": {first}" if first else ""))
    if status.get("probes"):
        shown = ", ".join(f"bs{p['block_size']}/K{p['k']}={p.get('path')}" for p in status["probes"])
        lines.append(f"{'probes':12} {shown}")
    if status.get("bits") is not None:
        b = status["bits"]
        equal = sum(1 for c in b if c.get("equal") and c.get("negated_equal"))
        lines.append(f"{'bits':12} {equal}/{len(b)} read-outs equal to the CPU reference (observable bits)")
    timing = status.get("timing") or {}
    for row in (timing.get("rows") or [])[:40]:
        ort = row.get("onnxruntime", {})
        ours = row.get("ours", {})
        copy = row.get("copy_op", {})
        lines.append(f"{'timing':12} {row['section']:7} {row['N']:>6}x{row['K']:<6} M={row['M']:<5} "
                     f"ORT {ort.get('warm', {}).get('total', {}).get('median_us', float('nan')):8.1f}/"
                     f"{ort.get('cold', {}).get('total', {}).get('median_us', float('nan')):8.1f} us "
                     f"[{row['onnxruntime_path'].get('path')}]  ours "
                     f"{ours.get('warm', {}).get('total', {}).get('median_us', float('nan')):8.1f}/"
                     f"{ours.get('cold', {}).get('total', {}).get('median_us', float('nan')):8.1f}  copy "
                     f"{copy.get('warm', {}).get('total', {}).get('median_us', float('nan')):7.1f}/"
                     f"{copy.get('cold', {}).get('total', {}).get('median_us', float('nan')):7.1f}")
    problems = verdict(run, cross, status)
    lines.append("-" * 78)
    lines.append("every expectation held" if not problems else f"{len(problems)} problem(s):")
    lines += [f"  {p}" for p in problems[:20]]
    if run.skipped:
        lines.append(f"{len(run.skipped)} item(s) skipped (budget or abort): see onnxruntime-errors.json")
    lines.append(f"files in {run.out}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
