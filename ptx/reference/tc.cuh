// Shared by the CUDA C twins of the tensor-core kernels, which include it (NVRTC gets each twin's
// directory as an include path): tf32 and mma_tf32 (cvt.rna.tf32.f32 and the m16n8k8 TF32
// mma.sync through inline asm: tc.cu, tcstep.cu, fc3step.cu); sum4 and column_sum, the four-chain
// sums of tcstep.cu and fc3step.cu; and for tc.ptx and tcbf16.ptx (tc.cu,
// tcbf16.cu) G of the backward products, the four k groups' chains and their join, db's four FP32
// chains, tc_grad_weights_wide's single chains (of mma and of db's adds), and tc_forward's
// epilogue. PTX has no #include, so each .ptx file spells these out; this file is their one twin.
#pragma once

// cvt.rna.tf32.f32: nearest, ties away from zero, the 13 low bits cleared; a tf32 in a .b32.
__device__ __forceinline__ unsigned tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c = A B + c for one m16n8k8 tile, tf32 fragments a0..a3, b0, b1.
__device__ __forceinline__ void mma_tf32(float& c0, float& c1, float& c2, float& c3, unsigned a0, unsigned a1,
                                         unsigned a2, unsigned a3, unsigned b0, unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The same on an accumulator array c[0..3].
__device__ __forceinline__ void mma_tf32(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1)
{
    mma_tf32(c[0], c[1], c[2], c[3], a0, a1, a2, a3, b0, b1);
}

// G[s][o] of the backward kernels: dY masked by ReLU with act 1 (+0 where Y > 0 fails, a NaN Y
// too), dY with act 0; +0 outside [B][O]. The PTX's selp(dY, +0, Y > 0) gives the same bits.
__device__ __forceinline__ float g_at(const float* dY, const float* Y, unsigned s, unsigned o, unsigned B,
                                      unsigned O, unsigned act)
{
    if (s >= B || o >= O) return 0.0f;
    const size_t e = (size_t)s * O + o;
    return act == 1 && !(Y[e] > 0.0f) ? 0.0f : dY[e];
}

// The four k groups' chains added as the PTX's REDUCE does: (c_0 + c_1) + (c_2 + c_3).
__device__ __forceinline__ float sum4(float c0, float c1, float c2, float c3)
{
    return __fadd_rn(__fadd_rn(c0, c1), __fadd_rn(c2, c3));
}

// A sum over s = 0 .. n-1 in four chains side by side, as tcstep.ptx takes W2's and the biases'
// gradients and fc3step.ptx its small sums (colsum16): chain r = step(...step(+0, r), r + 4 ...)
// over s = r, r + 4, ... < n, then (c0 + c1) + (c2 + c3), each add.rn.
template <class Step> __device__ __forceinline__ float sum4(unsigned n, Step step)
{
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (unsigned s = 0; s < n; ++s) c[s % 4] = step(c[s % 4], s);
    return __fadd_rn(__fadd_rn(c[0], c[1]), __fadd_rn(c[2], c[3]));
}

// sum4 of the add.rn steps over p[s * ld].
__device__ __forceinline__ float column_sum(const float* p, unsigned ld, unsigned n)
{
    return sum4(n, [p, ld](float c, unsigned s) { return __fadd_rn(c, p[s * ld]); });
}

// db[o] = scale sum_s G[s][o] as tc_grad_weights sums it: chain j = +0, then __fadd_rn of
// G[s][o] for the samples of the 32-sample chunks j, j + 4, ... in order; the four chains
// joined by sum4, then __fmul_rn by scale.
__device__ __forceinline__ float db_of(const float* dY, const float* Y, unsigned o, unsigned B, unsigned O,
                                       unsigned act, float scale)
{
    float acc[4];
    for (unsigned j = 0; j < 4; ++j) {
        acc[j] = 0.0f;
        for (unsigned ch = j; ch * 32 < B; ch += 4)
            for (unsigned s = ch * 32; s < ch * 32 + 32 && s < B; ++s)
                acc[j] = __fadd_rn(acc[j], g_at(dY, Y, s, o, B, O, act));
    }
    return __fmul_rn(sum4(acc[0], acc[1], acc[2], acc[3]), scale);
}

// db[o] = scale sum_s G[s][o] as tc_grad_weights_wide sums it: one chain, acc = +0, then
// __fadd_rn(acc, G[s][o]) for s = 0 .. B-1 in order; then __fmul_rn by scale.
__device__ __forceinline__ float db_one_chain(const float* dY, const float* Y, unsigned o, unsigned B, unsigned O,
                                              unsigned act, float scale)
{
    float acc = 0.0f;
    for (unsigned s = 0; s < B; ++s) acc = __fadd_rn(acc, g_at(dY, Y, s, o, B, O, act));
    return __fmul_rn(acc, scale);
}

// One tile's sums in the four k groups' chains: chain j = +0, then step(c_j, k0) for the k
// tiles k0 = 32 ch, 32 ch + kstep, ... (< K) of the 32-wide chunks ch = j, j + 4, ... in
// order (step issues one mma onto c_j[0..3]); c[e] = sum4 of the chains' e-th accumulators.
template <class Step>
__device__ __forceinline__ void four_chains(unsigned K, unsigned kstep, float c[4], Step step)
{
    float cj[4][4] = {};
    for (unsigned j = 0; j < 4; ++j)
        for (unsigned ch = j; ch * 32 < K; ch += 4)
            for (unsigned k0 = ch * 32; k0 < ch * 32 + 32 && k0 < K; k0 += kstep) step(cj[j], k0);
    for (unsigned e = 0; e < 4; ++e) c[e] = sum4(cj[0][e], cj[1][e], cj[2][e], cj[3][e]);
}

// The same in one chain (tc_grad_weights_wide): c[0..3] = +0, then step(c, k0) for the k tiles
// k0 = 0, kstep, 2 kstep, ... (< K) in order.
template <class Step> __device__ __forceinline__ void one_chain(unsigned K, unsigned kstep, float c[4], Step step)
{
    for (unsigned e = 0; e < 4; ++e) c[e] = 0.0f;
    for (unsigned k0 = 0; k0 < K; k0 += kstep) step(c, k0);
}

// tc_forward's epilogue for a lane's c0..c3 (c0, c1: sample r0, units h0 + 2q, + 1; c2, c3:
// sample r0 + 8): A = act(__fadd_rn(c, b[h])), fmaxf(z, 0) for act 1 (max.f32), inside [B][H].
__device__ __forceinline__ void store_forward(float* A, const float* b, const float c[4], unsigned r0,
                                              unsigned h0, unsigned q, unsigned B, unsigned H, unsigned act)
{
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned s = e < 2 ? r0 : r0 + 8, h = h0 + 2 * q + e % 2;
        if (s >= B || h >= H) continue;
        float z = __fadd_rn(c[e], b[h]);
        if (act == 1) z = fmaxf(z, 0.0f);
        A[(size_t)s * H + h] = z;
    }
}
