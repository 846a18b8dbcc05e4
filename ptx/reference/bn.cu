// CUDA C twin of ptx/bn.ptx, compiled at run time by NVRTC.
//
// Batch normalization of X [B][C][HW] (NCHW; an fc's [B][C] is HW = 1) per channel c over its
// n = B * HW values, then the activation; a cluster of 8 blocks of 256 threads a channel (grid
// 8 C). The sums run as the PTX's: thread g = 256 rank + t of the channel adds the values
// k = g, g + 2048, ... (k = b * HW + i) in that order from +0, then each block's tree over its
// 256 partial sums, s[t] += s[t + h] for h = 128, ..., 1, then the 8 blocks' sums in rank order
// (DSMEM), each add rounded. Every operation is a rounding intrinsic, so NVRTC can neither
// contract nor reorder, and the PTX matches it to the bit.
// act: 0 ReLU, 1 leaky-ReLU (0.01), 5 none (host/kernels/bn.hpp); any other code is ReLU.
#define BN_THREADS 256u
#define BN_CLUSTER 8u
#define BN_STEP (BN_THREADS * BN_CLUSTER)

// a = f(z) for the bn kernels' codes, as recipe.hpp's sequences.
__device__ inline float bn_act(float z, unsigned act)
{
    if (act == 5u) return z;
    if (act == 1u) {
        const float q = __fmul_rn(z, 0.00999999977648258209f);  // 0f3C23D70A
        return z > 0.0f ? z : q;
    }
    return fmaxf(z, 0.0f);
}

// dz = f'(z) dy from the output a = f(z).
__device__ inline float bn_act_back(float dy, float a, unsigned act)
{
    if (act == 5u) return dy;
    if (act == 1u) return __fmul_rn(dy, a > 0.0f ? 1.0f : 0.00999999977648258209f);
    return a > 0.0f ? dy : 0.0f;
}

// The address of value k (0 <= k < n) of channel c: sample k / HW, position k % HW.
__device__ inline size_t bn_at(unsigned k, unsigned c, unsigned C, unsigned HW)
{
    return ((size_t)(k / HW) * C + c) * HW + k % HW;
}

__device__ inline void bn_cluster_sync()
{
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
}

// The tree over the block's partial sums, then the cluster's blocks in rank order; every thread
// gets the sum. The cluster barrier after the reads lets the caller reuse s.
__device__ inline float bn_tree(float* s, float v)
{
    const unsigned t = threadIdx.x;
    s[t] = v;
    __syncthreads();
    for (unsigned h = BN_THREADS / 2; h > 0; h /= 2) {
        if (t < h) s[t] = __fadd_rn(s[t], s[t + h]);
        __syncthreads();
    }
    bn_cluster_sync();
    float r = *static_cast<float*>(__cluster_map_shared_rank(&s[0], 0));
    for (unsigned q = 1; q < BN_CLUSTER; ++q) r = __fadd_rn(r, *static_cast<float*>(__cluster_map_shared_rank(&s[0], q)));
    bn_cluster_sync();
    return r;
}

extern "C" __global__ void __cluster_dims__(8, 1, 1) bn_fwd(float* Y, float* stats, float* running, const float* X, const float* gamma,
                                  const float* beta, unsigned B, unsigned C, unsigned HW, unsigned act,
                                  unsigned train)
{
    __shared__ float s[BN_THREADS];
    const unsigned c = blockIdx.x / BN_CLUSTER, t = __clusterRelativeBlockRank() * BN_THREADS + threadIdx.x;
    const unsigned n = B * HW;
    const float eps = 9.99999974737875163555e-06f;  // 0f3727C5AC, 1e-5
    float mean, rstd;
    if (train) {
        const float nf = __uint2float_rn(n);
        float sum = 0.0f;
        for (unsigned k = t; k < n; k += BN_STEP) sum = __fadd_rn(sum, X[bn_at(k, c, C, HW)]);
        mean = __fdiv_rn(bn_tree(s, sum), nf);
        float sq = 0.0f;
        for (unsigned k = t; k < n; k += BN_STEP) {
            const float d = __fsub_rn(X[bn_at(k, c, C, HW)], mean);
            sq = __fmaf_rn(d, d, sq);
        }
        const float m2 = bn_tree(s, sq);
        rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(m2, nf), eps)));
        if (t == 0) {
            stats[c] = mean;
            stats[C + c] = rstd;
            const float varu = __fdiv_rn(m2, __uint2float_rn(n - 1));
            running[c] = __fmaf_rn(0.100000001490116119385f, mean, __fmul_rn(0.899999976158142089844f, running[c]));
            running[C + c] =
                __fmaf_rn(0.100000001490116119385f, varu, __fmul_rn(0.899999976158142089844f, running[C + c]));
        }
    } else {
        mean = running[c];
        rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(running[C + c], eps)));
    }
    const float g = gamma[c], b = beta[c];
    for (unsigned k = t; k < n; k += BN_STEP) {
        const size_t a = bn_at(k, c, C, HW);
        const float xhat = __fmul_rn(__fsub_rn(X[a], mean), rstd);
        Y[a] = bn_act(__fmaf_rn(g, xhat, b), act);
    }
}

extern "C" __global__ void __cluster_dims__(8, 1, 1) bn_bwd(float* dX, float* dgamma, float* dbeta, const float* dY, const float* Y,
                                  const float* X, const float* gamma, const float* stats, unsigned B, unsigned C,
                                  unsigned HW, unsigned act, float scale)
{
    __shared__ float s[BN_THREADS];
    const unsigned c = blockIdx.x / BN_CLUSTER, t = __clusterRelativeBlockRank() * BN_THREADS + threadIdx.x;
    const unsigned n = B * HW;
    const float mean = stats[c], rstd = stats[C + c];
    float s1 = 0.0f, s2 = 0.0f;
    for (unsigned k = t; k < n; k += BN_STEP) {
        const size_t a = bn_at(k, c, C, HW);
        const float dz = bn_act_back(dY[a], Y[a], act);
        const float xhat = __fmul_rn(__fsub_rn(X[a], mean), rstd);
        s1 = __fadd_rn(s1, dz);
        s2 = __fmaf_rn(dz, xhat, s2);
    }
    const float S1 = bn_tree(s, s1);
    const float S2 = bn_tree(s, s2);
    if (t == 0) {
        dbeta[c] = __fmul_rn(S1, scale);
        dgamma[c] = __fmul_rn(S2, scale);
    }
    const float nf = __uint2float_rn(n);
    const float m1 = __fdiv_rn(S1, nf), m2 = __fdiv_rn(S2, nf), k1 = __fmul_rn(gamma[c], rstd);
    for (unsigned k = t; k < n; k += BN_STEP) {
        const size_t a = bn_at(k, c, C, HW);
        const float dz = bn_act_back(dY[a], Y[a], act);
        const float xhat = __fmul_rn(__fsub_rn(X[a], mean), rstd);
        dX[a] = __fmul_rn(k1, __fmaf_rn(-xhat, m2, __fsub_rn(dz, m1)));
    }
}
