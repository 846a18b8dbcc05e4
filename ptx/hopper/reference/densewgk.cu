// Twin of densewgk.ptx in plain CUDA C, no tensor core, no cluster features: block (x, y) of the
// same launch (rank r = x % ranks of cluster x / ranks, 160 threads) computes the rows that rank
// r joins, [r 64/R, (r+1) 64/R) of the 64 x 128 tile, each element one thread's loop. For each
// rank q = 0 .. R-1 in order: the partial P_q = fma.rn of the tf32-truncated products over rank
// q's k range [32 q per, min(32 (q per + per), K)) in k order onto +0 (per = ceil(nk / R),
// nk = ceil(K / 32); an empty range leaves +0); S = P_0, then S = add.rn(S, P_q) for q >= 1;
// then add.rn of the bias and max with +0. tf32(x) keeps the sign, the exponent and the upper 10
// mantissa bits (the tensor core's reading of a raw FP32 .tf32 element); a product of two tf32
// values is exact in FP32. The tensor maps are passed (128 bytes, 64-byte aligned: NVRTC has no
// cuda.h) but not used.
struct alignas(64) TensorMap { unsigned long long bits[16]; };

__device__ float tf32_trunc(float x) { return __uint_as_float(__float_as_uint(x) & 0xffffe000u); }

extern "C" __global__ void dense_wg_k(float* C, const float* A, const float* B, const float* bias,
                                      const TensorMap tmA, const TensorMap tmB, unsigned M, unsigned N,
                                      unsigned K, unsigned ranks, unsigned flags)
{
    const unsigned R = ranks, rank = blockIdx.x % R, n0 = blockIdx.x / R * 128, m0 = blockIdx.y * 64;
    const unsigned rows = 64 / R, nk = (K + 31) / 32, per = (nk + R - 1) / R;
    for (unsigned e = threadIdx.x; e < rows * 128; e += blockDim.x) {
        const unsigned m = m0 + rank * rows + e / 128, n = n0 + e % 128;
        if (m >= M || n >= N) continue;
        const float* a = A + (size_t)m * K;
        const float* b = B + (size_t)n * K;
        float s = 0.0f;
        for (unsigned q = 0; q < R; ++q) {
            const unsigned lo = min(32 * q * per, K), hi = min(32 * (q * per + per), K);
            float p = 0.0f;
            for (unsigned k = lo; k < hi; ++k) p = __fmaf_rn(tf32_trunc(a[k]), tf32_trunc(b[k]), p);
            s = q == 0 ? p : __fadd_rn(s, p);
        }
        float v = (flags & 2u) ? __fadd_rn(s, bias[n]) : s;
        if (flags & 1u) v = fmaxf(v, 0.0f);
        C[(size_t)m * N + n] = v;
    }
}
