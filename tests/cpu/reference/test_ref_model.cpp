// The float64 reference of a whole --model (ref_model.hpp) and the init of any model
// (recipe.hpp init_model_params): a step worked out by hand, the fc-only model against
// cpu_recipe_step bit for bit, and central differences on small CNNs.
#include "error.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "ref_model.hpp"
#include "reference.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace ptxlab;

namespace {

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<double> random_images(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<double> X(n);
    for (auto& x : X) x = rng.uniform();  // pixels in [0, 1), as MNIST's / 255
    return X;
}

std::vector<uint8_t> random_labels(unsigned B, uint64_t seed) {
    Rng rng(seed);
    std::vector<uint8_t> y(B);
    for (auto& v : y) v = uint8_t(rng.below(10));
    return y;
}

float max_abs(const float* p, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(p[i]));
    return m;
}

// The parameters where the central difference of model_loss_grad64's loss (h = 1e-6) lies
// past abs_tol + rel_tol |g[i]| from its gradient g; the first five are reported.
size_t central_difference_misses(const Model& m, const std::vector<double>& P, const Recipe& r,
                                 const std::vector<double>& X, const std::vector<uint8_t>& y, unsigned B,
                                 const std::vector<double>& g, double abs_tol, double rel_tol) {
    const double h = 1e-6;
    size_t bad = 0;
    for (size_t i = 0; i < P.size(); ++i) {
        std::vector<double> Q = P;
        Q[i] = P[i] + h;
        const double up = model_loss_grad64(m, Q, r, X, y, B, nullptr);
        Q[i] = P[i] - h;
        const double down = model_loss_grad64(m, Q, r, X, y, B, nullptr);
        const double fd = (up - down) / (2 * h);
        if (std::fabs(fd - g[i]) > abs_tol + rel_tol * std::fabs(g[i])) {
            if (bad++ < 5) CHECK_MESSAGE(false, "parameter ", i, ": fd ", fd, " vs ", g[i]);
        }
    }
    return bad;
}

}  // namespace

TEST_CASE("ref_model: parse_model takes another input shape (the tests' small images)") {
    const Model m = parse_model("conv3,pool,conv2k5,pool,fc6,fc10", Shape3{2, 8, 8});
    CHECK(m.shapes_text() == "2x8x8 -conv3-> 3x8x8 -pool-> 3x4x4 -conv2k5-> 2x4x4 -pool-> 2x2x2 -fc6-> 6 -fc10-> 10");
    CHECK(m.layers[0].weight_dims == std::vector<unsigned>{3, 2, 3, 3});
    CHECK(m.layers[4].weight_dims == std::vector<unsigned>{6, 8});
    CHECK(m.param_count == (54 + 3) + (150 + 2) + (48 + 6) + (60 + 10));
    CHECK(parse_model("fc7,fc10", Shape3{1, 3, 4}).fc_sizes() == std::vector<unsigned>{12, 7, 10});
    CHECK_THROWS_WITH_AS(parse_model("pool,fc10", Shape3{1, 3, 4}), doctest::Contains("even height"), InputError);
}

TEST_CASE("ref_model: init_model_params is init_params for fc-only models, and nn.Conv2d's fans for conv layers") {
    for (Init init : {Init::Torch, Init::HeUniform, Init::HeNormal, Init::Xavier, Init::Notebook}) {
        CAPTURE(to_string(init));
        // fc-only: the same stream, flattened (W1, b1, W2, b2).
        const Model mlp = parse_model("fc32,fc10", Shape3{1, 8, 8});
        const NetParams p = init_params({64, 32, 10}, init, 7);
        std::vector<float> flat;
        for (size_t l = 0; l < 2; ++l) {
            flat.insert(flat.end(), p.W[l].begin(), p.W[l].end());
            flat.insert(flat.end(), p.b[l].begin(), p.b[l].end());
        }
        CHECK(init_model_params(mlp, init, 7) == flat);

        // cnn: conv1 fan_in 1*9 = 9, fan_out 32*9 = 288; conv2 fan_in 32*9 = 288, fan_out 64*9 = 576.
        const Model cnn = parse_model("cnn");
        const std::vector<float> q = init_model_params(cnn, init, 7);
        REQUIRE(q.size() == cnn.param_count);
        CHECK(init_model_params(cnn, init, 7) == q);
        CHECK(init_model_params(cnn, init, 8) != q);
        for (size_t li : {size_t(0), size_t(2)}) {
            const LayerSpec& l = cnn.layers[li];
            CAPTURE(l.name);
            const double fan_in = li == 0 ? 9 : 288, fan_out = li == 0 ? 288 : 576;
            const float wmax = max_abs(q.data() + l.weight_offset, l.weight_count());
            const float bmax = max_abs(q.data() + l.bias_offset, l.bias_count());
            double bound = 0;
            switch (init) {
                case Init::Torch: bound = 1.0 / std::sqrt(fan_in); break;  // 1/3 and 1/sqrt(288) = 0.0589
                case Init::HeUniform: bound = std::sqrt(6.0 / fan_in); break;
                case Init::Xavier: bound = std::sqrt(6.0 / (fan_in + fan_out)); break;
                default: break;
            }
            if (bound > 0) {
                // 288 or 18432 draws of U(-bound, bound): the largest is above 0.95 bound but for
                // a chance of 0.95^288 < 1e-6.
                CHECK(wmax <= bound * (1 + 1e-6));
                CHECK(wmax >= 0.95 * bound);
            }
            if (init == Init::Torch) {
                CHECK(bmax <= bound * (1 + 1e-6));
                CHECK(bmax > 0);
            } else if (init == Init::Notebook) {
                CHECK(bmax > 0);
                CHECK(wmax < 0.06);
            } else {
                CHECK(bmax == 0);
            }
        }
    }
}

TEST_CASE("ref_model: one half-SSE SGD step of conv1k1,pool,fc10 on a 2x2 image, by hand") {
    // x = [1 2; 3 -1]; conv 1x1: w 0.5, b 0.25 -> z = [0.75 1.25; 1.75 -0.25], relu a = [0.75 1.25; 1.75 0];
    // pool: 1.75 at (1, 0); fc: W[3] = 2, every other weight and bias 0 -> y3 = 3.5, others 0.
    // Label 3, half-SSE: d3 = 3.5 - 1 = 2.5, others 0; loss 0.5 * 2.5^2 = 3.125.
    // fc: dW[3] = 2.5 * 1.75 = 4.375, db[3] = 2.5; to the pool: W[3] d3 = 5, to (1, 0) only;
    // relu'(1.75) = 1; conv: dw = 5 * x(1, 0) = 15, db = 5.
    // SGD lr 0.1: w 0.5 - 1.5 = -1, b 0.25 - 0.5 = -0.25, W[3] 2 - 0.4375 = 1.5625, b[3] -0.25.
    const Model m = parse_model("conv1k1,pool,fc10", Shape3{1, 2, 2});
    REQUIRE(m.param_count == 1 + 1 + 10 + 10);
    std::vector<double> P(m.param_count, 0.0);
    P[0] = 0.5;
    P[1] = 0.25;
    P[2 + 3] = 2.0;  // fc1.weight[3][0]
    Recipe r;
    r.loss = Loss::HalfSse;
    r.optim.kind = OptimKind::Sgd;
    const std::vector<double> X = {1, 2, 3, -1};
    std::vector<double> g;
    CHECK(model_loss_grad64(m, P, r, X, {3}, 1, &g) == doctest::Approx(3.125));
    std::vector<double> want_g(m.param_count, 0.0);
    want_g[0] = 15;
    want_g[1] = 5;
    want_g[2 + 3] = 4.375;
    want_g[12 + 3] = 2.5;
    CHECK(g == want_g);
    ModelOptim64 st;
    CHECK(cpu_model_step(m, P, st, r, X, {3}, 1, 0.1) == doctest::Approx(3.125));
    CHECK(st.t == 1);
    CHECK(P[0] == doctest::Approx(-1.0));
    CHECK(P[1] == doctest::Approx(-0.25));
    CHECK(P[2 + 3] == doctest::Approx(1.5625));
    CHECK(P[12 + 3] == doctest::Approx(-0.25));
    const auto f = model_forward64(m, {0.5, 0.25, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, X, 1,
                                   Activation::Relu);
    CHECK(f.a[1] == std::vector<double>{0.75, 1.25, 1.75, 0.0});
    CHECK(f.z[1] == std::vector<double>{0.75, 1.25, 1.75, -0.25});
    CHECK(f.idx[2] == std::vector<uint32_t>{2});
    CHECK(f.logits()[3] == 3.5);
}

TEST_CASE("ref_model: an fc-only model steps exactly as cpu_recipe_step (every loss, activation, five optimizers)") {
    const Model m = parse_model("fc7,fc5,fc10", Shape3{1, 3, 4});
    const unsigned B = 6;
    const auto X = random_images(size_t(B) * 12, 3);
    const auto y = random_labels(B, 4);
    for (Activation act : {Activation::Relu, Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid, Activation::Gelu})
    for (Loss loss : {Loss::Ce, Loss::Mse, Loss::HalfSse})
        for (OptimKind k : {OptimKind::Sgd, OptimKind::Nesterov, OptimKind::Adam, OptimKind::RmsProp, OptimKind::NAdam}) {
            CAPTURE(to_string(act));
            CAPTURE(to_string(loss));
            CAPTURE(to_string(k));
            Recipe r;
            r.loss = loss;
            r.optim.kind = k;
            r.optim.weight_decay = 0.01f;
            r.activation = act;
            const NetParams p = init_params({12, 7, 5, 10}, Init::Torch, 11);
            Net64 net{p.sizes, {}, {}};
            for (size_t l = 0; l < 3; ++l) {
                net.W.push_back(widen(p.W[l]));
                net.b.push_back(widen(p.b[l]));
            }
            std::vector<double> flat = widen(init_model_params(m, Init::Torch, 11));
            OptimState64 st;
            ModelOptim64 mst;
            for (int step = 0; step < 3; ++step) {
                const double lr = 0.05 * (step + 1);
                const double a = cpu_recipe_step(net, st, r, X, y, B, lr);
                const double b = cpu_model_step(m, flat, mst, r, X, y, B, lr);
                CHECK(a == b);  // the same sums in the same order
            }
            std::vector<double> want;
            for (size_t l = 0; l < 3; ++l) {
                want.insert(want.end(), net.W[l].begin(), net.W[l].end());
                want.insert(want.end(), net.b[l].begin(), net.b[l].end());
            }
            CHECK(flat == want);
        }
}

TEST_CASE("ref_model: the gradient of small CNNs matches central differences (every loss and activation)") {
    struct Case {
        const char* spec;
        Shape3 in;
        unsigned B;
    };
    // Two conv layers (3x3 and 5x5), two input channels, pools, two fc; a 1x1 conv on an odd
    // 3x3 image straight into fc; one conv, one pool, one fc.
    for (const Case& c : {Case{"conv3,pool,conv2k5,pool,fc6,fc10", {2, 8, 8}, 3}, Case{"conv4k1,fc10", {1, 3, 3}, 2},
                          Case{"conv3,pool,fc10", {1, 6, 6}, 2}}) {
        const Model m = parse_model(c.spec, c.in);
        const auto X = random_images(size_t(c.B) * c.in.size(), 5);
        const auto y = random_labels(c.B, 6);
        for (Activation act : {Activation::Tanh, Activation::Gelu, Activation::Relu, Activation::LeakyRelu,
                               Activation::Sigmoid})
            for (Loss loss : {Loss::Ce, Loss::Mse, Loss::HalfSse}) {
                CAPTURE(c.spec);
                CAPTURE(to_string(act));
                CAPTURE(to_string(loss));
                Recipe r;
                r.loss = loss;
                r.activation = act;
                std::vector<double> P = widen(init_model_params(m, Init::Torch, 9));
                for (auto& p : P) p *= 2.0;  // larger weights: the activations' curvature shows
                std::vector<double> g;
                model_loss_grad64(m, P, r, X, y, c.B, &g);
                REQUIRE(g.size() == P.size());
                double gmax = 0;
                for (double v : g) gmax = std::max(gmax, std::fabs(v));
                REQUIRE(gmax > 0);
                // Central differences with h = 1e-6: truncation h^2 |f'''| and rounding 1e-16 / h,
                // both far below 1e-6 of the largest gradient; a ReLU or pool kink within h of a
                // sample point would break one comparison (not seen with these seeds).
                CHECK(central_difference_misses(m, P, r, X, y, c.B, g, 1e-6 * gmax, 1e-7) == 0);
            }
    }
}

TEST_CASE("ref_model: bn's init (gamma 1, beta 0) and its forward pass by an independent formula") {
    const Model m = parse_model("conv3,bn,pool,fc5,bn,fc10", Shape3{1, 4, 4});
    const std::vector<float> P = init_model_params(m, Init::Torch, 3);
    for (size_t i = 0; i < 3; ++i) {
        CHECK(P[m.layers[1].weight_offset + i] == 1.0f);
        CHECK(P[m.layers[1].bias_offset + i] == 0.0f);
    }
    // One channel, B = 2 planes of 2: x = {1, 2 | 3, 6}: mean 3, biased variance (4 + 1 + 0 + 9) / 4
    // = 3.5, unbiased 14 / 3; z = gamma (x - 3) / sqrt(3.5 + 1e-5) + beta.
    const double x[4] = {1, 2, 3, 6}, gamma = 2, beta = 0.5;
    double z[4], mean, rstd, rm = 0.25, rv = 2;
    bn_forward64(x, 2, 1, 2, &gamma, &beta, true, &rm, &rv, z, &mean, &rstd);
    CHECK(mean == 3.0);
    CHECK(rstd == doctest::Approx(1 / std::sqrt(3.5 + 1e-5)).epsilon(1e-15));
    for (int i = 0; i < 4; ++i) CHECK(z[i] == doctest::Approx(2 * (x[i] - 3) / std::sqrt(3.50001) + 0.5).epsilon(1e-14));
    CHECK(rm == doctest::Approx(0.9 * 0.25 + 0.1 * 3).epsilon(1e-15));
    CHECK(rv == doctest::Approx(0.9 * 2 + 0.1 * 14.0 / 3).epsilon(1e-15));
    // Evaluation: the running statistics, nothing updated.
    bn_forward64(x, 2, 1, 2, &gamma, &beta, false, &rm, &rv, z, &mean, &rstd);
    CHECK(mean == rm);
    CHECK(z[3] == doctest::Approx(2 * (6 - rm) / std::sqrt(rv + 1e-5) + 0.5).epsilon(1e-14));
    // One value per channel in training is refused, as PyTorch does.
    CHECK_THROWS_WITH_AS(bn_forward64(x, 1, 1, 1, &gamma, &beta, true, &rm, &rv, z, &mean, &rstd),
                         doctest::Contains("more than 1 value per channel"), InputError);
}

TEST_CASE("ref_model: models with bn: the gradient matches central differences, the running statistics move") {
    struct Case {
        const char* spec;
        Shape3 in;
        unsigned B;
    };
    // BatchNorm2d after convs (one of them 5x5, two input channels), BatchNorm1d after a hidden
    // fc, a bn straight into the last fc, a batch of 2 on 1x1 planes.
    for (const Case& c : {Case{"conv3,bn,pool,conv2k5,bn,pool,fc6,bn,fc10", {2, 8, 8}, 3},
                          Case{"conv4k1,bn,fc10", {1, 3, 3}, 2}, Case{"fc7,bn,fc10", {1, 2, 3}, 2}}) {
        const Model m = parse_model(c.spec, c.in);
        const auto X = random_images(size_t(c.B) * c.in.size(), 5);
        const auto y = random_labels(c.B, 6);
        for (Activation act : {Activation::Tanh, Activation::Relu})
            for (Loss loss : {Loss::Ce, Loss::Mse}) {
                CAPTURE(c.spec);
                CAPTURE(to_string(act));
                CAPTURE(to_string(loss));
                Recipe r;
                r.loss = loss;
                r.activation = act;
                std::vector<double> P = widen(init_model_params(m, Init::Torch, 9));
                Rng rng(4);
                for (const LayerSpec& l : m.layers)  // gamma and beta away from 1 and 0
                    if (l.is_bn())
                        for (unsigned k = 0; k < l.width; ++k) {
                            P[l.weight_offset + k] = rng.uniform(0.5f, 2.0f);
                            P[l.bias_offset + k] = rng.uniform(-0.5f, 0.5f);
                        }
                std::vector<double> g;
                model_loss_grad64(m, P, r, X, y, c.B, &g);
                double gmax = 0;
                for (double v : g) gmax = std::max(gmax, std::fabs(v));
                REQUIRE(gmax > 0);
                CHECK(central_difference_misses(m, P, r, X, y, c.B, g, 2e-6 * gmax, 1e-6) == 0);
            }
        // A step moves the running statistics (and only a training pass does).
        const std::vector<float> run_init = m.initial_buffers();
        std::vector<double> run = widen(run_init);
        const std::vector<double> run0 = run;
        std::vector<double> P = widen(init_model_params(m, Init::Torch, 9));
        ModelOptim64 st;
        Recipe r;
        cpu_model_step(m, P, st, r, X, y, c.B, 0.1, &run);
        CHECK(run != run0);
        const std::vector<double> run1 = run;
        const auto f = model_forward64(m, P, X, c.B, r.activation, &run, false);
        CHECK(run == run1);
        CHECK(f.logits().size() == size_t(c.B) * 10);
        CHECK_THROWS_WITH_AS(model_forward64(m, P, X, c.B, r.activation, nullptr, false),
                             doctest::Contains("needs its bn layers' running statistics"), Error);
    }
}

TEST_CASE("ref_model: bad inputs are refused with the reason") {
    const Model m = parse_model("conv2,pool,fc10", Shape3{1, 4, 4});
    std::vector<double> P(m.param_count, 0.1);
    Recipe r;
    ModelOptim64 st;
    CHECK_THROWS_WITH_AS(model_loss_grad64(m, std::vector<double>(3), r, random_images(16, 1), {1}, 1, nullptr),
                         doctest::Contains("3 parameters given"), Error);
    CHECK_THROWS_WITH_AS(model_loss_grad64(m, P, r, random_images(15, 1), {1}, 1, nullptr),
                         doctest::Contains("need 16 values"), Error);
    CHECK_THROWS_WITH_AS(cpu_model_step(m, P, st, r, random_images(16, 1), {10}, 1, 0.1),
                         doctest::Contains("label 10"), Error);
}
