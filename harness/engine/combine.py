"""``python -m nvfp4_harness combine FILE|DIR ... -o merged.json``: merge coverage runs.

A CPU CI job and a GPU job each write ``--dispatch-report=json:PATH``; combining sums their
counts per operator and keeps every device, so reachability becomes the union over the devices
(``native_fp4`` is reachable in the merged data as soon as one input ran on an sm_120 GPU).
A folder argument stands for the ``*.json`` files in it (the output excluded). Inputs that
record one operator under different declarations are refused, naming both files.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.model import DataError, ModelConflict, NoDataError


def combine(datas: Iterable[CoverageData]) -> CoverageData:
    """The sum of several runs (order does not matter for counts or examples)."""
    merged = CoverageData()
    for data in datas:
        merged.update(data)
    return merged


def expand_inputs(inputs: Iterable[str | os.PathLike[str]],
                  exclude: str | os.PathLike[str] | None = None) -> list[Path]:
    """Files as given; folders replaced by their ``*.json`` files, sorted; ``exclude`` dropped."""
    skip = Path(exclude).resolve() if exclude is not None else None
    files: list[Path] = []
    for raw in inputs:
        path = Path(raw)
        found = sorted(path.glob("*.json")) if path.is_dir() else [path]
        files += [f for f in found if skip is None or f.resolve() != skip]
    if not files:
        raise NoDataError("no data to combine: the inputs hold no .json file")
    return files


def combine_files(paths: Iterable[str | os.PathLike[str]]) -> CoverageData:
    """Read and combine coverage JSON files; DataError names the file at fault."""
    merged = CoverageData()
    origins: dict[str, str] = {}
    for path in paths:
        data = CoverageData.read(path)
        try:
            merged.update(data)
        except ModelConflict as exc:
            first = ", ".join(sorted({origins[n] for n in data.operators if n in origins}))
            raise ModelConflict(f"{os.fspath(path)!r} and {first}: {exc}") from exc
        for name in data.operators:
            origins.setdefault(name, repr(os.fspath(path)))
    return merged


def main(argv: list[str] | None = None) -> int:
    """Exit 0 on success, 2 when an input cannot be read or the output cannot be written."""
    parser = argparse.ArgumentParser(
        prog="python -m nvfp4_harness combine",
        description="Merge dispatch-coverage JSON files from several jobs or machines into one.")
    parser.add_argument("inputs", nargs="+", help="dispatch-coverage JSON files, or folders of them")
    parser.add_argument("-o", "--output", required=True, metavar="MERGED.json", help="where to write the result")
    args = parser.parse_args(argv)
    try:
        files = expand_inputs(args.inputs, exclude=args.output)
        merged = combine_files(files)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        merged.write(args.output)
    except OSError as exc:
        print(f"error: cannot write {args.output!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    analysis = merged.analyze()
    print(f"combined {len(files)} files ({merged.events} events; devices: {', '.join(analysis.devices)}) into "
          f"{args.output}: {analysis.covered}/{analysis.total} = {analysis.percent:.1f}%")
    return 0
