#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time.
#
#   tests/fuzz/run.sh [TARGET...] [SECONDS]     TARGET: idx, ptx, contract, safetensors (default: all);
#                                               SECONDS default 60
#
# Each target starts from its seed corpus in tests/fuzz/corpus/TARGET (plus, for ptx, the
# kernels in ptx/ and the PTX fixtures); inputs it discovers go to a temporary directory,
# not into the tree. A crash, a sanitizer report, a slow input (over 10 s) or one that needs
# over 2 GiB stops the run with a non-zero exit and leaves the input in $BUILD_DIR/artifacts/
# (reproduce: the fuzz binary with that file as its argument). FUZZ_SEED fixes libFuzzer's
# random seed (default 1). The targets run side by side, one a core (FUZZ_JOBS: how many at a
# time). BUILD_DIR defaults to build-fuzz; CXX picks the compiler (default clang++).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

targets=(); seconds=60
for a in "$@"; do
  case "$a" in
    idx|ptx|contract|safetensors) targets+=("$a") ;;
    ''|*[!0-9]*) echo "fuzz/run.sh: unknown argument '$a' (targets: idx, ptx, contract, safetensors; or a number of seconds)" >&2; exit 2 ;;
    *) seconds="$a" ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(idx ptx contract safetensors)
jobs="${FUZZ_JOBS:-$(nproc)}"
if [[ ! "$jobs" =~ ^[0-9]{1,4}$ ]] || [ "$((10#$jobs))" -lt 1 ]; then
  echo "fuzz/run.sh: FUZZ_JOBS must be a whole number from 1 to 9999, got '$jobs'" >&2; exit 2
fi
jobs=$((10#$jobs))

cxx="${CXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz/run.sh: '$cxx' not found; the fuzzers need clang with libFuzzer (Debian: apt-get install clang)" >&2
  exit 1
fi
build="${BUILD_DIR:-build-fuzz}"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" "${gen[@]}" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTXLAB_FUZZ=ON -DPTXLAB_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/#/fuzz_}"

mkdir -p "$build/artifacts"
artifacts=$(cd "$build/artifacts" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# Each fuzzer is one process on one core: they run side by side, as many at a time as there are
# cores (FUZZ_JOBS chooses otherwise), each for SECONDS of wall time; their logs are read in
# the targets' order once a round ends.
start() {  # start target $1 in the background; its pid into pids[$1]
  local t="$1"
  # No std::regex reads PTX or a contract header any more (issue #34): the ptx target takes
  # inputs up to 64 KiB (a token past the 8192 limit fits), the contract target 256 KiB (long
  # `why` lines).
  local seeds=("tests/fuzz/corpus/$t") max_len=65536
  [ "$t" = ptx ] && { seeds+=(ptx ptx/reference tests/fixtures/ptx); max_len=65536; }
  [ "$t" = contract ] && { seeds+=(ptx/lessons tests/fixtures/contract); max_len=262144; }
  mkdir -p "$work/$t"
  echo "== fuzz_$t: ${seconds} s from ${seeds[*]}"
  "$build/tests/fuzz/fuzz_$t" "$work/$t" "${seeds[@]}" -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" \
    -timeout=10 -rss_limit_mb=2048 -max_len=$max_len -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" >"$work/$t.log" 2>&1 &
  pids[$t]=$!
}
declare -A pids
failed=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  round=("${targets[@]:i:jobs}")
  for t in "${round[@]}"; do start "$t"; done
  for t in "${round[@]}"; do
    rc=0; wait "${pids[$t]}" || rc=$?
    if [ $rc -ne 0 ]; then
      tail -n 80 "$work/$t.log"
      echo "fuzz/run.sh: fuzz_$t failed (exit $rc); the input is in $artifacts/" >&2
      failed=1
      continue
    fi
    echo "-- fuzz_$t:"
    grep -E '^(INFO: seed corpus|#[0-9]+ *DONE|Done|stat::number_of_executed_units|stat::peak_rss)' "$work/$t.log" || true
  done
  [ $failed -eq 0 ] || exit 1
done
