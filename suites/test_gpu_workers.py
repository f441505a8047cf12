"""One xdist worker per GPU, and the per-device facts that survive every merge, tested with
simulated devices (no GPU needed)."""

from __future__ import annotations

import json

import pytest
from nvfp4_harness.engine import gpu_workers
from nvfp4_harness.engine.combine import combine
from nvfp4_harness.engine.data import CoverageData
from nvfp4_harness.engine.reports.term import render_term
from nvfp4_harness.model import DeviceCaps, physical_gpu_index
from nvfp4_harness.nvfp4.shapes import simulated_event
from nvfp4_kernels.model import Policy

pytest_plugins = ["pytester"]

SMI = "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)\n"


def test_worker_ids_and_visible_gpus():
    assert [gpu_workers.worker_index(w) for w in ("gw0", "gw7", "master", "")] == [0, 7, None, None]
    assert gpu_workers.visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert gpu_workers.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert gpu_workers.visible_gpus({}, smi=SMI) == ["0", "1"]


@pytest.mark.parametrize("mapping, gpus, expected", [
    ("round-robin", ["0", "1"], ["0", "1", "0", "1", "0"]),
    ("round-robin", ["0"], [None] * 5),          # one GPU: a worker is left as it is
    ("round-robin", [], [None] * 5),             # a CPU machine
    ("none", ["0", "1"], [None] * 5),
    ("3,1", ["0", "1", "2", "3"], ["3", "1", "3", "1", "3"]),
])
def test_assignment(mapping, gpus, expected):
    parsed = gpu_workers.parse_mapping(mapping)
    assert [gpu_workers.assign(w, gpus, parsed) for w in range(5)] == expected


def test_a_bad_mapping_is_refused():
    with pytest.raises(ValueError, match="round-robin, none or a comma-separated list"):
        gpu_workers.parse_mapping(" , ")


def test_the_host_index_of_a_pinned_gpu():
    assert physical_gpu_index(0, {"CUDA_VISIBLE_DEVICES": "1"}) == 1
    assert physical_gpu_index(1, {"CUDA_VISIBLE_DEVICES": "3,2"}) == 2
    assert physical_gpu_index(0, {}) == 0
    assert physical_gpu_index(0, {"CUDA_VISIBLE_DEVICES": "GPU-aaaa"}) == 0


def h200(index):
    return DeviceCaps("NVIDIA H200", (9, 0), index=index)


def test_two_gpus_of_one_kind_stay_apart_through_json_and_combine():
    gemv_on = Policy(gemv_max_m=8)  # the decode calls take the GEMV (the default policy never does)
    gpu0 = CoverageData.from_events([(simulated_event(1, 64, caps=h200(0), policy=gemv_on), "t::decode"),
                                     (simulated_event(64, 64, caps=h200(0)), "t::prefill")])
    gpu1 = CoverageData.from_events([(simulated_event(64, 36, caps=h200(1)), "t::scalar")])
    cpu = CoverageData.from_events([(simulated_event(1, 64, policy=gemv_on), "t::cpu")])
    sm120 = CoverageData.from_events([(simulated_event(64, 64, caps=DeviceCaps.simulated_gpu(12, 0)), "t::native"),
                                      (simulated_event(64, 64, caps=DeviceCaps.simulated_gpu(12, 0),
                                                       policy=Policy(native_fp4_enabled=False)), "t::off")])
    merged = combine(CoverageData.loads(d.dumps()) for d in (cpu, gpu0, gpu1, sm120))
    labels = ["NVIDIA H200 (sm_90, GPU 0)", "NVIDIA H200 (sm_90, GPU 1)", "cpu", "simulated sm_120 (sm_120)"]
    assert sorted(merged.devices) == labels
    op = merged.analyze().operator("nvfp4")
    assert op.hits_by_device["gemv"] == {"NVIDIA H200 (sm_90, GPU 0)": 1, "cpu": 1}
    assert op.hits_by_device["prefill_scalar"] == {"NVIDIA H200 (sm_90, GPU 1)": 1}
    assert sorted(op.path("native_fp4").unreachable_on) == labels[:3]
    per = {d.label: d for d in op.per_device}
    assert (per["NVIDIA H200 (sm_90, GPU 1)"].paths_hit, per["cpu"].paths_hit) == (1, 1)
    # every declared path but fused_wgmma (sm_90 only): gemv, native_fp4, fused_mma, prefill_vec8, prefill_scalar
    assert per["simulated sm_120 (sm_120)"].paths_reachable == 5
    assert per["NVIDIA H200 (sm_90, GPU 0)"].paths_reachable == 5  # every path but native_fp4
    text = render_term(merged)
    assert "  native_fp4: reached on simulated sm_120 (sm_120) (1); unreachable on NVIDIA H200 (sm_90, GPU 0), " \
           "NVIDIA H200 (sm_90, GPU 1), cpu" in text
    assert "  prefill_scalar: reached on NVIDIA H200 (sm_90, GPU 1) (1)" in text
    summary = merged.to_dict()["summary"]
    assert set(summary["per_device"]) == set(labels)
    # the merge keeps the facts: the same counts whichever order the runs are combined in
    again = combine(CoverageData.loads(d.dumps()) for d in (sm120, gpu1, cpu, gpu0))
    assert again.to_dict(summary=False)["operators"] == merged.to_dict(summary=False)["operators"]


SUITE = '''
import os
import pytest
from nvfp4_harness.model import DeviceCaps, physical_gpu_index
from nvfp4_harness.nvfp4.shapes import simulated_event
from nvfp4_harness.model import announce


@pytest.mark.parametrize("i", range(8))
def test_on_my_gpu(i):
    # a worker pinned to one GPU sees it as index 0; events name its host index
    caps = DeviceCaps("NVIDIA H200", (9, 0), index=physical_gpu_index(0))
    announce(simulated_event(1 + i % 2, 64, caps=caps))
'''


def test_xdist_workers_pin_themselves_and_the_controller_merges_both_gpus(pytester, monkeypatch):
    pytester.makepyfile(test_gpus=SUITE)
    pytester.makeini("[pytest]\ndispatch_models = nvfp4_kernels.model\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # what the workers inherit: two visible GPUs
    two = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dispatch-report=json:two.json")
    assert two.ret == pytest.ExitCode.OK
    devices = {d["index"]: d["events"] for d in json.loads((pytester.path / "two.json").read_text())["devices"]}
    assert set(devices) == {0, 1} and sum(devices.values()) == 8
    off = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--worker-gpus=none",
                                        "--dispatch-report=json:off.json")
    assert off.ret == pytest.ExitCode.OK
    devices = {d["index"]: d["events"] for d in json.loads((pytester.path / "off.json").read_text())["devices"]}
    assert devices == {0: 8}, "without pinning every worker runs on the first GPU"
