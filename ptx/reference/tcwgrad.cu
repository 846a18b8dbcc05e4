// CUDA C twin of ptx/tcwgrad.ptx, compiled at run time by NVRTC: the convolution's weight and
// bias gradients on the tensor cores (mma.sync m16n8k8, TF32 inputs), conv_bwd_weights' signature:
//   dW[k][c][ky][kx] = scale * sum_{n,y,x} G[n][k][y][x] X[n][c][y+ky-p][x+kx-p],  p = KS/2
//   db[k]            = scale * sum_{n,y,x} G[n][k][y][x],  G = dY masked by Y > 0 (act 1)
// The PTX's launch shape (clusters of 8 blocks of 256 threads; cluster cid = mt * cgroups + cg
// owns output channels 16 mt .. 16 mt + 15 and columns 64 cg .. 64 cg + 63 of dW viewed as
// [K][C*T]; rank r the images r, r+8, ...) and the same arithmetic in the same order, written the
// plain way: the mma operands come from global memory instead of the PTX's staged shared memory.
//   dW: warp w, for n = r, r+8, ..., for k-steps s = w, w+8, ... < ceil(HW/8): the fragments
//       (g = lane/4, q = lane%4, px0 = 8s) a0 = G[k0+g][px0+q], a1 = G[k0+g+8][px0+q],
//       a2 = G[k0+g][px0+q+4], a3 = G[k0+g+8][px0+q+4], b0 = Xcol[px0+q][col],
//       b1 = Xcol[px0+q+4][col] (col = colbase + 8j + g, tile j = 0..7; +0 past H*W, past K,
//       outside the image), each rounded by cvt.rna.tf32.f32, one mma.sync per tile; then the 8
//       warps' tiles in warp order, the 8 ranks in rank order (__fadd_rn), __fmul_rn by scale.
//       (A column past C*T reads other values in the PTX; its outputs are never stored, and an
//       mma's output column depends on its own B column only.)
//   db: thread t sums row kk = t/16 of the tile: for n, for groups v = t%16, t%16 + 16, ... of 4
//       pixels, for pixels 4v .. 4v+3 < H*W: __fadd_rn of the unrounded G; a butterfly over the
//       row's 16 lanes (masks 8 .. 1), the ranks in rank order, __fmul_rn by scale.
// The tensor core's order and rounding inside one mma are the hardware's, the same for both
// sets; every mma gets the same operand bits in the same k-slots and the same c, so the two
// agree bit for bit.

// cvt.rna.tf32.f32: nearest, ties away from zero, the 13 low bits cleared; a tf32 in a .b32.
__device__ __forceinline__ unsigned tcw_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c = A B + c for one m16n8k8 tile, tf32 fragments a0..a3, b0, b1.
__device__ __forceinline__ void tcw_mma(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                        unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

extern "C" __global__ void __cluster_dims__(8, 1, 1)
tc_conv_bwd_weights(float* dW, float* db, const float* X, const float* dY, const float* Y, unsigned N, unsigned C,
                    unsigned H, unsigned W, unsigned K, unsigned KS, unsigned act, float scale)
{
    extern __shared__ float4 tcw_smem[];                // the PTX's offsets: part, partb, then red
    float* part = reinterpret_cast<float*>(tcw_smem);  // [16 * 64]
    float* partb = part + 1024;                        // [16]
    float* red = partb + 16;                           // [8][1024] (the PTX puts it over its staging)
    const unsigned rank = __clusterRelativeBlockRank();
    const unsigned T = KS * KS, CT = C * T, HW = H * W, pad = KS / 2, S = (HW + 7) / 8;
    const unsigned cgroups = (CT + 63) / 64, cid = blockIdx.x / 8;
    if (cid >= (K + 15) / 16 * cgroups) return;  // the whole cluster
    const unsigned k0 = cid / cgroups * 16, cg = cid % cgroups, colbase = cg * 64;
    const unsigned tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
    const unsigned kk = tid / 16, j = tid % 16, V = (HW + 3) / 4;  // the db row and groups
    // G[n][k][p]: +0 past K and past H*W.
    auto g_at = [&](unsigned n, unsigned k, unsigned p) -> float {
        if (k >= K || p >= HW) return 0.0f;
        const size_t e = ((size_t)n * K + k) * HW + p;
        return act == 1 && !(Y[e] > 0.0f) ? 0.0f : dY[e];
    };
    // Xcol[n][p][col]: the value tap col % T of channel col / T sees at pixel p; +0 outside.
    auto x_at = [&](unsigned n, unsigned col, unsigned p) -> float {
        if (col >= CT || p >= HW) return 0.0f;
        const unsigned c = col / T, tap = col % T;
        const unsigned iy = p / W + tap / KS - pad, ix = p % W + tap % KS - pad;  // wraps below 0
        return iy < H && ix < W ? X[(((size_t)n * C + c) * H + iy) * W + ix] : 0.0f;
    };
    float d[8][4], bacc = 0.0f;
    for (unsigned t = 0; t < 8; ++t)
        for (unsigned e = 0; e < 4; ++e) d[t][e] = 0.0f;
    for (unsigned n = rank; n < N; n += 8) {
        if (k0 + kk < K)
            for (unsigned v = j; v < V; v += 16)
                for (unsigned p = 4 * v; p < 4 * v + 4 && p < HW; ++p) bacc = __fadd_rn(bacc, g_at(n, k0 + kk, p));
        for (unsigned s = w; s < S; s += 8) {
            const unsigned p0 = 8 * s + q, p1 = p0 + 4;
            const unsigned a0 = tcw_tf32(g_at(n, k0 + g, p0)), a1 = tcw_tf32(g_at(n, k0 + g + 8, p0));
            const unsigned a2 = tcw_tf32(g_at(n, k0 + g, p1)), a3 = tcw_tf32(g_at(n, k0 + g + 8, p1));
            for (unsigned t = 0; t < 8; ++t) {
                const unsigned col = colbase + 8 * t + g;
                tcw_mma(d[t], a0, a1, a2, a3, tcw_tf32(x_at(n, col, p0)), tcw_tf32(x_at(n, col, p1)));
            }
        }
    }
    // The warps' tiles: red[w][row * 64 + col], c0, c1 at row g, c2, c3 at row g+8, columns 8j+2q, +1.
    for (unsigned t = 0; t < 8; ++t) {
        float* r = red + w * 1024 + g * 64 + 8 * t + 2 * q;
        r[0] = d[t][0];
        r[1] = d[t][1];
        r[512] = d[t][2];
        r[513] = d[t][3];
    }
    for (unsigned m = 8; m >= 1; m /= 2) bacc = __fadd_rn(bacc, __shfl_xor_sync(0xffffffffu, bacc, m));
    if (j == 0) partb[kk] = bacc;
    __syncthreads();
    for (unsigned o = tid; o < 1024; o += 256) {
        float sum = red[o];
        for (unsigned v = 1; v < 8; ++v) sum = __fadd_rn(sum, red[v * 1024 + o]);
        part[o] = sum;
    }
    __cluster_barrier_arrive();
    __cluster_barrier_wait();
    if (tid < 128) {
        const unsigned o = rank * 128 + tid, k = k0 + o / 64, col = colbase + o % 64;
        if (k < K && col < CT) {
            float sum = *static_cast<float*>(__cluster_map_shared_rank(&part[o], 0));
            for (unsigned peer = 1; peer < 8; ++peer)
                sum = __fadd_rn(sum, *static_cast<float*>(__cluster_map_shared_rank(&part[o], peer)));
            dW[(size_t)k * CT + col] = __fmul_rn(sum, scale);
        }
    } else if (tid < 144 && rank == 0 && cg == 0 && k0 + (tid - 128) < K) {
        const unsigned t = tid - 128;
        float sum = *static_cast<float*>(__cluster_map_shared_rank(&partb[t], 0));
        for (unsigned peer = 1; peer < 8; ++peer)
            sum = __fadd_rn(sum, *static_cast<float*>(__cluster_map_shared_rank(&partb[t], peer)));
        db[k0 + t] = __fmul_rn(sum, scale);
    }
    __cluster_barrier_arrive();  // no block leaves while another still reads its part[]
    __cluster_barrier_wait();
}
