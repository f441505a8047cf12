"""The layers of the harness, checked on the import statements of every module.

1. ``nvfp4_harness.model`` (harness/model/): the dispatch-model API; imports nothing of the
   project outside itself, and neither numpy nor torch.
2. ``nvfp4_kernels`` (kernels/): the NVFP4 operator, one client of layer 1 like any user's.
3. ``nvfp4_harness.engine``: the generic engine; knows models, never a particular operator.
4. ``nvfp4_harness.nvfp4``: the NVFP4 verification and measurement, on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"model": ROOT / "harness" / "model", "engine": ROOT / "harness" / "engine",
           "nvfp4": ROOT / "harness" / "nvfp4", "kernels": ROOT / "kernels"}


def imports_of(folder: Path) -> dict[str, set[str]]:
    """module file -> every module name it imports (absolute names, anywhere in the file)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


def offending(folder: str, allowed_project: tuple[str, ...], forbidden: tuple[str, ...] = ()) -> list[str]:
    bad = []
    for module, names in imports_of(FOLDERS[folder]).items():
        for name in names:
            project = name.split(".")[0] in ("nvfp4_harness", "nvfp4_kernels")
            if project and not name.startswith(allowed_project) or name.split(".")[0] in forbidden:
                bad.append(f"{module} imports {name}")
    return bad


def test_the_model_api_imports_only_itself_and_the_standard_library():
    assert offending("model", ("nvfp4_harness.model",), forbidden=("numpy", "torch", "ml_dtypes")) == []


def test_the_operator_uses_only_the_dispatch_model_api_of_the_harness():
    assert offending("kernels", ("nvfp4_harness.model", "nvfp4_kernels")) == []


def test_the_engine_knows_no_particular_operator():
    assert offending("engine", ("nvfp4_harness.model", "nvfp4_harness.engine")) == []


@pytest.mark.parametrize("a, b", [("bench", "bench_report")])
def test_no_import_circle_between_the_benchmark_runner_and_its_report(a, b):
    imports = imports_of(FOLDERS["nvfp4"])
    a_imports_b = f"nvfp4_harness.nvfp4.{b}" in imports[f"harness/nvfp4/{a}.py"]
    b_imports_a = f"nvfp4_harness.nvfp4.{a}" in imports[f"harness/nvfp4/{b}.py"]
    assert not (a_imports_b and b_imports_a)
