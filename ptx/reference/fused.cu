// CUDA C twin of ptx/fused.ptx, compiled at run time by NVRTC.
//
// The forward pass, deltas and batch gradients of the 2-layer MLP in three kernels,
// batch gradients computed directly (see the header of fused.ptx for the maths, launch
// shapes and the summation order). The sums follow the PTX's order exactly and are written with
// fmaf / __fadd_rn so that NVRTC cannot contract or reorder them: the two agree
// bit for bit. Plain loads stage the tiles here; the PTX uses cp.async.

#include "recipe.cuh"  // gauss_pdf, gauss_cdf, activate, activate_grad, softmax_delta: the PTX's sequences

// Z = X W^T + b (stored when Z is not null), A = f(Z) for the activation code act. A cluster of 8 blocks shares an 8-sample (warps) x 32-unit (lanes)
// tile; block rank r sums its eighth of the columns, and warp r of rank r adds the 8 partial
// tiles in rank order through distributed shared memory.
extern "C" __global__ void __cluster_dims__(8, 1, 1)
fused_forward(const float* X, const float* W, const float* b, float* A, float* Z, unsigned B, unsigned I,
              unsigned H, unsigned act)
{
    __shared__ __align__(16) float xs[8][128];
    __shared__ __align__(16) float ws[32][132];
    __shared__ float part[256];
    // Programmatic dependent launch, as in the PTX (NVRTC has no CUDA C spelling of it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const unsigned rank = __clusterRelativeBlockRank();
    const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned tiles_h = (H + 31) / 32, tile = blockIdx.x / 8;
    const unsigned h0 = (tile % tiles_h) * 32, s0 = (tile / tiles_h) * 8;
    if (s0 >= B) return;
    const unsigned h = h0 + lane, s = s0 + warp;
    const unsigned kc = ((I + 7) / 8 + 3) / 4 * 4;
    const unsigned k_lo = min(rank * kc, I), k_hi = min(k_lo + kc, I);

    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    for (unsigned k0 = k_lo; k0 < k_hi; k0 += 128) {
        for (unsigned e = tid; e < 8 * 128; e += 256) {
            unsigned r = e / 128, c = e % 128;
            xs[r][c] = (s0 + r < B && k0 + c < k_hi) ? X[(size_t)(s0 + r) * I + k0 + c] : 0.0f;
        }
        for (unsigned e = tid; e < 32 * 128; e += 256) {
            unsigned r = e / 128, c = e % 128;
            ws[r][c] = (h0 + r < H && k0 + c < k_hi) ? W[(size_t)(h0 + r) * I + k0 + c] : 0.0f;
        }
        __syncthreads();
        const unsigned kend = min(k_hi - k0, 128u);
        for (unsigned k = 0; k < kend; k += 4) {
            float4 x = *reinterpret_cast<const float4*>(&xs[warp][k]);
            float4 w = *reinterpret_cast<const float4*>(&ws[lane][k]);
            acc0 = fmaf(x.x, w.x, acc0);
            acc1 = fmaf(x.y, w.y, acc1);
            acc2 = fmaf(x.z, w.z, acc2);
            acc3 = fmaf(x.w, w.w, acc3);
        }
        __syncthreads();
    }
    part[tid] = __fadd_rn(__fadd_rn(acc0, acc1), __fadd_rn(acc2, acc3));
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may be scheduled
    if (warp == rank) {
        float z = *static_cast<float*>(__cluster_map_shared_rank(&part[tid], 0));
        for (unsigned peer = 1; peer < 8; ++peer)
            z = __fadd_rn(z, *static_cast<float*>(__cluster_map_shared_rank(&part[tid], peer)));
        if (s < B && h < H) {
            const float zb = __fadd_rn(z, b[h]);
            if (Z) Z[(size_t)s * H + h] = zb;
            A[(size_t)s * H + h] = act == 0u ? fmaxf(zb, 0.0f) : activate(zb, act);
        }
    }
    __cluster_barrier_arrive();  // no block leaves while another still reads its part[]
    __cluster_barrier_wait();
}

// Y = A W^T + b, D2 = Y - T (loss 0) or softmax(Y) - T (loss 1), D1 = (D2 W) * [A > 0] (ReLU)
// or (D2 W) * f' (other codes; GELU's z is D1 on entry, fused_forward's Z). One block per sample.
extern "C" __global__ void fused_output(const float* A, const float* W, const float* b, const float* T,
                                        float* Y, float* D2, float* D1, unsigned B, unsigned H, unsigned O,
                                        unsigned loss, unsigned act)
{
    const unsigned s = blockIdx.x;
    if (s >= B) return;
    // Programmatic dependent launch, as in the PTX (NVRTC has no CUDA C spelling of it).
    asm volatile("griddepcontrol.wait;" ::: "memory");

    const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarp = blockDim.x / 32;
    const float* a = A + (size_t)s * H;

    for (unsigned o = warp; o < O; o += nwarp) {
        float p = 0.0f;
        for (unsigned h = lane; h < H; h += 32) p = fmaf(a[h], W[(size_t)o * H + h], p);
        for (int m = 16; m >= 1; m /= 2) p = __fadd_rn(p, __shfl_xor_sync(0xffffffffu, p, m));
        const float y = __fadd_rn(p, b[o]);
        const float d = __fsub_rn(y, T[(size_t)s * O + o]);
        if (lane == 0) {
            Y[(size_t)s * O + o] = y;
            if (loss != 1u) D2[(size_t)s * O + o] = d;  // loss 1: the softmax below writes D2
        }
    }
    __syncthreads();
    asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may be scheduled

    if (loss == 1u) {
        // Thread 0 alone: the recipe's softmax sequence, o in order, as in the PTX
        // (softmax_delta, recipe.cuh).
        if (tid == 0) softmax_delta(D2 + (size_t)s * O, Y + (size_t)s * O, T + (size_t)s * O, O);
        __syncthreads();
    }

    const float* d2 = D2 + (size_t)s * O;
    for (unsigned h = tid; h < H; h += blockDim.x) {
        float acc = 0.0f;
        if (act != 0u || a[h] > 0.0f)
            for (unsigned o = 0; o < O; ++o) acc = fmaf(d2[o], W[(size_t)o * H + h], acc);
        if (act != 0u) acc = __fmul_rn(acc, activate_grad(D1[(size_t)s * H + h], a[h], act));
        D1[(size_t)s * H + h] = acc;
    }
}

// G = scale * (L^T R) for (GW1|Gb1, D1, X) and (GW2|Gb2, D2, A); column `cols` is the bias.
extern "C" __global__ void fused_grad(float* GW1, float* Gb1, float* GW2, float* Gb2, const float* X,
                                      const float* A, const float* D1, const float* D2, unsigned B, unsigned I,
                                      unsigned H, unsigned O, float scale)
{
    __shared__ float ls[64][8];
    __shared__ float rs[64][32];
    // Programmatic dependent launch, as in the PTX (NVRTC has no CUDA C spelling of it).
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned tile = blockIdx.x;
    unsigned ctiles = (I + 32) / 32;
    const unsigned tiles1 = ctiles * ((H + 7) / 8);
    float *G = GW1, *Gb = Gb1;
    const float *L = D1, *R = X;
    unsigned rows = H, cols = I;
    if (tile >= tiles1) {
        tile -= tiles1;
        ctiles = (H + 32) / 32;
        if (tile >= ctiles * ((O + 7) / 8)) return;
        G = GW2, Gb = Gb2, L = D2, R = A, rows = O, cols = H;
    }
    const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const unsigned c0 = (tile % ctiles) * 32, r0 = (tile / ctiles) * 8;
    const unsigned r = r0 + warp, c = c0 + lane;

    float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
    for (unsigned s0 = 0; s0 < B; s0 += 64) {
        for (unsigned e = tid; e < 64 * 8; e += 256) {
            unsigned sr = e / 8, tr = e % 8;
            ls[sr][tr] = (s0 + sr < B && r0 + tr < rows) ? L[(size_t)(s0 + sr) * rows + r0 + tr] : 0.0f;
        }
        for (unsigned e = tid; e < 64 * 32; e += 256) {
            unsigned sr = e / 32, tc = e % 32, col = c0 + tc;
            const bool in_batch = s0 + sr < B;
            rs[sr][tc] = col == cols ? (in_batch ? 1.0f : 0.0f)
                                     : (in_batch && col < cols ? R[(size_t)(s0 + sr) * cols + col] : 0.0f);
        }
        __syncthreads();
        const unsigned n = min(B - s0, 64u);
        for (unsigned k = 0; k < n; k += 4) {  // samples past the batch are zeros in both tiles
            acc0 = fmaf(ls[k][warp], rs[k][lane], acc0);
            acc1 = fmaf(ls[k + 1][warp], rs[k + 1][lane], acc1);
            acc2 = fmaf(ls[k + 2][warp], rs[k + 2][lane], acc2);
            acc3 = fmaf(ls[k + 3][warp], rs[k + 3][lane], acc3);
        }
        __syncthreads();
    }
    asm volatile("griddepcontrol.launch_dependents;");  // the next kernel may be scheduled
    if (r >= rows || c > cols) return;
    const float acc = __fadd_rn(__fadd_rn(acc0, acc1), __fadd_rn(acc2, acc3));
    float* g = c == cols ? &Gb[r] : &G[(size_t)r * cols + c];
    *g = __fmul_rn(acc, scale);
}
