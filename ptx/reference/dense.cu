// CUDA C twin of ptx/dense.ptx, compiled at run time by NVRTC.
//
// dense_mm: C[m][n] = epilogue(sum_k A(m, k) Bop(n, k)) with strided operands, a K split over
// the blocks of a thread-block cluster (R = 1, 2, 4 or 8, set at launch) whose partial tiles
// meet in distributed shared memory in rank order (see dense.ptx's header for the launch
// shape, the options and the summation order). The sums follow the PTX's order exactly and
// are written with fmaf / __fadd_rn / __fmul_rn so that NVRTC cannot contract or reorder
// them: the two agree bit for bit. One stage buffer here; the PTX double-buffers.

extern "C" __global__ void __launch_bounds__(256)
dense_mm(float* C, float* db, const float* A, const float* Am, const float* Bo, const float* bias, unsigned M,
         unsigned N, unsigned K, unsigned a_sm, unsigned a_sk, unsigned b_sn, unsigned b_sk, unsigned relu,
         float scale)
{
    __shared__ __align__(16) float stage[4352];  // As[16][68], Bs[16][68] (x2 in the PTX); then part[64][64]
    float* As = stage;
    float* Bs = stage + 16 * 68;
    // Programmatic dependent launch, as in the PTX (NVRTC has no CUDA C spelling of it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
    const unsigned R = __clusterSizeInBlocks(), rank = __clusterRelativeBlockRank(), cl = blockIdx.x / R;
    const unsigned Np = N + (db ? 1u : 0u), tiles_n = (Np + 63) / 64;
    const unsigned m0 = (cl / tiles_n) * 64, n0 = (cl % tiles_n) * 64;
    const unsigned ktn = (K + 15) / 16, tpr = (ktn + R - 1) / R;
    const unsigned kt0 = rank * tpr, kt1 = min(kt0 + tpr, ktn);

    float acc[4][4];
    for (unsigned i = 0; i < 4; ++i)
        for (unsigned j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    for (unsigned kt = kt0; kt < kt1; ++kt) {
        const unsigned k0 = kt * 16;
        for (unsigned e = tid; e < 64 * 16; e += 256) {
            const unsigned ml = e % 64, kl = e / 64, m = m0 + ml, n = n0 + ml, k = k0 + kl;
            float a = 0.0f, b = 0.0f;
            if (m < M && k < K) {
                const size_t o = (size_t)m * a_sm + (size_t)k * a_sk;
                a = A[o];
                if (Am && !(Am[o] > 0.0f)) a = 0.0f;
            }
            if (n < N && k < K) b = Bo[(size_t)n * b_sn + (size_t)k * b_sk];
            if (db && n == N && k < K) b = 1.0f;
            As[kl * 68 + ml] = a;
            Bs[kl * 68 + ml] = b;
        }
        __syncthreads();
        for (unsigned kk = 0; kk < 16; ++kk)
            for (unsigned i = 0; i < 4; ++i)
                for (unsigned j = 0; j < 4; ++j)
                    acc[i][j] = fmaf(As[kk * 68 + 4 * tm + i], Bs[kk * 68 + 4 * tn + j], acc[i][j]);
        __syncthreads();
    }
    asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may be scheduled
    float* part = stage;  // part[64][64] over the stage buffer
    for (unsigned i = 0; i < 4; ++i)
        for (unsigned j = 0; j < 4; ++j) part[(4 * tm + i) * 64 + 4 * tn + j] = acc[i][j];
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    const unsigned rpr = 64 / R;
    for (unsigned e = tid; e < rpr * 64; e += 256) {
        const unsigned ml = rank * rpr + e / 64, nl = e % 64;
        float v = *static_cast<float*>(__cluster_map_shared_rank(&part[ml * 64 + nl], 0));
        for (unsigned q = 1; q < R; ++q)
            v = __fadd_rn(v, *static_cast<float*>(__cluster_map_shared_rank(&part[ml * 64 + nl], q)));
        const unsigned m = m0 + ml, n = n0 + nl;
        if (m >= M || n >= Np) continue;
        v = __fmul_rn(v, scale);
        if (n == N) {
            db[m] = v;  // the ones column (n == N only when db is given)
            continue;
        }
        if (bias) v = __fadd_rn(v, bias[n]);
        if (relu) v = fmaxf(v, 0.0f);
        C[(size_t)m * N + n] = v;
    }
    __cluster_barrier_arrive();  // no block leaves while another still reads its part[]
    __cluster_barrier_wait();
}
