// CUDA C twin of ptx/update.ptx, compiled at run time by NVRTC.
//
// SGD on one parameter array from per-sample gradients G[B][N]:
//   P[i] -= lr * (sum_b G[b][i]) / B
// The sum runs b = 0..B-1 in order (deterministic, no atomics). The step is one
// fused multiply-add, written out with fmaf: a plain `P[i] - lr * mean` reaches
// ptxas as an unrounded mul.f32 + sub.f32 pair that it may or may not fuse, and
// the hand-written PTX must be able to match it to the bit.
// One thread per parameter.
extern "C" __global__ void update(float* P, const float* G, unsigned N, unsigned B, float lr)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float sum = 0.0f;
    for (unsigned b = 0; b < B; ++b)
        sum += G[(size_t)b * N + i];
    float mean = sum / (float)B;
    P[i] = fmaf(-lr, mean, P[i]);   // P[i] - lr * mean, rounded once
}
