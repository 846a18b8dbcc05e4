// fc3_step's host side (host/kernels/fc3step.hpp, host/verify/family_fc3step.cpp): its limits and
// launch shape, its verify row and cases, and its float64 reference: the same values as the
// independent per-sample reference (ref_forward, ref_grad), and bounds that hold a float32 model of
// the kernel's summation order (a tensor core that truncates every addition) but not the same
// model with either of two planted slips.
#include "fc3step.hpp"
#include "error.hpp"
#include "kernels.hpp"
#include "reference.hpp"
#include "registry.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace ptxlab;
using namespace ptxlab::verify_detail;

namespace {

// cvt.rna.tf32.f32 on finite values: add half of the 13 dropped bits, then clear them (A1, staged).
float tf32(float x) { return std::bit_cast<float>((std::bit_cast<uint32_t>(x) + 0x1000u) & 0xffffe000u); }
// The tensor core's reading of FP32 bits (X, W1, W2, D2, D1): the 13 low bits ignored.
float trunc_tf32(float x) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffffe000u); }

// a + b rounded toward zero: the tensor core's truncation, the worst case of its additions.
float add_rz(float a, float b) {
    const double d = double(a) + double(b);
    float f = float(d);
    if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    return f;
}

struct ModelStep {
    std::vector<float> Y, G;  // G: W1, b1, W2, b2, W3, b3 back to back, mul.rn by scale
};

// Slips the reference must catch: D1 not masked by A1 > 0; S1's join without rank 1's partial sums
// (the columns 196 .. 391 of X W1^T; tests/fixtures/planted/fc3step_join_skips_rank.patch leaves
// out rank 3's).
enum class Slip { None, UnmaskedD1, JoinSkipsRank1 };

// One step of fc3_step in float32 in the order of fc3step.ptx's header, every TF32 product added
// onto its chain one by one with truncation (the products of TF32 values are exact).
ModelStep model_fc3_step(const NetParams& n, const std::vector<float>& X, const std::vector<float>& T, unsigned B,
                         unsigned loss, float scale, Slip slip = Slip::None) {
    const unsigned I = n.sizes[0], H1 = n.sizes[1], H2 = n.sizes[2], O = n.sizes[3], T2 = (H2 + 15) / 16;
    const auto &W1 = n.W[0], &W2 = n.W[1], &W3 = n.W[2];
    std::vector<float> A1(size_t(B) * H1), A2(size_t(B) * H2), D3(size_t(B) * O), D2(size_t(B) * H2),
        D1(size_t(B) * H1);
    ModelStep m;
    m.Y.resize(size_t(B) * O);
    auto ranks = [](float p[4], float b) { return std::max(((p[0] + p[1]) + p[2]) + p[3] + b, 0.0f); };
    for (unsigned s = 0; s < B; ++s) {
        for (unsigned h = 0; h < H1; ++h) {  // S1: chains E and O over 25 k steps a rank
            float p[4];
            for (unsigned r = 0; r < 4; ++r) {
                const unsigned lo = std::min(196 * r, I), kc = std::min(196 * r + 196, I) - lo;
                float c[2] = {0.0f, 0.0f};
                for (unsigned k = 0; k < 200; ++k)
                    if (k < kc) c[k / 8 % 2] = add_rz(c[k / 8 % 2], trunc_tf32(X[s * I + lo + k]) * trunc_tf32(W1[h * I + lo + k]));
                p[r] = slip == Slip::JoinSkipsRank1 && r == 1 ? 0.0f : c[0] + c[1];
            }
            A1[s * H1 + h] = ranks(p, n.b[0][h]);
        }
        for (unsigned g = 0; g < H2; ++g) {  // S2: one chain over 64 columns of H1 a rank
            float p[4];
            for (unsigned r = 0; r < 4; ++r) {
                p[r] = 0.0f;
                for (unsigned j = std::min(64 * r, H1); j < std::min(64 * r + 64, H1); ++j)
                    p[r] = add_rz(p[r], tf32(A1[s * H1 + j]) * trunc_tf32(W2[g * H1 + j]));
            }
            A2[s * H2 + g] = ranks(p, n.b[1][g]);
        }
        for (unsigned o = 0; o < O; ++o) {  // Y: a tile's fma chain, the tiles in order, the bias
            float y = 0.0f;
            for (unsigned c = 0; c < T2; ++c) {
                float yp = 0.0f;
                for (unsigned g = 16 * c; g < std::min(16 * c + 16, H2); ++g)
                    yp = std::fma(A2[s * H2 + g], W3[o * H2 + g], yp);
                y = c == 0 ? yp : y + yp;
            }
            m.Y[s * O + o] = y + n.b[2][o];
        }
        const float* y = &m.Y[s * O];
        const float mx = *std::max_element(y, y + O);
        float sum = 0.0f;
        for (unsigned o = 0; o < O; ++o) sum += std::exp2((y[o] - mx) * 0x1.715476p0f);
        for (unsigned o = 0; o < O; ++o)
            D3[s * O + o] = (loss == 1 ? std::exp2((y[o] - mx) * 0x1.715476p0f) / sum : y[o]) - T[s * O + o];
        for (unsigned g = 0; g < H2; ++g) {
            float d = 0.0f;
            for (unsigned o = 0; o < O; ++o) d = std::fma(D3[s * O + o], W3[o * H2 + g], d);
            D2[s * H2 + g] = A2[s * H2 + g] > 0.0f ? d : 0.0f;
        }
        for (unsigned h = 0; h < H1; ++h) {  // D1: a tile's mma chain, the tiles in order
            float d = 0.0f;
            for (unsigned c = 0; c < T2; ++c) {
                float part = 0.0f;
                for (unsigned g = 16 * c; g < std::min(16 * c + 16, H2); ++g)
                    part = add_rz(part, trunc_tf32(D2[s * H2 + g]) * trunc_tf32(W2[g * H1 + h]));
                d = c == 0 ? part : d + part;
            }
            D1[s * H1 + h] = slip == Slip::UnmaskedD1 || A1[s * H1 + h] > 0.0f ? d : 0.0f;
        }
    }
    // Gradients: rows of L against columns of R over the samples (rr given: the mma chains, L
    // truncated and R through rr; else fma.rn, or add.rn for a bias), then mul.rn by scale.
    using Round = float (*)(float);
    auto grads = [&](const std::vector<float>& L, unsigned rows, const std::vector<float>* R, unsigned cols, Round rr) {
        for (unsigned row = 0; row < rows; ++row)
            for (unsigned col = 0; col < cols; ++col) {
                float c = 0.0f;
                for (unsigned s = 0; s < B; ++s) {
                    const float l = L[s * rows + row];
                    if (!R) c += l;
                    else if (rr) c = add_rz(c, trunc_tf32(l) * rr((*R)[s * cols + col]));
                    else c = std::fma(l, (*R)[s * cols + col], c);
                }
                m.G.push_back(c * scale);
            }
    };
    grads(D1, H1, &X, I, trunc_tf32);
    grads(D1, H1, nullptr, 1, nullptr);
    grads(D2, H2, &A1, H1, tf32);
    grads(D2, H2, nullptr, 1, nullptr);
    grads(D3, O, &A2, H2, nullptr);
    grads(D3, O, nullptr, 1, nullptr);
    return m;
}

size_t outside(const std::vector<float>& got, const Bounded& ref) {
    size_t k = 0;
    for (size_t i = 0; i < got.size(); ++i) k += !within_bound(got[i], ref.v[i], ref.e[i]);
    return k;
}

struct Inputs {
    NetParams net;
    std::vector<float> X, T;
};
// A random network and batch. tf32_exact: X of 0s and 1s, W1 multiples of 1/8 and b1 odd multiples
// of 1/16 (so that fc1's sums, and A1, are exact in TF32 and never 0) and W2 rounded to TF32: the
// kernel's products then take every input as it is.
Inputs random_inputs(const std::vector<unsigned>& sizes, unsigned B, uint64_t seed, bool tf32_exact = false) {
    Rng rng(seed);
    Inputs in{random_net(rng, sizes), random_vector(rng, size_t(B) * sizes[0], 0.0f, 1.0f),
              random_targets(rng, B, sizes[3])};
    if (tf32_exact) {
        for (float& x : in.X) x = x < 0.5f ? 0.0f : 1.0f;
        for (float& x : in.net.W[0]) x = float(int(rng.below(9)) - 4) / 8;
        for (float& x : in.net.b[0]) x = float(int(rng.below(9)) - 4) / 8 + 1.0f / 16;  // z1 never 0: no kink
        for (float& x : in.net.W[1]) x = tf32(x);
    }
    return in;
}

}  // namespace

TEST_CASE("fc3_step: its limits, its launch shape and its entry") {
    CHECK(fc3_step_unfit(64, 784, 256, 128, 16).empty());
    CHECK(fc3_step_unfit(1, 1, 1, 1, 1).empty());
    CHECK(fc3_step_unfit(65, 784, 256, 128, 10).find("B <= 64") != std::string::npos);
    CHECK(fc3_step_unfit(64, 785, 256, 128, 10).find("I <= 784") != std::string::npos);
    CHECK(fc3_step_unfit(64, 784, 257, 128, 10).find("H1 <= 256") != std::string::npos);
    CHECK(fc3_step_unfit(64, 784, 256, 129, 10).find("H2 <= 128") != std::string::npos);
    CHECK(fc3_step_unfit(64, 784, 256, 128, 17).find("O <= 16") != std::string::npos);
    CHECK(fc3_step_unfit(64, 784, 256, 129, 10).find("got B=64 I=784 H1=256 H2=129 O=10") != std::string::npos);
    for (const auto& z : std::vector<std::vector<unsigned>>{
             {0, 784, 256, 128, 10}, {64, 0, 256, 128, 10}, {64, 784, 0, 128, 10}, {64, 784, 256, 0, 10},
             {64, 784, 256, 128, 0}})
        CHECK(fc3_step_unfit(z[0], z[1], z[2], z[3], z[4]).find(">= 1") != std::string::npos);
    // G = max(ceil(H1/16), ceil(H2/16)) clusters of 4.
    CHECK(fc3_step_clusters(256, 128) == 16);
    CHECK(fc3_step_clusters(16, 128) == 8);
    CHECK(fc3_step_clusters(256, 16) == 16);
    CHECK(fc3_step_clusters(72, 40) == 5);
    CHECK(fc3_step_clusters(17, 1) == 2);
    CHECK(fc3_step_clusters(1, 1) == 1);
    // The entry's parameters as the header's C signature gives them.
    using namespace kernel_params;
    const KernelSpec& s = kernel_spec("fc3_step");
    CHECK(s.file == "fc3step");
    CHECK(s.params == std::vector<ParamKind>{P, P, P, P, P, P, P, P, U, U, U, U, U, U, U, F, U, F, F, F, F, F, F});
}

TEST_CASE("fc3_step: its verify row, cases and bench shape") {
    CHECK(shape_names("fc3_step") == "B,I,H1,H2,O,loss,optim");
    CHECK(shape_text({"fc3_step", {64, 784, 256, 128, 10, 1, 2}}) ==
          "B=64 I=784 H1=256 H2=128 O=10 loss=1 optim=2 (nesterov)");
    CHECK_NOTHROW(validate_case({"fc3_step", {64, 784, 256, 128, 16, 1, 6}}));
    CHECK_THROWS_WITH_AS(validate_case({"fc3_step", {64, 784, 257, 128, 10, 1, 2}}), doctest::Contains("H1 <= 256"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"fc3_step", {64, 784, 256, 128, 10, 2, 2}}), doctest::Contains("loss code"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"fc3_step", {64, 784, 256, 128, 10, 1, 7}}),
                         doctest::Contains("6 nadam, got 7"), InputError);
    CHECK_THROWS_WITH_AS(validate_case({"fc3_step", {64, 784, 256, 128, 10, 1}}),
                         doctest::Contains("(7 numbers), got 6"), InputError);
    size_t n = 0, sgd = 0;
    for (const auto& c : default_cases())
        if (c.entry == "fc3_step") {
            CHECK_NOTHROW(validate_case(c));
            ++n;
            sgd += c.shape[6] == 0;
        }
    CHECK(n == 11);
    CHECK(sgd == 2);  // the two-step cases
    size_t quick = 0;
    for (const auto& c : quick_cases()) quick += c.entry == "fc3_step";
    CHECK(quick == 1);
    CHECK(kernel_family("fc3step").files == std::vector<std::string>{"fc3step"});
    const KernelRow& row = kernel_row("fc3_step");
    CHECK(row.bench_shape(64) == std::vector<unsigned>{64, 784, 256, 128, 10, 1, 2});
    CHECK(row.bench_shape(1).has_value());
    CHECK(!row.bench_shape(65).has_value());
    const auto [bytes, flops] = row.work({"fc3_step", *row.bench_shape(64)});
    CHECK(bytes > 4.0 * 4 * (784 * 256 + 256 * 128));  // the parameters and m, read and written
    CHECK(flops > 2.0 * 64 * 2 * (784 * 256 + 256 * 128 + 128 * 10));
}

TEST_CASE("fc3_step: the harness runs plain SGD for two steps, the first with lr 0, the others for one") {
    Rng rng(7);
    const Harness h = kernel_row("fc3_step").harness({"fc3_step", {9, 100, 40, 20, 5, 1, 0}}, rng);
    auto find = [&](const char* name) -> const Tensor* {
        for (const auto& t : h.tensors)
            if (t.name == name) return &t;
        return nullptr;
    };
    REQUIRE(find("hyp") != nullptr);
    CHECK(find("hyp")->data.size() == 8);
    CHECK(find("hyp")->data[0] == 0.0f);  // lr of the first step
    CHECK(find("hyp")->data[4] > 0.0f);
    CHECK(find("X")->count() == 2 * 9 * 100);
    CHECK(find("T")->count() == 2 * 9 * 5);
    CHECK(find("Y")->role == Role::Out);
    CHECK(h.expected.at("Y").size() == 2 * 9 * 5);
    CHECK(find("M") == nullptr);
    CHECK(find("V") == nullptr);
    REQUIRE(find("work") != nullptr);
    CHECK(find("work")->count() * 4 == kFc3StepWorkBytes);
    CHECK(std::all_of(find("work")->data.begin(), find("work")->data.end(), [](float x) { return x == 0.0f; }));
    const size_t np = 40 * 100 + 40 + 20 * 40 + 20 + 5 * 20 + 5;
    CHECK(find("P")->count() == np);
    CHECK(find("P")->parts.size() == 6);
    CHECK(find("P")->parts[5].name == "fc3.bias");
    CHECK(find("P")->parts[5].offset == np - 5);
    const Harness adam = kernel_row("fc3_step").harness({"fc3_step", {5, 13, 9, 3, 3, 0, 3}}, rng);
    size_t state = 0;
    for (const auto& t : adam.tensors) {
        if (t.name == "hyp") CHECK(t.count() == 4);
        state += (t.name == "M" || t.name == "V") && t.role == Role::InOut;
    }
    CHECK(state == 2);
    CHECK(adam.expected.count("M") == 1);
    CHECK(adam.expected.count("V") == 1);
}

// On inputs that TF32 leaves as they are, the reference's values (which take the products of TF32
// inputs where it knows them, and the middle of tf32(A1)'s range) are the network's exact maths.
TEST_CASE("fc3_step: the float64 reference's values are the per-sample reference's") {
    for (unsigned loss : {kLossDiff, kLossSoftmax}) {
        CAPTURE(loss);
        const std::vector<unsigned> sizes = {13, 9, 21, 3};
        const unsigned B = 5;
        const Inputs in = random_inputs(sizes, B, 11 + loss, true);
        const float scale = 0.37f;
        const Fc3Ref r = ref_fc3_step(in.net, in.X.data(), in.T.data(), B, loss, scale);
        const RefForward f = ref_forward(in.net, in.X, B);
        REQUIRE(r.Y.size() == f.acts[2].size());
        for (size_t i = 0; i < r.Y.size(); ++i) CHECK(r.Y.v[i] == doctest::Approx(f.acts[2].v[i]).epsilon(1e-12));
        // The mean gradient: scale * the sum over the samples of ref_grad's per-sample gradients.
        const RefGrad g = ref_grad(in.net, in.X, in.T, B, loss);
        std::vector<double> want;
        for (size_t l = 0; l < 3; ++l)
            for (const Bounded* per : {&g.gW[l], &g.gb[l]}) {
                const size_t n = per->size() / B;
                for (size_t i = 0; i < n; ++i) {
                    double sum = 0.0;
                    for (unsigned s = 0; s < B; ++s) sum += per->v[s * n + i];
                    want.push_back(double(scale) * sum);
                }
            }
        REQUIRE(r.G.size() == want.size());
        size_t nonzero = 0;
        for (size_t i = 0; i < want.size(); ++i) {
            CAPTURE(i);
            CHECK(r.G.v[i] == doctest::Approx(want[i]).epsilon(1e-10).scale(1e-12));
            nonzero += want[i] != 0.0;
        }
        CHECK(nonzero > want.size() / 4);
    }
}

TEST_CASE("fc3_step: a float32 model of its sums is within the reference's bounds, two slips are not") {
    struct Case {
        std::vector<unsigned> sizes;
        unsigned B, loss;
    };
    for (const Case& c : {Case{{300, 72, 40, 7}, 37, 1}, Case{{13, 9, 3, 3}, 5, 0}, Case{{784, 48, 20, 10}, 64, 1}}) {
        CAPTURE(c.sizes[0]);
        const Inputs in = random_inputs(c.sizes, c.B, 3);
        const float scale = grad_scale(c.loss == 1 ? Loss::Ce : Loss::Mse, c.B, c.sizes[3]);
        const Fc3Ref r = ref_fc3_step(in.net, in.X.data(), in.T.data(), c.B, c.loss, scale);
        const ModelStep m = model_fc3_step(in.net, in.X, in.T, c.B, c.loss, scale);
        REQUIRE(m.G.size() == r.G.size());
        CHECK(outside(m.Y, r.Y) == 0);
        CHECK(outside(m.G, r.G) == 0);
        // Every bound finite (a unit at the ReLU kink widens its deltas' bounds and keeps them
        // compared) and not vacuous: the median bound of Y within 1% of its value, of the nonzero
        // gradients within 10%.
        auto median_rel = [](const Bounded& b) {
            std::vector<double> q;
            for (size_t i = 0; i < b.size(); ++i)
                if (b.v[i] != 0.0) q.push_back(b.e[i] / std::fabs(b.v[i]));
            std::sort(q.begin(), q.end());
            return q.empty() ? 0.0 : q[q.size() / 2];
        };
        for (size_t i = 0; i < r.G.size(); ++i) CHECK(std::isfinite(r.G.e[i]));
        CHECK(median_rel(r.Y) < 0.01);
        CHECK(median_rel(r.G) < 0.1);
        // D1 without the mask A1 > 0: fc1's gradient leaves the bounds where units are off.
        const ModelStep bad = model_fc3_step(in.net, in.X, in.T, c.B, c.loss, scale, Slip::UnmaskedD1);
        const size_t fc1 = size_t(c.sizes[1]) * (c.sizes[0] + 1);
        CHECK(outside(std::vector<float>(bad.G.begin(), bad.G.begin() + fc1), r.G) > fc1 / 10);
        // S1's join without rank 1 (which has columns where I > 196): Y leaves its bounds.
        if (c.sizes[0] > 196) {
            const ModelStep skip = model_fc3_step(in.net, in.X, in.T, c.B, c.loss, scale, Slip::JoinSkipsRank1);
            CHECK(outside(skip.Y, r.Y) > skip.Y.size() / 2);
            CHECK(outside(skip.G, r.G) > skip.G.size() / 4);
        }
    }
}
