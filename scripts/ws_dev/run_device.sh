#!/bin/bash
# One device call: install, smoke test (a hang shows here first), correctness + speed (+ variants),
# optionally sanitizers and one ncu profile.
cd "$(dirname "$0")/../.."
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export NVFP4_BUILD_DIR=$PWD/kernels/_build
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u +%T; echo "== smoke"; timeout 45 python3 scripts/ws_dev/ws_dev.py --out "$OUT/smoke" ${WS_ARGS} --sanitize > /tmp/smoke.txt 2>&1
rc=$?; tail -5 /tmp/smoke.txt
if [ $rc -ne 0 ]; then echo "smoke failed (rc $rc): stopping here"; exit $rc; fi
date -u +%T; echo "== dev ${WS_ARGS}"; timeout ${WS_TIMEOUT:-400} python3 scripts/ws_dev/ws_dev.py --out "$OUT/ws" ${WS_ARGS} ${WS_VARIANTS:+--variants "$WS_VARIANTS"} 2>&1 | tail -45
if [ -n "$WS_SANITIZE" ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== $tool"; timeout 150 compute-sanitizer --tool $tool python3 scripts/ws_dev/ws_dev.py --out /tmp/san-$tool ${WS_ARGS} --sanitize 2>&1 | tail -3
  done
fi
if [ -n "$WS_NCU" ]; then
  echo "== ncu $WS_NCU"
  timeout 200 ncu --clock-control none -k regex:nvfp4_fused_ws_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section SourceCounters --section InstructionStats --section ComputeWorkloadAnalysis \
    python3 scripts/ws_dev/ws_dev.py --out /tmp/ncu-ws ${WS_ARGS} --profile-once "$WS_NCU" > "$OUT/ncu.txt" 2>&1
  cp "$OUT/ncu.txt" /dev/null; grep -E "Duration|Throughput|Busy|Issued|Eligible|Active Warps|Bank|Shared" "$OUT/ncu.txt" | head -30
fi
if [ -n "$WS_TRACE" ]; then
  for spec in $WS_TRACE; do echo "== trace $spec"; timeout 60 python3 scripts/ws_dev/ws_dev.py --out "$OUT/trace" ${WS_ARGS} --trace "$spec" 2>&1 | tail -14; done
fi
