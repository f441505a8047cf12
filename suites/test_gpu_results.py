"""CPU CI checks of what the H200 run committed under fixtures/gpu (no GPU needed).

The GPU hashes are only evidence if the same inputs give the same hashes on the CPU
reference here: every case is regenerated from its seed and hashed again.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from nvfp4_harness.nvfp4 import gpu_cases, tables
from nvfp4_harness.nvfp4.gpu_check import DEFAULT_OUT
from nvfp4_harness.nvfp4.verify import tensor_sha256
from nvfp4_kernels import reference

RESULTS = DEFAULT_OUT / "gpu_check.json"
pytestmark = [
    pytest.mark.dispatch,
    pytest.mark.skipif(not RESULTS.exists(), reason="no GPU results committed yet: run "
                       "`python -m nvfp4_harness gpu-check` on a GPU and commit fixtures/gpu"),
]


@pytest.fixture(scope="module")
def results():
    return json.loads(RESULTS.read_text())


def test_provenance_is_complete(results):
    prov = results["provenance"]
    for key in ("gpu", "driver", "cuda_runtime", "torch", "date", "command", "git_commit", "compute_capability"):
        assert prov.get(key), f"provenance lacks {key}"


def test_every_gpu_check_passed(results):
    failed = {name: c.get("error") or c.get("failures") for name, c in results["checks"].items() if not c["passed"]}
    assert not failed
    assert {"fp4_table", "dequant", "matmul", "misaligned", "observe", "sanitizer"} <= set(results["checks"])


def test_nvidia_fp4_conversion_equals_the_committed_byte_table():
    gpu = tables.parse_table((DEFAULT_OUT / "nv_cvt_fp4x2_to_halfraw2.csv").read_text())
    ours = tables.parse_table((tables.TABLE_DIR / "e2m1x2_to_float16.csv").read_text())
    assert np.array_equal(gpu, ours)


def test_gpu_run_covered_the_current_case_matrix(results):
    recorded = {c["name"] for c in results["checks"]["dequant"]["cases"]}
    assert recorded == {c.name for c in gpu_cases.dequant_cases()}


@pytest.mark.parametrize("case", gpu_cases.dequant_cases(), ids=lambda c: c.name)
def test_committed_gpu_hashes_equal_the_cpu_reference(results, case):
    record = next(c for c in results["checks"]["dequant"]["cases"] if c["name"] == case.name)
    assert set(record["gpu"]) == set(case.paths()), "every admitted kernel must have run"
    packed, scales, g = gpu_cases.operands(case)
    cpu_hash = tensor_sha256(reference.dequantize(packed, scales, g, case.block_size, case.dtype))
    assert record["cpu_reference"] == cpu_hash
    for path, gpu_hash in record["gpu"].items():
        assert gpu_hash == cpu_hash, f"{path} on the GPU differs from the CPU reference"


def test_observed_kernels_matched_every_path(results):
    rows = results["checks"]["observe"]["rows"]
    # rows of gpu-check >= 0.2 hold the path observed through the model's kernel patterns and the
    # instrumented one; those of 0.1 the instrumented paths checked against kernel fragments
    seen = {p for r in rows for p in r.get("instrumented", r.get("paths", []))}
    assert {"gemv", "prefill_vec8", "prefill_scalar"} <= seen
    for r in rows:
        if "observed" in r:
            assert r["instrumented"] == [r["observed"]], r
    assert all(not r["problems"] for r in rows)


GPU_COVERAGE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "coverage-gpu.json"


def _fingerprint_without(model, path: str) -> str:
    """The fingerprint ``model`` had before ``path`` was declared (the declarations otherwise as today)."""
    from nvfp4_harness.model.declare import declaration_fingerprint

    return declaration_fingerprint(model.name, model.ops, model.shortcuts, [
        (p.name, p.ops, [(g.name, g.description) for g in p.guards]) for p in model.paths if p.name != path])


def test_committed_gpu_coverage_reached_everything_reachable_on_the_h200() -> None:
    """The GPU suites' coverage (fixtures/gpu/coverage-gpu.json), judged under the declarations
    it was recorded with (the snapshot the file carries): every path and guard side reachable on
    the H200 was reached there by the GPU's own events, and native_fp4 is unreachable on it with
    the reason. On an sm_90 GPU every declared path but native_fp4 is reachable, with both
    sides of each of its guards but one: fused_wgmma's arch_sm90 always holds there."""
    from nvfp4_harness.engine.analysis import Requirement
    from nvfp4_harness.engine.data import CoverageData
    from nvfp4_kernels.model import MODEL

    data = CoverageData.read(GPU_COVERAGE)
    declared = data.operator("nvfp4").declaration["paths"]
    reachable = sum(1 + 2 * len(p["guards"]) for p in declared if p["name"] != "native_fp4")
    reachable -= any(p["name"] == "fused_wgmma" for p in declared)  # fused_wgmma.arch_sm90=false
    op = data.analyze().operator("nvfp4")
    h200 = [d for d in op.per_device if d.label.startswith("NVIDIA H200")]
    assert h200 and all(d.covered == d.total == reachable for d in h200), \
        [(d.label, d.covered, d.total, reachable) for d in h200]
    native = op.path("native_fp4")
    assert not native.reachable and all("sm_120..129" in r for r in native.unreachable_on.values())
    assert data.analyze().failures(Requirement.parse(["all-reachable"])) == []
    assert op.summary == MODEL.summary
    # the snapshot is today's model or, recorded before fused_mma existed, today's model without it
    assert data.operator("nvfp4").fingerprint in (MODEL.fingerprint, _fingerprint_without(MODEL, "fused_mma"))


def test_committed_gpu_coverage_combines_with_todays_model() -> None:
    """The committed GPU coverage merges with a CPU run of today's model: it was recorded with
    today's declarations. A file recorded before the fused_mma path existed cannot be (its
    fingerprint differs, and the H200 never ran the fused kernel): that needs a fresh GPU run."""
    from nvfp4_harness.engine.combine import combine
    from nvfp4_harness.engine.data import CoverageData
    from nvfp4_harness.nvfp4.shapes import simulated_event
    from nvfp4_kernels.model import MODEL

    data = CoverageData.read(GPU_COVERAGE)
    recorded = data.operator("nvfp4")
    if "fused_mma" not in [p["name"] for p in recorded.declaration["paths"]]:
        pytest.skip(f"fixtures/gpu/coverage-gpu.json was recorded before the fused_mma path existed: its "
                    f"declaration (fingerprint {recorded.fingerprint}) has no fused_mma, so it cannot combine "
                    f"with today's model ({MODEL.fingerprint}); rerun the GPU suites (tox -e gpu) on the "
                    f"H200 and commit the file")
    merged = combine([data, CoverageData.from_events([simulated_event(1, 64)])])
    assert merged.operator("nvfp4").fingerprint == MODEL.fingerprint
