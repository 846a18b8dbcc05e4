// Launches of the batch-normalization kernels (see bn.hpp and ptx/bn.ptx).
#include "bn.hpp"

#include "error.hpp"
#include "recipe.hpp"

namespace ptxlab {

std::string bn_unfit(unsigned B, unsigned C, unsigned HW, unsigned act, bool train) {
    if (B == 0 || C == 0 || HW == 0) return fmt::format("bn takes B, C, HW >= 1, got B={} C={} HW={}", B, C, HW);
    if (uint64_t(B) * C * HW >= (uint64_t(1) << 31))
        return fmt::format("bn takes fewer than 2^31 values, got B={} C={} HW={}", B, C, HW);
    if (act != kActRelu && act != kActLeakyRelu && act != kBnActNone)
        return fmt::format("bn takes the activation codes {} (relu), {} (leaky-relu) and {} (none), got {}", kActRelu,
                           kActLeakyRelu, kBnActNone, act);
    if (train && uint64_t(B) * HW < 2)
        return fmt::format("bn: expected more than 1 value per channel when training (batch {} of {}x{} planes), as "
                           "PyTorch",
                           B, C, HW);
    return {};
}

unsigned bn_cache_bytes(unsigned B, unsigned HW, bool backward, bool train) {
    if (!train) return 0;
    const uint64_t per_thread = (uint64_t(B) * HW + kBnThreads * kBnCluster - 1) / (kBnThreads * kBnCluster);
    const uint64_t bytes = per_thread * kBnThreads * 4 * (backward ? 3 : 1);
    return bytes <= kBnCacheMax ? static_cast<unsigned>(bytes) : 0;
}

void launch_bn_fwd(const Kernel& k, unsigned B, unsigned C, unsigned HW, CUdeviceptr Y, CUdeviceptr stats,
                   CUdeviceptr running, CUdeviceptr X, CUdeviceptr gamma, CUdeviceptr beta, unsigned act, bool train,
                   CUstream s) {
    if (std::string why = bn_unfit(B, C, HW, act, train); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    k.launch_smem(C * kBnCluster, kBnThreads, bn_cache_bytes(B, HW, false, train), s, Y, stats, running, X, gamma, beta,
                  B, C, HW, act, train ? 1u : 0u);
}

void launch_bn_bwd(const Kernel& k, unsigned B, unsigned C, unsigned HW, CUdeviceptr dX, CUdeviceptr dgamma,
                   CUdeviceptr dbeta, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr X, CUdeviceptr gamma,
                   CUdeviceptr stats, unsigned act, float scale, CUstream s) {
    if (std::string why = bn_unfit(B, C, HW, act, true); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    k.launch_smem(C * kBnCluster, kBnThreads, bn_cache_bytes(B, HW, true, true), s, dX, dgamma, dbeta, dY, Y, X, gamma,
                  stats, B, C, HW, act, scale);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // Batch normalization (bn.hpp). Y stats running X gamma beta | B C HW act train
    {"bn_fwd", "bn", {P, P, P, P, P, P, U, U, U, U, U}},
    // dX dgamma dbeta dY Y X gamma stats | B C HW act | scale
    {"bn_bwd", "bn", {P, P, P, P, P, P, P, P, U, U, U, U, F}},
};
}  // namespace

}  // namespace ptxlab
