// tc_conv_bwd_weights (ptx/tcwgrad.ptx): the convolution's weight and bias gradients on the
// tensor cores (TF32 mma.sync), conv_bwd_weights' signature and sums (conv.hpp), so the trainer
// can swap it in: its launch shape, the shapes it takes, and its float64 reference with a TF32
// bound. The PTX header explains the tiling and the summation order.
//
//   dW[k][c][ky][kx] = scale * sum_{n,y,x} G[n][k][y][x] X[n][c][y+ky-p][x+kx-p],  p = KS/2
//   db[k]            = scale * sum_{n,y,x} G[n][k][y][x]
//   G = dY where Y > 0 else 0 (act 1); G = dY (act 0).
//
// The bounds (ref_tc_conv_bwd_weights), u = 2^-24, gamma_n = n u / (1 - n u):
//   dW. One output's arithmetic: each of the 8 warps of each of the 8 ranks runs one mma chain of
//     at most R = 8 ceil(N/8) ceil(ceil(HW/8)/8) products (ceil(N/8) images of the rank, at most
//     ceil(S/8) of the S = ceil(HW/8) k-steps an image, 8 products an mma; padding products are
//     exact zeros). By tc.hpp's items 1 and 2 each chain's sum c_i is within
//     tc_sum_bound(R) S_i of its exact sum, S_i the sum of its |g x| (the float inputs); so the
//     64 partials together err by at most e_c = tc_sum_bound(R) S (S = sum_i S_i = sum |g x|),
//     and sum |c_i| <= S + e_c. Then 63 FP32 adds in two levels (7 over the warps, 7 over the
//     ranks: each partial goes through at most 14 roundings): e_a = gamma_14 (S + e_c). Then
//     mul.rn by scale: |dW - scale z| <= |scale| (e_c + e_a + u (|z| + e_c + e_a)), z the
//     exact sum.
//   db. A chain of FP32 adds of the unrounded G: per thread at most 4 ceil(N/8) ceil(ceil(HW/4)/16)
//     terms from +0 (one row, groups of 4 pixels 16 apart), the butterfly (4), the ranks (7),
//     the scale (1): every term goes through at most m = that + 12 roundings, so
//     |db - scale sum| <= |scale| gamma_m sum |G| (tc_bias_bound(m)).
#pragma once

#include "kernels.hpp"
#include "ref_conv.hpp"
#include "reference.hpp"

#include <string>
#include <vector>

namespace ptxlab {

inline constexpr unsigned kTcWgradBlock = 256;          // threads a block (8 warps)
inline constexpr unsigned kTcWgradRows = 16;            // output channels a cluster owns (mma M)
inline constexpr unsigned kTcWgradCols = 64;            // columns (c, tap) of dW a cluster owns: 8 mma N tiles
inline constexpr unsigned kTcWgradSmemMax = 227 * 1024;  // sm_90: the most dynamic shared memory a block takes

struct TcWgradPlan {
    unsigned mtiles = 1;   // ceil(K / 16) tiles of output channels
    unsigned cgroups = 1;  // ceil(C*KS*KS / 64) groups of columns
    unsigned grid = 8;     // blocks: mtiles * cgroups clusters of 8
    unsigned nch = 1;      // X planes a block stages: min(C, 62 / (KS*KS) + 2)
    unsigned buffers = 2;  // staging buffers: 2 (the next image's copies in flight) when they fit
    size_t smem = 0;       // dynamic shared memory a block, bytes (tcwgrad_smem)
};
TcWgradPlan tcwgrad_plan(const ConvDims& d);

// The kernel's dynamic shared memory (the PTX header's layout) for `buffers` staging buffers:
// ceil16(4160 + 4 HWP) + max(buffers SB, 32768), SB = 128 GP + 4 NCH XP, with HWP = ceil8(H*W),
// GP = ceil32(HWP) + 4, XP = ceil4((H+KS-1)(W+KS-1) + (KS-1)(W+KS) + 1), NCH as in the plan.
// Without `buffers`: two if that fits in kTcWgradSmemMax, else one (what the launch gives; the
// kernel reads the choice from its dynamic shared memory size).
size_t tcwgrad_smem(const ConvDims& d, unsigned buffers);
size_t tcwgrad_smem(const ConvDims& d);

// Why tc_conv_bwd_weights cannot take these dimensions (empty when it can): every size >= 1,
// KS 1, 3 or 5, the shared memory within kTcWgradSmemMax (refuses only KS 1 with many channels
// of large images, e.g. C 64 at 28x28), and the 32-bit element indices of X, dY and dW.
std::string tcwgrad_unfit(const ConvDims& d);

// The longest chain of roundings behind one db output: 4 ceil(N/8) ceil(ceil(HW/4)/16) + 12 (above).
size_t tcwgrad_bias_depth(const ConvDims& d);
// The most products in one warp's mma chain for one dW output: 8 ceil(N/8) ceil(ceil(HW/8)/8).
size_t tcwgrad_chain(const ConvDims& d);

// dW [K][C][KS][KS], db [K] from X [N][C][H][W], dY and Y [N][K][H][W]; act 0 none, 1 ReLU.
// Throws InputError (tcwgrad_unfit).
void launch_tc_conv_bwd_weights(const Kernel& k, const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                                CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale, CUstream s);

// The float64 reference with the TF32 bounds above, on the kernel's float inputs.
void ref_tc_conv_bwd_weights(const ConvDims& d, const std::vector<float>& X, const std::vector<float>& dY,
                             const std::vector<float>& Y, unsigned act, float scale, Bounded& dW, Bounded& db);

}  // namespace ptxlab
