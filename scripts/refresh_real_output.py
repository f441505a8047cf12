"""Rewrite the "real output" blocks of README.md and docs/coverage.md from a fresh run.

    python scripts/refresh_real_output.py          # rewrite
    python scripts/refresh_real_output.py --check  # exit 1 when a block is stale (CI's test does this)

The block is the dispatch suites' term report on the CPU with the derandomized Hypothesis
profile CI uses, so it repeats run after run; a new dispatch test changes the counts, and this
script (not a hand edit) brings the documents up to date. So can a change that adds no test:
Hypothesis also draws literal constants it finds in the project's own Python modules, so a new
number in the harness (a table-decode range, say) moves the guard-side counts too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "coverage.md")
COMMAND = [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "-m", "dispatch",
           "--dispatch-report=term"]
#: the block: from the report's first line through its shortcuts line
BLOCK = re.compile(r"Dispatch path coverage, devices: cpu \(\d+ events\)\n.*?\nshortcuts \(no kernel launched[^\n]*",
                   re.S)


def fresh_block() -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # a nested run is its own
    env["HYPOTHESIS_PROFILE"] = "ci"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the documents show the CPU run, also when this runs on a GPU machine
    done = subprocess.run(COMMAND, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    found = BLOCK.search(done.stdout)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the dispatch suites did not produce a report (exit {done.returncode}):\n"
                           f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return found.group(0)


def stale_documents(block: str) -> list[Path]:
    return [doc for doc in DOCUMENTS if BLOCK.search(doc.read_text()).group(0) != block]


def main(argv: list[str]) -> int:
    block = fresh_block()
    stale = stale_documents(block)
    if "--check" in argv:
        for doc in stale:
            print(f"{doc.relative_to(ROOT)}: its real-output block is stale; run python scripts/refresh_real_output.py")
        return 1 if stale else 0
    for doc in stale:
        doc.write_text(BLOCK.sub(lambda _: block, doc.read_text(), count=1))
        print(f"rewrote the real-output block of {doc.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
