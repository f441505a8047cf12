"""The coverage engine on the NVFP4 operator: counts, reachability per device, the denominator,
JSON, combining.

Expected values are counted here straight from the events the tests generate, or derived from
the declarations of :data:`nvfp4_kernels.model.MODEL`, never read back from the engine under test.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import nvfp4_kernels
import pytest
from nvfp4_harness.engine.analysis import Requirement
from nvfp4_harness.engine.data import EXAMPLES_PER_SIDE, SCHEMA_VERSION, CoverageData
from nvfp4_harness.engine.recorder import recording
from nvfp4_harness.model import DataError, DeviceCaps, UnknownPathError, side_key
from nvfp4_harness.nvfp4.shapes import LARGE_LAYERS_POLICY, simulated_event
from nvfp4_kernels import nvfp4
from nvfp4_kernels.model import MODEL, PATH_NAMES, Policy

CPU = DeviceCaps.cpu()
SM120 = DeviceCaps.simulated_gpu(12, 0)
ALL = Requirement.parse(["all-reachable"])


def event_for(m, k, block_size=16, **kwargs):
    return simulated_event(m, k, block_size, dtype="bfloat16", **kwargs)


#: the default's GEMV range spelled out (M <= 8 on layers of at most 2^24 weights: every layer here)
GEMV_ON = Policy(gemv_max_m=8)
#: every layer too large for the GEMV (its small_layer guard false)
LARGE = LARGE_LAYERS_POLICY  # every layer too large for the GEMV (gemv_max_weights = 0)
G, D, L = GEMV_ON, None, LARGE  # a case's policy

#: (m, k, block_size, aligned, policy): every reachable path and guard side on the CPU (fused_mma
#: taken at M = 16, K = 128 and at M = 1 on a layer too large for the GEMV; its M guard false at
#: M = 129, past the default fused_max_m = 128)
FULL_CPU = [(1, 32, 16, True, G), (16, 64, 16, True, D), (1, 64, 32, True, G), (1, 40, 16, True, G),
            (16, 36, 16, True, D), (16, 40, 5, True, D), (16, 64, 16, False, D), (16, 128, 16, True, D),
            (129, 128, 16, True, D), (257, 128, 16, True, D), (1, 128, 16, True, L)]
#: the ONNX Runtime lesson: decode-sized cases only, on small layers (the GEMV takes them all)
DECODE_ONLY = [(1, 32, 16, True, G), (4, 64, 16, True, G), (8, 32, 16, True, G)]
#: DECODE_ONLY, two more M = 1 calls (K = 40 -> prefill_vec8, K = 36 -> prefill_scalar) and one
#: at M = 9 (prefill_vec8): a percentage that rounds up at two places (DECODE_ONLY's rounds down)
DECODE_AND_K_EDGES = DECODE_ONLY + [(1, 40, 16, True, G), (1, 36, 16, True, G), (9, 32, 16, True, G)]
#: decode-sized cases on K % 128 == 0 layers too large for the GEMV: fused_mma takes them all
DECODE_LARGE_LAYERS = [(1, 128, 16, True, L), (4, 256, 16, True, L), (8, 128, 16, True, L)]


def cpu_events(cases=FULL_CPU, test_prefix: str = "t"):
    return [(event_for(m, k, bs, aligned=al, policy=pol), f"{test_prefix}{i}")
            for i, (m, k, bs, al, pol) in enumerate(cases)]


def reachable_items(devices):
    """Reachable paths and guard sides straight from the declarations (independent of the engine)."""
    paths = {p.name for p in MODEL.paths if any(p.unreachable_reason(d) is None for d in devices)}
    sides = {(p.name, g.name, passed) for p in MODEL.paths for g in p.guards for passed in (True, False)
             if any(p.unreachable_reason(d) is None and g.side_unreachable(passed, d) is None for d in devices)}
    return paths, sides


def seen_sides(pairs):
    return {(o.path, o.guard, o.passed) for e, _ in pairs for o in e.outcomes}


def test_counts_match_an_independent_tally():
    pairs = cpu_events() + [(event_for(1, 32), None), (event_for(16, 64), "t1")]
    data = CoverageData.from_events(pairs)
    op = data.operator("nvfp4")
    paths = Counter(e.path for e, _ in pairs)
    sides = Counter((o.path, o.guard, o.passed) for e, _ in pairs for o in e.outcomes)
    for name in PATH_NAMES:
        tally = op.paths[name]
        assert tally.hits == paths[name]
        assert dict(tally.tests) == dict(Counter(t for e, t in pairs if e.path == name and t))
        assert tally.unattributed == sum(1 for e, t in pairs if e.path == name and t is None)
    for p in MODEL.paths:
        for g in p.guards:
            for passed in (True, False):
                assert op.sides[side_key(p.name, g.name, passed)].count == sides[(p.name, g.name, passed)]
    assert data.events == len(pairs)
    assert [(d.name, d.events) for d in data.devices.values()] == [("cpu", len(pairs))]


def test_cpu_run_judges_native_fp4_unreachable_and_uses_the_documented_denominator():
    analysis = CoverageData.from_events(cpu_events()).analyze()
    op = analysis.operator("nvfp4")
    native = op.path("native_fp4")
    assert not native.reachable
    assert native.reason == MODEL.path("native_fp4").unreachable_reason(CPU)
    for side in op.sides_of("native_fp4"):
        assert not side.required and side.reason == native.reason
    paths, sides = reachable_items([CPU])
    assert op.total == len(paths) + len(sides) == analysis.total
    assert {p.name for p in op.paths if p.reachable} == paths
    assert analysis.covered == analysis.total
    assert analysis.percent == 100.0
    assert analysis.failures(ALL) == []


def test_a_decode_only_run_misses_the_fused_and_both_prefill_paths():
    """M <= gemv_max_m (8) on small layers everywhere: the GEMV takes every call, so the fused
    paths (which only follow the GEMV for M > gemv_max_m) and both prefill paths are never taken."""
    pairs = cpu_events(DECODE_ONLY)
    analysis = CoverageData.from_events(pairs).analyze()
    assert [p.name for p in analysis.missed_paths] == ["fused_wgmma", "fused_mma", "prefill_vec8", "prefill_scalar"]
    seen = seen_sides(pairs)
    paths, sides = reachable_items([CPU])
    hit_paths = {e.path for e, _ in pairs} & paths
    assert {(s.path, s.guard, s.passed) for s in analysis.missed_sides} == sides - seen
    assert analysis.covered == len(hit_paths) + len(sides & seen)
    assert analysis.percent == pytest.approx(100 * analysis.covered / (len(paths) + len(sides)))
    failures = analysis.failures(ALL)
    assert any("nvfp4:fused_mma" in f and "never taken" in f for f in failures)
    assert any("nvfp4:fused_wgmma" in f and "never taken" in f for f in failures)
    assert any("nvfp4:prefill_vec8" in f and "never taken" in f for f in failures)
    assert any("nvfp4:prefill_scalar" in f and "never taken" in f for f in failures)
    for path, guard, passed in sides - seen:
        source = MODEL.guard(path, guard).source
        assert any(f"{path}.{guard} == {passed}" in f and str(source) in f for f in failures)
    # naming only the path that was taken is satisfied, guard sides are not asked for
    assert analysis.failures(Requirement.parse(["gemv"])) == []
    assert analysis.failures(Requirement.parse(["nvfp4:gemv"])) == []
    assert len(analysis.failures(Requirement.parse(["gemv,nvfp4:prefill_scalar"]))) == 1


def test_a_large_layer_decode_run_misses_the_gemv_and_both_prefill_paths():
    """Counted by hand: decode on K % 128 == 0 layers too large for the GEMV takes fused_mma
    every time (1 path). Sides seen: gemv.small_layer False only (its M, block and K % 32 guards
    True), all three fused_mma guards True, all four fused_wgmma guards True, all three vec8
    guards True: 14 of the 27 reachable sides (fused_wgmma.arch_sm90 False cannot occur on the
    CPU). 15/32 = 46.875%, 46.88 at two places."""
    pairs = cpu_events(DECODE_LARGE_LAYERS)
    assert {e.path for e, _ in pairs} == {"fused_mma"}
    analysis = CoverageData.from_events(pairs).analyze()
    assert [p.name for p in analysis.missed_paths] == ["gemv", "fused_wgmma", "prefill_vec8", "prefill_scalar"]
    assert ("gemv", "small_layer", True) in {(s.path, s.guard, s.passed) for s in analysis.missed_sides}
    summary = CoverageData.from_events(pairs).to_dict()["summary"]
    assert (summary["covered"], summary["total"], summary["percent"]) == (15, 32, 46.88)


def test_fail_under_is_strictly_below_the_percentage():
    analysis = CoverageData.from_events(cpu_events(DECODE_ONLY)).analyze()
    pct = 100 * analysis.covered / analysis.total
    assert analysis.failures(fail_under=pct) == []
    assert analysis.failures(fail_under=pct - 0.5) == []
    [message] = analysis.failures(fail_under=pct + 0.5)
    assert f"{pct:.1f}%" in message and "under the required" in message


def test_requiring_a_path_no_device_can_take_names_the_reason():
    analysis = CoverageData.from_events(cpu_events()).analyze()
    [message] = analysis.failures(Requirement.parse(["native_fp4"]))
    assert "native_fp4" in message and MODEL.path("native_fp4").unreachable_reason(CPU) in message


def test_a_declared_operator_with_no_events_is_judged_on_the_cpu_with_nothing_reached():
    data = CoverageData()
    data.declare(MODEL)
    analysis = data.analyze()
    paths, sides = reachable_items([CPU])
    assert analysis.operator("nvfp4").devices == ("cpu",)
    assert (analysis.covered, analysis.total) == (0, len(paths) + len(sides))
    assert CoverageData().analyze().total == 0


def test_shortcuts_are_counted_apart_from_paths():
    rng = np.random.default_rng(0)
    b, s, g = nvfp4.quantize(rng.standard_normal((32, 32)).astype(np.float32), 16)
    with recording("t") as rec:
        nvfp4_kernels.nvfp4_matmul(np.zeros((0, 32), np.float16), b, s, g)
        nvfp4_kernels.nvfp4_matmul(np.zeros((1, 0), np.float16), b[:, :0], s[:, :0], g)
        nvfp4_kernels.nvfp4_matmul(np.zeros((0, 32), np.float16), b, s, g)
    kinds = Counter(r.event.path for r in rec.events)
    op = rec.coverage().operator("nvfp4")
    assert dict(op.shortcuts) == dict(kinds) == {"empty": 2, "bias_only": 1}
    assert all(t.hits == 0 for t in op.paths.values())
    assert rec.coverage().events == len(rec.events)
    assert rec.coverage().analyze().covered == 0


def test_examples_are_the_smallest_test_ids_whatever_the_order():
    pairs = [(event_for(16, 64), f"test_{i:02d}") for i in range(10)]
    shuffled = pairs[:]
    random.Random(4).shuffle(shuffled)
    a, b = CoverageData.from_events(pairs), CoverageData.from_events(shuffled)
    assert a == b
    expected = sorted(t for _, t in pairs)[:EXAMPLES_PER_SIDE]
    op = a.operator("nvfp4")
    assert op.sides["gemv.m_in_range=false"].examples == expected
    assert op.sides["gemv.m_in_range=true"].examples == []


def test_json_round_trip_through_a_file(tmp_path):
    data = CoverageData.from_events(cpu_events() + [(event_for(1, 32), None)])
    data.runs = [{"label": "cpu job", "events": data.events}]
    target = tmp_path / "cov.json"
    data.write(target)
    doc = json.loads(target.read_text())
    assert (doc["format"], doc["version"]) == ("dispatch-coverage", SCHEMA_VERSION)
    summary = doc["summary"]["operators"]["nvfp4"]
    assert summary["missed_paths"] == []
    assert summary["unreachable_paths"] == {"native_fp4": MODEL.path("native_fp4").unreachable_reason(CPU)}
    assert doc["operators"]["nvfp4"]["model"]["fingerprint"] == MODEL.fingerprint
    back = CoverageData.read(target)
    assert back == data
    assert back.dumps() == data.dumps()
    assert back.analyze().summary_dict() == data.analyze().summary_dict()


def gpu_events():
    """A hand-written run on a simulated Blackwell: native_fp4 taken, and its guards' False sides."""
    cases = [dict(m=64, k=64), dict(m=64, k=64, n=48), dict(m=64, k=64, block_size=32),
             dict(m=64, k=40), dict(m=64, k=64, policy=Policy(native_fp4_enabled=False)), dict(m=1, k=32)]
    return [(event_for(caps=SM120, **c), f"gpu::case{i}") for i, c in enumerate(cases)]


def test_combining_a_cpu_run_and_a_gpu_run_unions_reachability():
    cpu_pairs, gpu_pairs = cpu_events(), gpu_events()
    cpu, gpu = CoverageData.from_events(cpu_pairs), CoverageData.from_events(gpu_pairs)
    cpu.runs, gpu.runs = [{"label": "cpu", "events": cpu.events}], [{"label": "gpu", "events": gpu.events}]
    # the merge works from the files alone: the declarations travel with the counts
    cpu, gpu = CoverageData.loads(cpu.dumps()), CoverageData.loads(gpu.dumps())
    merged = CoverageData()
    merged.update(cpu)
    merged.update(gpu)
    other_order = CoverageData()
    other_order.update(gpu)
    other_order.update(cpu)
    assert merged.operator("nvfp4").paths == other_order.operator("nvfp4").paths
    paths = Counter(e.path for e, _ in cpu_pairs + gpu_pairs)
    assert {n: t.hits for n, t in merged.operator("nvfp4").paths.items()} == {n: paths[n] for n in PATH_NAMES}
    assert [r["label"] for r in merged.runs] == ["cpu", "gpu"]
    assert sorted(d.name for d in merged.devices.values()) == sorted([CPU.name, SM120.name])

    alone = cpu.analyze().operator("nvfp4")
    both = merged.analyze().operator("nvfp4")
    assert not alone.path("native_fp4").reachable
    assert both.path("native_fp4").reachable and both.path("native_fp4").hits == paths["native_fp4"]
    assert both.path("native_fp4").unreachable_on == {CPU.label: MODEL.path("native_fp4").unreachable_reason(CPU)}
    exp_paths, exp_sides = reachable_items([CPU, SM120])
    assert both.total == len(exp_paths) + len(exp_sides)
    seen = seen_sides(cpu_pairs + gpu_pairs)
    assert {(s.path, s.guard, s.passed) for s in both.missed_sides} == exp_sides - seen
    assert merged.analyze().failures(Requirement.parse(["native_fp4"])) == []


def test_reading_rejects_foreign_and_future_documents(tmp_path):
    good = CoverageData.from_events(cpu_events()).to_dict()
    with pytest.raises(DataError, match="not dispatch-coverage data"):
        CoverageData.from_dict({"meta": {}}, "x.json")
    with pytest.raises(DataError, match="upgrade the harness"):
        CoverageData.from_dict({**good, "version": SCHEMA_VERSION + 1})
    renamed = json.loads(json.dumps(good))
    renamed["operators"]["nvfp4"]["paths"]["gemv_v2"] = renamed["operators"]["nvfp4"]["paths"].pop("gemv")
    with pytest.raises(DataError, match="gemv_v2"):
        CoverageData.from_dict(renamed)
    broken = json.loads(json.dumps(good))
    broken["operators"]["nvfp4"]["paths"]["gemv"]["hits"] = "many"
    with pytest.raises(DataError, match="schema version"):
        CoverageData.from_dict(broken)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DataError, match="bad.json"):
        CoverageData.read(tmp_path / "bad.json")
    with pytest.raises(DataError, match="cannot read"):
        CoverageData.read(tmp_path / "missing.json")


def test_requirement_parsing_and_resolution():
    known = {"nvfp4": PATH_NAMES, "toy": ("small_m", "gemv")}
    assert Requirement.parse(["prefill_vec8, nvfp4:gemv", "prefill_vec8"]).items == \
        ((None, "prefill_vec8"), ("nvfp4", "gemv"))
    assert Requirement.parse(["all-reachable"]).all_reachable
    assert not Requirement.parse([]).active
    assert Requirement.parse(["small_m", "prefill_vec8"]).resolve(known).items == \
        (("toy", "small_m"), ("nvfp4", "prefill_vec8"))
    with pytest.raises(UnknownPathError, match="several operators"):
        Requirement.parse(["gemv"]).resolve(known)
    with pytest.raises(UnknownPathError) as info:
        Requirement.parse(["prefill"]).resolve(known)
    for name in PATH_NAMES:
        assert name in str(info.value)
    assert "'prefill'" in str(info.value)
    with pytest.raises(UnknownPathError, match="unknown operator 'nope'"):
        Requirement.parse(["nope:gemv"]).resolve(known)
    with pytest.raises(UnknownPathError, match="OPERATOR:PATH"):
        Requirement.parse([":gemv"])


def test_totals_add_the_counts():
    """covered = paths hit + sides hit, summed over devices and operators (counts chosen so that
    a bitwise or, xor or and would give another number)."""
    from dataclasses import FrozenInstanceError

    from nvfp4_harness.engine.analysis import DeviceCoverage

    a = DeviceCoverage("gpu", paths_reachable=3, paths_hit=3, sides_reachable=12, sides_hit=7)
    b = DeviceCoverage("gpu", paths_reachable=5, paths_hit=1, sides_reachable=6, sides_hit=5)
    assert (a.covered, a.total) == (10, 15) and a.percent == pytest.approx(100 * 10 / 15)
    total = a + b
    assert (total.paths_reachable, total.paths_hit, total.sides_reachable, total.sides_hit) == (8, 4, 18, 12)
    assert (total.covered, total.total, total.label) == (16, 26, "gpu")
    with pytest.raises(FrozenInstanceError):
        a.paths_hit = 0  # type: ignore[misc]


def test_per_device_coverage_counts_each_devices_own_guard_sides_and_sums_over_operators():
    from nvfp4_harness.model import DispatchModel, Guard, PathSpec
    from nvfp4_harness.model import simulate as simulate_event

    gpu0, gpu1 = DeviceCaps("NVIDIA H200", (9, 0), index=0), DeviceCaps("NVIDIA H200", (9, 0), index=1)
    toy = DispatchModel("toy_totals", [PathSpec("small", guards=[Guard("m_small", "M <= 4", lambda p, d, pol: p <= 4)]),
                                       PathSpec("big")])
    # the default policy: M = 1, K = 128 -> fused_mma; M = 64, K = 64 -> prefill_vec8 (K % 128 != 0)
    events = [(event_for(1, 128, caps=gpu0), "a"), (event_for(64, 64, caps=gpu0), "b"),
              (event_for(1, 128, caps=gpu1), "c"), (simulate_event(toy, 2, gpu1), "d"),
              (simulate_event(toy, 9, gpu1), "e")]
    analysis = CoverageData.from_events(events).analyze()
    label0, label1 = gpu0.label, gpu1.label
    nvfp4 = {d.label: d for d in analysis.operator("nvfp4").per_device}
    seen0 = {(o.path, o.guard, o.passed) for e, _ in events[:2] for o in e.outcomes}
    seen1 = {(o.path, o.guard, o.passed) for e, _ in events[2:3] for o in e.outcomes}
    reachable_sides = reachable_items([gpu0])[1]
    assert nvfp4[label0].sides_hit == len(seen0 & reachable_sides)
    assert nvfp4[label1].sides_hit == len(seen1 & reachable_sides)
    assert nvfp4[label1].paths_hit == 1 and nvfp4[label0].paths_hit == 2
    both = {d.label: d for d in analysis.per_device}
    toy1 = {d.label: d for d in analysis.operator("toy_totals").per_device}[label1]
    assert (toy1.paths_hit, toy1.sides_hit) == (2, 2)
    assert both[label1].covered == nvfp4[label1].covered + toy1.covered
    assert both[label1].total == nvfp4[label1].total + toy1.total


def test_the_summary_rounds_percentages_to_two_places():
    """Counted by hand from the declarations: on the CPU 5 paths (native_fp4 unreachable) and
    27 guard sides (2 x 14, less fused_wgmma.arch_sm90 False) are reachable, 32 in all.
    DECODE_ONLY (M <= 8, block 16, K in {32, 64}, aligned, small layers) takes gemv (1 path) and
    sees 14 sides: all four gemv guards True; fused_mma's M and block guards True, its K % 128
    guard False; fused_wgmma's M, arch and block guards True, its K % 128 guard False; all three
    vec8 guards True. 15/32 = 46.875%.
    DECODE_ONLY plus M = 9 (prefill_vec8) adds gemv.m_in_range False and the path prefill_vec8:
    17/32 = 53.125%. Both are ties at the third place, which the summary rounds to the even
    digit: one up (46.88), one down (53.12).
    DECODE_AND_K_EDGES adds to that gemv.k_mod_32 False (K = 40, 36), vec8.k_mod_8 False
    (K = 36) and the path prefill_scalar: 20/32 = 62.5%."""
    summary = CoverageData.from_events(cpu_events(DECODE_ONLY)).to_dict()["summary"]
    assert summary["covered"] == 15 and summary["total"] == 32 and summary["percent"] == 46.88
    assert summary["operators"]["nvfp4"]["percent"] == 46.88
    summary = CoverageData.from_events(cpu_events(DECODE_ONLY + [(9, 32, 16, True, G)])).to_dict()["summary"]
    assert summary["covered"] == 17 and summary["total"] == 32 and summary["percent"] == 53.12
    summary = CoverageData.from_events(cpu_events(DECODE_AND_K_EDGES)).to_dict()["summary"]
    assert summary["covered"] == 20 and summary["total"] == 32 and summary["percent"] == 62.5
    assert summary["operators"]["nvfp4"]["percent"] == 62.5


def test_path_names_that_sort_before_all_reachable_are_still_paths():
    """Requirements compare names for equality: a path called 'abc' is a path, not 'all-reachable'."""
    from nvfp4_harness.model import DispatchModel, PathSpec, simulate

    model = DispatchModel("alpha", [PathSpec("abc", guards=[]), PathSpec("zzz")])
    data = CoverageData.from_events([(simulate(model, 1), "t")])
    requirement = Requirement.parse(["abc", "alpha:zzz"])
    assert requirement.paths == ("abc", "alpha:zzz") and not requirement.all_reachable
    assert requirement.all_reachable_operators(["alpha"]) == []
    failures = data.analyze().failures(requirement)
    assert failures == [f"required path alpha:zzz was never taken; "
                        f"{data.analyze().operator('alpha').path_hint('zzz')} [{model.path('zzz').source}]"]
    with pytest.raises(UnknownPathError, match="unknown dispatch path 'abd' of operator 'alpha'"):
        Requirement.parse(["alpha:abd"]).resolve({"alpha": ("abc", "zzz")})


def test_analysis_edges_the_mutation_run_found_untested():
    known = {"nvfp4": PATH_NAMES}
    # parsing skips empty items and keeps going; resolving keeps every item after all-reachable
    assert Requirement.parse(["gemv,,prefill_vec8"]).items == ((None, "gemv"), (None, "prefill_vec8"))
    resolved = Requirement.parse(["all-reachable", "gemv"]).resolve(known)
    assert resolved.items == ((None, "all-reachable"), ("nvfp4", "gemv"))
    assert Requirement.parse(["gemv"]).all_reachable is False and Requirement.parse([]).active is False
    # no device at all is judged as the CPU; an absent operator is an error, not a neighbour
    assert CoverageData().analyze().devices == ("cpu",)
    analysis = CoverageData.from_events(cpu_events(DECODE_ONLY)).analyze()
    with pytest.raises(UnknownPathError, match="no operator 'a'"):
        analysis.operator("a")
    # an unresolvable requirement is reported among the failures, not raised
    assert analysis.failures(Requirement.parse(["nope"]))[0].startswith("unknown dispatch path 'nope'")
    # the exact words of a missed guarded path
    op = analysis.operator("nvfp4")
    vec8 = MODEL.path("prefill_vec8")
    assert analysis.failures(Requirement.parse(["prefill_vec8"])) == [
        "required path nvfp4:prefill_vec8 was never taken; it is taken when k_mod_8 (K % 8 == 0) and "
        "block_size_even (block_size % 2 == 0) and aligned (packed rows 4-byte, output 16-byte aligned) and no "
        f"earlier path in gemv > native_fp4 > fused_wgmma > fused_mma > prefill_vec8 > prefill_scalar applies "
        f"[{vec8.source}]"]
    # required sides carry no reason; per device, every reachable side counts in the denominator
    assert all(s.reason is None for s in op.sides if s.required)
    [cpu] = op.per_device
    # gemv, fused_wgmma, fused_mma, prefill_vec8, prefill_scalar: every path but native_fp4
    assert cpu.sides_reachable == len(reachable_items([CPU])[1]) and cpu.paths_reachable == 5


def test_more_edges_the_mutation_run_found_untested():
    from nvfp4_harness.model import DispatchModel, Guard, PathSpec, simulate

    # an empty analysis is 100%, not 99 or 101; per-device percentages are rounded like the others
    assert CoverageData().analyze().percent == 100.0
    summary = CoverageData.from_events(cpu_events(DECODE_ONLY)).to_dict()["summary"]
    assert summary["per_device"]["cpu"]["percent"] == 46.88  # 15/32 (see above)
    summary = CoverageData.from_events(cpu_events(DECODE_AND_K_EDGES)).to_dict()["summary"]
    assert summary["per_device"]["cpu"]["percent"] == 62.5  # 20/32 (see above)
    # a path named before 'all-reachable' is required on its own, not as 'every reachable path'
    model = DispatchModel("alpha", [PathSpec("abc", guards=[Guard("big", "p > 5", lambda p, d, pol: p > 5)]),
                                    PathSpec("mid", guards=[Guard("medium", "p > 3", lambda p, d, pol: p > 3)]),
                                    PathSpec("zzz")])
    data = CoverageData.from_events([(simulate(model, 4), "t")])
    failures = data.analyze().failures(Requirement.parse(["alpha:abc"]))
    assert len(failures) == 1 and failures[0].startswith("required path alpha:abc was never taken")
    known = {"alpha": model.path_names, "nvfp4": PATH_NAMES}
    with pytest.raises(UnknownPathError, match="unknown dispatch path 'zzzz' of operator 'alpha'"):
        Requirement.parse(["alpha:zzzz"]).resolve(known)
    assert Requirement.parse(["alpha:abc", "gemv"]).resolve(known).items == (("alpha", "abc"), ("nvfp4", "gemv"))
    with pytest.raises(UnknownPathError, match=r"known: none \(register its model with --dispatch-model\)"):
        Requirement.parse(["alpha:abc"]).resolve({})
    with pytest.raises(UnknownPathError, match="recorded: none"):
        CoverageData().analyze().operator("alpha")
    # the sides of an unreachable path carry that path's reason, whatever the names' order
    gpu_only = DispatchModel("order", [PathSpec("zeta", guards=[Guard("any", "always", lambda p, d, pol: True)]),
                                       PathSpec("alpha_gpu", unreachable=lambda d: None if d.sm else "needs a GPU",
                                                guards=[Guard("g", "always", lambda p, d, pol: True)]),
                                       PathSpec("last")])
    op = CoverageData.from_events([(simulate(gpu_only, 1), "t")]).analyze().operator("order")
    assert [s.reason for s in op.sides_of("alpha_gpu")] == ["needs a GPU", "needs a GPU"]
    # findings say how many calls
    finding = DispatchModel("findings", [PathSpec("a"), PathSpec("b")])
    from nvfp4_harness.model import build_event

    events = [(build_event(finding, "b", i), f"t{i}") for i in range(2)]
    [message] = CoverageData.from_events(events).analyze().failures()
    assert "(2 calls; e.g. t0, t1)" in message


def test_a_guard_that_cannot_hold_on_a_device_makes_its_path_unreachable_there_only():
    """``true_unreachable`` on a guard: the path cannot be taken on that device (all its guards
    must hold), so the path and both its sides leave that device's denominator with the guard's
    reason, while a device that can take it keeps them required."""
    from nvfp4_harness.model import DeviceCaps, DispatchModel, Guard, PathSpec, simulate

    model = DispatchModel("sided", [
        PathSpec("tensor", guards=[Guard("has_gpu", "device is a GPU", lambda p, d, pol: d.sm is not None,
                                         true_unreachable=lambda d: None if d.sm else "a CPU is no GPU")]),
        PathSpec("scalar")])
    gpu = DeviceCaps.simulated_gpu(9)
    cpu_only = CoverageData.from_events([(simulate(model, 1), "t_cpu")]).analyze().operator("sided")
    assert [(s.required, s.reason) for s in cpu_only.sides_of("tensor")] == [(False, "a CPU is no GPU")] * 2
    [cpu] = cpu_only.per_device
    assert (cpu.paths_reachable, cpu.paths_hit, cpu.sides_reachable, cpu.sides_hit) == (1, 1, 0, 0)

    both = CoverageData.from_events([(simulate(model, 1), "t_cpu"), (simulate(model, 1, gpu), "t_gpu")])
    op = both.analyze().operator("sided")
    assert [(s.passed, s.required, s.reason, s.count) for s in op.sides_of("tensor")] == [
        (True, True, None, 1), (False, True, None, 1)]
    by_label = {d.label: (d.paths_reachable, d.paths_hit, d.sides_reachable, d.sides_hit) for d in op.per_device}
    assert by_label == {"cpu": (1, 1, 0, 0), gpu.label: (2, 1, 2, 1)}


def test_a_declared_operator_with_no_calls_requires_every_path_and_side():
    """A model registered for a run that never called it: no device was judged, so nothing is
    excused and the report shows every path and side missing."""
    from nvfp4_harness.model import DispatchModel, Guard, PathSpec

    data = CoverageData()
    data.declare(DispatchModel("idle", [PathSpec("fast", guards=[Guard("small", "p < 4", lambda p, d, pol: p < 4)]),
                                        PathSpec("slow")]))
    op = data.analyze().operator("idle")
    assert [(p.name, p.reachable, p.hits) for p in op.paths] == [("fast", True, 0), ("slow", True, 0)]
    assert [(s.required, s.reason, s.missed) for s in op.sides] == [(True, None, True)] * 2
