// Shared by the CUDA C twins of forward.ptx, grad.ptx, fused.ptx, optim.ptx, step.ptx,
// tcstep.ptx and fc3step.ptx, which include it (NVRTC gets each twin's directory as an include
// path): the hidden activation (gauss_pdf, gauss_cdf, activate, activate_grad), the softmax
// cross-entropy delta (softmax_delta for a row, softmax_d for one output), which state an
// optimizer keeps (optim_keeps_m, optim_keeps_v) and one parameter's optimizer step
// (optimizer_update: every optimizer rule's one twin).
// PTX has no #include, so each .ptx file spells its functions out (step.ptx and tcstep.ptx
// link optim.ptx's optimizer_update and optimizer_state); this file is their one twin.
#pragma once

// ---- The hidden activation of code `act` (host/reference/recipe.hpp: 0 relu, 1 leaky-relu, 2 tanh,
// 3 sigmoid, 4 gelu; any other code is taken as 0), in the PTX's instruction sequences. The
// rounding intrinsics keep NVRTC from contracting or reordering; exp2f is what NVRTC turns
// into exactly `ex2.approx.f32` (not .ftz, no range fix-ups) with ptxlab's NVRTC options
// (no -ftz, no -use_fast_math), checked by reading its PTX; fabsf is abs.f32.

// phi(z) = e^(-z^2/2) / sqrt(2 pi).
__device__ inline float gauss_pdf(float z)
{
    const float e = exp2f(__fmul_rn(__fmul_rn(z, z), -0.72134751081466674805f));  // 0fBF38AA3B
    return __fmul_rn(e, 0.39894229173660278320f);                                 // 0f3ECC422A
}

// Phi(z) by Abramowitz & Stegun 26.2.17 from z and phi(z) (as gauss_cdf in the PTX).
__device__ inline float gauss_cdf(float z, float phi)
{
    const float t = __fdiv_rn(1.0f, __fmaf_rn(fabsf(z), 0.23164190351963043213f, 1.0f));  // 0f3E6D3389
    float p = 1.33027446269989013672f;                  // b5 0f3FAA466F
    p = __fmaf_rn(p, t, -1.82125592231750488281f);      // b4 0fBFE91EEA
    p = __fmaf_rn(p, t, 1.78147792816162109375f);       // b3 0f3FE40778
    p = __fmaf_rn(p, t, -0.35656377673149108887f);      // b2 0fBEB68F87
    p = __fmaf_rn(p, t, 0.31938153505325317383f);       // b1 0f3EA385FA
    p = __fmul_rn(p, t);
    const float q = __fmul_rn(phi, p);                  // 1 - Phi(|z|)
    const float one_minus = __fsub_rn(1.0f, q);
    return z > 0.0f ? one_minus : q;
}

// a = f(z).
__device__ inline float activate(float z, unsigned act)
{
    if (act == 1u) {  // leaky-relu
        const float q = __fmul_rn(z, 0.00999999977648258209f);  // 0f3C23D70A
        return z > 0.0f ? z : q;
    }
    if (act == 2u) {  // tanh
        const float e = exp2f(__fmul_rn(z, 2.88539004325866699219f));  // 0f4038AA3B
        return __fsub_rn(1.0f, __fdiv_rn(2.0f, __fadd_rn(e, 1.0f)));
    }
    if (act == 3u) {  // sigmoid
        const float e = exp2f(__fmul_rn(z, -1.44269502162933349609f));  // 0fBFB8AA3B
        return __fdiv_rn(1.0f, __fadd_rn(e, 1.0f));
    }
    if (act == 4u) {  // gelu
        const float phi = gauss_pdf(z);
        return __fmul_rn(z, gauss_cdf(z, phi));
    }
    return fmaxf(z, 0.0f);  // relu
}

// g = f'(z) from the pre-activation z (gelu) or the activation a = f(z) (the others).
__device__ inline float activate_grad(float z, float a, unsigned act)
{
    const bool pos = a > 0.0f;
    if (act == 1u) return pos ? 1.0f : 0.00999999977648258209f;      // leaky-relu
    if (act == 2u) return __fmaf_rn(-a, a, 1.0f);                    // tanh: 1 - a^2
    if (act == 3u) return __fmul_rn(a, __fsub_rn(1.0f, a));          // sigmoid: a (1 - a)
    if (act == 4u) {                                                 // gelu: Phi(z) + z phi(z)
        const float phi = gauss_pdf(z);
        return __fmaf_rn(z, phi, gauss_cdf(z, phi));
    }
    return pos ? 1.0f : 0.0f;                                        // relu
}


// d[o] = softmax(y)[o] - t[o]   (loss code 1), the recipe's sequence as in grad.ptx: the max
// in o order, z = (y - m) * log2(e) rounded to float, e = 2^z, the sum from +0 in o order,
// d = e / sum - t. The exponentials wait in d[] between the passes, as in the PTX.
// exp2f is what NVRTC turns into exactly `ex2.approx.f32` (not .ftz; no range fix-ups) with
// ptxlab's NVRTC options (no -ftz, no -use_fast_math); checked by reading its PTX.
__device__ inline void softmax_delta(float* d, const float* y, const float* t, unsigned n)
{
    if (n == 0) return;
    float m = y[0];
    for (unsigned o = 1; o < n; ++o) m = fmaxf(m, y[o]);
    float sum = 0.0f;
    for (unsigned o = 0; o < n; ++o) {
        const float e = exp2f(__fmul_rn(__fsub_rn(y[o], m), 1.44269502162933349609375f));  // 0x3FB8AA3B
        d[o] = e;
        sum = __fadd_rn(sum, e);
    }
    for (unsigned o = 0; o < n; ++o) d[o] = __fsub_rn(__fdiv_rn(d[o], sum), t[o]);
}

// The same delta for one output `own` (its target t) of the row y[0 .. n-1], n >= 1, as the
// one-launch steps take it (tcstep.ptx, fc3step.ptx): m = the max.f32 chain from y[0], e(v) =
// 2^(mul.rn(sub.rn(v, m), log2 e)), the add.rn chain of e over the row from +0, then
// sub.rn(div.rn(e(own), sum), t). exp2f: ex2.approx.f32, as above.
__device__ __forceinline__ float softmax_d(const float* y, unsigned n, float own, float t)
{
    float m = y[0];
    for (unsigned o = 1; o < n; ++o) m = fmaxf(m, y[o]);
    auto e = [m](float v) { return exp2f(__fmul_rn(__fsub_rn(v, m), 1.44269502162933349609375f)); };  // 0x3FB8AA3B
    float sum = 0.0f;
    for (unsigned o = 0; o < n; ++o) sum = __fadd_rn(sum, e(y[o]));
    return __fsub_rn(__fdiv_rn(e(own), sum), t);
}

// Which state buffers optimizer `kind` keeps, as optim.ptx's optimizer_state (step.ptx's and
// tcstep.ptx's useM and useV; recipe.hpp optim_uses_m, optim_uses_v): m for 1 momentum,
// 2 nesterov, 3 adam, 4 adamw, 6 nadam; v for 3 adam, 4 adamw, 5 rmsprop, 6 nadam; none for a
// code it does not know.
__device__ __forceinline__ bool optim_keeps_m(unsigned kind) { return (kind >= 1 && kind <= 4) || kind == 6; }
__device__ __forceinline__ bool optim_keeps_v(unsigned kind) { return kind >= 3 && kind <= 6; }

// The optimizer code of optim.cu's separate-launch entries (optim.ptx): optim_sgd's momentum and
// nesterov flag (momentum 0: plain SGD), optim_adam's rule (any other rule runs as Adam, as the
// PTX), optim_rmsprop's one rule. A new rule of an entry: its code here.
__device__ __forceinline__ unsigned optim_sgd_code(float momentum, unsigned nesterov)
{
    return momentum != 0.0f ? (nesterov ? 2u : 1u) : 0u;  // momentum, nesterov; sgd
}
__device__ __forceinline__ unsigned optim_adam_code(unsigned rule)
{
    return rule == 1 ? 4u : rule == 2 ? 6u : 3u;  // adamw, nadam; adam
}
__device__ __forceinline__ unsigned optim_rmsprop_code() { return 5u; }

// One parameter's optimizer step, PyTorch's rules, the instruction sequence of optim.ptx's
// entries and of its optimizer_update (which step.ptx and tcstep.ptx link); optim.cu's entries
// run it too. kind: recipe.hpp's optim_code (0 sgd, 1 momentum,
// 2 nesterov, 3 adam, 4 adamw, 5 rmsprop, 6 nadam); h: this step's {lr, step_size, bc2_sqrt, decay}
// (NAdam: h.x and h.y its coefficients of g and m, optim_adam's rule 2).
__device__ __forceinline__ void optimizer_update(float& p, float& m, float& v, float g, unsigned kind, float4 h,
                                                 float mu, float beta1, float beta2, float eps, float alpha,
                                                 float wd)
{
    if (kind == 4) p = __fmul_rn(p, h.w);
    else if (wd != 0.0f) g = __fmaf_rn(wd, p, g);
    if (kind <= 2) {
        if (kind >= 1) {
            m = __fadd_rn(__fmul_rn(mu, m), g);
            g = kind == 2 ? __fmaf_rn(mu, m, g) : m;
        }
        p = __fmaf_rn(-h.x, g, p);
    } else if (kind != 5) {  // adam, adamw, nadam
        m = __fmaf_rn(__fsub_rn(1.0f, beta1), __fsub_rn(g, m), m);
        v = __fmaf_rn(__fsub_rn(1.0f, beta2), __fmul_rn(g, g), __fmul_rn(v, beta2));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), h.z), eps);
        if (kind == 6) p = __fmaf_rn(-h.x, __fdiv_rn(g, denom), p);  // nadam: the gradient's term first
        p = __fmaf_rn(-h.y, __fdiv_rn(m, denom), p);
    } else {
        v = __fmaf_rn(__fsub_rn(1.0f, alpha), __fmul_rn(g, g), __fmul_rn(v, alpha));
        p = __fmaf_rn(-h.x, __fdiv_rn(g, __fadd_rn(__fsqrt_rn(v), eps)), p);
    }
}
