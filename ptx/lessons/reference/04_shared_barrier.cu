// Twin of 04_shared_barrier.ptx: __syncthreads() is bar.sync 0.
extern "C" __global__ void reverse256(float* y, const float* x)
{
    __shared__ float tile[256];
    unsigned t = threadIdx.x, g = blockIdx.x * 256 + t;
    tile[t] = x[g];
    __syncthreads();
    y[g] = tile[255 - t];
}
