// Twin of 01_predicates.ptx: leaky ReLU. The if becomes a predicate; __fmul_rn keeps the
// multiply a single rounded mul.rn.f32.
extern "C" __global__ void leaky_relu(float* y, const float* x, unsigned n, float alpha)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    if (!(v > 0.0f)) v = __fmul_rn(v, alpha);
    y[i] = v;
}
