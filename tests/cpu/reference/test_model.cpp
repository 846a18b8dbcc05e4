// The --model grammar (host/reference/model.hpp): shapes and parameter layout of good specs, and a
// message naming the layer for every kind of bad spec.
#include "error.hpp"
#include "layers.hpp"
#include "model.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace ptxlab;

namespace {
// The message parse_model throws for `spec` (empty when it does not throw).
std::string refusal(const std::string& spec) {
    try {
        parse_model(spec);
    } catch (const InputError& e) {
        return e.what();
    }
    return {};
}
}  // namespace

TEST_CASE("model: cnn is the issue's network, with PyTorch's shapes and a flat layout") {
    const Model m = parse_model("cnn");
    CHECK(m.text() == "conv32,pool,conv64,pool,fc128,fc10");
    REQUIRE(m.layers.size() == 6);
    const auto& c1 = m.layers[0];
    CHECK(c1.name == "conv1");
    CHECK(c1.in == Shape3{1, 28, 28});
    CHECK(c1.out == Shape3{32, 28, 28});
    CHECK(c1.weight_dims == std::vector<unsigned>{32, 1, 3, 3});
    CHECK(c1.bias_dims == std::vector<unsigned>{32});
    CHECK(c1.weight_offset == 0);
    CHECK(c1.bias_offset == 288);
    CHECK(c1.activation);
    const auto& p1 = m.layers[1];
    CHECK(p1.name == "pool1");
    CHECK(p1.out == Shape3{32, 14, 14});
    CHECK(p1.weight_count() == 0);
    CHECK_FALSE(p1.activation);
    const auto& c2 = m.layers[2];
    CHECK(c2.name == "conv2");
    CHECK(c2.weight_dims == std::vector<unsigned>{64, 32, 3, 3});
    CHECK(c2.weight_offset == 320);           // after conv1's 288 + 32
    CHECK(c2.bias_offset == 320 + 18432);
    CHECK(m.layers[3].out == Shape3{64, 7, 7});
    const auto& f1 = m.layers[4];
    CHECK(f1.name == "fc1");
    CHECK(f1.weight_dims == std::vector<unsigned>{128, 3136});  // flatten of 64x7x7, NCHW order
    CHECK(f1.weight_offset == 320 + 18432 + 64);
    CHECK(f1.activation);
    const auto& f2 = m.layers[5];
    CHECK(f2.name == "fc2");
    CHECK(f2.weight_dims == std::vector<unsigned>{10, 128});
    CHECK_FALSE(f2.activation);  // the logits
    // nn.Sequential's parameter count for this network.
    CHECK(m.param_count == 288 + 32 + 18432 + 64 + 401408 + 128 + 1280 + 10);
    CHECK(f2.bias_offset + 10 == m.param_count);
    CHECK(m.shapes_text() == "1x28x28 -conv32-> 32x28x28 -pool-> 32x14x14 -conv64-> 64x14x14 -pool-> 64x7x7 "
                             "-fc128-> 128 -fc10-> 10");
    CHECK_FALSE(m.fc_only());
}

TEST_CASE("model: kernel sizes, pools down to 7x7, and text round trips") {
    const Model m = parse_model("conv8k5,conv16k1,pool,conv4,pool,fc10");
    CHECK(m.layers[0].weight_dims == std::vector<unsigned>{8, 1, 5, 5});
    CHECK(m.layers[1].weight_dims == std::vector<unsigned>{16, 8, 1, 1});
    CHECK(m.layers[1].out == Shape3{16, 28, 28});
    CHECK(m.layers[4].out == Shape3{4, 7, 7});
    CHECK(m.layers[5].weight_dims == std::vector<unsigned>{10, 196});
    CHECK(m.text() == "conv8k5,conv16k1,pool,conv4,pool,fc10");
    CHECK(parse_model("conv8k3,fc10").text() == "conv8,fc10");  // k3 is the default
    // A pool straight on the image, and a model of one conv and the classifier.
    CHECK(parse_model("pool,pool,fc10").layers[2].weight_dims == std::vector<unsigned>{10, 49});
    CHECK(parse_model("conv1,fc10").param_count == 9 + 1 + 7840 + 10);
}

TEST_CASE("model: an fc-only list is the MLP of --layers") {
    const Model m = parse_model("fc128,fc10");
    CHECK(m.fc_only());
    CHECK(m.fc_sizes() == std::vector<unsigned>{784, 128, 10});
    CHECK(m.layers[0].weight_dims == std::vector<unsigned>{128, 784});
    CHECK(m.param_count == 101770);  // W1, b1, W2, b2 of 784-128-10
    CHECK(parse_model("fc128,fc64,fc10").fc_sizes() == std::vector<unsigned>{784, 128, 64, 10});
    CHECK_FALSE(parse_model("cnn").fc_only());
}

TEST_CASE("model: bad specs are refused, naming the layer") {
    struct Bad {
        const char* spec;
        const char* message;  // a part of the message
    };
    const Bad bad[] = {
        {"", "--model is empty"},
        {"conv32,,fc10", "layer 2 is empty"},
        {"conv32,fc10,", "layer 3 is empty (a comma too many at the end"},
        {",fc10", "layer 1 is empty (a comma too many at the start"},
        {"conv32,poo,fc10", "layer 2 'poo' is not a layer"},
        {"conv32,pool2,fc10", "layer 2 'pool2' is not a layer"},
        {"Conv32,fc10", "layer 1 'Conv32' is not a layer"},
        {"conv,fc10", "layer 1 'conv' needs a channel count"},
        {"conv0,fc10", "layer 1 'conv0': a channel count must be at least 1"},
        {"fc0,fc10", "layer 1 'fc0': a width must be at least 1"},
        {"conv32k,fc10", "layer 1 'conv32k' needs a kernel size"},
        {"conv32k4,fc10", "kernel size 4 is not taken"},
        {"conv32k7,fc10", "kernel size 7 is not taken"},
        {"conv32x,fc10", "layer 1 'conv32x': unexpected 'x'"},
        {"conv-3,fc10", "layer 1 'conv-3' needs a channel count"},
        {"fc 10", "layer 1 'fc 10' needs a width"},
        {"conv99999999,fc10", "is too large"},
        {"fc128,conv32,fc10", "layer 2 'conv32' comes after an fc layer"},
        {"fc128,pool,fc10", "layer 2 'pool' comes after an fc layer"},
        {"pool,pool,pool,fc10", "layer 3 'pool' gets 1x7x7"},
        {"pool,pool,pool,pool,pool,fc10", "layer 3 'pool' gets 1x7x7"},
        {"conv32,pool", "the last layer is 'pool' (layer 2)"},
        {"conv32", "the last layer is 'conv32' (layer 1)"},
        {"fc128,fc9", "the last layer is 'fc9'"},
        {"cnn,fc10", "layer 1 'cnn' names a whole model"},
        {"bn,conv8,fc10", "layer 1 'bn' is the first layer"},
        {"conv8,pool,bn,fc10", "layer 3 'bn' comes after a pool"},
        {"conv8,bn,bn,fc10", "layer 3 'bn' comes after a bn"},
        {"conv8,fc10,bn", "layer 3 'bn' comes after the last layer 'fc10' (the logits)"},
        {"conv8,bn2,fc10", "layer 2 'bn2' is not a layer"},
    };
    for (const auto& b : bad) {
        CAPTURE(b.spec);
        const std::string msg = refusal(b.spec);
        CAPTURE(msg);
        CHECK(msg.find(b.message) != std::string::npos);
    }
}

TEST_CASE("model: bn after a conv (BatchNorm2d) or a hidden fc (BatchNorm1d), the activation after it") {
    const Model m = parse_model("conv32,bn,pool,conv64,bn,pool,fc128,bn,fc10");
    REQUIRE(m.layers.size() == 9);
    CHECK(m.text() == "conv32,bn,pool,conv64,bn,pool,fc128,bn,fc10");
    const LayerSpec& bn1 = m.layers[1];
    CHECK(bn1.kind == LayerKind::Bn);
    CHECK(bn1.name == "bn1");
    CHECK(m.layers[4].name == "bn2");
    CHECK(m.layers[7].name == "bn3");
    CHECK(bn1.width == 32);
    CHECK(bn1.in == Shape3{32, 28, 28});
    CHECK(bn1.out == Shape3{32, 28, 28});
    CHECK(m.layers[7].out == Shape3{128, 1, 1});
    // Conv -> BN -> ReLU: the conv or fc under a bn has no activation, the bn has it.
    CHECK_FALSE(m.layers[0].activation);
    CHECK(bn1.activation);
    CHECK_FALSE(m.layers[6].activation);
    CHECK(m.layers[7].activation);
    CHECK_FALSE(m.layers[8].activation);
    // Parameters in layer order: conv1 weight, bias, bn1 weight (gamma), bias (beta), ...
    CHECK(bn1.weight_dims == std::vector<unsigned>{32});
    CHECK(bn1.bias_dims == std::vector<unsigned>{32});
    CHECK(bn1.weight_offset == 288 + 32);
    CHECK(bn1.bias_offset == 288 + 32 + 32);
    CHECK(m.layers[3].weight_offset == 288 + 32 + 64);
    CHECK(m.param_count == 288 + 32 + 64 + 18432 + 64 + 128 + 401408 + 128 + 256 + 1280 + 10);
    // Running statistics in the buffer array: mean then var of each bn in order.
    CHECK(m.buffer_count == 2 * (32 + 64 + 128));
    CHECK(bn1.buffer_offset == 0);
    CHECK(m.layers[4].buffer_offset == 64);
    CHECK(m.layers[7].buffer_offset == 64 + 128);
    CHECK(m.has_buffers());
    CHECK_FALSE(parse_model("cnn").has_buffers());
    const std::vector<float> b = m.initial_buffers();
    REQUIRE(b.size() == m.buffer_count);
    CHECK(b[0] == 0.0f);
    CHECK(b[31] == 0.0f);
    CHECK(b[32] == 1.0f);
    CHECK(b[63] == 1.0f);
    CHECK(b[64] == 0.0f);
    CHECK(b.back() == 1.0f);
    // An fc with a bn is not an MLP: the model trainer runs it.
    CHECK_FALSE(parse_model("fc128,bn,fc10").fc_only());
    CHECK(parse_model("fc128,bn,fc10").shapes_text() == "1x28x28 -fc128-> 128 -bn-> 128 -fc10-> 10");
}

TEST_CASE("model: the layer table has a row a kind, in kind order, each with what the grammar and the float64 step read") {
    const auto rows = layer_rows();
    REQUIRE(rows.size() >= 4);
    for (size_t k = 0; k < rows.size(); ++k) {
        const LayerRow& r = rows[k];
        CAPTURE(r.token);
        CHECK(r.kind() == static_cast<LayerKind>(k));
        CHECK(&layer_row(r.kind()) == &r);
        CHECK(layer_row_of(r.token) == &r);
        CHECK(std::string(r.help).starts_with(r.token));
        CHECK(model_grammar().find(r.grammar) != std::string::npos);
        CHECK(model_grammar_help().find(r.help) != std::string::npos);
        CHECK((r.place && r.text && r.forward64 && r.backward64));
        CHECK((r.buffers == 0) == (r.buffer_names == nullptr));
        CHECK_FALSE((r.init_buffers && !r.buffers));
    }
    // The named kinds sit at their rows.
    CHECK(std::string(layer_row(LayerKind::Conv).token) == "conv");
    CHECK(std::string(layer_row(LayerKind::Pool).token) == "pool");
    CHECK(std::string(layer_row(LayerKind::Fc).token) == "fc");
    CHECK(std::string(layer_row(LayerKind::Bn).token) == "bn");
    // The longest token that begins an item wins; an item no token begins has no row.
    CHECK(layer_row_of("fc128") == &layer_row(LayerKind::Fc));
    CHECK(layer_row_of("bnx") == &layer_row(LayerKind::Bn));
    CHECK(layer_row_of("xfc") == nullptr);
    CHECK(model_grammar() == "conv<N>[k<K>], pool, fc<N> or bn, e.g. conv32,pool,conv64,pool,fc128,fc10; or cnn");
    CHECK_THROWS_AS(layer_row(static_cast<LayerKind>(rows.size())), Error);
}
