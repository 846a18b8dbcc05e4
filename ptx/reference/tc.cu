// CUDA C twin of ptx/tc.ptx, compiled at run time by NVRTC.
//
// A dense layer's forward pass on the tensor cores, W[H][I] in nn.Linear's [out][in] layout:
//   A[s][h] = act(b[h] + sum_{k < I} X[s][k] W[h][k]),  act 0 none, 1 ReLU (max(z, 0))
// The same launch shape as the PTX (128 threads a block; warp w = 4 * block + tid/32 takes the
// 16-sample x 8-unit tile (w / ceil(H/8), w % ceil(H/8)) of A; a warp past the last tile leaves
// whole) and the same instructions in the same order: for k0 = 0, 8, ... < I the same fragments
// (g = lane/4, q = lane%4: a0 = X[s0+g][k0+q], a1 = X[s0+g+8][k0+q], a2 = X[s0+g][k0+q+4],
// a3 = X[s0+g+8][k0+q+4], b0 = W[h0+g][k0+q], b1 = W[h0+g][k0+q+4], +0 outside X and W),
// rounded by cvt.rna.tf32.f32 and fed to one mma.sync.m16n8k8 onto the accumulators c0..c3
// (from +0), both through inline asm; then __fadd_rn(c, b[h]) and fmaxf(z, 0) for act 1.
//
// Why the two agree bit for bit: the tensor core's order and rounding of the 8 products and c
// inside one mma are not specified, but they are the hardware's, the same for both sets; the
// inputs of every mma (the tf32 fragments and c) are the same bits, the mma chain runs over k
// in the same order, and the epilogue's add.rn and max are IEEE operations that NVRTC may not
// contract or reorder (__fadd_rn; fmaxf is max.f32).

// cvt.rna.tf32.f32: nearest, ties away from zero, the 13 low bits cleared; a tf32 in a .b32.
__device__ __forceinline__ unsigned tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

extern "C" __global__ void tc_forward(const float* X, const float* W, const float* b, float* A,
                                      unsigned B, unsigned I, unsigned H, unsigned act)
{
    const unsigned nt = (H + 7) / 8, tiles = (B + 15) / 16 * nt;
    const unsigned w = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (w >= tiles) return;  // the whole warp: mma.sync needs all 32 lanes
    const unsigned s0 = w / nt * 16, h0 = w % nt * 8, g = lane / 4, q = lane % 4;
    const unsigned r0 = s0 + g, r1 = s0 + g + 8, hw = h0 + g;  // the lane's rows of X and W
    // An element of X or W, +0 outside the matrix (the padding of a part-empty tile).
    auto x_at = [&](unsigned s, unsigned k) { return s < B && k < I ? X[(size_t)s * I + k] : 0.0f; };
    auto w_at = [&](unsigned h, unsigned k) { return h < H && k < I ? W[(size_t)h * I + k] : 0.0f; };
    float c0 = 0.0f, c1 = 0.0f, c2 = 0.0f, c3 = 0.0f;
    for (unsigned k0 = 0; k0 < I; k0 += 8) {
        const unsigned k = k0 + q;
        const unsigned a0 = tf32(x_at(r0, k)), a1 = tf32(x_at(r1, k));
        const unsigned a2 = tf32(x_at(r0, k + 4)), a3 = tf32(x_at(r1, k + 4));
        const unsigned b0 = tf32(w_at(hw, k)), b1 = tf32(w_at(hw, k + 4));
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    // c0, c1: sample s0+g, units h0+2q, h0+2q+1; c2, c3: sample s0+g+8, the same units.
    const float c[4] = {c0, c1, c2, c3};
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned s = e < 2 ? r0 : r1, h = h0 + 2 * q + e % 2;
        if (s >= B || h >= H) continue;
        float z = __fadd_rn(c[e], b[h]);
        if (act == 1) z = fmaxf(z, 0.0f);
        A[(size_t)s * H + h] = z;
    }
}
