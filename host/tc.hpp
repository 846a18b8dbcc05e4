// The tensor-core kernels (ptx/tc.ptx): their launch shapes, and the float64 reference of what
// they compute with a bound for TF32 inputs. Shared by verify (verify_tc.cpp) and the tests.
//
// tc_forward: A[s][h] = act(b[h] + sum_{k < I} X[s][k] W[h][k]), X [B][I], W [H][I] (nn.Linear's
// [out][in]), b [H], A [B][H]; act 0 none, 1 ReLU. One warp a 16-sample x 8-unit tile of A, four
// warps a block, one mma.sync.m16n8k8 (TF32) a tile of 8 columns of X and W (the PTX header).
//
// The bound of A[s][h] (ref_tc_forward), with S = sum_k |x_k w_k| over the float inputs,
// z = b[h] + sum_k x_k w_k in float64, u = 2^-24:
//   1. TF32 inputs. cvt.rna.tf32.f32 keeps 11 significant bits, so it errs by at most 2^-11 of
//      its input; the product of two rounded inputs is within (1 + 2^-11)^2 - 1 = 2^-10 + 2^-22
//      of x w, and the tensor core multiplies them exactly (22 significant bits fit an FP32):
//      |sum x~ w~ - sum x w| <= (2^-10 + 2^-22) S, and S~ = sum |x~ w~| <= (1 + 2^-10 + 2^-22) S.
//   2. The FP32 sums inside the tensor core. PTX specifies neither their order nor their
//      rounding, and measurements of the tensor cores (Fasi, Higham, Mikaitis and Pranesh,
//      "Numerical behavior of NVIDIA tensor cores", 2021) found that they do not round each
//      addition to nearest: an mma aligns its addends (c and the 8 products, in one group or in
//      several smaller ones) to the largest of the group, drops the bits below FP32's 24, and
//      truncates the group's sum to FP32. Each of these steps errs by less than 2^-23 = 2u of
//      M = |c| + sum of the mma's |products|; there are at most 8 alignments (each addend of a
//      group but its largest: 8 in all) and 8 group sums, so at most 32 u M an mma. Over the
//      ceil(I/8) mma of an output's chain (M <= S~, grown by the errors before) the sum is within
//      gamma_{32 ceil(I/8)} S~ of the exact sum of the products, gamma_n = n u / (1 - n u).
//      (Were every addition an FP32 add to nearest, gamma_I, a fourth of it, would do; TF32's
//      2^-10 outweighs either: at I = 784 they are 2^-12.4 and 2^-14.4.)
//   3. The bias: z = add.rn(c, b[h]), one rounding: u (|z| + the error of c).
//   So with e_c = tc_sum_bound(I) S:  |A - z| <= e_c + u (|z| + e_c).  ReLU is 1-Lipschitz:
//   max(z, 0) is held to the same bound (no kink to skip), and where z + bound < 0 the kernel's
//   z is negative too, so A must be exactly 0 (bound 0).
#pragma once

#include "kernels.hpp"
#include "reference.hpp"

#include <vector>

namespace ptxlab {

inline constexpr unsigned kTcBlock = 128;   // tc_forward: threads a block (4 warps)
inline constexpr unsigned kTcRows = 16;     // samples of a warp's tile of A
inline constexpr unsigned kTcCols = 8;      // units of a warp's tile of A (and columns of an mma's k tile)
inline constexpr unsigned kTcMaxSize = 1u << 31;  // B, I, H: the kernels' 32-bit index arithmetic

// ceil(B/16) * ceil(H/8): the warp tiles of tc_forward.
size_t tc_forward_tiles(unsigned B, unsigned H);

// Why tc_forward cannot take these sizes (empty when it can): 1 <= B, I, H <= 2^31.
std::string tc_unfit(unsigned B, unsigned I, unsigned H);

// X [B][I], W [H][I], b [H] -> A [B][H]; act 0 none, 1 ReLU. Throws InputError (tc_unfit).
void launch_tc_forward(const Kernel& k, unsigned B, unsigned I, unsigned H, CUdeviceptr X, CUdeviceptr W,
                       CUdeviceptr b, CUdeviceptr A, unsigned act, CUstream s);

// The bound of the accumulated sum c of one output as a fraction of S = sum |x w| (items 1 and
// 2 above): (2^-10 + 2^-22) + gamma_{32 ceil(I/8)} (1 + 2^-10 + 2^-22).
double tc_sum_bound(unsigned I);

// The float64 reference of tc_forward with the bound above, on the kernel's float inputs.
Bounded ref_tc_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                       unsigned B, unsigned I, unsigned H, unsigned act);

}  // namespace ptxlab
