// Launch and limits of fc3_step (fc3step.hpp, ptx/fc3step.ptx).
#include "fc3step.hpp"

#include "error.hpp"

#include <algorithm>

namespace ptxlab {

std::string fc3_step_unfit(unsigned B, unsigned I, unsigned H1, unsigned H2, unsigned O) {
    if (B == 0 || I == 0 || H1 == 0 || H2 == 0 || O == 0)
        return fmt::format("fc3_step needs B, I, H1, H2, O >= 1, got B={} I={} H1={} H2={} O={}", B, I, H1, H2, O);
    if (B > kFc3StepMaxB || I > kFc3StepMaxI || H1 > kFc3StepMaxH1 || H2 > kFc3StepMaxH2 || O > kFc3StepMaxO)
        return fmt::format("fc3_step takes B <= {}, I <= {}, H1 <= {}, H2 <= {}, O <= {} (16 H1 tiles of 16 units, "
                           "4 ranks of 196 input columns, 8 H2 tiles, one 64-sample batch), got B={} I={} H1={} H2={} "
                           "O={}",
                           kFc3StepMaxB, kFc3StepMaxI, kFc3StepMaxH1, kFc3StepMaxH2, kFc3StepMaxO, B, I, H1, H2, O);
    return {};
}

unsigned fc3_step_clusters(unsigned H1, unsigned H2) { return std::max((H1 + 15) / 16, (H2 + 15) / 16); }

namespace {
// Once per function: allow the shared memory, then ask how many clusters of 4 such blocks can be
// resident at once (the grid barrier needs all of a launch's clusters resident).
void prepare(const Kernel& k) { k.resident_clusters(kFc3StepCluster, kFc3StepBlock, kFc3StepSmem, false); }
}  // namespace

void launch_fc3_step(const Kernel& k, const Fc3StepArgs& a, CUstream s) {
    if (std::string why = fc3_step_unfit(a.B, a.I, a.H1, a.H2, a.O); !why.empty())
        PTXLAB_THROW(InputError, "{}", why);
    if (a.steps == 0) PTXLAB_THROW(Error, "internal error: fc3_step launched with 0 steps");
    if (a.X == 0 || a.T == 0 || a.P == 0 || a.Y == 0 || a.hyp == 0 || a.work == 0)
        PTXLAB_THROW(Error, "internal error: fc3_step needs X, T, P, Y, a step table and its scratch (work)");
    // The state the optimizer keeps must be there (the kernel never touches M, V where it keeps none).
    if ((optim_uses_m(a.optim.kind) && a.M == 0) || (optim_uses_v(a.optim.kind) && a.V == 0))
        PTXLAB_THROW(Error, "internal error: fc3_step for {} needs its optimizer state (M: m, V: v)",
                     to_string(a.optim.kind));
    prepare(k);
    const unsigned G = fc3_step_clusters(a.H1, a.H2);
    if (G > unsigned(k.max_clusters))
        PTXLAB_THROW(Error,
                     "kernel 'fc3_step' ({}): H1 = {}, H2 = {} take {} clusters of {} blocks, all resident at once (its "
                     "grid barrier), but this GPU holds only {} such clusters",
                     k.origin, a.H1, a.H2, G, kFc3StepCluster, k.max_clusters);
    const OptimConfig& o = a.optim;
    // A plain launch, never a programmatic dependent one: the grid barrier needs every block
    // resident, and a dependent launch's waiting blocks could take their SMs.
    k.launch_cluster_smem(G * kFc3StepCluster, kFc3StepBlock, kFc3StepCluster, kFc3StepSmem, false, s, a.X, a.T, a.P,
                          a.M, a.V, a.Y, a.hyp, a.work, a.B, a.I, a.H1, a.H2, a.O, a.steps, a.loss, a.scale,
                          optim_code(o.kind), o.momentum, o.beta1, o.beta2, o.eps, o.alpha, o.weight_decay);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // X T P M V Y hyp work | B I H1 H2 O steps loss | scale | optim | momentum beta1 beta2 eps alpha wd
    // (whole 3-layer fc steps in G clusters of 4 blocks, TF32 mma.sync, grid barriers: fc3step.hpp)
    {"fc3_step", "fc3step", {P, P, P, P, P, P, P, P, U, U, U, U, U, U, U, F, U, F, F, F, F, F, F}},
};
}  // namespace

}  // namespace ptxlab
