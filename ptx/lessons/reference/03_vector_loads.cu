// Twin of 03_vector_loads.ptx: float4 loads and stores become ld/st.global.v4.f32.
extern "C" __global__ void scale4(float4* y, const float4* x, unsigned quads, float s, float t)
{
    unsigned q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= quads) return;
    float4 v = x[q];
    v.x = __fmaf_rn(v.x, s, t);
    v.y = __fmaf_rn(v.y, s, t);
    v.z = __fmaf_rn(v.z, s, t);
    v.w = __fmaf_rn(v.w, s, t);
    y[q] = v;
}
