"""What installing the project adds to an environment: no top-level ``kernels`` or ``harness``
module (the folders install as ``nvfp4_kernels`` and ``nvfp4_harness``), and a pytest plugin
that loads nothing heavy and registers nothing unless asked."""

from __future__ import annotations

import subprocess
import sys


def run_isolated(code: str, cwd) -> subprocess.CompletedProcess[str]:
    """Python in isolated mode (no PYTHONPATH, no script folder on sys.path) from ``cwd``."""
    return subprocess.run([sys.executable, "-I", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_no_top_level_kernels_or_harness_module_is_installed(tmp_path) -> None:
    for name in ("kernels", "harness"):
        done = run_isolated(f"import {name}", tmp_path)
        assert done.returncode != 0 and f"No module named '{name}'" in done.stderr, (name, done.stdout)
    done = run_isolated("import nvfp4_kernels, nvfp4_harness; print(nvfp4_kernels.MODEL.name)", tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "nvfp4", done.stderr


def test_the_dispatch_model_api_and_the_plugin_import_neither_numpy_nor_torch(tmp_path) -> None:
    code = ("import sys, nvfp4_harness.model, nvfp4_harness.engine.plugin; "
            "print(sorted(m for m in ('numpy', 'torch', 'nvfp4_kernels') if m in sys.modules))")
    done = run_isolated(code, tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_plugin_registers_no_listener_without_its_options(tmp_path) -> None:
    (tmp_path / "test_probe.py").write_text(
        "import nvfp4_harness.model.bus as bus\n\n"
        "def test_nobody_listens():\n"
        "    assert not bus.listening()\n")
    done = subprocess.run([sys.executable, "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_probe.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with_option = subprocess.run([sys.executable, "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                  "--dispatch", "test_probe.py"], cwd=tmp_path, capture_output=True, text=True,
                                 timeout=120)
    assert with_option.returncode == 1 and "assert not" in with_option.stdout


def test_every_package_folder_is_installed():
    """A non-editable install ships only the packages pyproject.toml lists: every folder with
    an __init__.py under harness/ and kernels/ must be there under its import name."""
    from pathlib import Path

    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    for name, folder in config["package-dir"].items():
        for init in (root / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(root / folder)
            package = ".".join((name, *relative.parts))
            assert package in listed, f"{package} ({init.parent.relative_to(root)}) is not in pyproject's packages"


def test_every_source_the_builds_read_is_package_data():
    """A non-editable install compiles the kernels and the launch-call extension from the
    installed package (nvfp4_kernels.build): every file they read must match pyproject's
    package-data patterns, or the first CUDA call of such an install fails."""
    import fnmatch
    from pathlib import Path

    import pytest
    from nvfp4_kernels import build

    tomllib = pytest.importorskip("tomllib")

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    kernels = root / "kernels"
    needed = [*build.source_files(), build.LAUNCH_CALL_SOURCE]
    for path in needed:
        relative = path.relative_to(kernels).as_posix()
        assert any(fnmatch.fnmatch(relative, p) for p in patterns["nvfp4_kernels"]), \
            f"kernels/{relative} is read by nvfp4_kernels.build but not in pyproject's package-data"
    assert build.LAUNCH_CALL_SOURCE.is_file()
