#include "fused.hpp"

#include "recipe.hpp"
#include "tc.hpp"

#include <algorithm>

namespace ptxlab {

namespace {
template <class... A> void launch(const Kernel& k, bool overlap, unsigned grid, CUstream s, A... args) {
    if (overlap) k.launch_overlapped(grid, kFusedBlock, s, args...);
    else k.launch(grid, kFusedBlock, s, args...);
}
}  // namespace

void launch_fused_forward(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    const CUdeviceptr Z = a.act == kActGelu ? a.D1 : CUdeviceptr(0);  // GELU's derivative needs z
    launch(ks.get("fused_forward"), a.overlap, fused_forward_grid(a.B, a.H), s, a.X, a.W1, a.b1, a.A1, Z, a.B, a.I, a.H,
           a.act);
}

void launch_fused_output(const Kernel& k, const FusedArgs& a, CUstream s) {
    k.launch_smem_overlapped(fused_output_grid(a.B), fused_output_block(a.H, a.O), fused_output_smem(a.O), a.overlap, s,
                             a.A1, a.W2, a.b2, a.T, a.Y, a.D2, a.D1, a.B, a.H, a.O, a.loss, a.act);
}

void launch_fused_output(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    launch_fused_output(ks.get("fused_output"), a, s);
}

void launch_fused_grad(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    launch(ks.get("fused_grad"), a.overlap, fused_grad_grid(a.I, a.H, a.O), s, a.GW1, a.Gb1, a.GW2, a.Gb2, a.X, a.A1,
           a.D1, a.D2, a.B, a.I, a.H, a.O, a.scale);
}

void launch_hidden_forward(const KernelSet& ks, const FusedArgs& a, Design d, CUstream s) {
    if (d == Design::Tc) launch_tc_forward(ks.get("tc_forward"), a.B, a.I, a.H, a.X, a.W1, a.b1, a.A1, kTcActRelu, s);
    else launch_fused_forward(ks, a, s);
}

namespace {
// The two layers' gradients by `launch` (tc_grad_weights' signature): D1 and D2 are already the
// pre-activation gradients (fused_output applied ReLU's mask), so act 0: no mask, and the Y
// argument is not read.
template <class Launch> void two_grads(Launch launch, const Kernel& k, const FusedArgs& a, CUstream s) {
    launch(k, a.B, a.I, a.H, a.GW1, a.Gb1, a.D1, a.D1, a.X, kTcActNone, a.scale, s);
    launch(k, a.B, a.H, a.O, a.GW2, a.Gb2, a.D2, a.D2, a.A1, kTcActNone, a.scale, s);
}
}  // namespace

void launch_tc_grads(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    two_grads(launch_tc_grad_weights, ks.get("tc_grad_weights"), a, s);
}

void launch_tc_grads_wide(const Kernel& k, const FusedArgs& a, CUstream s) {
    two_grads(launch_tc_grad_weights_wide, k, a, s);
}

unsigned fused_step_grid(const Kernel& k, unsigned H) {
    return std::min(fused_step_tiles(H), k.resident_clusters(kFusedStepCluster, kFusedBlock, 0, true)) *
           kFusedStepCluster;
}

void launch_fused_step(const Kernel& k, const FusedArgs& a, CUstream s) {
    if (!fused_step_fits(a.I, a.O))
        PTXLAB_THROW(Error, "internal error: fused_step launched with I = {}, O = {} (it takes I <= 800, O <= 32)", a.I,
                     a.O);
    if (a.steps == 0) PTXLAB_THROW(Error, "internal error: fused_step launched with 0 steps");
    // The kernel finds W1 .. b2 inside P (step.ptx): they must be laid out so.
    const CUdeviceptr b1 = a.P + size_t(a.H) * a.I * 4, W2 = b1 + size_t(a.H) * 4, b2 = W2 + size_t(a.O) * a.H * 4;
    if (a.P == 0 || a.W1 != a.P || a.b1 != b1 || a.W2 != W2 || a.b2 != b2 || a.hyp == 0)
        PTXLAB_THROW(Error, "internal error: fused_step takes W1, b1, W2, b2 back to back in P, and a step table");
    const OptimConfig& o = a.optim;
    // Always a plain launch, never a programmatic dependent one: its grid barrier needs every
    // block resident, and a dependent launch's waiting blocks could take their SMs (step.ptx).
    // Z (the pre-activations, for the derivative of an activation other than ReLU) is a.D1.
    if (a.act != kActRelu && a.D1 == 0) PTXLAB_THROW(Error, "internal error: fused_step needs D1 as Z for act {}", a.act);
    launch(k, false, fused_step_grid(k, a.H), s, a.X, a.T, a.P, a.M, a.V, a.A1, a.D1, a.Y, a.Yp, a.sync, a.hyp, a.B,
           a.I, a.H, a.O, a.steps, a.loss, a.scale, optim_code(o.kind), o.momentum, o.beta1, o.beta2, o.eps, o.alpha,
           o.weight_decay, a.act);
}

void launch_fast_outer(const KernelSet& ks, const FusedArgs& a, CUdeviceptr gW1, CUdeviceptr gW2, CUstream s) {
    const Kernel& k = ks.get("outer");
    k.launch(outer_grid(a.B, a.H, a.I), kFusedBlock, s, gW1, a.D1, a.X, a.B, a.H, a.I);
    k.launch(outer_grid(a.B, a.O, a.H), kFusedBlock, s, gW2, a.D2, a.A1, a.B, a.O, a.H);
}

void launch_fast_mean(const KernelSet& ks, const FusedArgs& a, CUdeviceptr gW1, CUdeviceptr gW2, CUstream s) {
    const Kernel& k = ks.get("batch_mean");
    const unsigned n1 = a.H * a.I, n2 = a.O * a.H;
    k.launch(grid_for(n1), 256, s, a.GW1, gW1, n1, a.B, a.scale);
    k.launch(grid_for(a.H), 256, s, a.Gb1, a.D1, a.H, a.B, a.scale);
    k.launch(grid_for(n2), 256, s, a.GW2, gW2, n2, a.B, a.scale);
    k.launch(grid_for(a.O), 256, s, a.Gb2, a.D2, a.O, a.B, a.scale);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // G Gs | N B | scale
    {"batch_mean", "mean", {P, P, U, U, F}},
    // G D V | B R C
    {"outer", "outer", {P, P, P, U, U, U}},
    // X W b A Z | B I H | act   (Z may be 0)
    {"fused_forward", "fused", {P, P, P, P, P, U, U, U, U}},
    // A W b T Y D2 D1 | B H O | loss act   (GELU: D1 holds Z on entry)
    {"fused_output", "fused", {P, P, P, P, P, P, P, U, U, U, U, U}},
    // GW1 Gb1 GW2 Gb2 X A D1 D2 | B I H O | scale
    {"fused_grad", "fused", {P, P, P, P, P, P, P, P, U, U, U, U, F}},
    // X T P M V A Z Y Yp sync hyp | B I H O steps | loss scale | optim momentum beta1 beta2 eps alpha wd | act
    {"fused_step", "step", {P, P, P, P, P, P, P, P, P, P, P, U, U, U, U, U, U, F, U, F, F, F, F, F, F, U}},
};
}  // namespace

}  // namespace ptxlab
