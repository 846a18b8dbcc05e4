// Twin of 02_cvt_rounding.ptx: each CUDA intrinsic is one cvt with the mode in its name
// (_rn nearest-even, _rz toward zero, _rd down, _ru up).
extern "C" __global__ void cvt_modes(int* out, const int* x, unsigned n)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = __fmul_rn(__int2float_rn(x[i]), 0.25f);
    out[4 * i + 0] = __float2int_rn(v);
    out[4 * i + 1] = __float2int_rz(v);
    out[4 * i + 2] = __float2int_rd(v);
    out[4 * i + 3] = __float2int_ru(v);
}
