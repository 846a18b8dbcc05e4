#!/usr/bin/env python3
"""Compare two per-step loss logs (--log-steps of ptxlab train or tools/torch_reference.py) step by step.

    python3 tools/compare_steps.py A.csv B.csv [--steps 200] [--rtol 1e-4] [--show 5]

Each file is a CSV with a header holding at least the columns `step` and `loss` (`epoch` and `lr`
are used when present), one row per training step. Rows are matched by their `step` value. The
relative difference of a step is |a - b| / max(|a|, |b|) (0 when both are 0; infinite when one
is not finite and they differ).

Prints the first --show steps, the --show worst of the first --steps, and the last --show common
steps, with both losses, the relative difference and, when both files have it, each step's lr.
Exits 0 when every one of the first --steps common steps agrees within --rtol, 1 when one does not
(or the files have fewer common steps than --steps), 2 for a missing file, a missing column or a
malformed value. Differences in lr are reported as a warning and do not change the exit status.
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from csvlog import InputError, read_rows  # noqa: E402


def read_steps(path):
    """{step: (loss, lr or None, epoch or None)} from a --log-steps CSV, in file order."""
    _, lines = read_rows(path, ("step", "loss"), " (expected a header with the columns step and loss)",
                         "; expected a --log-steps file (step,epoch,loss,lr)")
    rows = {}
    for line, row in lines:
        try:
            step = int(row["step"])
            loss = float(row["loss"])
            lr = float(row["lr"]) if row.get("lr") not in (None, "") else None
            epoch = int(row["epoch"]) if row.get("epoch") not in (None, "") else None
        except (TypeError, ValueError):
            raise InputError(f"{path}:{line}: cannot read step/loss/lr/epoch from {dict(row)}")
        if step in rows:
            raise InputError(f"{path}:{line}: step {step} appears twice")
        rows[step] = (loss, lr, epoch)
    if not rows:
        raise InputError(f"{path}: no rows after the header")
    return rows


def rel_diff(a, b):
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(a), abs(b))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", metavar="A.csv")
    ap.add_argument("b", metavar="B.csv")
    ap.add_argument("--steps", type=int, default=200, help="check the first N common steps (default 200)")
    ap.add_argument("--rtol", type=float, default=1e-4, help="largest relative difference allowed (default 1e-4)")
    ap.add_argument("--show", type=int, default=5, help="rows in each part of the table (default 5)")
    args = ap.parse_args(argv)
    if args.steps < 1 or not args.rtol >= 0 or args.show < 0:
        ap.error("--steps must be at least 1, --rtol and --show at least 0")

    try:
        A, B = read_steps(args.a), read_steps(args.b)
    except InputError as e:
        print(f"compare_steps: {e}", file=sys.stderr)
        return 2

    common = sorted(set(A) & set(B))
    if not common:
        print(f"compare_steps: no step appears in both files ({args.a}: steps {min(A)}..{max(A)}, "
              f"{args.b}: steps {min(B)}..{max(B)})", file=sys.stderr)
        return 2
    if min(A) != min(B):
        print(f"warning: {args.a} starts at step {min(A)}, {args.b} at step {min(B)}; "
              f"comparing the steps both hold")
    checked = common[:args.steps]
    diffs = {s: rel_diff(A[s][0], B[s][0]) for s in common}
    has_lr = all(A[s][1] is not None and B[s][1] is not None for s in common)

    name_a, name_b = args.a, args.b
    w = max(12, len(name_a), len(name_b))
    header = f"{'step':>7}  {name_a:>{w}}  {name_b:>{w}}  {'rel diff':>9}" + (f"  {'lr A':>11}  {'lr B':>11}" if has_lr else "")

    def row(s, mark=""):
        text = f"{s:>7}  {A[s][0]:>{w}.9g}  {B[s][0]:>{w}.9g}  {diffs[s]:>9.2e}"
        if has_lr:
            text += f"  {A[s][1]:>11.6g}  {B[s][1]:>11.6g}"
        return text + ("  " + mark if mark else "")

    def flag(s):
        return "> rtol" if s in checked_set and diffs[s] > args.rtol else ""

    checked_set = set(checked)
    worst = sorted(checked, key=lambda s: diffs[s], reverse=True)[:args.show]
    print(f"{len(common)} common steps ({len(A)} in {name_a}, {len(B)} in {name_b}); checking the first "
          f"{len(checked)} (steps {checked[0]}..{checked[-1]}) against rtol {args.rtol:g}")
    for title, steps in (("first", common[:args.show]), (f"worst of the first {len(checked)}", worst),
                         ("last", common[-args.show:] if args.show else [])):
        if not steps:
            continue
        print(f"\n{title}:")
        print(header)
        for s in steps:
            print(row(s, flag(s)))

    if has_lr:
        lr_bad = [s for s in checked if rel_diff(A[s][1], B[s][1]) > args.rtol]
        if lr_bad:
            print(f"\nwarning: the lr differs by more than rtol at {len(lr_bad)} of the checked steps, first at step "
                  f"{lr_bad[0]} ({A[lr_bad[0]][1]:.9g} vs {B[lr_bad[0]][1]:.9g}): the schedules are not the same")

    over = [s for s in checked if diffs[s] > args.rtol]
    worst_step = max(checked, key=lambda s: diffs[s])
    worst_all = max(diffs[s] for s in common)
    print(f"\nlargest relative difference: {diffs[worst_step]:.2e} over the first {len(checked)} steps (step {worst_step}), "
          f"{worst_all:.2e} over all {len(common)} common steps")
    if over:
        print(f"FAIL: {len(over)} of the first {len(checked)} steps differ by more than {args.rtol:g}, first at step {over[0]}")
        return 1
    if len(checked) < args.steps:
        print(f"FAIL: only {len(checked)} common steps, fewer than --steps {args.steps}")
        return 1
    print(f"PASS: the first {len(checked)} steps agree within {args.rtol:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
