// Launch shapes of the convolution and max-pool kernels (ptx/conv.ptx, ptx/pool.ptx):
// shared by verify and, next, the CNN trainer. The PTX headers explain the tiling.
#pragma once

#include "kernels.hpp"
#include "ref_conv.hpp"

#include <string>

namespace ptxlab {

inline constexpr unsigned kConvBlock = 256;   // conv_fwd, conv_bwd_data: threads a block (pixels of a strip)
inline constexpr unsigned kConvGroup = 8;     // channels a block writes (register blocking)
inline constexpr unsigned kConvStaged = 8192; // floats of the staged strips (8 channels with halo)

// The strips of whole rows conv_fwd and conv_bwd_data cut an H x W image into:
// R0 = floor(256 / W), strips = ceil(H / R0), R = ceil(H / strips) rows each.
struct ConvStrips {
    unsigned strips = 1, rows = 1;
};
ConvStrips conv_strips(unsigned H, unsigned W);

// Why the conv kernels cannot take these dimensions (empty when they can): every size
// >= 1, KS 1, 3 or 5, W <= 256, 8 channels of a strip with halo in kConvStaged floats, and
// (conv_bwd_weights) H*W <= 1024, (H+KS-1)*(W+KS-1) <= 1536.
std::string conv_unfit(const ConvDims& d);

// The launches; act is the kernels' code (0 none, 1 ReLU), scale the factor from the batch
// sum to the mean gradient.
void launch_conv_fwd(const Kernel& k, const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b,
                     CUdeviceptr Y, unsigned act, CUstream s);
void launch_conv_bwd_data(const Kernel& k, const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                          CUdeviceptr Wt, unsigned act, CUstream s);
void launch_conv_bwd_weights(const Kernel& k, const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                             CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale, CUstream s);
// A dense layer (W[O][I]) back to its input: dX[B][I] from dY and Y ([B][O]); O <= kFcMaxOut.
inline constexpr unsigned kFcMaxOut = 1024;
void launch_fc_bwd_data(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY,
                        CUdeviceptr Y, CUdeviceptr W, unsigned act, CUstream s);
// P = N * C planes of H x W.
void launch_pool_fwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx,
                     CUdeviceptr X, CUstream s);
void launch_pool_bwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY,
                     CUdeviceptr idx, CUstream s);

}  // namespace ptxlab
