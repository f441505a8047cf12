#!/usr/bin/env bash
# One device call timing builds of fused_mma.cu with other compile-time knobs against each other
# (scripts/fused_dev.py --variants: every split count, bits compared at equal counts):
#
#   VARIANTS="base:;s4:-DNVFP4_FUSED_STAGES=4" MS=1,16,64 OUT=$OUT bash scripts/fused_variants_session.sh
set -uo pipefail
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
: "${VARIANTS:?set VARIANTS to name:nvcc flags;name:flags;...}"
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
timeout 500 python3 scripts/fused_dev.py --out "$OUT/variants" --skip-correctness --skip-sweep --ms "${MS:-32,64,128}" \
  --variant-shapes "${SHAPES:-17408x5120,5120x17408}" --variants "$VARIANTS" 2>&1 | grep -v "^  FAIL" | tail -40
