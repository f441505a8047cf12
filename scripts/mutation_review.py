"""Review the survivors of a cosmic-ray session (scripts/mutation_tool.sh) and write the report.

    python scripts/mutation_review.py WORKDIR/guards WORKDIR/dispatcher [--recheck] [-o review.md]

Each surviving mutant is sorted into a category by what its diff changes:

* ``annotation``: a type annotation (never evaluated: ``from __future__ import annotations``),
  an equivalent mutant (sessions made since scripts/mutation_skip.py skip these up front);
* ``cuda-only``: a mutant of a function only a CUDA device calls, run before the session skipped
  them (the CPU suites cannot reach it);
* ``message``: only the text of an error, a detail or a report line;
* ``logic``: anything else, a gap in the tests unless shown equivalent.

The mutants scripts/mutation_skip.py skipped are counted by their reason, never as killed.

``--recheck`` applies every survivor again in its copy (``cosmic-ray apply``), after copying
this checkout's ``suites/`` into it, runs the session's test command and restores the file: the
survivors the tests written since the run now kill are reported as such.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
CATEGORIES = ("annotation", "cuda-only", "message", "logic")


def session(copy: Path) -> list[dict]:
    """Every job of the copy's session: its mutation and its outcome."""
    dump = subprocess.run(["cosmic-ray", "dump", str(copy / "session.sqlite")], capture_output=True, text=True,
                          check=True)
    jobs = []
    for line in dump.stdout.splitlines():
        job, result = json.loads(line)
        mutation = job["mutations"][0]
        jobs.append({"module": mutation["module_path"], "operator": mutation["operator_name"],
                     "occurrence": mutation["occurrence"],
                     "line": diff_line((result or {}).get("diff") or "") or mutation["start_pos"][0],
                     "function": mutation.get("definition_name") or "", "outcome": (result or {}).get("test_outcome"),
                     "diff": (result or {}).get("diff") or "", "skipped": _skip_reason(result)})
    return jobs


def _skip_reason(result: dict | None) -> str:
    """"annotation" / "CUDA-only" for a mutant scripts/mutation_skip.py skipped, else ""."""
    if not result or result.get("worker_outcome") != "skipped":
        return ""
    return (result.get("output") or "").split(" ")[0]


def cuda_only_functions(jobs: list[dict]) -> set[str]:
    """The functions the session skipped as CUDA-only."""
    return {j["function"] for j in jobs if j["skipped"] == "CUDA-only"}


def diff_line(diff: str) -> int | None:
    """The line the applied mutation changed, read from its diff (what the suites faced).

    A job's ``start_pos`` is where ``cosmic-ray init`` planned it; cosmic-ray applies the
    operator's N-th occurrence in the file as it is when the job runs. The two part when the
    module changed after init, for instance when an interrupted ``cosmic-ray exec`` left its
    mutant in the copy (the file is restored only when a job finishes): the occurrences of that
    operator then shift by one. :func:`main` warns when the copy's module differs from this
    checkout's.
    """
    lines = diff.splitlines()
    for index, text in enumerate(lines):
        found = re.match(r"@@ -(\d+)", text)
        if found:
            line = int(found.group(1))
            for body in lines[index + 1:]:
                if body.startswith("-"):
                    return line
                line += 1
    return None


def changed_lines(diff: str) -> tuple[str, str]:
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return "\n".join(removed), "\n".join(added)


def category(job: dict, cuda_only: set[str] = frozenset()) -> str:
    """annotation / cuda-only / message / logic, from the changed line and its function."""
    before, after = changed_lines(job["diff"])
    if before.count("| None") > after.count("| None"):  # the `|` of an annotation `X | None`
        return "annotation"
    if job["function"] in cuda_only:
        return "cuda-only"
    if re.search(r"[\"']", before) and _inside_string_change(before, after):
        return "message"
    return "logic"


def _inside_string_change(before: str, after: str) -> bool:
    """True when the two lines differ only inside string literals or f-string fields of them."""
    strip = lambda s: re.sub(r"f?\"[^\"]*\"|f?'[^']*'", "S", s)  # noqa: E731
    return strip(before) == strip(after)


def recheck(copy: Path, job: dict) -> bool:
    """Apply the mutation again with today's tests; True when they kill it."""
    config = tomllib.loads((copy / "cr.toml").read_text())["cosmic-ray"]
    module = copy / job["module"]
    pristine = module.read_text()
    try:
        subprocess.run(["cosmic-ray", "apply", job["module"], job["operator"], str(job["occurrence"])], cwd=copy,
                       check=True, capture_output=True)
        done = subprocess.run(config["test-command"], shell=True, cwd=copy, capture_output=True, timeout=300)
        return done.returncode != 0
    finally:
        module.write_text(pristine)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("copies", nargs="+", type=Path)
    parser.add_argument("--recheck", action="store_true")
    parser.add_argument("-o", "--output", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = []
    for copy in args.copies:
        if args.recheck:
            shutil.rmtree(copy / "suites")
            shutil.copytree(ROOT / "suites", copy / "suites")
        jobs = session(copy)
        cuda_only = cuda_only_functions(jobs)
        skipped = Counter(j["skipped"] for j in jobs if j["skipped"])
        done = [j for j in jobs if j["outcome"] is not None]
        survivors = [j for j in done if j["outcome"] == "survived"]
        by_category = Counter(category(j, cuda_only) for j in survivors)
        judged = [j for j in survivors if category(j, cuda_only) in ("message", "logic")]
        killed_now = []
        if args.recheck:
            killed_now = [job for job in judged if recheck(copy, job)]
        module = jobs[0]["module"] if jobs else "?"
        if jobs and (copy / module).read_text() != (ROOT / module).read_text():
            lines += [f"WARNING: {copy / module} differs from this checkout's {module} (a run still in "
                      f"progress, a changed checkout, or a mutant an interrupted run left behind): the results "
                      f"may not be this module's.", ""]
        pending = len(jobs) - len(done) - sum(skipped.values())
        lines += [f"## `{module}`", "",
                  f"{len(jobs)} mutants, " + "".join(f"{n} {why} skipped, " for why, n in sorted(skipped.items()))
                  + (f"{pending} not run yet, " if pending else "")
                  + f"{len(done)} run, {len(done) - len(survivors)} killed by the suites, "
                  f"{len(survivors)} survived: " + ", ".join(f"{by_category[c]} {c}" for c in CATEGORIES) + ".",
                  ""]
        if args.recheck:
            now = Counter(category(j, cuda_only) for j in killed_now)
            lines += [f"Re-applied one by one (`cosmic-ray apply`) against the tests written after the run, "
                      f"{len(killed_now)} of the {len(judged)} message and logic "
                      f"survivors are now killed ({now['message']} message, {now['logic']} logic).", ""]
        left = [j for j in survivors if category(j, cuda_only) != "annotation" and j not in killed_now]
        if left:
            lines += ["Survivors left (line, function, category, operator: the change):", ""]
            for job in sorted(left, key=lambda j: (j["line"], j["operator"])):
                before, after = changed_lines(job["diff"])
                lines.append(f"- {job['line']} `{job['function']}` {category(job, cuda_only)} "
                             f"{job['operator'].split('/')[-1]}: `{before.strip()[:90]}` -> `{after.strip()[:90]}`")
            lines.append("")
    text = "\n".join(lines) + "\n"
    if args.output:
        args.output.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
