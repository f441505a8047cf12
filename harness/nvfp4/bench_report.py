"""``python -m nvfp4_harness bench-report RESULTS.json``: BENCHMARKS.md and its plot from a bench run.

The markdown is a pure function of the results JSON (no clock, no paths of this machine), so
CI can regenerate it and prove the committed file matches the committed data. The targets of
the issue are evaluated here from the rows, never typed in: a missed target shows as FAIL.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nvfp4_harness.nvfp4 import host_time
from nvfp4_harness.nvfp4.bench_metrics import (
    DEFAULT_OUT,
    LARGE_SHAPES,
    REPO_ROOT,
    SEED_M,
    SEED_SHAPES,
    SWEEP_SHAPE,
    anchor_for,
    find_row,
    fraction_of_copy,
    speedup_vs_scalar,
    tb_per_s,
)

DEFAULT_MD = REPO_ROOT / "BENCHMARKS.md"
DEFAULT_PNG = REPO_ROOT / "benchmarks" / "bandwidth.png"
DEFAULT_PNG_LINK = "benchmarks/bandwidth.png"

VEC8_COPY_LARGE = 0.90
VEC8_COPY_SEED = 0.80
VEC8_VS_SCALAR = 3.8
GEMV_COPY = 0.80
GEMV_M8_OVER_M1 = 1.3
LABELS = {"dequant_scalar": "scalar", "dequant_vec8": "vec8", "torch_compile_dequant": "torch.compile LUT",
          "gemv": "GEMV", "cublas_bf16": "cuBLAS bf16", "prefill": "prefill (vec8 + cuBLAS)", "copy": "copy"}


# --- loading --------------------------------------------------------------------------------------


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a results JSON written by ``python -m nvfp4_harness bench``."""
    with open(path, encoding="utf-8") as fh:
        results = json.load(fh)
    if not isinstance(results, dict) or "provenance" not in results or "rows" not in results:
        raise ValueError(f"{path}: not a bench results file (needs 'provenance' and 'rows')")
    return results


def run_order_key(path: Path, results: dict[str, Any]) -> tuple[str, str, str]:
    """Sort key of a results file, larger for a newer run: its day, then the time it started
    (runs since 2026-12-05 record it; a day's second run is named ``<day>-<commit>.json``, which
    sorts before the day's first file by name), then the file name."""
    prov = results["provenance"]
    return str(prov.get("date", "")), str(prov.get("started") or ""), path.name


def newest_results(directory: str | Path = DEFAULT_OUT, needs: str = "rows") -> Path | None:
    """The results file of the newest run (:func:`run_order_key`) among those whose ``needs``
    part (``rows``: kernel timings; ``host``: host time per call) is not empty."""
    loaded = [(p, load_results(p)) for p in sorted(Path(directory).glob("*.json"))]
    runs = [(p, results) for p, results in loaded if results.get(needs)]
    if not runs:
        return None
    return max(runs, key=lambda run: run_order_key(*run))[0]


def render_benchmarks(source: Path, png_link: str = DEFAULT_PNG_LINK) -> str:
    """BENCHMARKS.md for the kernel results ``source``, with the newest host-time run of its
    folder and the newest multi-GPU run beside it (each section names the run it comes from)."""
    from nvfp4_harness.nvfp4 import multi_gpu

    results = load_results(source)
    host_path = source if results.get("host") else newest_results(source.parent, needs="host")
    host = (host_path.name, load_results(host_path)) if host_path is not None else None
    found = multi_gpu.newest()
    ort_path = REPO_ROOT / ORT_TIMING
    ort = None
    if ort_path.is_file():
        from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md

        ort = benchmarks_md.load(ort_path)
    return render_markdown(results, source.name, png_link, (found[0].name, found[1]) if found else None, host, ort)


#: the committed ONNX Runtime timing file (python -m nvfp4_harness onnxruntime) whose section
#: BENCHMARKS.md carries
ORT_TIMING = "fixtures/gpu/onnxruntime-timing.json"


# --- targets --------------------------------------------------------------------------------------


def _target(name: str, measured: float | None, threshold: str, passed: bool | None, shown: str) -> dict[str, Any]:
    status = "not measured" if measured is None else ("pass" if passed else "FAIL")
    return {"target": name, "measured": measured, "shown": shown if measured is not None else "-",
            "threshold": threshold, "status": status}


def _gemv_row(rows: Sequence[dict[str, Any]], n: int, k: int, m: int) -> dict[str, Any] | None:
    return find_row(rows, "gemv", n, k, m, section="gemv")


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, each computed from the rows: pass, FAIL or not measured."""
    rows = results["rows"]
    out = []
    for (n, k), floor in [(LARGE_SHAPES[0], VEC8_COPY_LARGE)] + [(s, VEC8_COPY_SEED) for s in SEED_SHAPES]:
        row = find_row(rows, "dequant_vec8", n, k, section="dequant")
        frac = fraction_of_copy(row) if row else None
        out.append(_target(f"vec8 dequant >= {floor:.0%} of copy on {n} x {k}", frac, f">= {floor:.0%}",
                           frac is not None and frac >= floor, f"{frac:.1%}" if frac is not None else ""))
    for n, k in SEED_SHAPES:
        row = find_row(rows, "dequant_vec8", n, k, section="dequant")
        speedup = speedup_vs_scalar(row, rows) if row else None
        out.append(_target(f"vec8 >= {VEC8_VS_SCALAR}x scalar on {n} x {k}", speedup, f">= {VEC8_VS_SCALAR}x",
                           speedup is not None and speedup >= VEC8_VS_SCALAR,
                           f"{speedup:.2f}x" if speedup is not None else ""))
    for n, k in LARGE_SHAPES:
        row = _gemv_row(rows, n, k, 1)
        frac = fraction_of_copy(row) if row else None
        out.append(_target(f"GEMV M=1 >= {GEMV_COPY:.0%} of copy on {n} x {k}", frac, f">= {GEMV_COPY:.0%}",
                           frac is not None and frac >= GEMV_COPY, f"{frac:.1%}" if frac is not None else ""))
    for n, k in LARGE_SHAPES:
        one, eight = _gemv_row(rows, n, k, 1), _gemv_row(rows, n, k, 8)
        ratio = eight["median_us"] / one["median_us"] if one and eight else None
        out.append(_target(f"GEMV M=8 <= {GEMV_M8_OVER_M1}x its M=1 time on {n} x {k}", ratio,
                           f"<= {GEMV_M8_OVER_M1}x", ratio is not None and ratio <= GEMV_M8_OVER_M1,
                           f"{ratio:.2f}x" if ratio is not None else ""))
    out += _path_targets(results)
    if results.get("path_choice"):
        # the GEMV-against-prefill crossover of section "sweep" is superseded by the choice among
        # every path (section "paths"), which sets gemv_max_m since the fused path exists
        return out
    cross = results.get("crossover")
    if cross and cross.get("points"):
        rec, cur = cross["gemv_max_m_recommended"], cross["current_policy_gemv_max_m"]
        out.append(_target("policy gemv_max_m equals the measured crossover", float(rec),
                           f"Policy().gemv_max_m = {cur}", rec == cur, f"recommended {rec}"))
    else:
        out.append(_target("policy gemv_max_m equals the measured crossover", None, "measured sweep", None, ""))
    return out


#: issue #10's targets for the path the dispatcher picks at each M (section "paths"):
#: (M, "copy" = fraction of the same-run copy of the row's bytes, or "cublas" = time over cuBLAS bf16)
PATH_TARGETS: tuple[tuple[int, str, float], ...] = ((1, "copy", 0.80), (16, "copy", 0.70), (64, "cublas", 0.5),
                                                    (256, "cublas", 1.3))


#: a fused path's bench kernel -> (the kernel's row on the weights registered for it, the layout)
REGISTERED_KERNELS: dict[str, tuple[str, str]] = {"fused_mma": ("fused_mma_tiled", "tile-contiguous"),
                                                  "fused_wgmma": ("fused_wgmma_tiled", "tile-contiguous")}


def chosen_path_row(rows: Sequence[dict[str, Any]], n: int, k: int, m: int, gemv_max_m: int,
                    fused_max_m: int, wgmma_max_m: int | None = None,
                    wgmma_min_m: int | None = None) -> dict[str, Any] | None:
    """The "paths" row of the path the default policy takes at M on the run's GPU: the GEMV,
    then fused_wgmma in [wgmma_min_m, wgmma_max_m] where the run timed it (a run of a policy
    without ``wgmma_min_m`` had it after fused_mma, so above ``fused_max_m``), then fused_mma,
    then prefill."""
    timed_wgmma = wgmma_max_m is not None and find_row(rows, "fused_wgmma", n, k, m, section="paths") is not None
    if m <= gemv_max_m:
        kernel = "gemv"
    elif timed_wgmma and wgmma_min_m is not None and wgmma_min_m <= m <= wgmma_max_m:
        kernel = "fused_wgmma"
    elif m <= fused_max_m:
        kernel = "fused_mma"
    elif timed_wgmma and wgmma_min_m is None and m <= wgmma_max_m:
        kernel = "fused_wgmma"
    else:
        kernel = "prefill"
    return find_row(rows, kernel, n, k, m, section="paths")


def _chosen(rows: Sequence[dict[str, Any]], choice: dict[str, Any], n: int, k: int, m: int) -> dict[str, Any] | None:
    return chosen_path_row(rows, n, k, m, choice["policy_gemv_max_m"], choice["policy_fused_max_m"],
                           choice.get("policy_wgmma_max_m"), choice.get("policy_wgmma_min_m"))


def _path_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    choice = results.get("path_choice")
    rows = results["rows"]
    out = []
    for n, k in LARGE_SHAPES:
        for m, kind, limit in PATH_TARGETS:
            row = _chosen(rows, choice, n, k, m) if choice else None
            # where the policy takes a fused path, also with the weights registered
            # (nvfp4_kernels.layout.register): the same path and bits from the path's own layout
            registered = REGISTERED_KERNELS.get(row["kernel"]) if row else None
            tiled = find_row(rows, registered[0], n, k, m, section="paths") if registered else None
            candidates = [(row, "")] + ([(tiled, f", {registered[1]} weights")] if tiled else [])
            for candidate, label in candidates:
                if kind == "copy":
                    value = fraction_of_copy(candidate) if candidate else None
                    out.append(_target(f"chosen path at M={m} >= {limit:.0%} of copy on {n} x {k}{label}", value,
                                       f">= {limit:.0%}", value is not None and value >= limit,
                                       f"{value:.1%} ({candidate['kernel']})" if candidate else ""))
                else:
                    cublas = find_row(rows, "cublas_bf16", n, k, m, section="paths")
                    value = candidate["median_us"] / cublas["median_us"] if candidate and cublas else None
                    out.append(_target(f"chosen path at M={m} <= {limit}x cuBLAS bf16 on {n} x {k}{label}", value,
                                       f"<= {limit}x", value is not None and value <= limit,
                                       f"{value:.2f}x ({candidate['kernel']})" if value is not None else ""))
    if choice:
        names = ("gemv", "fused") + (("wgmma",) if "policy_wgmma_max_m" in choice else ())
        keys = [f"{x}_max_m" for x in names] + (["wgmma_min_m"] if "policy_wgmma_min_m" in choice else [])
        policy = ", ".join(str(choice[f"policy_{key}"]) for key in keys)
        measured = ", ".join(str(choice[f"{key}_recommended"]) for key in keys)
        title = "policy " + (" and ".join(keys) if len(keys) == 2 else ", ".join(keys[:-1]) + " and " + keys[-1])
        out.append(_target(f"{title} equal the measured crossovers", float(choice["fused_max_m_recommended"]),
                           f"Policy() = ({policy})", choice["policy_matches"], f"measured ({measured})"))
    else:
        out.append(_target("policy gemv_max_m and fused_max_m equal the measured crossovers", None,
                           "section paths", None, ""))
    return out


#: the kernels of the paths table's time columns, in order
_PATHS_COLUMNS = ("gemv", "fused_mma", "fused_mma_tiled", "fused_wgmma", "fused_wgmma_tiled", "prefill",
                  "cublas_bf16")


def _paths_lines(results: dict[str, Any]) -> list[str]:
    """Per shape and M: every eligible path's time, cuBLAS bf16 and the copy of the weights."""
    choice = results.get("path_choice")
    if not choice:
        return ["Not measured in this run (section `paths`)."]
    rows = _rows(results, "paths")
    lines = [f"**Choice:** {choice['summary']}.", ""]
    for n, k in (tuple(s) for s in choice["shapes"]):
        body = []
        for m in sorted({r["M"] for r in rows if (r["N"], r["K"]) == (n, k)}):
            cells = {kern: find_row(rows, kern, n, k, m) for kern in _PATHS_COLUMNS}
            fastest = choice["fastest"].get(f"{n}x{k}", {}).get(str(m), choice["fastest"].get(f"{n}x{k}", {}).get(m))
            chosen = _chosen(rows, choice, n, k, m)
            fused = cells["fused_mma"]
            body.append([m] + [_us(cells[c]["median_us"]) if cells[c] else "-" for c in _PATHS_COLUMNS]
                        + [str(fused.get("splits", "-")) if fused else "-",
                           f"{fraction_of_copy(chosen):.0%}" if chosen else "-",
                           f"{chosen['median_us'] / cells['cublas_bf16']['median_us']:.2f}x"
                           if chosen and cells["cublas_bf16"] else "-",
                           fastest or "-", chosen["kernel"] if chosen else "-"])
        lines += [f"{n} x {k}:", ""]
        lines += _table(["M", "gemv us", "fused_mma us", "fused_mma tiled us", "fused_wgmma us",
                         "fused_wgmma tiled us", "prefill us", "cuBLAS bf16 us", "fused splits",
                         "chosen: % of copy", "chosen / cuBLAS", "fastest", "policy takes"], body)
        lines.append("")
    return lines


# --- formatting helpers -----------------------------------------------------------------------------


def _us(x: float) -> str:
    return f"{x:.1f}" if x >= 100 else f"{x:.2f}"


def _shape(row: dict[str, Any]) -> str:
    return f"{row['N']} x {row['K']}"


def _anchor_text(row: dict[str, Any]) -> str:
    anchor = anchor_for(row)
    if not anchor:
        return ""
    us, what = anchor
    return f"{us / row['median_us']:.2f}x vs {what} ({us} us)"


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in line) + " |" for line in body]
    return lines


def _rows(results: dict[str, Any], section: str, kernel: str | None = None) -> list[dict[str, Any]]:
    return [r for r in results["rows"] if r.get("section") == section and r["kernel"] != "copy"
            and (kernel is None or r["kernel"] == kernel)]


def _bw(row: dict[str, Any]) -> str:
    return f"{tb_per_s(row['bytes'], row['median_us']):.2f}"


def _pct(row: dict[str, Any]) -> str:
    return f"{fraction_of_copy(row):.1%}"


def _tflops(row: dict[str, Any] | None) -> str:
    return f"{row['flops'] / row['median_us'] / 1e6:.0f}" if row and row.get("flops") else "-"


# --- markdown -----------------------------------------------------------------------------------------


def _provenance_lines(prov: dict[str, Any]) -> list[str]:
    keys = [("gpu", "GPU"), ("compute_capability", "compute capability"), ("sm_count", "SMs"),
            ("memory_gib", "memory (GiB)"), ("l2_mib", "L2 (MiB)"), ("driver", "driver"), ("cuda", "CUDA (torch)"),
            ("torch", "torch"), ("cublas", "cuBLAS"), ("python", "python"), ("date", "date (UTC)"),
            ("git_commit", "git commit"), ("command", "command"), ("backend", "CUDA backend"),
            ("reps", "timed repetitions per row"), ("warmup", "warm-up calls"), ("wall_s", "wall time (s)")]
    return _table(["", ""], [[label, f"`{prov.get(key, '-')}`" if key == "command" else str(prov.get(key, "-"))]
                             for key, label in keys])


def _method_lines(prov: dict[str, Any]) -> list[str]:
    flush_mb = prov.get("flush_bytes", 0) // 2**20
    return [
        f"- Each row is timed with CUDA events around the kernel region only, {prov.get('reps')} repetitions "
        f"after {prov.get('warmup')} warm-up calls; the figure is the median (p10-p90 beside it).",
        f"- Before every repetition a {flush_mb} MB buffer is written, evicting the L2, so operands come "
        "from HBM. Repetitions are queued without host synchronization, so a call's host work stays out of "
        "its time only while the host queues ahead of the GPU; rows since 2026-12-05 record whether it did "
        "(`host_bound`: the host took at least 0.9 of the GPU's span to queue them); from commit e03f4de on, "
        "such a loop is timed again, up to twice more, and the row keeps the first loop that stayed ahead "
        "(`retimed` counts the extra loops). The torch.compile "
        "baseline's eager calls can cost more host time than its kernels take, so where its mode (below) "
        "says \"replayed from a CUDA graph\" its kernels were timed by replaying one captured graph, with "
        "the eager calls' median beside them. In runs from commit 7780371 on, a matmul row's "
        "repetitions are the backend's prepared launch (`cuda_backend.prepare_*`: the call's checks "
        "once, when the row is verified); before, each repetition also checked its arguments.",
        "- **% of copy** is the achieved bandwidth over that of `dst.copy_(src)` moving the same bytes "
        "(read + written), timed the same way in the same run right after the row: the ceiling is measured, "
        "not a datasheet figure. The copy's half-size is rounded up to a multiple of 4 KiB (at most 4095 bytes "
        "more), because the device copy of other sizes ran 15% slower on the H200 (benchmarks/NOTES.md); "
        "results before 2026-12-03's second run copied the exact size.",
        "- Bytes are the minimum each kernel moves: dequantization 0.5 B packed + 1/block_size B of scale + "
        "2 B written per element; GEMV 0.5625 B per weight + activations read + output written; cuBLAS "
        "A + W + Y; prefill its dequantization plus its cuBLAS bytes.",
        "- Every output was checked once before timing: dequantization bit for bit (every element) against a "
        "naive torch dequantization that itself matched `nvfp4_kernels.reference` bit for bit on three row slices; "
        "GEMV, cuBLAS and prefill against float64 on the first 64 rows (relative error <= 1e-2) with the "
        "whole NaN-poisoned output checked for unwritten elements. A row that failed is not timed.",
        "- Inputs are random (never zeros): uniform packed bytes, E4M3 block scales 0.25..3, global scale "
        "0.0123, activations N(0, 1) in bf16.",
        "- **vs anchor** compares with the earlier measurements of docs/anchors.md (ONNX Runtime 1.31.1 "
        "on an H200 and earlier torch runs; those used back-to-back kernel timing without an L2 flush).",
    ]


def _dequant_lines(results: dict[str, Any]) -> list[str]:
    rows = [r for r in results["rows"] if r["kernel"] in ("dequant_scalar", "dequant_vec8", "torch_compile_dequant")
            and r.get("section") in ("dequant", "compile")]
    rows.sort(key=lambda r: (r["N"] * r["K"], r["N"], ["dequant_scalar", "dequant_vec8",
                                                       "torch_compile_dequant"].index(r["kernel"])))
    body = []
    for r in rows:
        speedup = speedup_vs_scalar(r, results["rows"])
        body.append([_shape(r), _dequant_label(r), _us(r["median_us"]), f"{_us(r['p10_us'])}-{_us(r['p90_us'])}",
                     _bw(r), _pct(r), _us(r["copy_us"]), f"{speedup:.2f}x" if speedup else "",
                     _anchor_text(r)])
    return _table(["N x K", "kernel", "median us", "p10-p90 us", "TB/s", "% of copy", "copy us", "vs scalar",
                   "vs anchor"], body)


def _dequant_label(row: dict[str, Any]) -> str:
    """The kernel's label; a compiled baseline timed by graph replay also shows its eager calls' median,
    so the reader sees both the kernels' time and what an eager caller waits (host work included)."""
    label = LABELS[row["kernel"]]
    if row.get("eager_median_us") is not None:
        label += f" (graph replay; eager calls {_us(row['eager_median_us'])} us"
        label += ", host-bound)" if row.get("eager_host_bound") else ")"
    return label


def _gemv_lines(results: dict[str, Any]) -> list[str]:
    body = []
    for r in _rows(results, "gemv", "gemv"):
        cublas = find_row(_rows(results, "gemv"), "cublas_bf16", r["N"], r["K"], r["M"])
        body.append([_shape(r), r["M"], _us(r["median_us"]), _bw(r), _pct(r),
                     _us(cublas["median_us"]) if cublas else "-",
                     f"{cublas['median_us'] / r['median_us']:.2f}x" if cublas else "-", _anchor_text(r)])
    return _table(["N x K", "M", "GEMV us", "TB/s", "% of copy", "cuBLAS bf16 us", "GEMV speedup over cuBLAS",
                   "vs anchor"], body)


def _prefill_lines(results: dict[str, Any]) -> list[str]:
    body = []
    for r in _rows(results, "prefill", "prefill"):
        cublas = find_row(_rows(results, "prefill"), "cublas_bf16", r["N"], r["K"], r["M"])
        overhead = r["median_us"] - cublas["median_us"] if cublas else None
        body.append([_shape(r), r["M"], _us(r["median_us"]), _us(cublas["median_us"]) if cublas else "-",
                     _us(overhead) if overhead is not None else "-",
                     f"{overhead / r['median_us']:.1%}" if overhead is not None else "-",
                     _tflops(r), _tflops(cublas)])
    return _table(["N x K", "M", "prefill us", "cuBLAS bf16 us", "prefill - cuBLAS us", "share of prefill",
                   "prefill TFLOP/s", "cuBLAS TFLOP/s"], body)


def _sweep_shape(results: dict[str, Any]) -> tuple[int, int]:
    cross = results.get("crossover")
    return (cross["N"], cross["K"]) if cross else SWEEP_SHAPE


def _sweep_lines(results: dict[str, Any]) -> list[str]:
    n, k = _sweep_shape(results)
    sweep = [r for r in _rows(results, "sweep") if (r["N"], r["K"]) == (n, k)]
    body = []
    for m in sorted({r["M"] for r in sweep}):
        cells = {kern: find_row(sweep, kern, n, k, m) for kern in ("gemv", "prefill", "cublas_bf16")}
        timed = {kern: row["median_us"] for kern, row in cells.items() if row and kern != "cublas_bf16"}
        best = min(timed, key=timed.get) if timed else None
        anchor = _anchor_text(cells["prefill"]) if cells["prefill"] else ""
        body.append([m] + [_us(cells[kern]["median_us"]) if cells[kern] else "-" for kern in
                           ("gemv", "prefill", "cublas_bf16")] + [LABELS.get(best, "-") if best else "-", anchor])
    lines = _table(["M", "GEMV us", "prefill us", "cuBLAS bf16 us", "faster of GEMV/prefill", "prefill vs anchor"],
                   body)
    cross = results.get("crossover")
    if cross:
        lines += ["", f"**Crossover:** {cross['summary']}. Recommended `Policy.gemv_max_m` = "
                      f"**{cross['gemv_max_m_recommended']}** (the policy default at the time of the run: "
                      f"{cross['current_policy_gemv_max_m']})."]
    return lines


def _replay_lines(results: dict[str, Any]) -> list[str]:
    rep = results.get("replay")
    if not rep:
        return ["Not measured in this run."]
    body = [[f"{e['N']} x {e['K']}", ", ".join(e["names"]), e["count"], _us(e["dequant_us"]), _us(e["gemm_us"]),
             _us(e["prefill_us"]), f"{e['count'] * e['dequant_us'] / 1000:.2f}",
             f"{e['count'] * e['gemm_us'] / 1000:.2f}"]
            for e in rep["per_shape"]]
    lines = [f"Model: {rep['model']}; {rep['nodes']} matmul nodes, {rep['weights'] / 1e9:.2f} billion weights, "
             f"one prefill of M = {rep['tokens']} tokens. {rep['method'][0].upper()}{rep['method'][1:]}.", ""]
    lines += _table(["N x K", "layers", "nodes", "dequant us", "cuBLAS us", "prefill us", "dequant ms (all nodes)",
                     "cuBLAS ms (all nodes)"], body)
    share = rep.get("dequant_share")
    lines += ["", f"Total: dequantization {rep['dequant_total_us'] / 1000:.2f} ms, "
                  f"GEMM {rep['gemm_total_us'] / 1000:.2f} ms, "
                  f"prefill measured together {rep['prefill_total_us'] / 1000:.2f} ms. "
                  + (f"**Dequantization share: {share:.1%}** of dequant + GEMM time (ONNX Runtime before its fix: "
                     f"{rep['ort_dequant_share']:.1%})." if share is not None
                     else f"Dequantization share not computed: shapes missing {rep['missing_shapes']}.")]
    return lines


def _host_lines(results: dict[str, Any], name: str = "", kernels_from: str = "") -> list[str]:
    """The host section: eager host time per call beside graph replay and kernel time."""
    rows = results.get("host") or []
    if not rows:
        return ["Not measured in this run (section `host`)."]
    origin = []
    if name and name != kernels_from:
        prov = results["provenance"]
        origin = [f"From `benchmarks/results/{name}` (`{prov['command']}`, {prov['date']}, commit "
                  f"{prov['git_commit']}; its kernel column is measured in that run), a later run than the kernel "
                  f"tables above.", ""]
    floors = any("floor_us" in r for r in rows)  # runs before the floor existed have none
    body = [[r["case"], r["path"], _us(r["eager_host_us"]), _us(r["eager_wall_us"]), _us(r["recording_host_us"]),
             _us(r["recording_wall_us"]), _us(r["graph_replay_us"]), _us(r["kernel_us"])]
            + ([str(r.get("launches", "")), _us(r["floor_us"]) if "floor_us" in r else "",
                _us(round(r["eager_host_us"] - r["floor_us"], 2)) if "floor_us" in r else ""] if floors else [])
            + [_us(r["ort_eager_us"]) if r.get("ort_eager_us") else "", r["verdict"]] for r in rows]
    calls = rows[0]["calls"]
    method = (f"{calls} calls of `nvfp4_matmul` back to back with CUDA tensors already on the device, one sync at "
              f"the end; host = the CPU's time per call, wall = CUDA events around the loop per call (the GPU's "
              f"time per call in that loop); median of {rows[0]['loops']} loops. Graph replay = the same call "
              f"captured once in a CUDA graph and replayed back to back; kernel = one replay with the L2 flushed. "
              f"Targets: host <= {host_time.HOST_TARGET_US:g} us, <= {host_time.RECORDING_TARGET_US:g} us with a "
              f"recorder listening. ONNX Runtime's figure is its op in the same loop on an H200 (the issue's, an "
              f"earlier run); the ONNX Runtime section below times both in one loop of one process.")
    if floors:
        method += (" Floor = the same loop around what no implementation of the call can skip: allocating its "
                   "output and launching an empty kernel through the same launch call as many times as the call "
                   "launches kernels (launches, counted by the profiler); over floor = host - floor, what the "
                   "dispatcher itself costs. The floor moves with the machine (benchmarks/NOTES.md has it on "
                   "several H200 hosts); in this run it is " + _floor_per_launch(rows) + ".")
    header = (["call", "path", "host", "wall", "host, recording", "wall, recording", "graph replay", "kernel"]
              + (["launches", "floor", "over floor"] if floors else []) + ["ONNX Runtime", "result"])
    return origin + [method, ""] + _table(header, body)


def _floor_per_launch(rows: list[dict[str, Any]]) -> str:
    """The run's floor divided by its launch count, as a range over the rows: how much one
    allocation plus one launch cost on the host that ran the bench (it differs between hosts)."""
    per = [r["floor_us"] / r["launches"] for r in rows if "floor_us" in r and r.get("launches")]
    if not per:
        return "not measured"
    lo, hi = min(per), max(per)
    return f"{lo:.1f} us per launch" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f} us per launch"


def _failure_lines(results: dict[str, Any]) -> list[str]:
    fails = results.get("failures") or []
    if not fails:
        return ["None: every row's output was verified before it was timed."]
    return _table(["section", "kernel", "M", "N x K", "kind", "message"],
                  [[f["section"], f["kernel"], f["M"], f"{f['N']} x {f['K']}", f["kind"],
                    f["message"][:200].replace("|", "/").replace("\n", " ")] for f in fails])


def _host_bound_lines(results: dict[str, Any]) -> list[str]:
    """The rows whose GPU waited on the host while they were timed (``host_bound``, recorded since
    2026-12-05): their medians include host work, so they are not kernel times; the section exists
    only when a run has such rows."""
    rows = [r for r in results.get("rows", []) if r.get("host_bound")]
    if not rows:
        return []
    return ["", "## Rows timed with the GPU waiting on the host", "",
            "Their times include host work (the host took this long to queue the repetitions that the GPU "
            "ran in the span beside it), so they are not kernel times; compare them with care.", ""] + _table(
        ["section", "kernel", "M", "N x K", "median us", "host queued us", "GPU span us"],
        [[r["section"], r["kernel"], str(r["M"] if r["M"] is not None else "-"), f"{r['N']} x {r['K']}",
          _us(r["median_us"]), f"{r['enqueue_us']:.0f}", f"{r['gpu_span_us']:.0f}"] for r in rows])


def render_markdown(results: dict[str, Any], source_name: str, png_link: str = DEFAULT_PNG_LINK,
                    multi_gpu: tuple[str, dict[str, Any]] | None = None,
                    host: tuple[str, dict[str, Any]] | None = None,
                    onnxruntime: dict[str, Any] | None = None) -> str:
    """BENCHMARKS.md as a pure function of the results (and of the committed ONNX Runtime timing
    file, when given: its section is :func:`nvfp4_harness.nvfp4.onnxruntime.benchmarks_md.render`)."""
    prov = results["provenance"]
    targets = evaluate_targets(results)
    lines = ["# Benchmarks", "",
             f"Generated by `python -m nvfp4_harness bench-report` from `benchmarks/results/{source_name}`; "
             "do not edit by hand." + ("" if results.get("complete", True) else
                                      " **The run did not complete: some sections are missing.**"), "",
             "## Provenance", ""] + _provenance_lines(prov)
    lines += ["", "## Method", ""] + _method_lines(prov)
    lines += ["", "## Targets", ""] + _table(["target", "measured", "threshold", "result"],
                                             [[t["target"], t["shown"], t["threshold"], t["status"]] for t in targets])
    lines += ["", f"![achieved bandwidth against the same-run copy ceiling]({png_link})"]
    lines += ["", "## Dequantization", ""] + _dequant_lines(results)
    modes = prov.get("torch_compile") or {}
    if modes:
        lines += ["", "torch.compile mode per shape: " + "; ".join(f"{s}: {m}" for s, m in sorted(modes.items())) + "."]
    lines += ["", "## GEMV beside cuBLAS bf16 on pre-dequantized weights", ""] + _gemv_lines(results)
    prefill_m = sorted({r["M"] for r in _rows(results, "prefill", "prefill")}) or [SEED_M]
    lines += ["", "## Prefill (vec8 dequant + cuBLAS) beside cuBLAS bf16 alone, M = "
              + ", ".join(map(str, prefill_m)), ""]
    lines += _prefill_lines(results)
    lines += ["", "## Every path at every M: GEMV, fused_mma, fused_wgmma and prefill beside cuBLAS bf16", ""]
    lines += _paths_lines(results)
    sweep_n, sweep_k = _sweep_shape(results)
    lines += ["", f"## M sweep on {sweep_n} x {sweep_k}: GEMV against prefill", ""]
    lines += _sweep_lines(results)
    tokens = (results.get("replay") or {}).get("tokens")
    lines += ["", f"## Model replay: one prefill of {tokens} tokens" if tokens else "## Model replay", ""]
    lines += _replay_lines(results)
    host_name, host_results = host if host is not None else (source_name, results)
    lines += ["", "## Host time per eager call", ""] + _host_lines(host_results, host_name, source_name)
    if multi_gpu is not None:
        from nvfp4_harness.nvfp4 import multi_gpu as multi

        lines += ["", "## The GPU dispatch suites on one and on every GPU of a host", ""]
        lines += multi.markdown_lines(*multi_gpu)
    if onnxruntime is not None:
        from nvfp4_harness.nvfp4.onnxruntime import benchmarks_md

        lines += ["", benchmarks_md.render(onnxruntime).rstrip("\n")]
    lines += ["", "## Failures", ""] + _failure_lines(results)
    lines += _host_bound_lines(results)
    lines += ["", "## CPU-side costs", "",
              "The host-side costs (reference dequantization, SHA-256 hashing, dispatcher and listener overhead "
              "per call) are pytest-benchmark tests: `pytest suites/test_bench_cpu.py --benchmark-only`.", ""]
    return "\n".join(lines)


# --- console ------------------------------------------------------------------------------------------


def console_summary(results: dict[str, Any]) -> str:
    """A plain-text table of every timed row, then the targets, crossover and replay."""
    header = f"{'section':8} {'kernel':22} {'M':>5} {'N x K':>14} {'us':>9} {'p10-p90':>17} {'TB/s':>6} " \
             f"{'%copy':>6} {'vs scalar':>9}  vs anchor"
    lines = [header, "-" * len(header)]
    for r in results["rows"]:
        if r["kernel"] == "copy":
            continue
        speedup = speedup_vs_scalar(r, results["rows"])
        lines.append(f"{r.get('section', ''):8} {r['kernel']:22} {str(r['M'] or '-'):>5} {_shape(r):>14} "
                     f"{r['median_us']:9.2f} {r['p10_us']:8.2f}-{r['p90_us']:<8.2f} {_bw(r):>6} {_pct(r):>6} "
                     f"{(f'{speedup:.2f}x' if speedup else ''):>9}  {_anchor_text(r)}")
    lines += ["", "targets:"] + [f"  {t['status']:>12}  {t['target']}: {t['shown']} ({t['threshold']})"
                                 for t in evaluate_targets(results)]
    if results.get("crossover"):
        lines.append(f"crossover: {results['crossover']['summary']}; recommended gemv_max_m = "
                     f"{results['crossover']['gemv_max_m_recommended']}")
    if results.get("path_choice"):
        lines.append(f"paths: {results['path_choice']['summary']}")
    rep = results.get("replay")
    if rep and rep.get("dequant_share") is not None:
        lines.append(f"replay: dequant {rep['dequant_total_us'] / 1000:.2f} ms, "
                     f"GEMM {rep['gemm_total_us'] / 1000:.2f} ms, dequant share {rep['dequant_share']:.1%} "
                     f"(ONNX Runtime before its fix: {rep['ort_dequant_share']:.1%})")
    for r in results.get("host") or []:
        lines.append(f"host: {r['case']} ({r['path']}): {r['eager_host_us']:.1f} us/call eager, "
                     f"{r['recording_host_us']:.1f} recording, graph replay {r['graph_replay_us']:.1f}, "
                     f"kernel {r['kernel_us']:.1f}"
                     + (f", floor {r['floor_us']:.1f} ({r['launches']} launch(es))" if "floor_us" in r else "")
                     + f": {r['verdict']}")
    if results.get("failures"):
        lines.append(f"{len(results['failures'])} row(s) failed or were skipped: see 'failures' in the JSON")
    return "\n".join(lines)


# --- plot ---------------------------------------------------------------------------------------------


def _plot_groups(results: dict[str, Any]) -> list[tuple[str, list[tuple[str, list[dict[str, Any]]]]]]:
    """(panel title, [(group label, rows)]) for the dequantization and GEMV panels."""
    dequant = [r for r in results["rows"] if r["kernel"] in ("dequant_scalar", "dequant_vec8", "torch_compile_dequant")
               and r.get("section") in ("dequant", "compile")]
    gemv = [r for r in results["rows"] if r.get("section") == "gemv" and r["kernel"] in ("gemv", "cublas_bf16")]
    panels = []
    for title, rows in (("dequantization", dequant), ("GEMV and cuBLAS bf16 at M = 1 and 8", gemv)):
        shapes: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            shapes.setdefault(_shape(r), []).append(r)
        if shapes:
            panels.append((title, list(shapes.items())))
    return panels


def write_plot(results: dict[str, Any], path: str | Path) -> Path:
    """One PNG: achieved TB/s per kernel and shape, each bar with its same-run copy ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _plot_groups(results)
    fig, axes = plt.subplots(max(1, len(panels)), 1, figsize=(12, 4.5 * max(1, len(panels))), squeeze=False)
    colors: dict[str, str] = {}
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, groups) in zip(axes[:, 0], panels, strict=False):
        x, ticks, tick_labels, top = 0.0, [], [], 0.0
        for label, rows in groups:
            start = x
            for r in sorted(rows, key=lambda r: (list(LABELS).index(r["kernel"]), r["M"] or 0)):
                name = LABELS[r["kernel"]] + (f" M={r['M']}" if r["kernel"] in ("gemv", "cublas_bf16") else "")
                color = colors.setdefault(name, palette[len(colors) % len(palette)])
                top = max(top, tb_per_s(r["bytes"], r["median_us"]), tb_per_s(r["bytes"], r["copy_us"]))
                ax.bar(x, tb_per_s(r["bytes"], r["median_us"]), width=0.8, color=color,
                       label=name if name not in ax.get_legend_handles_labels()[1] else None)
                ax.plot([x - 0.4, x + 0.4], [tb_per_s(r["bytes"], r["copy_us"])] * 2, color="black", linewidth=2,
                        label="same-run copy, same bytes" if "same-run copy, same bytes"
                        not in ax.get_legend_handles_labels()[1] else None)
                x += 1
            ticks.append((start + x - 1) / 2)
            tick_labels.append(label)
            x += 1
        ax.set_xticks(ticks)
        ax.set_xticklabels(tick_labels)
        ax.set_ylim(0, top * 1.3)  # headroom for the legend above the ceiling marks
        ax.set_ylabel("achieved TB/s")
        ax.set_title(f"{title} ({results['provenance'].get('gpu', '')})")
        ax.legend(fontsize=8, ncol=3)
        ax.grid(axis="y", alpha=0.3)
    if not panels:
        axes[0, 0].text(0.5, 0.5, "no dequantization or GEMV rows in this run", ha="center")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return path


# --- the command --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Write BENCHMARKS.md and the PNG; with --check, exit 1 if the markdown is out of date."""
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness bench-report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="?", help="results JSON (default: the newest in benchmarks/results)")
    parser.add_argument("--out", default=str(DEFAULT_MD), help="markdown file to write")
    parser.add_argument("--png", default=str(DEFAULT_PNG), help="plot file to write")
    parser.add_argument("--png-link", default=DEFAULT_PNG_LINK, help="how the markdown links the plot")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out is stale")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    source = Path(args.results) if args.results else newest_results(needs="rows")
    if source is None:
        print(f"no results JSON given and none in {DEFAULT_OUT}; run python -m nvfp4_harness bench on a GPU first",
              file=sys.stderr)
        return 2
    try:
        results = load_results(source)
    except (OSError, ValueError) as exc:
        print(f"cannot read {source}: {exc}", file=sys.stderr)
        return 2
    text = render_benchmarks(source, args.png_link)
    out = Path(args.out)
    if args.check:
        current = out.read_text(encoding="utf-8") if out.exists() else None
        if current != text:
            print(f"{out} is not up to date with {source}; run: python -m nvfp4_harness bench-report {source}",
                  file=sys.stderr)
            return 1
        print(f"{out} is up to date with {source}")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    png = write_plot(results, args.png)
    print(f"wrote {out} and {png} from {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
