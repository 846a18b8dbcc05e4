#!/usr/bin/env python3
"""Plot training curves from one or more --log CSVs (ptxlab train, tools/torch_reference.py) into a PNG.

    python3 tools/plot_curves.py LOG.csv [LOG2.csv ...] --out curves.png [--labels ptxlab,PyTorch]
                                 [--acc-min 95] [--target 0.98] [--log-time] [--title TEXT]

Each log has a header and one row per evaluation with the columns
step,epoch,train_loss,test_loss,test_accuracy,train_s,elapsed_s,lr (test_accuracy a fraction).
Four panels: test accuracy (%) against steps and against training seconds (train_s: training time
without evaluation), and loss against steps and against seconds (test loss solid, train loss,
the mean batch loss since the previous evaluation, dashed). A log without test_loss shows its train
loss only; one without train_s is drawn against elapsed_s (the label says so). The accuracy axis
starts at --acc-min % (default 95) so that the part that matters, 95 to 100 %, is readable; points
below it are off the plot. --target draws a dashed line at that accuracy; --log-time uses a
logarithmic seconds axis (useful when one run is ten times faster). Legend entries come from
--labels (comma-separated, one per log) or the file names. Needs matplotlib (Agg backend, no display).
"""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from csvlog import InputError, read_rows  # noqa: E402


def read_log(path):
    """Columns of a --log CSV as lists of floats; the required ones checked."""
    cols, lines = read_rows(path, ("step", "test_accuracy"))
    if "train_s" not in cols and "elapsed_s" not in cols:
        raise InputError(f"{path}: neither train_s nor elapsed_s in the header ({','.join(cols)})")
    data = {c: [] for c in cols}
    for line, row in lines:
        for c in cols:
            v = row.get(c)
            try:
                data[c].append(float(v) if v not in (None, "") else math.nan)
            except ValueError:
                raise InputError(f"{path}:{line}: column {c}: {v!r} is not a number")
    if not data["step"]:
        raise InputError(f"{path}: no rows after the header")
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+", metavar="LOG.csv")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--labels", help="comma-separated legend labels, one per log (default: the file names)")
    ap.add_argument("--acc-min", type=float, default=95.0, help="lower end of the accuracy axis in %% (default 95)")
    ap.add_argument("--target", type=float, help="draw the target accuracy (a fraction, e.g. 0.98)")
    ap.add_argument("--log-time", action="store_true", help="logarithmic seconds axis")
    ap.add_argument("--title", help="figure title")
    ap.add_argument("--dpi", type=int, default=120)
    args = ap.parse_args(argv)

    labels = args.labels.split(",") if args.labels else [os.path.basename(p) for p in args.logs]
    if len(labels) != len(args.logs):
        ap.error(f"--labels gives {len(labels)} labels for {len(args.logs)} logs")
    try:
        logs = [read_log(p) for p in args.logs]
    except InputError as e:
        print(f"plot_curves: {e}", file=sys.stderr)
        return 2

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(2, 2, figsize=(12, 8.5), sharex="col")
    (acc_step, acc_time), (loss_step, loss_time) = ax
    time_label = "training time (s, evaluation excluded)"
    any_acc_high = False
    for i, (d, label) in enumerate(zip(logs, labels)):
        color = f"C{i}"
        steps = d["step"]
        if "train_s" in d:
            secs, tl = d["train_s"], label
        else:
            secs, tl = d["elapsed_s"], f"{label} (elapsed_s: no train_s column)"
        acc = [100.0 * v for v in d["test_accuracy"]]
        any_acc_high |= any(v >= args.acc_min for v in acc)
        style = dict(color=color, marker="o" if len(steps) <= 40 else None, markersize=3, linewidth=1.5)
        acc_step.plot(steps, acc, label=label, **style)
        acc_time.plot(secs, acc, label=tl, **style)
        if "test_loss" in d:
            loss_step.plot(steps, d["test_loss"], label=f"{label} test", **style)
            loss_time.plot(secs, d["test_loss"], label=f"{label} test", **style)
        if "train_loss" in d:
            dashed = dict(style, linestyle="--", linewidth=1.0, marker=None)
            loss_step.plot(steps, d["train_loss"], label=f"{label} train", **dashed)
            loss_time.plot(secs, d["train_loss"], label=f"{label} train", **dashed)

    for a in (acc_step, acc_time):
        if any_acc_high:
            a.set_ylim(args.acc_min, 100.0)
        if args.target is not None:
            a.axhline(100.0 * args.target, color="grey", linestyle=":", linewidth=1.0,
                      label=f"target {100 * args.target:g} %")
        a.set_ylabel("test accuracy (%)")
        a.grid(True, alpha=0.3)
    for a in (loss_step, loss_time):
        a.set_yscale("log")
        a.set_ylabel("loss")
        a.grid(True, which="both", alpha=0.3)
    loss_step.set_xlabel("step")
    loss_time.set_xlabel(time_label)
    if args.log_time:
        for a in (acc_time, loss_time):
            a.set_xscale("log")
    acc_step.set_title("test accuracy against steps")
    acc_time.set_title("test accuracy against training time")
    loss_step.set_title("loss against steps (test solid, train dashed)")
    loss_time.set_title("loss against training time")
    for a in ax.flat:
        a.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=args.dpi)
    print(f"wrote {args.out} ({len(logs)} log{'s' if len(logs) != 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
