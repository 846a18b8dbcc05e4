// Launch shape of dense_tc (ptx/densetc.ptx): dense_mm's GEMM (dense.hpp: the same DenseArgs,
// the same three products of a dense layer) on TF32 mma.sync in 128 x 128 output tiles, for
// large M x N (the tc set's fc layers at large batch). Shared by verify, bench and the model
// trainer. The PTX header explains the tiling, the pipeline, the split of K and the summation
// order.
//
// The bound of one output (densetc_bound), with S = sum_k |A(m,k) Bop(n,k)| over the float
// inputs (masked), z the exact sum, u = 2^-24, R the split (ranks of a cluster): rank r's chain
// is at most 2 ceil(K/16) mma on TF32 inputs, the padding k tiles past K included (their
// products +0), so tc.hpp's argument holds for it with I = 16 ceil(K/16) (gamma grows with the
// mma count): |c_r - z_r| <= e S_r, e = tc_sum_bound(16 ceil(K/16)), z_r and S_r its k's exact
// sum and magnitude; so |c_r| <= (1 + e) S_r. The join sum = c_0 + c_1 + ... + c_{R-1} by R - 1
// add.rn in rank order errs by at most gamma_{R-1} sum |c_r| <= gamma_{R-1} (1 + e) S:
// |sum - z| <= e_c = (e + gamma_{R-1} (1 + e)) S (densetc_sum_bound; R = 1: tc's bound). Then
// v = mul.rn(sum, scale): |v - scale z| <= |scale| e_c + u (|scale z| + |scale| e_c) = e_v;
// the bias, add.rn: |C - (scale z + b)| <= e_v + u (|scale z + b| + e_v); ReLU is
// 1-Lipschitz (the same bound). db (the ones column) is c's bound with Bop = 1 and the scale.
#pragma once

#include "dense.hpp"
#include "kernels.hpp"

#include <cstddef>
#include <string>

namespace ptxlab {

inline constexpr unsigned kDenseTcBlock = 256;  // threads a block: 8 warps of 64 x 32 outputs
inline constexpr unsigned kDenseTcTile = 128;   // outputs a tile side
inline constexpr unsigned kDenseTcKTile = 16;   // k a staged chunk (two k8 mma steps)
// Dynamic shared memory a block: the cp.async path's 3 stages x (As, Bs) [128][36] floats (an
// operand along rows takes [32][136] of its 18,432 bytes; the register-staged path takes 2
// buffers x (As, Bs) [128][20], 40,960 bytes); above 48 KB,
// so the launch raises the function's opt-in. Two blocks an SM still fit (2 x 109 KB < 227 KB).
inline constexpr unsigned kDenseTcSmem = 3 * 2 * 128 * 36 * 4;
inline constexpr unsigned kDenseTcMaxSize = 0x7fffffffu;  // M, N, K: the PTX's signed k arithmetic
inline constexpr unsigned kDenseTcMaxSplit = 8;  // ranks of a cluster (the portable cluster size)
inline constexpr unsigned kDenseTcBlocksPerSm = 2;  // .minnctapersm 2: 128 registers, 108 KB each

// The grid of a dense_tc launch: tiles of 128 x 128 outputs over M x (N + [db]), each computed by
// a cluster of `split` blocks that split the chunks = ceil(K/16) chunks of 16 k: rank r takes
// [r per_rank, min(r per_rank + per_rank, chunks)), per_rank = ceil(chunks / split).
struct DenseTcPlan {
    unsigned tiles_m = 1, tiles_n = 1, chunks = 1;
    unsigned split = 1, per_rank = 1;  // S: 1 .. 8 blocks a tile; chunks a rank
    unsigned grid = 1;                 // tiles_m * tiles_n * split blocks
};
// split: the S in 1 .. min(8, chunks) that takes the fewest chunk times, waves * per_rank, where
// a wave is sms * 2 blocks (two resident an SM) and waves = ceil(tiles * S / wave); the least
// such S on a tie (the join costs). Where the tiles fill the waves (the 4096 x 1024 products'
// 256 tiles) S stays 1; the 72 tiles of a 1024 x 1025 weight gradient with K = 4096 take S = 7
// (504 blocks, two waves of 37 chunks, against 256 chunks unsplit). `force_split` (1 .. 8, not
// 0) takes that S instead (verify runs each).
DenseTcPlan densetc_plan(unsigned M, unsigned N, unsigned K, bool ones, unsigned sms, unsigned force_split = 0);
// The chunks of rank r under the plan: [first, end) (possibly empty), as the kernel takes them.
struct DenseTcRange {
    unsigned first = 0, end = 0;
};
DenseTcRange densetc_rank_range(const DenseTcPlan& p, unsigned rank);

// The staging path the PTX takes (its veca, vecb): the cp.async path where both operands take
// 16-byte units, each k-major (k stride 1, row stride % 4 == 0) or along rows (row stride 1,
// k stride % 4 == 0), with A, Am and Bop 16-byte aligned; else the register-staged path.
bool densetc_cp_async(const DenseArgs& a);

// Why dense_tc cannot take these arguments (empty when it can): M, N, K in 1 .. 2^31 - 1, C, A
// and Bop given, the grid (at the largest split) within the launch limit.
std::string densetc_unfit(const DenseArgs& a);
// The launch (throws InputError for densetc_unfit's cases and a split outside 0 .. 8);
// split 0: densetc_plan's choice on this device; overlap: a programmatic dependent launch.
void launch_dense_tc(const Kernel& k, const DenseArgs& a, CUstream s, bool overlap = false, unsigned split = 0);

// The sum's bound as a fraction of S = sum |a b| (the header above) under a split of `split`
// ranks: tc_sum_bound over 16 ceil(K/16) columns and the join's split - 1 additions.
double densetc_sum_bound(unsigned K, unsigned split);
// The bound of one output: S = sum_k |a b|, exact = scale z (+ bias), z the exact sum.
double densetc_bound(unsigned K, unsigned split, double S, float scale, double scaled, double exact);

// The tc set's fc products switch from their small-tile kernels (tc_forward, tc_grad_input,
// tc_grad_weights, fused_forward, fc_bwd_data, dense_mm) to dense_tc where the product's output
// has at least a full wave of 128 x 128 tiles on a 132-SM H100: 132 * 128 * 128 = 2,162,688
// elements. Below it dense_tc's grid leaves SMs idle and the older kernels were measured at
// batch 64 (today's models all stay below it: the largest, 784-1024-1024-10 at batch 64, has
// outputs of 64 x 1024 and 1024 x 1024 = 1,048,576 elements).
inline constexpr size_t kDenseTcMinOutputs = size_t(132) * 128 * 128;
inline bool densetc_product(unsigned M, unsigned N) { return size_t(M) * N >= kDenseTcMinOutputs; }

}  // namespace ptxlab
