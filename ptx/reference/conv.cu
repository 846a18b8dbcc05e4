// CUDA C twin of ptx/conv.ptx, compiled at run time by NVRTC.
//
// The same entries, parameters, launch shapes and summation order as the PTX (see its
// header), written the plain way: no shared memory, every operand read from global
// memory. Each output's sum runs in exactly the PTX's order, with __fmaf_rn / __fadd_rn /
// __fmul_rn so that NVRTC can neither contract nor reorder, and the two agree bit for bit:
//   conv_fwd          acc = 0; fma over c, ky, kx (padding taps multiply 0); + b; max(z, 0) for act 1
//   conv_bwd_data     acc = 0; fma over k, ky, kx of G = dY (masked by Y > 0 for act 1)
//   conv_bwd_weights  per thread (channel cl, lane j of L = 256/CS): over the rank's images
//                     n = rank, rank+8, ..., then pixels j, j+L, ...; butterfly over min(L, 32)
//                     lanes; the channel's warps in order (L > 32); the 8 ranks in order; * scale
// conv_fwd and conv_bwd_data decode the block index as the PTX does: strips of whole rows,
// block = (n * ceil(OC/8) + group) * strips + strip, thread = pixel of the strip, 8 channels.

// The strip geometry of conv_fwd / conv_bwd_data (conv.ptx's header); pooled (conv_fwd with
// idx), R0 rounded down and R up to even counts.
__device__ void conv_strip(unsigned H, unsigned W, unsigned& strips, unsigned& R, bool pooled = false)
{
    unsigned r0 = 256u / W;
    if (pooled) r0 &= ~1u;
    strips = (H + r0 - 1) / r0;
    R = (H + strips - 1) / strips;
    if (pooled) R = (R + 1) & ~1u;
}

// conv_fwd's output at (n, k, y, x): act(b[k] + the sum over c, ky, kx in order).
__device__ float conv_fwd_at(const float* X, const float* Wt, const float* b, unsigned n, unsigned k, unsigned y,
                             unsigned x, unsigned C, unsigned H, unsigned W, unsigned KS, unsigned act)
{
    const unsigned pad = KS / 2;
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
    return z;
}

// With idx, Y and idx are the 2x2 max-pool of the outputs ([N][K][H/2][W/2]; pool_fwd's
// maximum and index): the thread of a window's top-left pixel computes its four outputs.
extern "C" __global__ void conv_fwd(const float* X, const float* Wt, const float* b, float* Y, unsigned* idx,
                                    unsigned N, unsigned C, unsigned H, unsigned W, unsigned K, unsigned KS,
                                    unsigned act)
{
    unsigned strips, R;
    conv_strip(H, W, strips, R, idx != nullptr);
    const unsigned kgroups = (K + 7) / 8;
    const unsigned s = blockIdx.x % strips, g = (blockIdx.x / strips) % kgroups, n = blockIdx.x / strips / kgroups;
    const unsigned y0 = s * R, rows = min(R, H - y0), ly = threadIdx.x / W, x = threadIdx.x % W;
    if (n >= N || ly >= rows) return;
    const unsigned y = y0 + ly;
    if (idx) {
        if (ly % 2 || x % 2 || ly + 1 >= rows || x + 1 >= W) return;
        const unsigned Ho = H / 2, Wo = W / 2;
        for (unsigned j = 0; j < 8; ++j) {
            const unsigned k = g * 8 + j;
            if (k >= K) return;
            unsigned at = y * W + x, best = at;
            float m = conv_fwd_at(X, Wt, b, n, k, y, x, C, H, W, KS, act), v;
            if ((v = conv_fwd_at(X, Wt, b, n, k, y, x + 1, C, H, W, KS, act)) > m) { m = v; best = at + 1; }
            at += W;
            if ((v = conv_fwd_at(X, Wt, b, n, k, y + 1, x, C, H, W, KS, act)) > m) { m = v; best = at; }
            if ((v = conv_fwd_at(X, Wt, b, n, k, y + 1, x + 1, C, H, W, KS, act)) > m) { m = v; best = at + 1; }
            const size_t o = ((size_t)(n * K + k) * Ho + y / 2) * Wo + x / 2;
            Y[o] = m;
            idx[o] = best;
        }
        return;
    }
    for (unsigned j = 0; j < 8; ++j) {
        const unsigned k = g * 8 + j;
        if (k >= K) return;
        Y[((size_t)(n * K + k) * H + y) * W + x] = conv_fwd_at(X, Wt, b, n, k, y, x, C, H, W, KS, act);
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

// conv_bwd_weights: a cluster of 8 blocks per (8 output channels k0.., slice of CS input
// channels c0..); CS read back from the grid as the PTX does. Thread (cl, j) = (tid / L,
// tid % L), L = 256 / CS; rank r sums the images r, r+8, ...; lane j the pixels j, j+L, ...;
// a pass per 9 taps. Butterfly over the min(L, 32) lanes of the channel in its warp, the
// channel's warps in order (L > 32), then rank r adds channel k0 + r over the ranks in order.
// The operands come from global memory (the PTX stages them); the sums are the same.
extern "C" __global__ void __cluster_dims__(8, 1, 1)
conv_bwd_weights(float* dW, float* db, const float* X, const float* dY, const float* Y, unsigned N, unsigned C,
                 unsigned H, unsigned W, unsigned K, unsigned KS, unsigned act, float scale)
{
    extern __shared__ float4 conv_wgrad_smem[];                     // the PTX's layout: wpart, then part
    float* wpart = reinterpret_cast<float*>(conv_wgrad_smem);       // [segment][80]
    float* part = wpart + 1280;                                     // [cl][80]
    const unsigned rank = __clusterRelativeBlockRank();
    const unsigned kgroups = (K + 7) / 8, slices = gridDim.x / 8 / kgroups, cid = blockIdx.x / 8;
    const unsigned kg = cid / slices, cs = cid % slices, k0 = kg * 8, ceilC = (C + slices - 1) / slices;
    unsigned CS = 1;
    while (CS < ceilC) CS *= 2;
    const unsigned L = 256 / CS, c0 = cs * CS, csn = min(CS, C - c0), seg = min(L, 32u), nseg = L > 32 ? L / 32 : 1;
    const unsigned T = KS * KS, HW = H * W, pad = KS / 2, tid = threadIdx.x, cl = tid / L, j = tid % L, c = c0 + cl;
    const bool isb = cs == 0 && tid < max(32u, L);  // warps holding channel 0's lanes of slice 0 sum db
    for (unsigned tg = 0; tg * 9 < T; ++tg) {
        float acc[8][9], bsum[8];
        for (unsigned k = 0; k < 8; ++k) {
            bsum[k] = 0.0f;
            for (unsigned s = 0; s < 9; ++s) acc[k][s] = 0.0f;
        }
        for (unsigned n = rank; n < N; n += 8)
            for (unsigned q = j; q < HW; q += L) {
                const unsigned y = q / W, x = q % W;
                float xv[9];
                for (unsigned s = 0; s < 9; ++s) {
                    const unsigned tap = tg * 9 + s, iy = y + tap / KS - pad, ix = x + tap % KS - pad;  // wraps below 0
                    xv[s] = (tap < T && c < C && iy < H && ix < W) ? X[((size_t)(n * C + c) * H + iy) * W + ix] : 0.0f;
                }
                for (unsigned k = 0; k < 8; ++k) {
                    float g = 0.0f;
                    if (k0 + k < K) {
                        const size_t o = (size_t)(n * K + k0 + k) * HW + q;
                        g = dY[o];
                        if (act == 1) g = Y[o] > 0.0f ? g : 0.0f;
                    }
                    if (isb && tg == 0) bsum[k] = __fadd_rn(bsum[k], g);
                    for (unsigned s = 0; s < 9; ++s) acc[k][s] = __fmaf_rn(g, xv[s], acc[k][s]);
                }
            }
        for (unsigned m = seg / 2; m >= 1; m /= 2)
            for (unsigned k = 0; k < 8; ++k) {
                for (unsigned s = 0; s < 9; ++s)
                    acc[k][s] = __fadd_rn(acc[k][s], __shfl_xor_sync(0xffffffffu, acc[k][s], m));
                bsum[k] = __fadd_rn(bsum[k], __shfl_xor_sync(0xffffffffu, bsum[k], m));
            }
        if (tid % seg == 0)
            for (unsigned k = 0; k < 8; ++k) {
                for (unsigned s = 0; s < 9; ++s) wpart[tid / seg * 80 + k * 9 + s] = acc[k][s];
                wpart[tid / seg * 80 + 72 + k] = bsum[k];
            }
        __syncthreads();
        for (unsigned u = tid; u < CS * 80; u += 256) {
            const unsigned ch = u / 80, i = u % 80;
            float sum = wpart[ch * nseg * 80 + i];
            for (unsigned w = 1; w < nseg; ++w) sum = __fadd_rn(sum, wpart[(ch * nseg + w) * 80 + i]);
            part[u] = sum;
        }
        __cluster_barrier_arrive();
        __cluster_barrier_wait();
        const unsigned k = k0 + rank;
        unsigned idx = ~0u;
        if (tid < CS * 9 && tid / 9 < csn && tg * 9 + tid % 9 < T) idx = tid / 9 * 80 + rank * 9 + tid % 9;
        if (tid == CS * 9 && tg == 0 && cs == 0) idx = 72 + rank;
        if (k < K && idx != ~0u) {
            float sum = *static_cast<float*>(__cluster_map_shared_rank(&part[idx], 0));
            for (unsigned peer = 1; peer < 8; ++peer)
                sum = __fadd_rn(sum, *static_cast<float*>(__cluster_map_shared_rank(&part[idx], peer)));
            const float out = __fmul_rn(sum, scale);
            if (tid == CS * 9) db[k] = out;
            else dW[((size_t)k * C + c0 + tid / 9) * T + tg * 9 + tid % 9] = out;
        }
        __cluster_barrier_arrive();  // no block reuses part[] or leaves while another still reads it
        __cluster_barrier_wait();
    }
}
