#!/usr/bin/env bash
# One device call on the H200: install, build, verify and capture (phase "verify"), or time
# everything beside the copy ceiling (phase "bench"). Results are packed into $OUT as tarballs
# because the device tool returns at most 8 files; unpack them at the repository root.
#
#   NVFP4_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_session.sh verify
set -uo pipefail
phase=${1:?usage: gpu_session.sh verify|bench|all}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step install
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv

if [[ $phase == verify || $phase == all ]]; then
  step "dispatch suites on the GPU (coverage JSON for combine)"
  python3 -m pytest -n 8 -m dispatch -q -p no:cacheprovider \
    --dispatch-report=term --dispatch-report=json:fixtures/gpu/coverage-gpu.json \
    --dispatch-require=all-reachable 2>&1 | tee "$OUT/pytest-gpu.log" | tail -60 || status=1
  step "GPU-keyed goldens (this run fails by design when it writes new goldens)"
  python3 -m pytest -n 8 -m dispatch -q -p no:cacheprovider --golden-update 2>&1 | tail -8
  step "gpu-check"
  python3 -m nvfp4_harness gpu-check 2>&1 | tee "$OUT/gpu-check.log" | tail -30 || status=1
  step "ncu (clock control off): the limiter of each kernel on the largest seed-of-6 shape"
  ncu --clock-control none -k regex:nvfp4 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    python3 -m nvfp4_harness.nvfp4.profile_once > fixtures/gpu/ncu-kernels.txt 2>&1; tail -3 fixtures/gpu/ncu-kernels.txt
  tar czf "$OUT/verify.tgz" fixtures/gpu fixtures/goldens
fi

if [[ $phase == bench || $phase == all ]]; then
  step bench
  python3 -m nvfp4_harness bench --out benchmarks/results --git-commit "${NVFP4_GIT_COMMIT:-unknown}" 2>&1 | tee "$OUT/bench.log" | tail -80 || status=1
  tar czf "$OUT/bench.tgz" benchmarks/results
fi
exit $status
