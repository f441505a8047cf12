"""``markdown``: a table per operator, for CI step summaries."""

from __future__ import annotations

from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.reports.wording import devices_line, operator_heading, shortcut_line, tests_hitting


def render_markdown(data: CoverageData) -> str:
    analysis = data.analyze()
    missed = len(analysis.missed_paths), len(analysis.missed_sides)
    verdict = "all reachable items reached" if not any(missed) else \
        f"{missed[0]} paths and {missed[1]} guard sides missed"
    if analysis.findings:
        verdict += f", {len(analysis.findings)} findings"
    lines = [f"### Dispatch path coverage: {analysis.percent:.1f}% ({analysis.covered}/{analysis.total}), {verdict}",
             "", f"Devices: {devices_line(data)}"]
    for op in analysis.operators:
        lines += ["", f"#### {operator_heading(op)}", "",
                  "| Path | Hits | Tests | Guards seen (True / False) | Missing |", "|---|---:|---:|---|---|"]
        for path in op.paths:
            guards = []
            for guard in op.guards_of(path.name):
                sides = {s.passed: s for s in op.sides_of(path.name, guard)}
                guards.append(f"`{guard}` {sides[True].count} / {sides[False].count}")
            missing = [f"`{s.guard}` = {s.passed}" for s in op.sides_of(path.name) if s.missed]
            if path.missed:
                missing.insert(0, "**never taken**")
            if not path.reachable:
                missing.insert(0, f"unreachable: {path.reason}")
            lines.append(f"| `{path.name}` | {path.hits} | {path.tests} | {'<br>'.join(guards) or 'fallback'} "
                         f"| {'<br>'.join(missing)} |")
        lines.append(f"| **TOTAL** | {sum(p.hits for p in op.paths)} | {tests_hitting(data, op.name)} | "
                     f"{op.paths_hit}/{op.paths_reachable} paths, {op.sides_hit}/{op.sides_reachable} guard sides | "
                     f"**{op.percent:.1f}%** |")
        shortcut = shortcut_line(op)
        if shortcut:
            lines += ["", shortcut[0].upper() + shortcut[1:] + "."]
        for finding in op.findings:
            lines += ["", f"**Finding**: {finding.message} ({finding.count} calls)."]
        if len(op.per_device) > 1:
            labels = [d.label for d in op.per_device]
            lines += ["", "| Path | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
            for path in op.paths:
                cells = []
                for label in labels:
                    hits = op.hits_by_device.get(path.name, {}).get(label, 0)
                    cells.append("unreachable" if label in path.unreachable_on else str(hits))
                lines.append(f"| `{path.name}` | " + " | ".join(cells) + " |")
            lines.append("| **coverage** | " + " | ".join(f"{d.covered}/{d.total} = {d.percent:.1f}%"
                                                     for d in op.per_device) + " |")
    return "\n".join(lines) + "\n"
