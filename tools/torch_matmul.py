#!/usr/bin/env python3
"""cuBLAS through torch.matmul at a dense layer's three products, TF32 and FP32, on this GPU.

    python3 tools/torch_matmul.py

For each B x I x H: the forward pass X W^T ([B x I] [I x H]), the weight gradient G^T X and the
deltas G W, in microseconds a product: CUDA events around 20 back-to-back calls, the median of 25
such runs after 5 warm-up calls (the steady state, as `ptxlab bench` times its kernels: 20 launches
a sample; one call between two events also times its launch and idles the GPU between calls).
These are the figures the tensor-core kernels of ptx/densetc.ptx, ptx/tc.ptx and ptx/hopper/ are
compared with (BENCHMARKS.md, section 4).
"""
import torch


def median_us(f, runs=25, calls=20):
    for _ in range(5):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(runs):
        start.record()
        for _ in range(calls):
            f()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    times.sort()
    return times[len(times) // 2]


def set_tf32(on):
    """TF32 for FP32 matmuls on or off (the newer fp32_precision switch where PyTorch has it)."""
    torch.backends.cuda.matmul.allow_tf32 = on
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"


def main():
    for B, I, H in [(4096, 1024, 1024), (4096, 784, 1024), (64, 784, 256), (64, 1024, 1024)]:
        X = torch.randn(B, I, device="cuda")
        W = torch.randn(H, I, device="cuda")
        G = torch.randn(B, H, device="cuda")
        for tf32 in (True, False):
            set_tf32(tf32)
            fwd = median_us(lambda: X @ W.t())
            wgrad = median_us(lambda: G.t() @ X)
            dgrad = median_us(lambda: G @ W)
            print(f"torch B={B} I={I} H={H} tf32={tf32}: fwd {fwd:.1f} us, wgrad {wgrad:.1f} us, dgrad {dgrad:.1f} us")


if __name__ == "__main__":
    main()
