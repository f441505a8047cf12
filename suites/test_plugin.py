"""The pytest plugin, driven through inner pytest sessions (pytester).

Expected coverage figures are computed here from the inner suites' cases with
``nvfp4_kernels.MODEL.select`` (the dispatcher's own selection), not read from the harness.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nvfp4_harness.model import DeviceCaps
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY, simulated_event
from nvfp4_kernels.model import MODEL, Policy, Problem


def select_path(problem, caps, policy):
    return MODEL.select(problem, caps, policy, op=problem.op)

pytest_plugins = ["pytester"]

#: the policy under which every layer is too large for the GEMV (gemv_max_weights = 0); a case
#: whose ``large`` flag is set runs under it (the default takes the GEMV at M <= 8 on every layer here)
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)

CONFTEST = '''
import numpy as np
import nvfp4_kernels
from nvfp4_kernels import nvfp4
from nvfp4_kernels.model import Policy


def run_case(m, k, block_size=16, misaligned=False, large=False, n=32):
    """One matmul; ``large=True`` runs it under a policy that refuses every layer to the GEMV."""
    rng = np.random.default_rng(1000 * m + 10 * k + block_size)
    b, s, g = nvfp4.quantize(rng.standard_normal((n, k)).astype(np.float32), block_size)
    if misaligned:  # the same bytes starting off a 4-byte boundary
        buf = np.zeros(b.size + 4, np.uint8)
        off = next(o for o in range(1, 4) if (buf.ctypes.data + o) % 4)
        view = buf[off:off + b.size].reshape(b.shape)
        view[...] = b
        b = view
    a = rng.standard_normal((m, k)).astype(np.float16)
    return nvfp4_kernels.nvfp4_matmul(a, b, s, g, block_size, policy=Policy(gemv_max_weights=0) if large else None)
'''

#: (m, k, block_size, misaligned, large): every reachable path and guard side on the CPU;
#: (16, 128, 16) takes fused_mma, (129, 128, 16) fused_wgmma past fused_mma's default M range
#: (fused_max_m = 128) and (1, 128, 16) on a layer too large for the GEMV takes fused_mma at decode
FULL = [(1, 32, 16, False, False), (16, 64, 16, False, False), (1, 64, 32, False, False),
        (1, 40, 16, False, False), (16, 36, 16, False, False), (16, 40, 5, False, False),
        (16, 64, 16, True, False), (3, 64, 16, False, False), (16, 128, 16, False, False),
        (129, 128, 16, False, False), (257, 128, 16, False, False), (1, 128, 16, False, True)]
#: every case decode-sized on small layers (the GEMV takes them all), as in the ONNX Runtime
#: suite that never ran its prefill kernel
DECODE_ONLY = [(1, 32, 16, False, False), (4, 64, 16, False, False), (8, 32, 16, False, False),
               (2, 96, 16, False, False)]


def _policy(large: bool) -> Policy:
    return LARGE if large else Policy()


def suite_source(cases) -> str:
    return f'''
import pytest
from conftest import run_case


@pytest.mark.dispatch
@pytest.mark.parametrize("m,k,block_size,misaligned,large", {cases!r})
def test_case(m, k, block_size, misaligned, large):
    run_case(m, k, block_size, misaligned, large)
'''


INI = "[pytest]\ndispatch_models = nvfp4_kernels.model\n"


def make_suite(pytester: pytest.Pytester, cases) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(test_suite=suite_source(cases))


def expected_coverage(cases) -> tuple[int, int]:
    """(covered, total) for a CPU run of ``cases``, from the declarations and select_path."""
    cpu = DeviceCaps.cpu()
    paths_taken, sides_seen = set(), set()
    for m, k, bs, misaligned, large in cases:
        sel = select_path(Problem("matmul", m, 32, k, bs, "float16", "cpu", not misaligned, ""), cpu, _policy(large))
        paths_taken.add(sel.path)
        sides_seen.update((o.key, o.passed) for o in sel.outcomes)
    reachable = {p.name for p in MODEL.paths if p.unreachable_reason(cpu) is None}
    sides = {(f"{p.name}.{g.name}", s) for p in MODEL.paths if p.name in reachable for g in p.guards
             for s in (True, False) if g.side_unreachable(s, cpu) is None}
    return len(paths_taken & reachable) + len(sides_seen & sides), len(reachable) + len(sides)


def test_decode_only_suite_fails_all_reachable_naming_the_prefill_paths(pytester):
    make_suite(pytester, DECODE_ONLY)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-require=all-reachable")
    result.assert_outcomes(passed=len(DECODE_ONLY))
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*dispatch coverage FAILED*",
        "FAIL: required path nvfp4:fused_wgmma was never taken*",
        "FAIL: required path nvfp4:fused_mma was never taken*",
        "FAIL: required path nvfp4:prefill_vec8 was never taken*",
        "FAIL: required path nvfp4:prefill_scalar was never taken*",
    ])
    for guard in MODEL.path("prefill_vec8").guards:  # their False sides need a prefill-sized case too
        result.stdout.fnmatch_lines([f"FAIL: guard side nvfp4:prefill_vec8.{guard.name} == False was never taken"
                                     f" (*kernels/model.py:{guard.source.line}, *"])
    result.stdout.no_fnmatch_line("FAIL: required path nvfp4:gemv*")


def test_full_suite_passes_and_lists_native_fp4_unreachable_with_its_reason(pytester):
    make_suite(pytester, FULL)
    result = pytester.runpytest("-p", "no:cacheprovider", "-m", "dispatch", "--dispatch-report=term",
                                "--dispatch-require=all-reachable")
    result.assert_outcomes(passed=len(FULL))
    assert result.ret == pytest.ExitCode.OK
    reason = MODEL.path("native_fp4").unreachable_reason(DeviceCaps.cpu())
    result.stdout.fnmatch_lines([f"native_fp4 * unreachable: {reason}", "TOTAL * 100.0%"])
    result.stdout.no_fnmatch_line("*FAILED*")
    for name in ("gemv", "fused_mma", "prefill_vec8", "prefill_scalar"):
        hits = sum(select_path(Problem("matmul", m, 32, k, bs, "float16", "cpu", not mis),
                               DeviceCaps.cpu(), _policy(large)).path == name for m, k, bs, mis, large in FULL)
        result.stdout.fnmatch_lines([f"{name} *{hits} *{hits}"])  # each case is its own test


@pytest.mark.parametrize("margin, fails", [(1.0, True), (-1.0, False)])
def test_fail_under_threshold(pytester, margin, fails):
    make_suite(pytester, DECODE_ONLY)
    covered, total = expected_coverage(DECODE_ONLY)
    pct = 100 * covered / total
    result = pytester.runpytest("-p", "no:cacheprovider", f"--dispatch-fail-under={pct + margin:.2f}")
    result.assert_outcomes(passed=len(DECODE_ONLY))
    if fails:
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines([f"FAIL: dispatch coverage {pct:.1f}% ({covered}/{total} *under the required*"])
    else:
        assert result.ret == pytest.ExitCode.OK
        result.stdout.no_fnmatch_line("*dispatch coverage FAILED*")


def test_unknown_required_path_is_a_usage_error_listing_valid_names(pytester):
    make_suite(pytester, DECODE_ONLY)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-require=gemv,prefill")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown dispatch path 'prefill'; valid names: "
                                 "nvfp4: gemv, native_fp4, fused_wgmma, fused_mma, prefill_vec8, prefill_scalar *"])


def test_plugin_is_inert_without_options(pytester):
    make_suite(pytester, DECODE_ONLY)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*dispatch*")
    # no report file appeared (dot-directories belong to other plugins)
    assert {p.name for p in pytester.path.iterdir() if not p.name.startswith(".")} == {
        "conftest.py", "test_suite.py", "tox.ini"}


def test_file_reports_and_attribution_of_collection_and_fixture_calls(pytester):
    pytester.makeconftest(CONFTEST + '''
import pytest

@pytest.fixture(scope="session")
def warm():
    return run_case(16, 40, 5)          # session fixture: belongs to no test
''')
    pytester.makepyfile(test_attr='''
from conftest import run_case

run_case(1, 32)               # collection time: belongs to no test


def test_one(warm):
    run_case(16, 64)
    run_case(16, 64)


def test_two():
    run_case(1, 32)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-report=json:out/cov.json",
                                "--dispatch-report=markdown:out/cov.md", "--dispatch-report=lcov")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["dispatch coverage json report written to out/cov.json",
                                 "dispatch coverage lcov report written to dispatch-coverage.lcov"])
    paths = json.loads((pytester.path / "out" / "cov.json").read_text())["operators"]["nvfp4"]["paths"]
    assert paths["gemv"] == {"hits": 2, "forced": 0, "unattributed": 1,
                             "tests": {"test_attr.py::test_two": 1}, "devices": {"cpu": 2}}
    assert paths["prefill_vec8"]["tests"] == {"test_attr.py::test_one": 2}
    assert paths["prefill_scalar"]["unattributed"] == 1
    assert paths["prefill_scalar"]["tests"] == {}
    assert (pytester.path / "out" / "cov.md").read_text().startswith("### Dispatch path coverage")
    assert "end_of_record" in (pytester.path / "dispatch-coverage.lcov").read_text()


def test_xdist_workers_reach_the_controller_report(pytester):
    make_suite(pytester, FULL + DECODE_ONLY)
    serial = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dispatch-report=json:serial.json")
    assert serial.ret == pytest.ExitCode.OK
    spread = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2",
                                           "--dispatch-report=json:xdist.json",
                                           "--dispatch-report=term", "--dispatch-require=all-reachable")
    spread.assert_outcomes(passed=len(FULL + DECODE_ONLY))
    assert spread.ret == pytest.ExitCode.OK
    a = json.loads((pytester.path / "serial.json").read_text())
    b = json.loads((pytester.path / "xdist.json").read_text())
    assert a["runs"][0]["events"] == b["runs"][0]["events"] == len(FULL + DECODE_ONLY)
    a.pop("runs"), b.pop("runs")
    assert a == b
    spread.stdout.fnmatch_lines(["TOTAL * 100.0%"])


TOY_MODEL = '''
from nvfp4_harness.model import DispatchModel, Guard, PathSpec, record

MODEL = DispatchModel("toy", [
    PathSpec("small", guards=[Guard("m_small", "M <= 4", lambda p, d, pol: p["m"] <= 4)]),
    PathSpec("big"),
])


def dispatch_init(reg):
    reg.add_model(MODEL)


def toy(m):
    record(MODEL, "small" if m <= 4 else "big", {"m": m})
'''


def test_two_operators_in_one_run_are_reported_and_gated_per_operator(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(toy_op=TOY_MODEL)
    pytester.makeini(INI + "pythonpath = .\n")
    pytester.makepyfile(test_both='''
import pytest
from conftest import run_case
from toy_op import toy


@pytest.mark.parametrize("m", [1, 16])
def test_nvfp4(m):
    run_case(m, 64)


def test_toy():
    toy(2)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-model=toy_op", "--dispatch-report=term",
                                "--dispatch-report=json:cov.json", "--dispatch-require=toy:small,nvfp4:gemv")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["Operator nvfp4 (*", "Operator toy (toy_op.py)", "ALL 2 OPERATORS: *"])
    doc = json.loads((pytester.path / "cov.json").read_text())
    assert sorted(doc["operators"]) == ["nvfp4", "toy"]
    assert doc["operators"]["toy"]["paths"]["small"]["tests"] == {"test_both.py::test_toy": 1}
    gated = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-model=toy_op", "--dispatch-require=toy:big")
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    gated.stdout.fnmatch_lines(["FAIL: required path toy:big was never taken*"])
    gated.stdout.no_fnmatch_line("*nvfp4*never taken*")


def test_a_registered_operator_that_is_never_called_shows_zero(pytester):
    pytester.makepyfile(toy_op=TOY_MODEL, test_nothing="def test_nothing():\n    pass\n")
    pytester.makeini("[pytest]\npythonpath = .\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-model=toy_op", "--dispatch-fail-under=1")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAIL: dispatch coverage 0.0% (0/4 reachable paths and guard sides)*"])
    bad = pytester.runpytest("-p", "no:cacheprovider", "--dispatch-model=no_such_module", "--dispatch")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*cannot import dispatch model module 'no_such_module'*"])


def test_a_failing_listener_fails_the_run_with_its_traceback_but_not_the_call(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makeini(INI)
    pytester.makepyfile(test_listener='''
from nvfp4_harness.model import add_listener
from conftest import run_case


def broken(event):
    raise KeyError("listener bug")


def test_call_survives():
    add_listener(broken)
    y = run_case(1, 32)  # the operator's result still arrives
    assert y.shape == (1, 32)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--dispatch", "-W", "ignore::RuntimeWarning")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["FAIL: a dispatch listener failed (the operator calls went on):",
                                 "*test_listener.broken raised while handling an event of nvfp4:gemv:*",
                                 "*KeyError: 'listener bug'*"])


def test_a_schema_version_1_file_still_reports(tmp_path, capsys):
    """The GPU coverage committed by nvfp4-harness 0.1 (schema version 1) loads as the NVFP4
    operator with the fingerprint of the declarations it was recorded under: 0.1's four paths,
    which are today's model without fused_mma, fused_wgmma and the GEMV's small_layer guard. It
    merges with data of that model; with data of today's model (six paths) it refuses, naming
    both fingerprints."""
    from nvfp4_harness.engine import report
    from nvfp4_harness.engine.data import CoverageData
    from nvfp4_harness.model import ModelConflict
    from nvfp4_harness.model.declare import declaration_fingerprint

    legacy = Path(__file__).resolve().parents[1] / "fixtures" / "legacy" / "coverage-gpu-v1.json"
    doc = json.loads(legacy.read_text())
    assert (doc["format"], doc["version"]) == ("nvfp4-dispatch-coverage", 1)
    assert "fused_mma" not in doc["paths"], "a version 1 file predates the fused path"
    four_paths = declaration_fingerprint(MODEL.name, MODEL.ops, MODEL.shortcuts, [
        (p.name, p.ops, [(g.name, g.description) for g in p.guards if (p.name, g.name) != ("gemv", "small_layer")])
        for p in MODEL.paths if p.name not in ("fused_mma", "fused_wgmma")])
    data = CoverageData.read(legacy)
    op = data.operator("nvfp4")
    assert op.fingerprint == four_paths != MODEL.fingerprint
    assert {p: t.hits for p, t in op.paths.items()} == {p: v["hits"] for p, v in doc["paths"].items()}
    merged = CoverageData()
    merged.update(data)
    merged.update(CoverageData.read(legacy))
    merged.update(CoverageData.from_events([]))
    assert {p: t.hits for p, t in merged.operator("nvfp4").paths.items()} == {
        p: 2 * v["hits"] for p, v in doc["paths"].items()}
    today = CoverageData.from_events([(simulated_event(1, 64), "t")])
    with pytest.raises(ModelConflict, match=f"{four_paths} and {MODEL.fingerprint}"):
        merged.update(today)
    assert report.main([str(legacy), "--require", "all-reachable"]) == 0
    assert "TOTAL" in capsys.readouterr().out
