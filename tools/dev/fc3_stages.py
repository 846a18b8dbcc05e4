#!/usr/bin/env python3
"""fc3_step's stages, timed inside the kernel (a dev tool, not built by CMake or CI).

Writes a copy of ptx/fc3step.ptx (or the file named) with %clock64 stores at 20 points of a step
and at the next step's top (block 0: cluster 0, rank 0, thread 0; the launch's last step but one
and the top of the last; two more inside S4 (b) where the kernel has their anchors; into the
scratch's first 256 bytes, beside the grid barrier's count), linked as text with ptx/optim.ptx as
ptxlab links it. tools/dev/fc3_stages.cpp launches it (784,256,128,10, batch 64, Nesterov, S steps
a launch, S >= 2) and prints the stages:

  python3 tools/dev/fc3_stages.py [--raw-tf32] [ptx/fc3step.ptx] > /tmp/fc3_marked.ptx
  g++ -O2 -std=c++17 tools/dev/fc3_stages.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs \\
      -lcuda -o /tmp/fc3_stages && /tmp/fc3_stages /tmp/fc3_marked.ptx 128

The markers are inserted at labels and comments of the kernel; when the kernel moves on and one is
gone, this script stops and names it. --raw-tf32 turns every cvt.rna.tf32.f32 into a mov.b32 (the
mma then reads the FP32 bits and truncates): the values change, the stages' times price the
roundings left. Since 5c62aa9 fc3step.ptx loads every operand but A1 as bits, and only A1's
staging keeps its cvt; the roundings at each fragment load cost 1.7 us a step (BENCHMARKS.md).
"""
import pathlib
import sys

root = pathlib.Path(__file__).resolve().parents[2]
args = sys.argv[1:]
raw = "--raw-tf32" in args
args = [a for a in args if a != "--raw-tf32"]
if len(args) > 1 or any(a.startswith("-") for a in args):
    sys.exit("usage: fc3_stages.py [--raw-tf32] [FILE.ptx]")
src = pathlib.Path(args[0] if args else root / "ptx/fc3step.ptx").read_text()
if raw:
    n = src.count("cvt.rna.tf32.f32 ")
    if n == 0:
        sys.exit("fc3_stages.py: --raw-tf32, but the kernel has no cvt.rna.tf32.f32")
    src = src.replace("cvt.rna.tf32.f32 ", "mov.b32          ")
optim = (root / "ptx/optim.ptx").read_text()


def mark(i):
    return f"    mov.u64         clk, %clock64;\n    @tsp st.global.u64 [work+{8 + 8 * i}], clk;\n"


def put(text, anchor, i, after, optional=False):
    if optional and text.count(anchor) == 0:
        return text
    if text.count(anchor) != 1:
        sys.exit(f"fc3_stages.py: the anchor {anchor!r} occurs {text.count(anchor)} times in ptx/fc3step.ptx, not once")
    return text.replace(anchor, anchor + mark(i) if after else mark(i) + anchor)


s = src.replace("    .reg .pred  pc<8>, pj<4>,", "    .reg .pred  tsp, tsn;\n    .reg .u64   clk;\n    .reg .pred  pc<8>, pj<4>,", 1)
top = "STEP:\n    add.u32         t, step, 1;\n    setp.eq.u32     last, t, steps;\n"
# tsp: block 0's thread 0 in step S - 2 (the marks); tsn: the same thread at the top of step S - 1.
s = put(s, top, 0, True).replace(top + mark(0), top + """    setp.eq.u32     tsp, tid, 0;
    add.u32         tt, t, 1;
    setp.eq.u32     ok, tt, steps;
    and.pred        tsn, tsp, last;
    and.pred        tsp, tsp, ok;
    setp.eq.u32     ok, c, 0;
    and.pred        tsp, tsp, ok;
    and.pred        tsn, tsn, ok;
    setp.eq.u32     ok, rank, 0;
    and.pred        tsp, tsp, ok;
    and.pred        tsn, tsn, ok;
""" + mark(0))
# (anchor, marker, after the anchor?) -- the order of the harness's table
for anchor, i, after in [
    ("S1_DONE:\n", 1, True),
    ("GB1_PASSED:\n    bar.sync        0;\n", 2, True),
    ("XI_ON:\n", 3, True),
    ("S2_DONE:\n", 4, True),
    ("GB2_PASSED:\n    bar.sync        0;\n", 5, True),
    ("S3_Y_DONE:\n    bar.sync        0;\n", 9, True),
    ("    // (c) D2 of units u = 4 qd + i", 10, False),
    ("    // (d) fc2's weight gradient", 11, False),
    ("    // (e) fc2's deltas D1p", 12, False),
    ("    bar.sync        0;                          // every warp has read W2S\n", 13, True),
    ("    // (g) W3[o][g0 + u]", 14, False),
    ("S3_W3_DONE:\n", 15, True),
    ("S3_B2_DONE:\n", 16, True),
    ("S3_DONE:\n", 6, True),
    ("GB3_PASSED:\n    bar.sync        0;\n", 7, True),
    ("    // (b) fc1's weight gradient D1^T X [16 units]", 17, False),
    ("    mov.u32         n, warp;\nS4_N:", 18, False),
    ("    // (c) b1[h0 + u] (rank 0, thread 32 + u)", 19, False),
    ("S4_DONE:\n", 8, True),
]:
    s = put(s, anchor, i, after)
# The top of the next step (slot 20); optional finer marks where the kernel has their anchors.
anchor = "    and.pred        tsn, tsn, ok;\n" + mark(0)
if s.count(anchor) != 1:
    sys.exit("fc3_stages.py: the step top's marks are not where this script put them")
s = s.replace(anchor, anchor + "    mov.u64         clk, %clock64;\n    @tsn st.global.u64 [work+168], clk;\n", 1)
for anchor, i, after in [
    ("    bar.sync        0;\n    // W1's step, element e", 21, False),
    ("    // W1's step, element e", 22, False),
]:
    s = put(s, anchor, i, after, optional=True)
# Link optim.ptx as text, as ptx_link.hpp does: the declarations become forward declarations.
s = s.replace(".extern .func", ".visible .func")
sys.stdout.write(s + "\n" + optim[optim.index(".visible .func (.param .align 16 .b8 pmv[16]) optimizer_update("):])
