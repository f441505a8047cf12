"""The mutation table still applies to the current sources, and the runner scores correctly.

The full mutation run (``python -m nvfp4_harness mutate``) runs the dispatch suites once per mutant
and is a separate, slow command; these checks are cheap.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from nvfp4_harness.nvfp4 import mutation
from nvfp4_harness.nvfp4.mutation import MUTATIONS, Mutation, StaleMutation

REQUIRED_BUGS = ("nibble-swap", "scale-index-off-by-one", "mid-chunk-advance-dropped", "negative-zero-lost",
                 "gemv-fp16-accumulation", "gemv-bias-after-rounding")


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_exactly_once_and_compiles(m: Mutation) -> None:
    problems = mutation.check_definitions(mutation.PROJECT_ROOT, [m])
    assert problems == [], problems
    source = (mutation.PROJECT_ROOT / m.file).read_text()
    assert m.apply_to(source) != source
    assert m.file.startswith("kernels/"), "mutations plant bugs in the operator, not in the harness"


def test_the_table_covers_every_required_bug_class() -> None:
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))
    for bug in REQUIRED_BUGS:
        assert any(name.startswith(bug) for name in names), f"no mutation for {bug}"


def _tool_sessions() -> dict[str, str]:
    """module -> session name, from scripts/mutation_tool.sh's ``modules`` table."""
    script = (mutation.PROJECT_ROOT / "scripts" / "mutation_tool.sh").read_text()
    table = re.search(r"declare -A modules=\((.*?)\)\n", script, re.S)
    assert table is not None, "mutation_tool.sh no longer declares its modules"
    return {module: name for name, module in re.findall(r'\[(\w+)\]="([^"]+)"', table.group(1))}


def _reviewed_modules() -> set[str]:
    """The modules with a row in docs/mutation-testing.md's results table (run and reviewed)."""
    doc = (mutation.PROJECT_ROOT / "docs" / "mutation-testing.md").read_text()
    return set(re.findall(r"^\| `([\w/]+\.py)` \| \d+ \|", doc, re.M))


def test_python_table_entries_only_for_modules_the_tool_has_not_covered_yet() -> None:
    """The tool replaces the hand-written Python mutants: an entry for a module whose cosmic-ray
    session has been run and reviewed is a duplicate that breaks on every edit of its search
    text; an entry for a module with no session at all would never be replaced."""
    sessions, reviewed = _tool_sessions(), _reviewed_modules()
    assert reviewed, "docs/mutation-testing.md has no results rows"
    assert reviewed <= set(sessions), f"results for modules the script does not run: {reviewed - set(sessions)}"
    for m in MUTATIONS:
        assert m.file in sessions, f"{m.name}: {m.file} has no cosmic-ray session in scripts/mutation_tool.sh"
        assert m.file not in reviewed, (f"{m.name}: the {sessions[m.file]} session covers {m.file}; "
                                        f"drop the hand-written entry")


def test_a_stale_pattern_is_an_error_not_a_catch() -> None:
    m = Mutation("demo", "x.py", "demo", "a = 1", "a = 2")
    with pytest.raises(StaleMutation, match="occurs 0 times"):
        m.apply_to("b = 1\n")
    with pytest.raises(StaleMutation, match="occurs 2 times"):
        m.apply_to("a = 1\na = 1\n")


def _toy_project(root: Path) -> Path:
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "__init__.py").write_text("def add(a, b):\n    return a + b\n\ndef unused():\n    return 0\n")
    (root / "suites").mkdir()
    (root / "suites" / "test_toy.py").write_text(textwrap.dedent("""
        import pytest
        from toy import add
        pytestmark = pytest.mark.dispatch
        def test_add():
            assert add(2, 3) == 5
    """))
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    dispatch: toy\n")
    return root


def test_runner_scores_caught_survived_and_stale_mutants_in_a_copy(tmp_path: Path) -> None:
    root = _toy_project(tmp_path / "toyproject")
    toys = [
        Mutation("add-sub", "toy/__init__.py", "adds wrongly", "return a + b", "return a - b"),
        Mutation("dead-code", "toy/__init__.py", "changes unused code", "return 0", "return 1"),
        Mutation("stale", "toy/__init__.py", "matches nothing", "return a * b", "return a"),
    ]
    lines: list[str] = []
    base, outcomes = mutation.run(toys, root, ["-p", "no:randomly"], timeout=120, log=lines.append)
    assert base is not None and base.status == "passed"
    assert [(o.name, o.status) for o in outcomes] == [("add-sub", "caught"), ("dead-code", "SURVIVED"),
                                                     ("stale", "STALE")]
    assert "test_add" in outcomes[0].detail
    table = mutation.format_table(outcomes, toys)
    assert "score: 1 / 3 mutants caught" in table
    assert (root / "toy" / "__init__.py").read_text().count("return a + b") == 1, "the original is never touched"


def test_cli_list_and_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutation.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(m.name in listed for m in MUTATIONS)
    assert mutation.main(["--check"]) == 0
    with pytest.raises(SystemExit):
        mutation.main(["--only", "no-such-mutant"])


def test_parts_cover_the_table_once_in_order() -> None:
    table = list(mutation.GPU_MUTATIONS)
    for n in range(1, 6):
        parts = [mutation.table_part(table, f"{k}/{n}") for k in range(1, n + 1)]
        assert [m for part in parts for m in part] == table, n
        assert max(map(len, parts)) - min(map(len, parts)) <= 1, n
    for bad in ("0/2", "3/2", "1", "a/b", "1/0"):
        with pytest.raises(ValueError, match="K/N"):
            mutation.table_part(table, bad)
    with pytest.raises(SystemExit):
        mutation.main(["--part", "3/2", "--list"])


def test_a_run_cut_off_keeps_the_outcomes_it_has(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--out is rewritten after the baseline and after each mutant, marked incomplete, so a run
    killed by a time limit (the device's, say) leaves what it measured; the last write says
    complete."""
    out = tmp_path / "outcomes.json"
    names = [m.name for m in mutation.table_part(list(MUTATIONS), "1/1")[:2]]
    seen: list[dict] = []

    def cut_off_run(mutations, *args, progress=None, **kwargs):
        base = mutation.Outcome("(none: baseline)", "passed", 1.0, "")
        progress(base, [])
        first = [mutation.Outcome(mutations[0].name, "caught", 2.0, "FAILED x")]
        progress(base, first)
        seen.append(json.loads(out.read_text()))
        raise KeyboardInterrupt  # the time limit

    monkeypatch.setattr(mutation, "run", cut_off_run)
    with pytest.raises(KeyboardInterrupt):
        mutation.main(["--only", ",".join(names), "--out", str(out)])
    record = json.loads(out.read_text())
    assert record == seen[0] and record["complete"] is False and record["planned"] == names
    assert [(r["name"], r["status"]) for r in record["mutants"]] == [(names[0], "caught")]
    assert record["baseline"]["status"] == "passed"

    def whole_run(mutations, *args, progress=None, **kwargs):
        base = mutation.Outcome("(none: baseline)", "passed", 1.0, "")
        outcomes = [mutation.Outcome(m.name, "caught", 2.0, "FAILED x") for m in mutations]
        progress(base, outcomes)
        return base, outcomes

    monkeypatch.setattr(mutation, "run", whole_run)
    assert mutation.main(["--only", ",".join(names), "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["complete"] is True and [r["name"] for r in record["mutants"]] == names


def _part_records(tmp_path: Path, statuses: tuple[str, ...] = ("caught", "caught", "caught", "caught")) -> list[Path]:
    """Two ``--out`` files as two ``--part`` runs write them (1/2 with a baseline, 2/2 without),
    each with the provenance of one machine and commit."""
    table = list(MUTATIONS)[:len(statuses)]
    paths = []
    for k, part in enumerate((table[:len(table) // 2], table[len(table) // 2:]), 1):
        outcomes = [mutation.Outcome(m.name, statuses[table.index(m)], 2.0, "FAILED x") for m in part]
        base = mutation.Outcome("(none: baseline)", "passed", 1.0, "") if k == 1 else None
        path = tmp_path / f"part-{k}.json"
        mutation.write_outcomes(path, outcomes, part, base, gpu=False, argv=["--part", f"{k}/2"])
        record = json.loads(path.read_text())
        record["provenance"] = {"gpu": "NVIDIA H200", "git_commit": "abc1234", "date": f"2026-12-05T0{k}:00:00"}
        record["date"] = f"2026-12-05T0{k}:05:00"
        path.write_text(json.dumps(record))
        paths.append(path)
    return paths


def test_join_writes_one_record_from_the_parts_of_one_run(tmp_path: Path) -> None:
    """--join turns the --out files of --part runs into the record the CPU check reads: every
    part's mutants in order, the baseline that ran, each part's command kept."""
    a, b = _part_records(tmp_path)
    out = tmp_path / "joined.json"
    assert mutation.main(["--join", str(a), str(b), "--out", str(out)]) == 0
    joined = json.loads(out.read_text())
    parts = [json.loads(p.read_text()) for p in (a, b)]
    assert [m["name"] for m in joined["mutants"]] == [m.name for m in list(MUTATIONS)[:4]]
    assert joined["planned"] == parts[0]["planned"] + parts[1]["planned"]
    assert joined["baseline"] == {"status": "passed", "seconds": 1.0} and joined["complete"] is True
    assert [p["command"] for p in joined["parts"]] == [p["command"] for p in parts]
    assert joined["provenance"]["git_commit"] == "abc1234" and "--join" in joined["command"]


def test_join_exits_1_when_a_mutant_survived(tmp_path: Path) -> None:
    a, b = _part_records(tmp_path, ("caught", "caught", "survived", "caught"))
    out = tmp_path / "joined.json"
    assert mutation.main(["--join", str(a), str(b), "--out", str(out)]) == 1
    assert [m["status"] for m in json.loads(out.read_text())["mutants"]].count("survived") == 1


@pytest.mark.parametrize("spoil, message", [
    (lambda r: r.update(complete=False), "cut off"),
    (lambda r: r["provenance"].update(git_commit="def5678"), "pass --note"),
    (lambda r: r["provenance"].update(gpu="NVIDIA H100 80GB HBM3"), "different gpus"),
    (lambda r: r.update(baseline={"status": "failed", "seconds": 1.0}), "did not pass"),
    (lambda r: r.update(mutants=r["mutants"] + [dict(r["mutants"][0], name=MUTATIONS[0].name)]), "more than one part"),
])
def test_join_refuses_parts_that_are_not_one_run(tmp_path: Path, spoil, message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Parts of different code or machines, a cut-off part, a failed baseline or a mutant planted
    twice would make the joined record claim a run that never happened: refused, with the reason."""
    a, b = _part_records(tmp_path)
    record = json.loads(b.read_text())
    spoil(record)
    b.write_text(json.dumps(record))
    out = tmp_path / "joined.json"
    with pytest.raises(SystemExit):
        mutation.main(["--join", str(a), str(b), "--out", str(out)])
    assert message in capsys.readouterr().err and not out.exists()


def test_join_keeps_the_note_when_the_parts_ran_on_different_commits(tmp_path: Path) -> None:
    """Re-running only the mutants of a changed file gives a part of a newer commit: it joins the
    older parts only with --note saying why, and the record names both commits and keeps the note."""
    a, b = _part_records(tmp_path)
    record = json.loads(b.read_text())
    record["provenance"]["git_commit"] = "def5678"
    b.write_text(json.dumps(record))
    out = tmp_path / "joined.json"
    why = "only the fused_wgmma.cu mutants ran again at def5678; no other mutated file changed"
    assert mutation.main(["--join", str(a), str(b), "--out", str(out), "--note", why]) == 0
    joined = json.loads(out.read_text())
    assert joined["provenance"]["git_commit"] == "abc1234, def5678"
    assert joined["provenance"]["git_commit_note"] == why
    assert [p["git_commit"] for p in joined["parts"]] == ["abc1234", "def5678"]


def test_join_rerun_brings_a_joined_record_up_to_date(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After one file changed, its mutants run again and --join --rerun puts their new outcomes
    into the committed record: the later outcome wins, the replaced one is kept under
    superseded, the older record's own parts stay listed, and every mutant appears once."""
    a, b = _part_records(tmp_path)
    committed = tmp_path / "committed.json"
    assert mutation.main(["--join", str(a), str(b), "--out", str(committed)]) == 0
    table = list(MUTATIONS)[:4]
    again = tmp_path / "again.json"
    rerun = [mutation.Outcome(m.name, "caught", 3.0, "FAILED y") for m in table[2:]]
    mutation.write_outcomes(again, rerun, table[2:], mutation.Outcome("(none: baseline)", "passed", 1.5, ""),
                            gpu=False, argv=["--only", "x"])
    record = json.loads(again.read_text())
    record["provenance"] = {"gpu": "NVIDIA H200", "git_commit": "def5678", "date": "2026-12-05T09:00:00"}
    again.write_text(json.dumps(record))
    out = tmp_path / "updated.json"
    why = "only the file of mutants 3 and 4 changed between abc1234 and def5678"
    argv = ["--join", str(committed), str(again), "--rerun", "--note", why, "--out", str(out)]
    assert mutation.main(argv) == 0
    joined = json.loads(out.read_text())
    assert [m["name"] for m in joined["mutants"]] == [m.name for m in table]
    assert [m["detail"] for m in joined["mutants"]] == ["FAILED x", "FAILED x", "FAILED y", "FAILED y"]
    assert [(s["name"], s["detail"], s["git_commit"]) for s in joined["superseded"]] == [
        (m.name, "FAILED x", "abc1234") for m in table[2:]]
    assert [p["git_commit"] for p in joined["parts"]] == ["abc1234", "abc1234", "def5678"]
    assert joined["planned"] == [m.name for m in table]
    assert joined["provenance"]["git_commit"] == "abc1234, def5678"
    # without --rerun the twice-planted mutants are refused, and so is a re-run older than the record
    with pytest.raises(SystemExit):
        mutation.main([a for a in argv if a != "--rerun"])
    assert "pass --rerun" in capsys.readouterr().err
    record["provenance"]["date"] = "2026-12-05T01:30:00"  # before part 2 (02:05) of the committed record
    again.write_text(json.dumps(record))
    with pytest.raises(SystemExit):
        mutation.main(argv)
    assert "did not run after it" in capsys.readouterr().err


def test_join_needs_a_baseline_two_parts_and_an_out_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _part_records(tmp_path)
    record = json.loads(a.read_text())
    record["baseline"] = None
    a.write_text(json.dumps(record))
    for argv, message in ((["--join", str(a), str(b), "--out", str(tmp_path / "j.json")], "no part ran"),
                          (["--join", str(b), "--out", str(tmp_path / "j.json")], "two or more"),
                          (["--join", str(a), str(b)], "needs --out")):
        with pytest.raises(SystemExit):
            mutation.main(argv)
        assert message in capsys.readouterr().err


# --- the CUDA mutants (``mutate --gpu``) -----------------------------------------------------------

GPU_RESULTS = mutation.PROJECT_ROOT / "fixtures" / "gpu" / "mutation-gpu.json"
REQUIRED_GPU_BUGS = ("tail-tile-dropped", "partial-split-dropped", "scale-index-slip", "negative-zero-lost",
                     "overflow-path-dropped", "order-reversed")


def test_the_gpu_table_covers_every_required_bug_class() -> None:
    names = [m.name for m in mutation.GPU_MUTATIONS]
    assert len(names) == len(set(names)) and not set(names) & {m.name for m in MUTATIONS}
    for bug in REQUIRED_GPU_BUGS:
        assert any(bug in name for name in names), f"no CUDA mutation for {bug}"
    assert {m.file for m in mutation.GPU_MUTATIONS} >= {"kernels/cuda/fused_mma.cu", "kernels/cuda/gemv.cu"}


@pytest.mark.parametrize("m", mutation.GPU_MUTATIONS, ids=lambda m: m.name)
def test_each_cuda_mutation_applies_exactly_once_and_compiles(m: Mutation, tmp_path: Path) -> None:
    """The mutated sources still compile (a mutant that cannot build would be an ERROR on the
    GPU, never a catch): nvcc builds the mutated file's translation unit to a cubin."""
    from nvfp4_kernels import build

    assert mutation.check_definitions(mutation.PROJECT_ROOT, [m]) == []
    try:
        nvcc = build.find_nvcc()
    except build.NvccNotFound as exc:
        pytest.skip(str(exc))
    sources = mutation.mutated_cuda_sources(m, tmp_path / "cuda")
    units = [sources / Path(m.file).name] if m.file.endswith(".cu") else sorted(
        u for u in sources.glob("*.cu") if Path(m.file).name in u.read_text())  # a header: the units including it
    assert units, f"{m.name}: no translation unit compiles {m.file}"
    for unit in units:
        result = subprocess.run([nvcc, *build.BASE_FLAGS, "-arch=sm_90", "-cubin", "-o",
                                 str(tmp_path / (unit.stem + ".cubin")), str(unit)], capture_output=True, text=True)
        assert result.returncode == 0, f"{m.name}: {unit.name} does not compile:\n{result.stderr[-2000:]}"


def test_the_committed_gpu_mutation_run_caught_every_current_mutant() -> None:
    """fixtures/gpu/mutation-gpu.json, written by ``mutate --gpu --out`` on the H200: every mutant
    of today's table was planted (none missing, none stale) and caught; the provenance is there."""
    import json

    if not GPU_RESULTS.is_file():
        pytest.skip(f"{GPU_RESULTS.name} is not committed yet: run python -m nvfp4_harness mutate --gpu "
                    f"--out fixtures/gpu/mutation-gpu.json on a GPU machine")
    record = json.loads(GPU_RESULTS.read_text())
    assert record.get("complete", True), "the committed run was cut off before its last mutant"
    assert record["baseline"]["status"] == "passed"
    assert {r["name"] for r in record["mutants"]} == {m.name for m in mutation.GPU_MUTATIONS}
    assert all(r["status"] == "caught" for r in record["mutants"]), [
        (r["name"], r["status"], r["detail"]) for r in record["mutants"] if r["status"] != "caught"]
    assert {"gpu", "driver", "cuda_runtime", "torch", "date", "command"} <= set(record["provenance"])


def test_the_docs_count_the_cuda_mutants_of_todays_table() -> None:
    """README and docs/mutation-testing.md say how many CUDA mutants the table plants (they once
    said seven long after there were nineteen): the number they give is len(GPU_MUTATIONS)."""
    import re

    for doc in ("README.md", "docs/mutation-testing.md"):
        text = (mutation.PROJECT_ROOT / doc).read_text()
        counts = re.findall(r"\((\d+) today:", text)
        assert counts == [str(len(mutation.GPU_MUTATIONS))], (doc, counts)


def test_the_h100_rerun_of_fused_wgmmas_mutants_caught_them_all() -> None:
    """fixtures/gpu/mutation-gpu-wgmma-h100-90c1d9b.json (thirtieth session): after the 64- and
    128-row tiles took four activation stages, every mutant of today's table planted in
    fused_wgmma.cu was planted again on an H100 and caught by the GPU suites, whose baseline
    passed first."""
    import json

    record = json.loads((GPU_RESULTS.parent / "mutation-gpu-wgmma-h100-90c1d9b.json").read_text())
    assert record["complete"] and record["baseline"]["status"] == "passed"
    assert record["provenance"]["gpu"] == "NVIDIA H100 80GB HBM3"
    wgmma = {m.name for m in mutation.GPU_MUTATIONS if m.file.endswith("fused_wgmma.cu")}
    assert {r["name"] for r in record["mutants"]} == wgmma and len(wgmma) >= 8
    assert all(r["status"] == "caught" for r in record["mutants"]), [
        (r["name"], r["status"]) for r in record["mutants"] if r["status"] != "caught"]
