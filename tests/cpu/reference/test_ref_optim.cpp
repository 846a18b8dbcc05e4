// The float64 reference of batch_mean and the optimizer kernels (host/reference/ref_optim.hpp):
// hand-computed values on tiny inputs (every value exact in float32), and bounds that
// hold for a float32 emulation of the kernels' instruction sequences and catch a wrong one.
#include "ref_optim.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

using namespace ptxlab;

namespace {
void check_values(const Bounded& got, const std::vector<double>& want) {
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        CAPTURE(i);
        CHECK(got.v[i] == doctest::Approx(want[i]).epsilon(1e-15));
        // Every bound is finite and within a few roundings of the value's size.
        CHECK(std::isfinite(got.e[i]));
        CHECK(got.e[i] <= 1e-6 * (1.0 + std::fabs(want[i])));
    }
}

StepHyper hyper(float lr, float step_size, float bc2_sqrt, float decay) {
    StepHyper h;
    h.lr = lr;
    h.step_size = step_size;
    h.bc2_sqrt = bc2_sqrt;
    h.decay = decay;
    return h;
}
}  // namespace

TEST_CASE("ref_optim: batch_mean is the scaled batch sum") {
    // Gs[b][i], B = 3, N = 2: sums 3 and -0.75; scale 0.5.
    const std::vector<float> Gs = {0.5f, 1.0f, 1.5f, -1.0f, 1.0f, -0.75f};
    Bounded g = ref_batch_mean(Gs, 2, 3, 0.5f);
    check_values(g, {1.5, -0.375});
    // gamma_2 (two rounded adds after the exact +0 + Gs[0][i]) of the magnitudes (3 and 2.75),
    // times the scale, plus one rounding.
    const double u = 0x1p-24, g2 = 2 * u / (1 - 2 * u);
    CHECK(g.e[0] == doctest::Approx(g2 * 3 * 0.5 + u * (1.5 + g2 * 3 * 0.5)).epsilon(1e-12));
    CHECK(g.e[1] == doctest::Approx(g2 * 2.75 * 0.5 + u * (0.375 + g2 * 2.75 * 0.5)).epsilon(1e-12));
    // The float32 sum of a long row in batch order is within the bound; the sum without its
    // last row (tests/fixtures/planted/mean_skips_last_row.patch) is not.
    {
        Rng rng(3);
        const unsigned B = 1000;
        std::vector<float> col(B);
        for (auto& x : col) x = rng.uniform(-1.0f, 1.0f);
        float sum = 0.0f, short_sum = 0.0f;
        for (unsigned b = 0; b < B; ++b) {
            sum += col[b];
            if (b + 1 < B) short_sum += col[b];
        }
        Bounded r = ref_batch_mean(col, 1, B, 1.0f / B);
        CHECK(within_bound(sum * (1.0f / B), r.v[0], r.e[0]));
        CHECK_FALSE(within_bound(short_sum * (1.0f / B), r.v[0], r.e[0]));
    }
    // One row: the sum is exact, only the scale rounds.
    Bounded one = ref_batch_mean({3.0f}, 1, 1, 0.25f);
    check_values(one, {0.75});
    CHECK(one.e[0] == doctest::Approx(u * 0.75).epsilon(1e-12));
}

TEST_CASE("ref_optim: SGD, momentum and Nesterov match the hand computation") {
    const std::vector<float> P = {1.0f, -2.0f}, G = {0.5f, 0.25f}, M = {0.5f, -1.0f};
    const StepHyper h = hyper(0.5f, 0.0f, 0.0f, 0.0f);
    SUBCASE("plain: p -= lr g, no state") {
        RefOptim r = ref_optim_sgd(P, G, {}, h, 0.0f, 0.0f, false);
        check_values(r.P, {0.75, -2.125});
        CHECK(r.M.size() == 0);
    }
    SUBCASE("plain with weight decay: g' = g + wd p = [0.75, -0.25]") {
        RefOptim r = ref_optim_sgd(P, G, {}, h, 0.0f, 0.25f, false);
        check_values(r.P, {0.625, -1.875});
    }
    SUBCASE("momentum: m = mu m + g = [0.75, -0.25], p -= lr m") {
        RefOptim r = ref_optim_sgd(P, G, M, h, 0.5f, 0.0f, false);
        check_values(r.M, {0.75, -0.25});
        check_values(r.P, {0.625, -1.875});
    }
    SUBCASE("nesterov with weight decay: m = [1, -0.75], p -= lr (g' + mu m) = lr [1.25, -0.625]") {
        RefOptim r = ref_optim_sgd(P, G, M, h, 0.5f, 0.25f, true);
        check_values(r.M, {1.0, -0.75});
        check_values(r.P, {0.375, -1.6875});
    }
}

TEST_CASE("ref_optim: Adam and AdamW match the hand computation") {
    // beta1 0.5, beta2 0.75, eps 0; step_size 0.5, bc2_sqrt 0.5, decay 0.75.
    const std::vector<float> P = {1.0f}, G = {0.5f}, M = {0.25f}, V = {0.25f};
    const StepHyper h = hyper(0.1f, 0.5f, 0.5f, 0.75f);
    SUBCASE("adam: m = 0.375, v = 0.25, denom = 0.5 / 0.5 = 1") {
        RefOptim r = ref_optim_adam(P, G, M, V, h, 0.5f, 0.75f, 0.0f, 0.0f, false);
        check_values(r.M, {0.375});
        check_values(r.V, {0.25});
        check_values(r.P, {1.0 - 0.5 * 0.375});
    }
    SUBCASE("adam with weight decay: g' = 1, m = 0.625, v = 0.4375") {
        RefOptim r = ref_optim_adam(P, G, M, V, h, 0.5f, 0.75f, 0.0f, 0.5f, false);
        check_values(r.M, {0.625});
        check_values(r.V, {0.4375});
        check_values(r.P, {1.0 - 0.5 * 0.625 / (std::sqrt(0.4375) / 0.5)});
    }
    SUBCASE("adamw: p = 0.75 first, the gradient untouched") {
        RefOptim r = ref_optim_adam(P, G, M, V, h, 0.5f, 0.75f, 0.0f, 0.5f, true);
        check_values(r.M, {0.375});
        check_values(r.V, {0.25});
        check_values(r.P, {0.75 - 0.5 * 0.375});
    }
    SUBCASE("eps is added after the bias correction") {
        RefOptim r = ref_optim_adam(P, G, M, V, h, 0.5f, 0.75f, 0.25f, 0.0f, false);
        check_values(r.P, {1.0 - 0.5 * 0.375 / 1.25});
    }
}

TEST_CASE("ref_optim: RMSprop matches the hand computation") {
    // alpha 0.75, lr 0.5.
    const std::vector<float> P = {1.0f}, G = {0.5f}, V = {0.25f};
    const StepHyper h = hyper(0.5f, 0.0f, 0.0f, 0.0f);
    SUBCASE("plain: v = 0.25, p -= lr g / sqrt(v)") {
        RefOptim r = ref_optim_rmsprop(P, G, V, h, 0.75f, 0.0f, 0.0f);
        check_values(r.V, {0.25});
        check_values(r.P, {0.5});
        CHECK(r.M.size() == 0);
    }
    SUBCASE("with weight decay and eps: g' = 1, v = 0.4375") {
        RefOptim r = ref_optim_rmsprop(P, G, V, h, 0.75f, 0.125f, 0.5f);
        check_values(r.V, {0.4375});
        check_values(r.P, {1.0 - 0.5 / (std::sqrt(0.4375) + 0.125)});
    }
}

namespace {
// The kernels' instruction sequences in float32 on the CPU: each operation one IEEE
// round-to-nearest operation (std::fma, std::sqrt and / are correctly rounded; this
// file is compiled without FMA contraction: ISO C++, no -ffp-contract=fast).
struct Emu {
    float p, m, v;
};
using EmuFn = std::function<Emu(float p, float g, float m, float v)>;

// Counts the elements of n random inputs where the emulated result leaves the bound.
struct Misses {
    size_t P = 0, M = 0, V = 0;
};
Misses count_misses(const char* which, const EmuFn& emu, float mu, float wd, bool flag, uint64_t seed) {
    Rng rng(seed);
    const size_t n = 20000;
    std::vector<float> P(n), G(n), M(n), V(n);
    for (size_t i = 0; i < n; ++i) {
        P[i] = rng.uniform(-1.0f, 1.0f);
        G[i] = rng.uniform(-1.0f, 1.0f);
        M[i] = rng.uniform(-0.5f, 0.5f);
        V[i] = rng.uniform(0.0f, 0.5f);
    }
    const float lr = 0.3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, alpha = 0.99f;
    const int t = 7;
    const StepHyper h = hyper(lr, float(lr / (1.0 - std::pow(0.9f, t))), float(std::sqrt(1.0 - std::pow(0.999f, t))),
                              float(1.0 - double(lr) * wd));
    RefOptim r;
    const std::string w = which;
    if (w == "sgd") r = ref_optim_sgd(P, G, mu != 0.0f ? M : std::vector<float>{}, h, mu, wd, flag);
    else if (w == "adam") r = ref_optim_adam(P, G, M, V, h, beta1, beta2, eps, wd, flag);
    else r = ref_optim_rmsprop(P, G, V, h, alpha, eps, wd);
    Misses miss;
    for (size_t i = 0; i < n; ++i) {
        const Emu e = emu(P[i], G[i], M[i], V[i]);
        miss.P += !within_bound(e.p, r.P.v[i], r.P.e[i]);
        if (r.M.size()) miss.M += !within_bound(e.m, r.M.v[i], r.M.e[i]);
        if (r.V.size()) miss.V += !within_bound(e.v, r.V.v[i], r.V.e[i]);
    }
    return miss;
}
}  // namespace

TEST_CASE("ref_optim: the bounds hold for the kernels' float32 sequences and catch wrong ones") {
    const float lr = 0.3f, wd = 0.01f, mu = 0.9f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, alpha = 0.99f;
    const int t = 7;
    const float step_size = float(lr / (1.0 - std::pow(0.9f, t))), bc2 = float(std::sqrt(1.0 - std::pow(0.999f, t)));
    const float decay = float(1.0 - double(lr) * wd);
    const uint64_t seed = 42;

    // optim_sgd, Nesterov with weight decay, as optim.ptx issues it.
    auto nesterov = [&](float p, float g, float m0, float) {
        g = std::fma(wd, p, g);
        const float mm = mu * m0;
        const float m = mm + g;
        g = std::fma(mu, m, g);
        return Emu{std::fma(-lr, g, p), m, 0.0f};
    };
    Misses ok = count_misses("sgd", nesterov, mu, wd, true, seed);
    CHECK(ok.P == 0);
    CHECK(ok.M == 0);
    // The heavy-ball direction where Nesterov was asked for: most parameters miss.
    auto heavy = [&](float p, float g, float m0, float v) {
        Emu e = nesterov(p, g, m0, v);
        e.p = std::fma(-lr, e.m, p);
        return e;
    };
    CHECK(count_misses("sgd", heavy, mu, wd, true, seed).P > 10000);

    // optim_adam (coupled weight decay) and AdamW.
    auto adam = [&](bool decoupled) {
        return [=](float p, float g, float m0, float v0) {
            if (decoupled) p = p * decay;
            else g = std::fma(wd, p, g);
            const float m = std::fma(1.0f - beta1, g - m0, m0);
            const float gg = g * g, vb = v0 * beta2;
            const float v = std::fma(1.0f - beta2, gg, vb);
            const float denom = std::sqrt(v) / bc2 + eps;
            return Emu{std::fma(-step_size, m / denom, p), m, v};
        };
    };
    for (bool decoupled : {false, true}) {
        CAPTURE(decoupled);
        Misses a = count_misses("adam", adam(decoupled), 0.0f, wd, decoupled, seed);
        CHECK(a.P == 0);
        CHECK(a.M == 0);
        CHECK(a.V == 0);
        // The other kind of weight decay: the parameters miss.
        CHECK(count_misses("adam", adam(!decoupled), 0.0f, wd, decoupled, seed).P > 1000);
    }
    // Adam without the second bias correction: every parameter misses.
    auto no_bc2 = [&](float p, float g, float m0, float v0) {
        Emu e = adam(false)(p, g, m0, v0);
        e.p = std::fma(-step_size, e.m / (std::sqrt(e.v) + eps), p);
        return e;
    };
    CHECK(count_misses("adam", no_bc2, 0.0f, wd, false, seed).P > 19000);

    // optim_rmsprop with weight decay.
    auto rms = [&](float p, float g, float, float v0) {
        g = std::fma(wd, p, g);
        const float gg = g * g, vb = v0 * alpha;
        const float v = std::fma(1.0f - alpha, gg, vb);
        return Emu{std::fma(-lr, g / (std::sqrt(v) + eps), p), 0.0f, v};
    };
    Misses r = count_misses("rmsprop", rms, 0.0f, wd, false, seed);
    CHECK(r.P == 0);
    CHECK(r.V == 0);
    // alpha and 1 - alpha swapped in the average: the state misses.
    auto swapped = [&](float p, float g, float, float v0) {
        g = std::fma(wd, p, g);
        const float v = std::fma(alpha, g * g, v0 * (1.0f - alpha));
        return Emu{std::fma(-lr, g / (std::sqrt(v) + eps), p), 0.0f, v};
    };
    CHECK(count_misses("rmsprop", swapped, 0.0f, wd, false, seed).V > 19000);
}

TEST_CASE("ref_optim: a gradient with an infinite bound (a ReLU kink) gives infinite bounds, never NaN") {
    // fused_step's reference passes the bounds of its in-kernel gradient on to the optimizer;
    // a gradient at the ReLU kink has an infinite bound, and 0 * inf must not turn it into NaN.
    const std::vector<float> P = {0.5f, -0.25f, 0.0f}, M = {0.0f, 0.1f, -0.2f}, V = {0.0f, 0.01f, 0.02f};
    Bounded G;
    G.v = {0.0, 0.3, -0.7};
    G.e = {std::numeric_limits<double>::infinity(), 1e-9, std::numeric_limits<double>::infinity()};
    for (OptimKind k : {OptimKind::Sgd, OptimKind::Momentum, OptimKind::Nesterov, OptimKind::Adam, OptimKind::AdamW,
                        OptimKind::RmsProp, OptimKind::NAdam}) {
        CAPTURE(to_string(k));
        OptimConfig o;
        o.kind = k;
        o.weight_decay = 0.01f;
        const StepHyper h = step_hyper(o, 0.1, 3);
        const RefOptim r = ref_optim_bounded(o, h, P, G, M, V);
        for (const Bounded* b : {&r.P, &r.M, &r.V})
            for (size_t i = 0; i < b->size(); ++i) {
                CAPTURE(i);
                CHECK_FALSE(std::isnan(b->e[i]));
                if (i != 1) CHECK(std::isinf(b->e[i]));
                else CHECK(b->e[i] < 1e-6);
            }
        CHECK(r.P.size() == 3);
    }
}
