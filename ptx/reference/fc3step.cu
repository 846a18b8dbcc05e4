// CUDA C twin of ptx/fc3step.ptx, compiled at run time by NVRTC.
//
// Whole training steps of a 3-layer fc network (I -> H1 -> H2 -> O, ReLU) in ONE launch of G
// clusters of 4 blocks, `steps` of them a launch: four stages a step with a grid barrier after
// S1, S2 and S3, the five large products on the tensor cores (mma.sync m16n8k8, TF32 inputs),
// everything else in FP32. See the header of fc3step.ptx for the maths, the launch shape, the
// limits, what each cluster and rank owns, the scratch `work` and the summation order. This file
// computes the same values in the same order:
//   - every mma.sync gets the same fragments (the same values' FP32 bits, A1's rounded by
//     cvt.rna.tf32.f32 when staged, through inline asm) in the same slots and the same
//     accumulator; S1's two chains (E over the even k steps, O over the odd ones, each from +0,
//     then add.rn(E, O)), every other product one chain from +0 over its k steps in increasing
//     order. The tensor core's order and rounding inside one mma are the hardware's, the same for
//     both sets (tc.ptx's header);
//   - every other sum is the same chain of IEEE operations written with __fadd_rn, __fsub_rn,
//     __fmul_rn, __fmaf_rn, __fdiv_rn and fmaxf (max.f32), which NVRTC may not contract or
//     reorder; ex2.approx.f32 through inline asm; each parameter's step is recipe.cuh's
//     optimizer_update, optim.ptx's sequence (the PTX links optim.ptx's optimizer_update);
//   - the same threads of the same ranks update the small tensors (b1, b2, W3, b3) and keep
//     their optimizer state in registers; the same writes happen in the same steps (P of the
//     small tensors every step; the W1 and W2 tiles, and every state, in the launch's last step);
//   - the same grid barrier on work+0, cluster barriers around the DSMEM reads of PART, b1's new
//     value stored into every rank's B1S, and the shared-memory map of the header.
// So the two agree bit for bit. Plainer than the PTX: every load is a plain scalar load of the
// element it needs (the PTX loads vectors: the same values in the same slots), X's slice of step
// j is copied into XS[j % 2] synchronously at the top of step j (the PTX's cp.async copies it
// during step j-1's S2 to S4), the softmax walks its row in each thread as the header says, and
// the peers' PART is read one float at a time. As in the PTX, one cluster barrier after the last
// step keeps every block alive while rank 0's last stores into the peers' B1S land.

#include "recipe.cuh"  // optimizer_update, optim_keeps_m, optim_keeps_v: the sequences of optim.ptx
#include "tc.cuh"      // tf32, mma_tf32 (cvt.rna.tf32.f32, the m16n8k8 mma, as the PTX issues them); sum4, column_sum

// ---- The shared-memory map of fc3step.ptx (byte offsets; the host passes fc3step.hpp's
// kFc3StepSmem = kEnd) and its row strides in floats.
constexpr unsigned kXS = 0, kXSBuf = 52224;                            // 2 x [64][204] X's slice, as loaded
constexpr unsigned kW1S = 104448, kM1S = 117504, kV1S = 130560;        // [16][204] W1's tile slice, m, v
constexpr unsigned kPART = 143616;                                     // [64][16] partial sums (S1, S2)
constexpr unsigned kA1S = 147712;                                      // [64][72] A1's slice, TF32
constexpr unsigned kW2S = 166144, kM2S = 170752, kV2S = 175360;        // [16][72] W2's tile slice, m, v
constexpr unsigned kW3S = 179968, kAOWN = 180992;                      // [16][16] W3 columns; A2 own samples
constexpr unsigned kD2S = 182016, kD3S = 186112, kA2S = 190208, kYS = 194304;  // [64][16] each
constexpr unsigned kB1S = 198400, kB2S = 198464, kEnd = 198528;        // [16] b1, b2 of the tiles
constexpr unsigned kLdX = 204, kLdA = 72, kLd = 16;
static_assert(kXSBuf == 64 * kLdX * 4 && kW1S == 2 * kXSBuf && kPART == kV1S + 16 * kLdX * 4 &&
                  kW2S == kA1S + 64 * kLdA * 4 && kW3S == kV2S + 16 * kLdA * 4 && kB1S == kYS + 64 * kLd * 4 &&
                  kEnd == kB2S + 64,
              "fc3step.ptx's shared-memory map");

// ---- The scratch `work` (byte offsets; fc3step.hpp kFc3StepWorkBytes = kWorkEnd).
constexpr unsigned kWorkGB3 = 256, kWorkA1 = 512, kWorkA2 = 66048, kWorkYP = 98816, kWorkD1P = 131584;
constexpr unsigned kWorkEnd = 655872;
static_assert(kWorkA2 == kWorkA1 + 64 * 256 * 4 && kWorkYP == kWorkA2 + 64 * 128 * 4 &&
                  kWorkD1P == kWorkYP + 64 * 16 * 8 * 4 && kWorkEnd == kWorkD1P + 8 * 64 * 256 * 4,
              "fc3step.ptx's work layout");

// One k step of a 16 x 8 tile onto c: a(m, k) and b(k, n) give the tile's A and B elements (m, n
// within the tile, k within the step), in this lane's slots (g = lane/4, q = lane%4): a0 = a(g, q),
// a1 = a(g+8, q), a2 = a(g, q+4), a3 = a(g+8, q+4), b0 = b(q, g), b1 = b(q+4, g), each as its FP32
// bits: the tensor core reads the sign, exponent and upper 10 mantissa bits (a truncation to TF32),
// as fc3step.ptx's loads give it (ld.shared.b32; A1S holds values already rounded by cvt.rna).
template <class FA, class FB> __device__ __forceinline__ void mma_step(float (&c)[4], FA a, FB b)
{
    const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    mma_tf32(c, __float_as_uint(a(g, q)), __float_as_uint(a(g + 8, q)), __float_as_uint(a(g, q + 4)),
             __float_as_uint(a(g + 8, q + 4)), __float_as_uint(b(q, g)), __float_as_uint(b(q + 4, g)));
}

// out(m, n, c_i) for the four accumulators of this lane: c0 (g, 2q), c1 (g, 2q+1), c2 (g+8, 2q),
// c3 (g+8, 2q+1).
template <class F> __device__ __forceinline__ void tile_out(const float (&c)[4], F out)
{
    const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    out(g, 2 * q, c[0]);
    out(g, 2 * q + 1, c[1]);
    out(g + 8, 2 * q, c[2]);
    out(g + 8, 2 * q + 1, c[3]);
}

// ((v_0 + v_1) + v_2) + v_3 of the float at p in ranks 0..3 (DSMEM, add.rn in rank order).
__device__ __forceinline__ float rank_sum(float* p)
{
    float z = *static_cast<float*>(__cluster_map_shared_rank(p, 0));
    for (unsigned q = 1; q < 4; ++q) z = __fadd_rn(z, *static_cast<float*>(__cluster_map_shared_rank(p, q)));
    return z;
}

__device__ __forceinline__ void cluster_sync()
{
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
}

// The grid barrier's memory orders have no CUDA C spelling in NVRTC without extra headers: inline
// PTX, as in step.cu. Every block counts itself in to the 64-bit count at work+0 (a multiple of
// the grid's blocks between barriers) and waits until it reaches the next multiple.
__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long* p)
{
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
__device__ void grid_barrier(unsigned long long* count)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long old;
        asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;" : "=l"(old) : "l"(count) : "memory");
        const unsigned long long target = old - old % gridDim.x + gridDim.x;
        while (ld_acquire(count) < target) __nanosleep(32);
    }
    __syncthreads();
}

extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(256, 1)
fc3_step(const float* X, const float* T, float* P, float* M, float* V, float* Y, const float* hyp, float* work,
         unsigned B, unsigned I, unsigned H1, unsigned H2, unsigned O, unsigned steps, unsigned loss, float scale,
         unsigned optim, float momentum, float beta1, float beta2, float eps, float alpha, float weight_decay)
{
    if (__clusterSizeInBlocks() != 4) __trap();  // .reqnctapercluster 4
    extern __shared__ __align__(16) unsigned char dsm[];
    auto sh = [&](unsigned offset) { return reinterpret_cast<float*>(dsm + offset); };
    float *const w1s = sh(kW1S), *const m1s = sh(kM1S), *const v1s = sh(kV1S);
    float *const part = sh(kPART), *const a1s = sh(kA1S);
    float *const w2s = sh(kW2S), *const m2s = sh(kM2S), *const v2s = sh(kV2S);
    float *const w3s = sh(kW3S), *const aown = sh(kAOWN), *const d2s = sh(kD2S), *const d3s = sh(kD3S);
    float *const a2s = sh(kA2S), *const ys = sh(kYS), *const b1s = sh(kB1S), *const b2s = sh(kB2S);
    auto wk = [&](unsigned offset) { return reinterpret_cast<float*>(reinterpret_cast<char*>(work) + offset); };
    unsigned long long* const count = reinterpret_cast<unsigned long long*>(work);
    float *const gb3w = wk(kWorkGB3), *const a1w = wk(kWorkA1), *const a2w = wk(kWorkA2), *const ypw = wk(kWorkYP);
    float* const d1pw = wk(kWorkD1P);

    const unsigned tid = threadIdx.x, warp = tid / 32, r = __clusterRelativeBlockRank(), c = blockIdx.x / 4;
    // Cluster c's tiles: H1 units h0 .. h0+15 (t1), H2 units g0 .. g0+15 (t2). Rank r's input
    // columns [k_lo, k_lo + kc), H1 columns [j_lo, j_hi), samples 16 r .. 16 r + 15 in the joins.
    const unsigned h0 = 16 * c, g0 = 16 * c, T2 = (H2 + 15) / 16;
    const bool t1 = h0 < H1, t2 = c < T2;
    const unsigned k_lo = min(196 * r, I), kc = min(196 * r + 196, I) - k_lo;
    const unsigned j_lo = min(64 * r, H1), j_hi = min(64 * r + 64, H1);
    // The tensors inside P, their state at the same indices in M and V (null: the optimizer keeps none).
    const size_t b1i = (size_t)H1 * I, w2i = b1i + H1, b2i = w2i + (size_t)H2 * H1, w3i = b2i + H2,
                 b3i = w3i + (size_t)O * H2;
    if (!optim_keeps_m(optim)) M = nullptr;
    if (!optim_keeps_v(optim)) V = nullptr;

    float4 hs;  // this step's {lr, step_size, bc2_sqrt, decay}
    // p, m, v take one optimizer step with the gradient mul.rn(sum, scale).
    auto update = [&](float& p, float& m, float& v, float sum) {
        optimizer_update(p, m, v, __fmul_rn(sum, scale), optim, hs, momentum, beta1, beta2, eps, alpha, weight_decay);
    };
    auto load_state = [&](size_t i, float& m, float& v) {
        m = M ? M[i] : 0.0f;
        v = V ? V[i] : 0.0f;
    };
    auto store = [&](size_t i, float p, float m, float v, bool state) {
        P[i] = p;
        if (state && M) M[i] = m;
        if (state && V) V[i] = v;
    };

    // ---- Prologue: the W1 and W2 tile slices and their state into shared memory for the launch
    // (+0 past the tiles' units and the rank's columns), b1's tile into every rank's B1S, and the
    // small tensors' state into the registers of the threads that update them.
    if (t1)
        for (unsigned e = tid; e < 16 * kLdX; e += 256) {
            const unsigned u = e / kLdX, kk = e % kLdX;
            const bool ok = h0 + u < H1 && kk < kc;
            const size_t i = (size_t)(h0 + u) * I + k_lo + kk;
            w1s[e] = ok ? P[i] : 0.0f;
            m1s[e] = ok && M ? M[i] : 0.0f;
            v1s[e] = ok && V ? V[i] : 0.0f;
        }
    if (t2)
        for (unsigned e = tid; e < 16 * kLdA; e += 256) {
            const unsigned u = e / kLdA, kk = e % kLdA;
            const bool ok = g0 + u < H2 && j_lo + kk < j_hi && kk < 64;
            const size_t i = w2i + (size_t)(g0 + u) * H1 + j_lo + kk;
            w2s[e] = ok ? P[i] : 0.0f;
            m2s[e] = ok && M ? M[i] : 0.0f;
            v2s[e] = ok && V ? V[i] : 0.0f;
        }
    if (t1 && tid < 16) b1s[tid] = h0 + tid < H1 ? P[b1i + h0 + tid] : 0.0f;
    // b2[g0 + t]: rank 0, threads 0..15; b1[h0 + u]: rank 0, threads 32 + u; W3[o][g0 + u]: rank 1,
    // threads 16 o + u; b3[o]: cluster 0's rank 3, threads o (one role a thread).
    const bool own_b2 = t2 && r == 0 && tid < 16 && g0 + tid < H2;
    const bool own_b1 = t1 && r == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1;
    const bool own_w3 = t2 && r == 1 && tid < 16 * O && g0 + tid % 16 < H2;
    const bool own_b3 = c == 0 && r == 3 && tid < O;
    const size_t i_b2 = b2i + g0 + tid, i_b1 = b1i + h0 + tid - 32, i_w3 = w3i + (size_t)(tid / 16) * H2 + g0 + tid % 16,
                 i_b3 = b3i + tid;
    float mb2 = 0.0f, vb2 = 0.0f, mb1 = 0.0f, vb1 = 0.0f, mw3 = 0.0f, vw3 = 0.0f, mb3 = 0.0f, vb3 = 0.0f;
    if (own_b2) load_state(i_b2, mb2, vb2);
    if (own_b1) load_state(i_b1, mb1, vb1);
    if (own_w3) load_state(i_w3, mw3, vw3);
    if (own_b3) load_state(i_b3, mb3, vb3);

    const unsigned mt = warp & 3, nt = warp >> 2;  // S1, S2: the warp's m16 tile (samples) and n8 tile (units)
    for (unsigned step = 0; step < steps; ++step) {
        hs = reinterpret_cast<const float4*>(hyp)[step];
        const bool last = step + 1 == steps;
        const float* const Xs = X + (size_t)step * B * I;
        const float* const Ts = T + (size_t)step * B * O;
        float* const Ys = Y + (size_t)step * B * O;
        float* const xs = sh(kXS + (step % 2) * kXSBuf);  // XS[step % 2]

        // ---- S1, fc1 forward (t1): PART = this rank's columns of X W1^T, the ranks joined.
        if (t1) {
            for (unsigned e = tid; e < 64 * kLdX; e += 256) {  // X's slice as loaded (+0 past B and kc)
                const unsigned s = e / kLdX, kk = e % kLdX;
                xs[e] = s < B && kk < kc ? Xs[(size_t)s * I + k_lo + kk] : 0.0f;
            }
            __syncthreads();  // xs written
            float ce[4] = {0.0f, 0.0f, 0.0f, 0.0f}, co[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned ks = 0; ks < 25; ++ks) {
                const unsigned k0 = 8 * ks;
                auto a = [&](unsigned m, unsigned k) { return xs[(16 * mt + m) * kLdX + k0 + k]; };
                auto b = [&](unsigned k, unsigned n) { return w1s[(8 * nt + n) * kLdX + k0 + k]; };
                if (ks % 2 == 0) mma_step(ce, a, b);
                else mma_step(co, a, b);
            }
            float cz[4];
            for (unsigned i = 0; i < 4; ++i) cz[i] = __fadd_rn(ce[i], co[i]);
            tile_out(cz, [&](unsigned m, unsigned n, float v) { part[(16 * mt + m) * kLd + 8 * nt + n] = v; });
        }
        cluster_sync();  // every rank's PART written; the last step's B1S stores landed
        if (t1) {
            const unsigned s = 16 * r + tid / 16, u = tid % 16;
            const float z = __fadd_rn(rank_sum(part + s * kLd + u), b1s[u]);
            if (s < B && h0 + u < H1) a1w[s * 256 + h0 + u] = fmaxf(z, 0.0f);
        }
        grid_barrier(count);  // 1: A1 complete

        // ---- S2, fc2 forward (t2): PART = this rank's H1 columns of A1 W2^T; A2, the partial outputs.
        if (t2) {
            for (unsigned e = tid; e < 64 * kLdA; e += 256) {
                const unsigned s = e / kLdA, kk = e % kLdA;
                const bool ok = s < B && kk < 64 && j_lo + kk < j_hi;
                a1s[e] = ok ? __uint_as_float(tf32(__ldcg(a1w + s * 256 + j_lo + kk))) : 0.0f;
            }
            {
                const unsigned o = tid / 16, u = tid % 16;
                w3s[tid] = o < O && g0 + u < H2 ? __ldcg(P + w3i + (size_t)o * H2 + g0 + u) : 0.0f;
                if (tid < 16) b2s[tid] = g0 + tid < H2 ? __ldcg(P + b2i + g0 + tid) : 0.0f;
            }
            __syncthreads();  // a1s, w3s, b2s written
            float cz[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned ks = 0; ks < 8; ++ks) {
                const unsigned k0 = 8 * ks;
                mma_step(
                    cz, [&](unsigned m, unsigned k) { return a1s[(16 * mt + m) * kLdA + k0 + k]; },
                    [&](unsigned k, unsigned n) { return w2s[(8 * nt + n) * kLdA + k0 + k]; });
            }
            tile_out(cz, [&](unsigned m, unsigned n, float v) { part[(16 * mt + m) * kLd + 8 * nt + n] = v; });
        }
        cluster_sync();  // every rank's PART written
        if (t2) {
            const unsigned sl = tid / 16, s = 16 * r + sl, u = tid % 16;
            const float z = __fadd_rn(rank_sum(part + s * kLd + u), b2s[u]);
            const float a = s < B && g0 + u < H2 ? fmaxf(z, 0.0f) : 0.0f;
            aown[sl * kLd + u] = a;
            a2w[s * 128 + 16 * c + u] = a;
            __syncthreads();  // aown written
            const unsigned o = tid % 16;  // this rank's partial outputs: the fma chain over the tile's units
            if (o < O && s < B) {
                float yp = 0.0f;
                for (unsigned k = 0; k < 16; ++k) yp = __fmaf_rn(aown[sl * kLd + k], w3s[o * kLd + k], yp);
                ypw[(s * 16 + o) * 8 + c] = yp;
            }
        }
        grid_barrier(count);  // 2: A2 and the partial outputs complete

        // ---- S3, loss and fc2's backward (t2; every rank, all 64 samples): thread t takes
        // sample s = t/4 and quarter qd = t%4.
        if (t2) {
            const unsigned s = tid / 4, qd = tid % 4;
            // (a) Y of outputs qd + 4i, the tile's A2.
            for (unsigned i = 0; i < 4; ++i) {
                const unsigned o = qd + 4 * i;
                if (o < O) {
                    float y = 0.0f;
                    if (s < B) {
                        y = __ldcg(ypw + (s * 16 + o) * 8);
                        for (unsigned cc = 1; cc < T2; ++cc) y = __fadd_rn(y, __ldcg(ypw + (s * 16 + o) * 8 + cc));
                        y = __fadd_rn(y, __ldcg(P + b3i + o));
                        if (c == 0 && r == 0) Ys[(size_t)s * O + o] = y;
                    }
                    ys[s * kLd + o] = y;
                }
                a2s[s * kLd + 4 * qd + i] = __ldcg(a2w + s * 128 + 16 * c + 4 * qd + i);
            }
            __syncthreads();  // ys, a2s written
            // (b) D3 of outputs qd + 4i (+0 past O and B).
            for (unsigned i = 0; i < 4; ++i) {
                const unsigned o = qd + 4 * i;
                float d = 0.0f;
                if (o < O && s < B) {
                    const float y = ys[s * kLd + o], t = Ts[(size_t)s * O + o];
                    d = loss == 1 ? softmax_d(ys + s * kLd, O, y, t) : __fsub_rn(y, t);
                }
                d3s[s * kLd + o] = d;
            }
            __syncthreads();  // d3s written
            // (c) D2 of units 4 qd + i: the fma chain over the outputs from +0, masked by A2 > 0.
            for (unsigned i = 0; i < 4; ++i) {
                const unsigned u = 4 * qd + i;
                float d = 0.0f;
                for (unsigned o = 0; o < O; ++o) d = __fmaf_rn(d3s[s * kLd + o], w3s[o * kLd + u], d);
                d2s[s * kLd + u] = a2s[s * kLd + u] > 0.0f ? d : 0.0f;
            }
            __syncthreads();  // d2s written
            // (d) fc2's weight gradient: warp w's columns 8w .. 8w+7 x the tile's 16 units, one
            // chain over the 8 sample steps; A[m = u][k = s] = D2, B[k = s][n = col] = A1S.
            float cw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned ks = 0; ks < 8; ++ks) {
                const unsigned k0 = 8 * ks;
                mma_step(
                    cw, [&](unsigned m, unsigned k) { return d2s[(k0 + k) * kLd + m]; },
                    [&](unsigned k, unsigned n) { return a1s[(k0 + k) * kLdA + 8 * warp + n]; });
            }
            // (e) fc2's deltas with the W2 before this step's update: warp w's sample tile mt and
            // column tiles (w >> 2) + 2j, one chain over the two unit steps each;
            // A[m = s][k = u] = D2, B[k = u][n = col] = W2S. D1P[c][s][j_lo + col].
            for (unsigned j = 0; j < 4; ++j) {
                const unsigned n8 = (warp >> 2) + 2 * j;
                float cd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (unsigned k0 = 0; k0 < 16; k0 += 8)
                    mma_step(
                        cd, [&](unsigned m, unsigned k) { return d2s[(16 * mt + m) * kLd + k0 + k]; },
                        [&](unsigned k, unsigned n) { return w2s[(k0 + k) * kLdA + 8 * n8 + n]; });
                tile_out(cd, [&](unsigned m, unsigned n, float v) {
                    const unsigned col = 8 * n8 + n;
                    if (j_lo + col < j_hi) d1pw[(c * 64 + 16 * mt + m) * 256 + j_lo + col] = v;
                });
            }
            __syncthreads();  // every warp has read w2s
            // (f) W2's step from (d)'s sums, in place; to P, M, V in the launch's last step.
            tile_out(cw, [&](unsigned u, unsigned n, float sum) {
                const unsigned col = 8 * warp + n, x = u * kLdA + col;
                if (g0 + u >= H2 || j_lo + col >= j_hi) return;
                update(w2s[x], m2s[x], v2s[x], sum);
                if (last) store(w2i + (size_t)(g0 + u) * H1 + j_lo + col, w2s[x], m2s[x], v2s[x], true);
            });
            // (g) W3[o][g0 + u] (rank 1): the sum over the samples of D3 A2 (sum4); to P every step.
            if (own_w3) {
                const unsigned o = tid / 16, u = tid % 16;
                const float sum = sum4(B, [&](float c, unsigned k) { return __fmaf_rn(d3s[k * kLd + o], a2s[k * kLd + u], c); });
                float p = w3s[o * kLd + u];
                update(p, mw3, vw3, sum);
                store(i_w3, p, mw3, vw3, last);
            }
            // (h) b2[g0 + t] (rank 0): the sum of D2 over the samples (sum4); to P every step.
            if (own_b2) {
                const float sum = column_sum(d2s + tid, kLd, B);
                float p = b2s[tid];
                update(p, mb2, vb2, sum);
                store(i_b2, p, mb2, vb2, last);
            }
            // (i) b3's gradient sums (cluster 0's rank 2): b3 is read by every cluster in S3.
            if (c == 0 && r == 2 && tid < O) {
                gb3w[tid] = column_sum(d3s + tid, kLd, B);
            }
        }
        grid_barrier(count);  // 3: D1's parts, GB3 complete

        // ---- S4, fc1's backward (t1).
        if (t1) {
            // (a) D1 of the tile (into D2S): the tiles' parts added in tile order, masked by A1 > 0.
            for (unsigned j = 0; j < 4; ++j) {
                const unsigned e = tid + 256 * j, s = e / 16, h = h0 + e % 16;
                float d = 0.0f;
                if (s < B && h < H1) {
                    d = __ldcg(d1pw + s * 256 + h);
                    for (unsigned cc = 1; cc < T2; ++cc) d = __fadd_rn(d, __ldcg(d1pw + (cc * 64 + s) * 256 + h));
                    if (!(__ldcg(a1w + s * 256 + h) > 0.0f)) d = 0.0f;
                }
                d2s[e] = d;
            }
            __syncthreads();  // D1 written
            // (b) fc1's weight gradient: warp w's column tiles w, w + 8, w + 16, w + 24 (< 25) x the
            // tile's 16 units (the PTX runs them in pairs, the same chains), one chain over the 8
            // sample steps each; A[m = u][k = s] = D1, B[k = s][n = col] = XS. W1's step in place; to P, M, V in the launch's last step.
            for (unsigned n8 = warp; n8 < 25; n8 += 8) {
                float cw[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (unsigned ks = 0; ks < 8; ++ks) {
                    const unsigned k0 = 8 * ks;
                    mma_step(
                        cw, [&](unsigned m, unsigned k) { return d2s[(k0 + k) * kLd + m]; },
                        [&](unsigned k, unsigned n) { return xs[(k0 + k) * kLdX + 8 * n8 + n]; });
                }
                tile_out(cw, [&](unsigned u, unsigned n, float sum) {
                    const unsigned col = 8 * n8 + n, x = u * kLdX + col;
                    if (h0 + u >= H1 || col >= kc) return;
                    update(w1s[x], m1s[x], v1s[x], sum);
                    if (last) store((size_t)(h0 + u) * I + k_lo + col, w1s[x], m1s[x], v1s[x], true);
                });
            }
            // (c) b1[h0 + u] (rank 0, threads 32 + u): the sum of D1 over the samples (sum4); the
            // new value into every rank's B1S (read after the next step's S1 cluster barrier).
            if (own_b1) {
                const unsigned u = tid - 32;
                const float sum = column_sum(d2s + u, kLd, B);
                float p = b1s[u];
                update(p, mb1, vb1, sum);
                for (unsigned q = 0; q < 4; ++q) *static_cast<float*>(__cluster_map_shared_rank(b1s + u, q)) = p;
                store(i_b1, p, mb1, vb1, last);
            }
            // (d) b3[o] (cluster 0's rank 3, threads o) from GB3.
            if (own_b3) {
                float p = __ldcg(P + i_b3);
                update(p, mb3, vb3, __ldcg(gb3w + tid));
                store(i_b3, p, mb3, vb3, last);
            }
        }
        __syncthreads();  // XS[step % 2] and d2s free for the next step
    }
    cluster_sync();  // no block leaves while rank 0's last stores into its B1S may still land
}
