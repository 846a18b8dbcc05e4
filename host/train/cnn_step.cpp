// The model trainer's step as data flow (train_cnn.hpp cnn_forward, cnn_backward): which
// operation each layer takes, on which buffers, apart from what runs the operations (kernel
// launches, or the CPU tests' float64 ones).
#include "train_cnn.hpp"

#include "layer_steps.hpp"
#include "recipe.hpp"

namespace ptxlab {

namespace {

constexpr unsigned kConvActNone = 0, kConvActRelu = 1;  // the conv kernels' act codes

void require_buffers(const Model& m, const CnnBuffers& b) {
    const size_t L = m.layers.size();
    if (L < 2 || b.delta.size() != L - 1 || b.out.size() != L)
        PTXLAB_THROW(Error, "internal error: the CNN step takes two layers or more, an output buffer for each and a "
                            "delta buffer for each but the last ({} layers, {} output and {} delta buffers)",
                     L, b.out.size(), b.delta.size());
    if (b.act != Activation::Relu && b.z.size() != L)
        PTXLAB_THROW(Error, "internal error: --activation {} takes a pre-activation buffer entry a layer ({} for {})",
                     to_string(b.act), b.z.size(), L);
}

// Hidden layer l's forward pass from `in`; returns the last layer it ran (l + 1 where the conv
// pooled in its epilogue).
size_t forward_hidden(CnnOps& ops, const Model& m, const CnnBuffers& b, size_t l, CUdeviceptr in) {
    const LayerSpec& ly = m.layers[l];
    const size_t L = m.layers.size();
    const bool relu = b.act == Activation::Relu;
    if (ly.kind == LayerKind::Pool) {
        ops.pool_fwd(b.B * ly.in.c, ly.in.h, ly.in.w, b.out[l], b.idx[l], in);
        return l;
    }
    if (const LayerStepRow* row = layer_step_row(ly.kind)) {  // a layer of its own kernels (bn)
        row->forward(ops, ly, b, in, l, L);
        return l;
    }
    const CUdeviceptr W = b.params + ly.weight_offset * 4, bias = b.params + ly.bias_offset * 4;
    if (ly.kind == LayerKind::Fc && ly.activation) {  // A = f(X W^T + b); for GELU also Z (fused_forward writes it into D1)
        FusedArgs f{};
        f.X = in;
        f.W1 = W;
        f.b1 = bias;
        f.A1 = b.out[l];
        f.D1 = relu ? 0 : cnn_pre_activations(b, l, L);
        f.B = b.B;
        f.I = static_cast<unsigned>(ly.in.size());
        f.H = ly.width;
        f.act = act_code(b.act);
        ops.fused_forward(f);
        return l;
    }
    const ConvDims d = cnn_kernel_dims(ly, b.B);
    if (relu && ly.activation && l + 2 < L && m.layers[l + 1].kind == LayerKind::Pool && ops.pools_in_conv(d)) {
        // The conv and the pool above it in one launch: the pool's maxima and indices into the
        // pool's buffers; the conv's own output is never written (its backward passes read no
        // Y: the pool's backward applies its ReLU mask).
        ops.conv_fwd(d, in, W, bias, b.out[l + 1], kConvActRelu, b.idx[l + 1]);
        return l + 1;
    }
    if (relu || !ly.activation) {  // a ReLU conv, or a layer under a bn (an fc there as a 1x1 conv) without it
        ops.conv_fwd(d, in, W, bias, b.out[l], ly.activation ? kConvActRelu : kConvActNone, 0);
        return l;
    }
    // Another activation: the conv writes Z (act 0), act_fwd A = f(Z); a pool above runs on A.
    const CUdeviceptr Z = cnn_pre_activations(b, l, L);
    ops.conv_fwd(d, in, W, bias, Z, kConvActNone, 0);
    ops.act_fwd(static_cast<unsigned>(b.B * ly.out.size()), b.out[l], Z, act_code(b.act));
    return l;
}

}  // namespace

CUdeviceptr cnn_pre_activations(const CnnBuffers& b, size_t l, size_t L) { return l + 2 == L ? b.delta[l] : b.z[l]; }

void cnn_forward(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y,
                 unsigned loss_code) {
    require_buffers(m, b);
    if (m.has_buffers() && !b.running)
        PTXLAB_THROW(Error, "internal error: the model {} has bn layers but no running statistics", m.text());
    const size_t L = m.layers.size();
    CUdeviceptr in = X;
    for (size_t l = 0; l + 1 < L; ++l) {
        ops.begin_layer(l);
        l = forward_hidden(ops, m, b, l, in);
        in = b.out[l];
    }
    // The last fc: logits, output deltas and the deltas of its input (into delta[L-2]), through
    // the activation's derivative where that input is an activated layer's (a pool's: ReLU's
    // mask, which changes nothing after a ReLU conv or bn and is redone without it otherwise).
    ops.begin_layer(L - 1);
    const LayerSpec& last = m.layers.back();
    FusedArgs f{};
    f.A1 = in;
    f.W2 = b.params + last.weight_offset * 4;
    f.b2 = b.params + last.bias_offset * 4;
    f.T = T;
    f.Y = Y;
    f.D2 = b.D2;
    f.D1 = b.delta[L - 2];
    f.B = b.B;
    f.H = static_cast<unsigned>(last.in.size());
    f.O = last.width;
    f.loss = loss_code;
    f.act = m.layers[L - 2].kind == LayerKind::Pool ? kActRelu : act_code(b.act);
    ops.fused_output(f);
}

void CnnOps::conv_bwd_data_pool(const ConvDims&, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, unsigned,
                                const PoolBelow&) {
    PTXLAB_THROW(Error, "internal error: conv_bwd_data_pool where pools_in_conv_bwd is false");
}

namespace {

// Layers lo..hi's parameters (back to back in the flat array) have their gradient and every
// launch that reads them issued: CnnOps::params_ready.
void layers_ready(CnnOps& ops, const Model& m, size_t lo, size_t hi) {
    const LayerSpec &first = m.layers[lo], &last = m.layers[hi];
    ops.params_ready(first.weight_offset, last.bias_offset + last.bias_count() - first.weight_offset);
}

// The last layer's weight gradient: with the fc under it, both in one fused_grad (from
// fused_output's D2 and the deltas D1 it left in delta[L-2]); else through conv_bwd_weights
// (and then the last layer's parameters are ready: its deltas, fused_output's, came first).
void backward_last(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, float scale, bool fc_pair) {
    const size_t L = m.layers.size();
    const LayerSpec& last = m.layers.back();
    const CUdeviceptr in = L - 1 == 0 ? X : b.out[L - 2];
    if (fc_pair) {
        const LayerSpec& fc = m.layers[L - 2];
        FusedArgs f{};
        f.GW1 = b.grads + fc.weight_offset * 4;
        f.Gb1 = b.grads + fc.bias_offset * 4;
        f.GW2 = b.grads + last.weight_offset * 4;
        f.Gb2 = b.grads + last.bias_offset * 4;
        f.X = L == 2 ? X : b.out[L - 3];
        f.A1 = b.out[L - 2];
        f.D1 = b.delta[L - 2];
        f.D2 = b.D2;
        f.B = b.B;
        f.I = static_cast<unsigned>(fc.in.size());
        f.H = fc.width;
        f.O = last.width;
        f.scale = scale;
        ops.fused_grad(f);
    } else {
        ops.conv_bwd_weights(cnn_kernel_dims(last, b.B), b.grads + last.weight_offset * 4,
                             b.grads + last.bias_offset * 4, in, b.D2, b.D2, kConvActNone, scale);
    }
    // A pool under the last fc, another activation than ReLU: fused_output's D1 took ReLU's mask
    // of the pool's values; the deltas without it, D2 W, from fc_bwd_data (act 0).
    if (b.act != Activation::Relu && L > 2 && m.layers[L - 2].kind == LayerKind::Pool)
        ops.fc_bwd_data(b.B, static_cast<unsigned>(last.in.size()), last.width, b.delta[L - 2], b.D2, b.D2,
                        b.params + last.weight_offset * 4, kConvActNone);
    if (!fc_pair) layers_ready(ops, m, L - 1, L - 1);
}

}  // namespace

void cnn_backward(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, float scale) {
    require_buffers(m, b);
    const size_t L = m.layers.size();
    auto input_of = [&](size_t l) { return l == 0 ? X : b.out[l - 1]; };
    // Down the layers, each layer's deltas go from delta[l] to delta[l-1]; the weight gradients
    // (ops.conv_bwd_weights, ops.fused_grad) are issued before the deltas below them, which do
    // not depend on them (KernelOps runs them on side streams).
    const bool fc_pair = L >= 2 && m.layers[L - 2].kind == LayerKind::Fc;
    const bool relu = b.act == Activation::Relu;
    // A conv layer (ReLU) under a pool: the pool's backward applies the conv's ReLU mask (the
    // window's maximum is the conv's output at the index), and the conv's backward passes run
    // with act 0, not reading the conv's output (the same values, bit for bit).
    auto masked_by_pool = [&](size_t l) {
        return l + 1 < L && m.layers[l].kind == LayerKind::Conv && m.layers[l + 1].kind == LayerKind::Pool;
    };
    // A conv over a pool over a conv (the CNN's conv2 over pool1): where the kernels can, the
    // pool's backward runs in the upper conv's deltas launch (conv_bwd_data_pool), which writes
    // the pool's input deltas delta[l-2] directly (the same bits as pool_bwd of its deltas), and
    // the pool's own pass is skipped (pool_done).
    auto pool_in_conv_bwd = [&](size_t l, const ConvDims& d) {
        return l >= 2 && m.layers[l].kind == LayerKind::Conv && m.layers[l - 1].kind == LayerKind::Pool &&
               m.layers[l - 2].kind == LayerKind::Conv && ops.pools_in_conv_bwd(d);
    };
    size_t pool_done = L;  // the pool whose backward a conv's launch ran (L: none)
    // dz[l]: delta[l] holds dL/dZ already (the deltas launch above masked it: FcDeltas' Yb), as
    // does delta[L-2] with ReLU (fused_output applied the mask).
    std::vector<bool> dz(L, false);
    if (L >= 2) dz[L - 2] = relu;
    // The ReLU output below layer l where its deltas may mask themselves: an activated conv or fc
    // (a pool, a bn and an unactivated layer apply or need no mask of their own there).
    auto relu_below = [&](size_t l) -> CUdeviceptr {
        const LayerSpec& below = m.layers[l - 1];
        const bool own = below.kind == LayerKind::Fc || below.kind == LayerKind::Conv;
        return relu && own && below.activation ? b.out[l - 1] : 0;
    };
    ops.begin_layer(L - 1);
    backward_last(ops, m, b, X, scale, fc_pair);
    for (size_t l = L - 1; l-- > 0;) {
        const LayerSpec& ly = m.layers[l];
        ops.begin_layer(l);
        const CUdeviceptr dY = b.delta[l], dX = l > 0 ? b.delta[l - 1] : 0;
        if (ly.kind == LayerKind::Pool) {
            if (l > 0 && l != pool_done)
                ops.pool_bwd(b.B * ly.in.c, ly.in.h, ly.in.w, dX, dY, b.idx[l],
                             relu && masked_by_pool(l - 1) ? b.out[l] : 0);
        } else if (const LayerStepRow* row = layer_step_row(ly.kind)) {  // bn: never the first layer
            row->backward(ops, ly, b, input_of(l), dX, l, L, scale);
        } else {
            // ReLU in the kernels unless a pool above applies its mask; a layer under a bn has none.
            const ConvDims d = cnn_kernel_dims(ly, b.B);
            const unsigned act = relu && ly.activation && !masked_by_pool(l) ? kConvActRelu : kConvActNone;
            // Another activation: dL/dZ in place of dL/dA (fused_output made it for layer L-2).
            if (!relu && ly.activation && l + 2 != L)
                ops.act_bwd(static_cast<unsigned>(b.B * ly.out.size()), dY, dY, b.out[l], b.z[l], act_code(b.act));
            if (!(fc_pair && l == L - 2))
                ops.conv_bwd_weights(d, b.grads + ly.weight_offset * 4, b.grads + ly.bias_offset * 4, input_of(l), dY,
                                     b.out[l], act, scale);
            if (l > 0 && ly.kind == LayerKind::Fc) {
                FcDeltas fd;
                fd.B = b.B, fd.I = d.C, fd.O = d.K, fd.act = act;
                fd.dX = dX, fd.dY = dY, fd.Y = b.out[l], fd.W = b.params + ly.weight_offset * 4;
                fd.Wt = l < b.wt.size() ? b.wt[l] : 0;
                fd.Yb = relu_below(l);
                fd.dy_masked = dz[l];
                dz[l - 1] = ops.fc_deltas(fd);
            } else if (pool_in_conv_bwd(l, d)) {  // the pool's Yp as its own pass would take it
                const LayerSpec& pool = m.layers[l - 1];
                const PoolBelow pb{b.idx[l - 1], relu && masked_by_pool(l - 2) ? b.out[l - 1] : 0, pool.in.h, pool.in.w};
                ops.conv_bwd_data_pool(d, b.delta[l - 2], dY, b.out[l], b.params + ly.weight_offset * 4, act, pb);
                pool_done = l - 1;
            } else if (l > 0) {
                ops.conv_bwd_data(d, dX, dY, b.out[l], b.params + ly.weight_offset * 4, act);
            }
            // Layer l's parameters (with the last layer's, whose gradient fused_grad wrote) are read
            // by no later launch of the step.
            layers_ready(ops, m, l, fc_pair && l == L - 2 ? L - 1 : l);
        }
    }
}

void cnn_transpose_weights(CnnOps& ops, const Model& m, const CnnBuffers& b) {
    for (size_t l = 0; l < m.layers.size() && l < b.wt.size(); ++l) {
        if (!b.wt[l]) continue;
        const LayerSpec& ly = m.layers[l];
        ops.begin_layer(l);
        ops.transpose_weights(ly.width, static_cast<unsigned>(ly.in.size()), b.wt[l], b.params + ly.weight_offset * 4);
    }
}

}  // namespace ptxlab
