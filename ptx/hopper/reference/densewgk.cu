// Twin of densewgk.ptx in CUDA C on mma.sync: the same launch (rank r = x % ranks of cluster
// x / ranks, 160 threads), where rank 0's warps 0-3 compute the whole 64 x 128 tile and the other
// blocks return. Warp w takes rows 16 w .. 16 w + 15 and walks the 16 column groups of 8; for each
// rank q = 0 .. R-1 in order, the partial P_q is a chain of mma.sync.m16n8k8 tf32 steps onto +0
// over rank q's k tiles [q per, min(q per + per, nk)) (per = ceil(nk / R), nk = ceil(K / 32)),
// four k8 steps a tile, k past K read as +0 (the kernel's zero fill); S = P_0, then
// S = add.rn(S, P_q) for q >= 1; then add.rn of the bias, max with +0 and the mask (+0 where
// !(Y > 0)), each as the flags ask. The operands are the raw
// FP32 bits with the low 13 cleared (tf32 truncation: what the tensor core reads of a raw FP32
// .tf32 element). One mma.sync k8 step gives the bits of one wgmma k8 step (densewgk.ptx's
// header), so the twin equals the kernel bit for bit.
#include "wg.cuh"

extern "C" __global__ void dense_wg_k(float* C, const float* A, const float* B, const float* bias,
                                      const float* Y, const TensorMap tmA, const TensorMap tmB, unsigned M, unsigned N,
                                      unsigned K, unsigned ranks, unsigned flags)
{
    // Programmatic dependent launch, as in the PTX (NVRTC has no CUDA C spelling of it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned R = ranks, rank = blockIdx.x % R, n0 = blockIdx.x / R * 128, m0 = blockIdx.y * 64;
    const unsigned nk = (K + 31) / 32, per = (nk + R - 1) / R;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    if (rank != 0 || warp >= 4) {
        asm volatile("griddepcontrol.launch_dependents;");
        return;  // a whole warp on, as mma.sync needs all 32 lanes
    }
    auto a_at = [&](unsigned m, unsigned k) { return m < M && k < K ? tf32_bits(A[(size_t)m * K + k]) : 0u; };
    auto b_at = [&](unsigned n, unsigned k) { return n < N && k < K ? tf32_bits(B[(size_t)n * K + k]) : 0u; };
    const unsigned r0 = m0 + 16 * warp + g, r1 = r0 + 8;
    for (unsigned nt = 0; nt < 16; ++nt) {
        if (nt == 15) asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may be scheduled
        const unsigned nb = n0 + 8 * nt;
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (unsigned rq = 0; rq < R; ++rq) {
            const unsigned t0 = min(rq * per, nk), t1 = min(rq * per + per, nk);
            float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned k = 32 * t0 + q; k < 32 * t1; k += 8)
                mma_tf32(p, a_at(r0, k), a_at(r1, k), a_at(r0, k + 4), a_at(r1, k + 4), b_at(nb + g, k), b_at(nb + g, k + 4));
            for (unsigned e = 0; e < 4; ++e) s[e] = rq == 0 ? p[e] : __fadd_rn(s[e], p[e]);
        }
        store_tile(C, bias, s, r0, nb + 2 * q, M, N, flags, Y);
    }
}
