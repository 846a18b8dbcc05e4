// CUDA C twin of ptx/grad.ptx, compiled at run time by NVRTC.
//
// Per-sample gradient with the output delta of the loss code `loss` (recipe.hpp):
// 0 (kLossDiff) d = Y - T, 1 (kLossSoftmax) d = softmax(Y) - T; any other value is
// taken as 0. A forward pass for one sample, then back-propagation, written to
// per-sample buffers (the batch reduction sums them). One thread per sample.
// The per-sample bias gradients are the layer deltas, so they double as the
// scratch that the next layer down reads: no per-thread array is needed. The hidden
// activation has the code `act` (0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu); its
// pre-activations z wait in the same gb rows for the backward pass (GELU's derivative).

#include "recipe.cuh"  // gauss_pdf, gauss_cdf, activate, activate_grad, softmax_delta: the PTX's sequences

// out[r] = f(z[r]), z[r] = b[r] + sum_c W[r][c] * in[c]   (as forward.cu); a hidden layer
// also keeps z[r] in zout[r].
__device__ static void dense(float* out, float* zout, const float* in, const float* W, const float* b,
                             unsigned rows, unsigned cols, bool hidden, unsigned act)
{
    const bool relu = hidden && act == 0u;
    for (unsigned r = 0; r < rows; ++r) {
        float acc = b[r];
        for (unsigned c = 0; c < cols; ++c)
            acc += W[(size_t)r * cols + c] * in[c];
        if (hidden) zout[r] = acc;
        if (hidden && act != 0u) acc = activate(acc, act);
        out[r] = (relu && !(acc > 0.0f)) ? 0.0f : acc;
    }
}

// g[r][c] = d[r] * a[c]   (weight gradient as an outer product)
__device__ static void outer(float* g, const float* d, const float* a, unsigned rows, unsigned cols)
{
    for (unsigned r = 0; r < rows; ++r)
        for (unsigned c = 0; c < cols; ++c)
            g[(size_t)r * cols + c] = d[r] * a[c];
}

// d[o] = y[o] - t[o]   (loss code 0)
__device__ static void residual(float* d, const float* y, const float* t, unsigned n)
{
    for (unsigned o = 0; o < n; ++o) d[o] = __fsub_rn(y[o], t[o]);
}


// d_in[c] = (sum_r W[r][c] * d_out[r]) * f'(z[c]): for ReLU the mask [a[c] > 0], else a
// product with activate_grad of z[c] (left in d_in[c] by dense) and a[c].
__device__ static void back(float* d_in, const float* W, const float* d_out, const float* a,
                            unsigned rows, unsigned cols, unsigned act)
{
    for (unsigned c = 0; c < cols; ++c) {
        float acc = 0.0f;
        for (unsigned r = 0; r < rows; ++r)
            acc += W[(size_t)r * cols + c] * d_out[r];
        if (act != 0u) d_in[c] = __fmul_rn(acc, activate_grad(d_in[c], a[c], act));
        else d_in[c] = (a[c] > 0.0f) ? acc : 0.0f;
    }
}

// d2 = Y - T or softmax(Y) - T; gb2 = d2; gW2 = d2 (x) A1; d1 = (W2^T d2) * f'(Z1); gb1 = d1; gW1 = d1 (x) x
extern "C" __global__ void grad2(const float* X, const float* T,
                                 const float* W1, const float* b1,
                                 const float* W2, const float* b2,
                                 float* A1, float* Y,
                                 float* gW1, float* gb1, float* gW2, float* gb2,
                                 unsigned B, unsigned I, unsigned H, unsigned O, unsigned loss,
                                 unsigned act)
{
    unsigned s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B) return;
    const float* x = X + (size_t)s * I;
    const float* t = T + (size_t)s * O;
    float* a1 = A1 + (size_t)s * H;
    float* y = Y + (size_t)s * O;
    float* d1 = gb1 + (size_t)s * H;
    float* d2 = gb2 + (size_t)s * O;

    dense(a1, d1, x, W1, b1, H, I, true, act);
    dense(y, d2, a1, W2, b2, O, H, false, act);
    if (loss == 1u) softmax_delta(d2, y, t, O);
    else residual(d2, y, t, O);
    outer(gW2 + (size_t)s * O * H, d2, a1, O, H);
    back(d1, W2, d2, a1, O, H, act);
    outer(gW1 + (size_t)s * H * I, d1, x, H, I);
}

// The same for I-H1-H2-O: d3 = Y - T or softmax(Y) - T, d2 = (W3^T d3) * f'(Z2), d1 = (W2^T d2) * f'(Z1).
extern "C" __global__ void grad3(const float* X, const float* T,
                                 const float* W1, const float* b1,
                                 const float* W2, const float* b2,
                                 const float* W3, const float* b3,
                                 float* A1, float* A2, float* Y,
                                 float* gW1, float* gb1, float* gW2, float* gb2,
                                 float* gW3, float* gb3,
                                 unsigned B, unsigned I, unsigned H1, unsigned H2, unsigned O, unsigned loss,
                                 unsigned act)
{
    unsigned s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= B) return;
    const float* x = X + (size_t)s * I;
    const float* t = T + (size_t)s * O;
    float* a1 = A1 + (size_t)s * H1;
    float* a2 = A2 + (size_t)s * H2;
    float* y = Y + (size_t)s * O;
    float* d1 = gb1 + (size_t)s * H1;
    float* d2 = gb2 + (size_t)s * H2;
    float* d3 = gb3 + (size_t)s * O;

    dense(a1, d1, x, W1, b1, H1, I, true, act);
    dense(a2, d2, a1, W2, b2, H2, H1, true, act);
    dense(y, d3, a2, W3, b3, O, H2, false, act);
    if (loss == 1u) softmax_delta(d3, y, t, O);
    else residual(d3, y, t, O);
    outer(gW3 + (size_t)s * O * H2, d3, a2, O, H2);
    back(d2, W3, d3, a2, O, H2, act);
    outer(gW2 + (size_t)s * H2 * H1, d2, a1, H2, H1);
    back(d1, W2, d2, a1, H2, H1, act);
    outer(gW1 + (size_t)s * H1 * I, d1, x, H1, I);
}
