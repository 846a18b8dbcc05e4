// Launch shape of dense_tc (ptx/densetc.ptx): dense_mm's GEMM (dense.hpp: the same DenseArgs,
// the same three products of a dense layer) on TF32 mma.sync in 128 x 128 output tiles, for
// large M x N (the tc set's fc layers at large batch). Shared by verify, bench and the model
// trainer. The PTX header explains the tiling, the pipeline and the summation order.
//
// The bound of one output (densetc_bound), with S = sum_k |A(m,k) Bop(n,k)| over the float
// inputs (masked), z the exact sum, u = 2^-24: the chain of an output is 2 ceil(K/16) mma on
// TF32 inputs, the padding k tiles past K included (their products +0), so tc.hpp's argument
// holds with I = 16 ceil(K/16): |c - z| <= e_c = tc_sum_bound(16 ceil(K/16)) S. Then
// v = mul.rn(c, scale): |v - scale z| <= |scale| e_c + u (|scale z| + |scale| e_c) = e_v;
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
inline constexpr unsigned kDenseTcSmem = 40960; // static: 2 buffers x (As, Bs) [128][20] floats
inline constexpr unsigned kDenseTcMaxSize = 0x7fffffffu;  // M, N, K: the PTX's signed k arithmetic

// The grid of a dense_tc launch: tiles of 128 x 128 outputs over M x (N + [db]), a block each.
struct DenseTcPlan {
    unsigned tiles_m = 1, tiles_n = 1, chunks = 1;  // chunks: ceil(K/16) k chunks of each chain
    unsigned grid = 1;                              // tiles_m * tiles_n blocks
};
DenseTcPlan densetc_plan(unsigned M, unsigned N, unsigned K, bool ones);

// Why dense_tc cannot take these arguments (empty when it can): M, N, K in 1 .. 2^31 - 1, C, A
// and Bop given, the grid within the launch limit.
std::string densetc_unfit(const DenseArgs& a);
// The launch (throws InputError for densetc_unfit's cases); overlap: a programmatic dependent launch.
void launch_dense_tc(const Kernel& k, const DenseArgs& a, CUstream s, bool overlap = false);

// The sum's bound as a fraction of S = sum |a b| (the header above): tc_sum_bound over the
// chain's 16 ceil(K/16) columns.
double densetc_sum_bound(unsigned K);
// The bound of one output: S = sum_k |a b|, exact = scale z (+ bias), z the exact sum.
double densetc_bound(unsigned K, double S, float scale, double scaled, double exact);

// The tc set's fc products switch from their small-tile kernels (tc_forward, tc_grad_input,
// tc_grad_weights, fused_forward, fc_bwd_data, dense_mm) to dense_tc where the product's output
// has at least a full wave of 128 x 128 tiles on a 132-SM H100: 132 * 128 * 128 = 2,162,688
// elements. Below it dense_tc's grid leaves SMs idle and the older kernels were measured at
// batch 64 (today's models all stay below it: the largest, 784-1024-1024-10 at batch 64, has
// outputs of 64 x 1024 and 1024 x 1024 = 1,048,576 elements).
inline constexpr size_t kDenseTcMinOutputs = size_t(132) * 128 * 128;
inline bool densetc_product(unsigned M, unsigned N) { return size_t(M) * N >= kDenseTcMinOutputs; }

}  // namespace ptxlab
