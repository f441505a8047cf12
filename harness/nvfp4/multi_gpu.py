"""``python -m nvfp4_harness multi-gpu``: the GPU dispatch suites on one and on every GPU of a host.

Runs ``pytest -m "dispatch and gpu"`` twice on this machine, with one xdist worker and with one
worker per GPU (each pinned to its GPU by the ``nvfp4_gpu_workers`` plugin), timing each and
keeping both coverage files. The results (``benchmarks/multi_gpu/multi-gpu-<gpu>-<date>.json``)
hold the wall times, their ratio, the serial fraction the ratio implies (Amdahl: a suite whose
fraction ``s`` cannot spread runs ``1 / (s + (1 - s) / n)`` times faster on ``n`` GPUs), the
events each GPU ran, and whether the two runs' coverage is the same. BENCHMARKS.md shows them;
CPU CI checks the committed file for consistency.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nvfp4_harness.nvfp4.bench_metrics import REPO_ROOT, slugify

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "multi_gpu"

SUITE = ["-m", "dispatch and gpu", "-q", "-p", "no:cacheprovider"]


def serial_fraction(speedup: float, workers: int) -> float:
    """The fraction ``s`` of a run that did not spread over ``workers`` (Amdahl's law), from the
    measured speedup; 0 for perfect scaling, 1 for none."""
    if workers < 2:
        raise ValueError("the serial fraction needs at least two workers")
    if speedup <= 0:
        raise ValueError(f"speedup must be positive, got {speedup}")
    return (workers / speedup - 1) / (workers - 1)


def coverage_facts(doc: dict[str, Any]) -> dict[str, Any]:
    """What two runs of one suite must share, whatever their devices: per operator the hits per
    path and the guard-side counts, and the gate's covered/total."""
    ops = {}
    for name, op in doc["operators"].items():
        ops[name] = {"paths": {p: t["hits"] for p, t in op["paths"].items()},
                     "sides": {k: s["count"] for k, s in op["guard_sides"].items()}}
    return {"operators": ops, "covered": doc["summary"]["covered"], "total": doc["summary"]["total"]}


def run(workers: int, report: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "-n", str(workers), *SUITE, f"--dispatch-report=json:{report}"]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    tail = [line for line in done.stdout.splitlines() if " passed" in line or " failed" in line][-1:]
    doc = json.loads(report.read_text())
    return {"workers": workers, "wall_s": round(wall, 1), "returncode": done.returncode, "summary": tail,
            "devices": {d.get("index", d["name"]): d["events"] for d in doc["devices"]},
            "coverage": coverage_facts(doc), "command": " ".join(["pytest", "-n", str(workers), *SUITE])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness multi-gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="folder for multi-gpu-<gpu>-<date>.json")
    parser.add_argument("--git-commit", default="unknown")
    args = parser.parse_args(argv)
    import torch

    count = torch.cuda.device_count()
    if count < 2:
        print(f"multi-gpu needs at least two GPUs; this machine has {count}", file=sys.stderr)
        return 2
    from nvfp4_harness.nvfp4.bench import driver_version

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    one = run(1, out / "multi-gpu-one.json.tmp")
    many = run(count, out / "multi-gpu-many.json.tmp")
    speedup = one["wall_s"] / many["wall_s"]
    results = {
        "provenance": {"gpu": torch.cuda.get_device_name(0), "gpus": count, "driver": driver_version(),
                       "cuda": str(torch.version.cuda), "torch": torch.__version__,
                       "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                       "command": "python -m nvfp4_harness multi-gpu", "git_commit": args.git_commit},
        "runs": [one, many],
        "speedup": round(speedup, 3),
        "serial_fraction": round(serial_fraction(speedup, count), 3),
        "coverage_equal": one["coverage"] == many["coverage"],
    }
    date = results["provenance"]["date"][:10]
    path = out / f"multi-gpu-{slugify(results['provenance']['gpu'])}-{date}.json"
    path.write_text(json.dumps(results, indent=1) + "\n")
    for tmp in (out / "multi-gpu-one.json.tmp", out / "multi-gpu-many.json.tmp"):
        tmp.unlink(missing_ok=True)
    print(f"1 worker: {one['wall_s']} s, {count} workers: {many['wall_s']} s, speedup {speedup:.2f}x, serial fraction "
          f"{results['serial_fraction']:.2f}; devices {many['devices']}; coverage equal: {results['coverage_equal']}")
    print(f"wrote {path}")
    return 0 if one["returncode"] == many["returncode"] == 0 and results["coverage_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())


def newest(directory: str | Path = DEFAULT_OUT) -> tuple[Path, dict[str, Any]] | None:
    """The newest multi-GPU results file and its contents, None when there is none."""
    files = sorted(Path(directory).glob("multi-gpu-*.json"))
    if not files:
        return None
    loaded = [(p, json.loads(p.read_text())) for p in files]
    return max(loaded, key=lambda item: (item[1]["provenance"]["date"], item[0].name))


def markdown_lines(source: str, results: dict[str, Any]) -> list[str]:
    """The BENCHMARKS.md section of a multi-GPU run."""
    prov = results["provenance"]
    one, many = results["runs"]
    devices = ", ".join(f"GPU {gpu}: {events} events" for gpu, events in sorted(many["devices"].items()))
    return [f"From `benchmarks/multi_gpu/{source}` ({prov['gpus']} x {prov['gpu']}, driver {prov['driver']}, "
            f"CUDA {prov['cuda']}, torch {prov['torch']}, {prov['date']}, commit {prov['git_commit']}): "
            f"`{one['command']}` against `{many['command']}`, each xdist worker pinned to its own GPU.", "",
            "| workers | wall time | devices (events) | result |", "|---:|---:|---|---|",
            f"| 1 | {one['wall_s']} s | " + ", ".join(f"GPU {g}: {e}" for g, e in sorted(one["devices"].items()))
            + f" | {' '.join(one['summary'])} |",
            f"| {many['workers']} | {many['wall_s']} s | {devices} | {' '.join(many['summary'])} |", "",
            f"Speedup {results['speedup']:.2f}x on {prov['gpus']} GPUs; the serial fraction it implies (Amdahl) is "
            f"{results['serial_fraction']:.2f}. Coverage of the two runs (hits per path, guard-side counts, "
            f"covered/total): {'equal' if results['coverage_equal'] else 'DIFFERENT'}."]
