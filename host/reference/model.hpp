// A network as a list of layers: the `--model` grammar, every layer's shapes, and the
// parameter layout (PyTorch's order and shapes).
//
// Grammar: a comma-separated list of layers, read left to right from a 1x28x28 image (each kind
// a row of the layer table, layers.hpp, which parse_model reads):
//   conv<N>       3x3 convolution to N channels, stride 1, same padding (1), bias, then the
//                 hidden activation
//   conv<N>k<K>   the same with a KxK kernel, K odd: 1, 3 or 5 (same padding K/2)
//   pool          2x2 max-pool, stride 2 (the size must be even and at least 2)
//   fc<N>         dense layer to N units; the first fc flattens its input in NCHW order
//   bn            batch normalization of the layer before it, a conv (BatchNorm2d over its C
//                 channels, statistics over B x H x W) or a hidden fc (BatchNorm1d over its
//                 units, statistics over B); that layer's hidden activation moves after the bn
//                 (PyTorch's Conv -> BN -> ReLU). Not first, after a pool or a bn, nor last.
//   cnn           (alone) conv32,pool,conv64,pool,fc128,fc10
// The last layer is fc10 (MNIST's 10 classes) and has no activation; every other conv and
// fc has the hidden activation (a conv or fc under a bn: the bn has it); no conv or pool may
// follow an fc. A list of fc layers only
// (e.g. fc128,fc10) is the MLP of `--layers 784,128,10`.
//
// Parameters live in one flat array, tensors back to back in layer order, each layer its
// weight then its bias (the MLP's W1, b1, W2, b2 order):
//   conv  weight [out][in][k][k], bias [out]       (nn.Conv2d)
//   fc    weight [out][in],       bias [out]       (nn.Linear; `in` indexes the flattened
//                                                   NCHW input: c * H * W + y * W + x)
//   bn    weight [C] (gamma, 1),  bias [C] (beta, 0)   (nn.BatchNorm2d / BatchNorm1d)
// A bn's running statistics are buffers, not parameters (the optimizer never sees them): a
// second flat array, each bn layer's running_mean [C] (starts at 0) then running_var [C]
// (starts at 1) at its buffer_offset. PyTorch's third buffer, num_batches_tracked, is the
// count of training steps (each step's forward pass adds one in every bn layer), which the
// checkpoint holds as the step; it is not stored here. Training normalizes with the batch's
// mean and biased variance and moves the running ones by PyTorch's momentum 0.1 (the running
// variance by the unbiased one); evaluation normalizes with the running ones; eps 1e-5.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ptxlab {

// Channels x height x width; an fc layer's output is {units, 1, 1}.
struct Shape3 {
    unsigned c = 0, h = 0, w = 0;
    size_t size() const { return size_t(c) * h * w; }
    bool operator==(const Shape3&) const = default;
};

// A layer's kind: its row's index in the layer table (layers.hpp); the named ones are those the
// code names, a new row needs no enumerator.
enum class LayerKind { Conv, Pool, Fc, Bn };

struct LayerSpec {
    LayerKind kind = LayerKind::Fc;
    unsigned width = 0;       // conv: output channels; fc: units; bn: channels (or units); pool: 0
    unsigned ksize = 0;       // conv: kernel size (3 by default); else 0
    Shape3 in, out;
    bool activation = false;  // the hidden activation after this layer (conv, fc and bn; not the last,
                              // nor a conv or fc under a bn)
    std::string name;         // "conv1", "pool1", "fc2", "bn1": numbered per kind, from 1
    // Parameters (conv, fc): the weight's and the bias's shape and offset in the flat
    // array, in floats. Pool layers have none (empty dims, count 0). A bn: gamma and beta.
    std::vector<unsigned> weight_dims, bias_dims;
    size_t weight_offset = 0, bias_offset = 0;
    // A bn's running_mean [width] at buffer_offset, running_var [width] after it, in the
    // model's buffer array (0 for the other kinds).
    size_t buffer_offset = 0;
    bool is_bn() const { return kind == LayerKind::Bn; }
    size_t weight_count() const;
    size_t bias_count() const;
    std::string text() const;  // the layer as the grammar writes it: "conv32", "conv32k5", "pool", "fc10", "bn"
};

struct Model {
    std::vector<LayerSpec> layers;
    size_t param_count = 0;   // floats in the flat parameter array
    size_t buffer_count = 0;  // floats in the flat buffer array (the bn layers' running statistics)
    bool has_buffers() const { return buffer_count > 0; }  // layers with running statistics (bn)
    // The buffer array's initial values: each bn's running_mean 0, running_var 1.
    std::vector<float> initial_buffers() const;
    bool fc_only() const;
    // The --layers sizes of an fc-only model: {784, widths...}.
    std::vector<unsigned> fc_sizes() const;
    std::string text() const;         // "conv32,pool,conv64,pool,fc128,fc10"
    std::string shapes_text() const;  // "1x28x28 -conv32-> 32x28x28 -pool-> 32x14x14 ..."
};

inline constexpr Shape3 kMnistInput{1, 28, 28};
inline constexpr unsigned kMnistClasses = 10;
inline constexpr unsigned kMaxWidth = 1u << 20;  // the largest channel count or fc width taken

// parse_model, LayerSpec::text, Model::initial_buffers and Model::shapes_text read the layer table:
// layers.cpp defines them.
// Parses a --model spec; throws InputError naming the layer (its position, from 1) and what
// is wrong with it. `input` is the image's shape (MNIST's; tests take smaller ones).
Model parse_model(const std::string& spec, Shape3 input = kMnistInput);

}  // namespace ptxlab
