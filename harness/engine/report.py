"""Dispatch-coverage reports, one small renderer per format, and ``python -m nvfp4_harness report``.

Every renderer takes a :class:`~nvfp4_harness.engine.coverage.CoverageData` and returns text; none of them
computes coverage itself (that is :meth:`CoverageData.analyze`), so all formats agree.

Formats (``--dispatch-report=TYPE[:DEST]`` in pytest, ``--format TYPE -o DEST`` here):

``term``          per path: hits, tests that hit it, each guard's True/False counts, what is
                  missing; unreachable paths with the reason; a TOTAL line. To the terminal.
``term-missing``  only what was not reached (missed paths, missed guard sides, unreachable paths).
``json``          the data itself, schema below; the input of ``combine`` and ``report``.
``markdown``      a table for CI step summaries (e.g. ``markdown:$GITHUB_STEP_SUMMARY``).
``lcov``          each guard of ``kernels/paths.py`` as two branch records (True, False) on the
                  line where it is declared, so Codecov and editors show which sides were taken.

JSON schema, version 1 (``"format": "nvfp4-dispatch-coverage"``)::

    {
      "format": "nvfp4-dispatch-coverage",   # identifies the document
      "version": 1,                          # SCHEMA_VERSION; readers refuse other versions
      "runs": [{"label": str, "events": int}],          # one entry per run combined in
      "devices": [{"name": str,                          # "cpu" or the GPU's name
                   "compute_capability": [int, int] | null,
                   "events": int}],                      # events (shortcuts too) on the device
      "paths": {                                         # every declared path, PATH_ORDER
        "<path>": {"hits": int,                          # calls that took the path
                   "forced": int,                        # of which forced by Policy.force_path
                   "unattributed": int,                  # of which outside any test
                   "tests": {"<node id>": int},          # hits per test
                   "devices": {"<device label>": int}}   # hits per device
      },
      "guards": {                                        # every declared guard
        "<path>.<condition>": {
          "path": str, "condition": str,                 # informational, from nvfp4_kernels.paths
          "line": int,                                   # declaration line in kernels/paths.py
          "true":  {"count": int, "examples": [str]},    # times the guard held; <= 3 test ids,
          "false": {"count": int, "examples": [str]}     # the lexicographically smallest
        }
      },
      "shortcuts": {"empty": int, "bias_only": int},     # launch-free outcomes, not coverage
      "summary": {                                       # derived on write, ignored on read
        "devices": [str], "paths_reachable": int, "paths_hit": int,
        "guard_sides_reachable": int, "guard_sides_hit": int,
        "covered": int, "total": int, "percent": float,  # covered / total * 100
        "unreachable_paths": {"<path>": "<reason>"},
        "missed_paths": [str], "missed_guard_sides": ["<guard>=True|False"]
      }
    }

Counts are additive, so ``combine`` sums them; ``summary`` is recomputed from the combined
counts, with reachability judged on the union of the devices.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

import nvfp4_kernels.paths
from nvfp4_harness.engine.coverage import (
    Analysis,
    CoverageData,
    CoverageFileError,
    PathStatus,
    Requirement,
    SideStatus,
    UnknownPathError,
)

Renderer = Callable[[CoverageData], str]


# --- shared wording -------------------------------------------------------------------------


def _devices_line(data: CoverageData, analysis: Analysis) -> str:
    if not data.devices:
        return "no events recorded; reachability judged on the CPU"
    return ", ".join(f"{d.label} ({d.events} events)" for _, d in sorted(data.devices.items()))


def _total_line(analysis: Analysis) -> str:
    return (f"{analysis.paths_hit}/{analysis.paths_reachable} reachable paths taken, "
            f"{analysis.sides_hit}/{analysis.sides_reachable} reachable guard sides seen: "
            f"{analysis.covered}/{analysis.total} = {analysis.percent:.1f}%")


def _shortcut_line(analysis: Analysis) -> str | None:
    if not analysis.shortcuts:
        return None
    counts = ", ".join(f"{k} {v}" for k, v in analysis.shortcuts.items())
    return f"shortcuts (no kernel launched, not path coverage): {counts}"


def _side_missing(sides: tuple[SideStatus, ...]) -> str:
    return ", ".join(str(s.passed) for s in sides if s.missed)


def _path_missing(path: PathStatus) -> str:
    if not path.reachable:
        return f"unreachable: {path.reason}"
    return "never taken" if path.missed else ""


def _tests_hitting_any(data: CoverageData) -> int:
    tests: set[str] = set()
    for tally in data.paths.values():
        tests.update(tally.tests)
    return len(tests)


def paths_source() -> str:
    """``kernels/paths.py`` as lcov and messages name it: relative to the working directory."""
    source = os.path.abspath(nvfp4_kernels.paths.__file__)
    relative = os.path.relpath(source)
    return source if relative.startswith("..") else relative.replace(os.sep, "/")


# --- renderers ------------------------------------------------------------------------------


def render_term(data: CoverageData) -> str:
    """Per path and guard: hits, tests, True/False counts, what is missing; then TOTAL."""
    analysis = data.analyze()
    rows: list[tuple[str, str, str, str, str, str]] = []
    for path in analysis.paths:
        rows.append((path.name, str(path.hits), str(path.tests), "", "", _path_missing(path)))
        for guard in nvfp4_kernels.paths.PATHS[path.name].guards:
            sides = tuple(s for s in analysis.sides_of(path.name) if s.guard == guard.name)
            by_side = {s.passed: s.count for s in sides}
            rows.append(("  " + guard.name.split(".", 1)[1], "", "", str(by_side[True]), str(by_side[False]),
                         _side_missing(sides)))
    total = ("TOTAL", str(sum(p.hits for p in analysis.paths)), str(_tests_hitting_any(data)), "", "",
             f"{analysis.percent:.1f}%")
    header = ("Path / guard", "Hits", "Tests", "True", "False", "Missing")
    width = max(len(r[0]) for r in rows + [header, total])
    nums = [max(len(r[i]) for r in rows + [header, total]) for i in range(1, 5)]

    def fmt(row: tuple[str, ...]) -> str:
        cells = [row[0].ljust(width)] + [row[i].rjust(nums[i - 1]) for i in range(1, 5)] + [row[5]]
        return "  ".join(cells).rstrip()

    rule = "-" * len(fmt(header[:5] + ("Missing",)))
    lines = [f"Dispatch path coverage, devices: {_devices_line(data, analysis)}", fmt(header), rule]
    lines += [fmt(r) for r in rows]
    lines += [rule, fmt(total), _total_line(analysis)]
    shortcut = _shortcut_line(analysis)
    if shortcut:
        lines.append(shortcut)
    return "\n".join(lines) + "\n"


def render_term_missing(data: CoverageData) -> str:
    """Only what was not reached: missed paths and guard sides, unreachable paths; then TOTAL."""
    analysis = data.analyze()
    source = paths_source()
    lines = [f"Dispatch path coverage, missing only, devices: {_devices_line(data, analysis)}"]
    for path in analysis.missed_paths:
        lines.append(f"MISSED path {path.name}: never taken")
    for side in analysis.missed_sides:
        lines.append(f"MISSED guard side {side.guard} == {side.passed}  ({source}:{side.line}: {side.condition})")
    if not analysis.missed_paths and not analysis.missed_sides:
        lines.append("nothing missed: every reachable path and guard side was reached")
    for path in analysis.unreachable_paths:
        lines.append(f"unreachable path {path.name}: {path.reason}")
    lines.append("TOTAL " + _total_line(analysis))
    return "\n".join(lines) + "\n"


def render_markdown(data: CoverageData) -> str:
    """A Markdown section for CI step summaries."""
    analysis = data.analyze()
    verdict = "all reachable items reached" if not (analysis.missed_paths or analysis.missed_sides) \
        else f"{len(analysis.missed_paths)} paths and {len(analysis.missed_sides)} guard sides missed"
    lines = [
        f"### Dispatch path coverage: {analysis.percent:.1f}% ({analysis.covered}/{analysis.total}), {verdict}",
        "",
        f"Devices: {_devices_line(data, analysis)}",
        "",
        "| Path | Hits | Tests | Guards seen (True / False) | Missing |",
        "|---|---:|---:|---|---|",
    ]
    for path in analysis.paths:
        guards = []
        for guard in nvfp4_kernels.paths.PATHS[path.name].guards:
            sides = {s.passed: s for s in analysis.sides_of(path.name) if s.guard == guard.name}
            guards.append(f"`{guard.name.split('.', 1)[1]}` {sides[True].count} / {sides[False].count}")
        missing = [f"`{s.guard}` = {s.passed}" for s in analysis.sides_of(path.name) if s.missed]
        if path.missed:
            missing.insert(0, "**never taken**")
        if not path.reachable:
            missing.insert(0, f"unreachable: {path.reason}")
        lines.append(f"| `{path.name}` | {path.hits} | {path.tests} | {'<br>'.join(guards) or 'fallback'} "
                     f"| {'<br>'.join(missing)} |")
    lines.append(f"| **TOTAL** | {sum(p.hits for p in analysis.paths)} | {_tests_hitting_any(data)} | "
                 f"{analysis.paths_hit}/{analysis.paths_reachable} paths, "
                 f"{analysis.sides_hit}/{analysis.sides_reachable} guard sides | "
                 f"**{analysis.percent:.1f}%** |")
    shortcut = _shortcut_line(analysis)
    if shortcut:
        lines += ["", shortcut[0].upper() + shortcut[1:] + "."]
    return "\n".join(lines) + "\n"


def render_lcov(data: CoverageData) -> str:
    """lcov tracefile: per guard one DA line and two BRDA branches (block 0; 0 = True, 1 = False).

    A guard never evaluated gets ``-`` for both branches (lcov's "block not executed"); one that
    was evaluated gets its side counts, 0 included. BRH counts branches with a count above 0.
    """
    found = hit = lines_hit = 0
    records = []
    das = []
    for guard in sorted(nvfp4_kernels.paths.GUARDS, key=lambda g: g.line):
        sides = data.guards[guard.name]
        evaluated = sides[True].count + sides[False].count
        das.append(f"DA:{guard.line},{evaluated}")
        lines_hit += evaluated > 0
        for branch, passed in enumerate((True, False)):
            count = sides[passed].count
            records.append(f"BRDA:{guard.line},0,{branch},{count if evaluated else '-'}")
            found += 1
            hit += count > 0
    out = ["TN:nvfp4_dispatch", f"SF:{paths_source()}", *records, f"BRF:{found}", f"BRH:{hit}",
           *das, f"LF:{len(das)}", f"LH:{lines_hit}", "end_of_record"]
    return "\n".join(out) + "\n"


def render_json(data: CoverageData) -> str:
    """The data document (schema in this module's docstring)."""
    return data.dumps()


RENDERERS: dict[str, Renderer] = {
    "term": render_term,
    "term-missing": render_term_missing,
    "json": render_json,
    "markdown": render_markdown,
    "lcov": render_lcov,
}
#: Where a file format goes when no DEST is given; terminal formats print instead.
DEFAULT_DEST: dict[str, str | None] = {
    "term": None,
    "term-missing": None,
    "json": "dispatch-coverage.json",
    "markdown": "dispatch-coverage.md",
    "lcov": "dispatch-coverage.lcov",
}


def parse_report_spec(spec: str) -> tuple[str, str | None]:
    """``"TYPE[:DEST]"`` -> ``(TYPE, DEST or its default)``; ValueError names the valid types."""
    kind, sep, dest = spec.partition(":")
    kind = kind.strip()
    if kind not in RENDERERS:
        raise ValueError(f"unknown dispatch report type {kind!r} in {spec!r}; valid types: "
                         f"{', '.join(RENDERERS)} (file formats take :DEST, e.g. json:coverage.json)")
    if sep and not dest:
        raise ValueError(f"report {spec!r} has an empty destination; write {kind}:PATH or just {kind}")
    return kind, (dest if sep else DEFAULT_DEST[kind])


def write_report(data: CoverageData, kind: str, dest: str | None) -> str:
    """Render ``kind``; write it to ``dest`` (``-`` or None: return it for the terminal only)."""
    text = RENDERERS[kind](data)
    if dest not in (None, "-"):
        directory = os.path.dirname(os.path.abspath(dest))
        os.makedirs(directory, exist_ok=True)
        with open(dest, "w", encoding="utf-8") as fh:
            fh.write(text)
    return text


# --- python -m nvfp4_harness report ---------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nvfp4_harness report",
        description="Print or write a report from a dispatch-coverage JSON file (from "
                    "--dispatch-report=json:PATH or python -m nvfp4_harness combine).")
    parser.add_argument("data", help="dispatch-coverage JSON file")
    parser.add_argument("--format", default="term", choices=list(RENDERERS), help="report format (default term)")
    parser.add_argument("-o", "--output", metavar="DEST", default=None,
                        help="write the report here instead of standard output")
    parser.add_argument("--require", action="append", default=[], metavar="PATH[,PATH...]|all-reachable",
                        help="fail (exit 1) unless these paths were taken; all-reachable also requires "
                             "every reachable guard side")
    parser.add_argument("--fail-under", type=float, default=None, metavar="PCT",
                        help="fail (exit 1) when coverage is under PCT percent")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit 0: report written and requirements met; 1: requirements unmet; 2: bad input."""
    args = _parser().parse_args(argv)
    try:
        requirement = Requirement.parse(args.require)
        data = CoverageData.read(args.data)
    except (UnknownPathError, CoverageFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.fail_under is not None and not 0 <= args.fail_under <= 100:
        print(f"error: --fail-under must be a percentage between 0 and 100, got {args.fail_under:g}",
              file=sys.stderr)
        return 2
    try:
        text = write_report(data, args.format, args.output)
    except OSError as exc:
        print(f"error: cannot write {args.output!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.output in (None, "-"):
        sys.stdout.write(text)
    failures = data.analyze().failures(requirement, args.fail_under)
    for message in failures:
        print(f"FAIL: {message}", file=sys.stderr)
    return 1 if failures else 0
