// CUDA C twin of ptx/tcconv.ptx, compiled at run time by NVRTC: 2-D convolution on the tensor
// cores, the forward pass (tc_conv_fwd) and the backward pass to the input (tc_conv_bwd_data),
// with conv_fwd's and conv_bwd_data's meaning (ptx/conv.ptx); tc_conv_bwd_data with idx also runs
// the backward pass of the 2x2 max-pool below in its epilogue (tcconv_pool_bwd).
//
// The same launch shape as the PTX (512 threads a block; block = (n * ceil(OC/32) + group) *
// strips + strip, strips read back from the grid; warp w takes the strip's pixels 16w .. 16w+15,
// one m16 tile, across the group's 32 output channels as four n8 tiles) and the same instructions in the same order:
// accumulators from +0; for the chunks of 8 input channels ci0 = 0, 8, ... and their k steps
// s = 0 .. T-1, one mma.sync.m16n8k8 (TF32) a tile whose k slot j holds kk = 8s + j, that is
// channel ci0 + kk/T and tap kk%T, with the same fragments (g = lane/4, q = lane%4; see the PTX
// header), each operand rounded by cvt.rna.tf32.f32 and +0 outside the image and past the
// channels; then __fadd_rn(c, b) and fmaxf(z, 0) for act 1 (forward), or c as it is (backward).
// The operands come from global memory (the PTX stages them in shared memory); the bits that
// reach each mma are the same, so the two agree bit for bit (the mma's own order and rounding
// are the hardware's, the same for both sets).

// cvt.rna.tf32.f32: nearest, ties away from zero, the 13 low bits cleared; a tf32 in a .b32.
__device__ __forceinline__ unsigned tcconv_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void tcconv_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The sums of one warp: acc[j][r] for its pixel tile (the strip's pixels 16w ..) and channel
// tile j (o0 + 8j ..), r the fragment's element (D layout: row g or g+8, column 2q or
// 2q+1). in_at(ci, iy, ix) is the staged operand (+0 outside the image and past IC);
// w_at(o, ci, tap) the weight (+0 past OC and IC). pix(p) is the strip pixel p's row and
// column; a pixel past npx takes pixel 0's patch (as the PTX).
template <class In, class Wf>
__device__ void tcconv_sums(float (&acc)[4][4], In in_at, Wf w_at, unsigned IC, unsigned H, unsigned W,
                            unsigned KS, unsigned y0, unsigned npx, unsigned o0, unsigned warp, unsigned lane)
{
    const unsigned T = KS * KS, pad = KS / 2, g = lane / 4, q = lane % 4;
    for (unsigned j = 0; j < 4; ++j)
        for (unsigned r = 0; r < 4; ++r) acc[j][r] = 0.0f;
    // A's element (pixel p of the strip, patch index kk of chunk ci0).
    auto a_at = [&](unsigned p, unsigned ci0, unsigned kk) {
        if (p >= npx) p = 0;
        const unsigned y = y0 + p / W, x = p % W, tap = kk % T;
        const unsigned iy = y + tap / KS - pad, ix = x + tap % KS - pad;  // wraps below 0
        return tcconv_tf32(iy < H && ix < W ? in_at(ci0 + kk / T, iy, ix) : 0.0f);
    };
    for (unsigned ci0 = 0; ci0 < IC; ci0 += 8)
        for (unsigned s = 0; s < T; ++s) {
            const unsigned kA = 8 * s + q, kB = kA + 4, p = 16 * warp + g;
            const unsigned a[4] = {a_at(p, ci0, kA), a_at(p + 8, ci0, kA), a_at(p, ci0, kB), a_at(p + 8, ci0, kB)};
            for (unsigned j = 0; j < 4; ++j) {
                const unsigned o = o0 + 8 * j + g;
                const unsigned b0 = tcconv_tf32(w_at(o, ci0 + kA / T, kA % T));
                const unsigned b1 = tcconv_tf32(w_at(o, ci0 + kB / T, kB % T));
                tcconv_mma(acc[j], a, b0, b1);
            }
        }
}

// The block's (n, group, strip) as the PTX decodes it (strips read back from the grid); false
// for a block past N or a strip that starts past the image.
__device__ bool tcconv_block(unsigned N, unsigned H, unsigned W, unsigned OC, unsigned& n, unsigned& o0,
                             unsigned& y0, unsigned& npx, bool pooled = false)
{
    const unsigned groups = (OC + 31) / 32, strips = gridDim.x / (N * groups);
    unsigned R = (H + strips - 1) / strips;
    if (pooled) R = (R + 1) & ~1u;  // whole windows a strip
    const unsigned st = blockIdx.x % strips, grp = blockIdx.x / strips % groups;
    n = blockIdx.x / strips / groups;
    o0 = grp * 32;
    y0 = st * R;
    if (n >= N || y0 >= H) return false;
    npx = min(R, H - y0) * W;
    return true;
}

// Out[n][o][y0 + p/W][p%W] for the lane's accumulators that exist (p < npx, o < OC),
// through f (the epilogue).
template <class F>
__device__ void tcconv_store(const float (&acc)[4][4], float* Out, unsigned n, unsigned OC, unsigned H,
                             unsigned W, unsigned y0, unsigned npx, unsigned o0, unsigned warp, unsigned lane, F f)
{
    const unsigned g = lane / 4, q = lane % 4;
    for (unsigned j = 0; j < 4; ++j)
        for (unsigned r = 0; r < 4; ++r) {
            const unsigned p = 16 * warp + g + (r >= 2 ? 8 : 0), o = o0 + 8 * j + 2 * q + r % 2;
            if (p < npx && o < OC) Out[((size_t)n * OC + o) * H * W + (size_t)y0 * W + p] = f(acc[j][r], o);
        }
}

// With idx: the outputs act(c + b) of the block through shared memory, os[o][p] (in the
// launch's dynamic shared memory, which holds the PTX's 32 x 260 tile; a static array besides
// would need more than the 48 KB a launch gets without opting in), then the
// 2x2 max-pool of the strip's windows as pool_fwd takes it (row-major, the first maximum kept):
// Y and idx [N][K][H/2][W/2], idx the maximum's index in the H x W plane.
extern "C" __global__ void tc_conv_fwd(const float* X, const float* Wt, const float* b, float* Y, unsigned* idx,
                                       unsigned N, unsigned C, unsigned H, unsigned W, unsigned K, unsigned KS,
                                       unsigned act)
{
    extern __shared__ float tcconv_twin_smem[];
    float(*os)[260] = reinterpret_cast<float(*)[260]>(tcconv_twin_smem);
    unsigned n, o0, y0, npx;
    if (!tcconv_block(N, H, W, K, n, o0, y0, npx, idx != nullptr)) return;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, T = KS * KS;
    auto z_of = [&](float c, unsigned o) {
        float z = __fadd_rn(c, b[o]);
        return act == 1 ? fmaxf(z, 0.0f) : z;
    };
    if (idx) {
        if (16 * warp < npx) {
            auto in_at = [&](unsigned c, unsigned iy, unsigned ix) {
                return c < C ? X[(((size_t)n * C + c) * H + iy) * W + ix] : 0.0f;
            };
            auto w_at = [&](unsigned o, unsigned c, unsigned tap) {
                return o < K && c < C ? Wt[((size_t)o * C + c) * T + tap] : 0.0f;
            };
            float acc[4][4];
            tcconv_sums(acc, in_at, w_at, C, H, W, KS, y0, npx, o0, warp, lane);
            const unsigned g = lane / 4, q = lane % 4;
            for (unsigned j = 0; j < 4; ++j)
                for (unsigned r = 0; r < 4; ++r) {
                    const unsigned p = 16 * warp + g + (r >= 2 ? 8 : 0), o = 8 * j + 2 * q + r % 2;
                    if (p < npx && o0 + o < K) os[o][p] = z_of(acc[j][r], o0 + o);
                }
        }
        __syncthreads();
        const unsigned Ho = H / 2, Wo = W / 2, wins = (npx / W / 2) * Wo;
        for (unsigned e = threadIdx.x; e < 32 * wins; e += blockDim.x) {
            const unsigned o = e / wins, py = e % wins / Wo, px = e % wins % Wo;
            if (o0 + o >= K) continue;
            const unsigned pp = 2 * py * W + 2 * px;
            unsigned at = y0 * W + pp, best = at;
            float m = os[o][pp];
            if (os[o][pp + 1] > m) { m = os[o][pp + 1]; best = at + 1; }
            if (os[o][pp + W] > m) { m = os[o][pp + W]; best = at + W; }
            if (os[o][pp + W + 1] > m) { m = os[o][pp + W + 1]; best = at + W + 1; }
            const size_t out = (((size_t)n * K + o0 + o) * Ho + y0 / 2 + py) * Wo + px;
            Y[out] = m;
            idx[out] = best;
        }
        return;
    }
    if (16 * warp >= npx) return;  // the whole warp: no pixel tile
    auto in_at = [&](unsigned c, unsigned iy, unsigned ix) {
        return c < C ? X[(((size_t)n * C + c) * H + iy) * W + ix] : 0.0f;
    };
    auto w_at = [&](unsigned o, unsigned c, unsigned tap) {
        return o < K && c < C ? Wt[((size_t)o * C + c) * T + tap] : 0.0f;
    };
    float acc[4][4];
    tcconv_sums(acc, in_at, w_at, C, H, W, KS, y0, npx, o0, warp, lane);
    tcconv_store(acc, Y, n, K, H, W, y0, npx, o0, warp, lane, z_of);
}

// With idx: pool_bwd of the 2x2 max-pool below (ptx/pool.ptx) on the block's values, as the PTX:
// dX [N][C][PH][PW] the pool's input deltas, the window (y, x) of value c (+0 where Yp is given
// and Yp <= 0) gives c at its index idx[n][o][y][x] and +0 at its other inputs; an odd PH's
// last row and an odd PW's last column get +0. Copies and selects only.
__device__ void tcconv_pool_bwd(float c, float* dX, const unsigned* idx, const float* Yp, unsigned n, unsigned C,
                                unsigned H, unsigned W, unsigned PH, unsigned PW, unsigned o, unsigned y, unsigned x)
{
    const size_t w = (((size_t)n * C + o) * H + y) * W + x;
    const unsigned at = idx[w];
    if (Yp && !(Yp[w] > 0.0f)) c = 0.0f;
    float* plane = dX + ((size_t)n * C + o) * PH * PW;
    const unsigned ye = y == H - 1 && PH > 2 * H ? 3 : 2, xe = x == W - 1 && PW > 2 * W ? 3 : 2;
    for (unsigned dy = 0; dy < ye; ++dy)
        for (unsigned dx = 0; dx < xe; ++dx) {
            const unsigned pos = (2 * y + dy) * PW + 2 * x + dx;
            plane[pos] = dy < 2 && dx < 2 && pos == at ? c : 0.0f;
        }
}

extern "C" __global__ void tc_conv_bwd_data(float* dX, const float* dY, const float* Y, const float* Wt,
                                            const unsigned* idx, const float* Yp, unsigned N, unsigned C, unsigned H,
                                            unsigned W, unsigned K, unsigned KS, unsigned act, unsigned PH,
                                            unsigned PW)
{
    unsigned n, o0, y0, npx;
    if (!tcconv_block(N, H, W, C, n, o0, y0, npx)) return;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, T = KS * KS;
    if (16 * warp >= npx) return;
    // G = dY where Y > 0 (act 1; a NaN Y gives +0, as the PTX's selp), +0 past K.
    auto in_at = [&](unsigned k, unsigned iy, unsigned ix) {
        if (k >= K) return 0.0f;
        const size_t e = (((size_t)n * K + k) * H + iy) * W + ix;
        return act == 1 && !(Y[e] > 0.0f) ? 0.0f : dY[e];
    };
    // The filters turned round: out channel o (of C), in channel k (of K), tap mirrored.
    auto w_at = [&](unsigned o, unsigned k, unsigned tap) {
        return o < C && k < K ? Wt[((size_t)k * C + o) * T + (T - 1 - tap)] : 0.0f;
    };
    float acc[4][4];
    tcconv_sums(acc, in_at, w_at, K, H, W, KS, y0, npx, o0, warp, lane);
    if (idx) {
        const unsigned g = lane / 4, q = lane % 4;
        for (unsigned j = 0; j < 4; ++j)
            for (unsigned r = 0; r < 4; ++r) {
                const unsigned p = 16 * warp + g + (r >= 2 ? 8 : 0), o = o0 + 8 * j + 2 * q + r % 2;
                if (p < npx && o < C)
                    tcconv_pool_bwd(acc[j][r], dX, idx, Yp, n, C, H, W, PH, PW, o, y0 + p / W, p % W);
            }
        return;
    }
    tcconv_store(acc, dX, n, C, H, W, y0, npx, o0, warp, lane, [](float c, unsigned) { return c; });
}
