"""Report formats and the ``report`` / ``combine`` commands, checked against counts made here."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from nvfp4_harness.engine import combine, report
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.reports import parse_report_spec
from nvfp4_harness.engine.reports.lcov import render_lcov
from nvfp4_harness.engine.reports.markdown import render_markdown
from nvfp4_harness.engine.reports.term import render_term, render_term_missing
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY, simulated_event
from nvfp4_kernels.model import MODEL, PATH_NAMES, Policy

CPU = DeviceCaps.cpu()
SM120 = DeviceCaps.simulated_gpu(12, 0)
PATH_ORDER = PATH_NAMES
#: (path, guard declaration) for every guard of the model, in order
GUARDS = [(p.name, g) for p in MODEL.paths for g in p.guards]
REACHABLE_ON_CPU = [(p, g) for p, g in GUARDS if MODEL.path(p).unreachable_reason(CPU) is None]
#: their sides that can occur on the CPU (fused_wgmma's arch_sm90 always holds there)
REACHABLE_SIDES_ON_CPU = [(p, g, s) for p, g in REACHABLE_ON_CPU for s in (True, False)
                          if g.side_unreachable(s, CPU) is None]


def event_for(m, k, block_size=16, **kwargs):
    return simulated_event(m, k, block_size, dtype="float16", **kwargs)


#: the default's GEMV range spelled out (M <= 8 on layers of at most 2^24 weights: every layer here)
GEMV_ON = Policy(gemv_max_m=8)
#: every layer too large for the GEMV (its small_layer guard false)
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)
G, D, L = GEMV_ON, None, LARGE  # a case's policy
#: (m, k, block_size, aligned, policy): every reachable path and guard side on the CPU;
#: (16, 128, 16) takes fused_mma, (129, 128, 16) is past its default M range (fused_max_m = 128)
#: and takes fused_wgmma, (257, 128, 16) is past fused_wgmma's too, and (1, 128, 16) on a layer
#: too large for the GEMV takes fused_mma at decode
FULL = [(1, 32, 16, True, G), (16, 64, 16, True, D), (1, 64, 32, True, G), (1, 40, 16, True, G),
        (16, 36, 16, True, D), (16, 40, 5, True, D), (16, 64, 16, False, D), (2, 64, 16, True, G),
        (16, 128, 16, True, D), (129, 128, 16, True, D), (257, 128, 16, True, D), (1, 128, 16, True, L)]
#: decode-sized cases on small layers: the GEMV takes them all
DECODE_ONLY = [(1, 32, 16, True, G), (4, 64, 16, True, G), (8, 32, 16, True, G)]


def pairs_for(cases, prefix="suite::test_"):
    return [(event_for(m, k, bs, aligned=al, policy=pol), f"{prefix}{i}")
            for i, (m, k, bs, al, pol) in enumerate(cases)]


def side_counts(pairs):
    return Counter((o.key, o.passed) for e, _ in pairs for o in e.outcomes)


def test_term_rows_show_hits_tests_and_guard_counts():
    pairs = pairs_for(FULL) + [(event_for(1, 32, policy=GEMV_ON), "suite::test_0")]  # a second hit by the same test
    text = render_term(CoverageData.from_events(pairs))
    sides = side_counts(pairs)
    assert text.splitlines()[1] == "Operator nvfp4 (kernels/model.py): " + MODEL.summary
    for name in PATH_ORDER:
        hits = sum(e.path == name for e, _ in pairs)
        tests = len({t for e, t in pairs if e.path == name})
        assert re.search(rf"^{name}\s+{hits}\s+{tests}\b", text, re.M), (name, text)
        for guard in MODEL.path(name).guards:
            key = f"{name}.{guard.name}"
            row = rf"^  {guard.name}\s+{sides[(key, True)]}\s+{sides[(key, False)]}\s*(unreachable:.*)?$"
            assert re.search(row, text, re.M), (key, text)
    reason = MODEL.path("native_fp4").unreachable_reason(CPU)
    assert re.search(rf"^native_fp4\s+0\s+0\s+unreachable: {re.escape(reason)}$", text, re.M)
    total_tests = len({t for _, t in pairs})
    assert re.search(rf"^TOTAL\s+{len(pairs)}\s+{total_tests}\s+100\.0%$", text, re.M)


def test_term_names_what_a_decode_only_suite_missed():
    pairs = pairs_for(DECODE_ONLY)
    text = render_term(CoverageData.from_events(pairs))
    assert re.search(r"^fused_mma\s+0\s+0\s+never taken$", text, re.M)
    assert re.search(r"^prefill_vec8\s+0\s+0\s+never taken$", text, re.M)
    assert re.search(r"^prefill_scalar\s+0\s+0\s+never taken$", text, re.M)
    seen = side_counts(pairs)
    for guard in MODEL.path("prefill_vec8").guards:
        assert seen[(f"prefill_vec8.{guard.name}", False)] == 0
        assert re.search(rf"^  {guard.name}\s+\d+\s+0\s+False$", text, re.M)


def test_term_missing_lists_only_what_was_not_reached():
    pairs = pairs_for(DECODE_ONLY)
    text = render_term_missing(CoverageData.from_events(pairs))
    seen = side_counts(pairs)
    missed_sides = [(p, g, s) for p, g, s in REACHABLE_SIDES_ON_CPU if not seen[(f"{p}.{g.name}", s)]]
    for path, g, passed in missed_sides:
        assert f"MISSED guard side nvfp4:{path}.{g.name} == {passed}  (kernels/model.py:{g.source.line}: " \
               f"{g.description})" in text
    assert text.count("MISSED guard side") == len(missed_sides)
    assert "MISSED path nvfp4:prefill_vec8" in text and "MISSED path nvfp4:prefill_scalar" in text
    assert "MISSED path nvfp4:fused_mma" in text  # the enabled GEMV comes first for M <= gemv_max_m = 8
    assert "MISSED path nvfp4:fused_wgmma" in text
    assert "MISSED path nvfp4:gemv" not in text
    assert f"unreachable path nvfp4:native_fp4: {MODEL.path('native_fp4').unreachable_reason(CPU)}" in text
    full = render_term_missing(CoverageData.from_events(pairs_for(FULL)))
    assert "MISSED" not in full and "nothing missed" in full


def test_markdown_table_has_a_row_per_path_and_the_total():
    pairs = pairs_for(DECODE_ONLY)
    md = render_markdown(CoverageData.from_events(pairs))
    hits = Counter(e.path for e, _ in pairs)
    for name in PATH_ORDER:
        assert re.search(rf"^\| `{name}` \| {hits[name]} \| {len({t for e, t in pairs if e.path == name})} \|",
                         md, re.M)
    assert "**never taken**" in md
    assert re.search(rf"^\| \*\*TOTAL\*\* \| {len(pairs)} \| {len(pairs)} \|", md, re.M)


def parse_lcov(text):
    """A small lcov reader: {line: {branch: taken}} plus the summary fields."""
    records = [line for line in text.splitlines() if line]
    assert records[-1] == "end_of_record"
    fields, branches, das = {}, {}, {}
    for line in records[:-1]:
        key, _, value = line.partition(":")
        if key == "BRDA":
            ln, block, branch, taken = value.split(",")
            branches.setdefault(int(ln), {})[(int(block), int(branch))] = None if taken == "-" else int(taken)
        elif key == "DA":
            ln, count = value.split(",")
            das[int(ln)] = int(count)
        else:
            assert key in {"TN", "SF", "BRF", "BRH", "LF", "LH"}, line
            fields[key] = value
    return fields, branches, das


def test_lcov_has_two_branches_per_reachable_guard_with_their_counts():
    pairs = pairs_for(FULL)
    data = CoverageData.from_events(pairs)
    fields, branches, das = parse_lcov(render_lcov(data))
    sides = side_counts(pairs)
    assert fields["SF"] == "kernels/model.py"
    # the sides of native_fp4 (unreachable on the CPU) are not branches: lcov's total is the gate's
    assert set(branches) == {g.source.line for _, g in REACHABLE_ON_CPU}
    for path, g in REACHABLE_ON_CPU:
        key = f"{path}.{g.name}"
        want = {(0, int(not passed)): sides[(key, passed)] for p, gg, passed in REACHABLE_SIDES_ON_CPU
                if (p, gg) == (path, g)}
        assert branches[g.source.line] == want, key
    for path, g in GUARDS:
        key = f"{path}.{g.name}"
        assert das[g.source.line] == sides[(key, True)] + sides[(key, False)]
    assert int(fields["BRF"]) == len(REACHABLE_SIDES_ON_CPU) == data.analyze().sides_reachable
    assert len(REACHABLE_SIDES_ON_CPU) == 2 * len(REACHABLE_ON_CPU) - 1  # fused_wgmma.arch_sm90=false
    assert int(fields["BRH"]) == sum(1 for p, g, s in REACHABLE_SIDES_ON_CPU if sides[(f"{p}.{g.name}", s)])
    assert int(fields["LF"]) == len(GUARDS) and int(fields["LH"]) == len({n for n, _ in sides})


def test_lcov_marks_guards_never_evaluated_as_not_executed():
    # dequantize never evaluates the gemv or native_fp4 guards
    pairs = [(event_for(None, 64, op="dequantize"), "t")]
    fields, branches, das = parse_lcov(render_lcov(CoverageData.from_events(pairs)))
    evaluated = {o.key for e, _ in pairs for o in e.outcomes}
    for path, g in REACHABLE_ON_CPU:
        if f"{path}.{g.name}" in evaluated:
            assert None not in branches[g.source.line].values()
        else:
            want = {(0, int(not s)): None for p, gg, s in REACHABLE_SIDES_ON_CPU if (p, gg) == (path, g)}
            assert branches[g.source.line] == want and das[g.source.line] == 0
    assert int(fields["BRH"]) == len(evaluated)  # every evaluated guard held: one side each


def test_report_spec_parsing():
    assert parse_report_spec("term") == ("term", None)
    assert parse_report_spec("json") == ("json", "dispatch-coverage.json")
    assert parse_report_spec("lcov:out/cov.info") == ("lcov", "out/cov.info")
    with pytest.raises(ValueError, match="valid types: term, term-missing, json, markdown, lcov"):
        parse_report_spec("xml:cov.xml")
    with pytest.raises(ValueError, match="empty destination"):
        parse_report_spec("json:")


def write(tmp_path, name, data):
    path = tmp_path / name
    data.write(path)
    return str(path)


def test_report_command_checks_requirements(tmp_path, capsys):
    decode = write(tmp_path, "decode.json", CoverageData.from_events(pairs_for(DECODE_ONLY)))
    full = write(tmp_path, "full.json", CoverageData.from_events(pairs_for(FULL)))
    assert report.main([full, "--require", "all-reachable", "--fail-under", "100"]) == 0
    assert "TOTAL" in capsys.readouterr().out
    assert report.main([decode, "--require", "all-reachable"]) == 1
    err = capsys.readouterr().err
    assert "FAIL: required path nvfp4:prefill_vec8" in err and "FAIL: required path nvfp4:prefill_scalar" in err
    assert report.main([decode, "--require", "gemv"]) == 0
    capsys.readouterr()
    assert report.main([decode, "--require", "gemv,decode"]) == 2
    valid = "valid names: nvfp4: gemv, native_fp4, fused_wgmma, fused_mma, prefill_vec8, prefill_scalar"
    assert valid in capsys.readouterr().err
    assert report.main([str(tmp_path / "none.json")]) == 2
    out = tmp_path / "cov.lcov"
    assert report.main([decode, "--format", "lcov", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert out.read_text() == render_lcov(CoverageData.read(decode))


def test_report_command_fail_under(tmp_path, capsys):
    pairs = pairs_for(DECODE_ONLY)
    path = write(tmp_path, "decode.json", CoverageData.from_events(pairs))
    analysis = CoverageData.from_events(pairs).analyze()
    pct = 100 * analysis.covered / analysis.total
    assert report.main([path, "--fail-under", f"{pct - 1:.2f}"]) == 0
    assert report.main([path, "--fail-under", f"{pct + 1:.2f}"]) == 1
    assert "under the required" in capsys.readouterr().err


def test_combine_command_merges_a_cpu_and_a_gpu_file(tmp_path, capsys):
    cpu_pairs = pairs_for(FULL, "cpu::t")
    gpu_pairs = [(event_for(64, 64, caps=SM120), "gpu::native"),
                 (event_for(64, 64, n=48, caps=SM120), "gpu::n48")]
    a = write(tmp_path, "cpu.json", CoverageData.from_events(cpu_pairs))
    b = write(tmp_path, "gpu.json", CoverageData.from_events(gpu_pairs))
    merged_path = tmp_path / "merged.json"
    assert combine.main([a, b, "-o", str(merged_path)]) == 0
    assert "combined 2 files" in capsys.readouterr().out
    doc = json.loads(merged_path.read_text())
    op = doc["operators"]["nvfp4"]
    hits = Counter(e.path for e, _ in cpu_pairs + gpu_pairs)
    assert {n: p["hits"] for n, p in op["paths"].items()} == {n: hits[n] for n in PATH_ORDER}
    assert op["paths"]["native_fp4"]["tests"] == {"gpu::native": 1}
    assert "native_fp4" not in doc["summary"]["operators"]["nvfp4"]["unreachable_paths"]
    assert sorted(d["name"] for d in doc["devices"]) == sorted([CPU.name, SM120.name])
    assert report.main([str(merged_path), "--require", "native_fp4,prefill_vec8"]) == 0
    cpu_only = tmp_path / "cpu-only.json"
    assert combine.main([a, "-o", str(cpu_only)]) == 0
    assert report.main([str(cpu_only), "--require", "native_fp4"]) == 1
    (tmp_path / "junk.json").write_text('{"format": "something-else"}')
    assert combine.main([a, str(tmp_path / "junk.json"), "-o", str(tmp_path / "x.json")]) == 2
    assert "junk.json" in capsys.readouterr().err
