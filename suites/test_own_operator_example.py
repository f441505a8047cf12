"""examples/own_operator, run as a user would: copied to a fresh directory outside this checkout
and tested against the installed project. Its full suite passes the gate; its decode-only
suite fails it, naming the missed paths and guard sides with their source lines in the
example's own model (not in this project)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_operator"


def declared_line(source: str, needle: str) -> int:
    """The line of the example's model file that holds ``needle``, read here independently."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if needle in line)


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("user") / "own_operator"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return target


def run_pytest(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -I: isolated mode, so neither this checkout nor PYTHONPATH leaks into the user's run
    code = "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-I", "-c", code, "-p", "no:cacheprovider", *args], cwd=where,
                          capture_output=True, text=True, timeout=300)


def test_the_example_imports_its_own_kernels_package(fresh_copy: Path) -> None:
    probe = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, '.'); import kernels; "
                            "print(kernels.__file__)"], cwd=fresh_copy, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).resolve().is_relative_to(fresh_copy.resolve())


def test_all_paths_passes_the_gate(fresh_copy: Path) -> None:
    done = run_pytest(fresh_copy, "test_all_paths.py", "--dispatch-require=all-reachable", "--dispatch-report=term")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^TOTAL\s+4\s+4\s+100\.0%$", done.stdout, re.M), done.stdout
    assert "Operator toy_matmul (kernels/model.py)" in done.stdout


def test_missing_fails_the_gate_naming_the_example_source_lines(fresh_copy: Path) -> None:
    done = run_pytest(fresh_copy, "test_missing.py", "--dispatch-require=all-reachable")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "4 passed" in done.stdout  # the tests pass; the gate fails the run
    model = (fresh_copy / "kernels" / "model.py").read_text()
    blocked = declared_line(model, 'PathSpec("blocked"')
    m_small = declared_line(model, 'Guard("m_small"')
    k_mod_8 = declared_line(model, 'Guard("k_mod_8"')
    out = done.stdout
    assert "FAIL: required path toy_matmul:blocked was never taken" in out
    assert f"[kernels/model.py:{blocked}]" in out
    assert "FAIL: required path toy_matmul:generic was never taken" in out
    assert f"FAIL: guard side toy_matmul:small_m.m_small == False was never taken (kernels/model.py:{m_small}, " \
           f"M <= 4)" in out
    assert f"FAIL: guard side toy_matmul:blocked.k_mod_8 == False was never taken (kernels/model.py:{k_mod_8}, " \
           f"K % 8 == 0)" in out
    assert "Operator nvfp4" not in out and "nvfp4:" not in out, "the user's run must not report this project's operator"


def test_a_path_name_of_the_users_model_is_a_valid_requirement(fresh_copy: Path) -> None:
    done = run_pytest(fresh_copy, "test_missing.py", "--dispatch-require=small_m")
    assert done.returncode == 0, done.stdout + done.stderr
    done = run_pytest(fresh_copy, "test_missing.py", "--dispatch-require=toy_matmul:generic")
    assert done.returncode == 1 and "required path toy_matmul:generic" in done.stdout
    done = run_pytest(fresh_copy, "test_missing.py", "--dispatch-require=small")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR
    assert "unknown dispatch path 'small'; valid names: toy_matmul: small_m, blocked, generic" in done.stderr
