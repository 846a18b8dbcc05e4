// The model trainer's step, internal to host/train: which kernel runs a conv or dense layer's
// pass (KernelOps launches it, RecordingOps names it; train_cnn.cpp, cnn_listing.cpp).
#pragma once

#include "conv.hpp"
#include "dense.hpp"
#include "tc.hpp"
#include "tcconv.hpp"
#include "tcwgrad.hpp"

namespace ptxlab::cnn_detail {

// A dense layer as the conv kernels see it: a 1x1 kernel on a 1x1 image.
inline bool is_dense(const ConvDims& d) { return d.H == 1 && d.W == 1 && d.KS == 1; }

// Which kernel runs a conv layer's pass (KernelOps launches it, RecordingOps names it).
// Passes over fewer than kTcConvMinChannels input channels (conv1) stay FP32: with C*KS*KS
// columns (9) the tensor-core kernel fills one of its 8 column tiles, in 16 blocks.
// An fc layer under a bn (a 1x1 conv of a 1x1 image, no activation) runs on tc_forward with the
// tensor cores (a 1x1 conv_fwd keeps one thread a block busy); FP32 sets keep conv_fwd.
inline const char* conv_fwd_kernel(const ConvDims& d, bool tc) {
    if (tc && is_dense(d) && tc_unfit(d.N, d.C, d.K).empty()) return "tc_forward";
    return tc && d.C >= kTcConvMinChannels ? "tc_conv_fwd" : "conv_fwd";
}
inline const char* conv_bwd_data_kernel(const ConvDims& d, bool tc) {
    return tc && d.K >= kTcConvMinChannels ? "tc_conv_bwd_data" : "conv_bwd_data";
}
// An fc layer (a 1x1 image, 1x1 kernel) that is not one of the last two (those take one
// fused_grad or two dense_mm): the dense layer's weight gradient on dense_mm (dense.hpp:
// dense_layer), or for a small layer with the tensor cores tc_grad_weights (TF32 products),
// where conv_bwd_weights would keep one thread a block busy (a hidden 784->256 layer:
// milliseconds a step).
inline const char* conv_bwd_weights_kernel(const ConvDims& d, bool tc) {
    if (is_dense(d))
        return tc && !dense_layer(d.C, d.K) && tc_grad_unfit("tc_grad_weights", d.N, d.C, d.K).empty()
                   ? "tc_grad_weights"
                   : "dense_mm";
    if (tc && d.C >= kTcConvMinChannels && tcwgrad_unfit(d).empty()) return "tc_conv_bwd_weights";
    return "conv_bwd_weights";
}


}  // namespace ptxlab::cnn_detail
