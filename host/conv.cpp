// Launch shapes of the convolution and max-pool kernels (see conv.hpp and the PTX headers).
#include "conv.hpp"

#include "error.hpp"

namespace ptxlab {

namespace {
unsigned div_up(size_t a, size_t b) { return static_cast<unsigned>((a + b - 1) / b); }
void require_fit(const ConvDims& d) {
    if (std::string why = conv_unfit(d); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
}
}  // namespace

ConvStrips conv_strips(unsigned H, unsigned W) {
    const unsigned r0 = kConvBlock / W;
    ConvStrips s;
    s.strips = div_up(H, r0);
    s.rows = div_up(H, s.strips);
    return s;
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
    // conv_bwd_weights stages G of 8 channels and X with its halo for one image.
    if (size_t(d.H) * d.W > 1024 || size_t(d.H + d.KS - 1) * (d.W + d.KS - 1) > 1536)
        return fmt::format("conv_bwd_weights stages whole images: H*W <= 1024 and (H+KS-1)*(W+KS-1) <= 1536, got "
                           "{}x{} with KS {}",
                           d.H, d.W, d.KS);
    return {};
}

void launch_conv_fwd(const Kernel& k, const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b,
                     CUdeviceptr Y, unsigned act, CUstream s) {
    require_fit(d);
    const unsigned grid = d.N * div_up(d.K, kConvGroup) * conv_strips(d.H, d.W).strips;
    k.launch(grid, kConvBlock, s, X, Wt, b, Y, d.N, d.C, d.H, d.W, d.K, d.KS, act);
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
    // Clusters of 8 blocks, one per (8 output channels, input channel); a warp per tap and
    // one for the bias.
    k.launch(div_up(d.K, kConvGroup) * d.C * 8, 32 * (d.KS * d.KS + 1), s, dW, db, X, dY, Y, d.N, d.C, d.H, d.W, d.K, d.KS, act, scale);
}

void launch_fc_bwd_data(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY,
                        CUdeviceptr Y, CUdeviceptr W, unsigned act, CUstream s) {
    if (B == 0 || I == 0 || O == 0 || O > kFcMaxOut)
        PTXLAB_THROW(InputError, "fc_bwd_data takes B, I >= 1 and 1 <= O <= {} (its shared memory), got B={} I={} O={}",
                     kFcMaxOut, B, I, O);
    // Blocks of 256 columns x 4 samples (ptx/fc.ptx).
    k.launch(div_up(B, 4u) * div_up(I, 256u), 256, s, dX, dY, Y, W, B, I, O, act);
}

void launch_pool_fwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx,
                     CUdeviceptr X, CUstream s) {
    k.launch(grid_for(size_t(P) * (H / 2) * (W / 2)), 256, s, Y, idx, X, P, H, W);
}

void launch_pool_bwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY,
                     CUdeviceptr idx, CUstream s) {
    k.launch(grid_for(size_t(P) * H * W), 256, s, dX, dY, idx, P, H, W);
}

}  // namespace ptxlab
