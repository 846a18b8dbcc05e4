// CUDA C twin of ptx/conv.ptx, compiled at run time by NVRTC.
//
// The same entries, parameters, launch shapes and summation order as the PTX (see its
// header), written the plain way: no shared memory, every operand read from global
// memory. Each output's sum runs in exactly the PTX's order, with __fmaf_rn / __fadd_rn /
// __fmul_rn so that NVRTC can neither contract nor reorder, and the two agree bit for bit:
//   conv_fwd          acc = 0; fma over c, ky, kx (padding taps multiply 0); + b; max(z, 0) for act 1
//   conv_bwd_data     acc = 0; fma over k, ky, kx of G = dY (masked by Y > 0 for act 1)
//   conv_bwd_weights  per lane: over the rank's images n = rank, rank+8, ..., then pixels lane,
//                     lane+32, ...; butterfly 16..1; then the 8 ranks in order; * scale
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

// conv_bwd_weights: a cluster of 8 blocks per (8 output channels, input channel); rank r
// sums the images r, r+8, ...; lane l the pixels l, l+32, ...; warp w < T a tap, warp T
// the bias. Butterfly in the warp, then rank r adds channel k0 + r over the ranks in order.
extern "C" __global__ void __cluster_dims__(8, 1, 1)
conv_bwd_weights(float* dW, float* db, const float* X, const float* dY, const float* Y, unsigned N, unsigned C,
                 unsigned H, unsigned W, unsigned K, unsigned KS, unsigned act, float scale)
{
    __shared__ float part[26 * 8];
    const unsigned rank = __clusterRelativeBlockRank(), pair = blockIdx.x / 8;
    const unsigned c = pair % C, k0 = pair / C * 8, T = KS * KS, HW = H * W, pad = KS / 2;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, tap = (warp < T ? warp : T) % T;
    const bool bias = warp == T;
    const unsigned ky = tap / KS, kx = tap % KS;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (unsigned n = rank; n < N; n += 8)
        for (unsigned q = lane; q < HW; q += 32) {
            const unsigned iy = q / W + ky - pad, ix = q % W + kx - pad;  // wraps below 0
            const float xv = (iy < H && ix < W) ? X[((size_t)(n * C + c) * H + iy) * W + ix] : 0.0f;
            for (unsigned j = 0; j < 8; ++j) {
                float g = 0.0f;
                if (k0 + j < K) {
                    const size_t o = (size_t)(n * K + k0 + j) * HW + q;
                    g = dY[o];
                    if (act == 1) g = Y[o] > 0.0f ? g : 0.0f;
                }
                acc[j] = bias ? __fadd_rn(acc[j], g) : __fmaf_rn(g, xv, acc[j]);
            }
        }
    for (unsigned j = 0; j < 8; ++j)
        for (int m = 16; m >= 1; m /= 2) acc[j] = __fadd_rn(acc[j], __shfl_xor_sync(0xffffffffu, acc[j], m));
    if (lane == 0)
        for (unsigned j = 0; j < 8; ++j) part[warp * 8 + j] = acc[j];
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    const unsigned k = k0 + rank, w = threadIdx.x;
    if (k < K && w <= T && !(w == T && c != 0)) {
        float sum = *static_cast<float*>(__cluster_map_shared_rank(&part[w * 8 + rank], 0));
        for (unsigned peer = 1; peer < 8; ++peer)
            sum = __fadd_rn(sum, *static_cast<float*>(__cluster_map_shared_rank(&part[w * 8 + rank], peer)));
        const float out = __fmul_rn(sum, scale);
        if (w == T) db[k] = out;
        else dW[((size_t)k * C + c) * T + w] = out;
    }
    __cluster_barrier_arrive();  // no block leaves while another still reads its part[]
    __cluster_barrier_wait();
}
