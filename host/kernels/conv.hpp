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
// pooled (conv_fwd with its 2x2 max-pool, below): R0 rounded down and R up to even counts,
// so that every strip holds whole windows.
ConvStrips conv_strips(unsigned H, unsigned W, bool pooled = false);
// Why conv_fwd cannot pool its outputs for these dimensions (empty when it can): conv_unfit's
// limits with the pooled strips, H, W >= 2 and W <= 128 (two rows a strip at least).
std::string conv_pool_unfit(const ConvDims& d);

// Why the conv kernels cannot take these dimensions (empty when they can): every size
// >= 1, KS 1, 3 or 5, W <= 256, 8 channels of a strip with halo in kConvStaged floats, and
// (conv_bwd_weights) H*W <= 1024, (H+KS-1)*(W+KS-1) <= 1536 (then a slice of one channel
// always fits conv_bwd_weights' shared memory).
std::string conv_unfit(const ConvDims& d);

// conv_bwd_weights' launch (ptx/conv.ptx's header): clusters of 8 blocks of kConvBlock
// threads; a cluster owns 8 output channels and a slice of `cs` input channels; thread t of a
// block is (channel t / lanes, lane t % lanes). The kernel reads cs back from the grid
// (slices = grid / (8 kgroups), cs = the least power of two >= ceil(C / slices)).
inline constexpr unsigned kConvWgradMaxSlice = 16;     // most input channels a cluster owns
inline constexpr unsigned kConvWgradSmem = 200 * 1024;  // most dynamic shared memory it asks for (sm_90: 227 KB a block)
struct ConvWgradPlan {
    unsigned cs = 1;       // input channels a cluster owns: a power of two <= 16
    unsigned lanes = 256;  // L = 256 / cs threads a channel
    unsigned slices = 1;   // ceil(C / cs) channel slices
    unsigned kgroups = 1;  // ceil(K / 8) groups of output channels
    unsigned grid = 8;     // blocks: kgroups * slices clusters of 8
    unsigned passes = 1;   // passes over the images: ceil(KS*KS / 9) groups of at most 9 taps
    unsigned smem = 0;     // dynamic shared memory a block, bytes (conv_wgrad_smem)
};
// cs = min(16, the least power of two >= C), halved while conv_wgrad_smem exceeds kConvWgradSmem;
// act 0 stages no Y (less shared memory).
ConvWgradPlan conv_wgrad_plan(const ConvDims& d, unsigned act = 1);
// The kernel's dynamic shared memory for a slice of cs channels: 10240 bytes of partial sums,
// two buffers of cs staged X planes of XP floats (XP = ceil32((H+KS-1)(W+KS-1)) + 16) and
// two buffers each of G and Y for 8 channels: 10240 + 8 cs XP + 128 H W (act 0, no Y: 64 H W).
size_t conv_wgrad_smem(const ConvDims& d, unsigned cs, unsigned act = 1);
// The longest chain of roundings behind one dW or db output (ref_conv_bwd_weights' bound): a
// thread's fma chain of ceil(N/8) ceil(HW/L) terms, log2(min(L, 32)) butterfly adds, L/32 - 1
// adds over the warps of a channel (L > 32), 7 over the cluster's ranks and the scale.
size_t conv_wgrad_depth(const ConvDims& d);

// The launches; act is the kernels' code (0 none, 1 ReLU), scale the factor from the batch
// sum to the mean gradient.
// With idx (not 0) conv_fwd pools its outputs 2x2 as pool_fwd would (Y and idx [N][K][H/2][W/2],
// pool_fwd's maxima and their indices in the plane) and writes nothing else.
void launch_conv_fwd(const Kernel& k, const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b,
                     CUdeviceptr Y, unsigned act, CUstream s, CUdeviceptr idx = 0);
void launch_conv_bwd_data(const Kernel& k, const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                          CUdeviceptr Wt, unsigned act, CUstream s);
void launch_conv_bwd_weights(const Kernel& k, const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                             CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale, CUstream s);
// A dense layer (W[O][I]) back to its input: dX[B][I] from dY and Y ([B][O]); any B, I, O >= 1.
// fc_bwd_data's launch (ptx/fc.ptx): blocks of kFcCols columns by 4 warps samples (warps = 8,
// 4, 2 or 1: the most that leave kFcMinBlocks blocks, else 1); W's and G's rows (and Y's, act 1)
// staged in chunks of kFcChunk outputs, one buffer each, two where O > kFcChunk.
inline constexpr unsigned kFcCols = 32, kFcChunk = 128, kFcMinBlocks = 256;
struct FcPlan {
    unsigned warps = 0;  // a block's warps; 4 samples each
    size_t grid = 0;     // ceil(B / (4 warps)) * ceil(I / kFcCols) blocks
    unsigned block = 0;  // 32 warps threads
    unsigned smem = 0;   // dynamic shared memory, bytes: buffers * (16384 + (1 + act) * 2048 warps)
};
FcPlan fc_plan(unsigned B, unsigned I, unsigned O, unsigned act);
void launch_fc_bwd_data(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY,
                        CUdeviceptr Y, CUdeviceptr W, unsigned act, CUstream s);
// P = N * C planes of H x W. pool_bwd with Yp (pool_fwd's Y; 0: none) applies the ReLU mask of
// the layer below too: a window whose maximum is <= 0 routes +0.
void launch_pool_fwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx,
                     CUdeviceptr X, CUstream s);
void launch_pool_bwd(const Kernel& k, unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY,
                     CUdeviceptr idx, CUdeviceptr Yp, CUstream s);

}  // namespace ptxlab
