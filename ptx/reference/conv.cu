// CUDA C twin of ptx/conv.ptx, compiled at run time by NVRTC.
//
// The same entries, parameters, launch shapes and summation order as the PTX (see its
// header), written the plain way: no shared memory, every operand read from global
// memory. Each output's sum runs in exactly the PTX's order, with __fmaf_rn / __fadd_rn /
// __fmul_rn so that NVRTC can neither contract nor reorder, and the two agree bit for bit:
//   conv_fwd          acc = 0; fma over c, ky, kx (padding taps multiply 0); + b; max(z, 0) for act 1
//   conv_bwd_data     acc = 0; fma over k, ky, kx of G = dY (masked by Y > 0 for act 1)
//   conv_bwd_weights  per lane: over n, then pixels lane, lane+32, ...; butterfly 16..1; * scale
// conv_fwd and conv_bwd_data decode the block index as the PTX does: strips of whole rows,
// block = (n * ceil(OC/8) + group) * strips + strip, thread = pixel of the strip, 8 channels.

// The strip geometry of conv_fwd / conv_bwd_data (conv.ptx's header).
__device__ void conv_strip(unsigned H, unsigned W, unsigned& strips, unsigned& R)
{
    unsigned r0 = 256u / W;
    strips = (H + r0 - 1) / r0;
    R = (H + strips - 1) / strips;
}

extern "C" __global__ void conv_fwd(const float* X, const float* Wt, const float* b, float* Y, unsigned N,
                                    unsigned C, unsigned H, unsigned W, unsigned K, unsigned KS, unsigned act)
{
    unsigned strips, R;
    conv_strip(H, W, strips, R);
    const unsigned kgroups = (K + 7) / 8;
    const unsigned s = blockIdx.x % strips, g = (blockIdx.x / strips) % kgroups, n = blockIdx.x / strips / kgroups;
    const unsigned y0 = s * R, rows = min(R, H - y0), ly = threadIdx.x / W, x = threadIdx.x % W;
    if (n >= N || ly >= rows) return;
    const unsigned y = y0 + ly, pad = KS / 2;
    for (unsigned j = 0; j < 8; ++j) {
        const unsigned k = g * 8 + j;
        if (k >= K) return;
        float acc = 0.0f;
        for (unsigned c = 0; c < C; ++c)
            for (unsigned ky = 0; ky < KS; ++ky)
                for (unsigned kx = 0; kx < KS; ++kx) {
                    const unsigned iy = y + ky - pad, ix = x + kx - pad;  // wraps below 0
                    const float xv = (iy < H && ix < W) ? X[((size_t)(n * C + c) * H + iy) * W + ix] : 0.0f;
                    acc = __fmaf_rn(xv, Wt[((size_t)k * C + c) * KS * KS + ky * KS + kx], acc);
                }
        float z = __fadd_rn(acc, b[k]);
        if (act == 1) z = fmaxf(z, 0.0f);
        Y[((size_t)(n * K + k) * H + y) * W + x] = z;
    }
}

extern "C" __global__ void conv_bwd_data(float* dX, const float* dY, const float* Y, const float* Wt, unsigned N,
                                         unsigned C, unsigned H, unsigned W, unsigned K, unsigned KS, unsigned act)
{
    unsigned strips, R;
    conv_strip(H, W, strips, R);
    const unsigned groups = (C + 7) / 8;
    const unsigned s = blockIdx.x % strips, g = (blockIdx.x / strips) % groups, n = blockIdx.x / strips / groups;
    const unsigned y0 = s * R, rows = min(R, H - y0), ly = threadIdx.x / W, x = threadIdx.x % W;
    if (n >= N || ly >= rows) return;
    const unsigned y = y0 + ly, pad = KS / 2;
    for (unsigned j = 0; j < 8; ++j) {
        const unsigned c = g * 8 + j;
        if (c >= C) return;
        float acc = 0.0f;
        for (unsigned k = 0; k < K; ++k)
            for (unsigned ky = 0; ky < KS; ++ky)
                for (unsigned kx = 0; kx < KS; ++kx) {
                    const unsigned oy = y + pad - ky, ox = x + pad - kx;  // wraps below 0
                    float gv = 0.0f;
                    if (oy < H && ox < W) {
                        const size_t o = ((size_t)(n * K + k) * H + oy) * W + ox;
                        gv = dY[o];
                        if (act == 1) gv = Y[o] > 0.0f ? gv : 0.0f;
                    }
                    acc = __fmaf_rn(gv, Wt[((size_t)k * C + c) * KS * KS + ky * KS + kx], acc);
                }
        dX[((size_t)(n * C + c) * H + y) * W + x] = acc;
    }
}

extern "C" __global__ void conv_bwd_weights(float* dW, float* db, const float* X, const float* dY, const float* Y,
                                            unsigned N, unsigned C, unsigned H, unsigned W, unsigned K, unsigned KS,
                                            unsigned act, float scale)
{
    const unsigned k = blockIdx.x / C, c = blockIdx.x % C, T = KS * KS, HW = H * W, pad = KS / 2;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (k >= K || warp > T) return;
    const bool bias = warp == T;
    if (bias && c != 0) return;
    const unsigned ky = bias ? 0 : warp / KS, kx = bias ? 0 : warp % KS;
    float acc = 0.0f;
    for (unsigned n = 0; n < N; ++n) {
        const size_t gplane = (size_t)(n * K + k) * HW, xplane = (size_t)(n * C + c) * HW;
        for (unsigned q = lane; q < HW; q += 32) {
            float gv = dY[gplane + q];
            if (act == 1) gv = Y[gplane + q] > 0.0f ? gv : 0.0f;
            if (bias) {
                acc = __fadd_rn(acc, gv);
            } else {
                const unsigned iy = q / W + ky - pad, ix = q % W + kx - pad;  // wraps below 0
                const float xv = (iy < H && ix < W) ? X[xplane + iy * W + ix] : 0.0f;
                acc = __fmaf_rn(gv, xv, acc);
            }
        }
    }
    for (int m = 16; m >= 1; m /= 2) acc = __fadd_rn(acc, __shfl_xor_sync(0xffffffffu, acc, m));
    if (lane != 0) return;
    acc = __fmul_rn(acc, scale);
    if (bias) db[k] = acc;
    else dW[((size_t)k * C + c) * T + warp] = acc;
}
