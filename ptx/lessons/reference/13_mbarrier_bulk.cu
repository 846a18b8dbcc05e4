// Twin of 13_mbarrier_bulk.ptx: the same tile, filled with ordinary 16-byte copies (the result
// does not depend on how the tile got there), then the same reversed, scaled writes.
extern "C" __global__ void bulk_reverse1024(float* y, const float* x, float s)
{
    __shared__ __align__(16) float tile[1024];
    unsigned t = threadIdx.x, base = blockIdx.x * 1024;
    reinterpret_cast<float4*>(tile)[t] = reinterpret_cast<const float4*>(x + base)[t];
    __syncthreads();
    for (unsigned j = t; j < 1024; j += 256) y[base + j] = __fmul_rn(tile[1023 - j], s);
}
