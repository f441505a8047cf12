"""The work of each part of the GPU run; :mod:`.run` sequences them, saves and summarizes.

Every function takes the run's context (:class:`~nvfp4_harness.nvfp4.onnxruntime.run.Run`:
torch, the ONNX Runtime sessions, the device, the budget, the error log) and returns plain
data for the JSON files. One case that fails is recorded with its error and the loop goes on.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from nvfp4_harness.engine.observe import observe
from nvfp4_harness.engine.recorder import Recorder
from nvfp4_harness.nvfp4.bench_metrics import copy_ceiling_half
from nvfp4_harness.nvfp4.onnxruntime import cases as case_lists
from nvfp4_harness.nvfp4.onnxruntime import readout
from nvfp4_harness.nvfp4.onnxruntime.cases import OrtCase, TimingRow, host_operands
from nvfp4_harness.nvfp4.onnxruntime.model import DEFAULT_POLICY, GEMV_PATHS, MODEL, OrtPolicy, OrtProblem
from nvfp4_harness.nvfp4.onnxruntime.observing import (
    SUITE_LABELS,
    coverage_of,
    describe,
    observe_call,
    suite_test,
    verdict_of,
)
from nvfp4_harness.nvfp4.onnxruntime.timing import Contender, ProfiledTimer

if TYPE_CHECKING:
    from nvfp4_harness.nvfp4.onnxruntime.run import Run

#: outputs larger than this (N * K) are not checked against float64 in the suites (time)
OUTPUT_CHECK_MAX_ELEMENTS = 1 << 22
#: rows of the outputs compared between ONNX Runtime and this project in the timing section
AGREEMENT_ROWS = 64


# --- one observed call ---------------------------------------------------------------------------


def device_operands(run: Run, host: dict[str, np.ndarray]) -> dict[str, Any]:
    """The host inputs as CUDA tensors with the same bits (bfloat16 goes through int16)."""
    torch = run.torch
    out = {}
    for name, value in host.items():
        value = np.ascontiguousarray(value)
        if value.dtype.name == "bfloat16":
            out[name] = torch.from_numpy(value.view(np.int16)).view(torch.bfloat16).to(run.torch_device)
        else:
            out[name] = torch.from_numpy(value).to(run.torch_device)
    return out


def observed_case(run: Run, case: OrtCase, policy: OrtPolicy, *, check_output: bool = True) -> dict[str, Any]:
    """Build the case's inputs, run it once untimed (first-call set-up stays out of the profile),
    then once observed (announced to whichever recorder listens); the record of the call."""
    host = host_operands(case)
    dev = device_operands(run, host)
    call = run.runtime.bind(dev["a"], dev["b"], dev["weight_scale"], dev["weight_scale_2"], case.block_size,
                            dev.get("bias"))
    call()
    obs = observe_call(call, case.problem, device=run.device, policy=policy)
    record = {**case.to_dict(), **describe(obs.event), "session": call.key.label}
    if check_output:
        record["output_check"] = output_check(case, host, obs.result, obs.event.path)
    return record


def output_check(case: OrtCase, host: dict[str, np.ndarray], y: Any, path: str | None) -> dict[str, Any]:
    """The output against the contract: bias (bitwise) for K == 0, otherwise float64 within the
    project's bound (one rounding for either GEMV, two for prefill). Informational: ONNX Runtime
    promises no bound; a GEMV that rounds products to T, for instance, lands outside it."""
    from nvfp4_harness.nvfp4.shapes import matmul_error_bound
    from nvfp4_harness.nvfp4.verify import compare_bitwise, to_numpy
    from nvfp4_kernels import reference

    got = to_numpy(y)
    unwritten = int(np.count_nonzero(np.ascontiguousarray(got).view(np.uint16) == 0x7FC7))
    out: dict[str, Any] = {"unwritten": unwritten}
    if got.size == 0:
        return {**out, "checked": "empty output"}
    bias = host.get("bias")
    if case.k == 0:
        want = np.broadcast_to(bias, got.shape) if bias is not None else np.zeros_like(got)
        diff = compare_bitwise(np.ascontiguousarray(want), got)
        return {**out, "checked": "bias bitwise", "equal": bool(diff), **({} if diff else {"difference": str(diff)})}
    if case.n * case.k > OUTPUT_CHECK_MAX_ELEMENTS:
        return {**out, "checked": "not checked (large)"}
    w = reference.dequantize(host["b"], host["weight_scale"], float(host["weight_scale_2"][0]), case.block_size,
                             case.dtype)
    a = host["a"].reshape(-1, case.k)
    y64, bound = matmul_error_bound(a, w, bias, case.dtype, roundings=1 if path in GEMV_PATHS else 2)
    err = np.abs(got.reshape(-1, case.n).astype(np.float64) - y64)
    ratio = np.where(bound > 0, err / bound, np.inf)
    worst = float(np.nanmax(ratio)) if np.isfinite(err).all() else float("inf")
    return {**out, "checked": "float64 bound", "within_bound": bool(np.all(err <= bound)),
            "worst_error_over_bound": round(worst, 3)}


# --- the crossover search ----------------------------------------------------------------------


def crossover(run: Run) -> dict[str, Any]:
    """Which path each M takes at each :data:`~.cases.CROSSOVER` shape (predicted with the
    declared default), and :func:`~.cases.crossover_summary`: which GEMV kernel each search saw
    up to which M, beside the declared model's prediction for the same calls, and the policy the
    searches imply. Two searches stopping at different M is expected: one GEMV kernel each."""
    searches = [_search(run, search) for search in case_lists.CROSSOVER]
    summary = case_lists.crossover_summary(searches, DEFAULT_POLICY, run.device)
    merged = [{**search, **verdict} for search, verdict in zip(searches, summary["searches"], strict=True)]
    return {**summary, "searches": merged}


def _search(run: Run, search: case_lists.Crossover) -> dict[str, Any]:
    torch, device = run.torch, run.torch_device
    gen = torch.Generator(device=device).manual_seed(search.n + search.k)
    operands = {"b": torch.randint(0, 256, (search.n, search.k // 2), dtype=torch.uint8, device=device, generator=gen),
                "ws": torch.randint(0x28, 0x49, (search.n, -(-search.k // search.block_size)), dtype=torch.uint8,
                                    device=device, generator=gen),
                "g": torch.tensor([0.0123], dtype=torch.float32, device=device),
                "a": torch.randn(max(search.ms), search.k, dtype=getattr(torch, search.dtype), device=device,
                                 generator=gen)}
    calls = []
    for m in search.ms:
        record = run.guarded("crossover", f"{search.name} M={m}", lambda m=m: _crossover_call(run, search, operands, m))
        calls.append(record if record is not None else {"m": m, "path": None, "error": run.last_error(
            f"{search.name} M={m}")})
    return {"name": search.name, "n": search.n, "k": search.k, "block_size": search.block_size,
            "dtype": search.dtype, "calls": calls, "paths": {str(c["m"]): c.get("path") for c in calls}}


def _crossover_call(run: Run, search: case_lists.Crossover, operands: dict[str, Any], m: int) -> dict[str, Any]:
    call = run.runtime.bind(operands["a"][:m], operands["b"], operands["ws"], operands["g"], search.block_size)
    call()
    problem = OrtProblem(m, search.n, search.k, search.block_size, search.dtype)
    obs = observe_call(call, problem, device=run.device, policy=DEFAULT_POLICY, publish=False)
    return {"m": m, **describe(obs.event)}


# --- the suites -------------------------------------------------------------------------------


def suites(run: Run, policy: OrtPolicy) -> dict[str, Any]:
    """The full suite and the decode-only suite, observed; coverage data of each and the
    ``all-reachable`` requirement's verdict on each."""
    full = case_lists.full_suite(policy)
    decode = case_lists.decode_suite(policy)
    extra = [c for c in decode if c.origin == "decode"]
    recorder = Recorder(models=[MODEL]).start()
    records: list[dict[str, Any]] = []
    try:
        for i, case in enumerate(list(full) + extra):
            if run.out_of_time(reserve_s=run.reserve_s + 30.0):  # the read-outs still need their time
                run.skip("suites", case.id)
                continue
            test = suite_test(case.to_dict())
            with recorder.attribute(test):
                rec = run.guarded("suites", case.id, lambda case=case: observed_case(
                    run, case, policy, check_output=case.origin != "decode"))
            records.append(rec if rec is not None else {**case.to_dict(), "path": None,
                                                        "error": run.last_error(case.id)})
            if i % 8 == 7:
                run.save_partial("suites", {"calls": records})
    finally:
        recorder.stop()
    decode_ids = {c.id for c in decode}
    events = [(r.event, r.test) for r in recorder.events if r.test]
    full_data = coverage_of([(e, t) for e, t in events if t.startswith("full::")], SUITE_LABELS["full"])
    decode_data = coverage_of([(e, t) for e, t in events if t.split("::", 1)[1] in decode_ids],
                              SUITE_LABELS["decode"])
    any_m8 = coverage_of([(e, t) for e, t in events if t.startswith("full::") and 0 <= e.problem.m <= 8],
                         "every M <= 8 case of the full suite (any shape)")
    return {
        "policy": policy.to_dict(),
        "full": {"cases": [c.id for c in full], "requirement": verdict_of(full_data)},
        "decode": {"cases": sorted(decode_ids), "requirement": verdict_of(decode_data),
                   "definition": "decode-shaped calls (1 <= M <= 8, block_size 16, K % 32 == 0): the shape of "
                                 "ONNX Runtime's own FP4 tests in the seed's lesson"},
        "every_m_le_8": {"requirement": verdict_of(any_m8),
                         "definition": "every case of the full suite with M <= 8, whatever its block size and K"},
        "excluded": case_lists.excluded_matrix_cases(),
        "calls": records,
        "rejected_events": list(recorder.rejected),
        "_coverage": {"full": full_data, "decode": decode_data},
    }


def probes(run: Run, policy: OrtPolicy) -> list[dict[str, Any]]:
    """The GEMVs' block-size and K granularity at M = 1, observed (not counted as coverage)."""
    out = []
    for case in case_lists.probe_cases():
        rec = run.guarded("probes", case.id, lambda case=case: observed_case(run, case, policy, check_output=False))
        out.append(rec if rec is not None else {**case.to_dict(), "path": None, "error": run.last_error(case.id)})
    return out


# --- the read-out -------------------------------------------------------------------------------


def bits(run: Run, policy: OrtPolicy) -> list[dict[str, Any]]:
    """Every read-out case: ONNX Runtime's dequantized weights against the CPU reference."""
    out: list[dict[str, Any]] = []

    def call(a: Any, b: Any, ws: Any, g: Any, problem: OrtProblem) -> tuple[Any, Any]:
        bound = run.runtime.bind(a, b, ws, g, problem.block_size)
        bound()
        obs = observe_call(bound, problem, device=run.device, policy=policy, publish=False)
        return obs.result, obs.event

    for i, case in enumerate(readout.readout_cases(case_lists.full_suite(policy))):
        if run.out_of_time(reserve_s=run.reserve_s):
            run.skip("bits", case.id)
            continue
        rec = run.guarded("bits", case.id, lambda case=case: readout.read_out(case, call, run.torch,
                                                                             run.torch_device))
        out.append(rec if rec is not None else {**case.to_dict(), "equal": None, "error": run.last_error(case.id)})
        if i % 8 == 7:
            run.save_partial("bits", {"cases": out})
    return out


# --- timing -------------------------------------------------------------------------------------


class Weights:
    """Random NVFP4 weights of one shape on the device, shared by every contender (the last two
    shapes are kept)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self._cache: dict[tuple[int, int, int], dict[str, Any]] = {}

    def get(self, n: int, k: int, block_size: int, m_max: int, dtype: str) -> dict[str, Any]:
        from nvfp4_harness.nvfp4.bench_metrics import GLOBAL_SCALE, SCALE_BYTE_RANGE

        key = (n, k, block_size)
        found = self._cache.get(key)
        if found is not None and found["a"].shape[0] >= m_max:
            return found
        while len(self._cache) >= 2:
            self._cache.pop(next(iter(self._cache)))
        torch, device = self.run.torch, self.run.torch_device
        gen = torch.Generator(device=device).manual_seed(n * 31 + k * 7 + block_size)
        w = {"b": torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device=device, generator=gen),
             "ws": torch.randint(SCALE_BYTE_RANGE[0], SCALE_BYTE_RANGE[1] + 1, (n, -(-k // block_size)),
                                 dtype=torch.uint8, device=device, generator=gen),
             "g": torch.tensor([GLOBAL_SCALE], dtype=torch.float32, device=device),
             "a": torch.randn(m_max, k, dtype=getattr(torch, dtype), device=device, generator=gen)}
        self._cache[key] = w
        return w


def our_backend(run: Run) -> tuple[bool, str]:
    """Whether this project's CUDA kernels can run here, and why not."""
    try:
        from nvfp4_kernels import cuda_backend

        ok, why = cuda_backend.available()
    except Exception as exc:  # noqa: BLE001 - the ORT timings still run without ours
        return False, f"{type(exc).__name__}: {exc}"
    return bool(ok), str(why or "available")


def loop_us(torch: Any, fn: Callable[[], Any], calls: int, repeats: int) -> list[float]:
    """Wall microseconds per call of ``calls`` calls back to back, then one device-wide sync (the
    host clock around it all: what one step of an eager loop costs, whether the host or the GPU
    is the slower), for each of ``repeats`` loops."""
    fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - start) * 1e6 / calls)
    return per_call


def eager_loop(run: Run, weights: Weights, ours_ok: bool) -> dict[str, Any]:
    """ONNX Runtime's op and this project's ``nvfp4_matmul`` in the same eager loop, on the same
    device inputs, in this process: :data:`~.cases.EAGER_LOOP_CALLS` calls back to back (ONNX
    Runtime through its I/O binding, as a serving loop calls it; ours with the tensors), then one
    sync, median of :data:`~.cases.EAGER_LOOP_REPEATS` loops."""
    import nvfp4_kernels

    torch = run.torch
    calls, repeats = case_lists.EAGER_LOOP_CALLS, case_lists.EAGER_LOOP_REPEATS
    rows = []
    for m, n, k in case_lists.EAGER_LOOP_SHAPES:
        w = weights.get(n, k, 16, m, "bfloat16")
        a = w["a"][:m]
        bound = run.runtime.bind(a, w["b"], w["ws"], w["g"], 16)
        bound()  # the session exists and has run once
        run_bound = functools.partial(bound.session.run_with_iobinding, bound.binding)
        runs = {"onnxruntime": loop_us(torch, run_bound, calls, repeats)}
        if ours_ok:
            ours = functools.partial(nvfp4_kernels.nvfp4_matmul, a, w["b"], w["ws"], w["g"], 16)
            runs["ours"] = loop_us(torch, ours, calls, repeats)
        rows.append({"M": m, "N": n, "K": k, **{f"{name}_us": round(statistics.median(v), 2)
                                               for name, v in runs.items()},
                     **{f"{name}_range_us": [round(min(v), 2), round(max(v), 2)] for name, v in runs.items()}})
    return {"rows": rows, "calls": calls, "repeats": repeats,
            "method": f"{calls} calls back to back on device inputs, then one device sync; host clock around the "
                      f"loop per call; median of {repeats} loops, same process, same inputs"}


def timing(run: Run, policy: OrtPolicy, reps: int) -> dict[str, Any]:
    """Every :func:`~.cases.timing_rows` row: ONNX Runtime, this project's kernels on the same
    inputs, and same-size copies, warm and cold, by profiler kernel durations; first, the
    eager-loop comparison of the decode calls (:func:`eager_loop`)."""
    import nvfp4_kernels
    from nvfp4_harness.nvfp4.bench_metrics import dequant_bytes, gemv_bytes, prefill_bytes
    from nvfp4_kernels.model import MODEL as OURS

    torch = run.torch
    timer = ProfiledTimer(torch, reps=reps)
    calibration = timer.calibrate()
    ours_ok, ours_why = our_backend(run)
    weights = Weights(run)
    rows_plan = case_lists.timing_rows()
    m_max = {}
    for r in rows_plan:
        m_max[(r.n, r.k, r.block_size)] = max(m_max.get((r.n, r.k, r.block_size), 0), r.m)
    copies: dict[int, tuple[Any, Any]] = {}
    loop = run.guarded("timing", "eager loop", lambda: eager_loop(run, weights, ours_ok))

    def copy_contender(label: str, nbytes: int) -> Contender:
        half = copy_ceiling_half(nbytes)  # the bench's copy ceiling: a 4 KiB-granular size
        if half not in copies:
            while len(copies) >= 3:
                copies.pop(next(iter(copies)))
            src = torch.randint(0, 256, (half,), dtype=torch.uint8, device=run.torch_device)
            copies[half] = (src, torch.empty_like(src))
        src, dst = copies[half]
        return Contender(label, lambda: dst.copy_(src))

    rows: list[dict[str, Any]] = []
    for row in rows_plan:
        def one(row: TimingRow = row) -> dict[str, Any]:
            w = weights.get(row.n, row.k, row.block_size, m_max[(row.n, row.k, row.block_size)], row.dtype)
            a = w["a"][: row.m]
            call = run.runtime.bind(a, w["b"], w["ws"], w["g"], row.block_size)
            call()
            problem = OrtProblem(row.m, row.n, row.k, row.block_size, row.dtype)
            obs = observe_call(call, problem, device=run.device, policy=policy, publish=False)
            ort_path = obs.event.path
            op_bytes = (gemv_bytes(row.m, row.n, row.k, row.dtype) if ort_path in GEMV_PATHS
                        else prefill_bytes(row.m, row.n, row.k, row.block_size, row.dtype))
            contenders = [Contender("onnxruntime", call, (MODEL,)), copy_contender("copy_op", op_bytes)]
            record: dict[str, Any] = {"section": row.section, "N": row.n, "K": row.k, "M": row.m,
                                      "block_size": row.block_size, "dtype": row.dtype,
                                      "onnxruntime_path": describe(obs.event),
                                      "bytes": {"op": op_bytes}}
            if ort_path not in GEMV_PATHS:
                record["bytes"]["dequant"] = dequant_bytes(row.n, row.k, row.block_size, row.dtype)
                contenders.append(copy_contender("copy_dequant", record["bytes"]["dequant"]))
            if ours_ok:
                def ours() -> Any:
                    return nvfp4_kernels.nvfp4_matmul(a, w["b"], w["ws"], w["g"], row.block_size)

                try:  # this project's kernels failing must not cost ONNX Runtime's row
                    y_ours = ours()
                    torch.cuda.synchronize()
                    rows_cmp = min(row.m, AGREEMENT_ROWS)
                    ref = y_ours[:rows_cmp].double()
                    diff = (obs.result[:rows_cmp].double() - ref).norm() / ref.norm().clamp_min(1e-30)
                    record["agreement"] = {"rows": rows_cmp, "relative_difference": round(float(diff), 6)}
                    contenders.insert(1, Contender("ours", ours, (OURS,)))
                except Exception as exc:  # noqa: BLE001
                    record["ours"] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
            else:
                record["ours"] = {"skipped": ours_why}
            record.update(timer.time(contenders))
            return record

        if run.out_of_time(reserve_s=5.0):
            run.skip("timing", f"{row.section} {row.n}x{row.k} M={row.m}")
            continue
        rec = run.guarded("timing", f"{row.section} {row.n}x{row.k} M={row.m} bs{row.block_size}", one)
        if rec is not None:
            rows.append(rec)
            run.save_partial("timing", {"rows": rows, "calibration": calibration,
                                        "ours_backend": ours_why, "reps": reps, "eager_loop": loop})
    return {"rows": rows, "calibration": calibration, "ours_backend": ours_why, "reps": reps, "eager_loop": loop,
            "method": "torch.profiler (CUPTI) kernel intervals, a call's total the union of its kernels' (overlapping "
                      "programmatic dependents counted once); warm: repetitions back to back; cold: a "
                      f"{timer.flush_bytes >> 20} MB write before each; median of {reps}"}


# --- the self-check -----------------------------------------------------------------------------


#: (expected path, M, N, K) of the self-check: both GEMV kernels, then M = 9 at K % 128 != 0 (past
#: the warp GEMV, where the tensor-core one does not apply) and the two dequant kernels
SMOKE_CALLS = (("gemv_mma", 1, 256, 256), ("gemv", 1, 256, 96), ("prefill_vec8", 9, 256, 96),
               ("prefill_vec8", 128, 256, 256), ("prefill_scalar", 4, 256, 36))


def smoke(run: Run) -> int:
    """One session (bf16, block 16), one call per path; prints the kernel names each launched,
    then a five-repetition timing of the GEMV call. Exit 0 when every path is the expected one."""
    torch = run.torch
    bad = 0
    print(f"onnxruntime {run.runtime.version}, providers {run.runtime.ort.get_available_providers()}")
    for expected, m, n, k in SMOKE_CALLS:
        case = OrtCase(f"smoke-{expected}-m{m}-k{k}", (m,), n, k, 16, "bfloat16", False, "smoke", expected)
        rec = run.guarded("smoke", case.id, lambda case=case: observed_case(run, case, DEFAULT_POLICY))
        if rec is None:
            bad += 1
            print(f"{expected:15} M={m} N={n} K={k}: ERROR {run.last_error(case.id)}")
            continue
        ok = rec["path"] == expected and rec["finding"] is None
        bad += not ok
        print(f"{expected:15} M={m} N={n} K={k}: observed {rec['path']!r}, predicted {rec['predicted']!r} "
              f"{'ok' if ok else 'MISMATCH: ' + str(rec['finding'])}; output {rec['output_check']}")
        for name in rec["kernels"]:
            print(f"    {name}")
    print(f"session creation (s): {run.runtime.creation_s}")
    import time

    started = time.perf_counter()
    ok, why = our_backend(run)  # loads (and, the first time, builds) this project's kernels for the timing part
    print(f"this project's CUDA backend: {'available' if ok else 'UNAVAILABLE'} ({why}), "
          f"{time.perf_counter() - started:.1f} s")
    try:
        timer = ProfiledTimer(torch, reps=5)
        print(f"timer calibration: {timer.calibrate()}")
        a = torch.randn(1, 256, dtype=torch.bfloat16, device=run.torch_device)
        b = torch.randint(0, 256, (256, 128), dtype=torch.uint8, device=run.torch_device)
        ws = torch.randint(0x28, 0x49, (256, 16), dtype=torch.uint8, device=run.torch_device)
        g = torch.tensor([0.0123], dtype=torch.float32, device=run.torch_device)
        src = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8, device=run.torch_device)
        dst = torch.empty_like(src)
        timed = timer.time([Contender("onnxruntime", run.runtime.bind(a, b, ws, g, 16), (MODEL,)),
                            Contender("copy", lambda: dst.copy_(src))])
        for label, modes in timed.items():
            for mode, got in modes.items():
                print(f"timing {label:12} {mode}: {got['total']['median_us']:.2f} us (5 reps), kinds {got['by_kind']}, "
                      f"kernels {got['kernels']}")
        raw = observe(MODEL, run.runtime.bind(a, b, ws, g, 16), OrtProblem(1, 256, 256, 16), device=run.device,
                      publish=False)
        print(f"engine observe: path {raw.event.path!r}, unmatched {list(raw.event.unmatched)}")
    except Exception as exc:  # noqa: BLE001 - report, then fail the smoke
        bad += 1
        print(f"timing self-check failed: {type(exc).__name__}: {exc}")
    return 0 if bad == 0 else 1
