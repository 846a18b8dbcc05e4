// Twin of transpose.ptx in plain CUDA C, no shared memory: block b owns the same 32 x 32 tile of
// in (tile row b / ceil(C / 32), tile column b % ceil(C / 32)); each element one copy, edges masked.
extern "C" __global__ void transpose32(float* out, const float* in, unsigned R, unsigned C)
{
    const unsigned tiles = (C + 31) / 32, r0 = blockIdx.x / tiles * 32, c0 = blockIdx.x % tiles * 32;
    for (unsigned e = threadIdx.x; e < 32 * 32; e += blockDim.x) {
        const unsigned r = r0 + e / 32, c = c0 + e % 32;
        if (r < R && c < C) out[(size_t)c * R + r] = in[(size_t)r * C + c];
    }
}
