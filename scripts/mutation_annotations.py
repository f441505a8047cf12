"""Mark a cosmic-ray session's mutants of type annotations as skipped before it runs.

    python scripts/mutation_annotations.py SESSION.sqlite

Every module of the project starts with ``from __future__ import annotations``, so no
annotation is ever evaluated: a mutant that turns ``Policy | None`` into ``Policy - None`` is
equivalent by construction. cosmic-ray still makes 13 of them per ``|`` and each one survives,
which costs a full run of the session's test command (about 10 s for the dispatcher) and
teaches nothing. The earlier sessions ran them and sorted them out afterwards (the
``annotation`` category of ``mutation_review.py``); this filter skips them up front instead.
A module without the future import keeps all its mutants: there annotations are evaluated.

Only a mutant whose whole span lies inside an annotation (a parameter's, a return's or an
annotated assignment's) is skipped; the value of ``x: T = value`` is still mutated.
"""

from __future__ import annotations

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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    skipped = 0
    spans: dict[Path, list[Span]] = {}
    with use_db(argv[0]) as db:
        for item in db.pending_work_items:
            mutation = item.mutations[0]
            path = Path(mutation.module_path)
            if path not in spans:
                spans[path] = annotation_spans(path.read_text())
            if inside(mutation.start_pos, mutation.end_pos, spans[path]):
                db.set_result(item.job_id, WorkResult(output="annotation (never evaluated)",
                                                      worker_outcome=WorkerOutcome.SKIPPED))
                skipped += 1
    print(f"{skipped} annotation mutants skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
