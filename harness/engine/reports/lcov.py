"""``lcov``: each guard as branch records on the line it is declared on.

Per guard one ``DA`` line and two ``BRDA`` branches (block 0; branch 0 = True, 1 = False),
grouped by the file the guard is declared in. A guard never evaluated gets ``-`` for both
branches (lcov's "block not executed"); an evaluated one gets its side counts, 0 included.
The sides of an unreachable path and sides that cannot occur on the run's devices are left
out, so lcov's branch total equals the gate's guard-side total.
"""

from __future__ import annotations

from nvfp4_harness.engine.data import CoverageData


def render_lcov(data: CoverageData) -> str:
    analysis = data.analyze()
    by_file: dict[str, list[tuple[int, list]]] = {}
    for op in analysis.operators:
        for path in op.paths:
            for guard in op.guards_of(path.name):
                sides = op.sides_of(path.name, guard)
                source = sides[0].source
                if not source or ":" not in source:
                    continue
                file, line = source.rsplit(":", 1)
                by_file.setdefault(file, []).append((int(line), list(sides)))
    out = []
    for file, guards in sorted(by_file.items()):
        records, das = [], []
        found = hit = lines_hit = 0
        for line, sides in sorted(guards, key=lambda g: g[0]):
            evaluated = sum(s.count for s in sides)
            das.append(f"DA:{line},{evaluated}")
            lines_hit += evaluated > 0
            for branch, side in enumerate(sorted(sides, key=lambda s: not s.passed)):
                if not side.required:
                    continue
                records.append(f"BRDA:{line},0,{branch},{side.count if evaluated else '-'}")
                found += 1
                hit += side.count > 0
        out += ["TN:dispatch", f"SF:{file}", *records, f"BRF:{found}", f"BRH:{hit}", *das,
                f"LF:{len(das)}", f"LH:{lines_hit}", "end_of_record"]
    return "\n".join(out) + "\n"
