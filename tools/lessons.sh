#!/usr/bin/env bash
# The on-device proof for issue #18: `verify` and `bench` on every lesson (ptx/lessons) and on
# the contract-header forward3 (tests/fixtures/contract), the planted lesson mistakes
# (tests/fixtures/lessons: verify must FAIL them; racecheck must flag the missing bar.sync),
# compute-sanitizer memcheck on every lesson, and `ptxlab new` followed by verify.
#
#   tools/lessons.sh [PTXLAB]        (default build/ptxlab; run from the repository root)
# Exits 1 when anything that should pass fails or anything planted is not caught.
set -u
P=${1:-build/ptxlab}
rc=0
files=(ptx/lessons/*.ptx tests/fixtures/contract/forward3.ptx)
echo "== verify"
for f in "${files[@]}"; do "$P" verify "$f" --seed 7 || { echo "FAILED: verify $f"; rc=1; }; done
echo "== bench"
for f in "${files[@]}"; do "$P" bench "$f" || { echo "FAILED: bench $f"; rc=1; }; done
echo "== planted mistakes (verify must fail)"
for f in tests/fixtures/lessons/0[567]_*.ptx tests/fixtures/lessons/1[1-6]_*.ptx; do
  if "$P" verify "$f" --seed 7 >/tmp/planted.log 2>&1; then echo "NOT CAUGHT: $f"; rc=1; else echo "caught: $f"; grep -m3 -E 'FAIL|\[' /tmp/planted.log; fi
done
if command -v compute-sanitizer >/dev/null; then
  echo "== racecheck"
  for f in ptx/lessons/04_shared_barrier.ptx tests/fixtures/lessons/04_no_barrier.ptx; do
    compute-sanitizer --tool racecheck "$P" verify "$f" --shape B=4 --seed 7 >/tmp/race.log 2>&1
    echo "$f: $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' /tmp/race.log | tr '\n' ' ')"
    grep -m2 -E 'Race reported|hazard' /tmp/race.log
  done
  grep -q 'RACECHECK SUMMARY: 0 hazards' <(compute-sanitizer --tool racecheck "$P" verify tests/fixtures/lessons/04_no_barrier.ptx --shape B=4 --seed 7 2>&1) && { echo "NOT CAUGHT by racecheck: 04_no_barrier"; rc=1; }
  echo "== memcheck"
  for f in "${files[@]}"; do
    out=$(compute-sanitizer --tool memcheck --error-exitcode 9 "$P" verify "$f" --seed 7 2>&1); code=$?
    echo "$f: exit $code, $(grep -E 'ERROR SUMMARY' <<<"$out")"
    [ $code -eq 0 ] || { rc=1; grep -m5 -E 'Invalid|ERROR' <<<"$out"; }
  done
fi
echo "== ptxlab new"
d=$(mktemp -d)
"$P" new demo --dir "$d" && "$P" check "$d/demo.ptx" && "$P" verify "$d/demo.ptx" --seed 7 || { echo "FAILED: new"; rc=1; }
rm -rf "$d"
exit $rc
