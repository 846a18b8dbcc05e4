// The layer table: what the host's model description and its float64 reference know about a
// kind of layer, one row each (layers.cpp, kLayers), in LayerKind order (model.hpp: a layer's
// kind is its row's index). Its grammar token and --help line, where it may stand in the list,
// its shapes and parameters, its running statistics, how its parameters start, and its float64
// forward and backward passes: parse_model (model.cpp), init_model_params (recipe.cpp),
// model_forward64 and model_loss_grad64 (ref_model.cpp) and train's --help read it.
//
// A new layer on the host's model side: its row and the functions it names, here and in
// layers.cpp. (The GPU step's data flow, cnn_step.cpp, and the checkpoint's buffer names,
// safetensors.cpp, still name their layers themselves: issue 33's next slice.)
#pragma once

#include "model.hpp"
#include "recipe.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ptxlab {

class Rng;

// Where a row's parse functions are: the whole --model text, the layer's position (from 1) and
// its item, for the messages (InputError, naming all three).
struct LayerItem {
    const std::string& spec;
    size_t index;
    const std::string& item;
};

// One layer's float64 pass on a batch of B (ref_model.cpp): its input a[l], the flat parameters,
// and its values: z its pre-activation (conv, fc, bn), out its output, idx a pool's argmax,
// stats a bn's mean [C] then rstd [C]. The forward pass writes z, out, idx and stats; running is
// the model's buffer array (the bn layers' running statistics, moved in training where given;
// read in evaluation).
struct LayerPass64 {
    const std::vector<double>& P;
    unsigned B;
    Activation act;
    const std::vector<double>& in;
    std::vector<double>& z;
    std::vector<double>& out;
    std::vector<uint32_t>& idx;
    std::vector<double>& stats;
    std::vector<double>* running;
    bool train;
};

struct LayerRow {
    LayerKind kind() const;  // its index in the table (an internal error for a copy)
    const char* token = nullptr;  // the grammar's word, and its layers' names: "conv" -> conv1, conv2, ...
    const char* grammar = nullptr;  // its form in the messages' list: "conv<N>[k<K>]"
    const char* help = nullptr;  // --help's text of it: "conv<N> (3x3, same padding, bias, activation), ..."
    // The item's text after the token into l.width and l.ksize, from pos (conv: "32", "32k5";
    // fc: "128"); null: the item is the token alone (pool, bn).
    void (*parse)(const LayerItem& it, size_t pos, LayerSpec& l) = nullptr;
    bool after_fc = false;  // may come after an fc layer (fc, bn; a conv or a pool may not: the fc flattens)
    bool activated = false;  // carries the hidden activation (unless last or under a bn): conv, fc, bn
    // Takes over the hidden activation of the layer right under it, which then has none (bn:
    // PyTorch's Conv -> BN -> ReLU).
    bool takes_activation = false;
    bool spatial = false;  // shapes_text writes its output as CxHxW even at 1x1 (conv, pool)
    // Throws where it may not come after the layers so far (m.layers; last: it ends the list);
    // null: any place the rules above allow.
    void (*check_place)(const LayerItem& it, const Model& m, bool last) = nullptr;
    // l.out, l.width where it follows its input (bn), and the parameters' dims from l.in;
    // throws InputError where the input does not fit it.
    void (*place)(const LayerItem& it, LayerSpec& l) = nullptr;
    std::string (*text)(const LayerSpec& l) = nullptr;  // as the grammar writes it: "conv32k5", "pool"
    // Its running statistics in the buffer array (model.hpp): `buffers` tensors of l.width floats
    // back to back, named in the checkpoint NAME.buffer_names[j] ("bn1.running_mean"); with
    // tracks_steps also NAME.num_batches_tracked (I64: the training steps, as PyTorch counts them).
    unsigned buffers = 0;
    const char* const* buffer_names = nullptr;
    bool tracks_steps = false;
    // Those buffers' initial values at b (null: zeros).
    void (*init_buffers)(const LayerSpec& l, float* b) = nullptr;
    // Its parameters' initial values in the flat array, drawn from rng in layer order where
    // the row draws (init_layer_params); null: none.
    void (*init)(const LayerSpec& l, Init init, Rng& rng, float* flat) = nullptr;
    // The float64 forward pass (LayerPass64's writes), and the backward pass from d = dL/d(its
    // output), the activation's derivative already applied (dL/dz): it adds its parameters'
    // gradient to grad and returns dL/d(its input), or nothing where `below` is false (the first
    // layer).
    void (*forward64)(const LayerSpec& l, const LayerPass64& p) = nullptr;
    std::vector<double> (*backward64)(const LayerSpec& l, const LayerPass64& p, std::vector<double> d,
                                      std::vector<double>& grad, bool below) = nullptr;
};

// Every row, in LayerKind order (layer_rows()[k].kind() == LayerKind(k)).
std::span<const LayerRow> layer_rows();
const LayerRow& layer_row(LayerKind k);
// The grammar as the messages give it ("conv<N>[k<K>], pool, fc<N> or bn, e.g. ...; or cnn"),
// and the rows' --help texts joined by commas.
std::string model_grammar();
std::string model_grammar_help();
// The row whose token begins `item` (the longest such token), or null.
const LayerRow* layer_row_of(const std::string& item);

// ---- Batch normalization (one bn layer) on x [B][C][HW], in float64 ----
inline constexpr double kBnMomentum = 0.1, kBnEps = 1e-5;  // PyTorch's defaults
// Forward: z = gamma (x - mean) rstd + beta per channel; mean and rstd [C] are written. train:
// the batch's mean and biased variance, and, where run_mean and run_var are given, the running
// statistics updated (momentum 0.1, unbiased variance; it throws for a channel of one value, as
// PyTorch does: "Expected more than 1 value per channel when training"); else the running ones.
void bn_forward64(const double* x, unsigned B, unsigned C, unsigned HW, const double* gamma, const double* beta,
                  bool train, double* run_mean, double* run_var, double* z, double* mean, double* rstd);
// Backward in training, from dz = dL/dz: dgamma[c] = sum dz xhat, dbeta[c] = sum dz (written,
// not accumulated) and dx = gamma rstd (dz - mean(dz) - xhat mean(dz xhat)), xhat = (x - mean) rstd.
void bn_backward64(const double* x, const double* dz, unsigned B, unsigned C, unsigned HW, const double* gamma,
                   const double* mean, const double* rstd, double* dgamma, double* dbeta, double* dx);

}  // namespace ptxlab
