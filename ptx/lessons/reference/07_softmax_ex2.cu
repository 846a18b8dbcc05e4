// Twin of 07_softmax_ex2.ptx. exp2f is exactly ex2.approx.f32 and __log2f exactly
// lg2.approx.f32 under NVRTC; every other operation is one rounded intrinsic, in the
// PTX's order (the max with fmaxf, which is max.f32).
extern "C" __global__ void softmax_rows(float* y, float* lse, const float* x, unsigned rows, unsigned cols)
{
    unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + (size_t)(r * cols);
    float* yr = y + (size_t)(r * cols);
    float m = xr[0];
    for (unsigned j = 1; j < cols; ++j) m = fmaxf(m, xr[j]);
    float s = 0.0f;
    for (unsigned j = 0; j < cols; ++j) {
        float e = exp2f(__fmul_rn(__fsub_rn(xr[j], m), 1.44269502162933349609375f));  // 0x3FB8AA3B
        yr[j] = e;
        s = __fadd_rn(s, e);
    }
    for (unsigned j = 0; j < cols; ++j) yr[j] = __fdiv_rn(yr[j], s);
    lse[r] = __fmaf_rn(__log2f(s), 0.693147182464599609375f, m);  // 0x3F317218
}
