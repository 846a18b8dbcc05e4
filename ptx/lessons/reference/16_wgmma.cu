// Twin of 16_wgmma.ptx in plain CUDA C, no tensor core: the 128 threads of block b compute the
// 512 elements of tile b, 4 each. bf16(x) is cvt.rn.bf16 done with bits (lesson 11's); a product
// of two bf16 values is exact in float, so the only roundings are the 16 fmas in k order onto C.
__device__ float bf16(float x)
{
    const unsigned u = __float_as_uint(x);
    return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

extern "C" __global__ void wgmma_bf16(float* D, const float* A, const float* B, const float* C)
{
    const float* a = A + (size_t)blockIdx.x * 1024;
    const float* b = B + (size_t)blockIdx.x * 128;
    for (unsigned e = threadIdx.x; e < 512; e += 128) {
        const unsigned row = e / 8, col = e % 8;
        float acc = C[(size_t)blockIdx.x * 512 + e];
        for (unsigned k = 0; k < 16; ++k) acc = __fmaf_rn(bf16(a[row * 16 + k]), bf16(b[k * 8 + col]), acc);
        D[(size_t)blockIdx.x * 512 + e] = acc;
    }
}
