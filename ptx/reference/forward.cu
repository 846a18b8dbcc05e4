// CUDA C twin of ptx/forward.ptx, compiled at run time by NVRTC.
//
// Plain loops that state the math; the hand-written PTX must produce the same
// bits. NVRTC contracts `acc += w * a` into fma.rn.f32, so the PTX uses
// fma.rn.f32 in the same order: start from the bias, add inputs 0..n-1.
//
// Layout: row-major W[out][in]; activations [batch][width]; one thread per sample.

#include "recipe.cuh"  // gauss_pdf, gauss_cdf, activate, activate_grad, softmax_delta: the PTX's sequences

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
