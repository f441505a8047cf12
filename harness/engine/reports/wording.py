"""Phrases every report format shares, so they read alike."""

from __future__ import annotations

from nvfp4_harness.engine.analysis import Analysis, OperatorAnalysis, PathStatus, SideStatus
from nvfp4_harness.engine.data import CoverageData


def devices_line(data: CoverageData) -> str:
    if not data.devices:
        return "no events recorded"
    return ", ".join(f"{d.label} ({d.events} events)" for _, d in sorted(data.devices.items()))


def total_line(a: Analysis | OperatorAnalysis) -> str:
    return (f"{a.paths_hit}/{a.paths_reachable} reachable paths taken, "
            f"{a.sides_hit}/{a.sides_reachable} reachable guard sides seen: "
            f"{a.covered}/{a.total} = {a.percent:.1f}%")


def shortcut_line(op: OperatorAnalysis) -> str | None:
    if not op.shortcuts:
        return None
    counts = ", ".join(f"{k} {v}" for k, v in op.shortcuts.items())
    return f"shortcuts (no kernel launched, not path coverage): {counts}"


def operator_heading(op: OperatorAnalysis) -> str:
    where = f" ({op.source.rsplit(':', 1)[0]})" if op.source else ""
    return f"{op.name}{where}" + (f": {op.summary}" if op.summary else "")


def side_missing(sides: tuple[SideStatus, ...]) -> str:
    return ", ".join(str(s.passed) for s in sides if s.missed)


def path_missing(path: PathStatus) -> str:
    if not path.reachable:
        return f"unreachable: {path.reason}"
    return "never taken" if path.missed else ""


def tests_hitting(data: CoverageData, operator: str | None = None) -> int:
    tests: set[str] = set()
    for name, op in data.operators.items():
        if operator is None or name == operator:
            for tally in op.paths.values():
                tests.update(tally.tests)
    return len(tests)
