// The model trainer's one-launch step of 3 fc layers, fc3_step (host/train/cnn_fc3step.cpp,
// ptx/fc3step.ptx), in the training loop on MNIST: the PTX against its twin bit for bit, a chunk's
// steps in one launch against a launch a step, and against the layer-by-layer step of the same
// set. Its rule and listing without a GPU: tests/cpu/train/test_fc3step_rule.cpp.
#include "../common.hpp"
#include "model.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

const Dataset& mnist() {
    static const Dataset d = load_dataset(default_data_dir());
    return d;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

bool all_finite(const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

double mean(const std::vector<double>& v, size_t from, size_t to) {
    double s = 0;
    for (size_t i = from; i < to; ++i) s += v[i];
    return s / double(to - from);
}

// `train --layers 784,256,128,10` on the tc set for `steps` steps at a constant lr of 0.05 (so that
// a few steps learn), chunks of 16 steps: 40 steps are chunks of 16, 16 and 8, each one launch of
// fc3_step (its steps back to back); `tweak` changes the rest.
TrainConfig fc3_config(unsigned steps, const std::function<void(TrainConfig&)>& tweak = {}) {
    TrainConfig cfg;
    cfg.model = parse_model("fc256,fc128,fc10");
    cfg.layers = cfg.model->fc_sizes();
    cfg.kernels = {Design::Tc, KernelSource::Ptx};
    cfg.epochs = 1;
    cfg.max_steps = steps;
    cfg.chunk = 16;
    cfg.schedule.kind = ScheduleKind::Const;
    cfg.schedule.warmup = 0;
    cfg.lr = 0.05f;
    cfg.seed = 5;
    cfg.progress = false;
    if (tweak) tweak(cfg);
    return cfg;
}

TrainResult run(const TrainConfig& cfg) {
    std::ostringstream out;
    TrainResult r = train(gpu(), mnist(), cfg, out);
    MESSAGE(out.str());
    return r;
}

void twins(TrainConfig& c) { c.kernels.source = KernelSource::Reference; }
void layer_by_layer(TrainConfig& c) { c.one_launch = false; }

// Two runs of the same recipe on other kernels learned alike: the first step's loss (the same
// initial parameters; TF32 products against FP32 ones) within 1 %, the last 10 steps' mean loss
// within 10 %.
void check_close(const TrainResult& a, const TrainResult& b) {
    REQUIRE(a.step_losses.size() == b.step_losses.size());
    const size_t n = a.step_losses.size();
    CHECK(a.step_losses[0] == doctest::Approx(b.step_losses[0]).epsilon(0.01));
    CHECK(mean(a.step_losses, n - 10, n) == doctest::Approx(mean(b.step_losses, n - 10, n)).epsilon(0.10));
}

}  // namespace

TEST_CASE("fc3step: 40 steps of 784-256-128-10 on fc3_step: the PTX as its twin, a launch a chunk as a launch a step, graphs or not, near the layer-by-layer step") {
    const TrainConfig cfg = fc3_config(40);
    REQUIRE(fc3_step_unfit(cfg) == "");
    const std::string listing = model_step_listing(cfg, cnn_wgk_loaded(gpu().info()));
    MESSAGE(listing);
    CHECK(listing.find("  a step: fc3_step (the whole step in one launch") == 0);
    TrainConfig twin = cfg;
    twins(twin);
    REQUIRE(fc3_step_unfit(twin) == "");  // the twin, ptx/reference/fc3step.cu, is there
    const TrainResult ptx = run(cfg), ref = run(twin),
                      one = run(fc3_config(40, [](TrainConfig& c) { c.steps_per_launch = 1; })),
                      plain = run(fc3_config(40, [](TrainConfig& c) { c.graphs = false; })),
                      layers = run(fc3_config(40, layer_by_layer));
    REQUIRE(ptx.steps == 40);
    REQUIRE(ptx.step_losses.size() == 40);
    CHECK(ptx.step_losses == ref.step_losses);
    CHECK(same_bits(ptx.params, ref.params));
    // Steps back to back in one launch (the W1 and W2 tiles kept in shared memory between them)
    // give the bits of a launch a step; plain launches those of the chunks' graphs.
    CHECK(ptx.step_losses == one.step_losses);
    CHECK(same_bits(ptx.params, one.params));
    CHECK(ptx.step_losses == plain.step_losses);
    CHECK(same_bits(ptx.params, plain.params));
    CHECK(all_finite(ptx.params));
    CHECK(mean(ptx.step_losses, 30, 40) < 0.8 * mean(ptx.step_losses, 0, 10));
    // The layer-by-layer step of the tc set (fused_forward, tc_grad_weights, ..., the optimizer)
    // sums in other orders and precisions: other bits (fc3_step did run), the same learning.
    CHECK(ptx.step_losses != layers.step_losses);
    check_close(ptx, layers);
}

TEST_CASE("fc3step: every optimizer's state (m, v, both, none) and the MSE loss: the PTX as its twin, near the layer-by-layer step") {
    struct Variant {
        const char* name;
        std::function<void(TrainConfig&)> tweak;
    };
    const Variant variants[] = {
        {"sgd, mse", [](TrainConfig& c) { c.optim.kind = OptimKind::Sgd; c.loss = Loss::Mse; c.lr = 0.5f; }},
        {"adam (m and v)", [](TrainConfig& c) { c.optim.kind = OptimKind::Adam; c.lr = 1e-3f; }},
        {"rmsprop (v alone)", [](TrainConfig& c) { c.optim.kind = OptimKind::RmsProp; c.lr = 1e-3f; }},
        {"adamw, weight decay",
         [](TrainConfig& c) {
             c.optim.kind = OptimKind::AdamW;
             c.optim.weight_decay = 0.01f;
             c.lr = 1e-3f;
         }},
    };
    for (const Variant& v : variants) {
        CAPTURE(v.name);
        const TrainConfig cfg = fc3_config(40, v.tweak);
        REQUIRE(fc3_step_unfit(cfg) == "");
        const TrainResult ptx = run(cfg), ref = run(fc3_config(40, [&](TrainConfig& c) { v.tweak(c); twins(c); })),
                          layers = run(fc3_config(40, [&](TrainConfig& c) { v.tweak(c); layer_by_layer(c); }));
        REQUIRE(ptx.step_losses.size() == 40);
        CHECK(ptx.step_losses == ref.step_losses);
        CHECK(same_bits(ptx.params, ref.params));
        CHECK(all_finite(ptx.params));
        CHECK(mean(ptx.step_losses, 30, 40) < mean(ptx.step_losses, 0, 10));
        check_close(ptx, layers);
    }
}

TEST_CASE("fc3step: train --layers 784,256,128,10 learns MNIST in 300 steps on fc3_step (the default recipe), the PTX as its twin") {
    const TrainResult ptx = train_model_steps(mnist(), "fc256,fc128,fc10", 300, KernelSource::Ptx),
                      twin = train_model_steps(mnist(), "fc256,fc128,fc10", 300, KernelSource::Reference);
    CHECK(ptx.steps == 300);
    CHECK(ptx.accuracy >= 0.90);  // the layer-by-layer step: 92.44 % on an H200 (300 steps, still in the warm-up)
    CHECK(ptx.step_losses == twin.step_losses);
    CHECK(same_bits(ptx.params, twin.params));
}

TEST_CASE("fc3step: a diverging recipe on fc3_step: the replay of its steps one launch each names fc3_step, and its twin diverges too") {
    // MSE and plain SGD at lr 1000: the logits overflow within a few steps. The loop replays the
    // chunk one step at a time (Fc3Step::step_kernel: Y, then the parameters) and finds the
    // first non-finite write in fc3_step's; the twin goes non-finite from the same state.
    const TrainResult r = run(fc3_config(200, [](TrainConfig& c) {
        c.loss = Loss::Mse;
        c.optim.kind = OptimKind::Sgd;
        c.lr = 1000.0f;
    }));
    REQUIRE(r.diverged);
    CAPTURE(r.fault);
    CHECK(r.fault.find("kernel 'fc3_step'") != std::string::npos);
    CHECK(r.fault.find("twins go non-finite too") != std::string::npos);
}
