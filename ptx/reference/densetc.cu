// CUDA C twin of ptx/densetc.ptx, compiled at run time by NVRTC.
//
// dense_tc: dense_mm's GEMM (C[m][n] = epilogue(sum_k A(m, k) Bop(n, k)), strided operands,
// the mask Am, the ones column db, bias, relu, scale: densetc.ptx's header) on TF32 mma.sync.
// The PTX's launch shape (256 threads a block, clusters of S blocks, cluster cl the 128 x 128
// tile (cl / tiles_n, cl % tiles_n), tiles_n = ceil((N + [db]) / 128), rank r the chunks
// [r cpr, min(r cpr + cpr, nch)) of 16 k, nch = ceil(K/16), cpr = ceil(nch / S); warp w the
// 64 x 32 sub-tile rows 64 (w / 4), columns 32 (w % 4)). Here rank 0 of each cluster does the
// whole tile (the other ranks return): each warp walks its 16 mma tiles of 16 x 8 one after
// the other, reading every fragment from global memory (the PTX stages chunks of 16 k in
// shared memory); for each tile and each rank r in order, c_r = +0, then for
// k0 = 16 kt0, 16 kt0 + 8, ..., 16 kt1 - 8 (the PTX's two k8 steps of each of rank r's chunks,
// the last chunk's padding included) one mma.sync.m16n8k8 on the fragments (g = lane/4,
// q = lane%4: a0 = A(r0, k0+q), a1 = A(r0+8, k0+q), a2 = A(r0, k0+q+4), a3 = A(r0+8, k0+q+4),
// b0 = Bop(n, k0+q), b1 = Bop(n, k0+q+4), r0 = the tile's row + g, n = its column + g; A masked
// and +0 past M or K, Bop +0 past N or K, 1 in the ones column for k < K), each rounded by
// cvt.rna.tf32.f32, through inline asm; the sum is c_0, then __fadd_rn of c_1 .. c_{S-1} in
// rank order (the PTX's join). Then dense_mm's epilogue: v = __fmul_rn(sum, scale); db[m] = v in
// the ones column, else __fadd_rn(v, bias[n]) (with bias) and fmaxf(v, 0) (relu; max.f32).
//
// Why the two agree bit for bit: the inputs of every mma (the tf32 fragments and c) are the
// same bits and each rank's chain runs over the same k in the same order; the tensor core's own
// order and rounding inside one mma are the same hardware's for both; the join's add.rn in rank
// order and the epilogue's mul.rn, add.rn and max are IEEE operations NVRTC may not contract
// or reorder (__fadd_rn, __fmul_rn, fmaxf).

// cvt.rna.tf32.f32: nearest, ties away from zero; a tf32 in a .b32.
__device__ __forceinline__ unsigned tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c = A B + c for one m16n8k8 tile, tf32 fragments a0..a3, b0, b1.
__device__ __forceinline__ void mma_tf32(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The cluster's shape from the special registers (NVRTC's CUDA C has no spelling of them
// without cooperative_groups): %cluster_nctarank, %cluster_ctarank, %clusterid.x.
__device__ __forceinline__ unsigned special(int which)
{
    unsigned r;
    if (which == 0) asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    else if (which == 1) asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    else asm("mov.u32 %0, %%clusterid.x;" : "=r"(r));
    return r;
}

extern "C" __global__ void __launch_bounds__(256)
dense_tc(float* C, float* db, const float* A, const float* Am, const float* Bo, const float* bias, unsigned M,
         unsigned N, unsigned K, unsigned a_sm, unsigned a_sk, unsigned b_sn, unsigned b_sk, unsigned relu,
         float scale)
{
    // Programmatic dependent launch, as in the PTX (NVRTC has no CUDA C spelling of it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned S = special(0), rank = special(1), cl = special(2);
    if (rank != 0) {
        asm volatile("griddepcontrol.launch_dependents;");
        return;  // rank 0 computes the whole tile, the other ranks' chains included
    }
    const unsigned Np = N + (db ? 1u : 0u), tiles_n = (Np + 127) / 128;
    const unsigned m0 = cl / tiles_n * 128, n0 = cl % tiles_n * 128;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const unsigned nch = (K + 15) / 16, cpr = (nch + S - 1) / S;
    // A(m, k) after the mask, +0 outside [M][K]; Bop(n, k), +0 outside [N][K], the ones column 1.
    auto a_at = [&](unsigned m, unsigned k) {
        if (m >= M || k >= K) return 0.0f;
        const size_t o = (size_t)m * a_sm + (size_t)k * a_sk;
        return Am && !(Am[o] > 0.0f) ? 0.0f : A[o];
    };
    auto b_at = [&](unsigned n, unsigned k) {
        if (k >= K) return 0.0f;
        if (n < N) return Bo[(size_t)n * b_sn + (size_t)k * b_sk];
        return db && n == N ? 1.0f : 0.0f;
    };
    float acc[16][4];
    for (unsigned i = 0; i < 4; ++i)
        for (unsigned t = 0; t < 4; ++t) {
            float* sum = acc[4 * i + t];
            const unsigned r0 = m0 + 64 * (warp / 4) + 16 * i + g, r1 = r0 + 8;
            const unsigned nb = n0 + 32 * (warp % 4) + 8 * t + g;
            for (unsigned r = 0; r < S; ++r) {
                // rank r's chain: chunks [kt0, kt1), k tiles 16 kt0 .. 16 kt1 - 8 (none: +0)
                const unsigned kt0 = r * cpr, kt1 = kt0 + cpr < nch ? kt0 + cpr : nch;
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                for (unsigned k0 = 16 * kt0; kt0 < kt1 && k0 < 16 * kt1; k0 += 8) {
                    const unsigned k = k0 + q;
                    mma_tf32(c, tf32(a_at(r0, k)), tf32(a_at(r1, k)), tf32(a_at(r0, k + 4)), tf32(a_at(r1, k + 4)),
                             tf32(b_at(nb, k)), tf32(b_at(nb, k + 4)));
                }
                for (unsigned e = 0; e < 4; ++e) sum[e] = r == 0 ? c[e] : __fadd_rn(sum[e], c[e]);
            }
        }
    asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may be scheduled
    for (unsigned i = 0; i < 4; ++i)
        for (unsigned t = 0; t < 4; ++t)
            for (unsigned e = 0; e < 4; ++e) {
                const unsigned m = m0 + 64 * (warp / 4) + 16 * i + g + 8 * (e / 2);
                const unsigned n = n0 + 32 * (warp % 4) + 8 * t + 2 * q + e % 2;
                if (m >= M || n >= Np) continue;
                float v = __fmul_rn(acc[4 * i + t][e], scale);
                if (n == N) {
                    db[m] = v;  // the ones column (n == N < Np only with db)
                    continue;
                }
                if (bias) v = __fadd_rn(v, bias[n]);
                if (relu) v = fmaxf(v, 0.0f);
                C[(size_t)m * N + n] = v;
            }
}
