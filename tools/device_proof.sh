#!/usr/bin/env bash
# The on-device proof (for a machine with an NVIDIA GPU and data/mnist):
#   build       configure and build in $BUILD_DIR (default build-gpu)
#   test        the full test suite (ctest)
#   verify      `ptxlab verify`, every kernel and shape
#   bench       `ptxlab bench --json`, then PyTorch's eager and CUDA-graph step times and
#               time to target on the same GPU (tools/torch_reference.py)
#   train       training runs, one process at a time: fused vs fused-reference to the
#               target, the seed design (ptx vs reference) for $EPOCHS epochs, 3 layers,
#               --preset notebook
#   torch       PyTorch loads the saved checkpoints and gets the same accuracy
#   sanitize    compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over
#               every verify case and short training runs
#   tools/device_proof.sh [OUTDIR] [STAGES]   STAGES: comma-separated, default all
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out="${1:-$root/out}"
stages="${2:-build,test,verify,bench,train,torch,sanitize}"
mkdir -p "$out"
b="${BUILD_DIR:-build-gpu}"
P="$b/ptxlab"
has() { [[ ",$stages," == *",$1,"* ]]; }
log() { printf '\n=== %s\n' "$*"; }

if has build; then
  log "build"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  deps=()
  # A GPU machine without fmt, CLI11, doctest, nlohmann-json and zlib's headers: Debian packages
  # downloaded beside the tree (`apt-get download libfmt-dev libcli11-dev doctest-dev
  # nlohmann-json3-dev zlib1g-dev` into .deps/) are unpacked and used, fmt as headers only.
  if compgen -G ".deps/*.deb" >/dev/null; then
    d=/tmp/ptxlab-deps; for f in .deps/*.deb; do dpkg -x "$f" "$d"; done
    z=$(ls /usr/lib/x86_64-linux-gnu/libz.so.1 /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null | head -1)
    deps=(-DCMAKE_PREFIX_PATH="$d/usr" -DPTXLAB_FMT_HEADER_ONLY=ON -DZLIB_INCLUDE_DIR="$d/usr/include" -DZLIB_LIBRARY="$z")
  fi
  cmake -S . -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${deps[@]}" >"$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
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
if has bench; then
  log "ptxlab bench"
  "$P" bench --json "$out/bench.json" >"$out/bench.txt" 2>&1; echo "bench rc=$?"; cat "$out/bench.txt"
  log "PyTorch on the same GPU: time to ${TARGET:-0.97} (eager), per-step eager and CUDA graph"
  python3 tools/torch_reference.py --epochs "${TORCH_EPOCHS:-30}" --target "${TARGET:-0.97}" --time-steps 2000 \
    >"$out/torch_b64.txt" 2>&1; echo "rc=$?"; grep -E "^torch|reached|did not|per step" "$out/torch_b64.txt"
  python3 tools/torch_reference.py --batch 256 --epochs 1 --target 1 --time-steps 2000 >"$out/torch_b256.txt" 2>&1
  echo "rc=$?"; grep -E "per step" "$out/torch_b256.txt"
fi
if has train; then
  # One process at a time: separate processes time-slice the GPU.
  E="${EPOCHS:-8}"
  log "train: fused and fused-reference to 97 % (at most 30 epochs)"
  "$P" train --no-progress --epochs 30 --log "$out/train_fused.csv" --save "$out/model.safetensors" >"$out/train_fused.txt" 2>&1
  "$P" train --no-progress --epochs 30 --kernels fused-reference --log "$out/train_fref.csv" >"$out/train_fref.txt" 2>&1
  log "train: seed design $E epochs each (ptx, reference), 3 layers, then --preset notebook"
  "$P" train --no-progress --epochs "$E" --target 1 --kernels ptx --log "$out/train_ptx.csv" >"$out/train_ptx.txt" 2>&1
  "$P" train --no-progress --epochs "$E" --target 1 --kernels reference --log "$out/train_ref.csv" >"$out/train_ref.txt" 2>&1
  "$P" train --no-progress --epochs "$E" --target 1 --layers 784,128,64,10 --log "$out/train_3l.csv" --save "$out/model3.safetensors" >"$out/train_3l.txt" 2>&1
  "$P" train --no-progress --preset notebook --log "$out/train_nb.csv" >"$out/train_nb.txt" 2>&1
  for f in fused fref ptx ref 3l nb; do echo "--- train_$f"; grep -E "^ptxlab|^epoch|^summary|^  test|^  time" "$out/train_$f.txt" | tail -13; done
  same() { cut -d, -f1-4 "$1" > /tmp/a.csv; cut -d, -f1-4 "$2" > /tmp/b.csv; cmp -s /tmp/a.csv /tmp/b.csv && echo "$3: IDENTICAL" || echo "$3: DIFFER"; }
  same "$out/train_fused.csv" "$out/train_fref.csv" "fused vs fused-reference curves (step, epoch, loss, accuracy)"
  same "$out/train_ptx.csv" "$out/train_ref.csv" "ptx vs reference curves (step, epoch, loss, accuracy)"
fi
if has torch; then
  log "torch"
  acc=$(tail -1 "$out/train_fused.csv" | cut -d, -f4); acc3=$(tail -1 "$out/train_3l.csv" | cut -d, -f4)
  python3 tools/torch_eval_checkpoint.py "$out/model.safetensors" --expect "$acc"; echo "rc=$?"
  python3 tools/torch_eval_checkpoint.py "$out/model3.safetensors" --expect "$acc3"; echo "rc=$?"
  "$P" eval --load "$out/model.safetensors" | head -3
fi
if has sanitize; then
  for tool in memcheck racecheck initcheck synccheck; do
    log "compute-sanitizer --tool $tool"
    timeout 280 compute-sanitizer --tool "$tool" --error-exitcode 9 "$P" verify --seed 21 --timeout 0 >"$out/san_$tool.txt" 2>&1
    echo "verify rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^verify:" "$out/san_$tool.txt" | tail -2
  done
  for tool in memcheck synccheck; do
    for k in fused fast ptx; do
      timeout 200 compute-sanitizer --tool "$tool" --error-exitcode 9 "$P" train --no-progress --kernels "$k" --max-steps 30 --timeout 0 >"$out/san_train_${k}_$tool.txt" 2>&1
      echo "train --kernels $k --max-steps 30 under $tool rc=$?"; grep -E "ERROR SUMMARY" "$out/san_train_${k}_$tool.txt"
    done
  done
fi
