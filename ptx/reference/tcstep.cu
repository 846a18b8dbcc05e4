// CUDA C twin of ptx/tcstep.ptx, compiled at run time by NVRTC.
//
// Whole training steps of the 2-layer ReLU MLP in ONE cluster of 16 blocks, `steps` of them in
// one launch: the two large products (X W1^T and D1^T X) on the tensor cores (mma.sync m16n8k8,
// TF32 inputs), everything else in FP32. See the header of tcstep.ptx for the maths, the launch
// shape, the limits, what each rank owns and the summation order. This file computes the same
// values in the same order with plainer data movement: each rank writes its slices into its own
// shared memory and the others read them (__cluster_map_shared_rank) after a cluster barrier,
// four a step (the PTX pushes them with bulk copies onto mbarriers, with no cluster barrier);
// the same launch shape and the same operations in the same order:
//   - every mma.sync gets the same fragments (cvt.rna.tf32.f32 of the same values, through
//     inline asm) in the same slots and the same accumulator, and each accumulator's chain runs
//     over the k tiles in the same order from +0. The tensor core's order and rounding inside
//     one mma are not specified, but they are the hardware's, the same for both sets (tc.ptx's
//     header);
//   - every other sum is the same chain of IEEE operations written with __fadd_rn, __fsub_rn,
//     __fmul_rn, __fmaf_rn, __fdiv_rn and fmaxf (max.f32), which NVRTC may not contract or
//     reorder; ex2.approx.f32 through inline asm; each parameter's step is recipe.cuh's
//     optimizer_update, optim.ptx's sequence as the PTX's optimizer_update (whose shortcut
//     for zero state selects the same bits, and which the PTX inlines for SGD's family);
// so the two agree bit for bit. Laid out more plainly than in the PTX: the fragments are plain
// shared loads (the PTX reads X and W1 with ldmatrix.x4 and rounds X to TF32 once a step: the
// same values in the same slots), the warps tile the forward product differently (which warp
// computes a tile does not change its chain), both products go through one helper (warp_mma)
// that takes the A and B elements and the epilogue as lambdas, X's slice of a step is copied
// synchronously at the start of that step (the PTX loads it a step ahead), the softmax walks a
// sample's row in one thread (the PTX computes the row's e side by side: the same values, the
// same sum order), and the peers' slices are read one float at a time.

#include "recipe.cuh"  // optimizer_update: the sequence of optim.ptx, step.ptx and tcstep.ptx
#include "tc.cuh"      // tf32, mma_tf32 (cvt.rna.tf32.f32, the m16n8k8 mma, as the PTX issues them); sum4, column_sum

// ---- This twin's shared-memory map (the first version of tcstep.ptx's: the PTX now lays its
// exchange buffers out by unit block): byte offsets in the dynamic shared memory (of which the
// host passes tcstep.hpp's kTcStepSmem, more than this), row strides in floats. ZP and D1T
// share their bytes (d1t is used in phase 5 only).
constexpr unsigned kW1S = 0, kM1S = 30720, kV1S = 61440;   // [128][60] W1's slice, its m, its v
constexpr unsigned kXS = 92160;                            // 2 x [64][60] X's slice (buffer j % 2)
constexpr unsigned kZP = 122880, kD1T = 122880;            // [64][136] zp; [128][68] d1t
constexpr unsigned kYP = 157696;                           // [64][16] partial outputs yp
constexpr unsigned kD1OWN = 161792, kD2OWN = 163840;       // [64][8] D1, [4][16] D2 of this rank
constexpr unsigned kAS = 164096, kD2F = 166144;            // [64][8] A of this rank; [64][16] all D2
constexpr unsigned kW2S = 170240, kM2S = 170752, kV2S = 171264;  // [16][8] W2[o][8r+j], m, v
constexpr unsigned kB1S = 171776, kMB1 = 171808, kVB1 = 171840;  // [8] b1[8r+j], m, v
constexpr unsigned kB2S = 171872, kMB2 = 171936, kVB2 = 172000;  // [16] this rank's copy of b2, m, v
constexpr unsigned kYROW = 172064, kEnd = 172320;          // [4][16] Y of this rank's samples
constexpr unsigned kLdW = 60, kLdZ = 136, kLdD = 68, kLdO = 16, kLdU = 8;  // W1s and xs; zp; d1t; [.][O]; [.][8]
static_assert(kEnd == kYROW + 4 * kLdO * 4 && kD1T + 128 * kLdD * 4 == kYP && kZP + 64 * kLdZ * 4 == kYP,
              "the twin's shared-memory map");

// One warp's 16-row x 8 nt-column block of A B (nt <= 8 tiles of 8 columns), the k tiles
// k0 = 0, 8, ... < K in increasing order, each accumulator from +0: per k tile the A fragment
// (g = lane/4, q = lane%4: a0 = a(g, k0+q), a1 = a(g+8, k0+q), a2 = a(g, k0+q+4),
// a3 = a(g+8, k0+q+4)) and, per tile n, the B fragment (b0 = b(8n+g, k0+q),
// b1 = b(8n+g, k0+q+4)), each rounded by cvt.rna.tf32.f32, and one mma.sync onto tile n's c.
// Then out(row, column, c) for c0 (g, 8n+2q), c1 (g, 8n+2q+1), c2 (g+8, 8n+2q), c3 (g+8, 8n+2q+1).
template <class FA, class FB, class FOut>
__device__ __forceinline__ void warp_mma(unsigned K, unsigned nt, FA a, FB b, FOut out)
{
    const unsigned lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    float c[8][4] = {};
    for (unsigned k0 = 0; k0 < K; k0 += 8) {
        const unsigned k = k0 + q;
        const unsigned a0 = tf32(a(g, k)), a1 = tf32(a(g + 8, k)), a2 = tf32(a(g, k + 4)), a3 = tf32(a(g + 8, k + 4));
#pragma unroll
        for (unsigned n = 0; n < 8; ++n)
            if (n < nt) mma_tf32(c[n], a0, a1, a2, a3, tf32(b(8 * n + g, k)), tf32(b(8 * n + g, k + 4)));
    }
#pragma unroll
    for (unsigned n = 0; n < 8; ++n) {
        if (n >= nt) continue;
        const unsigned col = 8 * n + 2 * q;
        out(g, col, c[n][0]);
        out(g, col + 1, c[n][1]);
        out(g + 8, col, c[n][2]);
        out(g + 8, col + 1, c[n][3]);
    }
}

// The float at p in rank q's shared memory (ld.shared::cluster in the PTX).
__device__ __forceinline__ float at_rank(float* p, unsigned q)
{
    return *static_cast<float*>(__cluster_map_shared_rank(p, q));
}

// ((v_0 + v_1) + ... + v_{n-1}) of the float at p in ranks 0 .. n-1 (add.rn in rank order), n >= 1.
__device__ __forceinline__ float rank_sum(float* p, unsigned n)
{
    float z = at_rank(p, 0);
    for (unsigned q = 1; q < n; ++q) z = __fadd_rn(z, at_rank(p, q));
    return z;
}

__device__ __forceinline__ void cluster_sync()
{
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
}

extern "C" __global__ void __cluster_dims__(16, 1, 1) __launch_bounds__(256)
tc_step(const float* X, const float* T, float* P, float* M, float* V, float* A, float* Y, const float* hyp,
        unsigned B, unsigned I, unsigned H, unsigned O, unsigned steps, unsigned loss, float scale,
        unsigned optim, float momentum, float beta1, float beta2, float eps, float alpha, float weight_decay)
{
    extern __shared__ __align__(16) unsigned char dsm[];
    auto sh = [&](unsigned offset) { return reinterpret_cast<float*>(dsm + offset); };
    float *const w1s = sh(kW1S), *const m1s = sh(kM1S), *const v1s = sh(kV1S);
    float *const zp = sh(kZP), *const d1t = sh(kD1T), *const yp = sh(kYP);
    float *const d1own = sh(kD1OWN), *const d2own = sh(kD2OWN), *const as = sh(kAS), *const d2f = sh(kD2F);
    float *const w2s = sh(kW2S), *const m2s = sh(kM2S), *const v2s = sh(kV2S);
    float *const b1s = sh(kB1S), *const mb1 = sh(kMB1), *const vb1 = sh(kVB1);
    float *const b2s = sh(kB2S), *const mb2 = sh(kMB2), *const vb2 = sh(kVB2), *const yrow = sh(kYROW);

    const unsigned tid = threadIdx.x, warp = tid / 32, r = __clusterRelativeBlockRank();
    // This rank's input columns [k_lo, k_hi) (kn of them), ranks < nr own some; its units
    // u0 .. u0+7 (those < H), ranks < nh own some; its samples 4r .. 4r+3 (those < B).
    const unsigned kc = 8 * (((I + 15) / 16 + 7) / 8), ksteps = kc / 8;
    const unsigned k_lo = min(r * kc, I), k_hi = min(k_lo + kc, I), kn = k_hi - k_lo;
    const unsigned nr = (I + kc - 1) / kc, nh = (H + 7) / 8, u0 = 8 * r;
    const bool owns_columns = r < nr;
    // The tensors inside P, their state at the same indices in M and V; the state the optimizer
    // keeps (recipe.cuh optim_keeps_m, optim_keeps_v: the PTX's useM and useV; null: none).
    const size_t b1i = (size_t)H * I, w2i = b1i + H, b2i = w2i + (size_t)O * H;
    if (!optim_keeps_m(optim)) M = nullptr;
    if (!optim_keeps_v(optim)) V = nullptr;

    // A parameter's shared copy p and its state m, v: loaded from index i of P, M, V (+0 where
    // !ok or no state), stored back, and stepped by the optimizer with the gradient sum * scale.
    auto load = [&](float* p, float* m, float* v, size_t i, bool ok) {
        *p = ok ? P[i] : 0.0f;
        *m = ok && M ? M[i] : 0.0f;
        *v = ok && V ? V[i] : 0.0f;
    };
    auto store = [&](const float* p, const float* m, const float* v, size_t i) {
        P[i] = *p;
        if (M) M[i] = *m;
        if (V) V[i] = *v;
    };
    float4 hs;  // this step's {lr, step_size, bc2_sqrt, decay}
    auto update = [&](float* p, float* m, float* v, float sum) {
        float pp = *p, mm = *m, vv = *v;
        optimizer_update(pp, mm, vv, __fmul_rn(sum, scale), optim, hs, momentum, beta1, beta2, eps, alpha,
                         weight_decay);
        *p = pp;
        *m = mm;
        *v = vv;
    };

    // ---- Prologue: this rank's parameters into shared memory, for the whole launch.
    for (unsigned e = tid; e < 128 * kc; e += 256) {
        const unsigned u = e / kc, kk = e % kc, x = u * kLdW + kk;
        load(w1s + x, m1s + x, v1s + x, (size_t)u * I + k_lo + kk, u < H && kk < kn);
    }
    for (unsigned e = tid; e < 8 * O; e += 256) {
        const unsigned o = e / 8, j = e % 8;
        load(w2s + e, m2s + e, v2s + e, w2i + (size_t)o * H + u0 + j, u0 + j < H);
    }
    if (tid < 8) load(b1s + tid, mb1 + tid, vb1 + tid, b1i + u0 + tid, u0 + tid < H);
    if (tid < O) load(b2s + tid, mb2 + tid, vb2 + tid, b2i + tid, true);

    for (unsigned step = 0; step < steps; ++step) {
        hs = reinterpret_cast<const float4*>(hyp)[step];
        const size_t s0 = (size_t)step * B;  // this step's first sample in X, T and Y
        float* const xs = sh(kXS) + (step % 2) * 64 * kLdW;

        // X's slice: xs[s][kk] = X[s][k_lo + kk], +0 past B and I. The buffer was last read two
        // steps ago.
        if (owns_columns)
            for (unsigned e = tid; e < 64 * kc; e += 256) {
                const unsigned s = e / kc, kk = e % kc;
                xs[s * kLdW + kk] = s < B && kk < kn ? X[(s0 + s) * I + k_lo + kk] : 0.0f;
            }
        __syncthreads();  // xs and the parameters ready; the last step's phase 5 done with d1t (zp's bytes)

        // ---- 1. Forward product: warp w's 16 samples x 64 units of zp = xs W1s^T.
        if (owns_columns) {
            const unsigned m0 = 16 * (warp & 3), h0 = 64 * (warp >> 2);
            warp_mma(
                kc, 8, [&](unsigned m, unsigned k) { return xs[(m0 + m) * kLdW + k]; },
                [&](unsigned n, unsigned k) { return w1s[(h0 + n) * kLdW + k]; },
                [&](unsigned m, unsigned n, float c) { zp[(m0 + m) * kLdZ + h0 + n] = c; });
        }
        cluster_sync();  // 1

        // ---- 2. Units: sample s = tid/4, units u0 + j, j = 2 (tid%4) and +1.
        for (unsigned i = 0; i < 2; ++i) {
            const unsigned s = tid / 4, j = 2 * (tid % 4) + i, u = u0 + j;
            float a = 0.0f;
            if (s < B && u < H) {
                a = fmaxf(__fadd_rn(rank_sum(zp + s * kLdZ + u, nr), b1s[j]), 0.0f);
                A[(size_t)s * H + u] = a;
            }
            as[s * kLdU + j] = a;
        }
        __syncthreads();  // as written
        // This rank's partial outputs: the fma chain over all 8 units (+0 past H) from +0.
        for (unsigned e = tid; e < 64 * O; e += 256) {
            const unsigned s = e / O, o = e % O;
            float acc = 0.0f;
            for (unsigned j = 0; j < 8; ++j) acc = __fmaf_rn(as[s * kLdU + j], w2s[o * kLdU + j], acc);
            yp[s * kLdO + o] = acc;
        }
        cluster_sync();  // 2

        // ---- 3. Samples: threads tid < 4 O, sample s = 4r + tid/O, output o = tid%O.
        {
            const unsigned sl = tid / O, o = tid % O, s = 4 * r + sl;
            const bool mine = tid < 4 * O, live = mine && s < B;
            const size_t io = (s0 + s) * O + o;
            float y = 0.0f, d = 0.0f;
            if (live) {
                y = __fadd_rn(rank_sum(yp + s * kLdO + o, nh), b2s[o]);
                Y[io] = y;
                if (loss == 1) yrow[sl * kLdO + o] = y;
            }
            if (loss == 1) __syncthreads();  // the sample's row of Y written (every thread of the block)
            if (live) d = loss == 1 ? softmax_d(yrow + sl * kLdO, O, y, T[io]) : __fsub_rn(y, T[io]);
            if (mine) d2own[sl * kLdO + o] = d;
        }
        cluster_sync();  // 3

        // ---- 4. Deltas, small gradients. All of D2 from its owners.
        for (unsigned e = tid; e < 64 * O; e += 256) {
            const unsigned s = e / O, o = e % O;
            d2f[s * kLdO + o] = at_rank(d2own + (s % 4) * kLdO + o, s / 4);
        }
        __syncthreads();  // d2f written
        // D1 of sample tid/4, units u0 + 2 (tid%4), +1 (+0 past B and H: as is +0 there).
        for (unsigned i = 0; i < 2; ++i) {
            const unsigned s = tid / 4, j = 2 * (tid % 4) + i;
            float d = 0.0f;
            if (as[s * kLdU + j] > 0.0f)
                for (unsigned o = 0; o < O; ++o) d = __fmaf_rn(d2f[s * kLdO + o], w2s[o * kLdU + j], d);
            d1own[s * kLdU + j] = d;
        }
        __syncthreads();  // d1own written, the old W2 read
        if (tid < 8 * O) {  // W2[o][u0 + j]
            const unsigned o = tid / 8, j = tid % 8;
            if (u0 + j < H) {
                const float sum = sum4(B, [&](float c, unsigned s) {
                    return __fmaf_rn(d2f[s * kLdO + o], as[s * kLdU + j], c);
                });
                update(w2s + tid, m2s + tid, v2s + tid, sum);
            }
        } else if (tid >= 128 && tid < 128 + O) {  // this rank's copy of b2[o]
            const unsigned o = tid - 128;
            update(b2s + o, mb2 + o, vb2 + o, column_sum(d2f + o, kLdO, B));
        } else if (tid >= 160 && tid < 168 && u0 + tid - 160 < H) {  // b1[u0 + j]
            const unsigned j = tid - 160;
            update(b1s + j, mb1 + j, vb1 + j, column_sum(d1own + j, kLdU, B));
        }
        cluster_sync();  // 4

        // ---- 5. W1's gradient: all of D1 transposed from its owners, then warp w's units
        // 16w .. 16w+15 x this rank's kc columns, one k tile a block of 8 samples.
        if (owns_columns) {
            for (unsigned e = tid; e < 128 * 64; e += 256) {
                const unsigned u = e / 64, s = e % 64;
                d1t[u * kLdD + s] = at_rank(d1own + s * kLdU + u % 8, u / 8);
            }
            __syncthreads();  // d1t written
            const unsigned h0 = 16 * warp;
            warp_mma(
                B, ksteps, [&](unsigned m, unsigned k) { return d1t[(h0 + m) * kLdD + k]; },
                [&](unsigned n, unsigned k) { return xs[k * kLdW + n]; },
                [&](unsigned m, unsigned kk, float c) {
                    const unsigned x = (h0 + m) * kLdW + kk;
                    if (h0 + m < H && kk < kn) update(w1s + x, m1s + x, v1s + x, c);
                });
        }
    }
    cluster_sync();  // 5: no block leaves while a peer still reads its d1own

    // ---- Epilogue: the owners write the parameters and their state back.
    for (unsigned e = tid; e < H * kn; e += 256) {
        const unsigned u = e / kn, kk = e % kn, x = u * kLdW + kk;
        store(w1s + x, m1s + x, v1s + x, (size_t)u * I + k_lo + kk);
    }
    for (unsigned e = tid; e < 8 * O; e += 256) {
        const unsigned o = e / 8, j = e % 8;
        if (u0 + j < H) store(w2s + e, m2s + e, v2s + e, w2i + (size_t)o * H + u0 + j);
    }
    if (tid < 8 && u0 + tid < H) store(b1s + tid, mb1 + tid, vb1 + tid, b1i + u0 + tid);
    if (r == 0 && tid < O) store(b2s + tid, mb2 + tid, vb2 + tid, b2i + tid);
}
