"""Dispatch coverage in coverage.py's own data, checked with coverage.py's own commands:
``coverage report`` / ``json`` / ``html`` / ``xml`` / ``lcov`` show the CUDA kernels the paths
reached on a GPU and the guard sides as branches, and ``coverage combine`` merges the file with
Python coverage data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.reports import parse_report_spec, write_report
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4.shapes import simulated_event
from nvfp4_kernels.model import MODEL, Policy

ROOT = Path(__file__).resolve().parents[1]
H200 = DeviceCaps("NVIDIA H200", (9, 0), index=0)  # as a real GPU run records it
RC = "[run]\nbranch = True\nplugins = nvfp4_harness.engine.coveragepy\n"
GEMV_ON = Policy(gemv_max_m=8)  # the default's GEMV range, spelled out


def body_lines(cu: Path, kernel: str) -> set[int]:
    """Lines of ``kernel``'s body in ``cu``, found here with a plain scan (not the module's parser):
    from the line after the kernel's name up to the first line that is a lone closing brace."""
    lines = cu.read_text().splitlines()
    start = next(i for i, line in enumerate(lines, 1) if re.search(rf"\b{kernel}\s*\(", line) and "<<<" not in line)
    end = next(i for i in range(start, len(lines) + 1) if lines[i - 1] == "}")
    return set(range(start, end + 1))


def coverage_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coverage", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def run_data(tmp_path: Path) -> Path:
    """A GPU run that took the GEMV and vec8, a CPU run that took the scalar path, as one file."""
    events = [(simulated_event(1, 64, caps=H200, policy=GEMV_ON), "t::gemv"),
              (simulated_event(64, 64, caps=H200), "t::vec8"),
              (simulated_event(64, 36), "t::scalar-on-cpu")]
    data = CoverageData.from_events(events)
    target = tmp_path / ".coverage.dispatch"
    assert parse_report_spec(f"coverage:{target}") == ("coverage", str(target))
    assert write_report(data, "coverage", str(target)) == ""
    (tmp_path / ".coveragerc").write_text(RC)
    return target


def test_coverage_json_counts_the_kernels_a_gpu_ran_and_the_guard_sides(run_data: Path, tmp_path: Path):
    out = tmp_path / "cov.json"
    done = coverage_cli("json", f"--data-file={run_data}", f"--rcfile={tmp_path / '.coveragerc'}", "-o", str(out),
                        cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    files = json.loads(out.read_text())["files"]
    gemv_cu, dequant_cu = ROOT / "kernels/cuda/gemv.cu", ROOT / "kernels/cuda/dequant.cu"
    gemv = files["kernels/cuda/gemv.cu"]
    assert gemv["executed_lines"] and set(gemv["executed_lines"]) <= body_lines(gemv_cu, "nvfp4_gemv_kernel")
    dequant = files["kernels/cuda/dequant.cu"]
    assert set(dequant["executed_lines"]) <= body_lines(dequant_cu, "nvfp4_dequant_vec8_kernel")
    scalar = body_lines(dequant_cu, "nvfp4_dequant_scalar_kernel")
    assert scalar & set(dequant["missing_lines"]) and not scalar & set(dequant["executed_lines"]), \
        "the scalar path ran on the CPU backend only: its kernel's lines are not executed"
    assert files["kernels/cuda/fp4_probe.cu"]["summary"]["covered_lines"] == 0
    guards = files["kernels/model.py.dispatch"]
    declared = [g.source.line for p in MODEL.paths for g in p.guards]
    assert guards["summary"]["num_branches"] == 2 * len(declared)
    seen = {(o.path, o.guard, o.passed) for e in (simulated_event(1, 64, caps=H200, policy=GEMV_ON),
                                                   simulated_event(64, 64, caps=H200), simulated_event(64, 36))
            for o in e.outcomes}
    assert guards["summary"]["covered_branches"] == len(seen)


def test_report_html_xml_and_lcov_show_the_kernel_sources(run_data: Path, tmp_path: Path):
    rc = f"--rcfile={tmp_path / '.coveragerc'}"
    report = coverage_cli("report", f"--data-file={run_data}", rc, "--show-missing", cwd=ROOT)
    assert report.returncode == 0, report.stdout + report.stderr
    assert re.search(r"^kernels/cuda/gemv\.cu\s+\d+", report.stdout, re.M), report.stdout
    assert re.search(r"^kernels/model\.py\.dispatch\s+\d+", report.stdout, re.M), report.stdout
    for command, name in (("html", "htmlcov"), ("xml", "cov.xml"), ("lcov", "cov.lcov")):
        flag = ["-d", str(tmp_path / name)] if command == "html" else ["-o", str(tmp_path / name)]
        done = coverage_cli(command, f"--data-file={run_data}", rc, *flag, cwd=ROOT)
        assert done.returncode == 0, (command, done.stdout + done.stderr)
    assert "gemv.cu" in (tmp_path / "cov.xml").read_text()
    assert "SF:" in (tmp_path / "cov.lcov").read_text() and "gemv.cu" in (tmp_path / "cov.lcov").read_text()
    assert any(p.name.endswith("gemv_cu.html") for p in (tmp_path / "htmlcov").iterdir())


def test_coverage_combine_merges_it_with_python_branch_coverage(run_data: Path, tmp_path: Path):
    script = tmp_path / "uses_python.py"
    script.write_text("def f(x):\n    if x:\n        return 1\n    return 2\n\nf(1)\n")
    python_data = tmp_path / ".coverage.python"
    done = subprocess.run([sys.executable, "-m", "coverage", "run", "--branch", f"--data-file={python_data}",
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    combined = tmp_path / ".coverage"
    rc = f"--rcfile={tmp_path / '.coveragerc'}"
    done = coverage_cli("combine", f"--data-file={combined}", rc, "--keep", str(run_data), str(python_data),
                        cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "all.json"
    assert coverage_cli("json", f"--data-file={combined}", rc, "-o", str(out), cwd=tmp_path).returncode == 0
    names = json.loads(out.read_text())["files"]
    assert any(n.endswith("uses_python.py") for n in names)
    assert any(n.endswith("kernels/cuda/gemv.cu") for n in names)
