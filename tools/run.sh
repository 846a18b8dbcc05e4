#!/usr/bin/env bash
# One command from a fresh clone to a result:
#
#   tools/run.sh train [ptxlab train flags...]   set up, fetch MNIST, build, run `ptxlab train`
#   tools/run.sh test  [ctest flags...]          set up, fetch MNIST, build, run every test (ctest);
#                                                without MNIST (offline) the data tests show as skipped
#   tools/run.sh sanitize [ctest flags...]       the same with AddressSanitizer and UBSan, CPU tests only
#                                                (all but the sweep over every architecture)
#   tools/run.sh fuzz [idx|ptx|contract|safetensors] [SECONDS]  build the libFuzzer targets with clang and run them
#
# Set-up: installs the Debian/Ubuntu packages ptxlab builds with when they are missing
# (cmake, ninja, g++, fmt, doctest, CLI11, zlib, nlohmann-json), checks for the CUDA 13 toolkit, and
# fetches MNIST into data/mnist (tools/fetch_mnist.sh; PTXLAB_MNIST_MIRROR=DIR uses a
# local copy). BUILD_DIR (default: build) and BUILD_TYPE (default: RelWithDebInfo) choose
# the build (sanitize: build-asan, Debug; fuzz: build-fuzz). On a machine without an NVIDIA
# GPU the GPU tests are reported as skipped.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

what="${1:-}"
case "$what" in
  train|test|sanitize|fuzz) shift ;;
  -h|--help|"") sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; [ -n "$what" ]; exit $? ;;
  *) echo "run.sh: unknown command '$what' (train, test, sanitize or fuzz)" >&2; exit 2 ;;
esac

say() { printf '== %s\n' "$*"; }

# --- 1. packages -------------------------------------------------------------
has_header() { echo "#include <$1>" | ${CXX:-g++} -std=c++20 -E -x c++ - >/dev/null 2>&1; }
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
if command -v g++ >/dev/null; then
  has_header fmt/format.h || missing+=(libfmt-dev)
  has_header doctest/doctest.h || missing+=(doctest-dev)
  has_header CLI/CLI.hpp || missing+=(libcli11-dev)
  has_header zlib.h || missing+=(zlib1g-dev)
  has_header nlohmann/json.hpp || missing+=(nlohmann-json3-dev)
fi
[ "$what" = fuzz ] && ! command -v clang++ >/dev/null && missing+=(clang)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  command -v apt-get >/dev/null || { echo "run.sh: missing ${missing[*]} and no apt-get to install them" >&2; exit 1; }
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- 2. the CUDA toolkit (NVRTC, nvJitLink and headers; not installable from Debian) ----
cuda_root="${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}"
if [ ! -f "$cuda_root/include/nvJitLink.h" ] && ! command -v nvcc >/dev/null; then
  echo "run.sh: the CUDA 13 toolkit was not found (looked in $cuda_root and for nvcc on PATH)." >&2
  echo "        Install it from NVIDIA (cuda-toolkit-13-0) or set CUDA_HOME." >&2
  exit 1
fi
[ -d "$cuda_root/bin" ] && export PATH="$cuda_root/bin:$PATH"

# --- 3. MNIST (not needed by the fuzzers) ---------------------------------------
if [ "$what" = fuzz ]; then
  say "fuzzing"
  exec tests/fuzz/run.sh "$@"
fi
say "MNIST"
if ! tools/fetch_mnist.sh; then
  cat >&2 <<MSG
run.sh: MNIST could not be fetched (offline?). To provide it:
          PTXLAB_MNIST_MIRROR=DIR tools/run.sh $what   (DIR holds the four IDX files, raw or .gz)
          tools/fetch_mnist.sh --mirror DIR            (copies and checks them into data/mnist)
          ptxlab train --data DIR / PTXLAB_DATA_DIR=DIR (reads them from DIR directly)
MSG
  if [ "$what" = train ]; then exit 1; fi
  echo "run.sh: going on without MNIST: every test that needs no data runs; the data tests show as skipped" >&2
fi

# --- 4. build ------------------------------------------------------------------
build="${BUILD_DIR:-build}"
type="${BUILD_TYPE:-RelWithDebInfo}"
cmake_args=(); targets=()
if [ "$what" = sanitize ]; then
  # AddressSanitizer + UndefinedBehaviorSanitizer (any report fails the test that triggered it);
  # only the CPU tests and the executable they drive are built.
  build="${BUILD_DIR:-build-asan}"; type="${BUILD_TYPE:-Debug}"
  cmake_args=(-DPTXLAB_SANITIZE=ON); targets=(--target ptxlab ptxlab_cpu_tests)
fi
say "building in $build"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE="$type" "${cmake_args[@]}"
cmake --build "$build" -j "$(nproc)" "${targets[@]}"

# --- 5. run --------------------------------------------------------------------
# Tests side by side (most of a CPU test's time is spent waiting on the processes it starts):
# twice the cores, at most 4, so that a GPU machine does not crowd one GPU; -j or
# CTEST_PARALLEL_LEVEL chooses otherwise.
export CTEST_PARALLEL_LEVEL="${CTEST_PARALLEL_LEVEL:-$(( $(nproc) * 2 < 4 ? $(nproc) * 2 : 4 ))}"
case "$what" in
  train)
    say "ptxlab train $*"
    exec "$build/ptxlab" train "$@" ;;
  test)
    say "tests"
    cd "$build"
    exec ctest --output-on-failure "$@" ;;
  sanitize)
    say "CPU tests under AddressSanitizer and UndefinedBehaviorSanitizer"
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}"
    # Leaks inside libnvJitLink.so (rejected --arch values, deeply nested braces) are NVIDIA's;
    # the suppressions name only that library, so a leak of ptxlab's own still fails.
    export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tools/lsan.supp:print_suppressions=0}"
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
    cd "$build"
    # Not here: the sweep of every kernel over every architecture from sm_90 up (3 tests). Its
    # host code is check's, which "every kernel under ptx/ assembles ..." runs under the
    # sanitizers for sm_90; the sweep's time is nvJitLink's, 6x slower under ASan's allocator
    # (555 of the sanitized run's CPU seconds in CI). `tools/run.sh test` runs it.
    exec ctest --output-on-failure -R '^cpu:' -E 'every architecture from sm_90 up' "$@" ;;
esac
