// CUDA C twin of ptx/pool.ptx, compiled at run time by NVRTC.
//
// 2x2 max-pool, stride 2, on P planes of H x W. pool_fwd keeps the running maximum of the
// window read in row-major order, replaced only by a strictly greater value (ties: the
// first wins), and its index in the input plane; pool_bwd gathers each input element's
// gradient from the window whose index points at it (else 0). Exact: no arithmetic on values.
// One thread per output (pool_fwd) or input (pool_bwd) element, 1-D grid.
extern "C" __global__ void pool_fwd(float* Y, unsigned* idx, const float* X, unsigned P, unsigned H, unsigned W)
{
    const unsigned Ho = H / 2, Wo = W / 2;
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= P * Ho * Wo) return;
    const unsigned q = i / (Ho * Wo), r = i % (Ho * Wo), oy = r / Wo, ox = r % Wo;
    const float* x = X + (size_t)q * H * W;
    unsigned at = 2 * oy * W + 2 * ox, best = at;
    float m = x[at];
    if (x[at + 1] > m) { m = x[at + 1]; best = at + 1; }
    at += W;
    if (x[at] > m) { m = x[at]; best = at; }
    if (x[at + 1] > m) { m = x[at + 1]; best = at + 1; }
    Y[i] = m;
    idx[i] = best;
}

extern "C" __global__ void pool_bwd(float* dX, const float* dY, const unsigned* idx, unsigned P, unsigned H,
                                    unsigned W)
{
    const unsigned Ho = H / 2, Wo = W / 2;
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= P * H * W) return;
    const unsigned q = i / (H * W), r = i % (H * W), iy = r / W, ix = r % W, oy = iy / 2, ox = ix / 2;
    float g = 0.0f;
    if (oy < Ho && ox < Wo) {
        const size_t o = (size_t)q * Ho * Wo + oy * Wo + ox;
        if (idx[o] == r) g = dY[o];
    }
    dX[i] = g;
}
