// CUDA C twin of ptx/densestep.ptx, compiled at run time by NVRTC.
//
// dense_program: a list of phases in one persistent launch (see densestep.ptx's header for the
// record, the launch shape, the stages and the summation order): op 0 a GEMM with dense_mm's
// semantics, its 64 x 64 tiles handed to groups of ks ranks of a cluster that split K and meet
// in distributed shared memory in rank order; op 1 the output delta (Y - T, or fused_output's
// softmax sequence, recipe.cuh softmax_delta); a grid barrier after a phase whose record asks
// for one. The sums follow the PTX's order exactly and are written with fmaf / __fadd_rn /
// __fmul_rn so that NVRTC cannot contract or reorder them: the two agree bit for bit. One
// stage buffer here; the PTX double-buffers. Global loads of what a phase reads go through
// L2 (__ldcg), as the PTX's ld.global.cg: an earlier phase of the launch may have written it.
#include "recipe.cuh"  // softmax_delta: fused_output's sequence

// The phase record, 128 bytes (host/kernels/densestep.hpp DensePhase, the PTX's offsets).
struct DensePhase {
    unsigned op, M, N, K, a_sm, a_sk, b_sn, b_sk, relu;
    float scale;
    unsigned ksplit, rot, barrier, loss;
    unsigned long long C, db, A, Am, Bo, bias;
    unsigned long long reserved[3];
};

// Inline PTX, as in step.cu: an acquire load of the barrier count.
__device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

// Every block of the grid counts itself in to the 64-bit count (a multiple of the grid
// size between barriers) and waits until it reaches the next multiple (step.cu's barrier).
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

// One GEMM phase: dense_mm's product over the phase's tiles, round jt of this cluster giving
// group g the tile jt * gpc + g.
__device__ void gemm_phase(const DensePhase& f, float* stage, unsigned R, unsigned rank, unsigned cl, unsigned G) {
    float* C = reinterpret_cast<float*>(f.C);
    float* db = reinterpret_cast<float*>(f.db);
    const float* A = reinterpret_cast<const float*>(f.A);
    const float* Am = reinterpret_cast<const float*>(f.Am);
    const float* Bo = reinterpret_cast<const float*>(f.Bo);
    const float* bias = reinterpret_cast<const float*>(f.bias);
    float* As = stage;
    float* Bs = stage + 16 * 68;
    const unsigned tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
    const unsigned M = f.M, N = f.N, K = f.K, ks = f.ksplit;
    const unsigned Np = N + (db ? 1u : 0u), tiles_n = (Np + 63) / 64, ntiles = ((M + 63) / 64) * tiles_n;
    const unsigned gpc = R / ks, g = rank / ks, kr = rank % ks;
    const unsigned ktn = (K + 15) / 16, tpr = (ktn + ks - 1) / ks;
    for (unsigned jt = (cl + G - f.rot % G) % G; jt * gpc < ntiles; jt += G) {
        const unsigned tile = jt * gpc + g;
        const bool has = tile < ntiles;
        const unsigned kt0 = has ? kr * tpr : 0u, kt1 = has ? min(kr * tpr + tpr, ktn) : 0u;
        const unsigned m0 = (tile / tiles_n) * 64, n0 = (tile % tiles_n) * 64;
        float acc[4][4];
        for (unsigned i = 0; i < 4; ++i)
            for (unsigned j = 0; j < 4; ++j) acc[i][j] = 0.0f;
        for (unsigned kt = kt0; kt < kt1; ++kt) {
            const unsigned k0 = kt * 16;
            for (unsigned e = tid; e < 64 * 16; e += 256) {
                const unsigned ml = e % 64, kl = e / 64, m = m0 + ml, n = n0 + ml, k = k0 + kl;
                float a = 0.0f, b = 0.0f;
                if (m < M && k < K) {
                    const size_t o = (size_t)m * f.a_sm + (size_t)k * f.a_sk;
                    a = __ldcg(A + o);
                    if (Am && !(__ldcg(Am + o) > 0.0f)) a = 0.0f;
                }
                if (n < N && k < K) b = __ldcg(Bo + (size_t)n * f.b_sn + (size_t)k * f.b_sk);
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
        float* part = stage;  // part[64][64] over the stage buffer
        for (unsigned i = 0; i < 4; ++i)
            for (unsigned j = 0; j < 4; ++j) part[(4 * tm + i) * 64 + 4 * tn + j] = acc[i][j];
        cluster_sync();
        const unsigned rpr = 64 / ks, gr0 = g * ks;
        for (unsigned e = tid; e < rpr * 64; e += 256) {
            const unsigned ml = kr * rpr + e / 64, nl = e % 64;
            float v = *static_cast<float*>(__cluster_map_shared_rank(&part[ml * 64 + nl], gr0));
            for (unsigned q = 1; q < ks; ++q)
                v = __fadd_rn(v, *static_cast<float*>(__cluster_map_shared_rank(&part[ml * 64 + nl], gr0 + q)));
            const unsigned m = m0 + ml, n = n0 + nl;
            if (m >= M || n >= Np) continue;
            v = __fmul_rn(v, f.scale);
            if (n == N) {
                db[m] = v;  // the ones column (n == N only when db is given)
                continue;
            }
            if (bias) v = __fadd_rn(v, __ldcg(bias + n));
            if (f.relu) v = fmaxf(v, 0.0f);
            C[(size_t)m * N + n] = v;
        }
        cluster_sync();  // nobody rewrites the stage buffers while a peer still reads its part[]
    }
}

// The output delta: D = C [M][N] from the logits A and the targets Bo, a thread a sample.
__device__ void delta_phase(const DensePhase& f) {
    float* D = reinterpret_cast<float*>(f.C);
    const float* Y = reinterpret_cast<const float*>(f.A);
    const float* T = reinterpret_cast<const float*>(f.Bo);
    const unsigned N = f.N;
    for (unsigned s = blockIdx.x * 256 + threadIdx.x; s < f.M; s += gridDim.x * 256) {
        const size_t row = (size_t)s * N;
        if (f.loss == 1u) {
            softmax_delta(D + row, Y + row, T + row, N);
        } else {
            for (unsigned o = 0; o < N; ++o) D[row + o] = __fsub_rn(__ldcg(Y + row + o), __ldcg(T + row + o));
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
dense_program(const DensePhase* phases, unsigned nphases, unsigned long long* sync)
{
    __shared__ __align__(16) float stage[4352];  // As[16][68], Bs[16][68] (x2 in the PTX); then part[64][64]
    const unsigned R = __clusterSizeInBlocks(), rank = __clusterRelativeBlockRank();
    const unsigned cl = blockIdx.x / R, G = gridDim.x / R;
    for (unsigned ph = 0; ph < nphases; ++ph) {
        const DensePhase& f = phases[ph];
        if (f.op == 1u) delta_phase(f);
        else gemm_phase(f, stage, R, rank, cl, G);
        if (f.barrier != 0u && ph + 1 < nphases) grid_barrier(sync);
    }
}
