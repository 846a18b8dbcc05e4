// CUDA C twin of ptx/tcbf16.ptx, compiled at run time by NVRTC: the three products of a dense
// layer on the tensor cores with BF16 inputs (tc_forward_bf16, tc_grad_input_bf16,
// tc_grad_weights_bf16), the sums, signatures and launches of ptx/reference/tc.cu.
//
// Every operand pair (x_k, x_k+1) is packed by cvt.rn.bf16x2.f32 (the higher k in the upper
// half) and fed to mma.sync.m16n8k16 (BF16 in, FP32 accumulation), both through inline asm,
// with the fragments of the PTX header (g = lane/4, q = lane%4):
//   a0 = {A[g][2q], A[g][2q+1]}, a1 = {A[g+8][2q], ..}, a2 = {A[g][2q+8], ..},
//   a3 = {A[g+8][2q+8], ..}, b0 = {B[2q][g], B[2q+1][g]}, b1 = {B[2q+8][g], B[2q+9][g]},
// +0 outside the matrices. The warps walk the 16 x 8 tiles with a grid stride (which warp
// computes a tile changes none of its bits). tc_forward_bf16 and tc_grad_weights_bf16 sum in
// four chains, chain j over the 32-wide chunks j, j + 4, ... (k tiles 32 ch and 32 ch + 16,
// those past the end skipped), joined as (c_0 + c_1) + (c_2 + c_3) by __fadd_rn, as the PTX's
// four k groups and REDUCE do; tc_grad_input_bf16 sums in one chain over o0 = 0, 16, ...
// Why the two agree bit for bit: the same cvt and mma instructions on the same bits in the same
// order, and IEEE epilogues (__fadd_rn, __fmul_rn, fmaxf) that NVRTC may not contract.

#include "tc.cuh"  // g_at, four_chains, db_of, store_forward: the PTX's G, k groups, db and epilogue

// cvt.rn.bf16x2.f32: lo to the lower half, hi to the upper, each rounded to nearest even.
__device__ __forceinline__ unsigned bf16x2(float lo, float hi)
{
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// c = A B + c for one m16n8k16 tile, bf16x2 fragments a0..a3, b0, b1.
__device__ __forceinline__ void mma_bf16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A[s][h] = act(b[h] + sum_k X[s][k] W[h][k]): A[r][k] = X[s0+r][k0+k], B[k][n] = W[h0+n][k0+k].
extern "C" __global__ void tc_forward_bf16(const float* X, const float* W, const float* b, float* A, unsigned B,
                                           unsigned I, unsigned H, unsigned act)
{
    const unsigned nt = (H + 7) / 8, tiles = (B + 15) / 16 * nt, lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (unsigned w = blockIdx.x * wpb + threadIdx.x / 32; w < tiles; w += gridDim.x * wpb) {
        const unsigned s0 = w / nt * 16, h0 = w % nt * 8, g = lane / 4, q = lane % 4;
        const unsigned r0 = s0 + g, r1 = s0 + g + 8, hw = h0 + g;
        auto x_at = [&](unsigned s, unsigned k) { return s < B && k < I ? X[(size_t)s * I + k] : 0.0f; };
        auto w_at = [&](unsigned h, unsigned k) { return h < H && k < I ? W[(size_t)h * I + k] : 0.0f; };
        float c[4];
        four_chains(I, 16, c, [&](float* acc, unsigned k0) {
            const unsigned k = k0 + 2 * q;
            mma_bf16(acc, bf16x2(x_at(r0, k), x_at(r0, k + 1)), bf16x2(x_at(r1, k), x_at(r1, k + 1)),
                     bf16x2(x_at(r0, k + 8), x_at(r0, k + 9)), bf16x2(x_at(r1, k + 8), x_at(r1, k + 9)),
                     bf16x2(w_at(hw, k), w_at(hw, k + 1)), bf16x2(w_at(hw, k + 8), w_at(hw, k + 9)));
        });
        store_forward(A, b, c, r0, h0, q, B, H, act);  // c0, c1: sample s0+g; c2, c3: s0+g+8
    }
}

// dX[s][i] = sum_o G[s][o] W[o][i]: A[r][k] = G[s0+r][o0+k], B[k][n] = W[o0+k][i0+n]; one chain.
extern "C" __global__ void tc_grad_input_bf16(float* dX, const float* dY, const float* Y, const float* W, unsigned B,
                                              unsigned I, unsigned O, unsigned act)
{
    const unsigned nt = (I + 7) / 8, tiles = (B + 15) / 16 * nt, lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (unsigned w = blockIdx.x * wpb + threadIdx.x / 32; w < tiles; w += gridDim.x * wpb) {
        const unsigned s0 = w / nt * 16, i0 = w % nt * 8, g = lane / 4, q = lane % 4;
        const unsigned r0 = s0 + g, r1 = s0 + g + 8, iw = i0 + g;
        auto G = [&](unsigned s, unsigned o) { return g_at(dY, Y, s, o, B, O, act); };
        auto w_at = [&](unsigned o, unsigned i) { return o < O && i < I ? W[(size_t)o * I + i] : 0.0f; };
        float c[4] = {};
        for (unsigned o0 = 0; o0 < O; o0 += 16) {
            const unsigned o = o0 + 2 * q;
            mma_bf16(c, bf16x2(G(r0, o), G(r0, o + 1)), bf16x2(G(r1, o), G(r1, o + 1)), bf16x2(G(r0, o + 8), G(r0, o + 9)),
                     bf16x2(G(r1, o + 8), G(r1, o + 9)), bf16x2(w_at(o, iw), w_at(o + 1, iw)),
                     bf16x2(w_at(o + 8, iw), w_at(o + 9, iw)));
        }
        for (unsigned e = 0; e < 4; ++e) {
            const unsigned s = e < 2 ? r0 : r1, i = i0 + 2 * q + e % 2;
            if (s < B && i < I) dX[(size_t)s * I + i] = c[e];
        }
    }
}

// dW[o][i] = scale sum_s G[s][o] X[s][i]: A[r][k] = G[s0+k][o0+r], B[k][n] = X[s0+k][i0+n];
// db[o] = scale sum_s G[s][o] in FP32 by lanes 0..15 of the warps of tile column 0, in the same
// four chains (samples of chunks j, j + 4, ... in order).
extern "C" __global__ void tc_grad_weights_bf16(float* dW, float* db, const float* dY, const float* Y,
                                                const float* X, unsigned B, unsigned I, unsigned O, unsigned act,
                                                float scale)
{
    const unsigned nt = (I + 7) / 8, tiles = (O + 15) / 16 * nt, lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    for (unsigned w = blockIdx.x * wpb + threadIdx.x / 32; w < tiles; w += gridDim.x * wpb) {
        const unsigned n = w % nt, o0 = w / nt * 16, i0 = n * 8, g = lane / 4, q = lane % 4;
        const unsigned u0 = o0 + g, u1 = o0 + g + 8, iw = i0 + g;
        auto G = [&](unsigned s, unsigned o) { return g_at(dY, Y, s, o, B, O, act); };
        auto x_at = [&](unsigned s, unsigned i) { return s < B && i < I ? X[(size_t)s * I + i] : 0.0f; };
        float c[4];
        four_chains(B, 16, c, [&](float* acc, unsigned s0) {
            const unsigned s = s0 + 2 * q;
            mma_bf16(acc, bf16x2(G(s, u0), G(s + 1, u0)), bf16x2(G(s, u1), G(s + 1, u1)),
                     bf16x2(G(s + 8, u0), G(s + 9, u0)), bf16x2(G(s + 8, u1), G(s + 9, u1)),
                     bf16x2(x_at(s, iw), x_at(s + 1, iw)), bf16x2(x_at(s + 8, iw), x_at(s + 9, iw)));
        });
        // c0, c1: output o0+g, inputs i0+2q, i0+2q+1; c2, c3: output o0+g+8, the same inputs.
        for (unsigned e = 0; e < 4; ++e) {
            const unsigned o = e < 2 ? u0 : u1, i = i0 + 2 * q + e % 2;
            if (o < O && i < I) dW[(size_t)o * I + i] = __fmul_rn(c[e], scale);
        }
        const unsigned o = o0 + lane;
        if (n != 0 || lane >= 16 || o >= O) continue;
        db[o] = db_of(dY, Y, o, B, O, act, scale);  // tc.cuh: tc_grad_weights' four FP32 chains
    }
}
