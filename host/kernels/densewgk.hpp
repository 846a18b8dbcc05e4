// Launch shape of dense_wg_k (ptx/hopper/densewgk.ptx, sm_90a): a dense layer's forward product
// for few rows, C[m][n] = relu?(sum_k A[m][k] B[n][k] + bias[n]) with A = X [M][K] and B = W [N][K]
// (nn.Linear's layout, both K-major), on wgmma TF32 fed by TMA in 64 x 128 output tiles, each
// tile's K split over a thread-block cluster of R = 1, 2, 4 or 8 blocks joined in rank order
// through DSMEM. Shared by verify, bench and the model trainer (the tc set's hidden fc layers at
// small batch, cnn_ops.hpp). The PTX header explains the pipeline, the join and the sum's order.
// With a mask Y [M][N] each output where !(Y > 0) becomes +0: a layer's deltas to its input,
// dX = dZ W as A = dZ [B][O], B = W^T [I][O], masked by the ReLU output below (densewgk_deltas_args).
//
// The bound of one output (densewgk_bound), with S = sum_k |a_k b_k| over the float inputs, z the
// exact sum, u = 2^-24:
//   1. TF32 inputs. wgmma reads the raw FP32 bits, i.e. truncates each input to 11 significant
//      bits (bits & 0xffffe000): an error below 2^-10 of the input (not 2^-11 as tc.hpp's
//      cvt.rna), so the product of two truncated inputs is within (1 + 2^-10)^2 - 1 = 2^-9 + 2^-20
//      of a b (the tensor core multiplies them exactly), and S~ = sum |a~ b~| <= S.
//   2. Each rank's chain: 4 ceil(K/32) k8 steps (every k tile's four, the zero-filled ones past K
//      adding +0), each one tensor-core step of 8 products and D, which one mma.sync.m16n8k8 gives
//      bit for bit (the header): tc.hpp's argument holds, at most 32 u M a step, so the chain is
//      within gamma_{32 * 4 ceil(K/32)} S~_r of its k's exact sum z_r (gamma_n = n u / (1 - n u)):
//      |c_r - z_r| <= e S_r with e = (2^-9 + 2^-20) + gamma (1 + 2^-9 + 2^-20), and |c_r| <= (1 + e) S_r.
//   3. The join: c_0 + c_1 + ... + c_{R-1}, R - 1 add.rn in rank order, errs by at most
//      gamma_{R-1} sum |c_r| <= gamma_{R-1} (1 + e) S, so |sum - z| <= e_c = (e + gamma_{R-1} (1 + e)) S
//      (densewgk_sum_bound).
//   4. The bias, add.rn: |C - (z + b)| <= e_c + u (|z + b| + e_c) (without a bias the output is the
//      sum and the extra term only loosens the bound); ReLU is 1-Lipschitz (the same bound).
#pragma once

#include "cuda.hpp"
#include "kernels.hpp"

#include <string>

namespace ptxlab {

inline constexpr unsigned kDenseWgkBlock = 160;     // one consumer warpgroup and a producer warp
inline constexpr unsigned kDenseWgkTileM = 64;      // rows of an output tile (a grid row)
inline constexpr unsigned kDenseWgkTileN = 128;     // columns of an output tile (a cluster)
inline constexpr unsigned kDenseWgkKTile = 32;      // k a TMA box (a stage: four k8 steps)
inline constexpr unsigned kDenseWgkSmem = 197760;   // eight stages, the barriers, 1 KB alignment slack
inline constexpr unsigned kDenseWgkMaxRanks = 8;    // the portable cluster size
inline constexpr unsigned kDenseWgkMaxM = 65535u * kDenseWgkTileM;  // grid.y = ceil(M / 64) <= 65535
inline constexpr unsigned kDenseWgkMaxNK = 0x7fffff00u;  // N, K: the copies' signed 32-bit coordinates
inline constexpr unsigned kDenseWgkFlagRelu = 1, kDenseWgkFlagBias = 2, kDenseWgkFlagMask = 4;  // the kernel's flags

// One product: C [M][N] = mask?(relu?(A [M][K] B [N][K]^T + bias)), rows contiguous (strides K, K,
// N; the mask's N).
struct DenseWgkArgs {
    CUdeviceptr C = 0, A = 0, B = 0, bias = 0;  // bias 0: none
    CUdeviceptr mask = 0;                       // Y [M][N]: +0 where !(Y > 0); 0: none
    unsigned M = 0, N = 0, K = 0;
    bool relu = false;
    unsigned flags() const {
        return (relu ? kDenseWgkFlagRelu : 0u) | (bias ? kDenseWgkFlagBias : 0u) | (mask ? kDenseWgkFlagMask : 0u);
    }
};
// A hidden layer's forward pass: Y [B][O] = relu?(X [B][I] W [O][I]^T + b).
DenseWgkArgs densewgk_forward_args(unsigned B, unsigned I, unsigned O, CUdeviceptr X, CUdeviceptr W, CUdeviceptr b,
                                   CUdeviceptr Y, bool relu);
// A layer's deltas to its input: dX [B][I] = dZ [B][O] W [O][I], from Wt = W^T [I][O] (a transposed
// copy), each output +0 where !(Yb > 0) when Yb (the ReLU output of the layer below) is given.
DenseWgkArgs densewgk_deltas_args(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dZ, CUdeviceptr Wt,
                                  CUdeviceptr Yb);

// The grid: (ranks * tiles_n, tiles_m) blocks, clusters of `ranks` along x. The k tiles
// nk = ceil(K/32) go per_rank = ceil(nk / ranks) a rank, in rank order (the last ranks may have
// fewer, or none).
struct DenseWgkPlan {
    unsigned tiles_m = 1, tiles_n = 1, k_tiles = 1;
    unsigned ranks = 1, per_rank = 1;
    unsigned grid_x = 1, grid_y = 1;
};
// ranks: the largest R in {8, 4, 2, 1} with R <= nk (each rank's share ceil(nk / R) >= 1 tile)
// and R * tiles_n * tiles_m blocks (one a cluster rank; a block takes a whole SM's shared memory)
// within one wave of `sms`; 1 where even R = 1 is more than a wave. 64 x 1024 x 1024: 8 tiles,
// 32 k tiles: R = 8, 64 blocks of 4 k tiles; 64 x 1024 x 784 (25 k tiles): R = 8 (4 a rank, rank 6
// one, rank 7 none); batch 500, N = 1024: 64 tiles, R = 2. `force_ranks` (1, 2, 4 or 8; 0: the
// rule) takes that R instead (verify runs each).
DenseWgkPlan densewgk_plan(unsigned M, unsigned N, unsigned K, unsigned sms, unsigned force_ranks = 0);

// Why dense_wg_k cannot take these arguments on a device of compute capability cc_major.cc_minor
// (empty when it can): compute capability exactly 9.0 (sm_90a code); C, A and B given; M, N >= 1,
// M <= 65535 * 64, N below 2^31; K >= 4, K % 4 == 0 and below 2^31 (TMA: a row stride of 4 K bytes,
// a multiple of 16); A and B 16-byte aligned (TMA's global address).
std::string densewgk_unfit(const DenseWgkArgs& a, int cc_major, int cc_minor);
// The launch (throws InputError for densewgk_unfit's cases on the current context's device and
// for ranks other than 0, 1, 2, 4, 8): the two tensor maps (A as M x K in 64 x 32 boxes, B as
// N x K in 128 x 32, 128-byte swizzle, zero fill), the shared memory opt-in, the cluster launch;
// ranks 0: densewgk_plan's choice on this device; overlap: a programmatic dependent launch.
void launch_dense_wg_k(const Kernel& k, const DenseWgkArgs& a, CUstream s, bool overlap = false, unsigned ranks = 0);

// transpose32 (ptx/hopper/transpose.ptx): out [C][R] = in [R][C]^T, a pure copy; 32 x 32 tiles, one
// block of 256 threads each, ceil(R / 32) * ceil(C / 32) blocks. The model trainer keeps W^T of each
// layer whose deltas run on dense_wg_k (TF32 wgmma takes only K-major operands).
inline constexpr unsigned kTransposeTile = 32, kTransposeBlock = 256;
void launch_transpose32(const Kernel& k, CUdeviceptr out, CUdeviceptr in, unsigned R, unsigned C, CUstream s);

// The sum's bound as a fraction of S = sum |a b| (items 1-3 above) under `ranks` ranks.
double densewgk_sum_bound(unsigned K, unsigned ranks);
// The bound of one output (item 4): S = sum_k |a b|, exact = z (+ bias), z the exact sum.
double densewgk_bound(unsigned K, unsigned ranks, double S, double exact);

}  // namespace ptxlab
