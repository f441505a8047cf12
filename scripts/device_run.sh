#!/usr/bin/env bash
# One device call: install, GPU suites, gpu-check, chosen bench sections, a host-time profile.
# Results under $OUT (at most 8 files): logs plus a tarball of fixtures/gpu, goldens and results.
#   bash scripts/device_run.sh "host" [extra pytest args]
set -uo pipefail
sections=${1:-host}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
step install
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
step "GPU suites (dispatch gate, JSON for combine)"
python3 -m pytest -n 8 -q -p no:cacheprovider -m "dispatch or gpu" \
  --dispatch-report=term --dispatch-report=json:fixtures/gpu/coverage-gpu.json \
  --dispatch-require=all-reachable 2>&1 > "$OUT/pytest-gpu.log"; echo "pytest rc=$?"
grep -E "passed|failed|^FAILED|^ERROR|FAIL:" "$OUT/pytest-gpu.log" | head -40
step gpu-check
python3 -m nvfp4_harness gpu-check 2>&1 | tee "$OUT/gpu-check.log" | tail -9
step "bench --only $sections"
python3 -m nvfp4_harness bench --only "$sections" --out benchmarks/results --git-commit "${NVFP4_GIT_COMMIT:-unknown}" \
  2>&1 | tee "$OUT/bench.log" | tail -25
step "host profile"
python3 scripts/host_profile.py 1 17408 5120 2>&1 | head -45 > "$OUT/host-profile.txt"; head -30 "$OUT/host-profile.txt"
tar czf "$OUT/results.tgz" fixtures/gpu fixtures/goldens benchmarks/results
