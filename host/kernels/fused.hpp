// Launch shapes of the fused kernel set (ptx/fused.ptx): shared by verify, train and bench.
#pragma once

#include "kernels.hpp"
#include "recipe.hpp"

#include <algorithm>

namespace ptxlab {

inline constexpr unsigned kFusedBlock = 256;

inline unsigned ceil_div(unsigned a, unsigned b) { return (a + b - 1) / b; }

// fused_forward: a cluster of kFusedForwardCluster blocks per 8-sample x 32-unit tile of A
// (the PTX fixes the cluster size with .reqnctapercluster; the grid must be a multiple of it).
inline constexpr unsigned kFusedForwardCluster = 8;
inline unsigned fused_forward_grid(unsigned B, unsigned H) {
    return ceil_div(H, 32) * ceil_div(B, 8) * kFusedForwardCluster;
}
// fused_output: one block per sample, a warp for each output (one pass over the outputs) and a
// thread for each hidden unit (one pass over the hidden deltas) as far as 8 to 16 warps go:
// 32 * clamp(max(O, ceil(H/32)), 8, 16) threads (the PTX's .maxntid is 512). Its dynamic shared
// memory holds the sample's O outputs (ds: y, then the exponentials, then the deltas).
inline unsigned fused_output_grid(unsigned B) { return B; }
inline constexpr unsigned kFusedOutputMaxWarps = 16;
inline unsigned fused_output_block(unsigned H, unsigned O) {
    const unsigned warps = std::max(O, ceil_div(H, 32));
    return 32 * std::clamp(warps, 8u, kFusedOutputMaxWarps);
}
inline unsigned fused_output_smem(unsigned O) { return 4 * O; }
// fused_grad: 8-row x 32-column tiles of [GW1 | Gb1], then of [GW2 | Gb2].
inline unsigned fused_grad_grid(unsigned I, unsigned H, unsigned O) {
    return ceil_div(H, 8) * ceil_div(I + 1, 32) + ceil_div(O, 8) * ceil_div(H + 1, 32);
}

// fused_step (ptx/step.ptx): whole steps in one launch (one, or several back to back on
// consecutive batches), for I <= 800 and O <= 32. Clusters of 8 blocks, one 16-unit tile
// of the hidden layer each (a cluster loops when there are fewer clusters than tiles);
// every cluster must be resident at once (a grid barrier), so the grid is
// min(tiles, cuOccupancyMaxActiveClusters) clusters.
inline constexpr unsigned kFusedStepCluster = 8;
inline bool fused_step_fits(unsigned I, unsigned O) { return I <= 800 && O <= 32; }
// Training uses it for batches up to one 64-sample chunk: it is then the fastest step
// (BENCHMARKS.md); larger batches run faster as three launches, which spread over more SMs.
inline bool fused_step_preferred(unsigned B, unsigned I, unsigned O) { return B <= 64 && fused_step_fits(I, O); }
inline unsigned fused_step_tiles(unsigned H) { return ceil_div(H, 16); }
// Floats of the partial-output scratch Yp: two buffers (even and odd steps) of [B][O][TP],
// TP = the tiles rounded up to 8.
inline size_t fused_step_partials(unsigned B, unsigned H, unsigned O) {
    return 2 * size_t(B) * O * (ceil_div(fused_step_tiles(H), 8) * 8);
}
// Blocks of a launch for H hidden units (the occupancy query is made once per function).
unsigned fused_step_grid(const Kernel& k, unsigned H);

// Buffers of one fused step; sizes {I, H, O}.
struct FusedArgs {
    CUdeviceptr X, T, W1, b1, W2, b2, A1, Y, D2, D1;
    unsigned B, I, H, O;
    // fused_step's scratch: the partial outputs (fused_step_partials floats) and the grid
    // barrier's 64-bit arrival count (zero before the first launch; 8 bytes).
    CUdeviceptr Yp = 0, sync = 0;
    // fused_step: the steps one launch runs, on consecutive batches (X, T and Y then hold
    // steps * B rows; A ends with the last step's activations).
    unsigned steps = 1;
    // Launch each kernel as a programmatic dependent launch, so that it is scheduled while
    // the previous one drains (the kernels wait for it with griddepcontrol.wait).
    bool overlap = false;
    // The recipe (recipe.hpp): the output-delta code fused_output takes (kLossDiff,
    // kLossSoftmax), and the factor from a batch sum of deltas to the mean gradient
    // (grad_scale) that fused_grad and batch_mean apply.
    unsigned loss = 0;
    float scale = 0.0f;
    // The hidden activation's code (recipe.hpp act_code) fused_forward and fused_output take.
    // For GELU (kActGelu) fused_forward also writes the pre-activations Z into D1, where
    // fused_output reads them for the derivative before it overwrites them with the deltas.
    unsigned act = 0;
    // The mean gradients fused_grad (or the fast set's batch_mean) writes: [H][I], [H], [O][H], [O].
    CUdeviceptr GW1 = 0, Gb1 = 0, GW2 = 0, Gb2 = 0;
    // fused_step: the parameters as one flat array P (W1, b1, W2, b2 back to back: W1 .. b2
    // above must point into it so), the optimizer state M and V with P's layout (0 where the
    // optimizer keeps none; RMSprop's one buffer is V), the table of this launch's steps
    // (hyp: steps records of recipe.hpp's StepHyper) and the optimizer.
    CUdeviceptr P = 0, M = 0, V = 0, hyp = 0;
    OptimConfig optim = {};
};

// fused_forward with the activation a.act (Z = a.D1 for GELU, else none).
void launch_fused_forward(const KernelSet& ks, const FusedArgs& a, CUstream s);
// fused_output with the loss code a.loss and the activation a.act (k: the loaded entry; verify
// launches it so too).
void launch_fused_output(const Kernel& k, const FusedArgs& a, CUstream s);
void launch_fused_output(const KernelSet& ks, const FusedArgs& a, CUstream s);
// fused_grad: the batch gradients a.GW1, a.Gb1, a.GW2, a.Gb2 = a.scale * (batch sums).
void launch_fused_grad(const KernelSet& ks, const FusedArgs& a, CUstream s);
// The hidden layer's activations A1 for design d: tc_forward for the tensor-core set
// (--kernels tc: A1 = ReLU(X W1^T + b1), TF32 mma.sync; ReLU only), fused_forward otherwise.
void launch_hidden_forward(const KernelSet& ks, const FusedArgs& a, Design d, CUstream s);
// The tensor-core set's gradients: two tc_grad_weights launches in place of fused_grad (GW1,
// Gb1 from D1 and X; GW2, Gb2 from D2 and A1; each scaled by a.scale). fused_output (FP32)
// makes Y, D2 and D1 before them.
void launch_tc_grads(const KernelSet& ks, const FusedArgs& a, CUstream s);
// The same on tc_grad_weights_wide (k; a.B <= kTcWideMaxBatch): the model trainer's last two fc
// layers where they are dense layers (cnn_ops.hpp fused_grad_kernel).
void launch_tc_grads_wide(const Kernel& k, const FusedArgs& a, CUstream s);
// fused_step: a.steps steps in one launch, with the loss code a.loss, the gradient scale
// a.scale and the optimizer a.optim (throws Error if a.P is not where a.W1 .. a.b2 say).
void launch_fused_step(const Kernel& k, const FusedArgs& a, CUstream s);

// The fast set (--kernels fast) after fused_forward and fused_output: the per-sample weight
// gradients gW1[B][H][I] = D1 (x) X and gW2[B][O][H] = D2 (x) A1 (ptx/outer.ptx), then the
// mean gradients of ptx/mean.ptx (batch_mean, each scaled by a.scale): a.GW1 from gW1,
// a.Gb1 from the deltas a.D1 [B][H], a.GW2 from gW2, a.Gb2 from a.D2 [B][O]. The optimizer
// (host/kernels/optim.hpp) then applies them.
void launch_fast_outer(const KernelSet& ks, const FusedArgs& a, CUdeviceptr gW1, CUdeviceptr gW2, CUstream s);
void launch_fast_mean(const KernelSet& ks, const FusedArgs& a, CUdeviceptr gW1, CUdeviceptr gW2, CUstream s);
// outer: one thread per 4 columns of a row of G[B][R][C].
inline unsigned outer_grid(unsigned B, unsigned R, unsigned C) {
    return grid_for(size_t(B) * R * ceil_div(C, 4), kFusedBlock);
}

}  // namespace ptxlab
