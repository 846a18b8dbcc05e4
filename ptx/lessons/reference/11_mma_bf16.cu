// Twin of 11_mma_bf16.ptx in plain CUDA C, no tensor core: each lane of warp w computes 4 of the
// 128 elements of tile w. bf16(x) is cvt.rn.bf16 done with bits (add 0x7fff plus the lowest kept
// bit, then clear the 16 dropped bits: nearest, ties to even; the inputs are finite). A product of
// two bf16 values is exact in float, so the only roundings are the 16 additions, done here as
// fmas in k order onto C.
__device__ float bf16(float x)
{
    const unsigned u = __float_as_uint(x);
    return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

extern "C" __global__ void mma_bf16(float* D, const float* A, const float* B, const float* C, unsigned tiles)
{
    unsigned gid = blockIdx.x * 128 + threadIdx.x, w = gid >> 5, lane = gid & 31;
    if (w >= tiles) return;
    const float* a = A + (size_t)w * 256;
    const float* b = B + (size_t)w * 128;
    // Each lane computes 4 of the 128 elements of the 16 x 8 tile: lane, lane + 32, lane + 64, lane + 96.
    for (unsigned e = 0; e < 4; ++e) {
        unsigned el = lane + 32 * e, row = el / 8, col = el % 8;
        float acc = C[(size_t)w * 128 + el];
        for (unsigned k = 0; k < 16; ++k) acc = __fmaf_rn(bf16(a[row * 16 + k]), bf16(b[k * 8 + col]), acc);
        D[(size_t)w * 128 + el] = acc;
    }
}
