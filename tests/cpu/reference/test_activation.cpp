// The hidden activations in the kernels (--activation): their codes, the float64 bounds
// that `verify` holds the kernels to, checked against a CPU emulation of the kernels'
// instruction sequences (recipe.hpp), verify's shapes with an activation code, and the
// checkpoint's record of it.
#include "../../helpers.hpp"
#include "recipe.hpp"
#include "reference.hpp"
#include "safetensors.hpp"
#include "train.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

// The kernels' sequences (recipe.hpp, ptx/forward.ptx header) in float on the CPU: std::fma is
// fma.rn, float * / + - round to nearest, and std::exp2f is within 1 ulp of 2^w, inside
// ex2.approx.f32's stated 2 ulp (so the bounds must hold for it too).
float ex2(float w) { return std::exp2f(w); }
float gauss_pdf(float z) { return ex2((z * z) * -0.72134751081466674805f) * 0.39894229173660278320f; }
float gauss_cdf(float z, float phi, bool wrong = false) {
    const float t = 1.0f / std::fma(std::fabs(z), 0.23164190351963043213f, 1.0f);
    float p = 1.33027446269989013672f;
    p = std::fma(p, t, -1.82125592231750488281f);
    p = std::fma(p, t, 1.78147792816162109375f);
    p = std::fma(p, t, wrong ? 0.35656377673149108887f : -0.35656377673149108887f);  // wrong: b2's sign
    p = std::fma(p, t, 0.31938153505325317383f);
    p = p * t;
    const float q = phi * p;
    return z > 0.0f ? 1.0f - q : q;
}
float k_activate(float z, unsigned act, bool wrong = false) {
    switch (act) {
        case kActLeakyRelu: return z > 0.0f ? z : z * 0.00999999977648258209f;
        case kActTanh: return 1.0f - 2.0f / (ex2(z * 2.88539004325866699219f) + 1.0f);
        case kActSigmoid: return 1.0f / (ex2(z * -1.44269502162933349609f) + 1.0f);
        case kActGelu: return z * gauss_cdf(z, gauss_pdf(z), wrong);
        default: return std::max(z, 0.0f);
    }
}
float k_grad(float z, float a, unsigned act, bool wrong = false) {
    switch (act) {
        case kActLeakyRelu: return a > 0.0f ? 1.0f : 0.00999999977648258209f;
        case kActTanh: return std::fma(-a, a, wrong ? -1.0f : 1.0f);  // wrong: a^2 - 1
        case kActSigmoid: return a * (1.0f - a);
        case kActGelu: {
            const float phi = gauss_pdf(z);
            return std::fma(z, phi, gauss_cdf(z, phi));
        }
        default: return a > 0.0f ? 1.0f : 0.0f;
    }
}

// Pre-activations: a fine grid over [-12, 12], the far tails, and values near 0.
std::vector<float> test_points() {
    std::vector<float> v;
    for (int i = -2400; i <= 2400; ++i) v.push_back(float(i) / 200.0f);
    for (float z : {-100.0f, -60.0f, -44.5f, -30.0f, 30.0f, 44.5f, 60.0f, 100.0f, 1e-30f, -1e-30f, 3e-8f, -3e-8f})
        v.push_back(z);
    return v;
}

}  // namespace

TEST_CASE("activation: the kernels' codes, and back") {
    CHECK(act_code(Activation::Relu) == 0);
    CHECK(act_code(Activation::LeakyRelu) == 1);
    CHECK(act_code(Activation::Tanh) == 2);
    CHECK(act_code(Activation::Sigmoid) == 3);
    CHECK(act_code(Activation::Gelu) == 4);
    for (const char* n : {"relu", "leaky-relu", "tanh", "sigmoid", "gelu"}) {
        const Activation a = parse_activation(n);
        CHECK(activation_of_code(act_code(a)) == a);
    }
    CHECK_THROWS_WITH_AS(activation_of_code(5), doctest::Contains("activation code 5"), InputError);
}

TEST_CASE("activation: the kernels' sequences stay within the float64 bounds verify uses, and the bounds are tight") {
    for (unsigned act = kActRelu; act <= kActGelu; ++act) {
        CAPTURE(act);
        const Activation f = activation_of_code(act);
        double worst = 0.0, worst_g = 0.0, largest_bound = 0.0;
        for (float z : test_points()) {
            CAPTURE(z);
            // The forward value against activate(z) for an exact z (ez = 0).
            const ActBound b = act_bounded(act, z, 0.0);
            const float a = k_activate(z, act);
            CHECK(b.a == activate(f, z));
            REQUIRE(std::isfinite(b.ea));
            CHECK(std::fabs(double(a) - b.a) <= b.ea);
            worst = std::max(worst, std::fabs(double(a) - b.a) / std::max(b.ea, 1e-300));
            if (std::fabs(z) <= 12.0f) largest_bound = std::max(largest_bound, b.ea);
            // The derivative from the float a (its bound ea) or z, against activate_grad(z).
            double g = 0.0, eg = 0.0;
            act_grad_bounded(act, z, 0.0, b.a, b.ea, g, eg);
            if ((act == kActRelu || act == kActLeakyRelu) && z == 0.0f) continue;  // the kink
            CHECK(g == doctest::Approx(activate_grad(f, z)).epsilon(1e-12).scale(1.0));
            const float gk = k_grad(z, a, act);
            CHECK(std::fabs(double(gk) - g) <= eg);
            worst_g = std::max(worst_g, std::fabs(double(gk) - g) / std::max(eg, 1e-300));
        }
        MESSAGE("act ", act, ": worst |error| / bound ", worst, " (a), ", worst_g, " (f')");
        // Not vacuous: within |z| <= 12 every bound is below 3e-6 (a few float ulps of 1, plus
        // GELU's 7.5e-8 times |z|).
        CHECK(largest_bound < 3e-6);
    }
}

TEST_CASE("activation: the bounds propagate the pre-activation's error and flag the kinks") {
    // tanh is 1-Lipschitz: an input bound of 1e-3 widens the output bound by about that.
    const ActBound t0 = act_bounded(kActTanh, 0.3, 0.0), t1 = act_bounded(kActTanh, 0.3, 1e-3);
    CHECK(t1.ea >= t0.ea + 1e-3 * 0.999);
    CHECK(t1.ea <= t0.ea + 1.01e-3);
    // Sigmoid is 1/4-Lipschitz, GELU 1.13.
    CHECK(act_bounded(kActSigmoid, 0.3, 1e-3).ea >= 0.25e-3);
    CHECK(act_bounded(kActGelu, 0.3, 1e-3).ea >= 1.13e-3);
    // Leaky-relu and ReLU flag a pre-activation within its bound of 0; the smooth ones never do.
    CHECK(act_bounded(kActLeakyRelu, 1e-6, 2e-6).kink);
    CHECK_FALSE(act_bounded(kActLeakyRelu, 1e-6, 5e-7).kink);
    CHECK(act_bounded(kActRelu, -1e-6, 2e-6).kink);
    for (unsigned act : {kActTanh, kActSigmoid, kActGelu}) CHECK_FALSE(act_bounded(act, 0.0, 1.0).kink);
}

TEST_CASE("activation: a wrong sequence falls outside the bounds") {
    // GELU with b2's sign flipped, and tanh's derivative as a^2 - 1: each misses its bound
    // somewhere on the test points (so the bounds can catch a wrong kernel).
    unsigned gelu_out = 0, tanh_out = 0;
    for (float z : test_points()) {
        const ActBound g = act_bounded(kActGelu, z, 0.0);
        gelu_out += std::fabs(double(k_activate(z, kActGelu, true)) - g.a) > g.ea;
        const ActBound t = act_bounded(kActTanh, z, 0.0);
        double d = 0.0, ed = 0.0;
        act_grad_bounded(kActTanh, z, 0.0, t.a, t.ea, d, ed);
        tanh_out += std::fabs(double(k_grad(z, k_activate(z, kActTanh), kActTanh, true)) - d) > ed;
    }
    CHECK(gelu_out > 1000);
    CHECK(tanh_out > 1000);
}

TEST_CASE("activation: verify's shapes carry the activation code, and every code runs by default") {
    CHECK(shape_names("forward2") == "B,I,H,O,act");
    CHECK(shape_names("grad3") == "B,I,H1,H2,O,loss,act");
    CHECK(shape_names("fused_forward") == "B,I,H,act");
    CHECK(shape_names("fused_output") == "B,H,O,loss,act");
    CHECK_NOTHROW(validate_case({"grad2", {8, 10, 5, 3, 1, 4}}));
    CHECK_THROWS_WITH_AS(validate_case({"grad2", {8, 10, 5, 3, 1, 5}}), doctest::Contains("activation code"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"fused_output", {8, 5, 3, 2, 0}}), doctest::Contains("loss code"),
                         InputError);
    CHECK(shape_text({"fused_forward", {64, 784, 128, 4}}) == "B=64 I=784 H=128 act=4 (gelu)");
    // Each kernel with an activation code: every code in the default set, the quick set has
    // tanh and gelu.
    for (const char* e : {"forward2", "forward3", "grad2", "grad3", "fused_forward", "fused_output"}) {
        CAPTURE(e);
        std::vector<unsigned> seen(5, 0), quick(5, 0);
        for (const auto& c : default_cases())
            if (c.entry == e) ++seen.at(c.shape.back());
        for (const auto& c : quick_cases())
            if (c.entry == e) ++quick.at(c.shape.back());
        for (unsigned act = 0; act < 5; ++act) CHECK(seen[act] > 0);
        CHECK(quick[kActTanh] > 0);
        CHECK(quick[kActGelu] > 0);
    }
    // The kernels that form output deltas: every (loss code, activation) pair in the default
    // set; the per-sample gradients at batch 1000 (gigabytes a case) with ReLU only.
    for (const char* e : {"grad2", "grad3", "fused_output"}) {
        CAPTURE(e);
        std::set<std::pair<unsigned, unsigned>> pairs;
        for (const auto& c : default_cases()) {
            if (c.entry != e) continue;
            const unsigned loss = c.shape[c.shape.size() - 2], act = c.shape.back();
            pairs.insert({loss, act});
            if (std::string(e) != "fused_output" && c.shape[0] >= 1000) CHECK(act == kActRelu);
        }
        CHECK(pairs.size() == 10);
    }
}

TEST_CASE("activation: a checkpoint records it, and a resume with another activation is refused") {
    TempDir t;
    TrainConfig cfg;
    cfg.layers = {784, 16, 10};
    cfg.activation = Activation::Gelu;
    TrainResult r;
    r.model = init_params(cfg.layers, Init::Torch, 3);
    r.end.model = r.model;
    r.end.state1.assign(784 * 16 + 16 + 16 * 10 + 10, 0.5f);
    save_training_checkpoint(t.file("g.safetensors"), cfg, r);
    CHECK(load_checkpoint(t.file("g.safetensors")).metadata.at("train.activation") == "gelu");
    CHECK_NOTHROW(load_training_checkpoint(t.file("g.safetensors"), cfg));
    TrainConfig relu = cfg;
    relu.activation = Activation::Relu;
    CHECK_THROWS_WITH_AS(load_training_checkpoint(t.file("g.safetensors"), relu),
                         doctest::Contains("was trained with activation gelu, this run asks for activation relu"),
                         InputError);
    // A checkpoint written before --activation (no entry) was trained with ReLU.
    Checkpoint ck = load_checkpoint(t.file("g.safetensors"));
    ck.metadata.erase("train.activation");
    ExtraTensors extra{{"optimizer.state1", r.end.state1}};
    save_safetensors(t.file("old.safetensors"), ck.net, ck.metadata, extra);
    CHECK_NOTHROW(load_training_checkpoint(t.file("old.safetensors"), relu));
    CHECK_THROWS_WITH_AS(load_training_checkpoint(t.file("old.safetensors"), cfg),
                         doctest::Contains("was trained with activation relu, this run asks for activation gelu"),
                         InputError);
}
