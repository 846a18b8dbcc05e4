// The training recipe's float64 reference (recipe.hpp): names, initialisation, losses,
// optimizers, schedules, activations and the any-depth training step, each against values
// computed by hand (the arithmetic is in the comments).
#include "error.hpp"
#include "recipe.hpp"
#include "reference.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

using namespace ptxlab;

namespace {

Net64 to_net64(const NetParams& p) {
    Net64 n;
    n.sizes = p.sizes;
    for (const auto& w : p.W) n.W.emplace_back(w.begin(), w.end());
    for (const auto& b : p.b) n.b.emplace_back(b.begin(), b.end());
    return n;
}

void check_all(const std::vector<double>& got, const std::vector<double>& want, double eps = 1e-12) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(eps));
}

// Two optimizer steps on p = [1, -2] with gradients g1 = [0.5, -1], g2 = [-0.25, 2], lr 0.5;
// returns p after each step.
std::vector<std::vector<double>> two_steps(const OptimConfig& o) {
    std::vector<double> p = {1.0, -2.0}, m(2, 0.0), v(2, 0.0);
    const std::vector<std::vector<double>> g = {{0.5, -1.0}, {-0.25, 2.0}};
    std::vector<std::vector<double>> out;
    for (uint64_t t = 1; t <= 2; ++t) {
        optim_step(o, 0.5, t, p.data(), g[t - 1].data(), m.data(), v.data(), 2);
        out.push_back(p);
    }
    return out;
}

// Constants chosen exact in binary so that the hand arithmetic below is exact.
OptimConfig exact_config(OptimKind k) {
    OptimConfig o;
    o.kind = k;
    o.momentum = 0.5f;
    o.weight_decay = 0.25f;
    o.beta1 = 0.5f;
    o.beta2 = 0.75f;
    o.eps = 0.25f;
    o.alpha = 0.5f;
    return o;
}

}  // namespace

// ---- Names ---------------------------------------------------------------------------

TEST_CASE("recipe: every name parses and prints back, and unknown names are refused, naming the name") {
    for (const char* n : {"torch", "he-uniform", "he-normal", "xavier", "notebook"}) CHECK(to_string(parse_init(n)) == n);
    for (const char* n : {"ce", "mse", "half-sse"}) CHECK(to_string(parse_loss(n)) == n);
    for (const char* n : {"sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop"})
        CHECK(to_string(parse_optimizer(n)) == n);
    for (const char* n : {"const", "cosine", "onecycle", "step"}) CHECK(to_string(parse_schedule(n)) == n);
    for (const char* n : {"relu", "leaky-relu", "tanh", "sigmoid", "gelu"}) CHECK(to_string(parse_activation(n)) == n);
    // Each name maps to its own value.
    CHECK(parse_optimizer("momentum") == OptimKind::Momentum);
    CHECK(parse_optimizer("adamw") == OptimKind::AdamW);
    CHECK(parse_schedule("onecycle") == ScheduleKind::OneCycle);
    CHECK(parse_activation("leaky-relu") == Activation::LeakyRelu);
    CHECK(parse_loss("half-sse") == Loss::HalfSse);
    CHECK(parse_init("he-normal") == Init::HeNormal);

    CHECK_THROWS_WITH_AS(parse_init("kaiming"), doctest::Contains("'kaiming'"), InputError);
    CHECK_THROWS_WITH_AS(parse_loss("nll"), doctest::Contains("'nll'"), InputError);
    CHECK_THROWS_WITH_AS(parse_optimizer("adagrad"), doctest::Contains("'adagrad'"), InputError);
    CHECK_THROWS_WITH_AS(parse_optimizer("Adam"), doctest::Contains("'Adam'"), InputError);  // case matters
    CHECK_THROWS_WITH_AS(parse_schedule("linear"), doctest::Contains("'linear'"), InputError);
    CHECK_THROWS_WITH_AS(parse_activation("swish"), doctest::Contains("'swish'"), InputError);
    CHECK_THROWS_AS(parse_activation(""), InputError);
}

// ---- Initialisation ------------------------------------------------------------------

TEST_CASE("recipe: init_params keeps each init's bounds, zero biases where it should, and follows the seed") {
    const std::vector<unsigned> sizes = {64, 32, 10};
    auto max_abs = [](const std::vector<float>& v) {
        float m = 0;
        for (float x : v) m = std::max(m, std::fabs(x));
        return m;
    };
    auto all_zero = [](const std::vector<float>& v) { return std::all_of(v.begin(), v.end(), [](float x) { return x == 0; }); };
    for (Init init : {Init::Torch, Init::HeUniform, Init::HeNormal, Init::Xavier, Init::Notebook}) {
        CAPTURE(to_string(init));
        NetParams p = init_params(sizes, init, 7);
        REQUIRE(p.sizes == sizes);
        REQUIRE(p.W.size() == 2);
        for (size_t l = 0; l < 2; ++l) {
            const double fan_in = sizes[l], fan_out = sizes[l + 1];
            REQUIRE(p.W[l].size() == sizes[l] * sizes[l + 1]);
            REQUIRE(p.b[l].size() == sizes[l + 1]);
            CHECK(!all_zero(p.W[l]));
            double bound = 0;  // uniform inits: every |w| <= bound, and the largest is near it
            switch (init) {
                case Init::Torch: bound = 1.0 / std::sqrt(fan_in); break;        // layer 0: 1/8, layer 1: 1/sqrt(32)
                case Init::HeUniform: bound = std::sqrt(6.0 / fan_in); break;    // sqrt(6/64) = 0.306
                case Init::Xavier: bound = std::sqrt(6.0 / (fan_in + fan_out)); break;  // sqrt(6/96) = 0.25
                default: break;
            }
            if (bound > 0) {
                // 2048 or 320 draws from U(-bound, bound): the largest |w| is below 0.95 bound with
                // probability 0.95^320 < 1e-7.
                CHECK(max_abs(p.W[l]) <= bound * (1 + 1e-6));
                CHECK(max_abs(p.W[l]) >= 0.95 * bound);
            }
            if (init == Init::Torch) {
                CHECK(max_abs(p.b[l]) <= bound * (1 + 1e-6));
                CHECK(!all_zero(p.b[l]));
            } else if (init == Init::Notebook) {
                CHECK(!all_zero(p.b[l]));
                CHECK(max_abs(p.b[l]) < 0.06);  // N(0, 0.01^2): 6 sigma
                CHECK(max_abs(p.W[l]) < 0.06);
            } else {
                CHECK(all_zero(p.b[l]));
            }
        }
        // Same seed: identical; another seed: different.
        NetParams q = init_params(sizes, init, 7), r = init_params(sizes, init, 8);
        CHECK(q.W == p.W);
        CHECK(q.b == p.b);
        CHECK(r.W != p.W);
    }
    // The normal inits' spread: the sample standard deviation of 20000 draws is within 3 % of
    // sqrt(2/200) = 0.1 (He-normal) and 0.01 (notebook) (its relative sd is 1/sqrt(2n) = 0.5 %).
    auto sd = [](const std::vector<float>& v) {
        double s = 0, s2 = 0;
        for (float x : v) s += x, s2 += double(x) * x;
        const double mean = s / v.size();
        return std::sqrt(s2 / v.size() - mean * mean);
    };
    CHECK(sd(init_params({200, 100}, Init::HeNormal, 3).W[0]) == doctest::Approx(0.1).epsilon(0.03));
    CHECK(sd(init_params({200, 100}, Init::Notebook, 3).W[0]) == doctest::Approx(0.01).epsilon(0.03));
}

// ---- Losses --------------------------------------------------------------------------

TEST_CASE("recipe: each loss and its gradient on a 3-output example") {
    // y = [0, ln 2, ln 5]: exp(y) = [1, 2, 5], softmax = [1/8, 2/8, 5/8].
    const double y[3] = {0.0, std::log(2.0), std::log(5.0)};
    const double t[3] = {0, 1, 0};
    double dy[3];
    // Ce: -ln(2/8) = ln 4; gradient softmax - t = [1/8, 2/8 - 1, 5/8].
    CHECK(loss_value(Loss::Ce, y, t, 3) == doctest::Approx(std::log(4.0)).epsilon(1e-14));
    loss_grad(Loss::Ce, y, t, 3, dy);
    check_all({dy[0], dy[1], dy[2]}, {0.125, -0.75, 0.625}, 1e-14);
    // The max is subtracted: y + 1000 gives the same (exp(1000) alone would overflow).
    const double yb[3] = {1000.0, 1000.0 + std::log(2.0), 1000.0 + std::log(5.0)};
    CHECK(loss_value(Loss::Ce, yb, t, 3) == doctest::Approx(std::log(4.0)).epsilon(1e-12));
    loss_grad(Loss::Ce, yb, t, 3, dy);
    check_all({dy[0], dy[1], dy[2]}, {0.125, -0.75, 0.625}, 1e-12);
    // Soft target t = [1/2, 1/2, 0]: 0.5 ln 8 + 0.5 ln 4 = 2.5 ln 2; gradient [1/8 - 1/2, 2/8 - 1/2, 5/8].
    const double ts[3] = {0.5, 0.5, 0};
    CHECK(loss_value(Loss::Ce, y, ts, 3) == doctest::Approx(2.5 * std::log(2.0)).epsilon(1e-14));
    loss_grad(Loss::Ce, y, ts, 3, dy);
    check_all({dy[0], dy[1], dy[2]}, {-0.375, -0.25, 0.625}, 1e-14);

    // y = [1, 2, 3], t = [0, 1, 0]: y - t = [1, 1, 3], sum of squares 11.
    const double z[3] = {1, 2, 3};
    // Mse: 11 / 3; gradient 2 (y - t) / 3 = [2/3, 2/3, 2].
    CHECK(loss_value(Loss::Mse, z, t, 3) == doctest::Approx(11.0 / 3.0).epsilon(1e-15));
    loss_grad(Loss::Mse, z, t, 3, dy);
    check_all({dy[0], dy[1], dy[2]}, {2.0 / 3.0, 2.0 / 3.0, 2.0}, 1e-15);
    // HalfSse: 11 / 2; gradient y - t = [1, 1, 3].
    CHECK(loss_value(Loss::HalfSse, z, t, 3) == doctest::Approx(5.5).epsilon(1e-15));
    loss_grad(Loss::HalfSse, z, t, 3, dy);
    check_all({dy[0], dy[1], dy[2]}, {1.0, 1.0, 3.0}, 1e-15);

    // Every gradient against a central difference of the value (targets summing to 1).
    const double w[3] = {0.3, -1.2, 0.8}, tw[3] = {0.2, 0.7, 0.1};
    for (Loss l : {Loss::Ce, Loss::Mse, Loss::HalfSse}) {
        CAPTURE(to_string(l));
        loss_grad(l, w, tw, 3, dy);
        for (unsigned i = 0; i < 3; ++i) {
            double wp[3] = {w[0], w[1], w[2]}, wm[3] = {w[0], w[1], w[2]};
            const double h = 1e-5;
            wp[i] += h;
            wm[i] -= h;
            const double fd = (loss_value(l, wp, tw, 3) - loss_value(l, wm, tw, 3)) / (2 * h);
            CHECK(dy[i] == doctest::Approx(fd).epsilon(1e-8));
        }
    }
}

// ---- Optimizer -----------------------------------------------------------------------

TEST_CASE("recipe: the optimizer's state buffers, description and checks") {
    OptimConfig o;
    CHECK(o.describe() == "nesterov (momentum 0.9)");
    o.kind = OptimKind::Adam;
    CHECK(o.describe() == "adam (betas 0.9, 0.999, eps 1e-08)");
    o.kind = OptimKind::AdamW;
    o.weight_decay = 0.01f;
    CHECK(o.describe().find("adamw") == 0);
    CHECK(o.describe().find("decoupled weight decay 0.01") != std::string::npos);
    const std::pair<OptimKind, unsigned> buffers[] = {{OptimKind::Sgd, 0},  {OptimKind::Momentum, 1},
                                                      {OptimKind::Nesterov, 1}, {OptimKind::Adam, 2},
                                                      {OptimKind::AdamW, 2}, {OptimKind::RmsProp, 1},
                                                      {OptimKind::NAdam, 2}};
    for (auto [k, n] : buffers) {
        o.kind = k;
        CHECK(o.state_buffers() == n);
    }

    OptimConfig ok;
    CHECK_NOTHROW(ok.validate());
    auto refused = [](auto edit, const char* flag, const char* value) {
        OptimConfig c;
        edit(c);
        CAPTURE(flag);
        CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(flag), InputError);
        CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains(value), InputError);
    };
    refused([](OptimConfig& c) { c.momentum = 1.0f; }, "--momentum", "1");
    refused([](OptimConfig& c) { c.momentum = -0.5f; }, "--momentum", "-0.5");
    refused([](OptimConfig& c) { c.momentum = 0.0f; }, "--momentum", "0");  // nesterov needs momentum > 0
    refused([](OptimConfig& c) { c.kind = OptimKind::Momentum, c.momentum = 0.0f; }, "--momentum", "0");
    refused([](OptimConfig& c) { c.weight_decay = -0.25f; }, "--weight-decay", "-0.25");
    refused([](OptimConfig& c) { c.beta1 = 1.0f; }, "--beta1", "1");
    refused([](OptimConfig& c) { c.beta2 = 1.5f; }, "--beta2", "1.5");
    refused([](OptimConfig& c) { c.beta2 = NAN; }, "--beta2", "nan");
    refused([](OptimConfig& c) { c.eps = 0.0f; }, "--eps", "0");
    refused([](OptimConfig& c) { c.alpha = 1.0f; }, "--alpha", "1");
    // Plain SGD takes momentum 0; the ends of the ranges that are allowed.
    OptimConfig sgd;
    sgd.kind = OptimKind::Sgd;
    sgd.momentum = 0.0f;
    sgd.beta1 = 0.0f;
    sgd.alpha = 0.0f;
    CHECK_NOTHROW(sgd.validate());
}

TEST_CASE("recipe: step_hyper for Adam at t = 1 and t = 2") {
    // lr 0.5, b1 0.5, b2 0.75, wd 0.25 (all exact):
    //   t = 1: step_size 0.5 / (1 - 0.5) = 1, bc2_sqrt sqrt(1 - 0.75) = 0.5, decay 1 - 0.5 * 0.25 = 0.875.
    //   t = 2: step_size 0.5 / (1 - 0.25) = 2/3, bc2_sqrt sqrt(1 - 0.5625) = sqrt(0.4375), decay 0.875.
    const OptimConfig o = exact_config(OptimKind::Adam);
    StepHyper h1 = step_hyper(o, 0.5, 1);
    CHECK(h1.lr == 0.5f);
    CHECK(h1.step_size == 1.0f);
    CHECK(h1.bc2_sqrt == 0.5f);
    CHECK(h1.decay == 0.875f);
    StepHyper h2 = step_hyper(o, 0.5, 2);
    CHECK(h2.lr == 0.5f);
    CHECK(h2.step_size == static_cast<float>(2.0 / 3.0));  // rounded once from double
    CHECK(h2.bc2_sqrt == static_cast<float>(std::sqrt(0.4375)));
    CHECK(h2.decay == 0.875f);
    // PyTorch's defaults, lr 1e-3, t = 1: 0.9f = 0.89999997615814208984375, so
    // step_size = 1e-3 / 0.10000002384185791 = 0.0099999976158148; 0.999f = 0.999000012874603271484375,
    // bc2_sqrt = sqrt(0.000999987125396728515625) = 0.031622573035677.
    OptimConfig d;
    d.kind = OptimKind::Adam;
    StepHyper hd = step_hyper(d, 1e-3, 1);
    CHECK(hd.lr == 1e-3f);
    CHECK(hd.step_size == static_cast<float>(0.0099999976158148));
    CHECK(hd.bc2_sqrt == static_cast<float>(0.031622573035677));
    CHECK(hd.decay == 1.0f);  // no weight decay
    // t = 2: 1 - 0.9f^2 = 0.19000004291534424, step_size = 1e-3 / that = 0.005263156705946427, whose
    // nearest float is 0.005263156723231077; dividing the rounded float(lr) by the rounded
    // float(1 - b1^2) would give 0.0052631571888923645 (one ulp off): each field is rounded once.
    CHECK(step_hyper(d, 1e-3, 2).step_size == 0.005263156723231077f);
    CHECK(step_hyper(d, 1e-3, 2).step_size != 0.0052631571888923645f);
    CHECK_THROWS(step_hyper(d, 1e-3, 0));  // t is 1-based
}

TEST_CASE("recipe: each optimizer over two steps on two parameters") {
    // p = [1, -2], g1 = [0.5, -1], g2 = [-0.25, 2], lr 0.5, wd 0.25, mu 0.5, b1 0.5, b2 0.75,
    // eps 0.25, alpha 0.5. g' = g + wd p except for AdamW.
    SUBCASE("sgd") {
        // t1: g' = [0.5 + 0.25, -1 - 0.5] = [0.75, -1.5]; p = [1 - 0.375, -2 + 0.75] = [0.625, -1.25]
        // t2: g' = [-0.25 + 0.15625, 2 - 0.3125] = [-0.09375, 1.6875];
        //     p = [0.625 + 0.046875, -1.25 - 0.84375] = [0.671875, -2.09375]
        auto r = two_steps(exact_config(OptimKind::Sgd));
        check_all(r[0], {0.625, -1.25});
        check_all(r[1], {0.671875, -2.09375});
    }
    SUBCASE("momentum") {
        // t1: g' = [0.75, -1.5]; m = g'; p = [1 - 0.375, -2 + 0.75] = [0.625, -1.25]
        // t2: g' = [-0.09375, 1.6875]; m = [0.375 - 0.09375, -0.75 + 1.6875] = [0.28125, 0.9375];
        //     p = [0.625 - 0.140625, -1.25 - 0.46875] = [0.484375, -1.71875]
        auto r = two_steps(exact_config(OptimKind::Momentum));
        check_all(r[0], {0.625, -1.25});
        check_all(r[1], {0.484375, -1.71875});
    }
    SUBCASE("nesterov") {
        // t1: g' = [0.75, -1.5]; m = g'; p -= 0.5 (g' + 0.5 m) = 0.5 * 1.5 g': p = [1 - 0.5625, -2 + 1.125] = [0.4375, -0.875]
        // t2: g' = [-0.25 + 0.109375, 2 - 0.21875] = [-0.140625, 1.78125];
        //     m = [0.375 - 0.140625, -0.75 + 1.78125] = [0.234375, 1.03125];
        //     g' + 0.5 m = [-0.0234375, 2.296875]; p = [0.4375 + 0.01171875, -0.875 - 1.1484375] = [0.44921875, -2.0234375]
        auto r = two_steps(exact_config(OptimKind::Nesterov));
        check_all(r[0], {0.4375, -0.875});
        check_all(r[1], {0.44921875, -2.0234375});
    }
    SUBCASE("adam") {
        // t1: bc1 = 0.5, sqrt(bc2) = 0.5, step size lr / bc1 = 1.
        //   p0: g' = 0.75, m = 0.5 * 0.75 = 0.375, v = 0.25 * 0.5625 = 0.140625, sqrt(v) = 0.375;
        //       p = 1 - 0.375 / (0.375 / 0.5 + 0.25) = 1 - 0.375 = 0.625
        //   p1: g' = -1.5, m = -0.75, v = 0.5625, sqrt(v) = 0.75; p = -2 + 0.75 / (1.5 + 0.25) = -2 + 3/7
        // t2: bc1 = 0.75 (step size 2/3), bc2 = 0.4375.
        //   p0: g' = -0.25 + 0.25 * 0.625 = -0.09375; m = 0.375 + 0.5 (-0.09375 - 0.375) = 0.140625;
        //       v = 0.75 * 0.140625 + 0.25 * 0.0087890625 = 0.107666015625;
        //       p = 0.625 - (2/3) 0.140625 / (sqrt(0.107666015625) / sqrt(0.4375) + 0.25)
        //         = 0.49934295957892216 (python3, float64)
        //   p1: g' = 2 + 0.25 (-2 + 3/7) = 1.6071428571428572; m = -0.75 + 0.5 (g' + 0.75) = 0.4285714285714286;
        //       v = 0.75 * 0.5625 + 0.25 g'^2 = 1.0676020408163267;
        //       p = (-2 + 3/7) - (2/3) m / (sqrt(v) / sqrt(0.4375) + 0.25) = -1.72909669602488 (python3)
        auto r = two_steps(exact_config(OptimKind::Adam));
        check_all(r[0], {0.625, -2.0 + 3.0 / 7.0});
        const double p0 = 0.625 - (2.0 / 3.0) * 0.140625 / (std::sqrt(0.107666015625) / std::sqrt(0.4375) + 0.25);
        CHECK(p0 == doctest::Approx(0.49934295957892216).epsilon(1e-14));
        check_all(r[1], {0.49934295957892216, -1.72909669602488});
    }
    SUBCASE("adamw") {
        // Decay first, p *= 1 - 0.5 * 0.25 = 0.875, and the raw g in the moments.
        // t1: p0: 0.875; g = 0.5, m = 0.25, v = 0.0625, sqrt(v) = 0.25;
        //         p = 0.875 - 1 * 0.25 / (0.25 / 0.5 + 0.25) = 0.875 - 1/3 = 0.5416666666666667
        //     p1: -1.75; g = -1, m = -0.5, v = 0.25, sqrt(v) = 0.5; p = -1.75 + 0.5 / (1 + 0.25) = -1.35
        // t2: p0: 0.875 * 0.5416666666666667 = 0.4739583333333333; g = -0.25, m = 0.25 + 0.5 (-0.5) = 0;
        //         so p = 0.4739583333333333 (no Adam move)
        //     p1: -1.35 * 0.875 = -1.18125; g = 2, m = -0.5 + 0.5 * 2.5 = 0.75, v = 0.1875 + 1 = 1.1875;
        //         p = -1.18125 - (2/3) 0.75 / (sqrt(1.1875) / sqrt(0.4375) + 0.25) = -1.4447533695534223 (python3)
        auto r = two_steps(exact_config(OptimKind::AdamW));
        check_all(r[0], {0.875 - 1.0 / 3.0, -1.35});
        check_all(r[1], {0.875 * (0.875 - 1.0 / 3.0), -1.4447533695534223});
    }
    SUBCASE("rmsprop") {
        // t1: p0: g' = 0.75, v = 0.5 * 0.5625 = 0.28125; p = 1 - 0.5 * 0.75 / (sqrt(0.28125) + 0.25) = 0.5194341384744389
        //     p1: g' = -1.5, v = 1.125; p = -2 + 0.75 / (sqrt(1.125) + 0.25) = -1.4277692905083614
        // t2: p0: g' = -0.25 + 0.25 * 0.5194341384744389 = -0.12014146538139028; v = 0.140625 + 0.5 g'^2
        //         = 0.1478419858519939; p = 0.5194341384744389 - 0.5 g' / (sqrt(v) + 0.25) = 0.6141079272618624
        //     p1: g' = 2 + 0.25 * -1.4277692905083614 = 1.6430576773729095; v = 0.5625 + 0.5 g'^2 = 1.91231926558703;
        //         p = -1.4277692905083614 - 0.5 g' / (sqrt(v) + 0.25) = -1.930889985340524 (python3)
        auto r = two_steps(exact_config(OptimKind::RmsProp));
        check_all(r[0], {1.0 - 0.375 / (std::sqrt(0.28125) + 0.25), -2.0 + 0.75 / (std::sqrt(1.125) + 0.25)});
        check_all(r[0], {0.5194341384744389, -1.4277692905083614});
        check_all(r[1], {0.6141079272618624, -1.930889985340524});
    }
}

// ---- Schedule ------------------------------------------------------------------------

TEST_CASE("recipe: schedule_lr at the ends and at the warm-up boundary") {
    // S = 10, warmup 0.2: W = 2 warm-up steps, lr(0) = 0, lr(1) = 1/2, lr(2) = peak.
    ScheduleConfig c;
    c.warmup = 0.2;
    for (ScheduleKind k : {ScheduleKind::Const, ScheduleKind::Cosine, ScheduleKind::OneCycle, ScheduleKind::Step}) {
        CAPTURE(to_string(k));
        c.kind = k;
        c.step_every = 4;
        c.gamma = 0.5;
        CHECK(schedule_lr(c, 2.0, 0, 10) == 0.0);
        CHECK(schedule_lr(c, 2.0, 1, 10) == doctest::Approx(1.0).epsilon(1e-15));
        CHECK(schedule_lr(c, 2.0, 2, 10) == doctest::Approx(2.0).epsilon(1e-15));  // first step after warm-up: peak
        CHECK_THROWS(schedule_lr(c, 2.0, 10, 10));                                 // past the end
    }
    // The last step, s = 9:
    c.kind = ScheduleKind::Const;
    CHECK(schedule_lr(c, 2.0, 9, 10) == 2.0);
    c.kind = ScheduleKind::OneCycle;  // 2 (10 - 9) / (10 - 2) = 0.25; s = 6: 2 * 4/8 = 1
    CHECK(schedule_lr(c, 2.0, 9, 10) == doctest::Approx(0.25).epsilon(1e-15));
    CHECK(schedule_lr(c, 2.0, 6, 10) == doctest::Approx(1.0).epsilon(1e-15));
    c.kind = ScheduleKind::Cosine;  // 2 (1 + cos(7 pi / 8)) / 2 = 2 sin^2(pi/16) = 0.07612046748871326; s = 6: cos(pi/2) = 0 -> 1
    CHECK(schedule_lr(c, 2.0, 9, 10) == doctest::Approx(0.07612046748871326).epsilon(1e-13));
    CHECK(schedule_lr(c, 2.0, 6, 10) == doctest::Approx(1.0).epsilon(1e-15));
    c.kind = ScheduleKind::Step;  // every 4 steps x0.5, counted from s = 0: s = 3: 2, s = 4: 1, s = 8, 9: 0.5
    CHECK(schedule_lr(c, 2.0, 3, 10) == 2.0);
    CHECK(schedule_lr(c, 2.0, 4, 10) == 1.0);
    CHECK(schedule_lr(c, 2.0, 7, 10) == 1.0);
    CHECK(schedule_lr(c, 2.0, 8, 10) == 0.5);
    CHECK(schedule_lr(c, 2.0, 9, 10) == 0.5);

    // No warm-up: every schedule starts at the peak.
    c.warmup = 0.0;
    for (ScheduleKind k : {ScheduleKind::Const, ScheduleKind::Cosine, ScheduleKind::OneCycle, ScheduleKind::Step}) {
        c.kind = k;
        CHECK(schedule_lr(c, 2.0, 0, 10) == 2.0);
    }
    c.kind = ScheduleKind::OneCycle;  // 2 (10 - 9) / 10
    CHECK(schedule_lr(c, 2.0, 9, 10) == doctest::Approx(0.2).epsilon(1e-15));
    c.kind = ScheduleKind::Cosine;  // 2 (1 + cos(9 pi / 10)) / 2
    CHECK(schedule_lr(c, 2.0, 9, 10) == doctest::Approx(1.0 + std::cos(0.9 * std::numbers::pi)).epsilon(1e-13));
    // W = round(warmup S): 0.04 * 10 = 0.4 -> 0 (no warm-up); 0.25 * 10 = 2.5 -> 3 (halves away from 0).
    c.warmup = 0.04;
    CHECK(schedule_lr(c, 2.0, 0, 10) == 2.0);
    c.warmup = 0.25;
    c.kind = ScheduleKind::OneCycle;
    CHECK(schedule_lr(c, 3.0, 2, 10) == doctest::Approx(2.0).epsilon(1e-15));  // 3 * 2/3
    CHECK(schedule_lr(c, 3.0, 3, 10) == doctest::Approx(3.0).epsilon(1e-15));  // 3 (10 - 3) / 7
    // ptx-notes' recipe: 20 % warm-up of 4690 steps (5 epochs of 938): W = 938; lr(937) = 0.1 * 937/938.
    c.warmup = 0.2;
    CHECK(schedule_lr(c, 0.1, 937, 4690) == doctest::Approx(0.1 * 937.0 / 938.0).epsilon(1e-15));
    CHECK(schedule_lr(c, 0.1, 938, 4690) == doctest::Approx(0.1).epsilon(1e-15));
    CHECK(schedule_lr(c, 0.1, 4689, 4690) == doctest::Approx(0.1 / 3752.0).epsilon(1e-13));
}

TEST_CASE("recipe: the schedule's description and checks") {
    ScheduleConfig c;
    CHECK(c.describe().find("onecycle") == 0);
    CHECK(c.describe().find("20%") != std::string::npos);
    CHECK_NOTHROW(c.validate());
    c.warmup = 1.0;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--warmup 1"), InputError);
    c.warmup = -0.1;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--warmup -0.1"), InputError);
    c.warmup = 0.0;
    c.kind = ScheduleKind::Step;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--step-every 0"), InputError);  // the default 0
    c.step_every = 100;
    CHECK_NOTHROW(c.validate());
    c.gamma = 0.0;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--gamma 0"), InputError);
    c.gamma = 1.5;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("--gamma 1.5"), InputError);
    c.gamma = 1.0;
    CHECK_NOTHROW(c.validate());
    CHECK(c.describe().find("every 100 steps") != std::string::npos);
}

// ---- Activation ----------------------------------------------------------------------

TEST_CASE("recipe: activations and their gradients at a few points, and against central differences") {
    using A = Activation;
    // relu: max(x, 0); gradient 1 for x > 0, 0 at and below 0.
    CHECK(activate(A::Relu, -1.0) == 0.0);
    CHECK(activate(A::Relu, 0.5) == 0.5);
    CHECK(activate_grad(A::Relu, -1.0) == 0.0);
    CHECK(activate_grad(A::Relu, 0.0) == 0.0);
    CHECK(activate_grad(A::Relu, 2.0) == 1.0);
    // leaky-relu: 0.01 x below 0.
    CHECK(activate(A::LeakyRelu, -1.0) == doctest::Approx(-0.01).epsilon(1e-15));
    CHECK(activate(A::LeakyRelu, 2.0) == 2.0);
    CHECK(activate_grad(A::LeakyRelu, -1.0) == doctest::Approx(0.01).epsilon(1e-15));
    CHECK(activate_grad(A::LeakyRelu, 0.0) == doctest::Approx(0.01).epsilon(1e-15));  // PyTorch: x > 0 ? 1 : slope
    CHECK(activate_grad(A::LeakyRelu, 2.0) == 1.0);
    // tanh(0.5) = 0.46211715726000974; gradient 1 - tanh^2 = 0.7864477329659274; tanh(0) = 0, gradient 1.
    CHECK(activate(A::Tanh, 0.5) == doctest::Approx(0.46211715726000974).epsilon(1e-14));
    CHECK(activate_grad(A::Tanh, 0.5) == doctest::Approx(0.7864477329659274).epsilon(1e-14));
    CHECK(activate_grad(A::Tanh, 0.0) == 1.0);
    // sigmoid(0) = 1/2, gradient 1/4; sigmoid(2) = 1 / (1 + e^-2) = 0.8807970779778823, gradient s (1 - s) = 0.10499358540350662.
    CHECK(activate(A::Sigmoid, 0.0) == 0.5);
    CHECK(activate_grad(A::Sigmoid, 0.0) == 0.25);
    CHECK(activate(A::Sigmoid, 2.0) == doctest::Approx(0.8807970779778823).epsilon(1e-14));
    CHECK(activate_grad(A::Sigmoid, 2.0) == doctest::Approx(0.10499358540350662).epsilon(1e-14));
    // gelu x Phi(x): gelu(0) = 0, gradient Phi(0) = 1/2; gelu(1) = Phi(1) = 0.8413447460685429 (the normal table),
    // gelu(-1) = -Phi(-1) = -0.15865525393145707; gradient at 1: Phi(1) + phi(1) = 0.8413447460685429 + e^-0.5 / sqrt(2 pi)
    // = 0.8413447460685429 + 0.24197072451914337 = 1.0833154705876864; at -1: Phi(-1) - phi(-1) = -0.08331547058768629.
    CHECK(activate(A::Gelu, 0.0) == 0.0);
    CHECK(activate_grad(A::Gelu, 0.0) == 0.5);
    CHECK(activate(A::Gelu, 1.0) == doctest::Approx(0.8413447460685429).epsilon(1e-14));
    CHECK(activate(A::Gelu, -1.0) == doctest::Approx(-0.15865525393145707).epsilon(1e-14));
    CHECK(activate_grad(A::Gelu, 1.0) == doctest::Approx(1.0833154705876864).epsilon(1e-14));
    CHECK(activate_grad(A::Gelu, -1.0) == doctest::Approx(-0.08331547058768629).epsilon(1e-13));

    // Central differences away from the kinks (h = 1e-5: error ~ h^2 f''' + 1e-16 / h, below 1e-9).
    for (A a : {A::Relu, A::LeakyRelu, A::Tanh, A::Sigmoid, A::Gelu}) {
        CAPTURE(to_string(a));
        for (double x : {-2.5, -1.3, -0.2, 0.3, 0.7, 1.9, 4.0}) {
            CAPTURE(x);
            const double h = 1e-5;
            const double fd = (activate(a, x + h) - activate(a, x - h)) / (2 * h);
            CHECK(activate_grad(a, x) == doctest::Approx(fd).epsilon(1e-8).scale(1e-3));
        }
    }
}

// ---- The training step -----------------------------------------------------------------

TEST_CASE("recipe: cpu_recipe_step, one cross-entropy SGD step on a 2-1-2 network by hand") {
    // W1 = [[1, -1]], b1 = [0.5], W2 = [[2], [-1]], b2 = [-2, 1]; x = [1, 0.5], label 0.
    // z1 = 1 - 0.5 + 0.5 = 1, a1 = relu(1) = 1; y = [2 - 2, -1 + 1] = [0, 0]; softmax = [1/2, 1/2];
    // loss = -ln(1/2) = ln 2; dy = softmax - t = [-1/2, 1/2] (B = 1).
    // gW2 = dy a1 = [-1/2, 1/2], gb2 = [-1/2, 1/2]; W2^T dy = 2 (-1/2) + (-1)(1/2) = -3/2, relu'(1) = 1: d1 = -3/2;
    // gW1 = d1 x = [-3/2, -3/4], gb1 = -3/2. SGD lr 0.1: W1 = [1.15, -0.925], b1 = 0.65, W2 = [2.05, -1.05],
    // b2 = [-1.95, 0.95].
    auto make = [] {
        Net64 n;
        n.sizes = {2, 1, 2};
        n.W = {{1, -1}, {2, -1}};
        n.b = {{0.5}, {-2, 1}};
        return n;
    };
    Recipe r;
    r.loss = Loss::Ce;
    r.optim.kind = OptimKind::Sgd;
    r.activation = Activation::Relu;
    Net64 n = make();
    OptimState64 st;
    CHECK(cpu_recipe_step(n, st, r, {1, 0.5}, {0}, 1, 0.1) == doctest::Approx(std::log(2.0)).epsilon(1e-14));
    CHECK(st.t == 1);
    check_all(n.W[0], {1.15, -0.925});
    check_all(n.b[0], {0.65});
    check_all(n.W[1], {2.05, -1.05});
    check_all(n.b[1], {-1.95, 0.95});
    // Second step's loss: z1 = 1.15 - 0.4625 + 0.65 = 1.3375; y = [2.05 z1 - 1.95, -1.05 z1 + 0.95]
    // = [0.791875, -0.454375]; loss = ln(1 + e^(y1 - y0)) = ln(1 + e^-1.24625) = 0.2527654248527297 (python3).
    CHECK(cpu_recipe_step(n, st, r, {1, 0.5}, {0}, 1, 0.1) == doctest::Approx(0.2527654248527297).epsilon(1e-13));
    CHECK(st.t == 2);

    // The same sample twice in a batch: the mean gradient, so the same update (a sum would double it).
    Net64 n2 = make();
    OptimState64 st2;
    CHECK(cpu_recipe_step(n2, st2, r, {1, 0.5, 1, 0.5}, {0, 0}, 2, 0.1) == doctest::Approx(std::log(2.0)).epsilon(1e-14));
    check_all(n2.W[0], {1.15, -0.925});
    check_all(n2.b[1], {-1.95, 0.95});
}

TEST_CASE("recipe: cpu_recipe_step with half-SSE, SGD and relu is the reference's cpu_train_step") {
    NetParams p = init_params({5, 4, 3, 3}, Init::Torch, 11);
    Net64 a = to_net64(p), b = a;
    Rng rng(5);
    std::vector<double> X(4 * 5);
    for (auto& x : X) x = rng.uniform() * 2 - 1;
    const std::vector<uint8_t> labels = {0, 2, 1, 2};
    Recipe r;
    r.loss = Loss::HalfSse;
    r.optim.kind = OptimKind::Sgd;
    r.activation = Activation::Relu;
    OptimState64 st;
    for (int step = 0; step < 3; ++step) {
        const double la = cpu_recipe_step(a, st, r, X, labels, 4, 0.3), lb = cpu_train_step(b, X, labels, 4, 0.3);
        CHECK(la == doctest::Approx(lb).epsilon(1e-13));
    }
    for (size_t l = 0; l < 3; ++l) {
        check_all(a.W[l], b.W[l], 1e-12);
        check_all(a.b[l], b.b[l], 1e-12);
    }
}

TEST_CASE("recipe: cpu_recipe_step's gradient matches central differences of its loss, for every loss and activation") {
    // SGD with lr 1 moves each parameter by minus its batch-mean gradient; lr 0 only measures the loss.
    NetParams p = init_params({3, 4, 3, 3}, Init::Torch, 21);
    Rng rng(9);
    std::vector<double> X(3 * 3);
    for (auto& x : X) x = rng.uniform() * 2 - 1;
    const std::vector<uint8_t> labels = {1, 0, 2};
    for (Loss loss : {Loss::Ce, Loss::Mse, Loss::HalfSse})
        for (Activation act : {Activation::Tanh, Activation::Sigmoid, Activation::Gelu, Activation::LeakyRelu}) {
            CAPTURE(to_string(loss));
            CAPTURE(to_string(act));
            Recipe r;
            r.loss = loss;
            r.optim.kind = OptimKind::Sgd;
            r.activation = act;
            const Net64 net0 = to_net64(p);
            Net64 stepped = net0;
            OptimState64 st;
            cpu_recipe_step(stepped, st, r, X, labels, 3, 1.0);
            auto loss_at = [&](const Net64& n) {
                Net64 copy = n;
                OptimState64 s;
                return cpu_recipe_step(copy, s, r, X, labels, 3, 0.0);
            };
            for (size_t l = 0; l < 3; ++l)
                for (int which = 0; which < 2; ++which) {
                    const size_t count = which == 0 ? net0.W[l].size() : net0.b[l].size();
                    for (size_t i = 0; i < count; ++i) {
                        Net64 plus = net0, minus = net0;
                        const double h = 1e-5;
                        (which == 0 ? plus.W[l][i] : plus.b[l][i]) += h;
                        (which == 0 ? minus.W[l][i] : minus.b[l][i]) -= h;
                        const double fd = (loss_at(plus) - loss_at(minus)) / (2 * h);
                        const double g = which == 0 ? net0.W[l][i] - stepped.W[l][i] : net0.b[l][i] - stepped.b[l][i];
                        CHECK(g == doctest::Approx(fd).epsilon(1e-6).scale(1e-3));
                    }
                }
        }
}

TEST_CASE("recipe: cpu_recipe_step sizes the optimizer state on first use and counts the steps") {
    NetParams p = init_params({2, 3, 2}, Init::Torch, 1);
    Recipe r;
    r.optim.kind = OptimKind::Adam;
    Net64 n = to_net64(p);
    OptimState64 st;
    cpu_recipe_step(n, st, r, {0.5, -0.5}, {1}, 1, 1e-3);
    CHECK(st.t == 1);
    REQUIRE(st.mW.size() == 2);
    REQUIRE(st.vb.size() == 2);
    CHECK(st.mW[0].size() == 6);
    CHECK(st.vW[1].size() == 6);
    CHECK(st.mb[1].size() == 2);
    // Adam's first step moves every parameter with a nonzero gradient by lr m/(sqrt(v) + eps bc2) ~ lr:
    // the output bias moves by about 1e-3 (its gradient, softmax - t, is nonzero).
    for (size_t i = 0; i < 2; ++i) CHECK(std::fabs(n.b[1][i] - p.b[1][i]) == doctest::Approx(1e-3).epsilon(1e-3));
    cpu_recipe_step(n, st, r, {0.5, -0.5}, {1}, 1, 1e-3);
    CHECK(st.t == 2);
}

TEST_CASE("recipe: cross-entropy with Nesterov over 300 steps learns a separable problem") {
    // Two classes in 2-D: label 1 when x0 + x1 > 0, points at least 0.2 from the line; a 2-8-2 relu net.
    Rng rng(42);
    const unsigned N = 64;
    std::vector<double> X;
    std::vector<uint8_t> labels;
    while (labels.size() < N) {
        const double a = rng.uniform() * 2 - 1, b = rng.uniform() * 2 - 1;
        if (std::fabs(a + b) < 0.2) continue;
        X.push_back(a);
        X.push_back(b);
        labels.push_back(a + b > 0 ? 1 : 0);
    }
    Net64 n = to_net64(init_params({2, 8, 2}, Init::Torch, 3));
    Recipe r;  // defaults: Ce, Nesterov 0.9, relu
    REQUIRE(r.loss == Loss::Ce);
    REQUIRE(r.optim.kind == OptimKind::Nesterov);
    OptimState64 st;
    const double first = cpu_recipe_step(n, st, r, X, labels, N, 0.1);
    double last = first;
    for (int s = 1; s < 300; ++s) last = cpu_recipe_step(n, st, r, X, labels, N, 0.1);
    CHECK(first > 0.5);            // about ln 2 at the start
    CHECK(last < 0.05 * first);    // and a small fraction of it after 300 steps
    // Every training point classified right.
    std::vector<double> Y = cpu_forward(n, X, N);
    unsigned right = 0;
    for (unsigned s = 0; s < N; ++s) right += (Y[2 * s + 1] > Y[2 * s]) == (labels[s] == 1);
    CHECK(right == N);
}

TEST_CASE("recipe: the optimizer codes of the one-launch steps are one table, nadam the last") {
    // step.ptx and tcstep.ptx (and their twins, recipe.cuh) branch on these numbers: 5 is
    // rmsprop only (not "5 and up"), 6 nadam, which keeps m and v.
    const std::pair<OptimKind, unsigned> codes[] = {{OptimKind::Sgd, 0},  {OptimKind::Momentum, 1},
                                                    {OptimKind::Nesterov, 2}, {OptimKind::Adam, 3},
                                                    {OptimKind::AdamW, 4}, {OptimKind::RmsProp, 5},
                                                    {OptimKind::NAdam, 6}};
    for (auto [k, code] : codes) {
        CAPTURE(to_string(k));
        CHECK(optim_code(k) == code);
        CHECK(code < optim_code_count());
    }
    CHECK(optim_code_count() == 7);
    CHECK(optim_code_list() == "0 sgd, 1 momentum, 2 nesterov, 3 adam, 4 adamw, 5 rmsprop, 6 nadam");
    CHECK(optim_uses_m(OptimKind::NAdam));
    CHECK(optim_uses_v(OptimKind::NAdam));
}

TEST_CASE("recipe: nadam is torch.optim.NAdam's rule, step by step") {
    // Two steps of one parameter, written out from torch.optim.NAdam's algorithm (momentum_decay
    // 0.004, weight decay added to the gradient) in float64, against optim_step and step_hyper.
    OptimConfig o;
    o.kind = OptimKind::NAdam;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-8f;
    o.weight_decay = 0.01f;
    CHECK(parse_optimizer("nadam") == OptimKind::NAdam);
    CHECK(to_string(OptimKind::NAdam) == "nadam");
    CHECK(o.describe().find("nadam (betas 0.9, 0.999, eps 1e-08, momentum decay 0.004)") == 0);
    const double b1 = o.beta1, b2 = o.beta2, eps = o.eps, wd = o.weight_decay, lr = 0.002;
    double p = 0.5, m = 0, v = 0, mu_product = 1;
    double P = p, M = 0, V = 0;
    const double grads[] = {0.3, -0.7};
    for (uint64_t t = 1; t <= 2; ++t) {
        const double g = grads[t - 1] + wd * p;
        const double mu = b1 * (1 - 0.5 * std::pow(0.96, t * 0.004));
        const double mu_next = b1 * (1 - 0.5 * std::pow(0.96, (t + 1) * 0.004));
        mu_product *= mu;
        m = m + (1 - b1) * (g - m);
        v = b2 * v + (1 - b2) * g * g;
        const double denom = std::sqrt(v / (1 - std::pow(b2, double(t)))) + eps;
        p -= lr * (1 - mu) / (1 - mu_product) * g / denom;
        p -= lr * mu_next / (1 - mu_product * mu_next) * m / denom;
        const double G = grads[t - 1];
        optim_step(o, lr, t, &P, &G, &M, &V, 1);
        CHECK(P == doctest::Approx(p).epsilon(1e-13));
        CHECK(M == doctest::Approx(m).epsilon(1e-13));
        CHECK(V == doctest::Approx(v).epsilon(1e-13));
        // The kernels' record: the coefficients of g and m, each rounded once to float.
        const StepHyper h = step_hyper(o, lr, t);
        CHECK(h.lr == float(lr * (1 - mu) / (1 - mu_product)));
        CHECK(h.step_size == float(lr * mu_next / (1 - mu_product * mu_next)));
        CHECK(h.bc2_sqrt == float(std::sqrt(1 - std::pow(b2, double(t)))));
    }
    // Out of order (a resumed run, verify's random steps): the product is made again from 1.
    const StepHyper late = step_hyper(o, lr, 1000), early = step_hyper(o, lr, 3);
    double prod = 1;
    for (uint64_t i = 1; i <= 3; ++i) prod *= b1 * (1 - 0.5 * std::pow(0.96, i * 0.004));
    CHECK(early.lr == float(lr * (1 - b1 * (1 - 0.5 * std::pow(0.96, 3 * 0.004))) / (1 - prod)));
    CHECK(late.lr != early.lr);
}
