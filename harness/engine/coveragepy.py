"""Dispatch coverage in coverage.py's own data and reports.

``--dispatch-report=coverage:PATH`` writes a coverage.py data file (through coverage.py's public
``CoverageData`` API) in which

* the source lines of each CUDA kernel a path launches count as executed when a call took that
  path on a GPU (not on the CPU backend, not on a simulated device): a model names its kernel
  source files (``DispatchModel(kernel_sources=...)``) and each path's kernel-name patterns pick
  the ``__global__`` functions in them;
* each guard side counts as a branch arc on the line the guard is declared on, in a companion
  file ``<model file>.dispatch`` (the model's own ``.py`` file is Python coverage's; a separate
  name keeps the two from conflicting when combined): the arc ``L -> -L`` is the guard's True
  side, ``L -> -(L+1)`` its False side (two exits, as coverage.py draws a two-way branch; the
  reports spell them out as "the guard on line L was never True/False").

The data is branch data, so it combines with pytest-cov's when that runs with ``--cov-branch``
(``coverage combine``). coverage.py reports these files through this module's plugin; name it
in the coverage configuration::

    [tool.coverage.run]
    branch = true
    plugins = ["nvfp4_harness.engine.coveragepy"]

after which ``coverage report``, ``html``, ``xml`` and ``lcov`` show the kernels a suite reached
beside the Python line coverage. coverage.py's branch view lists every side of every guard; the
dispatch gate leaves out sides that cannot occur on the run's devices (``native_fp4`` on a CPU
run), so its totals can be smaller.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nvfp4_harness.engine.data import CoverageData

#: the file tracer name coverage.py records for our files (module + class of the plugin)
PLUGIN_NAME = "nvfp4_harness.engine.coveragepy.DispatchCoveragePlugin"
#: the suffix of the companion file that carries a model file's guard sides
GUARD_SUFFIX = ".dispatch"
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


@dataclass(frozen=True)
class KernelFunction:
    """One ``__global__`` function of a CUDA source: its name and the lines of its body."""

    name: str
    file: str
    first: int
    last: int
    lines: tuple[int, ...]


@lru_cache(maxsize=64)
def kernel_functions(path: str) -> tuple[KernelFunction, ...]:
    """The ``__global__`` functions of a .cu file, with their executable body lines (lines that
    hold code, comments and lone braces aside)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    functions = []
    for found in re.finditer(r"__global__", text):
        head = _LAUNCH_BOUNDS.sub(lambda m: " " * len(m.group(0)), text[found.end():found.end() + 2000])
        name = _NAME.search(head)
        if name is None:
            continue
        open_paren = found.end() + name.end() - 1
        close_paren = _matching(text, open_paren, "(", ")")
        brace = text.find("{", close_paren)
        if close_paren < 0 or brace < 0:
            continue
        end = _matching(text, brace, "{", "}")
        first = text.count("\n", 0, brace) + 1
        last = text.count("\n", 0, end) + 1
        body = text.splitlines()[first - 1:last]
        lines = tuple(first + i for i, line in enumerate(body) if _is_code(line, first + i == first))
        functions.append(KernelFunction(name.group(1), path, first, last, lines))
    return tuple(functions)


def _matching(text: str, start: int, opening: str, closing: str) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _is_code(line: str, is_first: bool) -> bool:
    code = line.split("//", 1)[0].strip()
    return bool(code) and (code not in ("{", "}", "};") or is_first)


def resolve_sources(patterns: Iterable[str]) -> list[str]:
    """Absolute paths of the kernel source files (glob patterns, relative to the working
    directory as the declaration snapshot stores them)."""
    found: list[str] = []
    for pattern in patterns:
        found += sorted(glob.glob(pattern) if not os.path.isabs(pattern) else glob.glob(pattern))
    return [os.path.abspath(p) for p in dict.fromkeys(found)]


def measured(data: CoverageData) -> tuple[dict[str, set[tuple[int, int]]], set[str]]:
    """(file -> arcs, files measured) for a coverage.py data file: kernel lines of the paths
    reached on a GPU, and guard sides on each model file's companion."""
    arcs: dict[str, set[tuple[int, int]]] = {}
    files: set[str] = set()
    gpu_labels = {label for label, d in data.devices.items() if d.compute_capability and not d.simulated}
    for op in data.operators.values():
        decl = op.declaration
        functions = [f for source in resolve_sources(decl.get("kernel_sources") or [])
                     for f in kernel_functions(source)]
        files.update(f.file for f in functions)
        for path in decl["paths"]:
            tally = op.paths[path["name"]]
            if not any(tally.devices.get(label) for label in gpu_labels):
                continue
            patterns = [re.compile(p) for p in path.get("kernels", [])]
            for function in functions:
                if any(p.search(function.name) for p in patterns):
                    arcs.setdefault(function.file, set()).update((-1, line) for line in function.lines)
        for path, guard in op.iter_guards():
            source = guard.get("source")
            if not source or ":" not in source:
                continue
            file, line = source.rsplit(":", 1)
            companion = os.path.abspath(file) + GUARD_SUFFIX
            files.add(companion)
            line_no = int(line)
            for passed, arc in ((True, true_arc(line_no)), (False, false_arc(line_no))):
                if op.sides[f"{path['name']}.{guard['name']}={'true' if passed else 'false'}"].count:
                    arcs.setdefault(companion, set()).add(arc)
    return arcs, files


def write(data: CoverageData, path: str | os.PathLike[str]) -> None:
    """Write ``data`` as a coverage.py data file at ``path`` (replacing it)."""
    from coverage import CoverageData as PyCoverageData

    arcs, files = measured(data)
    target = os.fspath(path)
    if os.path.exists(target):
        os.unlink(target)
    out = PyCoverageData(basename=target)
    out.add_arcs({file: sorted(a) for file, a in arcs.items()})
    out.touch_files(sorted(files - set(arcs)), PLUGIN_NAME)
    out.add_file_tracers({file: PLUGIN_NAME for file in files})
    out.write()


# --- the coverage.py plugin -------------------------------------------------------------------

try:
    from coverage.plugin import CoveragePlugin, FileReporter
except ImportError:  # pragma: no cover - coverage is a dependency
    CoveragePlugin = FileReporter = object  # type: ignore[misc, assignment]


class CudaReporter(FileReporter):  # type: ignore[misc, valid-type]
    """A .cu file: its statements are the body lines of its ``__global__`` functions."""

    def lines(self) -> set[int]:
        return {line for f in kernel_functions(self.filename) for line in f.lines}

    def source(self) -> str:
        with open(self.filename, encoding="utf-8") as fh:
            return fh.read()


class GuardReporter(FileReporter):  # type: ignore[misc, valid-type]
    """``<model file>.dispatch``: the model file's text, its guard lines as two-way branches."""

    def _model_file(self) -> str:
        return self.filename[: -len(GUARD_SUFFIX)]

    def source(self) -> str:
        with open(self._model_file(), encoding="utf-8") as fh:
            return fh.read()

    def _guard_lines(self) -> set[int]:
        return _guard_lines(self._model_file())

    def lines(self) -> set[int]:
        return self._guard_lines()

    def arcs(self) -> set[tuple[int, int]]:
        return {arc for line in self._guard_lines() for arc in (true_arc(line), false_arc(line))}

    def exit_counts(self) -> dict[int, int]:
        return {line: 2 for line in self._guard_lines()}

    def missing_arc_description(self, start: int, end: int, executed_arcs: Any = None) -> str:
        return f"the guard on line {start} was never {_side(start, end)}"

    def arc_description(self, start: int, end: int) -> str:
        return f"the guard on line {start} is {_side(start, end)}"


def true_arc(line: int) -> tuple[int, int]:
    """The arc that stands for the True side of the guard on ``line``."""
    return (line, -line)


def false_arc(line: int) -> tuple[int, int]:
    """The arc that stands for the False side of the guard on ``line``."""
    return (line, -line - 1)


def _side(start: int, end: int) -> str:
    return "True" if (start, end) == true_arc(start) else "False"


@lru_cache(maxsize=64)
def _guard_lines(model_file: str) -> set[int]:
    """The lines of a model file that declare a ``Guard(``: what its companion reports."""
    with open(model_file, encoding="utf-8") as fh:
        return {i for i, line in enumerate(fh, 1) if re.search(r"\bGuard\(", line)}


class DispatchCoveragePlugin(CoveragePlugin):  # type: ignore[misc, valid-type]
    """Reports the files :func:`write` records: kernel sources and guard companions."""

    def file_reporter(self, filename: str) -> Any:
        if filename.endswith(GUARD_SUFFIX):
            return GuardReporter(filename)
        return CudaReporter(filename)


def coverage_init(reg: Any, options: Any) -> None:
    """coverage.py's entry: ``plugins = ["nvfp4_harness.engine.coveragepy"]``."""
    reg.add_file_tracer(DispatchCoveragePlugin())
