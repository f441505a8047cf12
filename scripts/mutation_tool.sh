#!/usr/bin/env bash
# Mutation testing with cosmic-ray over the dispatch guards (kernels/model.py) and the coverage
# verdicts (harness/engine/analysis.py), each in its own copy of the project so the two sessions
# can run at once without seeing each other's mutants. The copies import the project through
# links (.import/nvfp4_kernels -> kernels ...), ahead of the installed editable package.
#
#   pip install cosmic-ray && bash scripts/mutation_tool.sh [WORKDIR]      # ~45 min on 2 cores
#   cr-report WORKDIR/guards/session.sqlite --surviving-only --show-diff   # what survived
#
# docs/mutation-testing.md holds the last run's results and the review of every survivor.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/nvfp4-cosmic-ray}
python=${PYTHON:-$(command -v python3)}
declare -A modules=([guards]="kernels/model.py" [verdicts]="harness/engine/analysis.py")
declare -A tests=(
  [guards]="suites/test_dispatch_rules.py suites/test_dispatcher.py suites/test_boundary_inputs.py suites/test_shapes.py suites/test_contract.py -m 'not gpu'"
  [verdicts]="suites/test_coverage_data.py suites/test_reports.py suites/test_recorder.py suites/test_gpu_workers.py suites/test_observe.py suites/test_model_api.py"
)
for name in guards verdicts; do
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
  (cd "$copy" && cosmic-ray init cr.toml session.sqlite && cosmic-ray exec cr.toml session.sqlite > exec.log 2>&1) &
done
wait
for name in guards verdicts; do echo "== $name"; cr-report "$work/$name/session.sqlite" | tail -3; done
