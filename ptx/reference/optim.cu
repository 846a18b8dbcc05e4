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

// SGD: g' = g + wd p; with momentum m = mu m + g' and the direction m (or g' + mu m,
// Nesterov); p -= lr * direction. M is untouched (may be null) when momentum == 0.
extern "C" __global__ void optim_sgd(float* P, const float* G, float* M, const float* hyp, unsigned N,
                                     float momentum, float weight_decay, unsigned nesterov)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float lr = hyp[0];
    float p = P[i], g = G[i];
    if (weight_decay != 0.0f) g = __fmaf_rn(weight_decay, p, g);
    if (momentum != 0.0f) {
        const float m = __fadd_rn(__fmul_rn(momentum, M[i]), g);
        M[i] = m;
        g = nesterov ? __fmaf_rn(momentum, m, g) : m;
    }
    P[i] = __fmaf_rn(-lr, g, p);
}

// Adam (rule 0: g' = g + wd p), AdamW (rule 1: p *= 1 - lr wd, g' = g) and NAdam (rule 2:
// g' as Adam): m = lerp(m, g', 1 - beta1); v = beta2 v + (1 - beta2) g'^2;
// d = sqrt(v) / bc2_sqrt + eps, bc2_sqrt = sqrt(1 - beta2^t); Adam(W):
// p -= step_size * m / d, step_size = lr / (1 - beta1^t); NAdam: p -= cg * g' / d, then
// p -= cm * m / d, with cg = hyp[0] and cm = hyp[1] (recipe.hpp step_hyper).
extern "C" __global__ void optim_adam(float* P, const float* G, float* M, float* V, const float* hyp, unsigned N,
                                      float beta1, float beta2, float eps, float weight_decay, unsigned rule)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float lr = hyp[0], step_size = hyp[1], bc2_sqrt = hyp[2], decay = hyp[3];
    float p = P[i], g = G[i];
    if (rule == 1) p = __fmul_rn(p, decay);
    else if (weight_decay != 0.0f) g = __fmaf_rn(weight_decay, p, g);
    const float m0 = M[i], v0 = V[i];
    const float m = __fmaf_rn(__fsub_rn(1.0f, beta1), __fsub_rn(g, m0), m0);
    const float v = __fmaf_rn(__fsub_rn(1.0f, beta2), __fmul_rn(g, g), __fmul_rn(v0, beta2));
    M[i] = m;
    V[i] = v;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
    if (rule == 2) p = __fmaf_rn(-lr, __fdiv_rn(g, denom), p);
    P[i] = __fmaf_rn(-step_size, __fdiv_rn(m, denom), p);
}

// RMSprop: g' = g + wd p; v = alpha v + (1 - alpha) g'^2; p -= lr g' / (sqrt(v) + eps).
extern "C" __global__ void optim_rmsprop(float* P, const float* G, float* V, const float* hyp, unsigned N,
                                         float alpha, float eps, float weight_decay)
{
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float lr = hyp[0];
    float p = P[i], g = G[i];
    if (weight_decay != 0.0f) g = __fmaf_rn(weight_decay, p, g);
    const float v = __fmaf_rn(__fsub_rn(1.0f, alpha), __fmul_rn(g, g), __fmul_rn(V[i], alpha));
    V[i] = v;
    P[i] = __fmaf_rn(-lr, __fdiv_rn(g, __fadd_rn(__fsqrt_rn(v), eps)), p);
}
