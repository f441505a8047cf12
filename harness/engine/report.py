"""``python -m nvfp4_harness report DATA.json``: print or write a report from coverage data and
check requirements on it (exit 0: met; 1: unmet; 2: bad input).

The data carries its operators' declarations, so this works for any operator without
importing its model.
"""

from __future__ import annotations

import argparse
import sys

from nvfp4_harness.engine.analysis import Requirement
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.reports import KINDS, write_report
from nvfp4_harness.model import DispatchError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m nvfp4_harness report",
        description="Print or write a report from a dispatch-coverage JSON file (from "
                    "--dispatch-report=json:PATH or python -m nvfp4_harness combine).")
    parser.add_argument("data", help="dispatch-coverage JSON file")
    parser.add_argument("--format", default="term", choices=list(KINDS), help="report format (default term)")
    parser.add_argument("-o", "--output", metavar="DEST", default=None,
                        help="write the report here instead of standard output")
    parser.add_argument("--require", action="append", default=[], metavar="[OPERATOR:]PATH|all-reachable",
                        help="fail (exit 1) unless these paths were taken; all-reachable also requires every "
                             "reachable guard side (OPERATOR:all-reachable for one operator)")
    parser.add_argument("--fail-under", type=float, default=None, metavar="PCT",
                        help="fail (exit 1) when coverage is under PCT percent")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit 0: report written and requirements met; 1: requirements unmet; 2: bad input."""
    args = _parser().parse_args(argv)
    try:
        data = CoverageData.read(args.data)
        requirement = Requirement.parse(args.require).resolve(data.analyze().known_paths())
    except DispatchError as exc:
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
    else:
        print(f"Wrote {args.format} report to {args.output}", file=sys.stderr)
    failures = data.analyze().failures(requirement, args.fail_under)
    for message in failures:
        print(f"FAIL: {message}", file=sys.stderr)
    return 1 if failures else 0
