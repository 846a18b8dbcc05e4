// The float64 reference: a hand-checked training run, and error bounds that hold
// for a correct float32 computation and fail for a wrong one.
#include "reference.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace ptxlab;

namespace {
Net64 tiny_net() {
    // 2-2-2: W1 = [[1, -1], [0.5, 0.5]], b1 = [0, 0.5], W2 = [[1, 0], [-1, 2]], b2 = [0, 0].
    Net64 n;
    n.sizes = {2, 2, 2};
    n.W = {{1, -1, 0.5, 0.5}, {1, 0, -1, 2}};
    n.b = {{0, 0.5}, {0, 0}};
    return n;
}
void check_all(const std::vector<double>& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}
}  // namespace

TEST_CASE("reference: one SGD step on one sample matches the hand computation") {
    // x = [1, 2], label 1: z1 = [-1, 2], a1 = [0, 2], y = [0, 4], d2 = y - t = [0, 3], loss 0.5 * 9.
    // gW2 = d2 (x) a1 = [[0, 0], [0, 6]]; W2^T d2 = [-3, 6], masked by a1 > 0: d1 = [0, 6];
    // gW1 = d1 (x) x = [[0, 0], [6, 12]]. With lr 0.1 every parameter moves by -0.1 * gradient.
    Net64 n = tiny_net();
    double loss = cpu_train_step(n, {1, 2}, {1}, 1, 0.1);
    CHECK(loss == doctest::Approx(4.5));
    check_all(n.W[0], {1, -1, -0.1, -0.7});
    check_all(n.b[0], {0, -0.1});
    check_all(n.W[1], {1, 0, -1, 1.4});
    check_all(n.b[1], {0, -0.3});
    // Second step: z1 = [-1, -1.6], both units off; y = b2 = [0, -0.3]; loss 0.5 * 1.3^2.
    CHECK(cpu_train_step(n, {1, 2}, {1}, 1, 0.1) == doctest::Approx(0.845));
    check_all(cpu_forward(n, {1, 2}, 1), {0.0, -0.3 + 0.1 * 1.3});
}

TEST_CASE("reference: a batch of two averages the per-sample gradients") {
    // Second sample x = [0, 1], label 0: a1 = [0, 1], y = [0, 2], d2 = [-1, 2], loss 2.5, d1 = [0, 4].
    // Batch means: gW2 = [[0, -0.5], [0, 4]], gb2 = [-0.5, 2.5], gW1 = [[0, 0], [3, 8]], gb1 = [0, 5].
    Net64 n = tiny_net();
    double loss = cpu_train_step(n, {1, 2, 0, 1}, {1, 0}, 2, 0.1);
    CHECK(loss == doctest::Approx(3.5));
    check_all(n.W[1], {1, 0.05, -1, 1.6});
    check_all(n.b[1], {0.05, -0.25});
    check_all(n.W[0], {1, -1, 0.2, -0.3});
    check_all(n.b[0], {0, 0});
}

TEST_CASE("reference: the one-launch step's reference is the hand-checked batch step, with tight bounds") {
    // The batch of two above, as float32 inputs to ref_fused_step (every value is exact in float32).
    NetParams net;
    net.sizes = {2, 2, 2};
    net.W = {{1, -1, 0.5f, 0.5f}, {1, 0, -1, 2}};
    net.b = {{0, 0.5f}, {0, 0}};
    const std::vector<float> X = {1, 2, 0, 1}, T = {0, 1, 1, 0};
    RefFusedStep r = ref_fused_step(net, X, T, 2, 0.1f);
    check_all(r.A.v, {0, 2, 0, 1});
    check_all(r.Y.v, {0, 4, 0, 2});
    // 0.1f is not 0.1: compare the updates with the float lr, to 1e-7.
    const double lr = 0.1f;
    const std::vector<double> W1 = {1, -1, 0.5 - lr * 3, 0.5 - lr * 8}, b1 = {0, 0.5 - lr * 5};
    const std::vector<double> W2 = {1, 0 + lr * 0.5, -1, 2 - lr * 4}, b2 = {0 + lr * 0.5, 0 - lr * 2.5};
    for (size_t i = 0; i < 4; ++i) CHECK(r.W1.v[i] == doctest::Approx(W1[i]).epsilon(1e-12));
    for (size_t i = 0; i < 2; ++i) CHECK(r.b1.v[i] == doctest::Approx(b1[i]).epsilon(1e-12));
    for (size_t i = 0; i < 4; ++i) CHECK(r.W2.v[i] == doctest::Approx(W2[i]).epsilon(1e-12));
    for (size_t i = 0; i < 2; ++i) CHECK(r.b2.v[i] == doctest::Approx(b2[i]).epsilon(1e-12));
    // Unit 0 is off with z = -1 and -1: far from the kink, so every bound is finite and small.
    for (const Bounded* b : {&r.A, &r.Y, &r.W1, &r.b1, &r.W2, &r.b2})
        for (size_t i = 0; i < b->size(); ++i) {
            CHECK(std::isfinite(b->e[i]));
            CHECK(b->e[i] <= 1e-5 * (1.0 + std::fabs(b->v[i])));
        }
    // A pre-activation of exactly 0 sits at the kink: the W1 row and b1 of that unit are not comparable.
    net.b[0] = {1, 0.5f};  // z of unit 0 for sample 0: 1 - 2 + 1 = 0
    RefFusedStep k = ref_fused_step(net, X, T, 2, 0.1f);
    CHECK(std::isinf(k.W1.e[0]));
    CHECK(std::isinf(k.b1.e[0]));
    CHECK(std::isfinite(k.W1.e[2]));
}

namespace {
// A float32 forward pass in the kernels' order (fmaf from the bias), optionally with a bug.
std::vector<float> forward_f32(const NetParams& net, const std::vector<float>& X, unsigned B, bool swap_index) {
    std::vector<float> Y;
    for (unsigned s = 0; s < B; ++s) {
        std::vector<float> in(X.begin() + long(s) * net.sizes[0], X.begin() + long(s + 1) * net.sizes[0]);
        for (size_t l = 0; l < net.layers(); ++l) {
            const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
            std::vector<float> out(rows);
            for (unsigned r = 0; r < rows; ++r) {
                float acc = net.b[l][r];
                for (unsigned c = 0; c < cols; ++c) {
                    // The bug reads W[c][r]-style: the transposed index within the row block.
                    unsigned cc = swap_index ? (cols - 1 - c) : c;
                    acc = std::fma(net.W[l][size_t(r) * cols + cc], in[c], acc);
                }
                out[r] = (l + 1 < net.layers() && !(acc > 0.0f)) ? 0.0f : acc;
            }
            in = out;
        }
        Y.insert(Y.end(), in.begin(), in.end());
    }
    return Y;
}
}  // namespace

TEST_CASE("reference: the float64 bound holds for a correct float32 forward pass and catches a wrong one") {
    Rng rng(1234);
    NetParams net;
    net.sizes = {300, 64, 10};
    for (size_t l = 0; l < 2; ++l) {
        std::vector<float> W(size_t(net.sizes[l + 1]) * net.sizes[l]), b(net.sizes[l + 1]);
        for (auto& w : W) w = rng.uniform(-0.2f, 0.2f);
        for (auto& x : b) x = rng.uniform(-0.1f, 0.1f);
        net.W.push_back(W);
        net.b.push_back(b);
    }
    const unsigned B = 16;
    std::vector<float> X(size_t(B) * 300);
    for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
    RefForward ref = ref_forward(net, X, B);
    const Bounded& Y = ref.acts.back();

    std::vector<float> good = forward_f32(net, X, B, false);
    size_t good_fail = 0;
    for (size_t i = 0; i < good.size(); ++i) good_fail += !within_bound(good[i], Y.v[i], Y.e[i]);
    CHECK(good_fail == 0);

    std::vector<float> bad = forward_f32(net, X, B, true);
    size_t bad_fail = 0;
    for (size_t i = 0; i < bad.size(); ++i) bad_fail += !within_bound(bad[i], Y.v[i], Y.e[i]);
    CHECK(bad_fail > bad.size() / 2);

    // The bound is tight enough to notice a one-ulp nudge of an exact product.
    CHECK_FALSE(within_bound(1.0f + 0x1p-23f, 1.0, 0.0));
    CHECK_FALSE(within_bound(std::nanf(""), 1.0, 1.0));
}

TEST_CASE("reference: gather") {
    Bounded g = ref_gather({1, 2, 3, 4, 5, 6}, {2, 0}, 2);
    CHECK(g.v == std::vector<double>{5, 6, 1, 2});
    CHECK(g.e == std::vector<double>{0, 0, 0, 0});
}
