// CUDA C twin of ptx/step.ptx, compiled at run time by NVRTC.
//
// Whole training steps of the 2-layer MLP, `steps` of them in one launch: phase 1 (A and
// the per-tile partial outputs Yp), a grid barrier, phase 2 (D2 for the loss code, D1, the
// gradient sums, then every parameter's optimizer step), a cluster barrier before the next
// step. See the header of step.ptx for the maths, the launch shape, the limits and the
// summation order. The sums follow the PTX's order exactly and are written with fmaf /
// __fadd_rn and friends so that NVRTC cannot contract or reorder them: the two agree bit
// for bit. The work is laid out more plainly here: one thread per output, every block
// computes the chunk's D2 and D1 itself (no slices swapped between ranks) and keeps its
// own copy of b2 and of its optimizer state (updated by itself), and phase 2 reads X from
// global memory.

#include "recipe.cuh"  // activate, activate_grad, optimizer_update: the sequences of fused.ptx and step.ptx

// p's optimizer step with its state at the same index in M and V (a null buffer: no state).
__device__ __forceinline__ float step_param(float* P, float* M, float* V, size_t i, float p, float sum, float scale,
                                            unsigned kind, float4 h, float mu, float beta1, float beta2, float eps,
                                            float alpha, float wd)
{
    float m = M ? M[i] : 0.0f, v = V ? V[i] : 0.0f;
    optimizer_update(p, m, v, __fmul_rn(sum, scale), kind, h, mu, beta1, beta2, eps, alpha, wd);
    P[i] = p;
    if (M) M[i] = m;
    if (V) V[i] = v;
    return p;
}

// griddepcontrol and the grid barrier's memory orders have no CUDA C spelling in NVRTC
// without extra headers: inline PTX, as in fused.cu.
__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Every block of the grid counts itself in to the 64-bit count (a multiple of the grid
// size between barriers) and waits until it reaches the next multiple.
__device__ void grid_barrier(unsigned long long* sync) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
        unsigned long long old;
        asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;" : "=l"(old) : "l"(sync) : "memory");
        const unsigned long long target = old - old % gridDim.x + gridDim.x;
        while (ld_acquire(sync) < target) __nanosleep(32);
        asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
    __syncthreads();
}

__device__ __forceinline__ void cluster_sync() {
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
}

extern "C" __global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(256)
fused_step(const float* X, const float* T, float* P, float* M, float* V, float* A, float* Z, float* Y,
           float* Yp, unsigned long long* sync, const float* hyp, unsigned B, unsigned I, unsigned H, unsigned O,
           unsigned steps, unsigned loss, float scale, unsigned optim, float momentum, float beta1, float beta2,
           float eps, float alpha, float weight_decay, unsigned act)
{
    __shared__ __align__(16) float pool[6400];  // phase 1: xs [64][kc]; phase 2: d2c, d1c, ac
    __shared__ float ws[1600];                  // W1 tile [16][kc]
    __shared__ float part[1024];                // partial sums [64][16]
    __shared__ float w2s[512];                  // W2[o][h0 + u] as [O][16]
    __shared__ float b2s[32];
    __shared__ float aown[128];                 // A of this rank's 8 samples [8][16]
    float* xs = pool;
    float* d2c = pool;                          // D2 chunk [64][O]
    float* d1c = pool + 2048;                   // D1 chunk [64][16]
    float* ac = pool + 3072;                    // A chunk [64][16]
    float* yc = pool + 4096;                    // softmax: Y chunk [64][O]
    __shared__ float m2s[32], v2s[32];          // b2's optimizer state

    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned tid = threadIdx.x, rank = __clusterRelativeBlockRank();
    const unsigned G = gridDim.x / 8, tiles = (H + 15) / 16, TP = (tiles + 7) / 8 * 8;
    const unsigned kc = ((I + 7) / 8 + 3) / 4 * 4;
    const unsigned k_lo = min(rank * kc, I), k_hi = min(k_lo + kc, I);
    // The tensors inside P; the state buffers the optimizer keeps (null: none).
    float* const W1 = P;
    float* const b1 = W1 + (size_t)H * I;
    float* const W2 = b1 + H;
    float* const b2 = W2 + (size_t)O * H;
    const size_t b2i = b2 - P;  // b2's index in P, M, V
    if (!optim_keeps_m(optim)) M = nullptr;
    if (!optim_keeps_v(optim)) V = nullptr;
    if (tid < O) {
        b2s[tid] = b2[tid];
        m2s[tid] = M ? M[b2i + tid] : 0.0f;
        v2s[tid] = V ? V[b2i + tid] : 0.0f;
    }
    const size_t ypb = (size_t)B * O * TP;  // floats of one Yp buffer

    for (unsigned step = 0; step < steps; ++step, X += (size_t)B * I, T += (size_t)B * O, Y += (size_t)B * O) {
        float* const Ypk = Yp + (step & 1) * ypb;  // this step's partials (buffer step % 2)
        const float4 hs = reinterpret_cast<const float4*>(hyp)[step];  // {lr, step_size, bc2_sqrt, decay}

        // ---- Phase 1 ----
        for (unsigned tile = blockIdx.x / 8; tile < tiles; tile += G) {
            const unsigned h0 = tile * 16;
            for (unsigned e = tid; e < 16 * kc; e += 256) {
                const unsigned r = e / kc, k = k_lo + e % kc;
                ws[e] = (h0 + r < H && k < k_hi) ? W1[(size_t)(h0 + r) * I + k] : 0.0f;
            }
            for (unsigned e = tid; e < 16 * O; e += 256) {
                const unsigned o = e / 16, h = h0 + e % 16;
                w2s[e] = h < H ? W2[(size_t)o * H + h] : 0.0f;
            }
            for (unsigned c0 = 0; c0 < B; c0 += 64) {
                for (unsigned e = tid; e < 64 * kc; e += 256) {
                    const unsigned r = e / kc, k = k_lo + e % kc;
                    xs[e] = (c0 + r < B && k < k_hi) ? X[(size_t)(c0 + r) * I + k] : 0.0f;
                }
                __syncthreads();
                for (unsigned e = tid; e < 1024; e += 256) {
                    const unsigned s = e / 16, u = e % 16;
                    float acc = 0.0f;
                    for (unsigned k = 0; k < kc; ++k) acc = fmaf(xs[s * kc + k], ws[u * kc + k], acc);
                    part[e] = acc;
                }
                cluster_sync();
                if (tid < 128) {
                    const unsigned idx = 128 * rank + tid, h = h0 + tid % 16, s = c0 + 8 * rank + tid / 16;
                    float z = *static_cast<float*>(__cluster_map_shared_rank(&part[idx], 0));
                    for (unsigned q = 1; q < 8; ++q)
                        z = __fadd_rn(z, *static_cast<float*>(__cluster_map_shared_rank(&part[idx], q)));
                    const bool ok = h < H && s < B;
                    z = __fadd_rn(z, ok ? b1[h] : 0.0f);
                    const float a = ok ? (act == 0u ? fmaxf(z, 0.0f) : activate(z, act)) : 0.0f;
                    if (ok) A[(size_t)s * H + h] = a;
                    if (ok && act != 0u) Z[(size_t)s * H + h] = z;  // for phase 2's derivative
                    aown[tid] = a;
                }
                __syncthreads();
                if (tid < 8 * O) {
                    const unsigned sl = tid / O, o = tid % O, s = c0 + 8 * rank + sl;
                    float y = 0.0f;
                    for (unsigned u = 0; u < 16; ++u) y = fmaf(aown[sl * 16 + u], w2s[o * 16 + u], y);
                    if (s < B) Ypk[((size_t)s * O + o) * TP + tile] = y;
                }
                cluster_sync();  // nobody rewrites part, xs, ws or w2s while a peer still reads them
            }
        }

        grid_barrier(sync);

        // ---- Phase 2 ----
        const bool is_b1 = rank == 0 && tid < 16;
        const unsigned ew = (rank - 1) * 256 + tid;
        const bool is_w2 = rank != 0 && ew < 16 * O;
        float nb2 = 0.0f;  // b2's new value (threads tid < O), applied to b2s after the step's last tile
        for (unsigned tile = blockIdx.x / 8; tile < tiles; tile += G) {
            const unsigned h0 = tile * 16;
            for (unsigned e = tid; e < 16 * O; e += 256) {
                const unsigned o = e / 16, h = h0 + e % 16;
                w2s[e] = h < H ? W2[(size_t)o * H + h] : 0.0f;
            }
            cluster_sync();  // every rank has read W2's columns before their owners update them
            float g[7] = {0, 0, 0, 0, 0, 0, 0};  // W1 gradient sums of outputs tid, tid + 256, ...
            float ge = 0.0f, gb2 = 0.0f;
            const bool b2now = tid < O && tile == blockIdx.x / 8;  // b2's gradient: the block's first tile
            for (unsigned c0 = 0; c0 < B; c0 += 64) {
                const unsigned n = min(B - c0, 64u);
                for (unsigned e = tid; e < 64 * O; e += 256) {
                    const unsigned s = e / O, o = e % O;
                    float d = 0.0f;
                    if (s < n) {
                        const float* yp = Ypk + ((size_t)(c0 + s) * O + o) * TP;
                        float y = yp[0];
                        for (unsigned q = 1; q < tiles; ++q) y = __fadd_rn(y, yp[q]);
                        y = __fadd_rn(y, b2s[o]);
                        d = __fsub_rn(y, T[(size_t)(c0 + s) * O + o]);
                        if (tile == 0 && rank == 0) Y[(size_t)(c0 + s) * O + o] = y;
                        yc[e] = y;
                    }
                    d2c[e] = d;
                }
                if (loss == 1u) {
                    // Softmax cross-entropy, the sequence of fused.cu's fused_output: the max of
                    // the row, e = 2^((y - m) * log2(e) as a float) (exp2f is ex2.approx.f32
                    // with ptxlab's NVRTC options), summed from +0 in output order; d = e / sum - t.
                    __syncthreads();
                    for (unsigned e = tid; e < 64 * O; e += 256) {
                        const unsigned s = e / O, o = e % O;
                        if (s >= n) continue;
                        const float* y = yc + s * O;
                        float m = y[0];
                        for (unsigned q = 1; q < O; ++q) m = fmaxf(m, y[q]);
                        float sum = 0.0f;
                        for (unsigned q = 0; q < O; ++q)
                            sum = __fadd_rn(sum, exp2f(__fmul_rn(__fsub_rn(y[q], m), 1.44269502162933349609375f)));
                        const float eo = exp2f(__fmul_rn(__fsub_rn(y[o], m), 1.44269502162933349609375f));
                        d2c[e] = __fsub_rn(__fdiv_rn(eo, sum), T[(size_t)(c0 + s) * O + o]);
                    }
                }
                for (unsigned e = tid; e < 1024; e += 256) {
                    const unsigned s = e / 16, h = h0 + e % 16;
                    ac[e] = (s < n && h < H) ? A[(size_t)(c0 + s) * H + h] : 0.0f;
                }
                __syncthreads();
                for (unsigned e = tid; e < 1024; e += 256) {
                    const unsigned s = e / 16, u = e % 16;
                    float z = 0.0f;
                    if (act != 0u || ac[e] > 0.0f)
                        for (unsigned o = 0; o < O; ++o) z = fmaf(d2c[s * O + o], w2s[o * 16 + u], z);
                    if (act != 0u) {  // times f', from A, or (GELU) from Z
                        const unsigned h = h0 + u;
                        const float zp = (s < n && h < H) ? Z[(size_t)(c0 + s) * H + h] : 0.0f;
                        z = __fmul_rn(z, activate_grad(zp, ac[e], act));
                    }
                    d1c[e] = z;
                }
                __syncthreads();
                for (unsigned i = 0, e = tid; i < 7 && e < 16 * kc; ++i, e += 256) {
                    const unsigned u = e / kc, k = k_lo + e % kc;
                    if (k >= k_hi) continue;
                    for (unsigned s = 0; s < n; ++s) g[i] = fmaf(d1c[s * 16 + u], X[(size_t)(c0 + s) * I + k], g[i]);
                }
                for (unsigned s = 0; s < n; ++s) {
                    if (is_b1) ge = __fadd_rn(ge, d1c[s * 16 + tid]);
                    else if (is_w2) ge = fmaf(d2c[s * O + ew / 16], ac[s * 16 + ew % 16], ge);
                    if (b2now) gb2 = __fadd_rn(gb2, d2c[s * O + tid]);
                }
                __syncthreads();
            }
            // The update: g = sum * scale, then the optimizer, each parameter by one thread.
            for (unsigned i = 0, e = tid; i < 7 && e < 16 * kc; ++i, e += 256) {
                const unsigned h = h0 + e / kc, k = k_lo + e % kc;
                if (h >= H || k >= k_hi) continue;
                const size_t pi = (size_t)h * I + k;
                step_param(P, M, V, pi, W1[pi], g[i], scale, optim, hs, momentum, beta1, beta2, eps, alpha,
                           weight_decay);
            }
            size_t pi = (size_t)-1;
            if (is_b1 && h0 + tid < H) pi = (b1 - P) + h0 + tid;
            else if (is_w2 && h0 + ew % 16 < H) pi = (W2 - P) + (size_t)(ew / 16) * H + h0 + ew % 16;
            if (pi != (size_t)-1)
                step_param(P, M, V, pi, P[pi], ge, scale, optim, hs, momentum, beta1, beta2, eps, alpha, weight_decay);
            if (b2now) {
                // This block's copies of b2 and its state; tile 0's cluster also writes memory.
                float p = b2s[tid], m = m2s[tid], v = v2s[tid];
                optimizer_update(p, m, v, __fmul_rn(gb2, scale), optim, hs, momentum, beta1, beta2, eps, alpha,
                                 weight_decay);
                nb2 = p;
                m2s[tid] = m;
                v2s[tid] = v;
                if (tile == 0 && rank == 0) {
                    b2[tid] = p;
                    if (M) M[b2i + tid] = m;
                    if (V) V[b2i + tid] = v;
                }
            }
        }
        __syncthreads();
        if (tid < O && blockIdx.x / 8 < tiles) b2s[tid] = nb2;
        cluster_sync();  // this step's updates of W1, b1, W2 are visible before the next phase 1
    }
}
