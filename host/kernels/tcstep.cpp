// Launch and limits of tc_step (tcstep.hpp, ptx/tcstep.ptx).
#include "tcstep.hpp"

#include "error.hpp"
#include "tc.hpp"

namespace ptxlab {

std::string tc_step_unfit(unsigned B, unsigned I, unsigned H, unsigned O) {
    if (B == 0 || I == 0 || H == 0 || O == 0)
        return fmt::format("tc_step needs B, I, H, O >= 1, got B={} I={} H={} O={}", B, I, H, O);
    if (B > kTcStepMaxB || I > kTcStepMaxI || H > kTcStepMaxH || O > kTcStepMaxO)
        return fmt::format("tc_step takes B <= {}, I <= {}, H <= {}, O <= {} (one cluster's shared memory), got "
                           "B={} I={} H={} O={}",
                           kTcStepMaxB, kTcStepMaxI, kTcStepMaxH, kTcStepMaxO, B, I, H, O);
    return {};
}

namespace {
// Once per function: allow the 16-block cluster (above the portable 8) and the shared memory,
// then ask whether one such cluster fits on this GPU at all.
void prepare(const Kernel& k) {
    if (k.max_clusters != 0) return;
    CU(cuFuncSetAttribute, k.fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    k.resident_clusters(kTcStepCluster, kTcStepBlock, kTcStepSmem, true, " (use --kernels fused)");
}
}  // namespace

void launch_tc_step(const Kernel& k, const FusedArgs& a, CUstream s) {
    if (std::string why = tc_step_unfit(a.B, a.I, a.H, a.O); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    if (a.steps == 0) PTXLAB_THROW(Error, "internal error: tc_step launched with 0 steps");
    const CUdeviceptr b1 = a.P + size_t(a.H) * a.I * 4, W2 = b1 + size_t(a.H) * 4, b2 = W2 + size_t(a.O) * a.H * 4;
    if (a.P == 0 || a.W1 != a.P || a.b1 != b1 || a.W2 != W2 || a.b2 != b2 || a.hyp == 0)
        PTXLAB_THROW(Error, "internal error: tc_step takes W1, b1, W2, b2 back to back in P, and a step table");
    if (a.act != kActRelu) PTXLAB_THROW(Error, "internal error: tc_step runs ReLU hidden units only");
    prepare(k);
    const OptimConfig& o = a.optim;
    k.launch_smem(kTcStepCluster, kTcStepBlock, kTcStepSmem, s, a.X, a.T, a.P, a.M, a.V, a.A1, a.Y, a.hyp, a.B, a.I,
                  a.H, a.O, a.steps, a.loss, a.scale, optim_code(o.kind), o.momentum, o.beta1, o.beta2, o.eps, o.alpha,
                  o.weight_decay);
}

TcProducts tc_step_products(unsigned B, unsigned I) { return {tc_sum_bound(I), tc_sum_bound(B)}; }

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // X T P M V A Y hyp | B I H O steps | loss scale | optim momentum beta1 beta2 eps alpha wd
    // (whole MLP steps in one 16-block cluster, TF32 mma.sync: tcstep.hpp)
    {"tc_step", "tcstep", {P, P, P, P, P, P, P, P, U, U, U, U, U, U, F, U, F, F, F, F, F, F}},
};
}  // namespace

}  // namespace ptxlab
