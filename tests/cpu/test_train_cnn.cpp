// The CNN trainer's checks that need no GPU (host/train_cnn.hpp): what it refuses, which kernels
// it loads. Its device behaviour is in tests/gpu/test_cnn_train.cpp.
#include "error.hpp"
#include "model.hpp"
#include "train_cnn.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace ptxlab;

TEST_CASE("train_cnn: the flags it takes and those it refuses, with the reason") {
    CnnTrainConfig c;
    c.model = parse_model("cnn");
    CHECK_NOTHROW(c.validate_flags());
    c.base.activation = Activation::Tanh;
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("trains with --activation relu only"), InputError);
    c.base.activation = Activation::Relu;
    c.base.batch = 0;
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("--batch must be at least 1"), InputError);
    c.base.batch = 64;
    c.chunk = 0;
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("chunk must be at least 1"), InputError);
    c.chunk = 32;
    c.model = parse_model("conv4,pool,fc10", Shape3{1, 8, 8});
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("takes 1x8x8 images; MNIST's are 1x28x28"), InputError);
    // Every conv and pool layer of a 28x28 model fits the kernels, 5x5 included.
    c.model = parse_model("conv16k5,pool,conv32k5,pool,conv8k1,fc64,fc10");
    CHECK_NOTHROW(c.validate_flags());
}

TEST_CASE("train_cnn: the kernels a run loads") {
    OptimConfig o;
    auto has = [](const std::vector<std::string>& v, const char* e) { return std::find(v.begin(), v.end(), e) != v.end(); };
    const auto v = cnn_training_entries(o);
    for (const char* e : {"conv_fwd", "conv_bwd_data", "conv_bwd_weights", "pool_fwd", "pool_bwd", "fused_output", "gather",
                          "optim_sgd"})
        CHECK(has(v, e));
    o.kind = OptimKind::Adam;
    CHECK(has(cnn_training_entries(o), "optim_adam"));
    CHECK(kCnnDefaultLr == 0.05f);
}
