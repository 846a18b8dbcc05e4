// CUDA C twin of ptx/fc.ptx, compiled at run time by NVRTC.
//
// A dense layer's backward pass to its input, W[O][I] in nn.Linear's [out][in] layout:
//   dX[s][i] = sum_{o < O} G[s][o] W[o][i],  G = dY where Y > 0 else 0 (act 1), G = dY (act 0)
// The same launch shape as the PTX (block b = (sample group q, column tile c), b = q * tiles + c;
// thread t: column 256c + t, samples 4q .. 4q+3), laid out plainly: no shared memory, G read
// from global memory. The same sums in the same order: acc = +0, fmaf(G, W, acc) for o = 0..O-1.
extern "C" __global__ void fc_bwd_data(float* dX, const float* dY, const float* Y, const float* W,
                                       unsigned B, unsigned I, unsigned O, unsigned act)
{
    const unsigned tiles = (I + 255) / 256;
    const unsigned q = blockIdx.x / tiles, c = blockIdx.x % tiles;
    const unsigned i = c * 256 + threadIdx.x;
    if (i >= I) return;
    for (unsigned j = 0; j < 4; ++j) {
        const unsigned s = 4 * q + j;
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
