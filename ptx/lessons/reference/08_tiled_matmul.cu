// Twin of 08_tiled_matmul.ptx: the same tiles, the same fma order (k ascending, the
// zero padding included), __fmaf_rn so that nothing is reordered or split.
extern "C" __global__ void matmul16(float* C, const float* A, const float* B, unsigned M, unsigned N, unsigned K)
{
    __shared__ float As[16][16], Bs[16][16];
    unsigned tx = threadIdx.x, ty = threadIdx.y;
    unsigned row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
    float acc = 0.0f;
    for (unsigned k0 = 0; k0 < K; k0 += 16) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (col < N && k0 + ty < K) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (unsigned kk = 0; kk < 16; ++kk) acc = __fmaf_rn(As[ty][kk], Bs[kk][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
