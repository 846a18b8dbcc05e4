// CUDA C twin of ptx/tc.ptx, compiled at run time by NVRTC: a dense layer on the tensor cores,
// its forward pass (tc_forward) and its two backward products (tc_grad_input, tc_grad_weights,
// and tc_grad_weights_wide: the same sums as tc_grad_weights for small batches and wide layers).
//
// tc_forward: a dense layer's forward pass, W[H][I] in nn.Linear's [out][in] layout:
//   A[s][h] = act(b[h] + sum_{k < I} X[s][k] W[h][k]),  act 0 none, 1 ReLU (max(z, 0))
// The PTX's launch (512 threads a block, a block a 32 x 32 tile of A); here warp w = block *
// warps + tid/32, then w + blocks * warps, ... takes the 16-sample x 8-unit tiles
// (w / ceil(H/8), w % ceil(H/8)) of A, with the same instructions in the same order. Four
// chains, as the PTX's four k groups: chain j over the 32-column chunks j, j + 4, j + 8, ...,
// for each k0 = 0, 8, 16, 24 into its chunk (< I) the same fragments (g = lane/4, q = lane%4:
// a0 = X[s0+g][k0+q], a1 = X[s0+g+8][k0+q], a2 = X[s0+g][k0+q+4], a3 = X[s0+g+8][k0+q+4],
// b0 = W[h0+g][k0+q], b1 = W[h0+g][k0+q+4], +0 outside X and W), rounded by cvt.rna.tf32.f32
// and fed to one mma.sync.m16n8k8 onto the chain's accumulators (from +0), both through inline
// asm; then c = (c_0 + c_1) + (c_2 + c_3) by __fadd_rn, __fadd_rn(c, b[h]) and fmaxf(z, 0)
// for act 1.
//
// Why the two agree bit for bit: the tensor core's order and rounding of the 8 products and c
// inside one mma are not specified, but they are the hardware's, the same for both sets; the
// inputs of every mma (the tf32 fragments and c) are the same bits, the mma chain runs over k
// in the same order, and the epilogue's add.rn and max are IEEE operations that NVRTC may not
// contract or reorder (__fadd_rn; fmaxf is max.f32).

#include "tc.cuh"  // tf32, mma_tf32, g_at, four_chains, one_chain, db_of, db_one_chain, store_forward: the
                   // PTX's rounding, mma, G, k groups, db and epilogue

extern "C" __global__ void tc_forward(const float* X, const float* W, const float* b, float* A,
                                      unsigned B, unsigned I, unsigned H, unsigned act)
{
    const unsigned nt = (H + 7) / 8, tiles = (B + 15) / 16 * nt, lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    // The warps walk the 16 x 8 tiles with a grid stride (the PTX's blocks take 32 x 32 tiles
    // of A instead: which warp computes a tile changes none of its bits), a whole warp at a
    // time, as mma.sync needs all 32 lanes.
    for (unsigned w = blockIdx.x * wpb + threadIdx.x / 32; w < tiles; w += gridDim.x * wpb) {
        const unsigned s0 = w / nt * 16, h0 = w % nt * 8, g = lane / 4, q = lane % 4;
        const unsigned r0 = s0 + g, r1 = s0 + g + 8, hw = h0 + g;  // the lane's rows of X and W
        // An element of X or W, +0 outside the matrix (the padding of a part-empty tile).
        auto x_at = [&](unsigned s, unsigned k) { return s < B && k < I ? X[(size_t)s * I + k] : 0.0f; };
        auto w_at = [&](unsigned h, unsigned k) { return h < H && k < I ? W[(size_t)h * I + k] : 0.0f; };
        float c[4];
        four_chains(I, 8, c, [&](float* acc, unsigned k0) {
            const unsigned k = k0 + q;
            mma_tf32(acc[0], acc[1], acc[2], acc[3], tf32(x_at(r0, k)), tf32(x_at(r1, k)), tf32(x_at(r0, k + 4)),
                     tf32(x_at(r1, k + 4)), tf32(w_at(hw, k)), tf32(w_at(hw, k + 4)));
        });
        store_forward(A, b, c, r0, h0, q, B, H, act);  // c0, c1: sample s0+g; c2, c3: s0+g+8
    }
}

// tc_grad_input: a dense layer's backward pass to its input (fc_bwd_data's sums on TF32 inputs):
//   dX[s][i] = sum_{o < O} G[s][o] W[o][i],  W [O][I], dY and Y [B][O], dX [B][I]
// The PTX's launch shape (128 threads a block; warp w = 4 * block + tid/32 takes the 16-sample
// x 8-column tile (w / ceil(I/8), w % ceil(I/8)) of dX; a warp past the last tile leaves whole)
// and instructions in the same order: for o0 = 0, 8, ... < O the fragments (g = lane/4,
// q = lane%4: a0 = G[s0+g][o0+q], a1 = G[s0+g+8][o0+q], a2 = G[s0+g][o0+q+4],
// a3 = G[s0+g+8][o0+q+4], b0 = W[o0+q][i0+g], b1 = W[o0+q+4][i0+g], +0 outside), each rounded by
// cvt.rna.tf32.f32, and one mma.sync onto c0..c3 (from +0); dX = c.
extern "C" __global__ void tc_grad_input(float* dX, const float* dY, const float* Y, const float* W,
                                         unsigned B, unsigned I, unsigned O, unsigned act)
{
    const unsigned nt = (I + 7) / 8, tiles = (B + 15) / 16 * nt;
    const unsigned w = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (w >= tiles) return;  // the whole warp: mma.sync needs all 32 lanes
    const unsigned s0 = w / nt * 16, i0 = w % nt * 8, g = lane / 4, q = lane % 4;
    const unsigned r0 = s0 + g, r1 = s0 + g + 8, iw = i0 + g;  // the lane's rows of G, column of W
    auto w_at = [&](unsigned o, unsigned i) { return o < O && i < I ? W[(size_t)o * I + i] : 0.0f; };
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    for (unsigned o0 = 0; o0 < O; o0 += 8) {
        const unsigned o = o0 + q;
        const unsigned a0 = tf32(g_at(dY, Y, r0, o, B, O, act)), a1 = tf32(g_at(dY, Y, r1, o, B, O, act));
        const unsigned a2 = tf32(g_at(dY, Y, r0, o + 4, B, O, act)), a3 = tf32(g_at(dY, Y, r1, o + 4, B, O, act));
        const unsigned b0 = tf32(w_at(o, iw)), b1 = tf32(w_at(o + 4, iw));
        mma_tf32(c0, c1, c2, c3, a0, a1, a2, a3, b0, b1);
    }
    // c0, c1: sample s0+g, columns i0+2q, i0+2q+1; c2, c3: sample s0+g+8, the same columns.
    const float c[4] = {c0, c1, c2, c3};
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned s = e < 2 ? r0 : r1, i = i0 + 2 * q + e % 2;
        if (s < B && i < I) dX[(size_t)s * I + i] = c[e];
    }
}

// tc_grad_weights: a dense layer's weight and bias gradients,
//   dW[o][i] = scale * sum_{s < B} G[s][o] X[s][i],  db[o] = scale * sum_{s < B} G[s][o]
// X [B][I], dY and Y [B][O], dW [O][I], db [O]. The PTX's launch (512 threads a block, a block a
// 32 x 32 tile of dW); here warp w = block * warps + tid/32, then w + blocks * warps, ... takes
// the 16-output x 8-input tiles (w / ceil(I/8), w % ceil(I/8)) of dW, with the PTX's
// instructions in the same order. Four chains, as the PTX's four k groups: chain j over the
// 32-sample chunks j, j + 4, j + 8, ..., for each s0 = 0, 8, 16, 24 into its chunk (< B) the
// fragments (a0 = G[s0+q][o0+g], a1 = G[s0+q][o0+g+8], a2 = G[s0+q+4][o0+g],
// a3 = G[s0+q+4][o0+g+8], b0 = X[s0+q][i0+g], b1 = X[s0+q+4][i0+g], +0 outside), each rounded
// by cvt.rna.tf32.f32, and one mma.sync onto the chain's c0..c3 (from +0); then
// c = (c_0 + c_1) + (c_2 + c_3) and dW = __fmul_rn(c, scale) (add.rn, mul.rn). db: lanes 0..15
// of the warps of tile column 0, lane l output o0 + l: four chains over the same chunks,
// acc_j = +0, __fadd_rn(acc_j, G[s][o]) for their samples in order, then
// db = __fmul_rn((acc_0 + acc_1) + (acc_2 + acc_3), scale) (NVRTC may not contract or reorder
// __fadd_rn and __fmul_rn).
//
// The body below is tc_grad_weights' (Wide false) and tc_grad_weights_wide's (Wide true): the
// same warps, tiles, fragments and stores; only the chains differ.
template <bool Wide>
__device__ __forceinline__ void grad_weights(float* dW, float* db, const float* dY, const float* Y, const float* X,
                                             unsigned B, unsigned I, unsigned O, unsigned act, float scale)
{
    const unsigned nt = (I + 7) / 8, tiles = (O + 15) / 16 * nt, lane = threadIdx.x % 32, wpb = blockDim.x / 32;
    // The warps walk the 16 x 8 tiles with a grid stride (the PTX's blocks take 32 x 32 tiles
    // of dW, or 64 x 64), a whole warp at a time, as mma.sync needs all 32 lanes.
    for (unsigned w = blockIdx.x * wpb + threadIdx.x / 32; w < tiles; w += gridDim.x * wpb) {
        const unsigned n = w % nt, o0 = w / nt * 16, i0 = n * 8, g = lane / 4, q = lane % 4;
        const unsigned u0 = o0 + g, u1 = o0 + g + 8, iw = i0 + g;  // the lane's outputs, column of X
        auto x_at = [&](unsigned s, unsigned i) { return s < B && i < I ? X[(size_t)s * I + i] : 0.0f; };
        auto G = [&](unsigned s, unsigned o) { return g_at(dY, Y, s, o, B, O, act); };
        auto step = [&](float* acc, unsigned s0) {
            const unsigned s = s0 + q;
            mma_tf32(acc[0], acc[1], acc[2], acc[3], tf32(G(s, u0)), tf32(G(s, u1)), tf32(G(s + 4, u0)),
                     tf32(G(s + 4, u1)), tf32(x_at(s, iw)), tf32(x_at(s + 4, iw)));
        };
        float c[4];
        if (Wide) one_chain(B, 8, c, step);
        else four_chains(B, 8, c, step);
        // c0, c1: output o0+g, inputs i0+2q, i0+2q+1; c2, c3: output o0+g+8, the same inputs.
        for (unsigned e = 0; e < 4; ++e) {
            const unsigned o = e < 2 ? u0 : u1, i = i0 + 2 * q + e % 2;
            if (o < O && i < I) dW[(size_t)o * I + i] = __fmul_rn(c[e], scale);
        }
        // db: the warps of tile column 0, lanes 0..15, each one output.
        const unsigned o = o0 + lane;
        if (n != 0 || lane >= 16 || o >= O) continue;
        db[o] = Wide ? db_one_chain(dY, Y, o, B, O, act, scale) : db_of(dY, Y, o, B, O, act, scale);
    }
}

extern "C" __global__ void tc_grad_weights(float* dW, float* db, const float* dY, const float* Y, const float* X,
                                           unsigned B, unsigned I, unsigned O, unsigned act, float scale)
{
    grad_weights<false>(dW, db, dY, Y, X, B, I, O, act, scale);
}

// tc_grad_weights_wide: tc_grad_weights' sums for small batches and wide layers (B <= 128),
//   dW[o][i] = scale * sum_{s < B} G[s][o] X[s][i],  db[o] = scale * sum_{s < B} G[s][o]
// The PTX's launch (256 threads a block, a block the 64-output x 64-input tile n / ceil(I/64),
// n % ceil(I/64) of dW with the whole batch of G, Y and X staged once in shared memory); here
// the warps walk the 16 x 8 tiles as in tc_grad_weights, with its fragments, but each tile ONE
// chain: c0..c3 = +0, then for s0 = 0, 8, 16, ... < B in order one mma.sync onto c (no join);
// dW = __fmul_rn(c, scale). db: the same lanes (the PTX: the blocks of input tile 0), one FP32
// chain acc = +0, __fadd_rn(acc, G[s][o]) for s = 0 .. B-1 in order, db = __fmul_rn(acc, scale).
extern "C" __global__ void tc_grad_weights_wide(float* dW, float* db, const float* dY, const float* Y,
                                                const float* X, unsigned B, unsigned I, unsigned O, unsigned act,
                                                float scale)
{
    grad_weights<true>(dW, db, dY, Y, X, B, I, O, act, scale);
}
