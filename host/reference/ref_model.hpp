// The float64 reference of a whole --model (model.hpp): forward, the recipe's loss, backward
// to every parameter in the model's flat layout, and one optimizer step. It is the ground
// truth the CNN trainer is checked against, and for an fc-only model it is cpu_recipe_step
// (recipe.hpp) to the bit: the same sums in the same order.
//
// Layers, on a batch of B images in NCHW order (a[0] = X, [B][1][28][28] for MNIST):
//   conv  z = conv2d(a, W, b) (ref_conv.hpp: stride 1, same padding); a' = act(z) when the
//         layer has the hidden activation (every conv)
//   pool  a' = 2x2 max-pool, stride 2 (ties to the first in row-major order), its argmax kept
//   fc    z[n][o] = b[o] + sum_i W[o][i] a[n][i] (i over the flattened NCHW input, in order);
//         a' = act(z) except on the last layer (the logits) and under a bn
//   bn    per channel c (stats over the batch and the plane: B x H x W values; an fc's units
//         are channels of a 1x1 plane): training: mean, the biased variance var, rstd =
//         1 / sqrt(var + 1e-5), z = gamma (a - mean) rstd + beta, a' = act(z); the running
//         mean and variance move by 0.1 towards the batch's (the variance's unbiased, times
//         n / (n - 1)); evaluation: the running ones in place of the batch's
// Loss: the mean over the batch of loss_value against one-hot labels. Backward: each sample's
// loss_grad / B at the logits, then layer by layer down: fc sums in sample order as
// cpu_recipe_step does, conv through conv2d_backward_weights / conv2d_backward_input, pool
// through its argmax, bn through its batch statistics (bn_backward64), and act'(z) at every
// activated layer's pre-activation.
#pragma once

#include "layers.hpp"
#include "model.hpp"
#include "recipe.hpp"

#include <cstdint>
#include <vector>

namespace ptxlab {

// Every layer's values for one batch: a[l] is layer l's input (a[0] = X) and a[l + 1] its
// output; z[l + 1] the pre-activation of conv, fc and bn layers (empty for pool); idx[l + 1] a
// pool layer's argmax (maxpool2_forward's index in the input plane); bn[l + 1] a bn layer's
// mean [C] then rstd [C], those it normalized with.
struct ModelForward64 {
    std::vector<std::vector<double>> a, z, bn;
    std::vector<std::vector<uint32_t>> idx;
    const std::vector<double>& logits() const { return a.back(); }  // [B][10]
};
// train: the bn layers normalize with the batch's statistics and update `running` (the model's
// buffer array, m.buffer_count values) where it is given; eval (train false): with `running`'s,
// which a model with bn layers then needs.
ModelForward64 model_forward64(const Model& m, const std::vector<double>& params, const std::vector<double>& X,
                               unsigned B, Activation act, std::vector<double>* running = nullptr,
                               bool train = true);

// The batch loss (mean over the B samples) and, when grad is not null, its gradient with
// respect to every parameter in the flat layout (grad is resized to m.param_count). A training
// pass: bn layers on the batch's statistics, `running` (when given) updated.
double model_loss_grad64(const Model& m, const std::vector<double>& params, const Recipe& r,
                         const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B,
                         std::vector<double>* grad, std::vector<double>* running = nullptr);

// The optimizer's state over the flat parameters (sized on first use) and the steps taken.
struct ModelOptim64 {
    std::vector<double> m, v;
    uint64_t t = 0;
};
// One training step: model_loss_grad64, then optim_step (recipe.hpp) over the whole flat
// array with learning rate lr at step ++st.t. Returns the batch loss before the step. The bn
// layers' running statistics move in `running` when it is given.
double cpu_model_step(const Model& m, std::vector<double>& params, ModelOptim64& st, const Recipe& r,
                      const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B, double lr,
                      std::vector<double>* running = nullptr);

}  // namespace ptxlab
