// The float64 reference: a hand-checked training run, and error bounds that hold
// for a correct float32 computation and fail for a wrong one.
#include "ref_optim.hpp"
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
    RefFusedStep r = ref_fused_step(net, X, T, 2, kLossDiff, 0.5f);
    check_all(r.A.v, {0, 2, 0, 1});
    check_all(r.Y.v, {0, 4, 0, 2});
    // The batch means of the test above, exactly (every product and sum is exact).
    check_all(r.GW1.v, {0, 0, 3, 8});
    check_all(r.Gb1.v, {0, 5});
    check_all(r.GW2.v, {0, -0.5, 0, 4});
    check_all(r.Gb2.v, {-0.5, 2.5});
    // Unit 0 is off with z = -1 and -1: far from the kink, so every bound is finite and small.
    for (const Bounded* b : {&r.A, &r.Y, &r.GW1, &r.Gb1, &r.GW2, &r.Gb2})
        for (size_t i = 0; i < b->size(); ++i) {
            CHECK(std::isfinite(b->e[i]));
            CHECK(b->e[i] <= 1e-5 * (1.0 + std::fabs(b->v[i])));
        }
    // Plain SGD on that gradient is the hand-checked update; 0.1f is not 0.1: compare with
    // the float lr, to 1e-12.
    OptimConfig o;
    o.kind = OptimKind::Sgd;
    StepHyper h{0.1f, 0.1f, 1.0f, 1.0f};
    Bounded G;
    for (const Bounded* g : {&r.GW1, &r.Gb1, &r.GW2, &r.Gb2}) {
        G.v.insert(G.v.end(), g->v.begin(), g->v.end());
        G.e.insert(G.e.end(), g->e.begin(), g->e.end());
    }
    std::vector<float> P;
    for (int l = 0; l < 2; ++l) {
        P.insert(P.end(), net.W[size_t(l)].begin(), net.W[size_t(l)].end());
        P.insert(P.end(), net.b[size_t(l)].begin(), net.b[size_t(l)].end());
    }
    RefOptim after = ref_optim_bounded(o, h, P, G, {}, {});
    const double lr = 0.1f;
    const std::vector<double> want = {1,           -1,         0.5 - lr * 3, 0.5 - lr * 8, 0,  0.5 - lr * 5,
                                      1,           lr * 0.5,   -1,           2 - lr * 4,   lr * 0.5, -lr * 2.5};
    for (size_t i = 0; i < want.size(); ++i) {
        CHECK(after.P.v[i] == doctest::Approx(want[i]).epsilon(1e-12));
        CHECK(after.P.e[i] <= 1e-5 * (1.0 + std::fabs(after.P.v[i])));
    }
    // A pre-activation of exactly 0 sits at the kink: the W1 row and b1 of that unit are not comparable.
    net.b[0] = {1, 0.5f};  // z of unit 0 for sample 0: 1 - 2 + 1 = 0
    RefFusedStep k = ref_fused_step(net, X, T, 2, kLossDiff, 0.5f);
    CHECK(std::isinf(k.GW1.e[0]));
    CHECK(std::isinf(k.Gb1.e[0]));
    CHECK(std::isfinite(k.GW1.e[2]));
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

// ---- Loss code 1: the softmax cross-entropy delta, and fused_grad --------------------------

namespace {
// The kernels' softmax sequence in float32 (grad.ptx, fused.ptx), with ex2.approx emulated as
// 2^z rounded to float and then moved by `nudge[o]` ulps (|nudge| <= 2: the PTX ISA's stated
// worst case). The broken variants: no max subtracted; the largest exponential left out of the sum.
std::vector<float> softmax_delta_f32(const std::vector<float>& y, const std::vector<float>& t,
                                     const std::vector<int>& nudge, bool subtract_max = true, bool drop_max = false) {
    const size_t O = y.size();
    float m = y[0];
    size_t top = 0;
    for (size_t o = 1; o < O; ++o)
        if (y[o] > m) m = y[o], top = o;
    if (!subtract_max) m = 0.0f;
    std::vector<float> e(O), d(O);
    float sum = 0.0f;
    for (size_t o = 0; o < O; ++o) {
        volatile float diff = y[o] - m;                 // sub.rn
        volatile float z = diff * 0x1.715476p0f;         // mul.rn by 0f3FB8AA3B
        float v = float(std::exp2(double(z)));          // 2^z, rounded once
        for (int k = 0; k < std::abs(nudge[o]); ++k) v = std::nextafter(v, nudge[o] > 0 ? INFINITY : 0.0f);
        e[o] = v;
        if (!(drop_max && o == top)) sum += v;           // add.rn from +0, o in order
    }
    for (size_t o = 0; o < O; ++o) {
        volatile float p = e[o] / sum;                   // div.rn
        d[o] = p - t[o];                                 // sub.rn
    }
    return d;
}
}  // namespace

TEST_CASE("reference: the softmax cross-entropy delta matches the hand computation") {
    // y = [0, 1, 2]: softmax = e^k / (1 + e + e^2) = [0.0900305732, 0.2447284711, 0.6652409558].
    const double y[3] = {0, 1, 2}, ey[3] = {0, 0, 0};
    const float t[3] = {0, 0, 1};
    double d[3], ed[3];
    ref_output_delta(kLossSoftmax, y, ey, t, 3, d, ed);
    CHECK(d[0] == doctest::Approx(0.0900305732).epsilon(1e-9));
    CHECK(d[1] == doctest::Approx(0.2447284711).epsilon(1e-9));
    CHECK(d[2] == doctest::Approx(0.6652409558 - 1.0).epsilon(1e-9));
    for (int o = 0; o < 3; ++o) {
        CHECK(ed[o] > 0.0);
        CHECK(ed[o] < 1e-6);  // tight: a few tens of float32 roundings
    }
    // Softmax does not move under a common shift, and the bound stays small.
    const double ys[3] = {100, 101, 102};
    double ds[3], eds[3];
    ref_output_delta(kLossSoftmax, ys, ey, t, 3, ds, eds);
    for (int o = 0; o < 3; ++o) {
        CHECK(ds[o] == doctest::Approx(d[o]).epsilon(1e-12));
        CHECK(eds[o] < 1e-5);
    }
    // Code 0 is y - t, one rounding.
    ref_output_delta(kLossDiff, y, ey, t, 3, d, ed);
    CHECK(d[0] == 0.0);
    CHECK(d[1] == 1.0);
    CHECK(d[2] == 1.0);
    CHECK(ed[1] == doctest::Approx(0x1p-24));

    // ref_fused_output with loss 1: H = 1, A = [1], W = [1, 1, 1], b = [-1, 0, 1] gives y = [0, 1, 2]
    // and D1 = sum_o d_o W[o][0] = sum softmax - 1 = 0.
    RefFusedOutput r = ref_fused_output({1}, {1, 1, 1}, {-1, 0, 1}, {0, 0, 1}, 1, 1, 3, kLossSoftmax);
    check_all(r.Y.v, {0, 1, 2});
    CHECK(r.D2.v[0] == doctest::Approx(0.0900305732).epsilon(1e-9));
    CHECK(r.D2.v[2] == doctest::Approx(0.6652409558 - 1.0).epsilon(1e-9));
    CHECK(std::fabs(r.D1.v[0]) < 1e-15);
    CHECK(r.D1.e[0] > 0.0);
    CHECK(r.D1.e[0] < 1e-5);  // Y's bound gamma(H + 6) passes through the softmax into every d_o
}

TEST_CASE("reference: ref_grad with the softmax delta is the hand-computed per-sample gradient") {
    // The 2-2-2 net of the SGD test, x = [1, 2], t = [0, 1]: a1 = [0, 2], y = [0, 4].
    // softmax(y) = [1, e^4] / (1 + e^4) = [0.0179862100, 0.9820137900]: d2 = [q, -q], q = 0.0179862100;
    // gW2 = d2 (x) a1 = [[0, 2q], [0, -2q]]; W2^T d2 = [q + q, -2q], masked by a1 > 0: d1 = [0, -2q];
    // gW1 = d1 (x) x = [[0, 0], [-2q, -4q]].
    NetParams net;
    net.sizes = {2, 2, 2};
    net.W = {{1, -1, 0.5f, 0.5f}, {1, 0, -1, 2}};
    net.b = {{0, 0.5f}, {0, 0}};
    const double q = 1.0 / (1.0 + std::exp(4.0));
    RefGrad g = ref_grad(net, {1, 2}, {0, 1}, 1, kLossSoftmax);
    check_all(g.fwd.acts[1].v, {0, 4});
    check_all(g.gb[1].v, {q, -q});
    check_all(g.gW[1].v, {0, 2 * q, 0, -2 * q});
    check_all(g.gb[0].v, {0, -2 * q});
    check_all(g.gW[0].v, {0, 0, -2 * q, -4 * q});
    for (const Bounded* b : {&g.gb[1], &g.gW[1], &g.gb[0], &g.gW[0]})
        for (size_t i = 0; i < b->size(); ++i) {
            CHECK(std::isfinite(b->e[i]));
            // d2[1] = p - 1 with p = 0.98 near 1: the kernel's p carries tens of roundings of 0.98
            // (about 1e-6 absolute), which the small delta inherits.
            CHECK(b->e[i] <= 1e-5 * (1.0 + std::fabs(b->v[i])));
        }
    // Code 0 on the same sample: d2 = y - t = [0, 3], as in the SGD test.
    RefGrad g0 = ref_grad(net, {1, 2}, {0, 1}, 1, kLossDiff);
    check_all(g0.gb[1].v, {0, 3});
}

TEST_CASE("reference: the softmax bound holds for the kernels' float32 sequence at ex2's worst case, and "
          "catches a missing max or a short sum") {
    Rng rng(77);
    const unsigned O = 10;
    size_t checked = 0, fail = 0, fail_no_max = 0, fail_short = 0;
    double worst = 0.0;  // the largest bound of p = d + t relative to u * max(p, 2^-126), exact logits
    for (int shift : {0, 100, -60})
        for (int rep = 0; rep < 300; ++rep) {
            // Logits the kernel computed (y-hat, float) and the float64 ones (y*): |y-hat - y*| <= ey.
            std::vector<float> yh(O), t(O, 0.0f);
            std::vector<double> ys(O), ey(O);
            const bool exact = rep % 2 == 0;  // half exact logits, half with a propagated error
            for (unsigned o = 0; o < O; ++o) {
                ys[o] = shift + rng.uniform(-8.0f, 8.0f);
                ey[o] = exact ? 0.0 : 1e-5 * rng.uniform(0.0f, 1.0f);
                yh[o] = float(ys[o] + ey[o] * rng.uniform(-1.0f, 1.0f));
                if (exact || std::fabs(double(yh[o]) - ys[o]) > ey[o]) ys[o] = yh[o];  // keep |y-hat - y*| <= ey
            }
            t[rng.below(O)] = 1.0f;
            std::vector<int> nudge(O);
            for (auto& n : nudge) n = int(rng.below(5)) - 2;  // -2 .. +2 ulps
            std::vector<double> d(O), ed(O);
            ref_output_delta(kLossSoftmax, ys.data(), ey.data(), t.data(), O, d.data(), ed.data());
            const auto good = softmax_delta_f32(yh, t, nudge);
            const auto no_max = softmax_delta_f32(yh, t, nudge, false);
            const auto short_sum = softmax_delta_f32(yh, t, nudge, true, true);
            bool bad_nm = false, bad_ss = false;
            for (unsigned o = 0; o < O; ++o) {
                ++checked;
                fail += !within_bound(good[o], d[o], ed[o]);
                bad_nm |= !within_bound(no_max[o], d[o], ed[o]);
                bad_ss |= !within_bound(short_sum[o], d[o], ed[o]);
                const double ep = (ed[o] - 0x1p-24 * std::fabs(d[o])) / (1 + 0x1p-24);  // without the rounding of - t
                if (exact) worst = std::max(worst, ep / (0x1p-24 * std::max(d[o] + t[o], 0x1p-126)));
            }
            fail_no_max += bad_nm;
            fail_short += bad_ss;
        }
    INFO("worst bound of an exact-logit sample: ", worst, " u p");
    CHECK(checked == 3 * 300 * O);
    CHECK(fail == 0);
    CHECK(fail_no_max >= 300);  // at shift 100 the exponentials overflow: NaN
    CHECK(fail_short == 900);   // every sample misses the bound without its largest term
    CHECK(worst < 64.0);        // and the bound is tight: tens of roundings (ex2 at +-20 ulps breaks it)
}

TEST_CASE("reference: fused_grad's reference is scale times the batch sum, with a tight bound") {
    // L = D [B = 2][rows = 1] = [1, -2]; R [2][cols = 2] = [[1, 2], [3, 4]]; scale 0.5:
    // G = 0.5 (1 [1, 2] - 2 [3, 4]) = [-2.5, -3]; Gb = 0.5 (1 - 2) = -0.5.
    Bounded G, Gb;
    ref_fused_grad(G, Gb, {1, -2}, {1, 2, 3, 4}, 2, 1, 2, 0.5f);
    check_all(G.v, {-2.5, -3});
    check_all(Gb.v, {-0.5});
    for (const Bounded* b : {&G, &Gb})
        for (size_t i = 0; i < b->size(); ++i) {
            CHECK(b->e[i] > 0.0);
            CHECK(b->e[i] <= 8 * 0x1p-24 * 8.0);  // gamma(4) of the magnitudes (<= 11) scaled, plus one rounding
        }
    // A float32 sum in the kernel's order (four chains, then (c0 + c1) + (c2 + c3)) times the
    // scale lies within the bound; one moved by twice the bound does not.
    Rng rng(5);
    const unsigned B = 37, rows = 3, cols = 5;
    std::vector<float> L(B * rows), R(B * cols);
    for (auto& x : L) x = rng.uniform(-1.0f, 1.0f);
    for (auto& x : R) x = rng.uniform(0.0f, 1.0f);
    const float scale = 1.0f / B;
    ref_fused_grad(G, Gb, L, R, B, rows, cols, scale);
    size_t fail = 0, caught = 0;
    for (unsigned r = 0; r < rows; ++r)
        for (unsigned c = 0; c <= cols; ++c) {
            float acc[4] = {0, 0, 0, 0};
            for (unsigned s = 0; s < B; ++s)
                acc[s % 4] = std::fma(L[s * rows + r], c == cols ? 1.0f : R[s * cols + c], acc[s % 4]);
            const float sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
            const float g = sum * scale;
            const double ref = c == cols ? Gb.v[r] : G.v[r * cols + c];
            const double bound = c == cols ? Gb.e[r] : G.e[r * cols + c];
            fail += !within_bound(g, ref, bound);
            caught += !within_bound(g + float(bound * 2 + 1e-6), ref, bound);
        }
    CHECK(fail == 0);
    CHECK(caught == rows * (cols + 1));
}
