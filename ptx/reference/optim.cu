// CUDA C twin of ptx/optim.ptx, compiled at run time by NVRTC.
//
// PyTorch's optimizer rules (torch.optim.SGD with momentum / Nesterov, Adam, AdamW, NAdam,
// RMSprop; dampening 0, not centered, no amsgrad) on one flat parameter array, one
// thread per element. hyp points at this step's record {lr, step_size, bc2_sqrt, decay}
// (host/reference/recipe.hpp StepHyper).
//
// Every operation is written with an explicit round-to-nearest intrinsic (__fmaf_rn,
// __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn): NVRTC may then neither
// contract a multiply and an add into an fma nor split one, so this file issues the
// same instructions, in the same order, as the hand-written PTX, and verify compares
// the two at 0 ULP. The branches test the same uniform flags as the PTX.
//
// The rules themselves are recipe.cuh's optimizer_update, the one twin of every optimizer rule
// (also of optim.ptx's optimizer_update, which the one-launch steps link): each entry maps its
// flag or rule to the optimizer code (recipe.hpp optim_code; recipe.cuh optim_sgd_code,
// optim_adam_code, optim_rmsprop_code) and runs it on its element. That
// function performs these entries' operations in the PTX's order: SGD g = fma(wd, p, g) unless
// wd = 0, m = add(mul(mu, m), g), the direction m or fma(mu, m, g), p = fma(-lr, g, p); Adam
// p = mul(p, decay) (AdamW) or g = fma(wd, p, g), m = fma(1 - b1, g - m, m),
// v = fma(1 - b2, g g, v b2), d = add(div(sqrt(v), bc2_sqrt), eps), NAdam's
// p = fma(-lr, div(g, d), p), p = fma(-step_size, div(m, d), p); RMSprop
// v = fma(1 - alpha, g g, v alpha), p = fma(-lr, div(g, add(sqrt(v), eps)), p).
#include "recipe.cuh"

// SGD: g' = g + wd p; with momentum m = mu m + g' and the direction m (or g' + mu m,
// Nesterov); p -= lr * direction. M is untouched (may be null) when momentum == 0: code 0.
extern "C" __global__ void optim_sgd(float* P, const float* G, float* M, const float* hyp, unsigned N,
                                     float momentum, float weight_decay, unsigned nesterov)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const unsigned kind = optim_sgd_code(momentum, nesterov);
    const float4 h = make_float4(hyp[0], 0.0f, 0.0f, 0.0f);
    float p = P[i], m = kind ? M[i] : 0.0f, v = 0.0f;
    optimizer_update(p, m, v, G[i], kind, h, momentum, 0.0f, 0.0f, 0.0f, 0.0f, weight_decay);
    if (kind) M[i] = m;
    P[i] = p;
}

// Adam (rule 0: g' = g + wd p), AdamW (rule 1: p *= 1 - lr wd, g' = g) and NAdam (rule 2:
// g' as Adam): m = lerp(m, g', 1 - beta1); v = beta2 v + (1 - beta2) g'^2;
// d = sqrt(v) / bc2_sqrt + eps, bc2_sqrt = sqrt(1 - beta2^t); Adam(W):
// p -= step_size * m / d, step_size = lr / (1 - beta1^t); NAdam: p -= cg * g' / d, then
// p -= cm * m / d, with cg = hyp[0] and cm = hyp[1] (recipe.hpp step_hyper). Any other rule
// runs as Adam (as the PTX).
extern "C" __global__ void optim_adam(float* P, const float* G, float* M, float* V, const float* hyp, unsigned N,
                                      float beta1, float beta2, float eps, float weight_decay, unsigned rule)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const unsigned kind = optim_adam_code(rule);
    const float4 h = make_float4(hyp[0], hyp[1], hyp[2], hyp[3]);
    float p = P[i], m = M[i], v = V[i];
    optimizer_update(p, m, v, G[i], kind, h, 0.0f, beta1, beta2, eps, 0.0f, weight_decay);
    M[i] = m;
    V[i] = v;
    P[i] = p;
}

// RMSprop: g' = g + wd p; v = alpha v + (1 - alpha) g'^2; p -= lr g' / (sqrt(v) + eps): code 5.
extern "C" __global__ void optim_rmsprop(float* P, const float* G, float* V, const float* hyp, unsigned N,
                                         float alpha, float eps, float weight_decay)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float4 h = make_float4(hyp[0], 0.0f, 0.0f, 0.0f);
    float p = P[i], m = 0.0f, v = V[i];
    optimizer_update(p, m, v, G[i], optim_rmsprop_code(), h, 0.0f, 0.0f, 0.0f, eps, alpha, weight_decay);
    V[i] = v;
    P[i] = p;
}
