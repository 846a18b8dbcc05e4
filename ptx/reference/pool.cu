// CUDA C twin of ptx/pool.ptx, compiled at run time by NVRTC.
//
// 2x2 max-pool, stride 2, on P planes of H x W. pool_fwd keeps the running maximum of the
// window read in row-major order, replaced only by a strictly greater value (ties: the
// first wins), and its index in the input plane; pool_bwd gathers each input element's
// gradient from the window whose index points at it (else 0), and with Yp (pool_fwd's Y;
// null: none) routes +0 from a window whose maximum is <= 0 (the ReLU mask of the layer
// below). Exact: no arithmetic on values.
// One thread per output element (pool_fwd) or per 2x2 cell of the input (pool_bwd), 1-D grid.
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

extern "C" __global__ void pool_bwd(float* dX, const float* dY, const unsigned* idx, const float* Yp, unsigned P,
                                    unsigned H, unsigned W)
{
    // One thread per 2x2 cell of the input (ceil(H/2) x ceil(W/2) a plane), as the PTX.
    const unsigned Ho = H / 2, Wo = W / 2, Hc = (H + 1) / 2, Wc = (W + 1) / 2;
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= P * Hc * Wc) return;
    const unsigned q = i / (Hc * Wc), r = i % (Hc * Wc), cy = r / Wc, cx = r % Wc;
    unsigned at = 0xffffffffu;  // no window: every input of the cell gets 0
    float g = 0.0f;
    if (cy < Ho && cx < Wo) {
        const size_t o = (size_t)q * Ho * Wo + cy * Wo + cx;
        at = idx[o];
        g = dY[o];
        if (Yp && !(Yp[o] > 0.0f)) g = 0.0f;
    }
    float* x = dX + (size_t)q * H * W;
    for (unsigned y = 2 * cy; y < 2 * cy + 2 && y < H; ++y)
        for (unsigned c = 2 * cx; c < 2 * cx + 2 && c < W; ++c) x[y * W + c] = (y * W + c == at) ? g : 0.0f;
}
