// The layer step table, internal to host/train: how the model trainer's step runs a layer that
// its data flow (cnn_step.cpp) does not run itself, one row a layer kind (layer_steps.cpp), in
// LayerKind order. The conv, pool and fc layers, with their fusions (a pool in a conv's epilogue,
// the last two fc layers' one fused_grad, masks carried between layers), are the data flow's own
// and have no row; a layer like bn is its row: its forward and backward passes as LayerKernel
// launches, the kernels it loads, its scratch buffer, what it refuses and its listing.
//
// A new layer in the trainer: its row and its functions in layer_steps.cpp (and its layer table
// row, host/reference/layers.cpp).
#pragma once

#include "train_cnn.hpp"

#include <span>
#include <string>

namespace ptxlab {

// A layer's step row; null functions where it has nothing of the kind.
struct LayerStepRow {
    // Its forward pass in the step (cnn_forward): from `in` into b.out[l] (and its scratch
    // b.idx[l]); l is its index, L the model's layer count.
    void (*forward)(CnnOps& ops, const LayerSpec& ly, const CnnBuffers& b, CUdeviceptr in, size_t l, size_t L);
    // Its backward pass (cnn_backward) from b.delta[l]: its parameters' gradient (times scale) and
    // dX, the deltas of its input (the layer below's b.delta[l-1]); `in` is its forward input.
    void (*backward)(CnnOps& ops, const LayerSpec& ly, const CnnBuffers& b, CUdeviceptr in, CUdeviceptr dX, size_t l,
                     size_t L, float scale);
    std::span<const char* const> forward_entries;  // the kernels its forward pass launches (evaluation loads them)
    std::span<const char* const> backward_entries;  // and its backward pass (training)
    // Its scratch buffer b.idx[l] in floats at batch B (bn: the batch's mean and rstd), and its name.
    size_t (*scratch)(const LayerSpec& ly, unsigned B);
    const char* scratch_name;
    // Why the kernels cannot run it at batch B in training (empty: they can); train refuses the run.
    std::string (*unfit)(const LayerSpec& ly, unsigned B);
    const char* weight_gradient;  // train's layer table: where its parameters' gradient is made ("in bn_bwd")
};

// The row of kind k, or null for the layers the data flow runs itself (conv, pool, fc); an
// internal error for any other kind without a row (a layer table row needs its step row).
const LayerStepRow* layer_step_row(LayerKind k);
// Every row's entries (forward, or forward and backward), in table order.
std::vector<std::string> layer_step_entries(bool backward);

// Where layer l keeps its pre-activations Z when act.ptx applies the activation: the layer
// under the last fc keeps them in its deltas' buffer (fused_output reads GELU's Z there and
// overwrites it with the deltas), the others in z[l] (cnn_step.cpp).
CUdeviceptr cnn_pre_activations(const CnnBuffers& b, size_t l, size_t L);

}  // namespace ptxlab
