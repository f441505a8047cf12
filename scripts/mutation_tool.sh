#!/usr/bin/env bash
# Mutation testing with cosmic-ray over the Python code whose mistakes a green run would hide:
#
#   guards      kernels/model.py             the guards that choose a path
#   dispatcher  kernels/dispatch.py          validation, path choice, backends, delivery
#   numerics    kernels/reference.py         the CPU paths the dispatcher runs (the oracle's twins)
#   verdicts    harness/engine/analysis.py   required / missed / unreachable, per device
#   recorder    harness/engine/recorder.py   which test an event is filed under
#
# Each session works in its own throw-away copy of the checkout (your tree is never mutated);
# the copy imports the project through links (.import/nvfp4_kernels -> kernels ...), ahead of
# the installed editable package. Mutants of type annotations, and of the functions that only run
# on a CUDA device (the sessions run on the CPU), are skipped before the run; scripts/mutation_skip.py
# says why. Sessions run one after another, one worker each.
#
#   pip install cosmic-ray
#   bash scripts/mutation_tool.sh [WORKDIR [SESSION ...]]        # all sessions: several hours
#   bash scripts/mutation_tool.sh /tmp/nvfp4-cosmic-ray dispatcher # one session (~1 h on 1 core)
#   cr-report WORKDIR/dispatcher/session.sqlite --surviving-only --show-diff
#   python scripts/mutation_review.py WORKDIR/dispatcher --recheck
#
# docs/mutation-testing.md holds the last runs' results and the review of every survivor.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/nvfp4-cosmic-ray}
shift || true
python=${PYTHON:-$(command -v python3)}
all=(guards dispatcher numerics verdicts recorder)
declare -A modules=(
  [guards]="kernels/model.py" [dispatcher]="kernels/dispatch.py" [numerics]="kernels/reference.py"
  [verdicts]="harness/engine/analysis.py" [recorder]="harness/engine/recorder.py"
)
# The suites that exercise each module on the CPU, quickest and broadest first (-x stops at the
# first failure, so a mutant the early files kill costs a few seconds).
declare -A tests=(
  [guards]="suites/test_dispatch_rules.py suites/test_dispatcher.py suites/test_boundary_inputs.py suites/test_shapes.py suites/test_contract.py -m 'not gpu'"
  [dispatcher]="suites/test_dispatch_edges.py suites/test_dispatcher.py suites/test_boundary_inputs.py suites/test_dispatch_rules.py suites/test_contract.py -m 'not gpu'"
  [numerics]="suites/test_exact_arithmetic.py suites/test_contract.py suites/test_dispatcher.py suites/test_goldens.py -m 'not gpu'"
  [verdicts]="suites/test_coverage_data.py suites/test_reports.py suites/test_recorder.py suites/test_gpu_workers.py suites/test_observe.py suites/test_model_api.py"
  [recorder]="suites/test_recorder.py suites/test_coverage_data.py suites/test_observe.py suites/test_model_api.py suites/test_plugin.py suites/test_concurrent_runs.py -m 'not gpu'"
)
# functions only a CUDA device calls: their mutants cannot be judged by a CPU session
declare -A cuda_only=(
  [dispatcher]="_cuda_matmul,_cuda_dequantize,_device_global_scale,_cached_device_scalar,_on_device,_fp32_reduction,cuda_device_caps"
)
sessions=("$@")
[ ${#sessions[@]} -eq 0 ] && sessions=("${all[@]}")
for name in "${sessions[@]}"; do
  [ -n "${modules[$name]:-}" ] || { echo "unknown session '$name' (one of: ${all[*]})" >&2; exit 2; }
done
for name in "${sessions[@]}"; do
  copy="$work/$name"
  rm -rf "$copy" && mkdir -p "$copy"
  (cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$copy")
  mkdir -p "$copy/.import" && ln -s ../harness "$copy/.import/nvfp4_harness" && ln -s ../kernels "$copy/.import/nvfp4_kernels"
  cat > "$copy/cr.toml" <<TOML
[cosmic-ray]
module-path = ["${modules[$name]}"]
timeout = 120.0
excluded-modules = []
test-command = "env PYTHONPATH=$copy/.import:$copy HYPOTHESIS_PROFILE=ci PYTHONDONTWRITEBYTECODE=1 $python -m pytest -x -q -p no:cacheprovider ${tests[$name]}"

[cosmic-ray.distributor]
name = "local"
TOML
  # the copy must import itself, not the installed checkout, or every mutant would "survive"
  (cd "$copy" && env PYTHONPATH="$copy/.import:$copy" "$python" -c \
    "import nvfp4_kernels, nvfp4_harness, sys; sys.exit(not all(m.__file__.startswith('$copy/') for m in (nvfp4_kernels, nvfp4_harness)))") \
    || { echo "$name: the copy does not import itself" >&2; exit 1; }
  (cd "$copy" && cosmic-ray init cr.toml session.sqlite && "$python" "$root/scripts/mutation_skip.py" session.sqlite --functions "${cuda_only[$name]:-}" \
    && cosmic-ray exec cr.toml session.sqlite > exec.log 2>&1)
  echo "== $name"; cr-report "$copy/session.sqlite" | tail -3
done
