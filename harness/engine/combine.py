"""``python -m nvfp4_harness combine A.json B.json ... -o merged.json``: merge dispatch-coverage runs.

A CPU CI job and a GPU job each write ``--dispatch-report=json:PATH``; combining sums their
counts and keeps every device, so reachability becomes the union over the devices (``native_fp4``
is reachable in the merged data as soon as one input ran on an sm_120 GPU). The merged file is
an ordinary coverage document: ``python -m nvfp4_harness report merged.json`` reports and checks it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable

from nvfp4_harness.engine.coverage import CoverageData, CoverageFileError


def combine(datas: Iterable[CoverageData]) -> CoverageData:
    """The sum of several runs (order does not matter for counts or examples)."""
    merged = CoverageData()
    for data in datas:
        merged.update(data)
    return merged


def combine_files(paths: Iterable[str | os.PathLike[str]]) -> CoverageData:
    """Read and combine coverage JSON files; CoverageFileError names the file at fault."""
    return combine(CoverageData.read(p) for p in paths)


def main(argv: list[str] | None = None) -> int:
    """Exit 0 on success, 2 when an input cannot be read or the output cannot be written."""
    parser = argparse.ArgumentParser(
        prog="python -m nvfp4_harness combine",
        description="Merge dispatch-coverage JSON files from several jobs or machines into one.")
    parser.add_argument("inputs", nargs="+", help="dispatch-coverage JSON files (--dispatch-report=json:PATH)")
    parser.add_argument("-o", "--output", required=True, metavar="MERGED.json", help="where to write the result")
    args = parser.parse_args(argv)
    try:
        merged = combine_files(args.inputs)
    except CoverageFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        merged.write(args.output)
    except OSError as exc:
        print(f"error: cannot write {args.output!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    analysis = merged.analyze()
    devices = ", ".join(d.label for d in analysis.devices)
    print(f"combined {len(args.inputs)} files ({merged.events} events; devices: {devices}) into "
          f"{args.output}: {analysis.covered}/{analysis.total} = {analysis.percent:.1f}%")
    return 0
