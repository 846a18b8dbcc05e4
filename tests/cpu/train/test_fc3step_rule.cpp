// Which --model runs its steps on fc3_step (train_cnn.hpp: fc3_step_unfit, host/train/cnn_fc3step.cpp)
// and what train prints of it (model_step_listing), without a GPU. Its device behaviour is in
// tests/gpu/train/test_fc3step_train.cpp.
#include "model.hpp"
#include "recipe.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace ptxlab;

namespace {

// `train --layers 784,256,128,10` (or --model fc256,fc128,fc10) with its defaults: the tc set, batch 64.
TrainConfig fc3_config(const std::string& spec = "fc256,fc128,fc10") {
    TrainConfig c;
    c.model = parse_model(spec);
    if (c.model->fc_only()) c.layers = c.model->fc_sizes();
    c.kernels = {Design::Tc, KernelSource::Ptx};
    c.batch = 64;
    return c;
}

// The row of `layer` in a layer table ("  fc1     ...").
std::string row(const std::string& table, const std::string& layer) {
    const size_t at = table.find("\n  " + layer + " ");
    REQUIRE(at != std::string::npos);
    return table.substr(at + 1, table.find('\n', at + 1) - at - 1);
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("fc3step: 3 fc layers with ReLU on the tc set at batch 64 run on fc3_step, and each reason it does not") {
    TrainConfig c = fc3_config();
    CHECK(fc3_step_unfit(c) == "");
    CHECK(fc3_step_unfit(*c.model, c.kernels, 64, Activation::Relu) == "");
    // The largest sizes it takes (B 64, H1 256, H2 128) and a small net; the twins of tc too.
    CHECK(fc3_step_unfit(fc3_config("fc64,fc32,fc10")) == "");
    CHECK(fc3_step_unfit(parse_model("fc1,fc1,fc10"), c.kernels, 1, Activation::Relu) == "");
    CHECK(fc3_step_unfit(*c.model, {Design::Tc, KernelSource::Reference}, 64, Activation::Relu) == "");
    // 2 or 4 fc layers, a conv model, a bn layer.
    for (const char* spec :
         {"fc128,fc10", "fc256,fc128,fc64,fc10", "cnn", "conv8,pool,fc32,fc10", "fc64,bn,fc32,fc10"}) {
        CAPTURE(spec);
        const std::string why = fc3_step_unfit(fc3_config(spec));
        CAPTURE(why);
        CHECK(has(why, "fc3_step takes networks of exactly 3 fc layers"));
        CHECK(has(why, parse_model(spec).text()));
    }
    // Another activation than ReLU.
    for (Activation act : {Activation::Gelu, Activation::Tanh, Activation::LeakyRelu, Activation::Sigmoid}) {
        c.activation = act;
        CHECK(fc3_step_unfit(c) == "fc3_step takes ReLU hidden layers, not --activation " + to_string(act));
    }
    c.activation = Activation::Relu;
    // Another kernel set: FP32 (fused, and its twins), the notebook's, tc's BF16 inputs.
    for (KernelChoice k : {KernelChoice{Design::Fused, KernelSource::Ptx},
                           KernelChoice{Design::Fused, KernelSource::Reference},
                           KernelChoice{Design::Seed, KernelSource::Ptx},
                           KernelChoice{Design::Tc, KernelSource::Ptx, true}}) {
        c.kernels = k;
        CHECK(fc3_step_unfit(c) == "fc3_step runs in the tc set and its twins (TF32 products), not " + to_string(k));
    }
    c.kernels = {Design::Tc, KernelSource::Ptx};
    // Sizes past fc3step.hpp's limits: batch 65, H1 257, H2 129, and O 17 (no --model has it:
    // MNIST's last layer is fc10; the rule reads O from the model's last width). Its reason is
    // fc3step.hpp's fc3_step_unfit, named as fc3_step's.
    c.batch = 65;
    CHECK(fc3_step_unfit(c).starts_with("fc3_step"));
    CHECK(fc3_step_unfit(c) == fc3_step_unfit(*c.model, c.kernels, 65, Activation::Relu));
    c.batch = 64;
    CHECK(fc3_step_unfit(fc3_config("fc257,fc128,fc10")).starts_with("fc3_step"));
    CHECK(fc3_step_unfit(fc3_config("fc256,fc129,fc10")).starts_with("fc3_step"));
    CHECK(fc3_step_unfit(fc3_config("fc256,fc129,fc10")).find("fc3_step takes networks") == std::string::npos);
    Model o17 = parse_model("fc256,fc128,fc10");
    o17.layers[2].width = 17;
    o17.layers[2].out.c = 17;
    CHECK(fc3_step_unfit(o17, c.kernels, 64, Activation::Relu).starts_with("fc3_step"));
    o17.layers[2].width = 16;  // the most outputs it takes
    o17.layers[2].out.c = 16;
    CHECK(fc3_step_unfit(o17, c.kernels, 64, Activation::Relu) == "");
    CHECK(fc3_step_unfit(*c.model, c.kernels, 0, Activation::Relu).starts_with("fc3_step"));
    // What a run asks for: the layer-by-layer step, dense_program; no model at all.
    c.one_launch = false;
    CHECK(fc3_step_unfit(c) == "the layer-by-layer step was asked for (one_launch off)");
    c.one_launch = true;
    c.dense_program = true;
    CHECK(fc3_step_unfit(c) == "dense_program was asked for (--dense-program)");
    c.dense_program = false;
    TrainConfig mlp;
    mlp.layers = {784, 256, 128, 10};
    CHECK(has(fc3_step_unfit(mlp), "model trainer"));
    CHECK(fc3_step_unfit(c) == "");
}

TEST_CASE("fc3step: a kernel directory without fc3step.ptx keeps the layer-by-layer step, and says why") {
    TrainConfig c = fc3_config();
    CHECK(fc3_step_absent(KernelSource::Ptx, c.dirs) == "");
    // A --ptx-dir of other copies: the rule names the missing file, the run loads no fc3_step.
    c.dirs = KernelDirs::from_ptx_dir(std::string(PTXLAB_FIXTURES) + "/lessons");
    const std::string why = fc3_step_unfit(c);
    CAPTURE(why);
    CHECK(has(why, "fc3_step is left out: "));
    CHECK(has(why, "fc3step.ptx does not exist"));
    const std::vector<std::string> e = training_entries(c);
    CHECK(std::find(e.begin(), e.end(), "fc3_step") == e.end());
    CHECK(has(model_step_listing(c, false), "(no one-launch step: fc3_step is left out: "));
}

TEST_CASE("fc3step: the kernels a run loads and what train prints: fc3_step for each layer, or why not") {
    TrainConfig c = fc3_config();
    const std::vector<std::string> e = training_entries(c);
    CHECK(std::find(e.begin(), e.end(), "fc3_step") != e.end());
    CHECK(std::find(e.begin(), e.end(), "dense_program") == e.end());
    // The layer-by-layer kernels stay loaded: evaluation runs on them.
    CHECK(std::find(e.begin(), e.end(), "fused_output") != e.end());
    const std::string t = model_step_listing(c, false);
    MESSAGE(t);
    CHECK(t.find("  a step: fc3_step (the whole step in one launch") == 0);
    CHECK(has(t, "every step of a chunk a launch"));
    CHECK(!has(t, "optim_"));  // the optimizer's update is in the launch
    CHECK(has(row(t, "fc1"), "fc3_step (S1)"));
    CHECK(has(row(t, "fc1"), " - "));  // no deltas below the first layer
    CHECK(has(row(t, "fc1"), "fc3_step (S4, and the update)"));
    CHECK(has(row(t, "fc2"), "fc3_step (S2)"));
    CHECK(has(row(t, "fc2"), "fc3_step (S3, summed in S4)"));
    CHECK(has(row(t, "fc3"), "fc3_step (S2, S3: logits, loss)"));
    CHECK(has(row(t, "fc3"), "fc3_step (S3, and the update)"));
    c.steps_per_launch = 5;
    CHECK(has(model_step_listing(c, false), "5 steps a launch"));
    c.steps_per_launch = 0;
    // Not taken: the layer-by-layer step, with fc3_step's reason on the step's line.
    c.batch = 128;
    const std::string big = model_step_listing(c, false);
    MESSAGE(big);
    CHECK(big.find("  a step: ") == 0);
    CHECK(has(big, ", optim_sgd (no one-launch step: fc3_step"));
    CHECK(big.find("fc3_step") > big.find("(no one-launch step: "));  // named in the reason alone
    // Under that line, the layer-by-layer step's table.
    CHECK(big.substr(big.find('\n') + 1) == cnn_layer_kernels(*c.model, ConvKernels::Tc, 128));
    CHECK(std::count(big.begin(), big.end(), '\n') == 5);  // the step's line, the header and 3 layers
    c.batch = 64;
    c.kernels = {Design::Fused, KernelSource::Ptx};
    CHECK(has(model_step_listing(c, false), "(no one-launch step: fc3_step runs in the tc set and its twins"));
    // --dense-program: dense_program's listing (its rule allows 3 fc layers on the fused and tc sets).
    c.kernels = {Design::Tc, KernelSource::Ptx};
    c.dense_program = true;
    CHECK(model_step_listing(c, false).find("  a step: dense_program, optim_sgd") == 0);
    c.dense_program = false;
    // Other fc networks keep dense_program's reason; a conv network prints none.
    const std::string four = model_step_listing(fc3_config("fc256,fc128,fc64,fc10"), false);
    CHECK(has(four, "(no one-launch step: dense_program, the step in one launch, runs with --dense-program"));
    CHECK(!has(model_step_listing(fc3_config("cnn"), false), "no one-launch step"));
}
