"""``term`` and ``term-missing``: the terminal reports."""

from __future__ import annotations

from nvfp4_harness.engine.analysis import OperatorAnalysis
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.reports.wording import (
    devices_line,
    operator_heading,
    path_missing,
    shortcut_line,
    side_missing,
    tests_hitting,
    total_line,
)


def _operator_table(data: CoverageData, op: OperatorAnalysis) -> list[str]:
    rows: list[tuple[str, str, str, str, str, str]] = []
    for path in op.paths:
        rows.append((path.name, str(path.hits), str(path.tests), "", "", path_missing(path)))
        for guard in op.guards_of(path.name):
            sides = op.sides_of(path.name, guard)
            by_side = {s.passed: s.count for s in sides}
            rows.append(("  " + guard, "", "", str(by_side[True]), str(by_side[False]), side_missing(sides)))
    total = ("TOTAL", str(sum(p.hits for p in op.paths)), str(tests_hitting(data, op.name)), "", "",
             f"{op.percent:.1f}%")
    header = ("Path / guard", "Hits", "Tests", "True", "False", "Missing")
    width = max(len(r[0]) for r in rows + [header, total])
    nums = [max(len(r[i]) for r in rows + [header, total]) for i in range(1, 5)]

    def fmt(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(width)] + [row[i].rjust(nums[i - 1]) for i in range(1, 5)] + [row[5]]
        return "  ".join(cells).rstrip()

    rule = "-" * len(fmt(header[:5] + ("Missing",)))
    lines = [f"Operator {operator_heading(op)}", fmt(header), rule, *[fmt(r) for r in rows], rule, fmt(total),
             total_line(op)]
    shortcut = shortcut_line(op)
    if shortcut:
        lines.append(shortcut)
    for finding in op.findings:
        lines.append(f"FINDING {finding.message} ({finding.count} calls)")
    if len(op.per_device) > 1:
        lines += device_lines(op)
    return lines


def device_lines(op: OperatorAnalysis) -> list[str]:
    """Per path, where it was reached and where it cannot be; then each device's own coverage."""
    lines = ["By device:"]
    for path in op.paths:
        reached = ", ".join(f"{label} ({hits})" for label, hits in op.hits_by_device.get(path.name, {}).items())
        parts = [f"reached on {reached}" if reached else "reached on no device"]
        if path.unreachable_on:
            parts.append("unreachable on " + ", ".join(sorted(path.unreachable_on)))
        lines.append(f"  {path.name}: " + "; ".join(parts))
    for dev in op.per_device:
        lines.append(f"  {dev.label}: {dev.covered}/{dev.total} = {dev.percent:.1f}% of what it can reach")
    return lines


def render_term(data: CoverageData) -> str:
    """Per operator, per path and guard: hits, tests, True/False counts, what is missing."""
    analysis = data.analyze()
    lines = [f"Dispatch path coverage, devices: {devices_line(data)}"]
    for op in analysis.operators:
        lines += ["", *_operator_table(data, op)] if len(analysis.operators) > 1 else _operator_table(data, op)
    if not analysis.operators:
        lines.append("no operator recorded or declared")
    if len(analysis.operators) > 1:
        lines += ["", f"ALL {len(analysis.operators)} OPERATORS: {total_line(analysis)}"]
    return "\n".join(lines) + "\n"


def render_term_missing(data: CoverageData) -> str:
    """Only what was not reached (missed paths and guard sides, unreachable paths), findings,
    and the totals."""
    analysis = data.analyze()
    lines = [f"Dispatch path coverage, missing only, devices: {devices_line(data)}"]
    for op in analysis.operators:
        for path in op.missed_paths:
            lines.append(f"MISSED path {path.label}: never taken" + (f"  ({path.source})" if path.source else ""))
        for side in op.missed_sides:
            where = f"{side.source}: " if side.source else ""
            lines.append(f"MISSED guard side {side.operator}:{side.path}.{side.guard} == {side.passed}  "
                         f"({where}{side.description})")
        for finding in op.findings:
            lines.append(f"FINDING {op.name}: {finding.message} ({finding.count} calls)")
    if not analysis.missed_paths and not analysis.missed_sides:
        lines.append("nothing missed: every reachable path and guard side was reached")
    for op in analysis.operators:
        for path in op.unreachable_paths:
            lines.append(f"unreachable path {path.label}: {path.reason}")
    for op in analysis.operators:
        lines.append(f"TOTAL {op.name}: {total_line(op)}")
    if len(analysis.operators) > 1:
        lines.append(f"TOTAL all operators: {total_line(analysis)}")
    return "\n".join(lines) + "\n"
