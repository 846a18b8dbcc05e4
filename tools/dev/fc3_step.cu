// ============================================================================
// tools/dev/fc3_step.cu -- a design study in CUDA C (llm.c's dev/cuda style: a float64 reference,
// versions, check before time), NOT a kernel of ptx/ and not built by CMake or CI: the whole
// training step of a 3-layer fc network in ONE launch, to measure before writing it in PTX
// whether that road reaches issue 33's 15 us a step at 784,256,128,10, batch 64 (the model
// trainer's chain of six dependent kernels takes 24.19 us on the H100: BENCHMARKS.md, "fc
// networks of 3 layers").
//
// The step: I -> H1 -> H2 -> O, ReLU, softmax cross-entropy, SGD with Nesterov momentum
// (the default recipe's rule; lr fixed), batch B <= 64. G clusters of 8 blocks of 256 threads,
// all resident; four stages with a grid-wide barrier between them (a 64-bit arrival count):
//   S1 fc1 forward: cluster c owns H1 tile c (16 units); rank r sums its 100 columns of I for
//      64 samples x 16 units; the partial tiles meet through DSMEM; rank r finishes samples
//      8r .. 8r+7: A1 = max(sum + b1, 0) -> memory.
//   S2 fc2 forward: cluster c < H2/16 owns H2 tile c; rank r sums its 32 columns of H1; DSMEM
//      join; rank r finishes its 8 samples: A2, and Yp[s][o][c] = its tile's part of A2 W3^T.
//   S3 per H2 tile: Y = sum_c Yp + b3, D3 = softmax(Y) - T, D2 = D3 W3 * [A2 > 0] for the
//      tile's units; rank r: gW2 over its 32 columns (and W2's update), D1p[c][s][k] = the
//      tile's part of D2 W2 (with the old W2); W3's columns and b2 updated; b3's gradient kept.
//   S4 per H1 tile: D1 = sum_c D1p * [A1 > 0]; gW1 over rank r's columns, W1's and b1's
//      updates; b3's (cluster 0).
// Versions: v1 the plain code; v2 every load of a stage issued before its first use, the
// optimizer state and targets loaded at the start, the loss on 80 threads, the gradient sums
// interleaved; v3 = v2 with S steps a launch (no barrier between steps beyond the three a step:
// what a stage reads was written by its own cluster or before a grid barrier), the W1 and W2
// tiles and their state kept in shared memory, and S3 without cluster barriers (every rank
// computes Y, D3, D2 for all 64 samples from L2); v4 v3 with R ranks a cluster (run with 4);
// v5 v4 with every product on TF32 mma.sync (checked as per-tensor norms: TF32's rounding breaks
// an element-wise bound where the momentum is near 0); v6 one grid barrier a step, fc2, fc3 and
// the loss run whole in every cluster (8 clusters of 8), v7 v6 with A1 rounded to TF32 once as
// it is stored, v8 v5 with every mma operand as its FP32 bits (no cvt.rna: the tensor core
// truncates), to price the roundings (not run: ptx/fc3step.ptx itself measured it, 17.21 -> 15.49
// us a step in bench on an H100, and loads its operands as bits since 5c62aa9).
// `./fc3_step [H1 H2 [FIRST [LAST]]]` runs versions FIRST..LAST (1..8); FC3_CHECK_ONLY=1 runs the
// float64 checks alone (for compute-sanitizer). v5 is what ptx/fc3step.ptx (fc3_step, the model
// trainer's step for 3 fc layers) is written from, with X's copies a step ahead and 128 steps a
// launch.
//
// Measured (2026-11-28, one H100 call unless named; `nvcc -O3 -arch=sm_90 -std=c++17
// tools/dev/fc3_step.cu -o fc3_step && ./fc3_step [H1 H2]`; us a step, a CUDA graph of 20 steps
// replayed 100 times; every version checked against float64 after 1 and 4 steps first; the
// same call's `bench` gave today's chain 23.98):
//   784,256,128,10: v1 39.66; v2 23.79 (S1 3.62, S2 3.04, S3 5.65, S4 3.53, barriers 4.14 us in
//     block 0); v3 27.09 (at most 128 registers so that 16 clusters of 8 fit: 468 bytes of
//     spills, and two blocks share some SMs); v4 24.54 (16 clusters of 4, one block a SM:
//     barriers 2.95, but S1 5.74 and S4 5.01).
//   784,128,64,10 (8 clusters of 8, an earlier call): v3 16.92 (S1 3.09, S2 2.92, S3 4.40,
//     S4 3.16, barriers 2.91).
// What it says: (1) the launches between steps cost about 4 us (v2's stages sum to 19, its step
//   is 23.8): several steps a launch, as fused_step does, are part of the road; (2) the H100 holds
//   at most 15 clusters of 8 at one block a SM (30 of 4, 7 of 16; 120 blocks in clusters of the
//   132 SMs), so 16 tiles of 16 units need 2 blocks a SM (v3) or fewer ranks a tile (v4);
//   (3) the stages are latency chains (an L2 round trip, a cluster barrier, a DSMEM join each),
//   3 to 6 us each: 15 us needs each near 2.5 (fc1's products on mma.sync, staging overlapped).
// v5, and every version again, on an H200 (2026-11-28, one call; 784,256,128,10): v1 38.80, v2
//   22.95, v3 26.46, v4 23.93, v5 18.57 (S1 3.85, S2 1.65, S3 4.84, S4 3.15, barriers 3.00 in
//   block 0); 784,128,64,10: v4 23.78, v5 18.38. The products on the tensor cores take S2 from
//   4.3 to 1.7 us and S4 from 5.0 to 3.2; S1 and S3 stay latency chains (X's L2 round trip; the
//   loss, D2 and the five small updates one after another).
// v6 and v7 against v5, one H100 call (2026-12-07, 1980 MHz; `./fc3_step 256 128 5`): v5 18.30 to
//   18.88 (median 18.71), v6 20.24 to 20.33, v7 19.76 us a step; each checked against float64
//   first, racecheck clean on v6's checks. v6's step in block 0 (20.63 us with its 16 marks): S1's
//   mma 0.69, its join 0.84, grid barrier 1.23, A1's 64 KB from L2 2.30, fc2's mma 2.07, the
//   logits' part 1.16, cluster barrier b 0.60, softmax and D3 1.66, D2 0.91, D1p 0.71, gW2 with
//   W2's update (and W3, b2, b3 beside it) 4.48, D1's join and barrier d 0.64, gW1 with W1's
//   update 3.32. v7 (A1 stored as TF32): fc2's mma 1.03, gW2's piece 3.42, but A1's loads 4.03
//   (the rounding waits for them). So fc2 whole in a cluster (8 SMs doing what 64 did: A1's loads,
//   fc2's product and gW2 with its update about 8 us together) costs more than the two grid
//   barriers and the L2 hand-offs it removes (about 3 us in v5); dropped (BENCHMARKS.md, Tried and
//   dropped). What it does show: a cvt.rna a fragment element is not free (fc2's mma halves when
//   its operand is rounded once, at the store). These figures are 051d8b7's build; the loss's
//   softmax has since moved into loss_rows (the same operations), which leaves every version's
//   registers as they were but v7's (224 -> 232, no spills).
// ============================================================================
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
namespace cg = cooperative_groups;

#define M6(i) do { if (blockIdx.x == 0 && threadIdx.x == 0) a.tsb[16 + (i)] = clock64(); } while (0)
#define MARK(i) do { if (blockIdx.x == 0 && threadIdx.x == 0) a.tsb[i] = clock64(); } while (0)
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

constexpr int KC = 100;   // columns of I a rank (I <= 800)
constexpr int KS = 100;   // xs / ws row stride
constexpr int K2 = 32;    // columns of H1 a rank (H1 <= 256)
constexpr int MAXO = 32;
constexpr int SMEM_FLOATS = 64 * KS + 16 * KS + 64 * 16 + 64 * K2 + 16 * K2 + MAXO * 16 + 8 * 16 + 8 * 16 + 8 * MAXO + 64 * 16 + 64 * MAXO + 64 * 16 + 32 + 128 + 16 * KS + 16 * K2;

struct Args {
    const float* X; const float* T; float* P; float* M;
    float* A1; float* A2; float* Y; float* Yp; float* D1p; float* gb3;
    unsigned long long* sync;
    long long* tsb;
    int B, I, H1, H2, O;
    float lr, mu, scale;
};

__device__ __forceinline__ void grid_barrier(unsigned long long* sync, unsigned nblk) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned long long old = atomicAdd(sync, 1ull);
        unsigned long long tgt = (old / nblk + 1) * nblk;
        while (true) {
            unsigned long long v;
            asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(sync));
            if (v >= tgt) break;
        }
    }
    __syncthreads();
}

// The loss of sample s's row of logits, held by 4 lanes (xor 1 and 2 in a warp) in 4 slots
// each from slot ob: the softmax over its O outputs, D3 = softmax - target into d3s[s][ob + i]
// (0 outside B x O), and the probabilities into Y[s][o] where Y is given. Every version's S3.
__device__ __forceinline__ void loss_rows(const float (&y)[4], const float (&tv)[4], int s, int ob, int B, int O,
                                          float* d3s, float* Y) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < 4; ++i) if (ob + i < O) mx = fmaxf(mx, y[i]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1)); mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
    float e[4], es = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) { e[i] = ob + i < O ? exp2f((y[i] - mx) * 1.44269504f) : 0.f; es += e[i]; }
    es += __shfl_xor_sync(0xffffffff, es, 1); es += __shfl_xor_sync(0xffffffff, es, 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const bool ok = s < B && ob + i < O;
        d3s[s * 16 + ob + i] = ok ? e[i] / es - tv[i] : 0.f;
        if (Y && ok) Y[s * O + ob + i] = e[i] / es;
    }
}

__device__ __forceinline__ float sgd_nesterov(float p, float& m, float g, float lr, float mu) {
    m = fmaf(mu, m, g);
    return p - lr * fmaf(mu, m, g);
}

__global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(256, 1) fc3_v1(Args a) {
    cg::cluster_group cl = cg::this_cluster();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rank = cl.block_rank();
    const int c = blockIdx.x / 8;
    const unsigned nblk = gridDim.x;
    const int B = a.B, I = a.I, H1 = a.H1, H2 = a.H2, O = a.O;
    float* W1 = a.P; float* b1 = W1 + H1 * I; float* W2 = b1 + H1; float* b2 = W2 + H2 * H1;
    float* W3 = b2 + H2; float* b3 = W3 + O * H2;
    const long dM = a.M - a.P;
    const int T2 = (H2 + 15) / 16;

    extern __shared__ __align__(16) float sm[];
    float* xs = sm;                   // S1, S4: X[64][rank's columns]
    float* ws = xs + 64 * KS;         // S1, S4: W1 tile [16][rank's columns]
    float* part = ws + 16 * KS;       // partial sums (S1, S2)
    float* a1s = part + 64 * 16;      // S2, S3: A1[64][rank's 32 columns]
    float* w2s = a1s + 64 * K2;       // S2, S3: W2 tile [16][32 columns]
    float* w3s = w2s + 16 * K2;       // W3[o][h0 + u]
    float* aown = w3s + MAXO * 16;    // S2: A2 of this rank's 8 samples
    float* d2own = aown + 8 * 16;     // S3: D2 of this rank's 8 samples
    float* d3own = d2own + 8 * 16;    // S3: D3 of this rank's 8 samples
    float* d2s = d3own + 8 * MAXO;    // S3: D2 chunk; S4: D1 chunk
    float* d3s = d2s + 64 * 16;
    float* a2s = d3s + 64 * MAXO;
    float* b1s = a2s + 64 * 16;
    float* b2s = b1s + 16;

    MARK(0);
    const int k_lo = min(rank * KC, I), k_hi = min(k_lo + KC, I);
    // ---------------- S1: fc1 forward, H1 tile c ----------------
    const int h0 = c * 16;
    const bool t1 = h0 < H1;
    // Thread's 2 samples x 2 units (fused_step's map).
    const int sa = 16 * (warp >> 1) + (lane >> 2), ua = 8 * (warp & 1) + (lane & 3);
    if (t1) {
        for (int e = tid; e < 64 * KC; e += 256) {
            int r = e / KC, k = e % KC, col = k_lo + k;
            xs[r * KS + k] = (r < B && col < k_hi) ? a.X[r * I + col] : 0.f;
        }
        for (int e = tid; e < 16 * KC; e += 256) {
            int r = e / KC, k = e % KC, col = k_lo + k, h = h0 + r;
            ws[r * KS + k] = (h < H1 && col < k_hi) ? W1[h * I + col] : 0.f;
        }
        if (tid < 16) b1s[tid] = h0 + tid < H1 ? b1[h0 + tid] : 0.f;
        __syncthreads();
        float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
        const float4* xa = (const float4*)&xs[sa * KS]; const float4* xb = (const float4*)&xs[(sa + 8) * KS];
        const float4* wa = (const float4*)&ws[ua * KS]; const float4* wb = (const float4*)&ws[(ua + 4) * KS];
#pragma unroll 5
        for (int k = 0; k < KC / 4; ++k) {
            float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
            pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
            pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
            pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
            pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
        }
        part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
        part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
    }
    cl.sync();
    if (t1 && tid < 128) {   // rank r finishes samples 8r .. 8r+7: thread (s, u)
        int s = 8 * rank + (tid >> 4), u = tid & 15;
        float z = 0;
        for (int q = 0; q < 8; ++q) z += cl.map_shared_rank(part, q)[s * 16 + u];
        z += b1s[u];
        if (s < B && h0 + u < H1) a.A1[s * H1 + h0 + u] = fmaxf(z, 0.f);
    }
    MARK(1);
    grid_barrier(a.sync, nblk);
    MARK(2);

    // ---------------- S2: fc2 forward, H2 tile c, + Yp ----------------
    const int g0 = c * 16;
    const bool t2 = c < T2;
    const int j_lo = min(rank * K2, H1), j_hi = min(j_lo + K2, H1);
    if (t2) {
        for (int e = tid; e < 64 * K2; e += 256) {
            int r = e >> 5, k = e & 31, col = j_lo + k;
            a1s[e] = (r < B && col < j_hi) ? __ldcg(&a.A1[r * H1 + col]) : 0.f;
        }
        for (int e = tid; e < 16 * K2; e += 256) {
            int r = e >> 5, k = e & 31, col = j_lo + k, h = g0 + r;
            w2s[e] = (h < H2 && col < j_hi) ? W2[h * H1 + col] : 0.f;
        }
        for (int e = tid; e < O * 16; e += 256) {
            int o = e >> 4, u = e & 15;
            w3s[e] = g0 + u < H2 ? W3[o * H2 + g0 + u] : 0.f;
        }
        if (tid < 16) b2s[tid] = g0 + tid < H2 ? b2[g0 + tid] : 0.f;
        __syncthreads();
        float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
        const float4* xa = (const float4*)&a1s[sa * K2]; const float4* xb = (const float4*)&a1s[(sa + 8) * K2];
        const float4* wa = (const float4*)&w2s[ua * K2]; const float4* wb = (const float4*)&w2s[(ua + 4) * K2];
#pragma unroll
        for (int k = 0; k < K2 / 4; ++k) {
            float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
            pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
            pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
            pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
            pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
        }
        part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
        part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
    }
    cl.sync();
    if (t2 && tid < 128) {
        int sl = tid >> 4, s = 8 * rank + sl, u = tid & 15;
        float z = 0;
        for (int q = 0; q < 8; ++q) z += cl.map_shared_rank(part, q)[s * 16 + u];
        z += b2s[u];
        float v = (g0 + u < H2 && s < B) ? fmaxf(z, 0.f) : 0.f;
        aown[sl * 16 + u] = v;
    }
    __syncthreads();
    if (t2 && tid < 8 * O) {   // Yp[s][o][c] for this rank's 8 samples
        int sl = tid / O, o = tid % O, s = 8 * rank + sl;
        float y = 0;
        for (int u = 0; u < 16; ++u) y = fmaf(aown[sl * 16 + u], w3s[o * 16 + u], y);
        if (s < B) a.Yp[(s * O + o) * 16 + c] = y;
    }
    MARK(3);
    grid_barrier(a.sync, nblk);
    MARK(4);

    // ---------------- S3: loss, D2, gW2, D1 partials (H2 tile c) ----------------
    if (t2) {
        if (tid < 8) {   // Y and D3 of sample 8 rank + tid
            int s = 8 * rank + tid;
            if (s < B) {
                float y[MAXO]; float mx = -INFINITY;
                for (int o = 0; o < O; ++o) {
                    float v = 0;
                    for (int q = 0; q < T2; ++q) v += __ldcg(&a.Yp[(s * O + o) * 16 + q]);
                    v += b3[o]; y[o] = v; mx = fmaxf(mx, v);
                }
                float es = 0;
                for (int o = 0; o < O; ++o) { y[o] = exp2f((y[o] - mx) * 1.44269504f); es += y[o]; }
                for (int o = 0; o < O; ++o) {
                    float d = y[o] / es - a.T[s * O + o];
                    d3own[tid * MAXO + o] = d;
                }
                if (c == 0) for (int o = 0; o < O; ++o) a.Y[s * O + o] = y[o];  // (probabilities; prototype)
            } else for (int o = 0; o < O; ++o) d3own[tid * MAXO + o] = 0.f;
        }
        __syncthreads();
        if (tid < 128) {   // D2 own slice
            int sl = tid >> 4, u = tid & 15;
            float d = 0;
            for (int o = 0; o < O; ++o) d = fmaf(d3own[sl * MAXO + o], w3s[o * 16 + u], d);
            d2own[sl * 16 + u] = aown[sl * 16 + u] > 0.f ? d : 0.f;
        }
    }
    cl.sync();
    if (t2) {
        for (int e = tid; e < 64 * 16; e += 256) {   // gather D2 and A2 of all 64 samples
            int s = e >> 4, u = e & 15, q = s >> 3;
            d2s[e] = cl.map_shared_rank(d2own, q)[(s & 7) * 16 + u];
            a2s[e] = cl.map_shared_rank(aown, q)[(s & 7) * 16 + u];
        }
        for (int e = tid; e < 64 * O; e += 256) {
            int s = e / O, o = e % O, q = s >> 3;
            d3s[s * MAXO + o] = cl.map_shared_rank(d3own, q)[(s & 7) * MAXO + o];
        }
    }
    cl.sync();   // peers' slices read; W3 columns no longer read for D2
    if (t2) {
        // gW2[u][k], rank's 32 columns: 512 sums, 2 a thread; then D1p: 2048, 8 a thread.
        for (int e = tid; e < 16 * K2; e += 256) {
            int u = e >> 5, k = e & 31;
            float g = 0;
            for (int s = 0; s < 64; ++s) g = fmaf(d2s[s * 16 + u], a1s[s * K2 + k], g);
            int h = g0 + u, col = j_lo + k;
            if (h < H2 && col < j_hi) {
                float* p = &W2[h * H1 + col];
                float m = p[dM];
                float np = sgd_nesterov(w2s[e], m, g * a.scale, a.lr, a.mu);
                p[dM] = m; *p = np;
            }
        }
        for (int e = tid; e < 64 * K2; e += 256) {
            int s = e >> 5, k = e & 31;
            float d = 0;
            for (int u = 0; u < 16; ++u) d = fmaf(d2s[s * 16 + u], w2s[u * K2 + k], d);
            int col = j_lo + k;
            if (col < j_hi) a.D1p[(c * 64 + s) * H1 + col] = d;
        }
        if (rank == 1 && tid < O * 16) {   // W3[o][g0 + u]
            int o = tid >> 4, u = tid & 15;
            float g = 0;
            for (int s = 0; s < 64; ++s) g = fmaf(d3s[s * MAXO + o], a2s[s * 16 + u], g);
            if (g0 + u < H2) {
                float* p = &W3[o * H2 + g0 + u];
                float m = p[dM];
                float np = sgd_nesterov(*p, m, g * a.scale, a.lr, a.mu);
                p[dM] = m; *p = np;
            }
        }
        if (rank == 0 && tid < 16 && g0 + tid < H2) {   // b2
            float g = 0;
            for (int s = 0; s < 64; ++s) g += d2s[s * 16 + tid];
            float* p = &b2[g0 + tid];
            float m = p[dM];
            float np = sgd_nesterov(*p, m, g * a.scale, a.lr, a.mu);
            p[dM] = m; *p = np;
        }
        if (c == 0 && rank == 2 && tid < O) {   // b3's gradient, applied after the barrier
            float g = 0;
            for (int s = 0; s < 64; ++s) g += d3s[s * MAXO + tid];
            a.gb3[tid] = g;
        }
    }
    MARK(5);
    grid_barrier(a.sync, nblk);
    MARK(6);

    // ---------------- S4: D1, gW1, b1 (H1 tile c) ----------------
    if (t1) {
        for (int e = tid; e < 64 * 16; e += 256) {
            int s = e >> 4, u = e & 15, h = h0 + u;
            float d = 0;
            if (h < H1 && s < B) {
                for (int q = 0; q < T2; ++q) d += __ldcg(&a.D1p[(q * 64 + s) * H1 + h]);
                if (!(__ldcg(&a.A1[s * H1 + h]) > 0.f)) d = 0.f;
            }
            d2s[e] = d;
        }
        __syncthreads();
        const int kc = k_hi - k_lo;
        for (int e = tid; e < 16 * kc; e += 256) {
            int u = e / kc, k = e % kc, h = h0 + u;
            float g = 0;
            for (int s = 0; s < 64; ++s) g = fmaf(d2s[s * 16 + u], xs[s * KS + k], g);
            if (h < H1) {
                float* p = &W1[h * I + k_lo + k];
                float m = p[dM];
                float np = sgd_nesterov(ws[u * KS + k], m, g * a.scale, a.lr, a.mu);
                p[dM] = m; *p = np;
            }
        }
        if (rank == 0 && tid < 16 && h0 + tid < H1) {
            float g = 0;
            for (int s = 0; s < 64; ++s) g += d2s[s * 16 + tid];
            float* p = &b1[h0 + tid];
            float m = p[dM];
            float np = sgd_nesterov(*p, m, g * a.scale, a.lr, a.mu);
            p[dM] = m; *p = np;
        }
        if (c == 0 && rank == 1 && tid < O) {
            float* p = &b3[tid];
            float m = p[dM];
            float np = sgd_nesterov(*p, m, a.gb3[tid] * a.scale, a.lr, a.mu);
            p[dM] = m; *p = np;
        }
    }
    MARK(7);
    cl.sync();   // no block leaves while a peer may still read its shared memory
}

// ---------------------------------------------------------------------------------------------
// v2: the same stages, with every load of a stage issued before its first use (float4, all in
// registers, then stored), the optimizer state and the targets loaded at the start, the loss on
// 80 threads (one (sample, output) each) and the 64-term gradient sums interleaved 2 to 8 chains
// a thread. Needs I % 4 == 0, H1 % 4 == 0, O <= 16.
// ---------------------------------------------------------------------------------------------
__global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(256, 1) fc3_v2(Args a) {
    cg::cluster_group cl = cg::this_cluster();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rank = cl.block_rank();
    const int c = blockIdx.x / 8;
    const unsigned nblk = gridDim.x;
    const int B = a.B, I = a.I, H1 = a.H1, H2 = a.H2, O = a.O;
    float* W1 = a.P; float* b1 = W1 + H1 * I; float* W2 = b1 + H1; float* b2 = W2 + H2 * H1;
    float* W3 = b2 + H2; float* b3 = W3 + O * H2;
    const long dM = a.M - a.P;
    const int T2 = (H2 + 15) / 16;

    extern __shared__ __align__(16) float sm[];
    float* xs = sm;                   // S1, S4: X[64][rank's columns]
    float* ws = xs + 64 * KS;         // S1, S4: W1 tile [16][rank's columns]
    float* part = ws + 16 * KS;       // partial sums (S1, S2)
    float* a1s = part + 64 * 16;      // S2, S3: A1[64][rank's 32 columns]
    float* w2s = a1s + 64 * K2;       // S2, S3: W2 tile [16][32 columns]
    float* w3s = w2s + 16 * K2;       // W3[o][h0 + u]
    float* aown = w3s + MAXO * 16;    // S2: A2 of this rank's 8 samples
    float* d2own = aown + 8 * 16;     // S3: D2 of this rank's 8 samples
    float* d3own = d2own + 8 * 16;    // S3: D3 of this rank's 8 samples
    float* d2s = d3own + 8 * MAXO;    // S3: D2 chunk; S4: D1 chunk
    float* d3s = d2s + 64 * 16;
    float* a2s = d3s + 64 * MAXO;
    float* b1s = a2s + 64 * 16;
    float* b2s = b1s + 16;
    float* ys = b2s + 16;             // S3: Y of this rank's 8 samples [8][16]

    MARK(0);
    const int kc = KC;
    const int k_lo = min(rank * KC, I), k_hi = min(k_lo + KC, I);
    const int h0 = c * 16, g0 = c * 16;
    const bool t1 = h0 < H1, t2 = c < T2;
    const int j_lo = min(rank * K2, H1), j_hi = min(j_lo + K2, H1);
    const int sa = 16 * (warp >> 1) + (lane >> 2), ua = 8 * (warp & 1) + (lane & 3);

    // ---- loads issued up front: X and W1 slices (S1), optimizer state (S3, S4), targets ----
    float4 xv[7], wv[2];
    if (t1) {
#pragma unroll
        for (int j = 0; j < 7; ++j) {
            int e = tid + 256 * j, r = e / 25, q = e % 25, col = k_lo + 4 * q;
            xv[j] = (e < 1600 && r < B && col < k_hi) ? *(const float4*)&a.X[r * I + col] : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            int e = tid + 256 * j, r = e / 25, q = e % 25, col = k_lo + 4 * q, h = h0 + r;
            wv[j] = (e < 400 && h < H1 && col < k_hi) ? *(const float4*)&W1[h * I + col] : make_float4(0, 0, 0, 0);
        }
    }
    // S4's W1 elements of this thread: unit u4 = tid >> 4, columns k = (tid & 15) + 16 j, j < 7.
    const int u4 = tid >> 4, kq = tid & 15;
    float m1[7];
#pragma unroll
    for (int j = 0; j < 7; ++j) {
        int k = kq + 16 * j, h = h0 + u4;
        m1[j] = (t1 && k < k_hi - k_lo && h < H1) ? W1[h * I + k_lo + k + dM] : 0.f;
    }
    // S3's W2 elements: unit u4, columns kq and kq + 16 of the rank's 32.
    float m2[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        int k = kq + 16 * j, h = g0 + u4;
        m2[j] = (t2 && j_lo + k < j_hi && h < H2) ? W2[h * H1 + j_lo + k + dM] : 0.f;
    }
    float m3 = 0.f, mb = 0.f, tv = 0.f;
    if (t2 && rank == 1 && tid < O * 16 && g0 + (tid & 15) < H2) m3 = W3[(tid >> 4) * H2 + g0 + (tid & 15) + dM];
    if (t2 && rank == 0 && tid < 16 && g0 + tid < H2) mb = b2[g0 + tid + dM];
    if (t1 && rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) mb = b1[h0 + tid - 32 + dM];
    const int ls = tid / 16, lo = tid % 16;   // S3 loss: (sample 8 rank + ls, output lo), tid < 128
    if (t2 && tid < 128 && lo < O && 8 * rank + ls < B) tv = a.T[(8 * rank + ls) * O + lo];

    // ---------------- S1: fc1 forward, H1 tile c ----------------
    if (t1) {
#pragma unroll
        for (int j = 0; j < 7; ++j) {
            int e = tid + 256 * j, r = e / 25, q = e % 25;
            if (e < 1600) *(float4*)&xs[r * KS + 4 * q] = xv[j];
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            int e = tid + 256 * j, r = e / 25, q = e % 25;
            if (e < 400) *(float4*)&ws[r * KS + 4 * q] = wv[j];
        }
        if (tid < 16) b1s[tid] = h0 + tid < H1 ? b1[h0 + tid] : 0.f;
        __syncthreads();
        float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
        const float4* xa = (const float4*)&xs[sa * KS]; const float4* xb = (const float4*)&xs[(sa + 8) * KS];
        const float4* wa = (const float4*)&ws[ua * KS]; const float4* wb = (const float4*)&ws[(ua + 4) * KS];
#pragma unroll 5
        for (int k = 0; k < KC / 4; ++k) {
            float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
            pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
            pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
            pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
            pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
        }
        part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
        part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
    }
    cl.sync();
    if (t1 && tid < 128) {
        int s = 8 * rank + (tid >> 4), u = tid & 15;
        float pv[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) pv[q] = cl.map_shared_rank(part, q)[s * 16 + u];
        float z = pv[0];
#pragma unroll
        for (int q = 1; q < 8; ++q) z += pv[q];
        z += b1s[u];
        if (s < B && h0 + u < H1) a.A1[s * H1 + h0 + u] = fmaxf(z, 0.f);
    }
    MARK(1);
    grid_barrier(a.sync, nblk);
    MARK(2);

    // ---------------- S2: fc2 forward, H2 tile c, + Yp ----------------
    if (t2) {
        float4 av[2], wv2 = make_float4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            int e = tid + 256 * j, r = e >> 3, q = e & 7, col = j_lo + 4 * q;
            av[j] = (r < B && col < j_hi) ? __ldcg((const float4*)&a.A1[r * H1 + col]) : make_float4(0, 0, 0, 0);
        }
        {
            int r = tid >> 3, q = tid & 7, col = j_lo + 4 * q, h = g0 + r;
            if (tid < 128 && h < H2 && col < j_hi) wv2 = *(const float4*)&W2[h * H1 + col];
        }
        float w3v = 0.f;
        if (tid < O * 16 && g0 + (tid & 15) < H2) w3v = W3[(tid >> 4) * H2 + g0 + (tid & 15)];
        float b2v = (tid < 16 && g0 + tid < H2) ? b2[g0 + tid] : 0.f;
#pragma unroll
        for (int j = 0; j < 2; ++j) *(float4*)&a1s[4 * (tid + 256 * j)] = av[j];
        if (tid < 128) *(float4*)&w2s[4 * tid] = wv2;
        if (tid < O * 16) w3s[tid] = w3v;
        if (tid < 16) b2s[tid] = b2v;
        __syncthreads();
        float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
        const float4* xa = (const float4*)&a1s[sa * K2]; const float4* xb = (const float4*)&a1s[(sa + 8) * K2];
        const float4* wa = (const float4*)&w2s[ua * K2]; const float4* wb = (const float4*)&w2s[(ua + 4) * K2];
#pragma unroll
        for (int k = 0; k < K2 / 4; ++k) {
            float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
            pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
            pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
            pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
            pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
        }
        part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
        part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
    }
    cl.sync();
    if (t2 && tid < 128) {
        int sl = tid >> 4, s = 8 * rank + sl, u = tid & 15;
        float pv[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) pv[q] = cl.map_shared_rank(part, q)[s * 16 + u];
        float z = pv[0];
#pragma unroll
        for (int q = 1; q < 8; ++q) z += pv[q];
        z += b2s[u];
        aown[sl * 16 + u] = (g0 + u < H2 && s < B) ? fmaxf(z, 0.f) : 0.f;
    }
    __syncthreads();
    if (t2 && tid < 128 && lo < O) {   // Yp[s][o][c] for this rank's 8 samples: thread (ls, lo)
        int s = 8 * rank + ls;
        float y = 0;
#pragma unroll
        for (int u = 0; u < 16; ++u) y = fmaf(aown[ls * 16 + u], w3s[lo * 16 + u], y);
        if (s < B) a.Yp[(s * O + lo) * 16 + c] = y;
    }
    MARK(3);
    grid_barrier(a.sync, nblk);
    MARK(4);

    // ---------------- S3: loss, D2, gW2, D1 partials (H2 tile c) ----------------
    if (t2) {
        if (tid < 128 && lo < O) {   // Y[s][o] = sum over the 16 tile slots (0 past T2) + b3
            int s = 8 * rank + ls;
            float y = 0.f;
            if (s < B) {
                const float4* yp = (const float4*)&a.Yp[(s * O + lo) * 16];
                float4 q0 = __ldcg(yp), q1 = __ldcg(yp + 1), q2 = __ldcg(yp + 2), q3 = __ldcg(yp + 3);
                float bb = __ldcg(&b3[lo]);
                y = q0.x + q0.y + q0.z + q0.w + q1.x + q1.y + q1.z + q1.w + q2.x + q2.y + q2.z + q2.w + q3.x + q3.y + q3.z + q3.w + bb;
            }
            ys[ls * 16 + lo] = y;
        }
        __syncthreads();
        if (tid < 128 && lo < O) {   // D3 = softmax(Y) - T, each (sample, output) thread
            int s = 8 * rank + ls;
            float d = 0.f;
            if (s < B) {
                float mx = ys[ls * 16];
                for (int o = 1; o < O; ++o) mx = fmaxf(mx, ys[ls * 16 + o]);
                float es = 0.f, eo = 0.f;
                for (int o = 0; o < O; ++o) { float e = exp2f((ys[ls * 16 + o] - mx) * 1.44269504f); es += e; if (o == lo) eo = e; }
                d = eo / es - tv;
                if (c == 0) a.Y[s * O + lo] = eo / es;
            }
            d3own[ls * MAXO + lo] = d;
        }
        __syncthreads();
        if (tid < 128) {   // D2 own slice
            int sl = tid >> 4, u = tid & 15;
            float d = 0;
            for (int o = 0; o < O; ++o) d = fmaf(d3own[sl * MAXO + o], w3s[o * 16 + u], d);
            d2own[sl * 16 + u] = aown[sl * 16 + u] > 0.f ? d : 0.f;
        }
    }
    cl.sync();
    if (t2) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {   // gather D2 and A2 of all 64 samples
            int e = tid + 256 * j, s = e >> 4, u = e & 15, q = s >> 3;
            d2s[e] = cl.map_shared_rank(d2own, q)[(s & 7) * 16 + u];
            a2s[e] = cl.map_shared_rank(aown, q)[(s & 7) * 16 + u];
        }
        for (int e = tid; e < 64 * O; e += 256) {
            int s = e / O, o = e % O, q = s >> 3;
            d3s[s * MAXO + o] = cl.map_shared_rank(d3own, q)[(s & 7) * MAXO + o];
        }
    }
    cl.sync();
    if (t2) {
        {   // gW2: unit u4, columns kq, kq + 16
            float g0s = 0, g1s = 0;
#pragma unroll 8
            for (int s = 0; s < 64; ++s) {
                float d = d2s[s * 16 + u4];
                g0s = fmaf(d, a1s[s * K2 + kq], g0s);
                g1s = fmaf(d, a1s[s * K2 + kq + 16], g1s);
            }
            float gg[2] = {g0s, g1s};
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                int k = kq + 16 * j, h = g0 + u4, col = j_lo + k;
                if (h < H2 && col < j_hi) {
                    float np = sgd_nesterov(w2s[u4 * K2 + k], m2[j], gg[j] * a.scale, a.lr, a.mu);
                    W2[h * H1 + col] = np; W2[h * H1 + col + dM] = m2[j];
                }
            }
        }
        {   // D1p: column k = tid & 31, samples (tid >> 5) + 8 j
            int k = tid & 31, s0 = tid >> 5;
            float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
            for (int u = 0; u < 16; ++u) {
                float w = w2s[u * K2 + k];
#pragma unroll
                for (int j = 0; j < 8; ++j) d[j] = fmaf(d2s[(s0 + 8 * j) * 16 + u], w, d[j]);
            }
            int col = j_lo + k;
            if (col < j_hi)
#pragma unroll
                for (int j = 0; j < 8; ++j) a.D1p[(c * 64 + s0 + 8 * j) * H1 + col] = d[j];
        }
        if (rank == 1 && tid < O * 16) {   // W3[o][g0 + u]
            int o = tid >> 4, u = tid & 15;
            float g = 0;
            for (int s = 0; s < 64; ++s) g = fmaf(d3s[s * MAXO + o], a2s[s * 16 + u], g);
            if (g0 + u < H2) {
                float np = sgd_nesterov(w3s[o * 16 + u], m3, g * a.scale, a.lr, a.mu);
                W3[o * H2 + g0 + u] = np; W3[o * H2 + g0 + u + dM] = m3;
            }
        }
        if (rank == 0 && tid < 16 && g0 + tid < H2) {   // b2
            float g = 0;
            for (int s = 0; s < 64; ++s) g += d2s[s * 16 + tid];
            float np = sgd_nesterov(b2s[tid], mb, g * a.scale, a.lr, a.mu);
            b2[g0 + tid] = np; b2[g0 + tid + dM] = mb;
        }
        if (c == 0 && rank == 2 && tid < O) {
            float g = 0;
            for (int s = 0; s < 64; ++s) g += d3s[s * MAXO + tid];
            a.gb3[tid] = g;
        }
    }
    MARK(5);
    grid_barrier(a.sync, nblk);
    MARK(6);

    // ---------------- S4: D1, gW1, b1 (H1 tile c) ----------------
    if (t1) {
        float dv[4][16], av[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            int e = tid + 256 * j, s = e >> 4, u = e & 15, h = h0 + u;
            bool ok = h < H1 && s < B;
#pragma unroll
            for (int q = 0; q < 16; ++q) dv[j][q] = (ok && q < T2) ? __ldcg(&a.D1p[(q * 64 + s) * H1 + h]) : 0.f;
            av[j] = ok ? __ldcg(&a.A1[s * H1 + h]) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            float d = dv[j][0];
#pragma unroll
            for (int q = 1; q < 16; ++q) d += dv[j][q];
            d2s[tid + 256 * j] = av[j] > 0.f ? d : 0.f;
        }
        __syncthreads();
        float g[7] = {0, 0, 0, 0, 0, 0, 0};
#pragma unroll 4
        for (int s = 0; s < 64; ++s) {
            float d = d2s[s * 16 + u4];
#pragma unroll
            for (int j = 0; j < 7; ++j) g[j] = fmaf(d, xs[s * KS + kq + 16 * j], g[j]);
        }
        const int h = h0 + u4;
#pragma unroll
        for (int j = 0; j < 7; ++j) {
            int k = kq + 16 * j;
            if (k < k_hi - k_lo && h < H1) {
                float np = sgd_nesterov(ws[u4 * KS + k], m1[j], g[j] * a.scale, a.lr, a.mu);
                W1[h * I + k_lo + k] = np; W1[h * I + k_lo + k + dM] = m1[j];
            }
        }
        if (rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) {
            int u = tid - 32;
            float gb = 0;
            for (int s = 0; s < 64; ++s) gb += d2s[s * 16 + u];
            float np = sgd_nesterov(b1s[u], mb, gb * a.scale, a.lr, a.mu);
            b1[h0 + u] = np; b1[h0 + u + dM] = mb;
        }
        if (c == 0 && rank == 1 && tid < O) {
            float* p = &b3[tid];
            float m = p[dM];
            float np = sgd_nesterov(*p, m, __ldcg(&a.gb3[tid]) * a.scale, a.lr, a.mu);
            p[dM] = m; *p = np;
        }
    }
    MARK(7);
    (void)kc;
}

// ---------------------------------------------------------------------------------------------
// v3: v2 with `steps` steps a launch (step j on batch j; no barrier between steps beyond the
// three a step: every parameter a stage reads was written by its own cluster, or before a grid
// barrier), the W1 and W2 tiles kept in shared memory and their optimizer state in registers
// across steps, and S3 without cluster barriers: every rank computes Y, D3 and D2 for all 64
// samples from L2 (A2 went to memory in S2); the next batch's X asked into L2 during S4.
// ---------------------------------------------------------------------------------------------
__global__ void __cluster_dims__(8, 1, 1) __launch_bounds__(256, 2) fc3_v3(Args a, int steps) {
    cg::cluster_group cl = cg::this_cluster();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rank = cl.block_rank();
    const int c = blockIdx.x / 8;
    const unsigned nblk = gridDim.x;
    const int B = a.B, I = a.I, H1 = a.H1, H2 = a.H2, O = a.O;
    float* W1 = a.P; float* b1 = W1 + H1 * I; float* W2 = b1 + H1; float* b2 = W2 + H2 * H1;
    float* W3 = b2 + H2; float* b3 = W3 + O * H2;
    const long dM = a.M - a.P;
    const int T2 = (H2 + 15) / 16;

    extern __shared__ __align__(16) float sm[];
    float* xs = sm;                   // S1, S4: X[64][rank's columns]
    float* ws = xs + 64 * KS;         // W1 tile [16][rank's columns], kept across steps
    float* part = ws + 16 * KS;       // partial sums (S1, S2)
    float* a1s = part + 64 * 16;      // S2, S3: A1[64][rank's 32 columns]
    float* w2s = a1s + 64 * K2;       // W2 tile [16][32 columns], kept across steps
    float* w3s = w2s + 16 * K2;       // W3[o][g0 + u]
    float* aown = w3s + MAXO * 16;    // S2: A2 of this rank's 8 samples
    float* d2own = aown + 8 * 16;     // (unused)
    float* d3own = d2own + 8 * 16;    // (unused)
    float* d2s = d3own + 8 * MAXO;    // S3: D2 chunk; S4: D1 chunk
    float* d3s = d2s + 64 * 16;       // S3: D3 [64][16]
    float* a2s = d3s + 64 * MAXO;     // S3: A2 [64][16]
    float* b1s = a2s + 64 * 16;
    float* b2s = b1s + 16;
    float* ys = b2s + 16;             // (unused)
    float* ms1 = ys + 128;            // W1 tile's optimizer state [16][KS], kept across steps
    float* ms2 = ms1 + 16 * KS;       // W2 tile's [16][32]

    const int k_lo = min(rank * KC, I), k_hi = min(k_lo + KC, I);
    const int h0 = c * 16, g0 = c * 16;
    const bool t1 = h0 < H1, t2 = c < T2;
    const int j_lo = min(rank * K2, H1), j_hi = min(j_lo + K2, H1);
    const int sa = 16 * (warp >> 1) + (lane >> 2), ua = 8 * (warp & 1) + (lane & 3);
    const int u4 = tid >> 4, kq = tid & 15;

    // ---- once a launch: the W1 and W2 tiles, b1, and the optimizer state of this thread's elements ----
    if (t1) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            int e = tid + 256 * j, r = e / 25, q = e % 25, col = k_lo + 4 * q, h = h0 + r;
            if (e < 400) *(float4*)&ws[r * KS + 4 * q] = (h < H1 && col < k_hi) ? *(const float4*)&W1[h * I + col] : make_float4(0, 0, 0, 0);
        }
        if (tid < 16) b1s[tid] = h0 + tid < H1 ? b1[h0 + tid] : 0.f;
    }
    if (t2 && tid < 128) {
        int r = tid >> 3, q = tid & 7, col = j_lo + 4 * q, h = g0 + r;
        *(float4*)&w2s[4 * tid] = (h < H2 && col < j_hi) ? *(const float4*)&W2[h * H1 + col] : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int j = 0; j < 7; ++j) {
        int k = kq + 16 * j, h = h0 + u4;
        if (k < KS) ms1[u4 * KS + k] = (t1 && k < k_hi - k_lo && h < H1) ? W1[h * I + k_lo + k + dM] : 0.f;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        int k = kq + 16 * j, h = g0 + u4;
        ms2[u4 * K2 + k] = (t2 && j_lo + k < j_hi && h < H2) ? W2[h * H1 + j_lo + k + dM] : 0.f;
    }
    float m3 = 0.f, mb = 0.f, mb3 = 0.f;
    if (t2 && rank == 1 && tid < O * 16 && g0 + (tid & 15) < H2) m3 = W3[(tid >> 4) * H2 + g0 + (tid & 15) + dM];
    if (t2 && rank == 0 && tid < 16 && g0 + tid < H2) mb = b2[g0 + tid + dM];
    if (t1 && rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) mb = b1[h0 + tid - 32 + dM];
    if (c == 0 && rank == 1 && tid >= 192 && tid < 192 + O) mb3 = b3[tid - 192 + dM];
    __syncthreads();

    for (int step = 0; step < steps; ++step) {
        const float* X = a.X + size_t(step) * B * I;
        const float* T = a.T + size_t(step) * B * O;
        MARK(0);
        // ---------------- S1: fc1 forward, H1 tile c ----------------
        float w3v = 0.f, b2v = 0.f;
        if (t2) {   // S2's W3 columns and b2, asked for now (written before the last grid barrier)
            if (tid < O * 16 && g0 + (tid & 15) < H2) w3v = __ldcg(&W3[(tid >> 4) * H2 + g0 + (tid & 15)]);
            if (tid < 16 && g0 + tid < H2) b2v = __ldcg(&b2[g0 + tid]);
        }
        if (t1) {
            float4 xv[7];
#pragma unroll
            for (int j = 0; j < 7; ++j) {
                int e = tid + 256 * j, r = e / 25, q = e % 25, col = k_lo + 4 * q;
                xv[j] = (e < 1600 && r < B && col < k_hi) ? __ldg((const float4*)&X[r * I + col]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < 7; ++j) {
                int e = tid + 256 * j, r = e / 25, q = e % 25;
                if (e < 1600) *(float4*)&xs[r * KS + 4 * q] = xv[j];
            }
            __syncthreads();
            float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
            const float4* xa = (const float4*)&xs[sa * KS]; const float4* xb = (const float4*)&xs[(sa + 8) * KS];
            const float4* wa = (const float4*)&ws[ua * KS]; const float4* wb = (const float4*)&ws[(ua + 4) * KS];
#pragma unroll 2
            for (int k = 0; k < KC / 4; ++k) {
                float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
                pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
                pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
                pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
                pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
            }
            part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
            part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
        }
        cl.sync();   // also publishes rank 0's b1s stores of the step before
        if (t1 && tid < 128) {
            int s = 8 * rank + (tid >> 4), u = tid & 15;
            float pv[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) pv[q] = cl.map_shared_rank(part, q)[s * 16 + u];
            float z = pv[0];
#pragma unroll
            for (int q = 1; q < 8; ++q) z += pv[q];
            z += b1s[u];
            if (s < B && h0 + u < H1) a.A1[s * H1 + h0 + u] = fmaxf(z, 0.f);
        }
        MARK(1);
        grid_barrier(a.sync, nblk);
        MARK(2);

        // ---------------- S2: fc2 forward, H2 tile c, + Yp; A2 to memory ----------------
        if (t2) {
            float4 av[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                int e = tid + 256 * j, r = e >> 3, q = e & 7, col = j_lo + 4 * q;
                av[j] = (r < B && col < j_hi) ? __ldcg((const float4*)&a.A1[r * H1 + col]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) *(float4*)&a1s[4 * (tid + 256 * j)] = av[j];
            if (tid < O * 16) w3s[tid] = w3v;
            if (tid < 16) b2s[tid] = b2v;
            __syncthreads();
            float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
            const float4* xa = (const float4*)&a1s[sa * K2]; const float4* xb = (const float4*)&a1s[(sa + 8) * K2];
            const float4* wa = (const float4*)&w2s[ua * K2]; const float4* wb = (const float4*)&w2s[(ua + 4) * K2];
#pragma unroll
            for (int k = 0; k < K2 / 4; ++k) {
                float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
                pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
                pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
                pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
                pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
            }
            part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
            part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
        }
        cl.sync();
        if (t2 && tid < 128) {
            int sl = tid >> 4, s = 8 * rank + sl, u = tid & 15;
            float pv[8];
#pragma unroll
            for (int q = 0; q < 8; ++q) pv[q] = cl.map_shared_rank(part, q)[s * 16 + u];
            float z = pv[0];
#pragma unroll
            for (int q = 1; q < 8; ++q) z += pv[q];
            z += b2s[u];
            float v = (g0 + u < H2 && s < B) ? fmaxf(z, 0.f) : 0.f;
            aown[sl * 16 + u] = v;
            a.A2[s * 16 * T2 + c * 16 + u] = v;   // A2 as [64][16 T2] (zero past H2 and B)
        }
        __syncthreads();
        const int ls = tid >> 4, lo = tid & 15;
        if (t2 && tid < 128 && lo < O) {
            int s = 8 * rank + ls;
            float y = 0;
#pragma unroll
            for (int u = 0; u < 16; ++u) y = fmaf(aown[ls * 16 + u], w3s[lo * 16 + u], y);
            if (s < B) a.Yp[(s * O + lo) * 16 + c] = y;
        }
        MARK(3);
        grid_barrier(a.sync, nblk);
        MARK(4);

        // ---------------- S3: loss, D2, gW2, D1 partials (H2 tile c), no cluster barrier ----------------
        if (t2) {
            // 64 samples x 16 output slots: thread (s = tid >> 2, o = 4 (tid & 3) .. + 3)
            const int s = tid >> 2, ob = 4 * (tid & 3);
            float4 q[4][2]; float tv[4], bb[4];   // tile slots 0..7 (H2 <= 128)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int o = ob + i; bool ok = s < B && o < O;
                const float4* yp = (const float4*)&a.Yp[(s * O + (ok ? o : 0)) * 16];
#pragma unroll
                for (int r = 0; r < 2; ++r) q[i][r] = ok ? __ldcg(yp + r) : make_float4(0, 0, 0, 0);
                tv[i] = ok ? T[s * O + o] : 0.f;
                bb[i] = o < O ? __ldcg(&b3[o]) : 0.f;
            }
            float4 av2[4];   // A2 [64][16]: 1024 floats, one float4 a thread
            {
                int e = tid, r = e >> 2, qq = e & 3;
                av2[0] = __ldcg((const float4*)&a.A2[r * 16 * T2 + c * 16 + 4 * qq]);
            }
            float y[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float v = 0.f;
#pragma unroll
                for (int r = 0; r < 2; ++r) v += q[i][r].x + q[i][r].y + q[i][r].z + q[i][r].w;
                y[i] = v + bb[i];
            }
            // softmax over a sample's O outputs: the 4 threads of a sample hold 16 slots
            loss_rows(y, tv, s, ob, B, O, d3s, c == 0 && rank == 0 ? a.Y : nullptr);
            *(float4*)&a2s[4 * tid] = av2[0];
            __syncthreads();
            // D2 [64][16]: thread (s, units 4 (tid & 3) .. + 3)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int u = ob + i;
                float d = 0.f;
                for (int o = 0; o < O; ++o) d = fmaf(d3s[s * 16 + o], w3s[o * 16 + u], d);
                d2s[s * 16 + u] = a2s[s * 16 + u] > 0.f ? d : 0.f;
            }
            __syncthreads();
            {   // gW2: unit u4, columns kq, kq + 16
                float g0s = 0, g1s = 0;
#pragma unroll 8
                for (int s2 = 0; s2 < 64; ++s2) {
                    float d = d2s[s2 * 16 + u4];
                    g0s = fmaf(d, a1s[s2 * K2 + kq], g0s);
                    g1s = fmaf(d, a1s[s2 * K2 + kq + 16], g1s);
                }
                // D1p with the old W2 (read before this thread's update below; the other
                // threads' elements: a barrier first)
                int k = tid & 31, s0 = tid >> 5;
                float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
                for (int u = 0; u < 16; ++u) {
                    float w = w2s[u * K2 + k];
#pragma unroll
                    for (int j = 0; j < 8; ++j) d[j] = fmaf(d2s[(s0 + 8 * j) * 16 + u], w, d[j]);
                }
                int col = j_lo + k;
                if (col < j_hi)
#pragma unroll
                    for (int j = 0; j < 8; ++j) a.D1p[(c * 64 + s0 + 8 * j) * H1 + col] = d[j];
                __syncthreads();
                float gg[2] = {g0s, g1s};
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    int kk = kq + 16 * j, h = g0 + u4, cc = j_lo + kk;
                    if (h < H2 && cc < j_hi) {
                        float m = ms2[u4 * K2 + kk];
                        float np = sgd_nesterov(w2s[u4 * K2 + kk], m, gg[j] * a.scale, a.lr, a.mu);
                        w2s[u4 * K2 + kk] = np; ms2[u4 * K2 + kk] = m;
                        W2[h * H1 + cc] = np; W2[h * H1 + cc + dM] = m;
                    }
                }
            }
            if (rank == 1 && tid < O * 16) {   // W3[o][g0 + u]
                int o = tid >> 4, u = tid & 15;
                float g = 0;
                for (int s2 = 0; s2 < 64; ++s2) g = fmaf(d3s[s2 * 16 + o], a2s[s2 * 16 + u], g);
                if (g0 + u < H2) {
                    float np = sgd_nesterov(w3s[o * 16 + u], m3, g * a.scale, a.lr, a.mu);
                    W3[o * H2 + g0 + u] = np; W3[o * H2 + g0 + u + dM] = m3;
                }
            }
            if (rank == 0 && tid < 16 && g0 + tid < H2) {   // b2
                float g = 0;
                for (int s2 = 0; s2 < 64; ++s2) g += d2s[s2 * 16 + tid];
                float np = sgd_nesterov(b2s[tid], mb, g * a.scale, a.lr, a.mu);
                b2[g0 + tid] = np; b2[g0 + tid + dM] = mb;
            }
            if (c == 0 && rank == 2 && tid < O) {
                float g = 0;
                for (int s2 = 0; s2 < 64; ++s2) g += d3s[s2 * 16 + tid];
                a.gb3[tid] = g;
            }
        }
        MARK(5);
        grid_barrier(a.sync, nblk);
        MARK(6);

        // ---------------- S4: D1, gW1, b1 (H1 tile c) ----------------
        if (t1) {
#pragma unroll 1
            for (int jp = 0; jp < 4; jp += 2) {
            float dv[2][8], av[2];   // T2 <= 8
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int j = jp + jj;
                int e = tid + 256 * j, s = e >> 4, u = e & 15, h = h0 + u;
                bool ok = h < H1 && s < B;
#pragma unroll
                for (int q = 0; q < 8; ++q) dv[jj][q] = (ok && q < T2) ? __ldcg(&a.D1p[(q * 64 + s) * H1 + h]) : 0.f;
                av[jj] = ok ? __ldcg(&a.A1[s * H1 + h]) : 0.f;
            }
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                float d = dv[jj][0];
#pragma unroll
                for (int q = 1; q < 8; ++q) d += dv[jj][q];
                d2s[tid + 256 * (jp + jj)] = av[jj] > 0.f ? d : 0.f;
            }
            }
            if (step + 1 < steps && tid < 64) {   // the next batch's X rows into L2
                const char* nx = (const char*)(X + size_t(B) * I + tid * I + k_lo);
                for (int off = 0; off < 4 * (k_hi - k_lo); off += 128) asm volatile("prefetch.global.L2 [%0];" :: "l"(nx + off));
            }
            __syncthreads();
            float g[7] = {0, 0, 0, 0, 0, 0, 0};
#pragma unroll 4
            for (int s = 0; s < 64; ++s) {
                float d = d2s[s * 16 + u4];
#pragma unroll
                for (int j = 0; j < 7; ++j) g[j] = fmaf(d, xs[s * KS + kq + 16 * j], g[j]);
            }
            const int h = h0 + u4;
#pragma unroll
            for (int j = 0; j < 7; ++j) {
                int k = kq + 16 * j;
                if (k < k_hi - k_lo && h < H1) {
                    float m = ms1[u4 * KS + k];
                    float np = sgd_nesterov(ws[u4 * KS + k], m, g[j] * a.scale, a.lr, a.mu);
                    ws[u4 * KS + k] = np; ms1[u4 * KS + k] = m;
                    W1[h * I + k_lo + k] = np; W1[h * I + k_lo + k + dM] = m;
                }
            }
            if (rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) {
                int u = tid - 32;
                float gb = 0;
                for (int s = 0; s < 64; ++s) gb += d2s[s * 16 + u];
                float np = sgd_nesterov(b1s[u], mb, gb * a.scale, a.lr, a.mu);
                b1[h0 + u] = np; b1[h0 + u + dM] = mb;
#pragma unroll
                for (int r = 0; r < 8; ++r) cl.map_shared_rank(b1s, r)[u] = np;   // every rank's copy
            }
            if (c == 0 && rank == 1 && tid >= 192 && tid < 192 + O) {
                int o = tid - 192;
                float np = sgd_nesterov(b3[o], mb3, __ldcg(&a.gb3[o]) * a.scale, a.lr, a.mu);
                b3[o] = np; b3[o + dM] = mb3;
            }
        }
        MARK(7);
        __syncthreads();   // xs and d2s are rewritten by the next step
    }
    cl.sync();   // no block leaves while a peer may still write its shared memory
}

// ---------------------------------------------------------------------------------------------
// v4: v3 with R ranks a cluster (the launch's cluster size; run with R = 4): 16 clusters of 4
// at one block a SM (the H100 holds 30 clusters of 4, 15 of 8), each rank taking I / R columns
// in S1 and S4 and H1 / R in S2 and S3, and 64 / R samples in the joins.
// ---------------------------------------------------------------------------------------------
template <int R>
__global__ void __launch_bounds__(256, 1) fc3_v4(Args a, int steps) {
    if (cg::this_cluster().num_blocks() != R) __trap();   // launched with the cluster attribute of R
    constexpr int KCR = ((784 / R + 3) / 4) * 4;   // columns of I a rank (I <= R KCR)
    constexpr int KSR = KCR;                       // KCR / 4 odd for R = 4 (49) and 8 (25)
    constexpr int K2R = 256 / R;                   // columns of H1 a rank (H1 <= 256)
    constexpr int SPR = 64 / R;                    // samples a rank finishes in a join
    constexpr int NX = (64 * KCR / 4 + 255) / 256; // X float4s a thread
    constexpr int NW = (16 * KCR / 4 + 255) / 256; // W1-tile float4s a thread
    constexpr int NC1 = (KCR + 15) / 16;           // S4 columns a thread
    constexpr int NA = 64 * K2R / 4 / 256;         // A1 float4s a thread (S2)
    constexpr int NC2 = K2R / 16;                  // S3 W2 columns a thread
    constexpr int ND = K2R / 4;                    // S3 D1p samples a thread
    cg::cluster_group cl = cg::this_cluster();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rank = cl.block_rank();
    const int c = blockIdx.x / R;
    const unsigned nblk = gridDim.x;
    const int B = a.B, I = a.I, H1 = a.H1, H2 = a.H2, O = a.O;
    float* W1 = a.P; float* b1 = W1 + H1 * I; float* W2 = b1 + H1; float* b2 = W2 + H2 * H1;
    float* W3 = b2 + H2; float* b3 = W3 + O * H2;
    const long dM = a.M - a.P;
    const int T2 = (H2 + 15) / 16;

    extern __shared__ __align__(16) float sm[];
    float* xs = sm;                   // X[64][rank's columns]
    float* ws = xs + 64 * KSR;        // W1 tile [16][rank's columns], kept across steps
    float* ms1 = ws + 16 * KSR;       // its optimizer state
    float* part = ms1 + 16 * KSR;     // partial sums [64][16] (S1, S2)
    float* a1s = part + 64 * 16;      // A1[64][rank's K2R columns]
    float* w2s = a1s + 64 * K2R;      // W2 tile [16][K2R], kept across steps
    float* ms2 = w2s + 16 * K2R;      // its optimizer state
    float* w3s = ms2 + 16 * K2R;      // W3[o][g0 + u] [16][16]
    float* aown = w3s + 16 * 16;      // A2 of this rank's SPR samples [SPR][16]
    float* d2s = aown + SPR * 16;     // S3: D2 [64][16]; S4: D1 [64][16]
    float* d3s = d2s + 64 * 16;       // S3: D3 [64][16]
    float* a2s = d3s + 64 * 16;       // S3: A2 [64][16]
    float* b1s = a2s + 64 * 16;
    float* b2s = b1s + 16;

    const int k_lo = min(rank * KCR, I), k_hi = min(k_lo + KCR, I);
    const int h0 = c * 16, g0 = c * 16;
    const bool t1 = h0 < H1, t2 = c < T2;
    const int j_lo = min(rank * K2R, H1), j_hi = min(j_lo + K2R, H1);
    const int sa = 16 * (warp >> 1) + (lane >> 2), ua = 8 * (warp & 1) + (lane & 3);
    const int u4 = tid >> 4, kq = tid & 15;

    if (t1) {
#pragma unroll
        for (int j = 0; j < NW; ++j) {
            int e = tid + 256 * j, r = e / (KCR / 4), q = e % (KCR / 4), col = k_lo + 4 * q, h = h0 + r;
            if (e < 16 * KCR / 4)
                *(float4*)&ws[r * KSR + 4 * q] = (h < H1 && col < k_hi) ? *(const float4*)&W1[h * I + col] : make_float4(0, 0, 0, 0);
        }
        if (tid < 16) b1s[tid] = h0 + tid < H1 ? b1[h0 + tid] : 0.f;
#pragma unroll
        for (int j = 0; j < NC1; ++j) {
            int k = kq + 16 * j, h = h0 + u4;
            if (k < KSR) ms1[u4 * KSR + k] = (k < k_hi - k_lo && h < H1) ? W1[h * I + k_lo + k + dM] : 0.f;
        }
    }
    if (t2) {
        for (int e = tid; e < 16 * K2R / 4; e += 256) {
            int r = e / (K2R / 4), q = e % (K2R / 4), col = j_lo + 4 * q, h = g0 + r;
            *(float4*)&w2s[4 * e] = (h < H2 && col < j_hi) ? *(const float4*)&W2[h * H1 + col] : make_float4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < NC2; ++j) {
            int k = kq + 16 * j, h = g0 + u4;
            ms2[u4 * K2R + k] = (j_lo + k < j_hi && h < H2) ? W2[h * H1 + j_lo + k + dM] : 0.f;
        }
    }
    float m3 = 0.f, mb = 0.f, mb3 = 0.f;
    if (t2 && rank == 1 && tid < O * 16 && g0 + (tid & 15) < H2) m3 = W3[(tid >> 4) * H2 + g0 + (tid & 15) + dM];
    if (t2 && rank == 0 && tid < 16 && g0 + tid < H2) mb = b2[g0 + tid + dM];
    if (t1 && rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) mb = b1[h0 + tid - 32 + dM];
    if (c == 0 && rank == 1 && tid >= 192 && tid < 192 + O) mb3 = b3[tid - 192 + dM];
    __syncthreads();

    for (int step = 0; step < steps; ++step) {
        const float* X = a.X + size_t(step) * B * I;
        const float* T = a.T + size_t(step) * B * O;
        MARK(0);
        // ---------------- S1 ----------------
        float w3v = 0.f, b2v = 0.f;
        if (t2) {
            if (tid < O * 16 && g0 + (tid & 15) < H2) w3v = __ldcg(&W3[(tid >> 4) * H2 + g0 + (tid & 15)]);
            if (tid < 16 && g0 + tid < H2) b2v = __ldcg(&b2[g0 + tid]);
        }
        if (t1) {
            float4 xv[NX];
#pragma unroll
            for (int j = 0; j < NX; ++j) {
                int e = tid + 256 * j, r = e / (KCR / 4), q = e % (KCR / 4), col = k_lo + 4 * q;
                xv[j] = (e < 64 * KCR / 4 && r < B && col < k_hi) ? __ldg((const float4*)&X[r * I + col]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < NX; ++j) {
                int e = tid + 256 * j, r = e / (KCR / 4), q = e % (KCR / 4);
                if (e < 64 * KCR / 4) *(float4*)&xs[r * KSR + 4 * q] = xv[j];
            }
            __syncthreads();
            float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
            const float4* xa = (const float4*)&xs[sa * KSR]; const float4* xb = (const float4*)&xs[(sa + 8) * KSR];
            const float4* wa = (const float4*)&ws[ua * KSR]; const float4* wb = (const float4*)&ws[(ua + 4) * KSR];
#pragma unroll 7
            for (int k = 0; k < KCR / 4; ++k) {
                float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
                pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
                pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
                pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
                pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
            }
            part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
            part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
        }
        cl.sync();
        if (t1 && tid < SPR * 16) {
            int s = SPR * rank + (tid >> 4), u = tid & 15;
            float pv[R];
#pragma unroll
            for (int q = 0; q < R; ++q) pv[q] = cl.map_shared_rank(part, q)[s * 16 + u];
            float z = pv[0];
#pragma unroll
            for (int q = 1; q < R; ++q) z += pv[q];
            z += b1s[u];
            if (s < B && h0 + u < H1) a.A1[s * H1 + h0 + u] = fmaxf(z, 0.f);
        }
        MARK(1);
        grid_barrier(a.sync, nblk);
        MARK(2);
        // ---------------- S2 ----------------
        if (t2) {
            float4 av[NA];
#pragma unroll
            for (int j = 0; j < NA; ++j) {
                int e = tid + 256 * j, r = e / (K2R / 4), q = e % (K2R / 4), col = j_lo + 4 * q;
                av[j] = (r < B && col < j_hi) ? __ldcg((const float4*)&a.A1[r * H1 + col]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < NA; ++j) *(float4*)&a1s[4 * (tid + 256 * j)] = av[j];
            if (tid < O * 16) w3s[tid] = w3v;
            if (tid < 16) b2s[tid] = b2v;
            __syncthreads();
            float pAA = 0, pAB = 0, pBA = 0, pBB = 0;
            const float4* xa = (const float4*)&a1s[sa * K2R]; const float4* xb = (const float4*)&a1s[(sa + 8) * K2R];
            const float4* wa = (const float4*)&w2s[ua * K2R]; const float4* wb = (const float4*)&w2s[(ua + 4) * K2R];
#pragma unroll
            for (int k = 0; k < K2R / 4; ++k) {
                float4 x0 = xa[k], x1 = xb[k], w0 = wa[k], w1 = wb[k];
                pAA = fmaf(x0.x, w0.x, pAA); pAA = fmaf(x0.y, w0.y, pAA); pAA = fmaf(x0.z, w0.z, pAA); pAA = fmaf(x0.w, w0.w, pAA);
                pAB = fmaf(x0.x, w1.x, pAB); pAB = fmaf(x0.y, w1.y, pAB); pAB = fmaf(x0.z, w1.z, pAB); pAB = fmaf(x0.w, w1.w, pAB);
                pBA = fmaf(x1.x, w0.x, pBA); pBA = fmaf(x1.y, w0.y, pBA); pBA = fmaf(x1.z, w0.z, pBA); pBA = fmaf(x1.w, w0.w, pBA);
                pBB = fmaf(x1.x, w1.x, pBB); pBB = fmaf(x1.y, w1.y, pBB); pBB = fmaf(x1.z, w1.z, pBB); pBB = fmaf(x1.w, w1.w, pBB);
            }
            part[sa * 16 + ua] = pAA; part[sa * 16 + ua + 4] = pAB;
            part[(sa + 8) * 16 + ua] = pBA; part[(sa + 8) * 16 + ua + 4] = pBB;
        }
        cl.sync();
        if (t2 && tid < SPR * 16) {
            int sl = tid >> 4, s = SPR * rank + sl, u = tid & 15;
            float pv[R];
#pragma unroll
            for (int q = 0; q < R; ++q) pv[q] = cl.map_shared_rank(part, q)[s * 16 + u];
            float z = pv[0];
#pragma unroll
            for (int q = 1; q < R; ++q) z += pv[q];
            z += b2s[u];
            float v = (g0 + u < H2 && s < B) ? fmaxf(z, 0.f) : 0.f;
            aown[sl * 16 + u] = v;
            a.A2[s * 16 * T2 + c * 16 + u] = v;
        }
        __syncthreads();
        {
            const int ls = tid >> 4, lo = tid & 15;
            if (t2 && tid < SPR * 16 && lo < O) {
                int s = SPR * rank + ls;
                float y = 0;
#pragma unroll
                for (int u = 0; u < 16; ++u) y = fmaf(aown[ls * 16 + u], w3s[lo * 16 + u], y);
                if (s < B) a.Yp[(s * O + lo) * 16 + c] = y;
            }
        }
        MARK(3);
        grid_barrier(a.sync, nblk);
        MARK(4);
        // ---------------- S3 ----------------
        if (t2) {
            const int s = tid >> 2, ob = 4 * (tid & 3);
            float4 q[4][2]; float tv[4], bb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int o = ob + i; bool ok = s < B && o < O;
                const float4* yp = (const float4*)&a.Yp[(s * O + (ok ? o : 0)) * 16];
#pragma unroll
                for (int r = 0; r < 2; ++r) q[i][r] = ok ? __ldcg(yp + r) : make_float4(0, 0, 0, 0);
                tv[i] = ok ? T[s * O + o] : 0.f;
                bb[i] = o < O ? __ldcg(&b3[o]) : 0.f;
            }
            float4 av2 = __ldcg((const float4*)&a.A2[(tid >> 2) * 16 * T2 + c * 16 + 4 * (tid & 3)]);
            float y[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float v = 0.f;
#pragma unroll
                for (int r = 0; r < 2; ++r) v += q[i][r].x + q[i][r].y + q[i][r].z + q[i][r].w;
                y[i] = v + bb[i];
            }
            loss_rows(y, tv, s, ob, B, O, d3s, c == 0 && rank == 0 ? a.Y : nullptr);
            *(float4*)&a2s[4 * tid] = av2;
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int u = ob + i;
                float d = 0.f;
                for (int o = 0; o < O; ++o) d = fmaf(d3s[s * 16 + o], w3s[o * 16 + u], d);
                d2s[s * 16 + u] = a2s[s * 16 + u] > 0.f ? d : 0.f;
            }
            __syncthreads();
            float gg[NC2];
#pragma unroll
            for (int j = 0; j < NC2; ++j) gg[j] = 0.f;
#pragma unroll 4
            for (int s2 = 0; s2 < 64; ++s2) {
                float d = d2s[s2 * 16 + u4];
#pragma unroll
                for (int j = 0; j < NC2; ++j) gg[j] = fmaf(d, a1s[s2 * K2R + kq + 16 * j], gg[j]);
            }
            {
                const int k = tid % K2R, s0 = tid / K2R, sstep = 256 / K2R;
                float d[ND];
#pragma unroll
                for (int j = 0; j < ND; ++j) d[j] = 0.f;
#pragma unroll
                for (int u = 0; u < 16; ++u) {
                    float w = w2s[u * K2R + k];
#pragma unroll
                    for (int j = 0; j < ND; ++j) d[j] = fmaf(d2s[(s0 + sstep * j) * 16 + u], w, d[j]);
                }
                int col = j_lo + k;
                if (col < j_hi)
#pragma unroll
                    for (int j = 0; j < ND; ++j) a.D1p[(c * 64 + s0 + sstep * j) * H1 + col] = d[j];
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < NC2; ++j) {
                int kk = kq + 16 * j, h = g0 + u4, cc = j_lo + kk;
                if (h < H2 && cc < j_hi) {
                    float m = ms2[u4 * K2R + kk];
                    float np = sgd_nesterov(w2s[u4 * K2R + kk], m, gg[j] * a.scale, a.lr, a.mu);
                    w2s[u4 * K2R + kk] = np; ms2[u4 * K2R + kk] = m;
                    W2[h * H1 + cc] = np; W2[h * H1 + cc + dM] = m;
                }
            }
            if (rank == 1 && tid < O * 16) {
                int o = tid >> 4, u = tid & 15;
                float g = 0;
                for (int s2 = 0; s2 < 64; ++s2) g = fmaf(d3s[s2 * 16 + o], a2s[s2 * 16 + u], g);
                if (g0 + u < H2) {
                    float np = sgd_nesterov(w3s[o * 16 + u], m3, g * a.scale, a.lr, a.mu);
                    W3[o * H2 + g0 + u] = np; W3[o * H2 + g0 + u + dM] = m3;
                }
            }
            if (rank == 0 && tid < 16 && g0 + tid < H2) {
                float g = 0;
                for (int s2 = 0; s2 < 64; ++s2) g += d2s[s2 * 16 + tid];
                float np = sgd_nesterov(b2s[tid], mb, g * a.scale, a.lr, a.mu);
                b2[g0 + tid] = np; b2[g0 + tid + dM] = mb;
            }
            if (c == 0 && rank == 2 && tid < O) {
                float g = 0;
                for (int s2 = 0; s2 < 64; ++s2) g += d3s[s2 * 16 + tid];
                a.gb3[tid] = g;
            }
        }
        MARK(5);
        grid_barrier(a.sync, nblk);
        MARK(6);
        // ---------------- S4 ----------------
        if (t1) {
            float dv[4][8], av[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = tid + 256 * j, s = e >> 4, u = e & 15, h = h0 + u;
                bool ok = h < H1 && s < B;
#pragma unroll
                for (int q = 0; q < 8; ++q) dv[j][q] = (ok && q < T2) ? __ldcg(&a.D1p[(q * 64 + s) * H1 + h]) : 0.f;
                av[j] = ok ? __ldcg(&a.A1[s * H1 + h]) : 0.f;
            }
            if (step + 1 < steps && tid < 64) {
                const char* nx = (const char*)(X + size_t(B) * I + tid * I + k_lo);
                for (int off = 0; off < 4 * (k_hi - k_lo); off += 128) asm volatile("prefetch.global.L2 [%0];" :: "l"(nx + off));
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float d = dv[j][0];
#pragma unroll
                for (int q = 1; q < 8; ++q) d += dv[j][q];
                d2s[tid + 256 * j] = av[j] > 0.f ? d : 0.f;
            }
            __syncthreads();
            float g[NC1];
#pragma unroll
            for (int j = 0; j < NC1; ++j) g[j] = 0.f;
#pragma unroll 2
            for (int s = 0; s < 64; ++s) {
                float d = d2s[s * 16 + u4];
#pragma unroll
                for (int j = 0; j < NC1; ++j) g[j] = fmaf(d, xs[s * KSR + kq + 16 * j], g[j]);
            }
            const int h = h0 + u4;
#pragma unroll
            for (int j = 0; j < NC1; ++j) {
                int k = kq + 16 * j;
                if (k < k_hi - k_lo && h < H1) {
                    float m = ms1[u4 * KSR + k];
                    float np = sgd_nesterov(ws[u4 * KSR + k], m, g[j] * a.scale, a.lr, a.mu);
                    ws[u4 * KSR + k] = np; ms1[u4 * KSR + k] = m;
                    W1[h * I + k_lo + k] = np; W1[h * I + k_lo + k + dM] = m;
                }
            }
            if (rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) {
                int u = tid - 32;
                float gb = 0;
                for (int s = 0; s < 64; ++s) gb += d2s[s * 16 + u];
                float np = sgd_nesterov(b1s[u], mb, gb * a.scale, a.lr, a.mu);
                b1[h0 + u] = np; b1[h0 + u + dM] = mb;
#pragma unroll
                for (int r = 0; r < R; ++r) cl.map_shared_rank(b1s, r)[u] = np;
            }
            if (c == 0 && rank == 1 && tid >= 192 && tid < 192 + O) {
                int o = tid - 192;
                float np = sgd_nesterov(b3[o], mb3, __ldcg(&a.gb3[o]) * a.scale, a.lr, a.mu);
                b3[o] = np; b3[o + dM] = mb3;
            }
        }
        MARK(7);
        __syncthreads();
    }
    cl.sync();
}
template <int R> constexpr int v4_smem_floats() {
    constexpr int KCR = ((784 / R + 3) / 4) * 4, K2R = 256 / R;
    return 3 * 16 * KCR + 64 * KCR + 64 * 16 + 64 * K2R + 2 * 16 * K2R + 256 + (64 / R) * 16 + 3 * 64 * 16 + 32;
}

// ---------------------------------------------------------------------------------------------
// v5 (18.57 us a step on an H200, the header's figures): v4 (16 clusters of 4,
// one block a SM) with every product on TF32 mma.sync.m16n8k8 (operands cvt.rna.tf32.f32, FP32
// accumulators), as the tc set's kernels: S1's fc1 forward (64 x 16 x 196 a rank: 8 warps, one
// m16n8 tile each, 25 k steps on two chains), S2's fc2 forward, S3's fc2 weight gradient and
// deltas, S4's fc1 weight gradient. v4's FP32 loops read shared memory at about 4 bytes a
// FMA (2 x 2 or 1 x 13 outputs a thread): S1's 800 KB a step in a block is 3.2 us at 128 bytes
// a clock, S4's 0.9 MB 3.6 us; the mma fragments read each operand 2 to 4 times a block.
// Shared rows are padded (KS5 = 204, K2S = 72 floats) so that the X, W1, A1 and W2 fragments'
// 32 loads hit 32 banks or 2 ways; d2s's rows of 16 floats are not (2 ways for gW1's and gW2's A
// fragments, 4 for D1p's).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned v5_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ void v5_mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
constexpr int KC5 = 196, KS5 = 204, K25 = 64, K2S = 72, NK1 = 25;   // 25 k steps of 8 cover 200 > 196
constexpr int V5_SMEM_FLOATS = 64 * KS5 + 3 * 16 * KS5 + 64 * 16 + 64 * K2S + 2 * 16 * K2S + 256 + 16 * 16 + 3 * 64 * 16 + 32;

// RAW (version 8 in main): every operand handed to mma as its FP32 bits, no cvt.rna: the tensor
// core then reads the upper 19 bits (truncation). The figures against v5 give what the
// roundings at each fragment load cost.
template <bool RAW>
__global__ void __launch_bounds__(256, 1) fc3_v5(Args a, int steps) {
#define T32(x) (RAW ? __float_as_uint(x) : v5_tf32(x))
    constexpr int R = 4, SPR = 16, NX = (64 * KC5 / 4 + 255) / 256;
    cg::cluster_group cl = cg::this_cluster();
    if (cl.num_blocks() != R) __trap();   // launched with the cluster attribute of 4 (the host's launch)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q4 = lane & 3;
    const int rank = cl.block_rank();
    const int c = blockIdx.x / R;
    const unsigned nblk = gridDim.x;
    const int B = a.B, I = a.I, H1 = a.H1, H2 = a.H2, O = a.O;
    float* W1 = a.P; float* b1 = W1 + H1 * I; float* W2 = b1 + H1; float* b2 = W2 + H2 * H1;
    float* W3 = b2 + H2; float* b3 = W3 + O * H2;
    const long dM = a.M - a.P;
    const int T2 = (H2 + 15) / 16;

    extern __shared__ __align__(16) float sm[];
    float* xs = sm;                   // X[64][KS5]: the rank's 196 columns, 196..203 zero
    float* ws = xs + 64 * KS5;        // W1 tile [16][KS5], kept across steps, padding zero
    float* ms1 = ws + 16 * KS5;       // its optimizer state [16][KS5]
    float* gs1 = ms1 + 16 * KS5;      // S4: the W1 tile's gradient sums [16][KS5]
    float* part = gs1 + 16 * KS5;     // partial sums [64][16] (S1, S2)
    float* a1s = part + 64 * 16;      // A1[64][K2S]: the rank's 64 columns of H1
    float* w2s = a1s + 64 * K2S;      // W2 tile [16][K2S], kept across steps
    float* ms2 = w2s + 16 * K2S;      // its optimizer state [16][K2S]
    float* w3s = ms2 + 16 * K2S;      // W3[o][g0 + u] [16][16]
    float* aown = w3s + 16 * 16;      // A2 of this rank's 16 samples [16][16]
    float* d2s = aown + 16 * 16;      // S3: D2 [64][16]; S4: D1 [64][16]
    float* d3s = d2s + 64 * 16;       // S3: D3 [64][16]
    float* a2s = d3s + 64 * 16;       // S3: A2 [64][16]
    float* b1s = a2s + 64 * 16;
    float* b2s = b1s + 16;

    const int k_lo = min(rank * KC5, I), k_hi = min(k_lo + KC5, I), kc = k_hi - k_lo;
    const int h0 = c * 16, g0 = c * 16;
    const bool t1 = h0 < H1, t2 = c < T2;
    const int j_lo = min(rank * K25, H1), j_hi = min(j_lo + K25, H1);
    const int mt = warp & 3, nt = warp >> 2;   // S1, S2: the warp's m16 (samples) and n8 (units) tile

    // Once a launch: zero padding, the W1 and W2 tiles, b1, the optimizer state.
    for (int e = tid; e < 64 * KS5; e += 256) xs[e] = 0.f;
    for (int e = tid; e < 16 * KS5; e += 256) {
        int r = e / KS5, k = e % KS5, h = h0 + r;
        bool ok = t1 && k < kc && h < H1;
        ws[e] = ok ? W1[h * I + k_lo + k] : 0.f;
        ms1[e] = ok ? W1[h * I + k_lo + k + dM] : 0.f;
    }
    if (t1 && tid < 16) b1s[tid] = h0 + tid < H1 ? b1[h0 + tid] : 0.f;
    for (int e = tid; e < 16 * K2S; e += 256) {
        int r = e / K2S, k = e % K2S, h = g0 + r, col = j_lo + k;
        bool ok = t2 && k < K25 && col < j_hi && h < H2;
        w2s[e] = ok ? W2[h * H1 + col] : 0.f;
        ms2[e] = ok ? W2[h * H1 + col + dM] : 0.f;
    }
    float m3 = 0.f, mb = 0.f, mb3 = 0.f;
    if (t2 && rank == 1 && tid < O * 16 && g0 + (tid & 15) < H2) m3 = W3[(tid >> 4) * H2 + g0 + (tid & 15) + dM];
    if (t2 && rank == 0 && tid < 16 && g0 + tid < H2) mb = b2[g0 + tid + dM];
    if (t1 && rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) mb = b1[h0 + tid - 32 + dM];
    if (c == 0 && rank == 1 && tid >= 192 && tid < 192 + O) mb3 = b3[tid - 192 + dM];
    __syncthreads();

    for (int step = 0; step < steps; ++step) {
        const float* X = a.X + size_t(step) * B * I;
        const float* T = a.T + size_t(step) * B * O;
        MARK(0);
        // ---------------- S1: fc1 forward on mma ----------------
        float w3v = 0.f, b2v = 0.f;
        if (t2) {
            if (tid < O * 16 && g0 + (tid & 15) < H2) w3v = __ldcg(&W3[(tid >> 4) * H2 + g0 + (tid & 15)]);
            if (tid < 16 && g0 + tid < H2) b2v = __ldcg(&b2[g0 + tid]);
        }
        if (t1) {
            float4 xv[NX];
#pragma unroll
            for (int j = 0; j < NX; ++j) {
                int e = tid + 256 * j, r = e / (KC5 / 4), qq = e % (KC5 / 4), col = k_lo + 4 * qq;
                xv[j] = (e < 64 * KC5 / 4 && r < B && col < k_hi) ? __ldg((const float4*)&X[r * I + col]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < NX; ++j) {
                int e = tid + 256 * j, r = e / (KC5 / 4), qq = e % (KC5 / 4);
                if (e < 64 * KC5 / 4) *(float4*)&xs[r * KS5 + 4 * qq] = xv[j];
            }
            __syncthreads();
            float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
            const float* xa = xs + (16 * mt + g) * KS5 + q4;
            const float* wb = ws + (8 * nt + g) * KS5 + q4;
#pragma unroll   // fully: acc[ks & 1] must resolve at compile time (else local memory)
            for (int ks = 0; ks < NK1; ++ks) {
                const int k0 = 8 * ks;
                v5_mma(acc[ks & 1], T32(xa[k0]), T32(xa[8 * KS5 + k0]), T32(xa[k0 + 4]),
                       T32(xa[8 * KS5 + k0 + 4]), T32(wb[k0]), T32(wb[k0 + 4]));
            }
            const int r0 = 16 * mt + g, c0 = 8 * nt + 2 * q4;
            part[r0 * 16 + c0] = acc[0][0] + acc[1][0];
            part[r0 * 16 + c0 + 1] = acc[0][1] + acc[1][1];
            part[(r0 + 8) * 16 + c0] = acc[0][2] + acc[1][2];
            part[(r0 + 8) * 16 + c0 + 1] = acc[0][3] + acc[1][3];
        }
        cl.sync();
        if (t1) {   // rank r finishes samples 16 r .. 16 r + 15: thread (s, u)
            int s = SPR * rank + (tid >> 4), u = tid & 15;
            float pv[R];
#pragma unroll
            for (int qq = 0; qq < R; ++qq) pv[qq] = cl.map_shared_rank(part, qq)[s * 16 + u];
            float z = pv[0];
#pragma unroll
            for (int qq = 1; qq < R; ++qq) z += pv[qq];
            z += b1s[u];
            if (s < B && h0 + u < H1) a.A1[s * H1 + h0 + u] = fmaxf(z, 0.f);
        }
        MARK(1);
        grid_barrier(a.sync, nblk);
        MARK(2);
        // ---------------- S2: fc2 forward on mma, + Yp ----------------
        if (t2) {
            float4 av[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = tid + 256 * j, r = e >> 4, qq = e & 15, col = j_lo + 4 * qq;
                av[j] = (r < B && col < j_hi) ? __ldcg((const float4*)&a.A1[r * H1 + col]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = tid + 256 * j, r = e >> 4, qq = e & 15;
                *(float4*)&a1s[r * K2S + 4 * qq] = av[j];
            }
            if (tid < O * 16) w3s[tid] = w3v;
            if (tid < 16) b2s[tid] = b2v;
            __syncthreads();
            float acc[4] = {0, 0, 0, 0};
            const float* xa = a1s + (16 * mt + g) * K2S + q4;
            const float* wb = w2s + (8 * nt + g) * K2S + q4;
#pragma unroll
            for (int ks = 0; ks < K25 / 8; ++ks) {
                const int k0 = 8 * ks;
                v5_mma(acc, T32(xa[k0]), T32(xa[8 * K2S + k0]), T32(xa[k0 + 4]), T32(xa[8 * K2S + k0 + 4]),
                       T32(wb[k0]), T32(wb[k0 + 4]));
            }
            const int r0 = 16 * mt + g, c0 = 8 * nt + 2 * q4;
            part[r0 * 16 + c0] = acc[0]; part[r0 * 16 + c0 + 1] = acc[1];
            part[(r0 + 8) * 16 + c0] = acc[2]; part[(r0 + 8) * 16 + c0 + 1] = acc[3];
        }
        cl.sync();
        if (t2) {
            int sl = tid >> 4, s = SPR * rank + sl, u = tid & 15;
            float pv[R];
#pragma unroll
            for (int qq = 0; qq < R; ++qq) pv[qq] = cl.map_shared_rank(part, qq)[s * 16 + u];
            float z = pv[0];
#pragma unroll
            for (int qq = 1; qq < R; ++qq) z += pv[qq];
            z += b2s[u];
            float v = (g0 + u < H2 && s < B) ? fmaxf(z, 0.f) : 0.f;
            aown[sl * 16 + u] = v;
            a.A2[s * 16 * T2 + c * 16 + u] = v;
        }
        __syncthreads();
        {
            const int ls = tid >> 4, lo = tid & 15;
            if (t2 && lo < O) {
                int s = SPR * rank + ls;
                float y = 0;
#pragma unroll
                for (int u = 0; u < 16; ++u) y = fmaf(aown[ls * 16 + u], w3s[lo * 16 + u], y);
                if (s < B) a.Yp[(s * O + lo) * 16 + c] = y;
            }
        }
        MARK(3);
        grid_barrier(a.sync, nblk);
        MARK(4);
        // ---------------- S3: loss, D2; gW2 and D1p on mma ----------------
        if (t2) {
            const int s = tid >> 2, ob = 4 * (tid & 3);
            float4 qv[4][2]; float tv[4], bb[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int o = ob + i; bool ok = s < B && o < O;
                const float4* yp = (const float4*)&a.Yp[(s * O + (ok ? o : 0)) * 16];
#pragma unroll
                for (int r = 0; r < 2; ++r) qv[i][r] = ok ? __ldcg(yp + r) : make_float4(0, 0, 0, 0);
                tv[i] = ok ? T[s * O + o] : 0.f;
                bb[i] = o < O ? __ldcg(&b3[o]) : 0.f;
            }
            float4 av2 = __ldcg((const float4*)&a.A2[(tid >> 2) * 16 * T2 + c * 16 + 4 * (tid & 3)]);
            float y[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                float v = 0.f;
#pragma unroll
                for (int r = 0; r < 2; ++r) v += qv[i][r].x + qv[i][r].y + qv[i][r].z + qv[i][r].w;
                y[i] = v + bb[i];
            }
            loss_rows(y, tv, s, ob, B, O, d3s, c == 0 && rank == 0 ? a.Y : nullptr);
            *(float4*)&a2s[4 * tid] = av2;
            __syncthreads();
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                int u = ob + i;
                float d = 0.f;
                for (int o = 0; o < O; ++o) d = fmaf(d3s[s * 16 + o], w3s[o * 16 + u], d);
                d2s[s * 16 + u] = a2s[s * 16 + u] > 0.f ? d : 0.f;
            }
            __syncthreads();
            // gW2 [16 units][64 columns] = D2^T A1: warp w takes columns 8w .. 8w+7 (one n8 tile),
            // 8 k steps over the samples. A[m = u][k = s] = d2s[s][u]; B[k = s][n = col] = a1s[s][col].
            float gw[4] = {0, 0, 0, 0};
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                const int k0 = 8 * ks;
                v5_mma(gw, T32(d2s[(k0 + q4) * 16 + g]), T32(d2s[(k0 + q4) * 16 + g + 8]),
                       T32(d2s[(k0 + q4 + 4) * 16 + g]), T32(d2s[(k0 + q4 + 4) * 16 + g + 8]),
                       T32(a1s[(k0 + q4) * K2S + 8 * warp + g]), T32(a1s[(k0 + q4 + 4) * K2S + 8 * warp + g]));
            }
            // D1p [64 samples][64 columns] = D2 W2 (the old W2): warp w takes m tile w & 3 and n tiles
            // (w >> 2) + 2 j, j < 4; 2 k steps over the units. A[m = s][k = u] = d2s[s][u];
            // B[k = u][n = col] = w2s[u][col].
            {
                const int m0 = 16 * (warp & 3);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n0 = 8 * ((warp >> 2) + 2 * j);
                    float dp[4] = {0, 0, 0, 0};
#pragma unroll
                    for (int ks = 0; ks < 2; ++ks) {
                        const int k0 = 8 * ks;
                        v5_mma(dp, T32(d2s[(m0 + g) * 16 + k0 + q4]), T32(d2s[(m0 + g + 8) * 16 + k0 + q4]),
                               T32(d2s[(m0 + g) * 16 + k0 + q4 + 4]), T32(d2s[(m0 + g + 8) * 16 + k0 + q4 + 4]),
                               T32(w2s[(k0 + q4) * K2S + n0 + g]), T32(w2s[(k0 + q4 + 4) * K2S + n0 + g]));
                    }
                    const int col = j_lo + n0 + 2 * q4;
                    if (col < j_hi) {
                        a.D1p[(c * 64 + m0 + g) * H1 + col] = dp[0];
                        a.D1p[(c * 64 + m0 + g + 8) * H1 + col] = dp[2];
                    }
                    if (col + 1 < j_hi) {
                        a.D1p[(c * 64 + m0 + g) * H1 + col + 1] = dp[1];
                        a.D1p[(c * 64 + m0 + g + 8) * H1 + col + 1] = dp[3];
                    }
                }
            }
            __syncthreads();   // every warp has read the old W2 tile
            {
                const int cc = 8 * warp + 2 * q4;   // gw: (u = g, cc), (g, cc + 1), (g + 8, cc), (g + 8, cc + 1)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int u = g + 8 * (i >> 1), kk = cc + (i & 1), h = g0 + u, col = j_lo + kk;
                    if (h < H2 && col < j_hi) {
                        float m = ms2[u * K2S + kk];
                        float np = sgd_nesterov(w2s[u * K2S + kk], m, gw[i] * a.scale, a.lr, a.mu);
                        w2s[u * K2S + kk] = np; ms2[u * K2S + kk] = m;
                        W2[h * H1 + col] = np; W2[h * H1 + col + dM] = m;
                    }
                }
            }
            if (rank == 1 && tid < O * 16) {
                int o = tid >> 4, u = tid & 15;
                float gg = 0;
                for (int s2 = 0; s2 < 64; ++s2) gg = fmaf(d3s[s2 * 16 + o], a2s[s2 * 16 + u], gg);
                if (g0 + u < H2) {
                    float np = sgd_nesterov(w3s[o * 16 + u], m3, gg * a.scale, a.lr, a.mu);
                    W3[o * H2 + g0 + u] = np; W3[o * H2 + g0 + u + dM] = m3;
                }
            }
            if (rank == 0 && tid < 16 && g0 + tid < H2) {
                float gg = 0;
                for (int s2 = 0; s2 < 64; ++s2) gg += d2s[s2 * 16 + tid];
                float np = sgd_nesterov(b2s[tid], mb, gg * a.scale, a.lr, a.mu);
                b2[g0 + tid] = np; b2[g0 + tid + dM] = mb;
            }
            if (c == 0 && rank == 2 && tid < O) {
                float gg = 0;
                for (int s2 = 0; s2 < 64; ++s2) gg += d3s[s2 * 16 + tid];
                a.gb3[tid] = gg;
            }
        }
        MARK(5);
        grid_barrier(a.sync, nblk);
        MARK(6);
        // ---------------- S4: D1; gW1 on mma; b1 ----------------
        if (t1) {
            float dv[4][8], av[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int e = tid + 256 * j, s = e >> 4, u = e & 15, h = h0 + u;
                bool ok = h < H1 && s < B;
#pragma unroll
                for (int qq = 0; qq < 8; ++qq) dv[j][qq] = (ok && qq < T2) ? __ldcg(&a.D1p[(qq * 64 + s) * H1 + h]) : 0.f;
                av[j] = ok ? __ldcg(&a.A1[s * H1 + h]) : 0.f;
            }
            if (step + 1 < steps && tid < 64) {
                const char* nx = (const char*)(X + size_t(B) * I + tid * I + k_lo);
                for (int off = 0; off < 4 * kc; off += 128) asm volatile("prefetch.global.L2 [%0];" :: "l"(nx + off));
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float d = dv[j][0];
#pragma unroll
                for (int qq = 1; qq < 8; ++qq) d += dv[j][qq];
                d2s[tid + 256 * j] = av[j] > 0.f ? d : 0.f;
            }
            __syncthreads();
            // gW1 [16 units][200 columns] = D1^T X: 25 n8 tiles, warp w takes w, w + 8, w + 16, w + 24;
            // 8 k steps over the samples. A[m = u][k = s] = d2s[s][u]; B[k = s][n = col] = xs[s][col].
            unsigned af[8][4];
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                const int k0 = 8 * ks;
                af[ks][0] = T32(d2s[(k0 + q4) * 16 + g]); af[ks][1] = T32(d2s[(k0 + q4) * 16 + g + 8]);
                af[ks][2] = T32(d2s[(k0 + q4 + 4) * 16 + g]); af[ks][3] = T32(d2s[(k0 + q4 + 4) * 16 + g + 8]);
            }
            for (int nti = warp; nti < NK1; nti += 8) {
                const int n0 = 8 * nti;
                float gw[4] = {0, 0, 0, 0};
#pragma unroll
                for (int ks = 0; ks < 8; ++ks) {
                    const int k0 = 8 * ks;
                    v5_mma(gw, af[ks][0], af[ks][1], af[ks][2], af[ks][3], T32(xs[(k0 + q4) * KS5 + n0 + g]),
                           T32(xs[(k0 + q4 + 4) * KS5 + n0 + g]));
                }
                const int cc = n0 + 2 * q4;
#pragma unroll
                for (int i = 0; i < 4; ++i) gs1[(g + 8 * (i >> 1)) * KS5 + cc + (i & 1)] = gw[i];
            }
            __syncthreads();
            // The update, element by element as v4 (thread (u4, columns kq + 16 j)).
            const int u4 = tid >> 4, kq = tid & 15, h = h0 + u4;
            for (int k = kq; k < kc; k += 16) {
                if (h < H1) {
                    float m = ms1[u4 * KS5 + k];
                    float np = sgd_nesterov(ws[u4 * KS5 + k], m, gs1[u4 * KS5 + k] * a.scale, a.lr, a.mu);
                    ws[u4 * KS5 + k] = np; ms1[u4 * KS5 + k] = m;
                    W1[h * I + k_lo + k] = np; W1[h * I + k_lo + k + dM] = m;
                }
            }
            if (rank == 0 && tid >= 32 && tid < 48 && h0 + tid - 32 < H1) {
                int u = tid - 32;
                float gb = 0;
                for (int s = 0; s < 64; ++s) gb += d2s[s * 16 + u];
                float np = sgd_nesterov(b1s[u], mb, gb * a.scale, a.lr, a.mu);
                b1[h0 + u] = np; b1[h0 + u + dM] = mb;
#pragma unroll
                for (int r = 0; r < R; ++r) cl.map_shared_rank(b1s, r)[u] = np;
            }
            if (c == 0 && rank == 1 && tid >= 192 && tid < 192 + O) {
                int o = tid - 192;
                float np = sgd_nesterov(b3[o], mb3, __ldcg(&a.gb3[o]) * a.scale, a.lr, a.mu);
                b3[o] = np; b3[o + dM] = mb3;
            }
        }
        MARK(7);
        __syncthreads();
    }
    cl.sync();
}
#undef T32

// ---------------------------------------------------------------------------------------------
// v6: ONE grid barrier a step (v5 has three). G = H1 / 32 clusters of 8 blocks (8 of 8 for
// 784,256,128,10: the H100 holds 15 clusters of 8 at one block a SM). Cluster c owns H1 tile c
// (32 units) as before, and every cluster also runs the whole of fc2, fc3 and the loss itself,
// the same operations in the same order in each (so the 8 copies of W2, W3, b2, b3 stay equal
// bit for bit): after grid barrier 1 each rank reads all of A1 from L2, and rank r owns H2 units
// 16 r .. 16 r + 15 (its W2 rows, with K = all of H1), so fc2's product needs no join; the fc3
// logits meet through DSMEM (each rank's 16 units' part), D2 for its units is local, and fc2's
// deltas to the cluster's own H1 tile are the ranks' parts summed through DSMEM: nothing of a
// step crosses a cluster but A1. A step:
//   S1   rank r: the 64 x 32 tile of fc1 over its 100 columns of I (mma, 13 k steps); cluster
//        barrier s1; rank r finishes samples 8 r .. 8 r + 7 (8 parts over DSMEM) -> A1 (L2, the
//        step's parity buffer); X of the next step issued (cp.async into the other buffer)
//   GB1  grid barrier
//   S2   A1 [64][256] from L2; Z2 = A1 W2r^T (mma, 32 k steps, no join); A2 = relu; the 64 x 16
//        part of the logits; cluster barrier b; every rank: logits (8 parts), softmax, D3, D2 of
//        its units; D1p = D2 W2r[:, tile] (the old W2); cluster arrive c; under it gW2 (mma),
//        W2's, W3's, b2's and b3's updates; wait c; rank r sums samples 8 r .. of D1 (8 parts),
//        masks them and stores them into all 8 ranks (DSMEM); cluster barrier d; gW1 (mma), W1's
//        and b1's updates.
// Every rank keeps all of b3 and b1's tile, updated the same way in each. P and M go to memory
// at a launch's last step only.
// ---------------------------------------------------------------------------------------------
constexpr int R6 = 8, KC6 = 100, XS6 = 108, NK6 = 13;          // 100 columns of I a rank; 13 k steps
constexpr int A1S6 = 260, D2S6 = 20, D1S6 = 40, U6 = 32, H26 = 16;   // strides; units a tile, a rank
constexpr int V6_XS = 64 * XS6, V6_WS = U6 * XS6, V6_A1 = 64 * A1S6, V6_W2 = H26 * A1S6;
constexpr int V6_SMEM_FLOATS = 2 * V6_XS + 2 * V6_WS + V6_A1 + 2 * V6_W2 + 2 * 16 * 16 + 64 * 32 /*part*/ +
                               64 * 16 /*yp*/ + 64 * 16 /*d3*/ + 64 * 16 /*a2*/ + 64 * D2S6 + 64 * 32 /*d1p*/ +
                               64 * D1S6 + 6 * 32;

__device__ __forceinline__ void v6_cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void v6_cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ void v6_cp16(float* dst, const float* src, bool ok) {
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(ok ? 16 : 0) : "memory");
}
// The sum of column col over the 64 rows of src (stride ld) as four chains (rows k, k + 4, ...)
// added (c0 + c1) + (c2 + c3): lanes 4 i .. 4 i + 3 of a warp take column i of the warp's 8.
__device__ __forceinline__ float v6_colsum(const float* src, int ld, int col, int chain) {
    float acc = 0.f;
#pragma unroll
    for (int s = 0; s < 16; ++s) acc += src[(4 * s + chain) * ld + col];
    float o = __shfl_xor_sync(0xffffffff, acc, 1);
    float c01 = (chain & 1) ? o + acc : acc + o;
    float o2 = __shfl_xor_sync(0xffffffff, c01, 2);
    return (chain & 2) ? o2 + c01 : c01 + o2;
}

// PRE (version 7 in main): A1 is stored in shared memory already rounded to TF32 (cvt.rna once a
// value instead of once a fragment load), which gives the same products bit for bit.
template <bool PRE>
__global__ void __launch_bounds__(256, 1) fc3_v6(Args a, int steps) {
    cg::cluster_group cl = cg::this_cluster();
    if (cl.num_blocks() != R6) __trap();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q4 = lane & 3;
    const int rank = cl.block_rank(), c = blockIdx.x / R6;
    const unsigned nblk = gridDim.x;
    const int B = a.B, I = a.I, H1 = a.H1, H2 = a.H2, O = a.O;
    float* W1 = a.P; float* b1 = W1 + H1 * I; float* W2 = b1 + H1; float* b2 = W2 + H2 * H1;
    float* W3 = b2 + H2; float* b3 = W3 + O * H2;
    const long dM = a.M - a.P;

    extern __shared__ __align__(16) float sm[];
    float* xs0 = sm;                    // X [2][64][XS6]: the rank's 100 columns, a buffer a step parity
    float* ws = xs0 + 2 * V6_XS;        // W1 tile [32][XS6] (units h0 .., columns k_lo ..), kept
    float* ms1 = ws + V6_WS;            // its momentum
    float* a1s = ms1 + V6_WS;           // A1 [64][A1S6], all of H1
    float* w2s = a1s + V6_A1;           // W2 rows of the rank's units [16][A1S6], kept
    float* ms2 = w2s + V6_W2;
    float* w3s = ms2 + V6_W2;           // W3[o][u0 + u] [16][16], kept
    float* ms3 = w3s + 256;
    float* part = ms3 + 256;            // S1's parts [64][32]
    float* yp = part + 64 * 32;         // the logits' part of the rank's units [64][16]
    float* d3s = yp + 64 * 16;          // D3 [64][16]
    float* a2s = d3s + 64 * 16;         // A2 of the rank's units [64][16]
    float* d2s = a2s + 64 * 16;         // D2 of the rank's units [64][D2S6]
    float* d1p = d2s + 64 * D2S6;       // D1's part from the rank's units [64][32]
    float* d1s = d1p + 64 * 32;         // D1 of the tile [64][D1S6] (stored by every rank)
    float* b1s = d1s + 64 * D1S6;       // b1's tile [32], its momentum [32]
    float* mb1 = b1s + 32;
    float* b2s = mb1 + 32;              // b2 of the rank's units [16], momentum [16]
    float* mb2 = b2s + 16;
    float* b3s = mb2 + 16;              // all of b3 [16], momentum [16]
    float* mb3 = b3s + 16;

    const int k_lo = min(rank * KC6, I), k_hi = min(k_lo + KC6, I), kc = k_hi - k_lo;
    const int h0 = c * U6, u0 = rank * H26;

    // Once a launch: zero X's buffers (padding columns stay zero), the kept tiles and state.
    for (int e = tid; e < 2 * V6_XS; e += 256) xs0[e] = 0.f;
    for (int e = tid; e < V6_WS; e += 256) {
        int r = e / XS6, k = e % XS6, h = h0 + r;
        bool ok = k < kc && h < H1;
        ws[e] = ok ? W1[h * I + k_lo + k] : 0.f;
        ms1[e] = ok ? W1[h * I + k_lo + k + dM] : 0.f;
    }
    for (int e = tid; e < V6_W2; e += 256) {
        int r = e / A1S6, k = e % A1S6, u = u0 + r;
        bool ok = k < H1 && u < H2;
        w2s[e] = ok ? W2[u * H1 + k] : 0.f;
        ms2[e] = ok ? W2[u * H1 + k + dM] : 0.f;
    }
    {
        int o = tid >> 4, u = tid & 15;
        bool ok = o < O && u0 + u < H2;
        w3s[tid] = ok ? W3[o * H2 + u0 + u] : 0.f;
        ms3[tid] = ok ? W3[o * H2 + u0 + u + dM] : 0.f;
    }
    if (tid < 32) { b1s[tid] = h0 + tid < H1 ? b1[h0 + tid] : 0.f; mb1[tid] = h0 + tid < H1 ? b1[h0 + tid + dM] : 0.f; }
    if (tid < 16) {
        b2s[tid] = u0 + tid < H2 ? b2[u0 + tid] : 0.f; mb2[tid] = u0 + tid < H2 ? b2[u0 + tid + dM] : 0.f;
        b3s[tid] = tid < O ? b3[tid] : 0.f; mb3[tid] = tid < O ? b3[tid + dM] : 0.f;
    }
    __syncthreads();
    auto issue_x = [&](float* xs, const float* X) {   // X [B][I] -> xs[64][XS6], the rank's columns
        for (int e = tid; e < 64 * (KC6 / 4); e += 256) {
            int r = e / (KC6 / 4), qq = e % (KC6 / 4), col = k_lo + 4 * qq;
            bool ok = r < B && col < k_hi;
            v6_cp16(&xs[r * XS6 + 4 * qq], ok ? &X[r * I + col] : X, ok);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    issue_x(xs0, a.X);

    for (int step = 0; step < steps; ++step) {
        const float* T = a.T + size_t(step) * B * O;
        float* xs = xs0 + (step & 1) * V6_XS;
        float* A1g = a.A1 + (step & 1) * 64 * H1;   // A1 in memory, a buffer a step parity
        const bool last = step + 1 == steps;
        M6(0);
        // ---------------- S1: fc1's tile over the rank's columns (mma), the join ----------------
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncthreads();
        {
            const int mt = warp & 3, n0 = 16 * (warp >> 2);   // m16 tile, two n8 tiles (units n0 .. n0 + 15)
            float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
            const float* xa = xs + (16 * mt + g) * XS6 + q4;
            const float* wb = ws + (n0 + g) * XS6 + q4;
#pragma unroll
            for (int ks = 0; ks < NK6; ++ks) {
                const int k0 = 8 * ks;
                unsigned a0 = v5_tf32(xa[k0]), a1_ = v5_tf32(xa[8 * XS6 + k0]), a2 = v5_tf32(xa[k0 + 4]),
                         a3 = v5_tf32(xa[8 * XS6 + k0 + 4]);
                v5_mma(acc[0], a0, a1_, a2, a3, v5_tf32(wb[k0]), v5_tf32(wb[k0 + 4]));
                v5_mma(acc[1], a0, a1_, a2, a3, v5_tf32(wb[8 * XS6 + k0]), v5_tf32(wb[8 * XS6 + k0 + 4]));
            }
            const int r0 = 16 * mt + g;
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const int c0 = n0 + 8 * t + 2 * q4;
                *(float2*)&part[r0 * 32 + c0] = make_float2(acc[t][0], acc[t][1]);
                *(float2*)&part[(r0 + 8) * 32 + c0] = make_float2(acc[t][2], acc[t][3]);
            }
        }
        M6(1);
        cl.sync();
        // rank r finishes samples 8 r .. 8 r + 7: thread (s, u); a1v stays for D1's mask.
        const int s1 = 8 * rank + (tid >> 5), uu = tid & 31;
        float a1v;
        {
            float z = cl.map_shared_rank(part, 0)[s1 * 32 + uu];
#pragma unroll
            for (int qq = 1; qq < R6; ++qq) z += cl.map_shared_rank(part, qq)[s1 * 32 + uu];
            z += b1s[uu];
            a1v = (s1 < B && h0 + uu < H1) ? fmaxf(z, 0.f) : 0.f;
            if (s1 < B) A1g[s1 * H1 + h0 + uu] = a1v;
        }
        if (!last) issue_x(xs0 + ((step + 1) & 1) * V6_XS, a.X + size_t(step + 1) * B * I);
        M6(2);
        grid_barrier(a.sync, nblk);
        M6(3);
        // ---------------- S2: fc2 (no join), the logits' part ----------------
        float tv[4];
        const int sq = tid >> 2, ob = 4 * (tid & 3);   // the loss: thread (sample, 4 outputs)
#pragma unroll
        for (int i = 0; i < 4; ++i) tv[i] = (sq < B && ob + i < O) ? __ldg(&T[sq * O + ob + i]) : 0.f;
        {
            const int H1q = H1 / 4;
            float4 av[16];
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                int e = tid + 256 * j, r = e / H1q, qq = e % H1q;
                av[j] = (r < B && e < 64 * H1q) ? __ldcg((const float4*)&A1g[r * H1 + 4 * qq]) : make_float4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                int e = tid + 256 * j, r = e / H1q, qq = e % H1q;
                if (PRE) {
                    av[j].x = __uint_as_float(v5_tf32(av[j].x)); av[j].y = __uint_as_float(v5_tf32(av[j].y));
                    av[j].z = __uint_as_float(v5_tf32(av[j].z)); av[j].w = __uint_as_float(v5_tf32(av[j].w));
                }
                if (e < 64 * H1q) *(float4*)&a1s[r * A1S6 + 4 * qq] = av[j];
            }
        }
        __syncthreads();
        M6(4);
        {
            const int mt = warp & 3, nt = warp >> 2;   // one m16 n8 tile a warp, two chains over K = H1
            float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
            const float* xa = a1s + (16 * mt + g) * A1S6 + q4;
            const float* wb = w2s + (8 * nt + g) * A1S6 + q4;
#pragma unroll 8
            for (int ks = 0; ks < H1 / 8; ks += 2) {
#pragma unroll
                for (int t = 0; t < 2; ++t) {
                    const int k0 = 8 * (ks + t);
                    if (PRE)
                        v5_mma(acc[t], __float_as_uint(xa[k0]), __float_as_uint(xa[8 * A1S6 + k0]), __float_as_uint(xa[k0 + 4]),
                               __float_as_uint(xa[8 * A1S6 + k0 + 4]), v5_tf32(wb[k0]), v5_tf32(wb[k0 + 4]));
                    else
                        v5_mma(acc[t], v5_tf32(xa[k0]), v5_tf32(xa[8 * A1S6 + k0]), v5_tf32(xa[k0 + 4]),
                               v5_tf32(xa[8 * A1S6 + k0 + 4]), v5_tf32(wb[k0]), v5_tf32(wb[k0 + 4]));
                }
            }
            const int r0 = 16 * mt + g, cc = 8 * nt + 2 * q4;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int s = r0 + 8 * (i >> 1), u = cc + (i & 1);
                const float z = acc[0][i] + acc[1][i] + b2s[u];
                a2s[s * 16 + u] = (s < B && u0 + u < H2) ? fmaxf(z, 0.f) : 0.f;
            }
        }
        __syncthreads();
        M6(5);
        {
            float y[4] = {0, 0, 0, 0};
#pragma unroll
            for (int u = 0; u < 16; ++u) {
                const float av = a2s[sq * 16 + u];
#pragma unroll
                for (int i = 0; i < 4; ++i) y[i] = fmaf(av, w3s[(ob + i) * 16 + u], y[i]);
            }
            *(float4*)&yp[sq * 16 + ob] = make_float4(y[0], y[1], y[2], y[3]);
        }
        M6(6);
        cl.sync();   // barrier b: the 8 parts of the logits
        M6(7);
        {
            float y[4];
            {
                float4 v = *(const float4*)&cl.map_shared_rank(yp, 0)[sq * 16 + ob];
                y[0] = v.x; y[1] = v.y; y[2] = v.z; y[3] = v.w;
            }
#pragma unroll
            for (int qq = 1; qq < R6; ++qq) {
                float4 v = *(const float4*)&cl.map_shared_rank(yp, qq)[sq * 16 + ob];
                y[0] += v.x; y[1] += v.y; y[2] += v.z; y[3] += v.w;
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) y[i] += b3s[ob + i];
            loss_rows(y, tv, sq, ob, B, O, d3s, c == 0 && rank == 0 ? a.Y : nullptr);
        }
        __syncthreads();
        M6(8);
#pragma unroll
        for (int i = 0; i < 4; ++i) {   // D2 of the rank's units: thread (sq, units ob .. ob + 3)
            const int u = ob + i;
            float d = 0.f;
            for (int o = 0; o < O; ++o) d = fmaf(d3s[sq * 16 + o], w3s[o * 16 + u], d);
            d2s[sq * D2S6 + u] = a2s[sq * 16 + u] > 0.f ? d : 0.f;
        }
        __syncthreads();
        M6(9);
        {   // D1p [64][32] = D2 W2r[:, h0 .. h0 + 31] (the old W2): warp w: m tile w & 3, n tiles
            // 2 (w >> 2), + 1; K = 16 units. A[m = s][k = u] = d2s[s][u]; B[k = u][n = col] = w2s[u][h0 + col].
            const int mt = warp & 3;
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                const int n0 = 8 * (2 * (warp >> 2) + t);
                float dp[4] = {0, 0, 0, 0};
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    const int k0 = 8 * ks;
                    const float* da = d2s + (16 * mt + g) * D2S6 + k0 + q4;
                    v5_mma(dp, v5_tf32(da[0]), v5_tf32(da[8 * D2S6]), v5_tf32(da[4]), v5_tf32(da[8 * D2S6 + 4]),
                           v5_tf32(w2s[(k0 + q4) * A1S6 + h0 + n0 + g]), v5_tf32(w2s[(k0 + q4 + 4) * A1S6 + h0 + n0 + g]));
                }
                const int r0 = 16 * mt + g, cc = n0 + 2 * q4;
                *(float2*)&d1p[r0 * 32 + cc] = make_float2(dp[0], dp[1]);
                *(float2*)&d1p[(r0 + 8) * 32 + cc] = make_float2(dp[2], dp[3]);
            }
        }
        __syncthreads();   // the old W2 read by every warp
        v6_cluster_arrive();   // barrier c: D1's parts
        M6(10);
        {   // gW2 [16 units][H1] = D2^T A1: warp w: n tiles w + 8 j; 8 k steps over the samples.
            unsigned af[8][4];
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                const float* da = d2s + (8 * ks + q4) * D2S6 + g;
                af[ks][0] = v5_tf32(da[0]); af[ks][1] = v5_tf32(da[8]);
                af[ks][2] = v5_tf32(da[4 * D2S6]); af[ks][3] = v5_tf32(da[4 * D2S6 + 8]);
            }
            float gw[4][4] = {};
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n0 = 8 * (warp + 8 * j);
                    const float b0 = a1s[(8 * ks + q4) * A1S6 + n0 + g], b1_ = a1s[(8 * ks + q4 + 4) * A1S6 + n0 + g];
                    if (n0 < H1)
                        v5_mma(gw[j], af[ks][0], af[ks][1], af[ks][2], af[ks][3], PRE ? __float_as_uint(b0) : v5_tf32(b0),
                               PRE ? __float_as_uint(b1_) : v5_tf32(b1_));
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int n0 = 8 * (warp + 8 * j);
                if (n0 >= H1) continue;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int u = g + 8 * (i >> 1), col = n0 + 2 * q4 + (i & 1);
                    if (u0 + u < H2) {
                        float m = ms2[u * A1S6 + col];
                        float np = sgd_nesterov(w2s[u * A1S6 + col], m, gw[j][i] * a.scale, a.lr, a.mu);
                        w2s[u * A1S6 + col] = np; ms2[u * A1S6 + col] = m;
                        if (last && c == 0) { W2[(u0 + u) * H1 + col] = np; W2[(u0 + u) * H1 + col + dM] = m; }
                    }
                }
            }
        }
        if (warp < 2) {   // gW3 [16 o][16 units] = D3^T A2: warp w: n tile w; 8 k steps (mma)
            float gg[4] = {0, 0, 0, 0};
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                const int k0 = 8 * ks;
                v5_mma(gg, v5_tf32(d3s[(k0 + q4) * 16 + g]), v5_tf32(d3s[(k0 + q4) * 16 + g + 8]),
                       v5_tf32(d3s[(k0 + q4 + 4) * 16 + g]), v5_tf32(d3s[(k0 + q4 + 4) * 16 + g + 8]),
                       v5_tf32(a2s[(k0 + q4) * 16 + 8 * warp + g]), v5_tf32(a2s[(k0 + q4 + 4) * 16 + 8 * warp + g]));
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int o = g + 8 * (i >> 1), u = 8 * warp + 2 * q4 + (i & 1), e = o * 16 + u;
                if (o < O && u0 + u < H2) {
                    float m = ms3[e];
                    float np = sgd_nesterov(w3s[e], m, gg[i] * a.scale, a.lr, a.mu);
                    w3s[e] = np; ms3[e] = m;
                    if (last && c == 0) { W3[o * H2 + u0 + u] = np; W3[o * H2 + u0 + u + dM] = m; }
                }
            }
        } else if (warp < 4) {   // b2: 8 units a warp
            const int u = 8 * (warp - 2) + (lane >> 2);
            const float gsum = v6_colsum(d2s, D2S6, u, lane & 3);
            if ((lane & 3) == 0 && u0 + u < H2) {
                float m = mb2[u];
                float np = sgd_nesterov(b2s[u], m, gsum * a.scale, a.lr, a.mu);
                b2s[u] = np; mb2[u] = m;
                if (last && c == 0) { b2[u0 + u] = np; b2[u0 + u + dM] = m; }
            }
        } else if (warp < 6) {   // b3: 8 outputs a warp, every rank its copy
            const int o = 8 * (warp - 4) + (lane >> 2);
            const float gsum = v6_colsum(d3s, 16, o, lane & 3);
            if ((lane & 3) == 0 && o < O) {
                float m = mb3[o];
                float np = sgd_nesterov(b3s[o], m, gsum * a.scale, a.lr, a.mu);
                b3s[o] = np; mb3[o] = m;
                if (last && c == 0 && rank == 0) { b3[o] = np; b3[o + dM] = m; }
            }
        }
        M6(11);
        v6_cluster_wait();
        M6(12);
        {   // D1 of samples 8 r ..: the 8 parts in rank order, masked, stored into every rank
            float d = cl.map_shared_rank(d1p, 0)[s1 * 32 + uu];
#pragma unroll
            for (int qq = 1; qq < R6; ++qq) d += cl.map_shared_rank(d1p, qq)[s1 * 32 + uu];
            d = a1v > 0.f ? d : 0.f;
#pragma unroll
            for (int qq = 0; qq < R6; ++qq) cl.map_shared_rank(d1s, qq)[s1 * D1S6 + uu] = d;
        }
        cl.sync();   // barrier d
        M6(13);
        {   // gW1 [32 units][104 columns] = D1^T X: warp w: m tile w & 1, n tiles (w >> 1) + 4 j < 13
            const int mt = warp & 1;
            unsigned af[8][4];
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
                const float* da = d1s + (8 * ks + q4) * D1S6 + 16 * mt + g;
                af[ks][0] = v5_tf32(da[0]); af[ks][1] = v5_tf32(da[8]);
                af[ks][2] = v5_tf32(da[4 * D1S6]); af[ks][3] = v5_tf32(da[4 * D1S6 + 8]);
            }
            float gw[4][4] = {};
#pragma unroll
            for (int ks = 0; ks < 8; ++ks) {
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int n0 = 8 * ((warp >> 1) + 4 * j);
                    if (n0 < 8 * NK6)
                        v5_mma(gw[j], af[ks][0], af[ks][1], af[ks][2], af[ks][3],
                               v5_tf32(xs[(8 * ks + q4) * XS6 + n0 + g]), v5_tf32(xs[(8 * ks + q4 + 4) * XS6 + n0 + g]));
                }
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int n0 = 8 * ((warp >> 1) + 4 * j);
                if (n0 >= 8 * NK6) continue;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int u = 16 * mt + g + 8 * (i >> 1), col = n0 + 2 * q4 + (i & 1), e = u * XS6 + col;
                    if (col < kc && h0 + u < H1) {
                        float m = ms1[e];
                        float np = sgd_nesterov(ws[e], m, gw[j][i] * a.scale, a.lr, a.mu);
                        ws[e] = np; ms1[e] = m;
                        if (last) { W1[(h0 + u) * I + k_lo + col] = np; W1[(h0 + u) * I + k_lo + col + dM] = m; }
                    }
                }
            }
        }
        if (warp >= 4) {   // b1's tile: 8 units a warp, every rank its copy
            const int u = 8 * (warp - 4) + (lane >> 2);
            const float gsum = v6_colsum(d1s, D1S6, u, lane & 3);
            __syncwarp();
            if ((lane & 3) == 0 && h0 + u < H1) {
                float m = mb1[u];
                float np = sgd_nesterov(b1s[u], m, gsum * a.scale, a.lr, a.mu);
                b1s[u] = np; mb1[u] = m;
                if (last && rank == 0) { b1[h0 + u] = np; b1[h0 + u + dM] = m; }
            }
        }
        M6(14);
        __syncthreads();
        M6(15);
    }
    cl.sync();
}

// ---------------- host: float64 reference of one step, timing ----------------
static void ref_step(std::vector<double>& P, std::vector<double>& M, const std::vector<float>& X,
                     const std::vector<float>& T, int B, int I, int H1, int H2, int O, double lr, double mu) {
    size_t oW1 = 0, ob1 = oW1 + size_t(H1) * I, oW2 = ob1 + H1, ob2 = oW2 + size_t(H2) * H1, oW3 = ob2 + H2,
           ob3 = oW3 + size_t(O) * H2, n = ob3 + O;
    std::vector<double> A1(B * H1), A2(B * H2), D3(B * O), D2(B * H2), D1(B * H1), g(n, 0.0);
    for (int s = 0; s < B; ++s) {
        for (int h = 0; h < H1; ++h) { double z = P[ob1 + h]; for (int k = 0; k < I; ++k) z += X[s * I + k] * P[oW1 + h * I + k]; A1[s * H1 + h] = z > 0 ? z : 0; }
        for (int h = 0; h < H2; ++h) { double z = P[ob2 + h]; for (int k = 0; k < H1; ++k) z += A1[s * H1 + k] * P[oW2 + h * H1 + k]; A2[s * H2 + h] = z > 0 ? z : 0; }
        std::vector<double> y(O); double mx = -1e300;
        for (int o = 0; o < O; ++o) { double z = P[ob3 + o]; for (int k = 0; k < H2; ++k) z += A2[s * H2 + k] * P[oW3 + o * H2 + k]; y[o] = z; mx = std::max(mx, z); }
        double es = 0; for (int o = 0; o < O; ++o) { y[o] = std::exp(y[o] - mx); es += y[o]; }
        for (int o = 0; o < O; ++o) D3[s * O + o] = y[o] / es - T[s * O + o];
        for (int h = 0; h < H2; ++h) { double d = 0; for (int o = 0; o < O; ++o) d += D3[s * O + o] * P[oW3 + o * H2 + h]; D2[s * H2 + h] = A2[s * H2 + h] > 0 ? d : 0; }
        for (int h = 0; h < H1; ++h) { double d = 0; for (int u = 0; u < H2; ++u) d += D2[s * H2 + u] * P[oW2 + u * H1 + h]; D1[s * H1 + h] = A1[s * H1 + h] > 0 ? d : 0; }
    }
    for (int s = 0; s < B; ++s) {
        for (int h = 0; h < H1; ++h) { for (int k = 0; k < I; ++k) g[oW1 + h * I + k] += D1[s * H1 + h] * X[s * I + k]; g[ob1 + h] += D1[s * H1 + h]; }
        for (int h = 0; h < H2; ++h) { for (int k = 0; k < H1; ++k) g[oW2 + h * H1 + k] += D2[s * H2 + h] * A1[s * H1 + k]; g[ob2 + h] += D2[s * H2 + h]; }
        for (int o = 0; o < O; ++o) { for (int k = 0; k < H2; ++k) g[oW3 + o * H2 + k] += D3[s * O + o] * A2[s * H2 + k]; g[ob3 + o] += D3[s * O + o]; }
    }
    for (size_t i = 0; i < n; ++i) { double gi = g[i] / B; M[i] = mu * M[i] + gi; P[i] -= lr * (gi + mu * M[i]); }
}

int main(int argc, char** argv) {
    int B = 64, I = 784, H1 = argc > 1 ? atoi(argv[1]) : 256, H2 = argc > 2 ? atoi(argv[2]) : 128, O = 10;
    const int NB = 20;   // batches: a launch of v3 runs NB steps, one a batch
    size_t n = size_t(H1) * I + H1 + size_t(H2) * H1 + H2 + size_t(O) * H2 + O;
    std::mt19937 rng(7); std::uniform_real_distribution<float> U(-1, 1);
    std::vector<float> X(size_t(NB) * B * I), T(size_t(NB) * B * O, 0.f), P(n), M(n);
    for (auto& x : X) x = U(rng) * 0.5f + 0.5f;
    for (int s = 0; s < NB * B; ++s) T[s * O + (rng() % O)] = 1.f;
    size_t off = 0;
    auto fill = [&](size_t cnt, int fan) { float sc = 1.f / std::sqrt(float(fan)); for (size_t i = 0; i < cnt; ++i) P[off + i] = U(rng) * sc; off += cnt; };
    fill(size_t(H1) * I, I); fill(H1, I); fill(size_t(H2) * H1, H1); fill(H2, H1); fill(size_t(O) * H2, H2); fill(O, H2);
    for (auto& m : M) m = U(rng) * 0.01f;
    int T2 = (H2 + 15) / 16, T1 = (H1 + 15) / 16, G = std::max(T1, T2);
    if (I > 8 * KC || H1 > 8 * K2 || O > 16 || B > 64 || I % 4 || H1 % 4 || H2 % 16 || H2 > 128) {
        fprintf(stderr, "shape out of the prototype's limits\n"); return 1; }
    float *dX, *dT, *dP, *dM, *dA1, *dA2, *dY, *dYp, *dD1p, *dgb3; unsigned long long* dsync;
    CK(cudaMalloc(&dX, X.size() * 4)); CK(cudaMalloc(&dT, T.size() * 4)); CK(cudaMalloc(&dP, n * 4)); CK(cudaMalloc(&dM, n * 4));
    CK(cudaMalloc(&dA1, 2 * 64 * H1 * 4));   // two: v6 takes a buffer a step parity
    CK(cudaMalloc(&dA2, 64 * 16 * T2 * 4)); CK(cudaMalloc(&dY, B * O * 4));
    CK(cudaMalloc(&dYp, size_t(B) * O * 16 * 4)); CK(cudaMalloc(&dD1p, size_t(T2) * 64 * H1 * 4)); CK(cudaMalloc(&dgb3, 64 * 4));
    CK(cudaMalloc(&dsync, 8)); long long* dts; CK(cudaMalloc(&dts, 32 * 8)); CK(cudaMemset(dsync, 0, 8));
    CK(cudaMemcpy(dX, X.data(), X.size() * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dT, T.data(), T.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dYp, 0, size_t(B) * O * 16 * 4)); CK(cudaMemset(dA2, 0, 64 * 16 * T2 * 4));
    int khz = 0; CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    // The float64 reference after 1 and after 4 steps (batches 0 .. 3).
    std::vector<std::vector<double>> refP(5), refM(5);
    {
        std::vector<double> Pr(P.begin(), P.end()), Mr(M.begin(), M.end());
        for (int st = 0; st < 4; ++st) {
            std::vector<float> Xb(X.begin() + size_t(st) * B * I, X.begin() + size_t(st + 1) * B * I);
            std::vector<float> Tb(T.begin() + size_t(st) * B * O, T.begin() + size_t(st + 1) * B * O);
            ref_step(Pr, Mr, Xb, Tb, B, I, H1, H2, O, 0.05, 0.9);
            refP[st + 1] = Pr; refM[st + 1] = Mr;
        }
    }
    Args a{dX, dT, dP, dM, dA1, dA2, dY, dYp, dD1p, dgb3, dsync, dts, B, I, H1, H2, O, 0.05f, 0.9f, 1.f / B};
    // launch(kernel version, stream, first batch, steps)
    auto launch = [&](int ver, cudaStream_t st, int steps) {
        if (ver == 6 || ver == 7) {
            cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3((H1 / U6) * R6); cfg.blockDim = dim3(256);
            cfg.dynamicSmemBytes = V6_SMEM_FLOATS * 4; cfg.stream = st;
            cudaLaunchAttribute at; at.id = cudaLaunchAttributeClusterDimension;
            at.val.clusterDim.x = R6; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
            cfg.attrs = &at; cfg.numAttrs = 1;
            if (ver == 7) CK(cudaLaunchKernelEx(&cfg, fc3_v6<true>, a, steps));
            else CK(cudaLaunchKernelEx(&cfg, fc3_v6<false>, a, steps));
        } else if (ver == 5 || ver == 8) {
            cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(G * 4); cfg.blockDim = dim3(256);
            cfg.dynamicSmemBytes = V5_SMEM_FLOATS * 4; cfg.stream = st;
            cudaLaunchAttribute at; at.id = cudaLaunchAttributeClusterDimension;
            at.val.clusterDim.x = 4; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
            cfg.attrs = &at; cfg.numAttrs = 1;
            if (ver == 8) CK(cudaLaunchKernelEx(&cfg, fc3_v5<true>, a, steps));
            else CK(cudaLaunchKernelEx(&cfg, fc3_v5<false>, a, steps));
        } else if (ver == 4) {
            cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(G * 4); cfg.blockDim = dim3(256);
            cfg.dynamicSmemBytes = v4_smem_floats<4>() * 4; cfg.stream = st;
            cudaLaunchAttribute at; at.id = cudaLaunchAttributeClusterDimension;
            at.val.clusterDim.x = 4; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
            cfg.attrs = &at; cfg.numAttrs = 1;
            CK(cudaLaunchKernelEx(&cfg, fc3_v4<4>, a, steps));
        } else if (ver == 3) fc3_v3<<<G * 8, 256, SMEM_FLOATS * 4, st>>>(a, steps);
        else for (int i = 0; i < steps; ++i) {
            Args b = a; b.X = a.X + size_t(i) * B * I; b.T = a.T + size_t(i) * B * O;
            if (ver == 1) fc3_v1<<<G * 8, 256, SMEM_FLOATS * 4, st>>>(b); else fc3_v2<<<G * 8, 256, SMEM_FLOATS * 4, st>>>(b);
        }
        CK(cudaGetLastError());
    };
    auto check = [&](int ver, int steps) {
        const double tolP = 1e-2, tolM = 1e-3;   // element-wise (v1 to v4: FP32 products)
        CK(cudaMemcpy(dP, P.data(), n * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dM, M.data(), n * 4, cudaMemcpyHostToDevice));
        launch(ver, 0, steps); CK(cudaDeviceSynchronize());
        std::vector<float> P1(n), M1(n);
        CK(cudaMemcpy(P1.data(), dP, n * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(M1.data(), dM, n * 4, cudaMemcpyDeviceToHost));
        const auto& Pr = refP[steps]; const auto& Mr = refM[steps];
        double worst = 0, worstm = 0; size_t wm = 0;
        for (size_t i = 0; i < n; ++i) {
            worst = std::max(worst, std::fabs(P1[i] - Pr[i]) / (1e-6 + std::fabs(Pr[i] - P[i]) + 1e-3 * std::fabs(Pr[i])));
            double dm = std::fabs(M1[i] - Mr[i]) / (1e-6 + std::fabs(Mr[i]));
            if (dm > worstm) { worstm = dm; wm = i; }
        }
        printf("  (worst M at %zu: %.9g against %.9g; W1 %zu, b1 %zu, W2 %zu, b2 %zu, W3 %zu, b3 %zu)\n", wm, M1[wm], Mr[wm],
               size_t(0), size_t(H1) * I, size_t(H1) * I + H1, size_t(H1) * I + H1 + size_t(H2) * H1,
               size_t(H1) * I + H1 + size_t(H2) * H1 + H2, n - O);
        bool ok = worst < tolP && worstm < tolM;
        printf("  check after %d step(s) against float64: worst P error %.3g (of the update, or 1e-3 |p|), M %.3g%s\n", steps,
               worst, worstm, ver >= 5 ? " (element-wise, for the record)" : ok ? " -> OK" : " -> MISMATCH");
        if (ver >= 5) {
            // TF32 products: each gradient is off by about 1e-3 of its size, and an element whose
            // momentum is near 0 makes any element-wise ratio explode (a CPU emulation of v5's
            // rounding gave 0.34 after 1 step, 31 after 4). So per tensor, as norms:
            // ||P - Pr|| / ||Pr - P0|| and ||M - Mr|| / ||Mr|| under 5e-2 (the emulation: 8.7e-3 and
            // 1.7e-2 after 4 steps; a wrong fragment index gives about 1).
            const size_t off[7] = {0, size_t(H1) * I, size_t(H1) * I + H1, size_t(H1) * I + H1 + size_t(H2) * H1,
                                   size_t(H1) * I + H1 + size_t(H2) * H1 + H2, n - O, n};
            const char* nm[6] = {"W1", "b1", "W2", "b2", "W3", "b3"};
            ok = true;
            printf("  per tensor, ||P - Pr|| / ||Pr - P0||, ||M - Mr|| / ||Mr||:");
            for (int t = 0; t < 6; ++t) {
                double ep = 0, up = 0, em = 0, mm = 0;
                for (size_t i = off[t]; i < off[t + 1]; ++i) {
                    ep += (P1[i] - Pr[i]) * (P1[i] - Pr[i]); up += (Pr[i] - P[i]) * (Pr[i] - P[i]);
                    em += (M1[i] - Mr[i]) * (M1[i] - Mr[i]); mm += Mr[i] * Mr[i];
                }
                const double rp = std::sqrt(ep / (up + 1e-30)), rm = std::sqrt(em / (mm + 1e-30));
                ok = ok && rp < 5e-2 && rm < 5e-2;
                printf(" %s %.2g %.2g;", nm[t], rp, rm);
            }
            printf(" -> %s\n", ok ? "OK" : "MISMATCH");
        }
        return ok;
    };
    bool all_ok = true;
    const int first = argc > 3 ? atoi(argv[3]) : 1;   // the first version to run (1 to 8)
    const int lastver = argc > 4 ? atoi(argv[4]) : 8;
    for (int ver = first; ver <= lastver; ++ver) {
        if ((ver == 6 || ver == 7) && (H1 % U6 || H2 > R6 * H26 || I > R6 * KC6)) { printf("v6: shape out of its limits\n"); continue; }
        void* fn = ver == 1 ? (void*)fc3_v1 : ver == 2 ? (void*)fc3_v2 : ver == 3 ? (void*)fc3_v3
                 : ver == 4 ? (void*)fc3_v4<4> : ver == 5 ? (void*)fc3_v5<false> : ver == 6 ? (void*)fc3_v6<false> : ver == 7 ? (void*)fc3_v6<true> : (void*)fc3_v5<true>;
        const int R = (ver == 6 || ver == 7) ? R6 : ver >= 4 ? 4 : 8;
        const int Gv = (ver == 6 || ver == 7) ? H1 / U6 : G;
        const int smem = (ver == 6 || ver == 7) ? V6_SMEM_FLOATS * 4 : (ver == 5 || ver == 8) ? V5_SMEM_FLOATS * 4 : ver == 4 ? v4_smem_floats<4>() * 4 : SMEM_FLOATS * 4;
        CK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(Gv * R); cfg.blockDim = dim3(256); cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute at; at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = R; at.val.clusterDim.y = 1; at.val.clusterDim.z = 1;
        if (ver >= 4) { cfg.attrs = &at; cfg.numAttrs = 1; }
        int maxc = 0; CK(cudaOccupancyMaxActiveClusters(&maxc, fn, &cfg));
        printf("v%d: %d clusters of %d (at most %d resident)\n", ver, Gv, R, maxc);
        if (maxc < Gv) { fprintf(stderr, "not all clusters fit\n"); return 1; }
        // The grid barrier's targets assume the count is a multiple of this launch's blocks: from 0 at
        // each version (the versions' grids differ: 128 and 64 blocks).
        CK(cudaMemset(dsync, 0, 8));
        all_ok &= check(ver, 1);
        all_ok &= check(ver, 4);
        if (getenv("FC3_CHECK_ONLY")) continue;   // under compute-sanitizer: the checks alone
        cudaStream_t st; CK(cudaStreamCreate(&st));
        cudaGraph_t gr; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        launch(ver, st, NB);   // NB steps: NB launches (v1, v2) or one (v3)
        CK(cudaStreamEndCapture(st, &gr)); CK(cudaGraphInstantiate(&ge, gr, 0));
        for (int i = 0; i < 10; ++i) CK(cudaGraphLaunch(ge, st));
        cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        const int reps = 100;
        printf("  %d,%d,%d,%d batch %d: us a step (a graph of %d steps, replayed %d times), 5 runs:", I, H1, H2, O, B, NB, reps);
        for (int rep = 0; rep < 5; ++rep) {
            CK(cudaEventRecord(e0, st));
            for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); printf(" %.2f", ms * 1000.f / (reps * NB));
        }
        printf("\n");
        long long tsv[32]; CK(cudaMemcpy(tsv, dts, sizeof tsv, cudaMemcpyDeviceToHost));
        if (ver == 6 || ver == 7) {   // block 0's marks in the last step and the step before's end
            const char* n6[15] = {"S1 mma", "S1 barrier + join", "grid barrier 1", "A1 loads", "fc2 mma + A2",
                                  "logits' part", "barrier b", "logits, softmax, D3", "D2", "D1p, arrive c",
                                  "gW2 + W2, gW3 + W3, b2, b3", "wait c", "D1 join, barrier d", "gW1 + W1, b1", "end"};
            printf("  block 0, the last step (cycles; us at %d MHz):\n", khz / 1000);
            for (int i = 0; i < 15; ++i)
                printf("    %-28s %7lld  %.2f\n", n6[i], tsv[17 + i] - tsv[16 + i], (tsv[17 + i] - tsv[16 + i]) / (khz * 1e-3));
            printf("    %-28s %7lld  %.2f\n", "step (marks 0 to 15)", tsv[31] - tsv[16], (tsv[31] - tsv[16]) / (khz * 1e-3));
        } else {
            const char* nm[7] = {"S1 fc1 forward", "grid barrier 1", "S2 fc2 forward + Yp", "grid barrier 2",
                                 "S3 loss, D2, gW2, D1p", "grid barrier 3", "S4 D1, gW1"};
            printf("  block 0, the last step (cycles; us at %d MHz):\n", khz / 1000);
            for (int i = 0; i < 7; ++i)
                printf("    %-24s %7lld  %.2f\n", nm[i], tsv[i + 1] - tsv[i], (tsv[i + 1] - tsv[i]) / (khz * 1e-3));
        }
        std::vector<float> P2(n); CK(cudaMemcpy(P2.data(), dP, n * 4, cudaMemcpyDeviceToHost));
        bool fin = true; for (float p : P2) fin = fin && std::isfinite(p);
        printf("  parameters finite after the timed steps: %s\n", fin ? "yes" : "NO");
        CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(gr)); CK(cudaStreamDestroy(st));
    }
    printf("%s\n", all_ok ? "all checks OK" : "A CHECK FAILED");
    return all_ok ? 0 : 1;
}
