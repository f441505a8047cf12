"""Mark the mutants a session's CPU suites cannot judge as skipped, before the session runs.

    python scripts/mutation_skip.py SESSION.sqlite [--functions NAME,NAME ...]

Two kinds are skipped, each recorded with its reason (``cosmic-ray dump`` shows it):

**Type annotations.**
Every module of the project starts with ``from __future__ import annotations``, so no
annotation is ever evaluated: a mutant that turns ``Policy | None`` into ``Policy - None`` is
equivalent by construction. cosmic-ray still makes 13 of them per ``|`` and each one survives,
which costs a full run of the session's test command (about 10 s for the dispatcher) and
teaches nothing. The earlier sessions ran them and sorted them out afterwards (the
``annotation`` category of ``mutation_review.py``); this filter skips them up front instead.
A module without the future import keeps all its mutants: there annotations are evaluated.

Only a mutant whose whole span lies inside an annotation (a parameter's, a return's or an
annotated assignment's) is skipped; the value of ``x: T = value`` is still mutated.

**Functions that only run on a CUDA device** (``--functions``, named per session in
scripts/mutation_tool.sh). The sessions run on a CPU, where such a function is never called: every
mutant of it survives after a full run of the test command and says nothing about the suites.
The GPU suites exercise these functions on the H200; docs/mutation-testing.md counts the
mutants skipped this way, so they are reported as unjudged, never as killed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from cosmic_ray.work_db import use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult

Span = tuple[tuple[int, int], tuple[int, int]]


def annotation_spans(source: str) -> list[Span]:
    """The (line, column) spans of every annotation, or none when annotations are evaluated."""
    tree = ast.parse(source)
    postponed = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                    and any(alias.name == "annotations" for alias in node.names) for node in tree.body)
    if not postponed:
        return []
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [((a.lineno, a.col_offset), (a.end_lineno or a.lineno, a.end_col_offset or 0)) for a in found]


def inside(start: tuple[int, int], end: tuple[int, int], spans: list[Span]) -> bool:
    """True when the mutated span [start, end) lies within one annotation span."""
    return any(first <= tuple(start) and tuple(end) <= last for first, last in spans)


def function_spans(source: str, names: set[str]) -> list[Span]:
    """The spans of the module-level functions called ``names`` (all must exist: a renamed
    function must not silently bring its CUDA-only mutants back into a CPU session)."""
    tree = ast.parse(source)
    found = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    missing = sorted(names - set(found))
    if missing:
        raise SystemExit(f"no module-level function {missing} to skip")
    return [((found[n].lineno, 0), (found[n].end_lineno or found[n].lineno, 10**6)) for n in sorted(names)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("session", type=Path)
    parser.add_argument("--functions", default="", help="comma-separated CUDA-only functions whose mutants to skip")
    args = parser.parse_args(argv)
    names = {n.strip() for n in args.functions.split(",") if n.strip()}
    counts = {"annotation": 0, "CUDA-only": 0}
    spans: dict[Path, tuple[list[Span], list[Span]]] = {}
    with use_db(str(args.session)) as db:
        for item in list(db.pending_work_items):
            mutation = item.mutations[0]
            path = Path(mutation.module_path)
            if path not in spans:
                source = path.read_text()
                spans[path] = (annotation_spans(source), function_spans(source, names) if names else [])
            annotations, cuda_only = spans[path]
            if inside(mutation.start_pos, mutation.end_pos, annotations):
                kind, why = "annotation", "annotation (never evaluated)"
            elif inside(mutation.start_pos, mutation.end_pos, cuda_only):
                kind, why = "CUDA-only", "CUDA-only function (never called on the CPU)"
            else:
                continue
            db.set_result(item.job_id, WorkResult(output=why, worker_outcome=WorkerOutcome.SKIPPED))
            counts[kind] += 1
    print(", ".join(f"{n} {kind} mutants skipped" for kind, n in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
