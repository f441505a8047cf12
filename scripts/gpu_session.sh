#!/usr/bin/env bash
# One device call on the H200 (or a host with several GPUs). Results are packed into $OUT as
# tarballs because the device tool returns at most 8 files; unpack them at the repository root.
#
#   NVFP4_GIT_COMMIT=$(git rev-parse HEAD) bash scripts/gpu_session.sh PHASE[,PHASE...]
#
# Phases (several, comma-separated, run in the order below; `all` is verify, mutants and bench):
# verify: the multi-GPU run (when the host has 2+ GPUs), new GPU-keyed goldens, then the GPU suites
#         against them with their gate and coverage JSON, gpu-check and an ncu profile of each kernel
#         (NVFP4_SKIP_NCU=1 leaves the profile out);
# paths:  the benchmark's "paths" section only (every path at every M, the policy's crossovers and
#         issue #10's targets);
# mutants: the CUDA mutants (mutate --gpu) against the GPU suites (after verify has recorded goldens;
#         NVFP4_MUTANTS_PART=1/2, then 2/2, splits them over two calls);
# bench:  every benchmark section beside the copy ceiling;
# wgmma:  the fused_wgmma path's own evidence: an ncu profile of its launches (row-major and
#         tile-contiguous, fixtures/gpu/ncu-wgmma.txt) and its CUDA mutants
#         (fixtures/gpu/mutation-gpu-wgmma.json, to join into mutation-gpu.json);
# mma-order: scripts/ws_dev/mma_order_dev.py, fused_wgmma in fused_mma's K order (a dev variant:
#         its bits against fused_mma, then timings beside the library's paths); needs the dev
#         library built here first (python scripts/ws_dev/ra_dev.py --out /tmp/ra --prebuild) and
#         carried (kernels/_build);
# host:   only the host-time section and a per-call host profile (quick #14 iterations);
# stalls: ncu of the launches of issue #10's unmet targets (profile_once --small-m: fused_mma at
#         M = 1, 16, 64 and fused_wgmma's 64-row tile at M = 64, both large shapes, registered
#         copy) with every per-reason stall ratio, the pipes' utilization and the scheduler's
#         issue statistics (fixtures/gpu/ncu-small-m.txt): what holds each kernel, reason by reason;
# ablate: scripts/ws_dev/ablate_dev.py, fused_wgmma with its decode, MMAs or weight loads compiled
#         out, beside the full kernel and fused_mma (needs python scripts/ws_dev/ra_dev.py --out
#         /tmp/ra --prebuild --ablations here first, and kernels/_build carried).
# timeline: scripts/fused_timeline.py, a per-block timeline of fused_mma's flushed calls at M = 1
#         and 16 on both large shapes, with the host's split-K sum and the finalize kernel's
#         (benchmarks/NOTES.md, thirty-third session); build its two libraries here first
#         (python scripts/fused_timeline.py --build-only --build-dir kernels/_build/timeline) and
#         carry kernels/_build, or it builds them on the device (a few minutes);
# library-ab: scripts/fused_library_ab.py, a baseline build of the library against this tree's on
#         the fused path (tile-contiguous weights; timed in bf16, bits compared in both types; same
#         bits expected where both split alike), with a provenance record beside it:
#         the baseline is $NVFP4_AB_BASE, by default the one .so under kernels/_build/base (build it
#         here from the baseline's sources with build_library(source_dir=..., cache_dir=
#         Path("kernels/_build/base")) and carry kernels/_build); $NVFP4_AB_MS and $NVFP4_AB_SHAPES
#         choose the rows (default M = 2..64 on both large shapes and 4096 x 4096).
set -uo pipefail
phase=${1:?usage: gpu_session.sh verify|mutants|bench|paths|wgmma|mma-order|host|stalls|ablate|timeline|library-ab|all[,...]}
# wants P: P is one of the comma-separated phases asked for (all: verify, mutants, bench)
wants() {
  local p
  for p in ${phase//,/ }; do
    [[ $p == "$1" ]] && return 0
    [[ $p == all && " verify mutants bench " == *" $1 "* ]] && return 0
  done
  return 1
}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
commit=${NVFP4_GIT_COMMIT:-unknown}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

step install
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -3
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
gpus=$(python3 -c 'import torch; print(torch.cuda.device_count())')

if wants verify; then
  if (( gpus > 1 )); then
    step "multi-gpu: the GPU dispatch suites on 1 and on $gpus GPUs"
    python3 -m nvfp4_harness multi-gpu --git-commit "$commit" 2>&1 | tail -4 || status=1
  fi
  step "GPU-keyed goldens first (this run fails by design when it writes new goldens)"
  python3 -m pytest -n 8 -q -p no:cacheprovider -m "dispatch or gpu" --golden-update > "$OUT/pytest-golden-update.log" 2>&1
  grep -E "recorded|wrote| passed| failed|^FAILED" "$OUT/pytest-golden-update.log" | head -20
  step "GPU suites against those goldens (gate, coverage JSON for combine)"
  python3 -m pytest -n 8 -q -p no:cacheprovider -m "dispatch or gpu" --dispatch-report=term-missing \
    --dispatch-report=json:fixtures/gpu/coverage-gpu.json --dispatch-require=all-reachable \
    > "$OUT/pytest-gpu.log" 2>&1 || status=1
  grep -E " passed| failed|^FAILED|^ERROR|FAIL:|TOTAL" "$OUT/pytest-gpu.log" | head -30
  step gpu-check
  python3 -m nvfp4_harness gpu-check 2>&1 | tee "$OUT/gpu-check.log" | tail -30 || status=1
  step "ncu (clock control off): the limiter of each kernel on the largest seed-of-6 shape"
  [[ -n "${NVFP4_SKIP_NCU:-}" ]] || ncu --clock-control none -k regex:nvfp4 --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    python3 -m nvfp4_harness.nvfp4.profile_once > fixtures/gpu/ncu-kernels.txt 2>&1; tail -3 fixtures/gpu/ncu-kernels.txt
  tar czf "$OUT/verify.tgz" fixtures/gpu fixtures/goldens benchmarks/multi_gpu 2>/dev/null
fi

if wants mutants; then
  step "GPU mutants: bugs planted in the CUDA sources, the GPU suites must catch each"
  # NVFP4_MUTANTS_PART=K/N plants the K-th of N slices of the table (the whole table does not fit
  # one 10-minute device call); the file is rewritten after every mutant, so a cut-off run keeps
  # what it measured. Join the parts' mutants into fixtures/gpu/mutation-gpu.json.
  part=${NVFP4_MUTANTS_PART:-}
  out_name=mutation-gpu${part:+-part-${part//\//-of-}}.json
  python3 -m nvfp4_harness mutate --gpu --pytest-args="-n 8" ${part:+--part "$part"} --out "fixtures/gpu/$out_name" \
    2>&1 | tee "$OUT/mutate-gpu.log" | tail -14 || status=1
  cp "fixtures/gpu/$out_name" "$OUT/" 2>/dev/null
fi

if wants bench; then
  step bench
  python3 -m nvfp4_harness bench --out benchmarks/results --git-commit "$commit" 2>&1 \
    | tee "$OUT/bench.log" | tail -80 || status=1
  tar czf "$OUT/bench.tgz" benchmarks/results
fi

if wants paths; then
  step "bench --only paths"
  python3 -m nvfp4_harness bench --only paths --out benchmarks/results --git-commit "$commit" 2>&1 \
    | tee "$OUT/bench.log" | tail -60 || status=1
  tar czf "$OUT/bench.tgz" benchmarks/results
fi

if wants wgmma; then
  step "ncu (clock control off): the fused_wgmma launches of profile_once"
  ncu --clock-control none -k regex:wgmma --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    python3 -m nvfp4_harness.nvfp4.profile_once > fixtures/gpu/ncu-wgmma.txt 2>&1; tail -3 fixtures/gpu/ncu-wgmma.txt
  step "GPU mutants of fused_wgmma.cu"
  names=$(python3 -c 'from nvfp4_harness.nvfp4.mutation import GPU_MUTATIONS as M
print(",".join(m.name for m in M if m.file.endswith("fused_wgmma.cu")))')
  python3 -m nvfp4_harness mutate --gpu --pytest-args="-n 8" --only "$names" \
    --out fixtures/gpu/mutation-gpu-wgmma.json 2>&1 | tee "$OUT/mutate-wgmma.log" | tail -10 || status=1
  tar czf "$OUT/wgmma.tgz" fixtures/gpu/ncu-wgmma.txt fixtures/gpu/mutation-gpu-wgmma.json
fi

if wants mma-order; then
  step "fused_wgmma in fused_mma's K order (dev variant): bits against fused_mma, then timings"
  python3 scripts/ws_dev/mma_order_dev.py --out "$OUT/mma-order" 2>&1 | tee "$OUT/mma-order.log" | tail -16 || status=1
fi

if wants stalls; then
  step "ncu (clock control off): per-reason stalls of the small-M launches"
  ncu --clock-control none -k regex:"fused|finalize|permute" --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --metrics "regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$" \
    python3 -m nvfp4_harness.nvfp4.profile_once --small-m > fixtures/gpu/ncu-small-m.txt 2>&1 || status=1
  python3 - <<'PY' || status=1
import json
from nvfp4_harness.nvfp4.provenance import gpu_provenance
record = gpu_provenance(["ncu", "--clock-control", "none", "(sections and stall metrics: scripts/gpu_session.sh stalls)",
                         "python3", "-m", "nvfp4_harness.nvfp4.profile_once", "--small-m"])
open("fixtures/gpu/ncu-small-m.provenance.json", "w").write(json.dumps(record, indent=1) + "\n")
PY
  grep -E "^  [a-z].*kernel|Duration|stalled_(long_scoreboard|wait|math_pipe|short_scoreboard|barrier|not_selected)" \
    fixtures/gpu/ncu-small-m.txt | head -60
  tar czf "$OUT/stalls.tgz" fixtures/gpu/ncu-small-m.txt fixtures/gpu/ncu-small-m.provenance.json
fi

if wants ablate; then
  step "fused_wgmma with parts compiled out (dev builds), beside the full kernel and fused_mma"
  python3 scripts/ws_dev/ablate_dev.py --out "$OUT/ablate" 2>&1 | tee "$OUT/ablate.log" | tail -12 || status=1
fi

if wants timeline; then
  step "fused_mma's calls block by block (instrumented build beside the plain one)"
  gpu_tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr -cs 'A-Za-z0-9' '-' | tr 'A-Z' 'a-z')
  python3 scripts/fused_timeline.py --build-dir kernels/_build/timeline --reductions host,finalize \
    --out "$OUT/fused-timeline-${gpu_tag%-}-$commit.json" 2>&1 | tee "$OUT/timeline.log" | tail -14 || status=1
fi

if wants library-ab; then
  step "library A/B: a baseline build against this tree's (fused path, tiled weights, bf16)"
  base=${NVFP4_AB_BASE:-$(ls kernels/_build/base/libnvfp4_*.so 2>/dev/null | head -1)}
  candidate=$(python3 -c 'from nvfp4_kernels import build; print(build.build_library())')
  if [[ -z $base || ! -f $base ]]; then
    echo "no baseline library: build one into kernels/_build/base here and carry kernels/_build"; status=1
  else
    ab=(python3 scripts/fused_library_ab.py --a "$base" --b "$candidate" --a-tiled placed --b-tiled
        --ms "${NVFP4_AB_MS:-2,4,8,16,32,64}" --shapes "${NVFP4_AB_SHAPES:-17408x5120,5120x17408,4096x4096}"
        --out "$OUT/library-ab.json")
    "${ab[@]}" 2>&1 | tee "$OUT/library-ab.log" | tail -40 || status=1
    python3 - "$OUT/library-ab.provenance.json" "${ab[@]}" <<'PY' || status=1
import json, sys
from nvfp4_harness.nvfp4.provenance import gpu_provenance  # the commit: $NVFP4_GIT_COMMIT
open(sys.argv[1], "w").write(json.dumps(gpu_provenance(sys.argv[2:]), indent=1) + "\n")
PY
  fi
fi

if wants host; then
  step "bench --only host"
  python3 -m nvfp4_harness bench --only host --out benchmarks/results --git-commit "$commit" 2>&1 \
    | tee "$OUT/bench-host.log" | tail -25 || status=1
  step "host profile of one decode call"
  python3 scripts/host_profile.py 1 17408 5120 2>&1 | head -45 > "$OUT/host-profile.txt"; head -30 "$OUT/host-profile.txt"
  tar czf "$OUT/host.tgz" benchmarks/results
fi
exit $status
