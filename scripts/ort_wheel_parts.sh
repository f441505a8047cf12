#!/usr/bin/env bash
# The onnxruntime-gpu wheel for a GPU host without network (the device machine), in parts small
# enough to carry one a device call: here, download the wheel (CPython 3.12, manylinux), drop the
# TensorRT provider and the Python tool folders that `python -m nvfp4_harness onnxruntime` does not
# use, pack with xz -9 and split into 50 MiB parts under the git-ignored .ort/p1 .. .ort/pN, one
# part a folder (carry them as [".ort/p1"], then [".ort/p2"], ... in back-to-back calls).
#
#   bash scripts/ort_wheel_parts.sh            # here (network), prepares .ort/
#   bash scripts/ort_wheel_parts.sh collect    # on the device, every call: adds the carried part
#   bash scripts/ort_wheel_parts.sh unpack     # on the device, last call: joins, unpacks, checks
#
# After `unpack`, run with PYTHONPATH=/tmp/site (the device's own onnxruntime is a CPU build).
# Parts collect in /tmp/ortparts on the device, which lasts while the machine stays held.
set -euo pipefail
version=${ORT_VERSION:-1.31.1}
parts_dir=/tmp/ortparts
site=/tmp/site
case "${1:-prepare}" in
  prepare)
    work=$(mktemp -d)
    pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      "onnxruntime-gpu==$version" -d "$work"
    mkdir -p "$work/x"
    python3 -m zipfile -e "$work"/onnxruntime_gpu-*.whl "$work/x"
    rm -rf "$work/x/onnxruntime/capi/libonnxruntime_providers_tensorrt.so" \
      "$work/x/onnxruntime/tools" "$work/x/onnxruntime/transformers" "$work/x/onnxruntime/quantization"
    tar -C "$work/x" -cf - . | xz -9 -T0 > "$work/ort.tar.xz"
    rm -rf .ort && mkdir -p .ort
    (cd "$work" && split -b 50M ort.tar.xz part.)
    i=0
    for p in "$work"/part.*; do
      i=$((i + 1)); mkdir -p ".ort/p$i"; mv "$p" ".ort/p$i/"
    done
    sha256sum "$work/ort.tar.xz" | cut -d' ' -f1 > .ort/sha256
    for d in .ort/p*; do cp .ort/sha256 "$d/"; done
    rm -rf "$work"
    echo "prepared $i parts under .ort/ (sha256 $(cat .ort/sha256)); carry one a call: .ort/p1 .. .ort/p$i"
    ;;
  collect)
    mkdir -p "$parts_dir"
    found=0
    for d in .ort/p*; do
      [[ -d $d ]] || continue
      cp "$d"/part.* "$d/sha256" "$parts_dir/" && found=1
    done
    (( found )) || { echo "no carried part under .ort/ (carry one as [\".ort/pN\"])" >&2; exit 1; }
    ls -la "$parts_dir"
    ;;
  unpack)
    bash "$0" collect 2>/dev/null || true
    [[ -f $parts_dir/sha256 ]] || { echo "no parts in $parts_dir: run collect in earlier calls" >&2; exit 1; }
    got=$(cat "$parts_dir"/part.* | sha256sum | cut -d' ' -f1)
    if [[ $got != "$(cat "$parts_dir/sha256")" ]]; then
      echo "the parts in $parts_dir do not join to the prepared archive (a part missing?):" >&2
      ls -la "$parts_dir" >&2
      exit 1
    fi
    rm -rf "$site" && mkdir -p "$site"
    cat "$parts_dir"/part.* | xz -dc | tar -C "$site" -xf -
    PYTHONPATH=$site python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
    ;;
  *)
    echo "usage: ort_wheel_parts.sh [prepare|collect|unpack]" >&2
    exit 2
    ;;
esac
