// The model trainer's step, internal to host/train: which kernel runs a conv or dense layer's
// pass (KernelOps launches it, RecordingOps names it; train_cnn.cpp, cnn_listing.cpp).
#pragma once

#include "conv.hpp"
#include "dense.hpp"
#include "densetc.hpp"
#include "densewgk.hpp"
#include "tc.hpp"
#include "tcconv.hpp"
#include "tcwgrad.hpp"
#include "train_cnn.hpp"

#include <string_view>

namespace ptxlab::cnn_detail {

// A dense layer as the conv kernels see it: a 1x1 kernel on a 1x1 image.
inline bool is_dense(const ConvDims& d) { return d.H == 1 && d.W == 1 && d.KS == 1; }

// Which kernel runs a conv layer's pass (KernelOps launches it, RecordingOps names it).
// Passes over fewer than kTcConvMinChannels input channels (conv1) stay FP32: with C*KS*KS
// columns (9) the tensor-core kernel fills one of its 8 column tiles, in 16 blocks.
// An fc layer under a bn (a 1x1 conv of a 1x1 image, no activation) runs on tc_forward with the
// tensor cores (a 1x1 conv_fwd keeps one thread a block busy); FP32 sets keep conv_fwd.
inline const char* conv_fwd_kernel(const ConvDims& d, bool tc) {
    if (tc && is_dense(d) && densetc_product(d.N, d.K)) return "dense_tc";  // large batch: densetc.hpp
    if (tc && is_dense(d) && tc_unfit(d.N, d.C, d.K).empty()) return "tc_forward";
    return tc && d.C >= kTcConvMinChannels ? "tc_conv_fwd" : "conv_fwd";
}
inline const char* conv_bwd_data_kernel(const ConvDims& d, bool tc) {
    return tc && d.K >= kTcConvMinChannels ? "tc_conv_bwd_data" : "conv_bwd_data";
}
// An fc layer (a 1x1 image, 1x1 kernel) that is not one of the last two (those take one
// fused_grad or two launches of fused_grad_kernel's): the dense layer's weight gradient
// (dense.hpp: dense_layer) on the tensor cores at a batch of at most kTcWideMaxBatch
// (tc_grad_weights_wide: the whole batch in shared memory, 64 x 64 tiles; 1024 x 785 at batch
// 64 took 11.9 us on dense_mm), else dense_mm; for a small layer with the tensor cores
// tc_grad_weights (TF32 products), where conv_bwd_weights would keep one thread a block busy
// (a hidden 784->256 layer: milliseconds a step).
inline bool tc_wide_grads(unsigned B, unsigned I, unsigned O, bool tc) {
    return tc && dense_layer(I, O) && tc_grad_wide_unfit(B, I, O).empty();
}
inline const char* conv_bwd_weights_kernel(const ConvDims& d, bool tc) {
    if (tc && is_dense(d) && densetc_product(d.K, d.C + 1)) return "dense_tc";  // densetc.hpp's threshold
    if (is_dense(d) && tc_wide_grads(d.N, d.C, d.K, tc)) return "tc_grad_weights_wide";
    if (is_dense(d))
        return tc && !dense_layer(d.C, d.K) && tc_grad_unfit("tc_grad_weights", d.N, d.C, d.K).empty()
                   ? "tc_grad_weights"
                   : "dense_mm";
    if (tc && d.C >= kTcConvMinChannels && tcwgrad_unfit(d).empty()) return "tc_conv_bwd_weights";
    return "conv_bwd_weights";
}

// The fc layers' products on the tensor-core set (tc). A hidden ReLU layer's forward pass (B x H
// outputs) and its deltas to its input (B x I outputs) run on dense_wg_k (densewgk.hpp: wgmma
// TF32 fed by TMA, K split over a cluster) where `wgk` says it is loaded (the set's KernelSet has
// it: a device of compute capability 9.0) and the product fits it (densewgk_unfit: K % 4 == 0,
// the operands 16-byte aligned), at every size: on an H100 64 x 1024 x 1024 takes 5.5 us there
// against dense_mm's 17, and 4096 x 1024 x 1024 55.6 us against dense_tc's 85.4 (the masked
// deltas 92.2 against 124.8; BENCHMARKS.md). Elsewhere dense_tc (ptx/densetc.ptx, TF32 in 128 x
// 128 tiles) takes the products of kDenseTcMinOutputs outputs or more (densetc.hpp: a full wave
// of tiles), and the smaller ones the kernels dense.hpp chooses, as the FP32 sets (tc false) do.
// A layer's weight gradient is conv_bwd_weights_kernel's (O x (I + 1) outputs); the last two
// layers' gradients stay fused_grad_kernel's (their outputs do not grow with the batch).
inline const char* fc_forward_kernel(const FusedArgs& a, bool tc, bool wgk = false) {
    if (tc && wgk && a.act == kActRelu &&
        densewgk_unfit(densewgk_forward_args(a.B, a.I, a.H, a.X, a.W1, a.b1, a.A1, true), 9, 0).empty())
        return "dense_wg_k";
    if (tc && a.act == kActRelu && densetc_product(a.B, a.H)) return "dense_tc";
    return ptxlab::fc_forward_kernel(a);
}
// The last two fc layers' gradients (CnnOps::fused_grad): where dense_mm would take them
// (dense_replaces_fused_grad), the tc set at a batch tc_grad_weights_wide takes runs each on it
// (two launches, launch_tc_grads_wide); else fused_grad_kernel's (fused_grad, or two dense_mm).
inline const char* fused_grad_kernel(const FusedArgs& a, bool tc) {
    if (tc && dense_replaces_fused_grad(a.I, a.H, a.O) && tc_grad_wide_unfit(a.B, a.I, a.H).empty() &&
        tc_grad_wide_unfit(a.B, a.H, a.O).empty())
        return "tc_grad_weights_wide";
    return ptxlab::fused_grad_kernel(a);
}
inline const char* fc_bwd_data_kernel(unsigned B, unsigned I, unsigned O, bool tc) {
    return tc && densetc_product(B, I) ? "dense_tc" : ptxlab::fc_bwd_data_kernel(I, O);
}
// The tc set keeps W^T of fc layer l over another fc layer (its deltas go to that layer) for
// dense_wg_k, which takes only K-major operands: dX = dZ W as A = dZ [B][O], B = W^T [I][O], K = O,
// so O % 4 == 0 (TMA's rows of 4 O bytes); where dense_wg_k is loaded, at any batch.
// Over a pool or a conv the deltas stay on fc_bwd_data: the CNN's fc1 (3136 -> 128, over pool2) on
// dense_wg_k made its step 4 us slower on an H100 (111.8 -> 115.9; BENCHMARKS.md).
inline bool keeps_transposed_weights(const Model& m, size_t l, bool tc, bool wgk) {
    const LayerSpec& ly = m.layers[l];
    return tc && wgk && l >= 1 && ly.kind == LayerKind::Fc && m.layers[l - 1].kind == LayerKind::Fc &&
           ly.width % 4 == 0;
}
// Which kernel runs an fc layer's deltas (FcDeltas): dense_wg_k where the step keeps W^T, dY is
// dL/dZ already (dy_masked, or no activation) and the operands fit it (densewgk_unfit: 16-byte
// aligned, O % 4 == 0); else fc_bwd_data_kernel's (which masks dY itself). 64 x 1024 from
// 1024 on an H100: dense_wg_k 5.5 us, dense_mm 17.
inline const char* fc_deltas_kernel(const FcDeltas& d, bool tc, bool wgk) {
    if (tc && wgk && d.Wt && (d.act == 0 || d.dy_masked) &&
        densewgk_unfit(densewgk_deltas_args(d.B, d.I, d.O, d.dX, d.dY, d.Wt, d.Yb), 9, 0).empty())
        return "dense_wg_k";
    return fc_bwd_data_kernel(d.B, d.I, d.O, tc);
}
// Whether that launch leaves dX masked by the ReLU output below (dense_wg_k given Yb), so that
// the next deltas launch takes it as dL/dZ: what CnnOps::fc_deltas returns.
inline bool fc_deltas_masked(const FcDeltas& d, const char* kernel) {
    return std::string_view(kernel) == "dense_wg_k" && d.Yb != 0;
}

}  // namespace ptxlab::cnn_detail
