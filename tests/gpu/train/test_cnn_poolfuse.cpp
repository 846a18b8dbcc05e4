// The backward pass of a pool in the deltas launch of the conv above it (tc_conv_bwd_data's pooled
// epilogue, cnn_step.cpp's conv_bwd_data_pool) on the GPU: the trainer's steps with it equal,
// bit for bit, the steps with the pool's own pool_bwd launch (TrainConfig::pool_bwd_in_conv
// false), and the PTX its twins.
#include "../common.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "rng.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <doctest/doctest.h>

#include <cstring>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

// What three steps of `m` on one batch leave: the parameters, the first step's gradient, every
// step's logits.
struct PoolFuseSteps {
    std::vector<float> params, first_grad, logits;
};

PoolFuseSteps pool_fuse_steps(KernelSource src, const Model& m, const TrainConfig& cfg, unsigned B) {
    Rng rng(31);
    std::vector<float> X(size_t(B) * 784), t(size_t(B) * kClasses, 0.0f);
    for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
    for (unsigned s = 0; s < B; ++s) t[size_t(s) * kClasses + rng.below(10)] = 1.0f;
    const std::vector<double> lrs = {0.0625, 0.125, 0.03125};
    KernelSet ks(src, gpu().info(), KernelDirs::from_environment(),
                 cnn_training_entries(cfg.optim, conv_kernels_of(cfg.kernels)));
    CnnParams p(m, init_model_params(m, Init::Torch, 7), cfg.optim);
    CnnActs a(m, B, cfg.activation);
    a.keep_transposes(m, ks, conv_kernels_of(cfg.kernels));  // as train's step
    const StepBuffers in(X, t, cfg.optim, lrs);
    Stream s;
    PoolFuseSteps r;
    for (size_t k = 0; k < lrs.size(); ++k) {
        enqueue_cnn_step(ks, m, p, a, in.X.ptr(), in.T.ptr(), in.y(k), cfg, in.hyp(k), s.get());
        s.synchronize();
        if (k == 0) r.first_grad = p.grads.download_vector<float>();
    }
    r.params = p.params.download_vector<float>();
    r.logits = in.Y.download_vector<float>();
    return r;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST_CASE("cnn: pool1's backward in conv2's tc_conv_bwd_data equals its own pool_bwd launch bit for bit, the PTX its twins") {
    // The CNN at batch 64 (pool1 28x28, its ReLU mask), with and without the weight gradients on
    // the side streams; with GELU (no mask); three convs (two pools in conv deltas passes, conv3
    // on 7x7 under the last fc), batch 5. (A model's pools take even sizes; verify's
    // tc_conv_bwd_data cases with pool 2..4, 6..8 cover odd pool inputs.)
    struct Case {
        const char* spec;
        unsigned B;
        Activation act;
        bool overlap;
    };
    for (const Case& c : {Case{"cnn", 64, Activation::Relu, true}, Case{"cnn", 64, Activation::Relu, false},
                          Case{"cnn", 64, Activation::Gelu, true},
                          Case{"conv8,pool,conv16,pool,conv16,fc10", 5, Activation::Relu, true}}) {
        CAPTURE(std::string(c.spec));
        CAPTURE(to_string(c.act));
        CAPTURE(c.overlap);
        const Model m = parse_model(c.spec);
        TrainConfig cfg;
        cfg.activation = c.act;
        cfg.overlap = c.overlap;
        cfg.kernels = {Design::Tc, KernelSource::Ptx};
        cfg.pool_bwd_in_conv = true;  // off by default (measured 0.5 us slower a step)
        // The listing names the fused launch: the test runs the path it means to.
        CHECK(cnn_step_kernels(m, ConvKernels::Tc, c.B, c.act, true).find("tc_conv_bwd_data+pool") != std::string::npos);
        const PoolFuseSteps fused = pool_fuse_steps(KernelSource::Ptx, m, cfg, c.B);
        const PoolFuseSteps twin = pool_fuse_steps(KernelSource::Reference, m, cfg, c.B);
        cfg.pool_bwd_in_conv = false;
        const PoolFuseSteps apart = pool_fuse_steps(KernelSource::Ptx, m, cfg, c.B);
        CHECK(same_floats(fused.first_grad, apart.first_grad));
        CHECK(same_floats(fused.params, apart.params));
        CHECK(same_floats(fused.logits, apart.logits));
        CHECK(same_floats(fused.first_grad, twin.first_grad));
        CHECK(same_floats(fused.params, twin.params));
        CHECK(same_floats(fused.logits, twin.logits));
    }
}
