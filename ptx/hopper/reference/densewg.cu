// Twin of densewg.ptx in CUDA C on mma.sync: the same launch; block (x, y) computes the same
// 128 x 256 tile of C as 8 x 32 tiles of 16 x 8, its warps taking tiles w, w + 12, ... Each tile
// is one chain of mma.sync.m16n8k8 tf32 steps onto +0 over k = 0, 8, ..., 32 nk - 8 (nk =
// ceil(K / 32): every k tile's four steps, k past K read as +0, the kernel's zero fill); then
// add.rn of the bias and max with +0. The operands are the raw FP32 bits with the low 13
// cleared (tf32 truncation: what the tensor core reads of a raw FP32 .tf32 element). One
// mma.sync k8 step gives the bits of one wgmma k8 step (densewg.ptx's header), so the twin
// equals the kernel bit for bit.
#include "wg.cuh"

extern "C" __global__ void dense_wg(float* C, const float* A, const float* B, const float* bias,
                                    const TensorMap tmA, const TensorMap tmB, unsigned M, unsigned N, unsigned K,
                                    unsigned flags)
{
    const unsigned m0 = blockIdx.y * 128, n0 = blockIdx.x * 256, nk = (K + 31) / 32;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    auto a_at = [&](unsigned m, unsigned k) { return m < M && k < K ? tf32_bits(A[(size_t)m * K + k]) : 0u; };
    auto b_at = [&](unsigned n, unsigned k) { return n < N && k < K ? tf32_bits(B[(size_t)n * K + k]) : 0u; };
    for (unsigned t = warp; t < 8 * 32; t += blockDim.x / 32) {  // a whole warp a tile, as mma.sync needs
        const unsigned r0 = m0 + 16 * (t / 32) + g, r1 = r0 + 8, nb = n0 + 8 * (t % 32);
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (unsigned k = q; k < 32 * nk; k += 8)
            mma_tf32(s, a_at(r0, k), a_at(r1, k), a_at(r0, k + 4), a_at(r1, k + 4), b_at(nb + g, k), b_at(nb + g, k + 4));
        store_tile(C, bias, s, r0, nb + 2 * q, M, N, flags);
    }
}
