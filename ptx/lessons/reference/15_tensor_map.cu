// Twin of 15_tensor_map.ptx: the same transpose, reading X directly; the tensor map is passed
// (CUtensorMap's 128 bytes, 64-byte aligned: NVRTC has no cuda.h) but not used.
struct alignas(64) TensorMap { unsigned long long bits[16]; };

extern "C" __global__ void tma_transpose(float* Y, const float* X, const TensorMap tmap, unsigned rows, unsigned cols)
{
    const unsigned r = blockIdx.y * 32 + threadIdx.x;
    if (r >= rows) return;
    for (unsigned j = threadIdx.y; j < 32; j += 8) {
        const unsigned c = blockIdx.x * 32 + j;
        if (c < cols) Y[(size_t)c * rows + r] = X[(size_t)r * cols + c];
    }
}
