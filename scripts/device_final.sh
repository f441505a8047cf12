#!/usr/bin/env bash
# The device calls that produce the committed GPU results. Phase "verify": the multi-GPU run
# (when the host has several GPUs), the GPU suites with their coverage JSON, new GPU goldens,
# gpu-check. Phase "bench": the benchmark. Results come back as one tarball under $OUT.
#   NVFP4_GIT_COMMIT=<commit> bash scripts/device_final.sh verify|bench
set -uo pipefail
phase=${1:?usage: device_final.sh verify|bench}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
step install
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')
if [[ $phase == verify ]]; then
  if (( gpus > 1 )); then
    step "multi-gpu: GPU dispatch suites on 1 and on $gpus GPUs"
    python3 -m nvfp4_harness multi-gpu --git-commit "${NVFP4_GIT_COMMIT:-unknown}" 2>&1 | tail -4
  fi
  step "GPU suites (gate, coverage JSON)"
  python3 -m pytest -n 8 -q -p no:cacheprovider -m "dispatch or gpu" --dispatch-report=term-missing \
    --dispatch-report=json:fixtures/gpu/coverage-gpu.json --dispatch-require=all-reachable > "$OUT/pytest-gpu.log" 2>&1
  echo "rc=$?"; grep -E " passed| failed|^FAILED|^ERROR|FAIL:|TOTAL" "$OUT/pytest-gpu.log" | head -30
  step "new GPU goldens (fails by design when it records one)"
  python3 -m pytest -q -p no:cacheprovider -m gpu --golden-update suites/test_gemv_bits.py suites/test_operator_hashes.py \
    suites/test_model.py 2>&1 | grep -E "recorded|passed|failed" | head -8
  step gpu-check
  python3 -m nvfp4_harness gpu-check 2>&1 | tee "$OUT/gpu-check.log" | tail -9
fi
if [[ $phase == bench ]]; then
  step bench
  python3 -m nvfp4_harness bench --out benchmarks/results --git-commit "${NVFP4_GIT_COMMIT:-unknown}" > "$OUT/bench.log" 2>&1
  echo "rc=$?"; tail -32 "$OUT/bench.log"
fi
tar czf "$OUT/results-$phase.tgz" fixtures/gpu fixtures/goldens benchmarks/results benchmarks/multi_gpu 2>/dev/null
ls -la "$OUT"
