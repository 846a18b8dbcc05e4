// CUDA C twin of ptx/act.ptx, compiled at run time by NVRTC.
//
// The hidden activation as an elementwise pass over N floats (recipe.hpp's codes: 0 relu,
// 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu; any other code is taken as 0), in recipe.cuh's
// sequences, the PTX's:
//   act_fwd: A[i] = f(Z[i])
//   act_bwd: G[i] = A[i] > 0 ? dA[i] : +0 (relu); dA[i] * f'(A[i]) (codes 1..3, one mul.rn);
//            dA[i] * f'(Z[i]) (gelu). A is read only for codes other than 4, Z only for 4.
//            G may be dA (the trainer runs it in place): no __restrict__.
// One thread an element, 1-D grid of 256-thread blocks.
#include "recipe.cuh"  // gauss_pdf, gauss_cdf, activate, activate_grad: the PTX's sequences

extern "C" __global__ void act_fwd(float* A, const float* Z, unsigned N, unsigned act)
{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    A[i] = activate(Z[i], act);
}

extern "C" __global__ void act_bwd(float* G, const float* dA, const float* A, const float* Z, unsigned N,
                                   unsigned act)
{
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float d = dA[i];
    if (act == 4u) {  // gelu, from the pre-activation
        G[i] = __fmul_rn(d, activate_grad(Z[i], 0.0f, 4u));
        return;
    }
    const float a = A[i];
    if (act - 1u < 3u) G[i] = __fmul_rn(d, activate_grad(0.0f, a, act));  // leaky-relu, tanh, sigmoid
    else G[i] = a > 0.0f ? d : 0.0f;                                       // relu: the select
}
