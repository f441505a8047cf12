"""CPU checks of the files an ONNX Runtime GPU run wrote (no GPU, no onnxruntime).

Each function reads one kind of file from a results folder and returns a list of problems, each
saying what does not hold (empty: consistent). ``suites/test_onnxruntime.py`` runs them on the
committed ``fixtures/gpu/onnxruntime-*`` files and, so that they are themselves tested before any
GPU result exists, on the output of a dry run against a simulated ONNX Runtime.

A run's files hold two kinds of content, and the checks keep them apart:

* **what ONNX Runtime did**: the kernel names each call launched, its outputs' hashes, the kernel
  times. That stays true whatever the model says, so these checks re-judge it with *today's*
  declared model (recomputing paths, crossovers and coverage from the recorded kernel names):

  - :func:`provenance_problems` - every file names its GPU, driver, CUDA, torch, ONNX Runtime
    version, date and command;
  - :func:`replay_problems` - every recorded call's kernel names, replayed through today's model
    (:func:`~.observing.event_for`, i.e. the engine's ``observed_event``), show a declared path
    and agree with the model's prediction under the declared policy;
  - :func:`crossover_problems` - each crossover search, recomputed from its traces, saw the
    GEMV kernel the model declares for its shape stop at the declared M (the two searches stop
    at different M by design: 32 for the tensor-core GEMV, 8 for the warp one);
  - :func:`coverage_problems` - the suites' coverage, recomputed from their traces: the full
    suite meets ``all-reachable`` with both GEMVs, vec8 and scalar taken, the decode-only suite
    fails it naming both dequant paths;
  - :func:`bits_problems` - every read-out case regenerated from its seed: the CPU reference's
    hashes equal the committed ones and ONNX Runtime's;
  - :func:`timing_problems` - every timed row has ONNX Runtime and a copy, warm and cold, and
    byte counts that match its shape and its (replayed) path.

* **what the run's model computed**: the recorded path names, predictions, findings, crossover
  summary, kernel kinds, coverage documents and their reports, the suites' verdicts.
  :func:`recorded_problems` checks them against today's model and the recomputation above, but
  only for a file the run wrote under today's model (its provenance names the model's
  fingerprint). :func:`awaiting_rerun` says, for a file written before the two-GEMV model (no
  fingerprint recorded, or the pre-fix fingerprint :data:`PRE_FIX_FINGERPRINT`), exactly what
  is not checked and which command rewrites it; any other fingerprint is a problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nvfp4_harness.model import DeviceCaps, DispatchEvent
from nvfp4_harness.nvfp4.onnxruntime.model import (
    DEFAULT_POLICY,
    DEQUANT_PATHS,
    GEMV_LIMITS,
    GEMV_PATHS,
    MODEL,
    OrtPolicy,
    OrtProblem,
)

PREFIX = "onnxruntime"
FILES = ("crossover", "suites", "probes", "bits", "timing")
COVERAGE_PARTS = ("coverage-full", "coverage-decode")
#: the parts holding something the run's model computed (:func:`recorded_problems`)
RECORDED_PARTS = FILES + COVERAGE_PARTS
PROVENANCE_KEYS = ("gpu", "driver", "cuda", "torch", "onnxruntime", "date", "command")
#: the fingerprint of the model before the two-GEMV fix (one ``gemv`` path, M <= 32, K % 32 == 0):
#: the first H200 run's coverage documents were written under it
PRE_FIX_FINGERPRINT = "6cfa45b60e442bff"
#: the command that rewrites every file from a GPU
RERUN = "python -m nvfp4_harness onnxruntime --out fixtures/gpu"

#: what the run's model computed in each part, which a pre-fix file holds in the old model's terms
_COMPUTED = {
    "crossover": "recorded paths and its threshold summary (one threshold, `thresholds_agree`)",
    "suites": "recorded paths, predictions and findings, its policy and the all-reachable verdicts",
    "probes": "recorded paths, predictions and findings",
    "bits": "recorded paths and predictions (its bit comparisons do not depend on the model: bits_problems "
            "checks them)",
    "timing": "recorded paths and kernel kinds (`by_kind` counts the tensor-core GEMV as `gemv`; the times "
              "themselves do not depend on the model: timing_problems checks them)",
    "coverage-full": "coverage counts under the old declaration, and the term and markdown reports of them",
    "coverage-decode": "coverage counts under the old declaration, and the term and markdown reports of them",
}


def path(folder: Path, part: str, suffix: str = ".json") -> Path:
    return Path(folder) / f"{PREFIX}-{part}{suffix}"


def load(folder: Path, part: str) -> dict[str, Any]:
    return json.loads(path(folder, part).read_text(encoding="utf-8"))


def missing(folder: Path) -> list[str]:
    """The result files not in ``folder``."""
    wanted = [path(folder, p) for p in FILES]
    wanted += [path(folder, c, x) for c in COVERAGE_PARTS for x in (".json", ".term.txt", ".md")]
    return [p.name for p in wanted if not p.is_file()]


def device_of(label: str) -> DeviceCaps:
    """The device a recorded call ran on, as its guards see it, from its label
    (``NVIDIA H200 (sm_90, GPU 0)``, ``... (sm_90)`` or ``cpu``)."""
    if "(sm_" not in label:
        return DeviceCaps.cpu()
    name, _, rest = label.partition(" (sm_")
    fields = [f.strip() for f in rest.rstrip(")").split(",")]
    digits = fields[0]
    index = int(fields[1].removeprefix("GPU ").strip()) if len(fields) > 1 and fields[1].startswith("GPU") else None
    return DeviceCaps(name, (int(digits[:-1]), int(digits[-1])), index=index)


def provenance_problems(folder: Path) -> list[str]:
    problems = []
    for part in FILES:
        if not path(folder, part).is_file():
            continue
        prov = load(folder, part).get("provenance") or {}
        lacking = [k for k in PROVENANCE_KEYS if not prov.get(k)]
        if lacking:
            problems.append(f"{path(folder, part).name}: provenance lacks {', '.join(lacking)}")
    return problems


# --- which model wrote a file -------------------------------------------------------------------


def written_under(folder: Path, part: str) -> str | None:
    """The fingerprint of the model the file was written under (None: the file names none)."""
    if part in COVERAGE_PARTS:
        from nvfp4_harness.engine.data import CoverageData

        op = CoverageData.read(path(folder, part)).operators.get(MODEL.name)
        return op.fingerprint if op is not None else None
    return (load(folder, part).get("provenance") or {}).get("model_fingerprint")


def awaiting_rerun(folder: Path, part: str) -> str | None:
    """Why what the run's model computed in ``part`` is not checked (None: it is): the file was
    written before the two-GEMV model, and says so by recording no model fingerprint or the
    pre-fix one."""
    fingerprint = written_under(folder, part)
    if fingerprint not in (None, PRE_FIX_FINGERPRINT):
        return None
    source = path(folder, part if part in FILES else "suites")
    prov = (json.loads(source.read_text(encoding="utf-8")).get("provenance") or {}) if source.is_file() else {}
    run = f"the GPU run of {prov.get('date', '?')} (git {str(prov.get('git_commit', '?'))[:12]})"
    evidence = ("it records no model fingerprint, which runs record since the fix" if fingerprint is None
                else f"its coverage data carries that model's fingerprint {PRE_FIX_FINGERPRINT}")
    return (f"awaiting the GPU re-run: {path(folder, part).name} was written by {run} under the model before the "
            f"two-GEMV fix (one `gemv` path for M <= 32, which that run proved wrong; {evidence}). Its "
            f"{_COMPUTED[part]} are that model's, so they are not checked against today's model (fingerprint "
            f"{MODEL.fingerprint}) until `{RERUN}` rewrites the file on a GPU. What ONNX Runtime did in that run "
            "(kernel names, bits, times) is re-judged by today's model meanwhile: replay_problems, "
            "crossover_problems, coverage_problems, bits_problems, timing_problems.")


# --- the recorded calls, re-judged by today's model ----------------------------------------------


def recorded_policy(doc: dict[str, Any]) -> OrtPolicy:
    """The policy a file says its calls were predicted under (the declared one when it names none)."""
    recorded = doc.get("policy")
    return OrtPolicy.from_dict(recorded) if isinstance(recorded, dict) and "gemv_mma_max_m" in recorded \
        else DEFAULT_POLICY


def recorded_calls(folder: Path, parts: tuple[str, ...] = FILES) -> list[tuple[str, OrtProblem, dict[str, Any]]]:
    """(where, problem, record) of every observed call in the files (a call that raised, and so
    launched nothing the profiler saw, has no kernel list and is left out)."""
    calls: list[tuple[str, OrtProblem, dict[str, Any]]] = []
    for part, key in (("suites", "calls"), ("probes", "probes")):
        if part in parts and path(folder, part).is_file():
            for r in load(folder, part).get(key, []):
                if "kernels" in r:
                    calls.append((f"{part}:{r['id']}", OrtProblem(r["m"], r["n"], r["k"], r["block_size"], r["dtype"],
                                                                  bool(r["bias"])), r))
    if "crossover" in parts and path(folder, "crossover").is_file():
        for s in load(folder, "crossover").get("crossover", {}).get("searches", []):
            for r in s["calls"]:
                if "kernels" in r:
                    calls.append((f"crossover:{s['name']}:M={r['m']}",
                                  OrtProblem(r["m"], s["n"], s["k"], s["block_size"], s["dtype"]), r))
    if "timing" in parts and path(folder, "timing").is_file():
        for r in load(folder, "timing").get("rows", []):
            rec = r.get("onnxruntime_path") or {}
            if "kernels" in rec:
                calls.append((f"timing:{r['N']}x{r['K']}:M={r['M']}:bs{r['block_size']}",
                              OrtProblem(r["M"], r["N"], r["K"], r["block_size"], r["dtype"]), rec))
    if "bits" in parts and path(folder, "bits").is_file():
        doc = load(folder, "bits")
        for r in doc.get("cases", []):
            if "kernels" in r:  # the first run's read-out records name no device: the file's GPU ran them
                calls.append((f"bits:{r['id']}", OrtProblem(r["readout_m"], r["n"], r["k"], r["block_size"],
                                                            r["dtype"]), {"device": _run_device(doc), **r}))
    return calls


def _run_device(doc: dict[str, Any]) -> str:
    """The label of the GPU a file's provenance names (``NVIDIA H200 (sm_90)``), or ``cpu``."""
    prov = doc.get("provenance") or {}
    cc = str(prov.get("compute_capability", ""))
    if not prov.get("gpu") or "." not in cc:
        return "cpu"
    major, minor = cc.split(".", 1)
    return DeviceCaps(str(prov["gpu"]), (int(major), int(minor))).label


def rejudge(record: dict[str, Any], problem: OrtProblem, policy: OrtPolicy = DEFAULT_POLICY) -> DispatchEvent:
    """The event today's model makes of a recorded call: its kernel names on its device."""
    from nvfp4_harness.nvfp4.onnxruntime.observing import event_for

    return event_for(record["kernels"], problem, device=device_of(record.get("device", "")), policy=policy)


def replay_problems(folder: Path) -> list[str]:
    """Every recorded call, re-judged by today's model under the declared policy: its kernels
    show a declared path (or the expected shortcut), and the model predicted that path."""
    problems = []
    calls = recorded_calls(folder)
    if not calls:
        problems.append("no recorded call to replay")
    for where, problem, record in calls:
        event = rejudge(record, problem)
        if event.path is None:
            problems.append(f"{where}: no declared path matches the recorded kernels {record['kernels'][:3]}")
        if event.finding:
            problems.append(f"{where}: {event.finding}")
    return problems


def crossover_searches(folder: Path) -> list[dict[str, Any]]:
    """The crossover searches with each M's path re-judged by today's model from its kernels
    (an M whose call raised keeps no path)."""
    doc = load(folder, "crossover").get("crossover", {})
    out = []
    for s in doc.get("searches", []):
        paths: dict[str, str | None] = {}
        for r in s["calls"]:
            problem = OrtProblem(r["m"], s["n"], s["k"], s["block_size"], s["dtype"])
            paths[str(r["m"])] = rejudge(r, problem).path if "kernels" in r else None
        device = next((device_of(r["device"]) for r in s["calls"] if r.get("device")), DeviceCaps.cpu())
        out.append({**{k: s[k] for k in ("name", "n", "k", "block_size", "dtype")}, "paths": paths,
                    "device": device})
    return out


def recomputed_crossover(folder: Path) -> dict[str, Any]:
    """:func:`~.cases.crossover_summary` of the searches' traces, judged by today's model."""
    from nvfp4_harness.nvfp4.onnxruntime.cases import crossover_summary

    searches = crossover_searches(folder)
    device = searches[0]["device"] if searches else None
    return crossover_summary(searches, DEFAULT_POLICY, device)


def crossover_problems(folder: Path) -> list[str]:
    """Each search, recomputed from its traces, saw the GEMV the model declares for its shape
    stop at the declared M; both GEMV kernels' limits were measured."""
    from nvfp4_harness.nvfp4.onnxruntime.run import crossover_problems as verdict_of_crossover

    summary = recomputed_crossover(folder)
    problems = verdict_of_crossover(summary)
    seen = {s["observed"]["gemv_path"] for s in summary["searches"]}
    for gemv in GEMV_PATHS:
        if gemv not in seen:
            problems.append(f"no crossover search saw {gemv}: its limit ({GEMV_LIMITS[gemv]}) was not measured")
    return problems


def suite_coverage(folder: Path, policy: OrtPolicy | None = None) -> dict[str, Any]:
    """The suites' coverage data, rebuilt from their recorded kernel names with today's model
    exactly as the run builds it from its live events (same tests, same labels), under
    ``policy`` (default: the one ``onnxruntime-suites.json`` records, else the declared one)."""
    from nvfp4_harness.nvfp4.onnxruntime.observing import SUITE_LABELS, coverage_of, suite_test

    doc = load(folder, "suites")
    policy = policy or recorded_policy(doc)
    decode_ids = set(doc["decode"]["cases"])
    events = [(rejudge(r, problem, policy), suite_test(r)) for _, problem, r in recorded_calls(folder, ("suites",))]
    return {"full": coverage_of([(e, t) for e, t in events if t.startswith("full::")], SUITE_LABELS["full"]),
            "decode": coverage_of([(e, t) for e, t in events if t.split("::", 1)[1] in decode_ids],
                                  SUITE_LABELS["decode"])}


def coverage_problems(folder: Path) -> list[str]:
    """The suites' coverage, recomputed from their traces under the declared policy: the full
    suite meets ``all-reachable`` with every path reachable on the device taken, the decode-only
    suite fails it naming both dequant paths and takes both GEMVs."""
    from nvfp4_harness.nvfp4.onnxruntime.observing import verdict_of

    problems = []
    data = suite_coverage(folder, DEFAULT_POLICY)
    full = data["full"].analyze().operator(MODEL.name)
    for p in (*GEMV_PATHS, *DEQUANT_PATHS):
        if not full.path(p).hits:
            problems.append(f"full suite: path {p} was never observed")
    problems += [f"full suite: {f}" for f in verdict_of(data["full"])["failures"]]
    if full.path("native_sm120").reachable:
        problems.append("full suite: native_sm120 is reachable on the recorded device")
    decode = verdict_of(data["decode"])
    for p in DEQUANT_PATHS:
        if not any(f"required path {MODEL.name}:{p} was never taken" in f for f in decode["failures"]):
            problems.append(f"decode-only suite: all-reachable does not fail naming {p}")
    decode_paths = data["decode"].analyze().operator(MODEL.name)
    for p in GEMV_PATHS:
        if not decode_paths.path(p).hits:
            problems.append(f"decode-only suite: {p} was never taken")
    for p in DEQUANT_PATHS:
        if decode_paths.path(p).hits:
            problems.append(f"decode-only suite: {p} was taken (a decode call dequantized)")
    return problems


# --- what the model computed, in a file written under today's model -------------------------------


def _counts(data: Any) -> dict[str, Any]:
    """A coverage document without the declaration snapshot (source lines move; the fingerprint
    says the declarations are the same)."""
    doc = data.to_dict(summary=False)
    for op in doc["operators"].values():
        op.pop("model", None)
    return doc


def recorded_problems(folder: Path, part: str) -> list[str]:
    """What the run's model computed in ``part``, checked against today's model and against the
    recomputation from the traces (for a file written under today's model; see
    :func:`awaiting_rerun` for a pre-fix file)."""
    fingerprint = written_under(folder, part)
    if fingerprint != MODEL.fingerprint:
        return [f"{path(folder, part).name} was written under model fingerprint {fingerprint}, today's model is "
                f"{MODEL.fingerprint}: the declarations changed since the run; re-run `{RERUN}` on a GPU"]
    if part in COVERAGE_PARTS:
        return _coverage_recorded(folder, part.removeprefix("coverage-"))
    problems = []
    doc = load(folder, part)
    policy = DEFAULT_POLICY if part == "crossover" else recorded_policy(doc)
    for where, problem, record in recorded_calls(folder, (part,)):
        event = rejudge(record, problem, policy)
        for key, today in (("path", event.path), ("predicted", event.predicted), ("finding", event.finding)):
            if record.get(key) != today:
                problems.append(f"{where}: {key} {record.get(key)!r} recorded, {today!r} from its kernels today")
    if part == "crossover":
        problems += _crossover_recorded(folder)
    elif part == "timing":
        problems += _timing_recorded(doc, policy)
    elif part == "suites":
        problems += _suites_recorded(folder, doc)
    return problems


def _crossover_recorded(folder: Path) -> list[str]:
    stored = load(folder, "crossover").get("crossover", {})
    today = recomputed_crossover(folder)
    problems = [f"crossover: {key} is {stored.get(key)!r} in the file, {today[key]!r} from its traces"
                for key in ("declared_policy", "observed_policy", "conflicts", "as_declared")
                if stored.get(key) != today[key]]
    if len(stored.get("searches", [])) != len(today["searches"]):
        problems.append("crossover: the file summarizes another number of searches than it records")
    for s, t in zip(stored.get("searches", []), today["searches"], strict=False):
        for key in ("observed", "declared", "as_declared", "calls_not_as_declared"):
            if s.get(key) != t[key]:
                problems.append(f"crossover {s['name']}: {key} is {s.get(key)!r} in the file, {t[key]!r} from "
                                "its traces")
    return problems


def _timing_recorded(doc: dict[str, Any], policy: OrtPolicy) -> list[str]:
    from nvfp4_harness.nvfp4.onnxruntime.timing import PATH_KINDS

    problems = []
    for r in doc.get("rows", []):
        rec = r.get("onnxruntime_path") or {}
        if "kernels" not in rec or "warm" not in (r.get("onnxruntime") or {}):
            continue
        event = rejudge(rec, OrtProblem(r["M"], r["N"], r["K"], r["block_size"], r["dtype"]), policy)
        kinds = {k for k, v in r["onnxruntime"]["warm"]["by_kind"].items() if v > 0}
        want = PATH_KINDS.get(event.path or "", "")
        path_kinds = kinds & set(PATH_KINDS.values())
        if path_kinds != {want}:
            problems.append(f"timing {r['N']}x{r['K']} M={r['M']}: kernel kinds {sorted(path_kinds)} timed, the "
                            f"path {event.path!r} launches {want!r}")
    return problems


def _suites_recorded(folder: Path, doc: dict[str, Any]) -> list[str]:
    from nvfp4_harness.nvfp4.onnxruntime.observing import verdict_of

    problems = []
    if "gemv_mma_max_m" not in (doc.get("policy") or {}):
        problems.append(f"onnxruntime-suites.json: the policy {doc.get('policy')!r} is not one of the two-GEMV model")
    rebuilt = suite_coverage(folder)
    for suite in ("full", "decode"):
        if doc[suite]["requirement"] != verdict_of(rebuilt[suite]):
            problems.append(f"onnxruntime-suites.json: the {suite} verdict is not that of its calls' kernels")
    return problems


def _coverage_recorded(folder: Path, suite: str) -> list[str]:
    from nvfp4_harness.engine.data import CoverageData
    from nvfp4_harness.engine.reports import RENDERERS

    problems = []
    data = CoverageData.read(path(folder, f"coverage-{suite}"))
    rebuilt = suite_coverage(folder)[suite]
    if _counts(data) != _counts(rebuilt):
        problems.append(f"coverage-{suite}.json does not hold the counts of the suite's recorded kernel names "
                        "judged by today's model")
    for kind, suffix in (("term", ".term.txt"), ("markdown", ".md")):
        committed = path(folder, f"coverage-{suite}", suffix).read_text(encoding="utf-8")
        if RENDERERS[kind](data) != committed:
            problems.append(f"coverage-{suite}{suffix} is not the {kind} report of coverage-{suite}.json")
    return problems


# --- the model-free parts ---------------------------------------------------------------------------


def bits_problems(folder: Path) -> list[str]:
    from nvfp4_harness.nvfp4.onnxruntime.readout import ReadoutCase, expected

    doc = load(folder, "bits")
    problems = []
    if not doc.get("cases"):
        problems.append("no read-out case recorded")
    fields = ("id", "n", "k", "block_size", "dtype", "g", "seed", "nan_row")
    for r in doc.get("cases", []):
        case = ReadoutCase(**{f: r[f] for f in fields})
        want = expected(case)
        for key in ("contract_sha256", "reference_sha256", "reference_negated_sha256", "negative_zeros", "nan_rows"):
            if r.get(key) != want[key]:
                problems.append(f"{case.id}: {key} is {r.get(key)!r} in the file, {want[key]!r} from the seed")
        if r.get("ort_sha256") != want["reference_sha256"] or r.get("equal") is not True:
            problems.append(f"{case.id}: ONNX Runtime's read-out differs from the reference "
                            f"({r.get('difference', 'hash differs')})")
        if r.get("ort_negated_sha256") != want["reference_negated_sha256"] or r.get("negated_equal") is not True:
            problems.append(f"{case.id}: the A = -I read-out differs ({r.get('negated_difference', 'hash differs')})")
        if r.get("nan_rows") and r.get("nan_rows_read_all_nan") is not True:
            problems.append(f"{case.id}: the NaN row did not read as all NaN")
        if "kernels" in r:
            problem = OrtProblem(r["readout_m"], r["n"], r["k"], r["block_size"], r["dtype"])
            taken = rejudge(r, problem).path
            if taken not in DEQUANT_PATHS:
                problems.append(f"{case.id}: the read-out call's kernels show {taken!r}, not a dequant path")
    return problems


def timing_problems(folder: Path) -> list[str]:
    from nvfp4_harness.nvfp4.bench_metrics import dequant_bytes, gemv_bytes, prefill_bytes

    doc = load(folder, "timing")
    problems = []
    if not doc.get("rows"):
        problems.append("no timed row")
    for r in doc.get("rows", []):
        where = f"{r['section']} {r['N']}x{r['K']} M={r['M']}"
        for who in ("onnxruntime", "copy_op"):
            for mode in ("warm", "cold"):
                stats = (r.get(who) or {}).get(mode, {}).get("total", {})
                if not stats.get("median_us", 0) > 0:
                    problems.append(f"{where}: no {mode} time for {who}")
        ours = r.get("ours") or {}
        if not ("warm" in ours or "skipped" in ours or "error" in ours):
            problems.append(f"{where}: this project's kernels neither timed nor said why not")
        rec = r.get("onnxruntime_path") or {}
        problem = OrtProblem(r["M"], r["N"], r["K"], r["block_size"], r["dtype"])
        taken = rejudge(rec, problem).path if "kernels" in rec else rec.get("path")
        want = (gemv_bytes(r["M"], r["N"], r["K"], r["dtype"]) if taken in GEMV_PATHS
                else prefill_bytes(r["M"], r["N"], r["K"], r["block_size"], r["dtype"]))
        if r["bytes"]["op"] != want:
            problems.append(f"{where}: {r['bytes']['op']} op bytes recorded, {want} for its shape and path {taken!r}")
        if taken not in GEMV_PATHS and r["bytes"].get("dequant") != dequant_bytes(r["N"], r["K"], r["block_size"],
                                                                                 r["dtype"]):
            problems.append(f"{where}: dequant bytes do not match the shape")
    return problems + eager_loop_problems(doc.get("eager_loop"))


def eager_loop_problems(loop: dict[str, Any] | None) -> list[str]:
    """The eager-loop comparison (absent in files written before it existed): every decode
    shape of :data:`~.cases.EAGER_LOOP_SHAPES` once, each contender's median inside its loops'
    range and positive, this project's times there or the reason in the timing file."""
    from nvfp4_harness.nvfp4.onnxruntime.cases import EAGER_LOOP_SHAPES

    if loop is None:
        return []
    rows = loop.get("rows") or []
    problems = []
    shapes = [(r.get("M"), r.get("N"), r.get("K")) for r in rows]
    if sorted(shapes) != sorted(EAGER_LOOP_SHAPES):
        problems.append(f"eager loop: shapes {shapes}, expected {list(EAGER_LOOP_SHAPES)}")
    for r in rows:
        for who in ("onnxruntime", "ours"):
            if f"{who}_us" not in r:
                if who == "onnxruntime":
                    problems.append(f"eager loop M={r.get('M')} {r.get('N')}x{r.get('K')}: no ONNX Runtime time")
                continue
            lo, hi = r.get(f"{who}_range_us", [None, None])
            if not (isinstance(lo, (int, float)) and 0 < lo <= r[f"{who}_us"] <= hi):
                problems.append(f"eager loop M={r.get('M')} {r.get('N')}x{r.get('K')}: {who}'s median "
                                f"{r[f'{who}_us']} is not a positive time inside its range {[lo, hi]}")
    return problems
