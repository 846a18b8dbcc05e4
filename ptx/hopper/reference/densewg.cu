// Twin of densewg.ptx in plain CUDA C, no tensor core: block (x, y) computes the same 128 x 256
// tile of C with its 384 threads, each element one thread's loop. tf32(x) keeps the sign, the
// exponent and the upper 10 mantissa bits (the tensor core's reading of a raw FP32 .tf32 element:
// the lower 13 bits ignored); a product of two tf32 values is exact in FP32, so the only roundings
// are the fma.rn in k order onto +0, then add.rn of the bias. The tensor maps are passed (their
// 128 bytes, 64-byte aligned: NVRTC has no cuda.h) but not used.
struct alignas(64) TensorMap { unsigned long long bits[16]; };

__device__ float tf32_trunc(float x) { return __uint_as_float(__float_as_uint(x) & 0xffffe000u); }

extern "C" __global__ void dense_wg(float* C, const float* A, const float* B, const float* bias,
                                    const TensorMap tmA, const TensorMap tmB, unsigned M, unsigned N, unsigned K,
                                    unsigned flags)
{
    const unsigned m0 = blockIdx.y * 128, n0 = blockIdx.x * 256;
    for (unsigned e = threadIdx.x; e < 128 * 256; e += blockDim.x) {
        const unsigned m = m0 + e / 256, n = n0 + e % 256;
        if (m >= M || n >= N) continue;
        const float* a = A + (size_t)m * K;
        const float* b = B + (size_t)n * K;
        float s = 0.0f;
        for (unsigned k = 0; k < K; ++k) s = __fmaf_rn(tf32_trunc(a[k]), tf32_trunc(b[k]), s);
        float v = (flags & 2u) ? __fadd_rn(s, bias[n]) : s;
        if (flags & 1u) v = fmaxf(v, 0.0f);
        C[(size_t)m * N + n] = v;
    }
}
