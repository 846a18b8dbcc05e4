// The model trainer's step as data flow (train_cnn.hpp cnn_forward, cnn_backward): which
// operation each layer takes, on which buffers, apart from what runs the operations (kernel
// launches, or the CPU tests' float64 ones).
#include "train_cnn.hpp"

#include "bn.hpp"
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
}

// A bn layer's arguments on the batch `in` (X); the forward pass's writes: its output, its batch
// statistics (training) and its running statistics.
BnArgs bn_args(const LayerSpec& ly, const CnnBuffers& b, CUdeviceptr in, size_t l) {
    BnArgs a;
    a.B = b.B;
    a.C = ly.width;
    a.HW = ly.in.h * ly.in.w;
    a.act = ly.activation ? kActRelu : kBnActNone;
    a.train = b.train;
    a.Y = b.out[l];
    a.stats = b.train ? b.idx[l] : 0;
    a.running = b.running + ly.buffer_offset * 4;
    a.X = in;
    a.gamma = b.params + ly.weight_offset * 4;
    a.beta = b.params + ly.bias_offset * 4;
    return a;
}

}  // namespace

void cnn_forward(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y,
                 unsigned loss_code) {
    require_buffers(m, b);
    if (m.has_bn() && !b.running)
        PTXLAB_THROW(Error, "internal error: the model {} has bn layers but no running statistics", m.text());
    const size_t L = m.layers.size();
    CUdeviceptr in = X;
    for (size_t l = 0; l + 1 < L; ++l) {
        const LayerSpec& ly = m.layers[l];
        ops.begin_layer(l);
        if (ly.kind == LayerKind::Pool) {
            ops.pool_fwd(b.B * ly.in.c, ly.in.h, ly.in.w, b.out[l], b.idx[l], in);
        } else if (ly.is_bn()) {
            ops.bn_fwd(bn_args(ly, b, in, l));
        } else if (ly.kind == LayerKind::Fc && ly.activation) {  // A = ReLU(X W^T + b)
            FusedArgs f{};
            f.X = in;
            f.W1 = b.params + ly.weight_offset * 4;
            f.b1 = b.params + ly.bias_offset * 4;
            f.A1 = b.out[l];
            f.B = b.B;
            f.I = static_cast<unsigned>(ly.in.size());
            f.H = ly.width;
            f.act = kActRelu;
            ops.fused_forward(f);
        } else if (const ConvDims d = cnn_kernel_dims(ly, b.B);
                   ly.activation && l + 2 < L && m.layers[l + 1].kind == LayerKind::Pool && ops.pools_in_conv(d)) {
            // The conv and the pool above it in one launch: the pool's maxima and indices into
            // the pool's buffers; the conv's own output is never written (its backward passes
            // read no Y: the pool's backward applies its ReLU mask).
            ops.conv_fwd(d, in, b.params + ly.weight_offset * 4, b.params + ly.bias_offset * 4, b.out[l + 1],
                         kConvActRelu, b.idx[l + 1]);
            in = b.out[++l];
            continue;
        } else {  // a conv, or a layer under a bn (an fc there as a 1x1 conv), without its activation
            ops.conv_fwd(d, in, b.params + ly.weight_offset * 4, b.params + ly.bias_offset * 4, b.out[l],
                         ly.activation ? kConvActRelu : kConvActNone, 0);
        }
        in = b.out[l];
    }
    // The last fc: logits, output deltas and the deltas of its input (into delta[L-2]).
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
    f.act = kActRelu;
    ops.fused_output(f);
}

void cnn_backward(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, float scale) {
    require_buffers(m, b);
    const size_t L = m.layers.size();
    auto input_of = [&](size_t l) { return l == 0 ? X : b.out[l - 1]; };
    const LayerSpec& last = m.layers.back();
    // Two fc layers last: both gradients in one fused_grad, from fused_output's D2 and the
    // ReLU-masked deltas D1 it left in delta[L-2]. Else the last layer's through conv_bwd_weights.
    // Down the layers, each layer's deltas go from delta[l] to delta[l-1]; the weight gradients
    // (ops.conv_bwd_weights, ops.fused_grad) are issued before the deltas below them, which do
    // not depend on them (KernelOps runs them on side streams).
    const bool fc_pair = L >= 2 && m.layers[L - 2].kind == LayerKind::Fc;
    // A conv layer (ReLU) under a pool: the pool's backward applies the conv's ReLU mask (the
    // window's maximum is the conv's output at the index), and the conv's backward passes run
    // with act 0, not reading the conv's output (the same values, bit for bit).
    auto masked_by_pool = [&](size_t l) {
        return l + 1 < L && m.layers[l].kind == LayerKind::Conv && m.layers[l + 1].kind == LayerKind::Pool;
    };
    ops.begin_layer(L - 1);
    if (fc_pair) {
        const LayerSpec& fc = m.layers[L - 2];
        FusedArgs f{};
        f.GW1 = b.grads + fc.weight_offset * 4;
        f.Gb1 = b.grads + fc.bias_offset * 4;
        f.GW2 = b.grads + last.weight_offset * 4;
        f.Gb2 = b.grads + last.bias_offset * 4;
        f.X = input_of(L - 2);
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
                             b.grads + last.bias_offset * 4, input_of(L - 1), b.D2, b.D2, kConvActNone, scale);
    }
    for (size_t l = L - 1; l-- > 0;) {
        const LayerSpec& ly = m.layers[l];
        ops.begin_layer(l);
        const CUdeviceptr dY = b.delta[l], dX = l > 0 ? b.delta[l - 1] : 0;
        if (ly.kind == LayerKind::Pool) {
            if (l > 0)
                ops.pool_bwd(b.B * ly.in.c, ly.in.h, ly.in.w, dX, dY, b.idx[l], masked_by_pool(l - 1) ? b.out[l] : 0);
        } else if (ly.is_bn()) {  // never the first layer: dX is the deltas of the layer below
            BnArgs a = bn_args(ly, b, input_of(l), l);
            a.dX = dX;
            a.dY = dY;
            a.dgamma = b.grads + ly.weight_offset * 4;
            a.dbeta = b.grads + ly.bias_offset * 4;
            a.scale = scale;
            ops.bn_bwd(a);
        } else {
            // Under a pool (the pool's backward applies the ReLU mask) or a bn (no activation): act 0.
            const ConvDims d = cnn_kernel_dims(ly, b.B);
            const unsigned act = masked_by_pool(l) || !ly.activation ? kConvActNone : kConvActRelu;
            if (!(fc_pair && l == L - 2))
                ops.conv_bwd_weights(d, b.grads + ly.weight_offset * 4, b.grads + ly.bias_offset * 4, input_of(l), dY,
                                     b.out[l], act, scale);
            if (l > 0 && ly.kind == LayerKind::Fc)
                ops.fc_bwd_data(b.B, d.C, d.K, dX, dY, b.out[l], b.params + ly.weight_offset * 4, act);
            else if (l > 0)
                ops.conv_bwd_data(d, dX, dY, b.out[l], b.params + ly.weight_offset * 4, act);
        }
    }
}

}  // namespace ptxlab
