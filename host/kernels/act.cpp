// Launchers of ptx/act.ptx (see act.hpp).
#include "act.hpp"

#include "error.hpp"
#include "recipe.hpp"

namespace ptxlab {

namespace {

void require_act(const char* entry, unsigned N, unsigned act) {
    if (N == 0) PTXLAB_THROW(Error, "internal error: {} of 0 elements", entry);
    if (act > kActGelu) PTXLAB_THROW(Error, "internal error: {} takes activation codes 0 to {}, got {}", entry, kActGelu, act);
}

}  // namespace

void launch_act_fwd(const Kernel& k, unsigned N, CUdeviceptr A, CUdeviceptr Z, unsigned act, CUstream s) {
    require_act("act_fwd", N, act);
    k.launch(grid_for(N, kActBlock), kActBlock, s, A, Z, N, act);
}

void launch_act_bwd(const Kernel& k, unsigned N, CUdeviceptr G, CUdeviceptr dA, CUdeviceptr A, CUdeviceptr Z,
                    unsigned act, CUstream s) {
    require_act("act_bwd", N, act);
    if ((act == kActGelu ? Z : A) == 0)
        PTXLAB_THROW(Error, "internal error: act_bwd with code {} reads {}, given none", act, act == kActGelu ? "Z" : "A");
    k.launch(grid_for(N, kActBlock), kActBlock, s, G, dA, A, Z, N, act);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // The hidden activation as its own pass (act.hpp; act: recipe.hpp's code). A Z | N act
    {"act_fwd", "act", {P, P, U, U}},
    // G dA A Z | N act   (G = dA * f'; A read for codes 0..3, Z for GELU; G may be dA)
    {"act_bwd", "act", {P, P, P, P, U, U}},
};
}  // namespace

}  // namespace ptxlab
