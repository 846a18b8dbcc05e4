// CUDA C twin of ptx/mean.ptx, compiled at run time by NVRTC.
//
// The mean gradient of one array from per-sample gradients Gs[B][N]:
//   G[i] = (sum_b Gs[b][i]) * scale
// The sum runs b = 0..B-1 in order from +0 (deterministic, no atomics), each add
// rounded (__fadd_rn); the scale is one rounded multiply (__fmul_rn), so NVRTC can
// neither contract nor reorder and the hand-written PTX matches it to the bit.
// One thread per element.
extern "C" __global__ void batch_mean(float* G, const float* Gs, unsigned N, unsigned B, float scale)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float sum = 0.0f;
    for (unsigned b = 0; b < B; ++b)
        sum = __fadd_rn(sum, Gs[(size_t)b * N + i]);
    G[i] = __fmul_rn(sum, scale);
}
