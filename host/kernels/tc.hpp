// The tensor-core kernels (ptx/tc.ptx): their launch shapes, and the float64 reference of what
// they compute with a bound for TF32 inputs. Shared by verify (family_tc.cpp) and the tests.
//
// tc_forward: A[s][h] = act(b[h] + sum_{k < I} X[s][k] W[h][k]), X [B][I], W [H][I] (nn.Linear's
// [out][in]), b [H], A [B][H]; act 0 none, 1 ReLU. A block a 32 x 32 tile of A, four k groups of
// four warps, each group summing every fourth 32-column chunk, one mma.sync.m16n8k8 (TF32) a
// tile of 8 columns of X and W; the four chains joined by add.rn (the PTX header).
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
//      2^-10 outweighs either: at I = 784 they are 2^-12.4 and 2^-14.4.) The four k groups'
//      chains: with I <= 32 there is one, and the others add +0 exactly; else each chain has
//      at most ceil(I/8) - 1 mma, and the two add.rn that join them cost 2u each a term, so
//      every product sees fewer than 32 ceil(I/8) roundings of u either way: the same gamma.
//   3. The bias: z = add.rn(c, b[h]), one rounding: u (|z| + the error of c).
//   So with e_c = tc_sum_bound(I) S:  |A - z| <= e_c + u (|z| + e_c).  ReLU is 1-Lipschitz:
//   max(z, 0) is held to the same bound (no kink to skip), and where z + bound < 0 the kernel's
//   z is negative too, so A must be exactly 0 (bound 0).
//
// The two backward products, G [B][O] the gradient at the layer's pre-activation: G = dY where
// Y > 0, else 0 (act 1, ReLU; Y the layer's output), G = dY (act 0), dY and Y [B][O]. G is
// formed from the inputs exactly (a select), so the reference masks with the same bits.
//
// tc_grad_input: dX[s][i] = sum_{o < O} G[s][o] W[o][i], W [O][I], dX [B][I] (fc_bwd_data's
// sums and signature). One warp a 16-sample x 8-column tile of dX, an mma a k tile of 8
// outputs. Its bound (ref_tc_grad_input) is items 1 and 2 with K = O products: with
// S = sum_o |G[s][o] W[o][i]|, |dX - sum| <= tc_sum_bound(O) S (no epilogue rounding).
//
// tc_grad_weights: dW[o][i] = scale sum_{s < B} G[s][o] X[s][i], db[o] = scale sum_s G[s][o],
// X [B][I], dW [O][I], db [O]. A block a 32 x 32 tile of dW, four k groups of four warps, each
// group every fourth 32-sample chunk, an mma a k tile of 8 samples, the chains joined by add.rn
// as in tc_forward (the same argument: the bound below holds); db summed in FP32 by lanes
// 0..15 of the warps of tile column 0, in the same four chains. Its bounds
// (ref_tc_grad_weights), with S = sum_s |G[s][o] X[s][i]|, z = sum_s G[s][o] X[s][i] exact:
//   dW: items 1 and 2 with K = B give c within e_c = tc_sum_bound(B) S of z; then
//       mul.rn(c, scale), one rounding: |dW - scale z| <= |scale| (e_c + u (|z| + e_c)).
//   db: four chains of add.rn from +0 in sample order, joined by two add.rn: each term sees
//       at most B - 1 roundings (fewer once there are two chains), so the sum is within
//       gamma_{B-1} sum_s |G[s][o]|; with mul.rn by scale, gamma_{B-1} + u (1 +
//       gamma_{B-1}) <= gamma_B: |db - scale sum| <= |scale| gamma_B sum_s |G[s][o]|
//       (tc_bias_bound(B) = gamma_B).
//
// tc_grad_weights_wide: tc_grad_weights' sums (its signature and fragments) for small batches
// and wide layers (1 <= B <= kTcWideMaxBatch): a block a 64-output x 64-input tile of dW, 8
// warps, the whole batch of G, Y and X staged once in shared memory; each 16 x 8 mma tile ONE
// chain of ceil(B/8) mma over the k tiles of 8 samples in order (from +0, no join), then
// mul.rn by scale; db one FP32 chain of add.rn from +0 in sample order, then mul.rn, by the
// blocks of input tile 0. ref_tc_grad_weights bounds it unchanged: item 2 is the bound of one
// chain of ceil(K/8) mma from +0 (the four k groups' chains and their join were shown to fit
// the same gamma), so with K = B dW keeps e_c = tc_sum_bound(B) S and its one mul.rn; and db's
// one chain from +0 gives each term at most B - 1 roundings (the first add is exact), the count
// taken above, so tc_bias_bound(B) holds.
#pragma once

#include "kernels.hpp"
#include "reference.hpp"

#include <string_view>
#include <vector>

namespace ptxlab {

inline constexpr unsigned kTcBlock = 128;   // tc_grad_input: threads a block (4 warps)
// tc_forward and tc_grad_weights: four k groups of 4 warps a block, each group walking every
// fourth 32-wide chunk of the sum with its own cp.async stages (184,320 bytes of dynamic
// shared memory: 4 x 46,080), the four chains added at the end as (c0 + c1) + (c2 + c3).
inline constexpr unsigned kTcKGroups = 4;
inline constexpr unsigned kTcGroupBlock = 128 * kTcKGroups;
inline constexpr unsigned kTcGroupSmem = 46080 * kTcKGroups;
// tc_grad_weights_wide: threads a block (8 warps), and the most samples it stages (110,592
// bytes of shared memory at 128).
inline constexpr unsigned kTcWideBlock = 256;
inline constexpr unsigned kTcWideMaxBatch = 128;
// The BF16 twins of ptx/tcbf16.ptx: tc_forward_bf16's stage rows are 40 floats (4 groups x 2
// matrices x 5 stages x 32 x 40 floats), tc_grad_weights_bf16's 36 (4 x 3 x 3 x 32 x 36).
inline constexpr unsigned kTcForwardBf16Smem = 51200 * kTcKGroups;
inline constexpr unsigned kTcGradWeightsBf16Smem = 41472 * kTcKGroups;

// The inputs' rounding of a tc kernel: TF32 (ptx/tc.ptx, cvt.rna.tf32.f32, m16n8k8) or BF16
// (ptx/tcbf16.ptx, cvt.rn.bf16x2.f32, m16n8k16). The _bf16 entries take the same arguments.
enum class TcPrecision { Tf32, Bf16 };
// Which precision an entry computes in: Bf16 for the names ending in "_bf16".
TcPrecision tc_precision_of(std::string_view entry);
// The entry without its "_bf16" (tc_forward_bf16 -> tc_forward): its shapes and reference.
std::string_view tc_base_entry(std::string_view entry);
inline constexpr unsigned kTcRows = 16;     // rows of a warp's tile (mma M): samples of A and dX, outputs of dW
inline constexpr unsigned kTcCols = 8;      // columns of a warp's tile (mma N) and of an mma's k tile (K)
inline constexpr unsigned kTcMaxSize = 1u << 31;  // B, I, H: the kernels' 32-bit index arithmetic
inline constexpr unsigned kTcActNone = 0, kTcActRelu = 1;  // the tc kernels' act codes

// ceil(B/16) * ceil(H/8): the 16 x 8 mma tiles of tc_forward (the twin's warp tiles).
size_t tc_forward_tiles(unsigned B, unsigned H);
// ceil(B/32) * ceil(H/32): tc_forward's blocks, each a 32-sample x 32-unit tile of A.
size_t tc_forward_blocks(unsigned B, unsigned H);

// Why tc_forward cannot take these sizes (empty when it can): 1 <= B, I, H <= 2^31, and fewer
// than 2^32 warp tiles (the PTX's 32-bit warp index).
std::string tc_unfit(unsigned B, unsigned I, unsigned H);

// X [B][I], W [H][I], b [H] -> A [B][H]; act 0 none, 1 ReLU. Throws InputError (tc_unfit).
void launch_tc_forward(const Kernel& k, unsigned B, unsigned I, unsigned H, CUdeviceptr X, CUdeviceptr W,
                       CUdeviceptr b, CUdeviceptr A, unsigned act, CUstream s);

// The bound of the accumulated sum c of one output as a fraction of S = sum |x w| (items 1 and
// 2 above): (2^-10 + 2^-22) + gamma_{32 ceil(I/8)} (1 + 2^-10 + 2^-22). For BF16 inputs:
// cvt.rn.bf16x2.f32 rounds to 8 significant bits, within 2^-8 of its input, so a product is
// within (1 + 2^-8)^2 - 1 = 2^-7 + 2^-16 of x w; an m16n8k16 adds 16 products and c (16
// alignments and 16 group sums at most: 64 u M an mma) over ceil(I/16) mma:
// (2^-7 + 2^-16) + gamma_{64 ceil(I/16)} (1 + 2^-7 + 2^-16).
double tc_sum_bound(unsigned I, TcPrecision p = TcPrecision::Tf32);

// The float64 reference of tc_forward with the bound above, on the kernel's float inputs.
Bounded ref_tc_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                       unsigned B, unsigned I, unsigned H, unsigned act, TcPrecision p = TcPrecision::Tf32);

// ceil(B/16) * ceil(I/8): the warp tiles of tc_grad_input (16 samples x 8 columns of dX).
size_t tc_grad_input_tiles(unsigned B, unsigned I);
// ceil(O/16) * ceil(I/8): the warp tiles of tc_grad_weights (16 outputs x 8 inputs of dW).
size_t tc_grad_weights_tiles(unsigned I, unsigned O);
// ceil(O/32) * ceil(I/32): tc_grad_weights' blocks, each a 32-output x 32-input tile of dW.
size_t tc_grad_weights_blocks(unsigned I, unsigned O);

// Why tc_grad_input or tc_grad_weights (entry) cannot take these sizes (empty when it can):
// 1 <= B, I, O <= 2^31, and fewer than 2^32 warp tiles (the PTX's 32-bit warp index).
std::string tc_grad_unfit(const std::string& entry, unsigned B, unsigned I, unsigned O);

// dY, Y [B][O], W [O][I] -> dX [B][I]; act 0 none, 1 ReLU. Throws InputError (tc_grad_unfit).
void launch_tc_grad_input(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY,
                          CUdeviceptr Y, CUdeviceptr W, unsigned act, CUstream s);

// dY, Y [B][O], X [B][I] -> dW [O][I], db [O]; act 0 none, 1 ReLU. Throws InputError (tc_grad_unfit).
void launch_tc_grad_weights(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dW, CUdeviceptr db,
                            CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr X, unsigned act, float scale, CUstream s);

// ceil(O/64) * ceil(I/64): tc_grad_weights_wide's blocks, each a 64-output x 64-input tile of dW.
size_t tc_grad_weights_wide_blocks(unsigned I, unsigned O);
// Its dynamic shared memory: G, Y and X staged as [Bp][72]-float rows (64 columns and 8 of
// padding), Bp = B rounded up to a multiple of 8: 3 * Bp * 72 * 4 bytes.
unsigned tc_grad_weights_wide_smem(unsigned B);

// Why tc_grad_weights_wide cannot take these sizes (empty when it can): tc_grad_weights' limits
// (1 <= B, I, O <= 2^31, fewer than 2^32 warp tiles: the twin's 32-bit warp index), which also
// keep its grid of tc_grad_weights_wide_blocks below 2^31 blocks, and B <= kTcWideMaxBatch.
std::string tc_grad_wide_unfit(unsigned B, unsigned I, unsigned O);

// tc_grad_weights' arguments and outputs on tc_grad_weights_wide. Throws InputError (tc_grad_wide_unfit).
void launch_tc_grad_weights_wide(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dW, CUdeviceptr db,
                                 CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr X, unsigned act, float scale, CUstream s);

// The bound of db's FP32 sum of B terms and its scaling as a fraction of |scale| sum |G|:
// gamma_B (infinite from B = 2^24 on: no bound).
double tc_bias_bound(unsigned B);

// The float64 references of tc_grad_input and tc_grad_weights (tc_grad_weights_wide too) with
// the bounds above, on the kernels' float inputs.
Bounded ref_tc_grad_input(const std::vector<float>& dY, const std::vector<float>& Y, const std::vector<float>& W,
                          unsigned B, unsigned I, unsigned O, unsigned act, TcPrecision p = TcPrecision::Tf32);
void ref_tc_grad_weights(const std::vector<float>& dY, const std::vector<float>& Y, const std::vector<float>& X,
                         unsigned B, unsigned I, unsigned O, unsigned act, float scale, Bounded& dW, Bounded& db,
                         TcPrecision p = TcPrecision::Tf32);

}  // namespace ptxlab
