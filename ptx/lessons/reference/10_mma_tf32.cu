// Twin of 10_mma_tf32.ptx in plain CUDA C, no tensor core: each lane of warp w computes 4 of the
// 128 elements of tile w. tf32(x) is cvt.rna.tf32.f32 done with bits (add half of the 13
// dropped bits, then clear them: nearest, ties away from zero). A product of two tf32 values is exact in float, so the
// only roundings are the 8 additions, done here as fmas in k order onto C.
__device__ float tf32(float x)
{
    return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
}

extern "C" __global__ void mma_tf32(float* D, const float* A, const float* B, const float* C, unsigned tiles)
{
    unsigned gid = blockIdx.x * 128 + threadIdx.x, w = gid >> 5, lane = gid & 31;
    if (w >= tiles) return;
    const float* a = A + (size_t)w * 128;
    const float* b = B + (size_t)w * 64;
    // Each lane computes 4 of the 128 elements of the 16 x 8 tile: lane, lane + 32, lane + 64, lane + 96.
    for (unsigned e = 0; e < 4; ++e) {
        unsigned el = lane + 32 * e, row = el / 8, col = el % 8;
        float acc = C[(size_t)w * 128 + el];
        for (unsigned k = 0; k < 8; ++k) acc = __fmaf_rn(tf32(a[row * 8 + k]), tf32(b[k * 8 + col]), acc);
        D[(size_t)w * 128 + el] = acc;
    }
}
