#!/usr/bin/env python3
"""Where a kernel's time goes, by PTX line and by PTX block: ncu's warp-stall samples per SASS
instruction, each placed under the PTX line it came from (`ptxlab sass`), summed per line and per
labelled block (a label starts a block, the next label ends it).

On the device:
  ncu --clock-control none -k regex:fused_step --launch-skip 3 --launch-count 1 \\
      --section WarpStateStats --section SourceCounters -o step \\
      build-gpu/ptxlab train --no-progress --max-steps 400 --timeout 0
  ncu --import step.ncu-rep --page source --csv --print-source sass > step_src.csv
  build-gpu/ptxlab sass ptx/step.ptx > step_sass.txt
then anywhere:
  python3 tools/ncu_by_ptx.py step_src.csv step_sass.txt ptx/step.ptx [--entry fused_step] [--top 30]

A sample is counted at the instruction that waits: the first instruction after a bar.sync or
a cluster barrier carries that barrier's waits ("barrier"), the one after a fence its "membar".
The CSV's addresses are absolute; its first row is the entry's first instruction, so an
instruction's offset is its address minus the first row's. Samples at offsets outside the entry
(called functions such as the division slow path) are counted as "outside the entry".
"""
import argparse
import collections
import csv
import re
import sys


def parse_sass(path, entry):
    """Offset -> PTX line for `entry` in a `ptxlab sass` listing."""
    offsets, current, line = {}, None, None
    for text in open(path):
        m = re.match(r"^\.(entry|func) (\S+)", text)
        if m:
            current, line = m.group(2), None
            continue
        if current != entry:
            continue
        m = re.match(r"^\s+(\S+) \| ", text)
        if m:
            line = m.group(1)
            continue
        m = re.match(r"^\s+/\*([0-9a-f]+)\*/\s+", text)
        if m:
            offsets[int(m.group(1), 16)] = line
    if not offsets:
        sys.exit(f"ncu_by_ptx: no SASS of entry '{entry}' in {path} (ptxlab sass prints '.entry NAME')")
    return offsets


def ptx_line_number(ref):
    """'1234' or 'step.ptx:1234' (ptxlab sass's reference to a PTX line) -> 1234, else None."""
    m = re.search(r"(\d+)$", ref or "")
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source_csv", help="ncu --page source --csv --print-source sass")
    ap.add_argument("sass", help="ptxlab sass FILE.ptx output")
    ap.add_argument("ptx", help="the PTX file (for the lines' text and its labels)")
    ap.add_argument("--entry", default="fused_step", help="the kernel entry (default fused_step)")
    ap.add_argument("--top", type=int, default=30, help="PTX lines to list (default 30)")
    a = ap.parse_args()

    offsets = parse_sass(a.sass, a.entry)
    rows = list(csv.reader(open(a.source_csv)))
    header_at = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if header_at is None:
        sys.exit(f"ncu_by_ptx: {a.source_csv} has no 'Address' and 'Source' columns (ncu --page source --csv)")
    hdr, data = rows[header_at], [r for r in rows[header_at + 1:] if len(r) == len(rows[header_at])]
    col_addr, col_all = hdr.index("Address"), hdr.index("Warp Stall Sampling (All Samples)")
    stalls = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    base = int(data[0][col_addr], 16)

    per_line, reasons, total, outside = collections.Counter(), collections.defaultdict(collections.Counter), 0, 0
    for r in data:
        n = int(r[col_all] or 0)
        total += n
        ref = offsets.get(int(r[col_addr], 16) - base)
        if ref is None:
            outside += n
            continue
        per_line[ref] += n
        for i in stalls:
            if r[i] and int(r[i]):
                reasons[ref][hdr[i][len("stall_"):]] += int(r[i])
    if total == 0:
        sys.exit("ncu_by_ptx: no warp-stall samples in the CSV (profile with --section SourceCounters)")

    ptx = open(a.ptx).read().split("\n")
    text = lambda ref: ptx[ptx_line_number(ref) - 1].strip()[:60] if ptx_line_number(ref) else ""
    print(f"{total} samples; {outside} outside the entry ({100 * outside / total:.1f} %)")
    print(f"\nby PTX line (top {a.top}): samples, share, line, text | leading stall reasons")
    for ref, n in per_line.most_common(a.top):
        why = ", ".join(f"{k} {v}" for k, v in reasons[ref].most_common(3))
        print(f"{n:7d} {100 * n / total:5.1f} %  {ref:>8}  {text(ref):60s} | {why}")

    labels = [(i + 1, s.strip()) for i, s in enumerate(ptx) if re.match(r"^[A-Za-z_][A-Za-z0-9_$]*:", s.strip())]
    blocks = collections.Counter()
    for ref, n in per_line.items():
        at, name = ptx_line_number(ref), "(before the first label)"
        for line, label in labels:
            if at is None or line > at:
                break
            name = f"{label} (line {line})"
        blocks[name] += n
    print("\nby PTX block (a label to the next): samples, share")
    for name, n in blocks.most_common():
        print(f"{n:7d} {100 * n / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
