// The convolution kernels on the tensor cores (ptx/tcconv.ptx): tc_conv_fwd and
// tc_conv_bwd_data, with conv_fwd's and conv_bwd_data's meaning (conv.hpp; tc_conv_bwd_data can also
// run the backward pass of the 2x2 max-pool below in its epilogue: PoolBelow), their
// launch shapes, and the float64 reference of what they compute with a bound for TF32 inputs.
//
// Both are one implicit GEMM over the pixels of a strip of rows (conv_strips) and 32 output
// channels a block; the channels they sum over (IC: C forward, K backward) go through shared
// memory 8 at a time, T = KS*KS mma.sync.m16n8k8 k steps a chunk. The bounds, with S = sum |x w| over an output's products (the kernel's float inputs):
// each output's sum is a chain of ceil(IC/8) * T mma on TF32 inputs, so tc.hpp's argument
// (items 1 and 2) holds with I = 8 ceil(IC/8) T products: c is within tc_sum_bound(I) S of the
// exact sum. The forward pass adds the bias with one add.rn (u (|z| + e_c)); ReLU is 1-Lipschitz,
// and where z + bound < 0 the output must be exactly 0. The backward pass stores c.
#pragma once

#include "conv.hpp"
#include "kernels.hpp"

#include <string>
#include <vector>

namespace ptxlab {

inline constexpr unsigned kTcConvThreads = 512;  // threads a block: 16 warps, one 16-pixel tile each
inline constexpr unsigned kTcConvChannels = 32;  // output channels a block writes (4 mma n tiles)
inline constexpr unsigned kTcConvPitch = 260;    // floats a channel row of the output tile (conflict-free)

// The trainer's tc set takes the tensor cores for a pass that sums over at least this many
// channels (a chunk of 8); below it (conv1: one input channel, 7 of 8 chunk slots zero) the
// FP32 kernel is faster (H100, conv1 at batch 64: tc_conv_fwd 10.1 us, conv_fwd 8.1 us).
inline constexpr unsigned kTcConvMinChannels = 8;
inline constexpr unsigned kTcConvFill = 128;     // blocks below which the strips are cut finer

// The strips of a pass writing OC channels (K forward, C backward): conv_strips' (at most 256
// pixels a strip), cut finer while N * ceil(OC/32) * strips < kTcConvFill and a finer count
// leaves no strip starting past the image. The kernels read the count back from the grid; the
// tiling changes no output's arithmetic. pooled (tc_conv_fwd with its pool): conv_strips'
// pooled strips, cut finer only into even row counts (the kernel rounds R up to even too).
ConvStrips tcconv_strips(const ConvDims& d, unsigned OC, bool pooled = false);

// The dynamic shared memory of a tc_conv block for the pass's geometry: two buffers, each of
// 2 x 8 staged planes of (R+KS-1) x (W+KS-1) floats (xs and ys, each rounded up to 16 bytes)
// and 32 weight rows of 8T+4 floats; then the tables: 8T patch offsets (koff), a plane's
// offsets in the image (poff) and 8T weight offsets (wk, backward); or the 32 x 260-float
// output tile when that is larger.
unsigned tcconv_smem(const ConvDims& d, unsigned OC, bool pooled = false);

// Why tc_conv_fwd and tc_conv_bwd_data cannot take these dimensions (empty when they can):
// conv_unfit's limits (the strips of conv_fwd).
std::string tcconv_unfit(const ConvDims& d);

// With idx (not 0) tc_conv_fwd pools its outputs 2x2 as conv_fwd does (launch_conv_fwd): Y and
// idx the pool's; conv_pool_unfit's limits.
void launch_tc_conv_fwd(const Kernel& k, const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b,
                        CUdeviceptr Y, unsigned act, CUstream s, CUdeviceptr idx = 0);
// The 2x2 max-pool (stride 2) whose output is a conv's input, for tc_conv_bwd_data's epilogue:
// idx its argmax (pool_fwd's, [N][C][H][W], the index in the PH x PW plane), Yp its maxima
// (pool_fwd's Y: the ReLU mask of the layer under the pool, as launch_pool_bwd's Yp; 0: none),
// PH x PW its input (H = PH/2, W = PW/2, floor). idx 0: no pool.
struct PoolBelow {
    CUdeviceptr idx = 0, Yp = 0;
    unsigned PH = 0, PW = 0;
};
// Why the pool `p` cannot be the one below d's input (empty when it can): its output must be H x W.
std::string pool_below_unfit(const ConvDims& d, const PoolBelow& p);

// With pool.idx (not 0) tc_conv_bwd_data runs the pool's backward pass in its epilogue:
// dX is then the pool's input deltas [N][C][PH][PW], bit for bit launch_pool_bwd(P = N*C, PH, PW,
// dX, the deltas it writes without the pool, idx, Yp) (ptx/tcconv.ptx's header); pool_below_unfit's limits.
void launch_tc_conv_bwd_data(const Kernel& k, const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                             CUdeviceptr Wt, unsigned act, CUstream s, const PoolBelow& pool = {});

// The float64 references with the TF32 bounds above: ref_conv_fwd and ref_conv_bwd_data
// (ref_conv.hpp) with ConvArith::Tf32.

}  // namespace ptxlab
