"""Byte tables: every packed FP4 byte and every E4M3 byte with the bits they decode to.

``python -m nvfp4_harness tables --write`` regenerates ``fixtures/tables`` from the project's own
decoder (:mod:`nvfp4_kernels.nvfp4`) and records each file's SHA-256 in ``SHA256SUMS``;
``python -m nvfp4_harness tables`` (``--check``) recomputes and compares. The suites compare the
committed files with an independent computation (ml_dtypes), and the GPU check compares the
FP4 table with NVIDIA's own ``__nv_cvt_fp4x2_to_halfraw2`` run on the device.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import ml_dtypes
import numpy as np
from nvfp4_kernels.nvfp4 import E2M1_TABLE, E4M3_TABLE

TABLE_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "tables"
SUMS_FILE = "SHA256SUMS"


def fp4x2_bits(dtype: str) -> np.ndarray:
    """uint16 [256, 2]: (low nibble, high nibble) of each byte as fp16/bf16 bits (project decoder)."""
    target = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}[dtype]
    byte = np.arange(256)
    low = E2M1_TABLE[byte & 0x0F].astype(target).view(np.uint16)
    high = E2M1_TABLE[byte >> 4].astype(target).view(np.uint16)
    return np.stack([low, high], axis=1)


def e4m3_bits() -> np.ndarray:
    """uint32 [256]: each E4M3FN byte as float32 bits (project decoder)."""
    return E4M3_TABLE.view(np.uint32).copy()


def render_fp4x2(bits: np.ndarray) -> str:
    lines = ["byte,low_bits,high_bits"]
    lines += [f"0x{b:02x},0x{lo:04x},0x{hi:04x}" for b, (lo, hi) in enumerate(bits.tolist())]
    return "\n".join(lines) + "\n"


def render_e4m3(bits: np.ndarray) -> str:
    return "\n".join(["byte,float32_bits"] + [f"0x{b:02x},0x{v:08x}" for b, v in enumerate(bits.tolist())]) + "\n"


def parse_table(text: str) -> np.ndarray:
    """Parse a table file back into an integer array [256, columns] (the byte column dropped)."""
    lines = [line for line in text.strip().splitlines() if line and not line.startswith("#")]
    rows = [line.split(",") for line in lines[1:]]  # lines[0] is the column header
    if len(rows) != 256 or any(int(r[0], 16) != i for i, r in enumerate(rows)):
        raise ValueError("a byte table must list bytes 0x00..0xff in order, one per line")
    return np.array([[int(v, 16) for v in r[1:]] for r in rows], dtype=np.uint64)


def expected_files() -> dict[str, str]:
    """File name -> contents, computed from the project's decoder."""
    return {
        "e2m1x2_to_float16.csv": render_fp4x2(fp4x2_bits("float16")),
        "e2m1x2_to_bfloat16.csv": render_fp4x2(fp4x2_bits("bfloat16")),
        "e4m3_to_float32.csv": render_e4m3(e4m3_bits()),
    }


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write(directory: Path = TABLE_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    files = expected_files()
    for name, text in files.items():
        (directory / name).write_text(text)
    (directory / SUMS_FILE).write_text("".join(f"{sha256_text(t)}  {n}\n" for n, t in sorted(files.items())))


def check(directory: Path = TABLE_DIR) -> list[str]:
    """Problems found (empty when the committed tables match the decoder and their sums)."""
    problems = []
    sums_path = directory / SUMS_FILE
    sums = {}
    if sums_path.exists():
        sums = {line.split()[1]: line.split()[0] for line in sums_path.read_text().splitlines() if line}
    for name, text in expected_files().items():
        path = directory / name
        if not path.exists():
            problems.append(f"{path} is missing; run `python -m nvfp4_harness tables --write`")
            continue
        stored = path.read_text()
        if stored != text:
            problems.append(f"{path} differs from what nvfp4_kernels.nvfp4 decodes")
        if sums.get(name) != sha256_text(stored):
            problems.append(f"{path}: SHA-256 does not match {sums_path.name}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nvfp4_harness tables", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="regenerate the tables and their sums")
    parser.add_argument("--dir", type=Path, default=TABLE_DIR, help="table directory (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.write:
        write(args.dir)
        print(f"wrote byte tables to {args.dir}")
        return 0
    problems = check(args.dir)
    for problem in problems:
        print(problem)
    print("byte tables OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0
