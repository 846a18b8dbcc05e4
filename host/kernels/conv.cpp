// Launch shapes of the convolution and max-pool kernels (see conv.hpp and the PTX headers).
#include "conv.hpp"

#include "error.hpp"

#include <algorithm>

namespace ptxlab {

namespace {
unsigned div_up(size_t a, size_t b) { return static_cast<unsigned>((a + b - 1) / b); }
void require_fit(const ConvDims& d) {
    if (std::string why = conv_unfit(d); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
}
}  // namespace

ConvStrips conv_strips(unsigned H, unsigned W, bool pooled) {
    unsigned r0 = kConvBlock / W;
    if (pooled) r0 &= ~1u;
    ConvStrips s;
    s.strips = div_up(H, r0);
    s.rows = div_up(H, s.strips);
    if (pooled) s.rows = (s.rows + 1) & ~1u;
    return s;
}

std::string conv_pool_unfit(const ConvDims& d) {
    if (std::string why = conv_unfit(d); !why.empty()) return why;
    if (d.H < 2 || d.W < 2) return fmt::format("a 2x2 pool needs H, W >= 2, got {}x{}", d.H, d.W);
    if (d.W > kConvBlock / 2)
        return fmt::format("conv_fwd pools strips of two rows or more: images up to {} wide, got {}", kConvBlock / 2,
                           d.W);
    const ConvStrips s = conv_strips(d.H, d.W, true);
    if (const size_t staged = size_t(kConvGroup) * (s.rows + d.KS - 1) * (d.W + d.KS - 1); staged > kConvStaged)
        return fmt::format("conv_fwd with its pool stages 8 channels of {} rows of {} with their halo: {} floats, more "
                           "than the {} it holds",
                           s.rows, d.W, staged, kConvStaged);
    return {};
}

std::string conv_unfit(const ConvDims& d) {
    if (!d.N || !d.C || !d.H || !d.W || !d.K) return "the conv kernels need every size N, C, H, W, K >= 1";
    if (d.KS != 1 && d.KS != 3 && d.KS != 5)
        return fmt::format("the conv kernels take kernel sizes 1, 3 and 5, got {}", d.KS);
    if (d.W > kConvBlock) return fmt::format("the conv kernels take images up to {} wide, got {}", kConvBlock, d.W);
    const ConvStrips s = conv_strips(d.H, d.W);
    const size_t staged = size_t(kConvGroup) * (s.rows + d.KS - 1) * (d.W + d.KS - 1);
    if (staged > kConvStaged)
        return fmt::format("the conv kernels stage 8 channels of {} rows of {} with their halo: {} floats, more than "
                           "the {} they hold",
                           s.rows, d.W, staged, kConvStaged);
    // conv_bwd_weights stages whole images: G and Y of 8 channels and the slice's X planes
    // with their halo, twice (double buffering). Within these limits a slice of one channel
    // always fits (at most 10240 + 8 * 1552 + 128 * 1024 bytes).
    if (size_t(d.H) * d.W > 1024 || size_t(d.H + d.KS - 1) * (d.W + d.KS - 1) > 1536)
        return fmt::format("conv_bwd_weights stages whole images: H*W <= 1024 and (H+KS-1)*(W+KS-1) <= 1536, got "
                           "{}x{} with KS {}",
                           d.H, d.W, d.KS);
    if (conv_wgrad_smem(d, 1) > kConvWgradSmem)  // cannot happen within the limits above
        return fmt::format("conv_bwd_weights needs {} bytes of shared memory for {}x{} with KS {}, more than {}",
                           conv_wgrad_smem(d, 1), d.H, d.W, d.KS, kConvWgradSmem);
    return {};
}

size_t conv_wgrad_smem(const ConvDims& d, unsigned cs, unsigned act) {
    const size_t plane = size_t(d.H + d.KS - 1) * (d.W + d.KS - 1);
    const size_t xp = (plane + 31) / 32 * 32 + 16;
    return 10240 + 8 * cs * xp + (act == 1 ? 128 : 64) * size_t(d.H) * d.W;
}

ConvWgradPlan conv_wgrad_plan(const ConvDims& d, unsigned act) {
    ConvWgradPlan p;
    p.cs = 1;
    while (p.cs < d.C && p.cs < kConvWgradMaxSlice) p.cs *= 2;
    while (p.cs > 1 && conv_wgrad_smem(d, p.cs) > kConvWgradSmem) p.cs /= 2;
    p.lanes = kConvBlock / p.cs;
    p.slices = div_up(d.C, p.cs);
    p.kgroups = div_up(d.K, kConvGroup);
    p.grid = p.kgroups * p.slices * 8;
    p.passes = div_up(size_t(d.KS) * d.KS, 9);
    p.smem = static_cast<unsigned>(conv_wgrad_smem(d, p.cs, act));
    return p;
}

size_t conv_wgrad_depth(const ConvDims& d) {
    const ConvWgradPlan p = conv_wgrad_plan(d);
    const size_t chain = size_t((d.N + 7) / 8) * ((size_t(d.H) * d.W + p.lanes - 1) / p.lanes);
    size_t butterfly = 0;
    for (unsigned m = std::min(p.lanes, 32u); m > 1; m /= 2) ++butterfly;
    const size_t warps = p.lanes > 32 ? p.lanes / 32 - 1 : 0;
    return chain + butterfly + warps + 7 + 1;
}

void launch_conv_fwd(const Kernel& k, const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b,
                     CUdeviceptr Y, unsigned act, CUstream s, CUdeviceptr idx) {
    if (std::string why = idx ? conv_pool_unfit(d) : conv_unfit(d); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    const unsigned grid = d.N * div_up(d.K, kConvGroup) * conv_strips(d.H, d.W, idx != 0).strips;
    k.launch(grid, kConvBlock, s, X, Wt, b, Y, idx, d.N, d.C, d.H, d.W, d.K, d.KS, act);
}

void launch_conv_bwd_data(const Kernel& k, const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                          CUdeviceptr Wt, unsigned act, CUstream s) {
    require_fit(d);
    const unsigned grid = d.N * div_up(d.C, kConvGroup) * conv_strips(d.H, d.W).strips;
    k.launch(grid, kConvBlock, s, dX, dY, Y, Wt, d.N, d.C, d.H, d.W, d.K, d.KS, act);
}

void launch_conv_bwd_weights(const Kernel& k, const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                             CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale, CUstream s) {
    require_fit(d);
    // Clusters of 8 blocks, one per (8 output channels, slice of cs input channels), with
    // dynamic shared memory (conv_wgrad_plan).
    const ConvWgradPlan p = conv_wgrad_plan(d, act);
    k.launch_smem(p.grid, kConvBlock, p.smem, s, dW, db, X, dY, Y, d.N, d.C, d.H, d.W, d.K, d.KS, act, scale);
}

FcPlan fc_plan(unsigned B, unsigned I, unsigned O, unsigned act) {
    FcPlan p;
    const size_t tiles = (size_t(I) + kFcCols - 1) / kFcCols;
    auto blocks = [&](unsigned warps) { return (size_t(B) + 4 * warps - 1) / (4 * warps) * tiles; };
    p.warps = 8;
    while (p.warps > 1 && blocks(p.warps) < kFcMinBlocks) p.warps /= 2;
    p.grid = blocks(p.warps);
    p.block = 32 * p.warps;
    const unsigned buffers = O > kFcChunk ? 2 : 1;
    const unsigned rows = act == 1 ? 2 : 1;  // G, and Y for the mask
    p.smem = buffers * (kFcChunk * kFcCols * 4 + rows * 4 * p.warps * kFcChunk * 4);
    return p;
}

void launch_fc_bwd_data(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY,
                        CUdeviceptr Y, CUdeviceptr W, unsigned act, CUstream s) {
    if (B == 0 || I == 0 || O == 0)
        PTXLAB_THROW(InputError, "fc_bwd_data takes B, I, O >= 1, got B={} I={} O={}", B, I, O);
    const FcPlan p = fc_plan(B, I, O, act);
    if (p.grid > 0x7fffffffu)
        PTXLAB_THROW(InputError, "fc_bwd_data: B={} I={} need {} blocks, more than a grid takes", B, I, p.grid);
    k.launch_smem(static_cast<unsigned>(p.grid), p.block, p.smem, s, dX, dY, Y, W, B, I, O, act);
}

void launch_pool_fwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx,
                     CUdeviceptr X, CUstream s) {
    k.launch(grid_for(size_t(P) * (H / 2) * (W / 2)), 256, s, Y, idx, X, P, H, W);
}

void launch_pool_bwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY,
                     CUdeviceptr idx, CUdeviceptr Yp, CUstream s) {
    // One thread per 2x2 cell of the input (ptx/pool.ptx).
    k.launch(grid_for(size_t(P) * ((H + 1) / 2) * ((W + 1) / 2)), 256, s, dX, dY, idx, Yp, P, H, W);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // The CNN layers (conv.hpp). X Wt b Y | N C H W K KS act
    {"conv_fwd", "conv", {P, P, P, P, P, U, U, U, U, U, U, U}},
    // dX dY Y Wt | N C H W K KS act
    {"conv_bwd_data", "conv", {P, P, P, P, U, U, U, U, U, U, U}},
    // dW db X dY Y | N C H W K KS act | scale
    {"conv_bwd_weights", "conv", {P, P, P, P, P, U, U, U, U, U, U, U, F}},
    // dX dY Y W | B I O act   (a dense layer's backward pass to its input)
    {"fc_bwd_data", "fc", {P, P, P, P, U, U, U, U}},
    // Y idx X | P H W
    {"pool_fwd", "pool", {P, P, P, U, U, U}},
    // dX dY idx | P H W
    {"pool_bwd", "pool", {P, P, P, P, U, U, U}},
};
}  // namespace

}  // namespace ptxlab
