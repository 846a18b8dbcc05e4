// CUDA C twin of ptx/gather.ptx, compiled at run time by NVRTC.
//
// Row gather, used to shuffle the training set on the GPU once per epoch:
//   dst[r][c] = src[idx[r]][c]   for r < rows, c < cols
// One thread per destination element; the element index is 64-bit.
extern "C" __global__ void gather(float* dst, const float* src, const unsigned* idx,
                                  unsigned rows, unsigned cols)
{
    size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (size_t)rows * cols) return;
    size_t r = e / cols;
    size_t c = e - r * cols;
    dst[e] = src[(size_t)idx[r] * cols + c];
}
