// CUDA C twin of ptx/forward.ptx, compiled at run time by NVRTC.
//
// Plain loops that state the math; the hand-written PTX must produce the same
// bits. NVRTC contracts `acc += w * a` into fma.rn.f32, so the PTX uses
// fma.rn.f32 in the same order: start from the bias, add inputs 0..n-1.
//
// Layout: row-major W[out][in]; activations [batch][width]; one thread per sample.

// ---- The hidden activation of code `act` (host/recipe.hpp: 0 relu, 1 leaky-relu, 2 tanh,
// 3 sigmoid, 4 gelu; any other code is taken as 0), in the PTX's instruction sequences. The
// rounding intrinsics keep NVRTC from contracting or reordering; exp2f is what NVRTC turns
// into exactly `ex2.approx.f32` (not .ftz, no range fix-ups) with ptxlab's NVRTC options
// (no -ftz, no -use_fast_math), checked by reading its PTX; fabsf is abs.f32.

// phi(z) = e^(-z^2/2) / sqrt(2 pi).
__device__ static float gauss_pdf(float z)
{
    const float e = exp2f(__fmul_rn(__fmul_rn(z, z), -0.72134751081466674805f));  // 0fBF38AA3B
    return __fmul_rn(e, 0.39894229173660278320f);                                 // 0f3ECC422A
}

// Phi(z) by Abramowitz & Stegun 26.2.17 from z and phi(z) (as gauss_cdf in the PTX).
__device__ static float gauss_cdf(float z, float phi)
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
__device__ static float activate(float z, unsigned act)
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

// One dense layer for one sample: out[r] = f(b[r] + sum_c W[r][c] * in[c]), f the activation
// of code `act` for a hidden layer, the identity for the output layer.
__device__ static void dense(float* out, const float* in, const float* W, const float* b,
                             unsigned rows, unsigned cols, bool hidden, unsigned act)
{
    const bool relu = hidden && act == 0u;
    for (unsigned r = 0; r < rows; ++r) {
        float acc = b[r];
        for (unsigned c = 0; c < cols; ++c)
            acc += W[(size_t)r * cols + c] * in[c];
        if (hidden && act != 0u) acc = activate(acc, act);
        out[r] = (relu && !(acc > 0.0f)) ? 0.0f : acc;
    }
}

// A1 = f(X W1^T + b1), Y = A1 W2^T + b2.
extern "C" __global__ void forward2(const float* X, const float* W1, const float* b1,
                                    const float* W2, const float* b2,
                                    float* A1, float* Y,
                                    unsigned B, unsigned I, unsigned H, unsigned O, unsigned act)
{
    unsigned s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B) return;
    float* a1 = A1 + (size_t)s * H;
    dense(a1, X + (size_t)s * I, W1, b1, H, I, true, act);
    dense(Y + (size_t)s * O, a1, W2, b2, O, H, false, act);
}

// A1 = f(X W1^T + b1), A2 = f(A1 W2^T + b2), Y = A2 W3^T + b3.
extern "C" __global__ void forward3(const float* X, const float* W1, const float* b1,
                                    const float* W2, const float* b2,
                                    const float* W3, const float* b3,
                                    float* A1, float* A2, float* Y,
                                    unsigned B, unsigned I, unsigned H1, unsigned H2, unsigned O,
                                    unsigned act)
{
    unsigned s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B) return;
    float* a1 = A1 + (size_t)s * H1;
    float* a2 = A2 + (size_t)s * H2;
    dense(a1, X + (size_t)s * I, W1, b1, H1, I, true, act);
    dense(a2, a1, W2, b2, H2, H1, true, act);
    dense(Y + (size_t)s * O, a2, W3, b3, O, H2, false, act);
}
