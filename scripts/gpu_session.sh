#!/usr/bin/env bash
# One device call on the H200: install, build, verify and capture (phase "verify"), or time
# everything beside the copy ceiling (phase "bench"). Results are packed into $OUT as tarballs
# because the device tool returns at most 8 files; unpack them at the repository root.
#
#   NVFP4_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_session.sh verify
set -uo pipefail
phase=${1:?usage: gpu_session.sh explore|verify|bench|all}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step install
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv

if [[ $phase == explore ]]; then
  step "GEMV variants: correctness of the non-default main loops"
  for v in 1 2; do
    NVFP4_GEMV_VARIANT=$v python3 -m pytest -q -p no:cacheprovider suites/test_cuda_kernels.py -k gemv 2>&1 | tail -2
  done
  step "GEMV variants and vec8: timing beside the copy ceiling"
  python3 scripts/gemv_variants.py --out "$OUT" 2>&1 | tail -30
  step "ncu (clock control off) of the vec8 and GEMV kernels"
  ncu --clock-control none -k regex:nvfp4 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    python3 scripts/gemv_variants.py --profile-once > "$OUT/ncu.txt" 2>&1; tail -5 "$OUT/ncu.txt"
  step "dispatch suites on the GPU"
  python3 -m pytest -n 8 -m dispatch -q -p no:cacheprovider --dispatch-report=term \
    --dispatch-require=all-reachable 2>&1 | tee "$OUT/pytest-gpu.log" | tail -40 || status=1
  step "gpu-check, quick, no sanitizer"
  python3 -m harness gpu-check --quick --no-sanitizer --out /tmp/gpucheck 2>&1 | tail -12 || status=1
fi

if [[ $phase == verify || $phase == all ]]; then
  step "dispatch suites on the GPU (coverage JSON for combine)"
  python3 -m pytest -n 8 -m dispatch -q -p no:cacheprovider \
    --dispatch-report=term --dispatch-report=json:fixtures/gpu/coverage-gpu.json \
    --dispatch-require=all-reachable 2>&1 | tee "$OUT/pytest-gpu.log" | tail -60 || status=1
  step "GPU-keyed goldens (this run fails by design when it writes new goldens)"
  python3 -m pytest -n 8 -m dispatch -q -p no:cacheprovider --golden-update 2>&1 | tail -8
  step "gpu-check"
  python3 -m harness gpu-check 2>&1 | tee "$OUT/gpu-check.log" | tail -30 || status=1
  tar czf "$OUT/verify.tgz" fixtures/gpu fixtures/goldens
fi

if [[ $phase == bench || $phase == all ]]; then
  step bench
  python3 -m harness bench --out benchmarks/results --git-commit "${NVFP4_GIT_COMMIT:-unknown}" 2>&1 | tee "$OUT/bench.log" | tail -80 || status=1
  tar czf "$OUT/bench.tgz" benchmarks/results
fi
exit $status
