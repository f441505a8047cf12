#!/usr/bin/env bash
# One device call for a kernel change: the fused path's correctness checks on the library built
# from this tree (scripts/fused_dev.py: bounds, identity readout, occupancy table; also for the
# targets in $ALSO_ARCHS, e.g. "sm_90"), then an A/B of its bits and time against $BASE, a
# library built from the code it would replace (scripts/fused_library_ab.py). Prebuild both here
# (nvcc runs on the CPU machine) and carry kernels/_build:
#
#   BASE=kernels/_build/ab/libnvfp4_base.so OUT=$OUT bash scripts/fused_ab_session.sh
#
# A_TILED=placed|bytes adds an A/B of both builds on tile-contiguous weights (the baseline's in
# that form: 'bytes' for builds before the layout placed the codes' signs, 2026-12-02).
set -uo pipefail
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
: "${BASE:?set BASE to the baseline library (.so)}"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== this tree"; timeout 200 python3 scripts/fused_dev.py --out "$OUT/dev" --skip-sweep 2>&1 | tail -8
for arch in ${ALSO_ARCHS:-}; do
  echo "== $arch"; NVFP4_CUDA_ARCHS=$arch timeout 200 python3 scripts/fused_dev.py --out "$OUT/dev-$arch" --skip-sweep 2>&1 | tail -8
done
lib=$(python3 -c "from nvfp4_kernels import build; print(build.build_library())")
echo "library: $lib"
timeout 300 python3 scripts/fused_library_ab.py --a "$BASE" --b "$lib" \
  --ms "${MS:-1,16,17,24,32,33,48,64,65,96,100,128,256}" --dtypes "${DTYPES:-bfloat16,float16}" \
  --shapes "${SHAPES:-17408x5120,5120x17408,4096x4096,1000x2048,200x1024}" --out "$OUT/ab.json" 2>&1 \
  | grep -v "float16  M=.*splits=[ 0-9/]* *$" | tail -100
if [[ -n ${A_TILED:-} ]]; then
  echo "== both builds on tile-contiguous weights (baseline: $A_TILED)"
  timeout 300 python3 scripts/fused_library_ab.py --a "$BASE" --b "$lib" --b-tiled --a-tiled "$A_TILED" \
    --ms "${MS:-1,16,17,24,32,33,48,64,65,96,100,128,256}" --dtypes "${DTYPES:-bfloat16,float16}" \
    --shapes "${SHAPES:-17408x5120,5120x17408,4096x4096,1000x2048,200x1024}" --out "$OUT/ab-tiled.json" 2>&1 \
    | grep -v "float16  M=.*splits=[ 0-9/]* *$" | tail -100
fi
