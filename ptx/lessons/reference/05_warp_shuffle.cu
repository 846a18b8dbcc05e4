// Twin of 05_warp_shuffle.ptx: __shfl_xor_sync(mask, v, m) is shfl.sync.bfly.b32 with
// clamp 0x1f; each step one __fadd_rn, in the same order.
extern "C" __global__ void row_sum32(float* sums, const float* x, unsigned rows)
{
    unsigned g = blockIdx.x * 256 + threadIdx.x, row = g >> 5, lane = g & 31;
    if (row >= rows) return;
    float v = x[g];
    for (int m = 16; m >= 1; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
    if (lane == 0) sums[row] = v;
}
