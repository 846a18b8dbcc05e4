// CUDA C twin of ptx/fc.ptx, compiled at run time by NVRTC.
//
// A dense layer's backward pass to its input, W[O][I] in nn.Linear's [out][in] layout:
//   dX[s][i] = sum_{o < O} G[s][o] W[o][i],  G = dY where Y > 0 else 0 (act 1), G = dY (act 0)
// The same launch shape as the PTX (host/kernels/conv.cpp fc_plan): blocks of 32 nw threads,
// sb = 4 nw samples (blockDim.x / 8) by 32 columns; block b = (sample group q, column tile c),
// b = q * tiles + c, tiles = ceil(I/32); thread t = 32 w + l: column 32c + l, samples
// sb q + 4w .. sb q + 4w + 3. Laid out plainly: no shared memory (the dynamic shared memory the
// launch gives is left unused), G and W read from global memory. The same sums in the same
// order: acc = +0, fmaf(G, W, acc) for o = 0..O-1.
extern "C" __global__ void fc_bwd_data(float* dX, const float* dY, const float* Y, const float* W,
                                       unsigned B, unsigned I, unsigned O, unsigned act)
{
    const unsigned tiles = (I - 1) / 32 + 1;
    const unsigned q = blockIdx.x / tiles, c = blockIdx.x % tiles;
    const unsigned i = c * 32 + threadIdx.x % 32;
    const unsigned sw = q * (blockDim.x / 8) + 4 * (threadIdx.x / 32);
    if (i >= I) return;
    for (unsigned j = 0; j < 4; ++j) {
        const unsigned s = sw + j;
        if (s >= B) return;
        float acc = 0.0f;
        for (unsigned o = 0; o < O; ++o) {
            float g = dY[(size_t)s * O + o];
            if (act == 1 && !(Y[(size_t)s * O + o] > 0.0f)) g = 0.0f;
            acc = __fmaf_rn(g, W[(size_t)o * I + i], acc);
        }
        dX[(size_t)s * I + i] = acc;
    }
}
