#!/usr/bin/env bash
# The on-device proof, in one go (for a machine with an NVIDIA GPU and data/mnist):
#   build, the full test suite, `ptxlab verify`, the four training runs of the train
#   issue (default, --kernels reference, 3 layers, --preset notebook) in parallel,
#   the PyTorch check of a saved checkpoint, and compute-sanitizer over verify --quick
#   and a short train.
#   tools/device_proof.sh [OUTDIR] [STAGES]   STAGES: any of build,test,verify,train,torch,sanitize
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out="${1:-$root/out}"
stages="${2:-build,test,verify,train,torch,sanitize}"
mkdir -p "$out"
b="${BUILD_DIR:-build-gpu}"
P="$b/ptxlab"
has() { [[ ",$stages," == *",$1,"* ]]; }
log() { printf '\n=== %s\n' "$*"; }

if has build; then
  log "build"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
  cmake --build "$b" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
fi
if has test; then
  log "ctest"; (cd "$b" && ctest --output-on-failure >"$out/ctest.txt" 2>&1); echo "ctest rc=$?"
  grep -E "tests passed|Skipped|Failed" "$out/ctest.txt" | head -20
fi
if has verify; then
  log "verify"; "$P" verify >"$out/verify.txt" 2>&1; echo "verify rc=$?"
  grep -E "^verify|FAIL" "$out/verify.txt" | head -20
fi
if has train; then
  # One process at a time: separate processes time-slice the GPU. --target 1 runs all
  # $EPOCHS epochs, so the PTX and reference curves can be compared epoch by epoch.
  E="${EPOCHS:-8}"
  log "train: $E epochs each (ptx, reference, 3 layers), then --preset notebook"
  "$P" train --no-progress --epochs "$E" --target 1 --log "$out/train_ptx.csv" --save "$out/model.safetensors" >"$out/train_ptx.txt" 2>&1
  "$P" train --no-progress --epochs "$E" --target 1 --kernels reference --log "$out/train_ref.csv" >"$out/train_ref.txt" 2>&1
  "$P" train --no-progress --epochs "$E" --target 1 --layers 784,128,64,10 --log "$out/train_3l.csv" --save "$out/model3.safetensors" >"$out/train_3l.txt" 2>&1
  "$P" train --no-progress --preset notebook --log "$out/train_nb.csv" >"$out/train_nb.txt" 2>&1
  for f in ptx ref 3l nb; do echo "--- train_$f"; grep -E "^ptxlab|^epoch|^summary|^  test|^  time" "$out/train_$f.txt" | tail -13; done
  cut -d, -f1-4 "$out/train_ptx.csv" > /tmp/a.csv; cut -d, -f1-4 "$out/train_ref.csv" > /tmp/b.csv
  cmp -s /tmp/a.csv /tmp/b.csv && echo "ptx and reference curves (step, epoch, loss, accuracy): IDENTICAL" || echo "ptx and reference curves: DIFFER"
fi
if has torch; then
  log "torch"
  acc=$(tail -1 "$out/train_ptx.csv" | cut -d, -f4); acc3=$(tail -1 "$out/train_3l.csv" | cut -d, -f4)
  python3 tools/torch_eval_checkpoint.py "$out/model.safetensors" --expect "$acc"; echo "rc=$?"
  python3 tools/torch_eval_checkpoint.py "$out/model3.safetensors" --expect "$acc3"; echo "rc=$?"
  "$P" eval --load "$out/model.safetensors" | head -3
fi
if has sanitize; then
  for tool in memcheck racecheck initcheck synccheck; do
    log "compute-sanitizer --tool $tool"
    timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$P" verify --quick --seed 5 >"$out/san_$tool.txt" 2>&1
    echo "verify --quick rc=$?"; grep -E "ERROR SUMMARY|^verify:" "$out/san_$tool.txt" | tail -2
  done
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$P" train --no-progress --max-steps 30 >"$out/san_train.txt" 2>&1
  echo "train --max-steps 30 under memcheck rc=$?"; grep -E "ERROR SUMMARY" "$out/san_train.txt"
fi
