// Twin of 06_atomics.ptx: atomicAdd with an unused result compiles to red.global.add.u32.
extern "C" __global__ void histogram256(unsigned* hist, const unsigned* x, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&hist[x[i] & 255u], 1u);
}
