// CUDA C twin of ptx/outer.ptx, compiled at run time by NVRTC.
//
// Per-sample outer products (the fast set's per-sample weight gradients):
//   G[b][r][c] = D[b][r] * V[b][c]   for b < B, r < R, c < C
// One thread per quad of 4 neighbouring columns of one row of G (64-bit quad
// index); float4 loads and stores when C % 4 == 0. Each product is rounded once
// (__fmul_rn), as in the PTX.
extern "C" __global__ void outer(float* G, const float* D, const float* V, unsigned B, unsigned R, unsigned C)
{
    const size_t qc = (C + 3) / 4;
    const size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (size_t)B * R * qc) return;
    const size_t row = q / qc, c0 = (q - row * qc) * 4, b = row / R;
    const float d = D[row];
    const float* v = V + b * C + c0;
    float* g = G + row * C + c0;
    if (C % 4 == 0) {
        const float4 x = *reinterpret_cast<const float4*>(v);
        *reinterpret_cast<float4*>(g) =
            make_float4(__fmul_rn(d, x.x), __fmul_rn(d, x.y), __fmul_rn(d, x.z), __fmul_rn(d, x.w));
    } else {
        for (size_t c = c0; c < c0 + 4 && c < C; ++c) G[row * C + c] = __fmul_rn(d, V[b * C + c]);
    }
}
