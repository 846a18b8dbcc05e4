// The tensor-core kernels' host side (host/kernels/tc.hpp, host/verify/family_tc.cpp): the shapes verify
// takes, the float64 references by hand, and their TF32 bounds: not vacuous, and wide enough for
// a CPU model of the tensor core that truncates every addition, but not for a wrong fragment layout.
#include "error.hpp"
#include "reference.hpp"
#include "registry.hpp"
#include "rng.hpp"
#include "tc.hpp"
#include "tcstep.hpp"
#include "train.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

using namespace ptxlab;

namespace {

// cvt.rna.tf32.f32 on finite values: add half of the 13 dropped bits, then clear them.
float tf32(float x) { return std::bit_cast<float>((std::bit_cast<uint32_t>(x) + 0x1000u) & 0xffffe000u); }

// a + b rounded toward zero: the tensor core's truncation, the worst case of its additions.
float add_rz(float a, float b) {
    const double d = double(a) + double(b);
    float f = float(d);
    if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    return f;
}

// tc_forward as the PTX computes it, with a model of the tensor core that adds the 8 products
// of an mma onto c one by one, each addition truncated: four chains (k group j takes the
// 32-column chunks j, j + 4, ...), then (c0 + c1) + (c2 + c3) rounded to nearest. swap_a1_a2: the fragment registers a1
// and a2 exchanged (tests/fixtures/planted/tc_forward_fragment.patch): in each 16 x 8 tile of X, rows 0..7 see rows
// 8..15's columns 0..3 in their columns 4..7, and rows 8..15 rows 0..7's columns 4..7 in 0..3.
std::vector<float> model_tc_forward(const std::vector<float>& X, const std::vector<float>& W,
                                    const std::vector<float>& b, unsigned B, unsigned I, unsigned H, unsigned act,
                                    bool swap_a1_a2 = false) {
    auto x_at = [&](unsigned s, unsigned k) { return s < B && k < I ? X[size_t(s) * I + k] : 0.0f; };
    std::vector<float> A(size_t(B) * H);
    for (unsigned s = 0; s < B; ++s)
        for (unsigned h = 0; h < H; ++h) {
            const unsigned r = s % 16;
            float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned k0 = 0; k0 < I; k0 += 8)
                for (unsigned j = 0; j < 8; ++j) {
                    float x = x_at(s, k0 + j);
                    if (swap_a1_a2 && r < 8 && j >= 4) x = x_at(s + 8, k0 + j - 4);
                    if (swap_a1_a2 && r >= 8 && j < 4) x = x_at(s - 8, k0 + j + 4);
                    const float w = k0 + j < I ? W[size_t(h) * I + k0 + j] : 0.0f;
                    float& c = cg[k0 / 32 % 4];
                    c = add_rz(c, tf32(x) * tf32(w));  // the product of two tf32 values is exact
                }
            float z = (cg[0] + cg[1]) + (cg[2] + cg[3]) + b[h];
            if (act == 1) z = std::max(z, 0.0f);
            A[size_t(s) * H + h] = z;
        }
    return A;
}

// One warp's mma.sync.m16n8k8 on the CPU: the 32 lanes' fragments placed in A, B and C by
// the layout table of ptx/lessons/10_mma_tf32.ptx (g = lane/4, q = lane%4: a0 = A[g][q],
// a1 = A[g+8][q], a2 = A[g][q+4], a3 = A[g+8][q+4], b0 = B[q][g], b1 = B[q+4][g],
// c0 = C[g][2q], c1 = C[g][2q+1], c2 = C[g+8][2q], c3 = C[g+8][2q+1]); each of the 8 products
// of tf32 values (exact) added onto C in k order, truncated; D back into the lanes' c.
struct Lane {
    float a[4], b[2], c[4];
};
void warp_mma(std::array<Lane, 32>& L) {
    float A[16][8], Bm[8][8], C[16][8];
    for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned g = lane / 4, q = lane % 4;
        const Lane& l = L[lane];
        A[g][q] = l.a[0], A[g + 8][q] = l.a[1], A[g][q + 4] = l.a[2], A[g + 8][q + 4] = l.a[3];
        Bm[q][g] = l.b[0], Bm[q + 4][g] = l.b[1];
        C[g][2 * q] = l.c[0], C[g][2 * q + 1] = l.c[1], C[g + 8][2 * q] = l.c[2], C[g + 8][2 * q + 1] = l.c[3];
    }
    for (unsigned r = 0; r < 16; ++r)
        for (unsigned n = 0; n < 8; ++n)
            for (unsigned k = 0; k < 8; ++k) C[r][n] = add_rz(C[r][n], tf32(A[r][k]) * tf32(Bm[k][n]));
    for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned g = lane / 4, q = lane % 4;
        Lane& l = L[lane];
        l.c[0] = C[g][2 * q], l.c[1] = C[g][2 * q + 1], l.c[2] = C[g + 8][2 * q], l.c[3] = C[g + 8][2 * q + 1];
    }
}

// G[s][o] as the backward kernels form it: dY masked by ReLU (act 1), +0 outside [B][O].
float g_of(const std::vector<float>& dY, const std::vector<float>& Y, unsigned s, unsigned o, unsigned B, unsigned O,
           unsigned act) {
    if (s >= B || o >= O) return 0.0f;
    const size_t e = size_t(s) * O + o;
    return act == 1 && !(Y[e] > 0.0f) ? 0.0f : dY[e];
}

// tc_grad_input lane by lane as the PTX loads its fragments (its header), through warp_mma.
// transposed_b: the B fragment read as tc_forward's (b0 = W[o0+g][i0+q], b1 = W[o0+g][i0+q+4]),
// a plausible slip for W [O][I].
std::vector<float> model_tc_grad_input(const std::vector<float>& dY, const std::vector<float>& Y,
                                       const std::vector<float>& W, unsigned B, unsigned I, unsigned O, unsigned act,
                                       bool transposed_b = false) {
    auto G = [&](unsigned s, unsigned o) { return g_of(dY, Y, s, o, B, O, act); };
    auto w_at = [&](unsigned o, unsigned i) { return o < O && i < I ? W[size_t(o) * I + i] : 0.0f; };
    std::vector<float> dX(size_t(B) * I, NAN);
    const unsigned nt = (I + 7) / 8;
    for (size_t t = 0; t < tc_grad_input_tiles(B, I); ++t) {
        const unsigned s0 = unsigned(t / nt) * 16, i0 = unsigned(t % nt) * 8;
        std::array<Lane, 32> L{};
        for (unsigned o0 = 0; o0 < O; o0 += 8) {
            for (unsigned lane = 0; lane < 32; ++lane) {
                const unsigned g = lane / 4, q = lane % 4;
                Lane& l = L[lane];
                l.a[0] = G(s0 + g, o0 + q), l.a[1] = G(s0 + g + 8, o0 + q);
                l.a[2] = G(s0 + g, o0 + q + 4), l.a[3] = G(s0 + g + 8, o0 + q + 4);
                l.b[0] = transposed_b ? w_at(o0 + g, i0 + q) : w_at(o0 + q, i0 + g);
                l.b[1] = transposed_b ? w_at(o0 + g, i0 + q + 4) : w_at(o0 + q + 4, i0 + g);
            }
            warp_mma(L);
        }
        for (unsigned lane = 0; lane < 32; ++lane)
            for (unsigned e = 0; e < 4; ++e) {
                const unsigned s = s0 + lane / 4 + (e < 2 ? 0 : 8), i = i0 + 2 * (lane % 4) + e % 2;
                if (s < B && i < I) dX[size_t(s) * I + i] = L[lane].c[e];
            }
    }
    return dX;
}

// tc_grad_weights the same way: dW lane by lane through warp_mma in four chains (k group j the
// 32-sample chunks j, j + 4, ...), (c0 + c1) + (c2 + c3), then c * scale (float operations,
// rounded to nearest); db as the designated lanes sum it, in the same four chains. one_chain:
// tc_grad_weights_wide's order, every k tile (and db every sample) in chain 0 (the other three
// stay +0, and adding +0 is exact). A slip planted on purpose: UntransposedA, the A fragment
// loaded as tc_grad_input's (a0 = G[s0+g][o0+q], ...), G not transposed; ShortChain, the mma
// chain stopping one k tile early (s0 + 8 < B for s0 < B).
struct WeightGrads {
    std::vector<float> dW, db;
};
enum class Slip { None, UntransposedA, ShortChain };
WeightGrads model_tc_grad_weights(const std::vector<float>& dY, const std::vector<float>& Y,
                                  const std::vector<float>& X, unsigned B, unsigned I, unsigned O, unsigned act,
                                  float scale, bool one_chain = false, Slip slip = Slip::None) {
    auto G = [&](unsigned s, unsigned o) { return g_of(dY, Y, s, o, B, O, act); };
    auto x_at = [&](unsigned s, unsigned i) { return s < B && i < I ? X[size_t(s) * I + i] : 0.0f; };
    auto chain = [one_chain](unsigned s) { return one_chain ? 0 : s / 32 % 4; };  // a sample's chain
    WeightGrads r{std::vector<float>(size_t(O) * I, NAN), std::vector<float>(O, NAN)};
    const unsigned nt = (I + 7) / 8, short_by = slip == Slip::ShortChain ? 8 : 0;
    for (size_t t = 0; t < tc_grad_weights_tiles(I, O); ++t) {
        const unsigned o0 = unsigned(t / nt) * 16, i0 = unsigned(t % nt) * 8;
        std::array<std::array<Lane, 32>, 4> LG{};
        for (unsigned s0 = 0; s0 + short_by < B; s0 += 8) {
            std::array<Lane, 32>& L = LG[chain(s0)];
            for (unsigned lane = 0; lane < 32; ++lane) {
                const unsigned g = lane / 4, q = lane % 4;
                Lane& l = L[lane];
                if (slip == Slip::UntransposedA) {
                    l.a[0] = G(s0 + g, o0 + q), l.a[1] = G(s0 + g + 8, o0 + q);
                    l.a[2] = G(s0 + g, o0 + q + 4), l.a[3] = G(s0 + g + 8, o0 + q + 4);
                } else {
                    l.a[0] = G(s0 + q, o0 + g), l.a[1] = G(s0 + q, o0 + g + 8);
                    l.a[2] = G(s0 + q + 4, o0 + g), l.a[3] = G(s0 + q + 4, o0 + g + 8);
                }
                l.b[0] = x_at(s0 + q, i0 + g), l.b[1] = x_at(s0 + q + 4, i0 + g);
            }
            warp_mma(L);
        }
        for (unsigned lane = 0; lane < 32; ++lane)
            for (unsigned e = 0; e < 4; ++e) {
                const unsigned o = o0 + lane / 4 + (e < 2 ? 0 : 8), i = i0 + 2 * (lane % 4) + e % 2;
                const float c = (LG[0][lane].c[e] + LG[1][lane].c[e]) + (LG[2][lane].c[e] + LG[3][lane].c[e]);
                if (o < O && i < I) r.dW[size_t(o) * I + i] = c * scale;
            }
        if (i0 != 0) continue;  // db: the warps of tile column 0, lanes 0..15
        for (unsigned lane = 0; lane < 16 && o0 + lane < O; ++lane) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned s = 0; s < B; ++s) acc[chain(s)] += G(s, o0 + lane);
            r.db[o0 + lane] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * scale;
        }
    }
    return r;
}

struct Inputs {
    std::vector<float> X, W, b;
};
Inputs random_inputs(Rng& rng, unsigned B, unsigned I, unsigned H) {
    const float w = 1.0f / std::sqrt(float(I));
    Inputs in;
    for (auto [v, n, lo] : {std::tuple{&in.X, size_t(B) * I, -1.0f}, std::tuple{&in.W, size_t(H) * I, -w},
                            std::tuple{&in.b, size_t(H), -w}}) {
        v->resize(n);
        for (auto& x : *v) x = rng.uniform(lo, -lo);
    }
    return in;
}

// The backward products' inputs: dY in [-1, 1], Y and X a ReLU layer's outputs, W within
// nn.Linear's init bound 1/sqrt(I).
struct GradInputs {
    std::vector<float> dY, Y, X, W;
};
GradInputs random_grad_inputs(Rng& rng, unsigned B, unsigned I, unsigned O) {
    const float w = 1.0f / std::sqrt(float(I));
    GradInputs in{std::vector<float>(size_t(B) * O), std::vector<float>(size_t(B) * O),
                  std::vector<float>(size_t(B) * I), std::vector<float>(size_t(O) * I)};
    for (auto& v : in.dY) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : in.Y) v = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
    for (auto& v : in.X) v = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
    for (auto& v : in.W) v = rng.uniform(-w, w);
    return in;
}

// How many outputs lie outside the reference's bound.
size_t outside(const std::vector<float>& got, const Bounded& ref) {
    size_t n = 0;
    for (size_t i = 0; i < got.size(); ++i) n += !within_bound(got[i], ref.v[i], ref.e[i]);
    return n;
}

}  // namespace

TEST_CASE("tc: the shapes tc_forward takes") {
    CHECK(shape_names("tc_forward") == "B,I,H,act");
    CHECK_NOTHROW(validate_case({"tc_forward", {64, 784, 128, 1}}));
    CHECK_NOTHROW(validate_case({"tc_forward", {1, 1, 1, 0}}));
    CHECK_NOTHROW(validate_case({"tc_forward", {17, 9, 5, 1}}));
    CHECK_THROWS_WITH_AS(validate_case({"tc_forward", {17, 9, 5, 2}}),
                         doctest::Contains("act must be 0 (none) or 1 (ReLU), got 2"), InputError);
    for (const std::vector<unsigned>& zero : {std::vector<unsigned>{0, 9, 5, 1}, {17, 0, 5, 1}, {17, 9, 0, 0}}) {
        INFO("B, I, H = ", zero[0], ", ", zero[1], ", ", zero[2]);
        CHECK_THROWS_WITH_AS(validate_case({"tc_forward", zero}), doctest::Contains("shape sizes must be >= 1"),
                             InputError);
    }
    CHECK_THROWS_WITH_AS(validate_case({"tc_forward", {17, 9, 5}}),
                         doctest::Contains("takes a shape B,I,H,act (4 numbers), got 3"), InputError);
    CHECK_THROWS_WITH_AS(validate_case({"tc_forward", {17, 9, 5, 1, 1}}), doctest::Contains("(4 numbers), got 5"),
                         InputError);
    // act is a code (0 none, 1 ReLU), not an activation code of the MLP kernels.
    CHECK(shape_text({"tc_forward", {64, 784, 128, 1}}) == "B=64 I=784 H=128 act=1");
    // The launch: 16 x 8 warp tiles, and what the kernel cannot take.
    CHECK(tc_forward_tiles(64, 128) == 4 * 16);
    CHECK(tc_forward_tiles(17, 5) == 2);
    CHECK(tc_forward_tiles(1, 1) == 1);
    CHECK(tc_unfit(64, 784, 128).empty());
    CHECK(tc_unfit(1, 0, 1).find("B, I, H >= 1") != std::string::npos);
    CHECK(tc_unfit(1, 1, (1u << 31) + 1).find("up to 2147483648") != std::string::npos);
    CHECK(tc_unfit(1u << 31, 1, 1u << 11).find("fewer than 2^32 warp tiles") != std::string::npos);  // 2^35 tiles
    CHECK(tc_unfit(1u << 31, 1, 8).empty());                                                       // 2^27 tiles
    // The default set: the 784 -> 128 layer, edge sizes, both act codes; the quick set one case.
    size_t n = 0, relu = 0;
    for (const auto& c : default_cases())
        if (c.entry == "tc_forward") ++n, relu += c.shape[3] == 1;
    CHECK(n == 7);
    CHECK(relu == 4);
    size_t quick = 0;
    for (const auto& c : quick_cases()) quick += c.entry == "tc_forward";
    CHECK(quick == 1);
}

TEST_CASE("tc: the float64 reference by hand") {
    // X [2][3], W [2][3] (rows are units), b [2].
    const std::vector<float> X = {1, 2, 3, -1, 0, 2}, W = {1, 0, -1, 2, 1, 0.5f}, b = {0.5f, -4};
    const Bounded a = ref_tc_forward(X, W, b, 2, 3, 2, 0);
    CHECK(a.v == std::vector<double>{-1.5, 1.5, -2.5, -5});
    // A[0][0]: S = |1*1| + |2*0| + |3*-1| = 4; one rounding of the bias add on top.
    const double ec = tc_sum_bound(3) * 4;
    CHECK(a.e[0] == doctest::Approx(ec + 0x1p-24 * (1.5 + ec)));
    // ReLU: the same bound where z > 0; where z is surely negative, exactly 0.
    const Bounded r = ref_tc_forward(X, W, b, 2, 3, 2, 1);
    CHECK(r.v == std::vector<double>{0, 1.5, 0, 0});
    CHECK(r.e[1] == a.e[1]);
    CHECK(r.e[0] == 0);
    CHECK(r.e[3] == 0);
    // Near the kink: z = -1e-6 with S = 1 is within the bound of 0, so the kernel's z may be
    // positive: A = 0 is held to the whole bound (ReLU is 1-Lipschitz: no kink to skip).
    const Bounded k = ref_tc_forward({1}, {1}, {-1 - 1e-6f}, 1, 1, 1, 1);
    CHECK(k.v[0] == 0);
    CHECK(k.e[0] > 1e-6);
}

TEST_CASE("tc: the TF32 bound is not vacuous") {
    // The sum's bound as a fraction of sum |x w|: TF32's 2^-10 + 2^-22, plus gamma_{32 ceil(I/8)}.
    CHECK(tc_sum_bound(1) == tc_sum_bound(8));  // one mma
    CHECK(tc_sum_bound(9) > tc_sum_bound(8));
    CHECK(tc_sum_bound(1) > 0x1p-10);
    CHECK(tc_sum_bound(1) < 0x1p-10 * 1.01);
    CHECK(tc_sum_bound(784) > 0x1p-11);
    CHECK(tc_sum_bound(784) < 0x1p-9);
    CHECK(std::isinf(tc_sum_bound(1u << 23)));  // past gamma's range: no bound, not a negative one
}

TEST_CASE("tc: a truncating model of the tensor core is within the bound, a wrong fragment layout is not") {
    Rng rng(11);
    for (const std::vector<unsigned>& s : {std::vector<unsigned>{17, 784, 5, 0}, {65, 257, 13, 1}, {3, 800, 33, 0}}) {
        const unsigned B = s[0], I = s[1], H = s[2], act = s[3];
        INFO("B, I, H, act = ", B, ", ", I, ", ", H, ", ", act);
        const Inputs in = random_inputs(rng, B, I, H);
        const Bounded ref = ref_tc_forward(in.X, in.W, in.b, B, I, H, act);
        CHECK(outside(model_tc_forward(in.X, in.W, in.b, B, I, H, act), ref) == 0);
        // The planted bug of tests/fixtures/planted/tc_forward_fragment.patch (a1 and a2 exchanged) is far outside.
        const auto bad = model_tc_forward(in.X, in.W, in.b, B, I, H, act, true);
        CHECK(outside(bad, ref) > bad.size() / 4);
    }
}

TEST_CASE("tc: the shapes tc_grad_input and tc_grad_weights take") {
    for (const char* e : {"tc_grad_input", "tc_grad_weights"}) {
        CAPTURE(e);
        CHECK(shape_names(e) == "B,I,O,act");
        CHECK_NOTHROW(validate_case({e, {64, 784, 128, 1}}));
        CHECK_NOTHROW(validate_case({e, {1, 1, 1, 0}}));
        CHECK_NOTHROW(validate_case({e, {17, 9, 5, 1}}));
        CHECK_NOTHROW(validate_case({e, {2, 3, 5000, 1}}));  // no limit on O: nothing is staged
        CHECK_THROWS_WITH_AS(validate_case({e, {17, 9, 5, 2}}),
                             doctest::Contains("act must be 0 (none) or 1 (ReLU), got 2"), InputError);
        for (const std::vector<unsigned>& zero : {std::vector<unsigned>{0, 9, 5, 1}, {17, 0, 5, 1}, {17, 9, 0, 0}}) {
            INFO("B, I, O = ", zero[0], ", ", zero[1], ", ", zero[2]);
            CHECK_THROWS_WITH_AS(validate_case({e, zero}), doctest::Contains("shape sizes must be >= 1"), InputError);
        }
        CHECK_THROWS_WITH_AS(validate_case({e, {17, 9, 5}}),
                             doctest::Contains("takes a shape B,I,O,act (4 numbers), got 3"), InputError);
        CHECK(shape_text({e, {64, 784, 128, 1}}) == "B=64 I=784 O=128 act=1");
        CHECK(tc_grad_unfit(e, 64, 784, 128).empty());
        CHECK(tc_grad_unfit(e, 1, 1, 1).empty());
        CHECK(tc_grad_unfit(e, 1, 0, 1).find(std::string(e) + " needs B, I, O >= 1") != std::string::npos);
        CHECK(tc_grad_unfit(e, 1, 1, (1u << 31) + 1).find("up to 2147483648") != std::string::npos);
        // Past 2^32 warp tiles the PTX's 32-bit warp index would wrap: refused.
        CHECK(tc_grad_unfit(e, 1u << 31, 1u << 11, 1u << 31).find("fewer than 2^32 warp tiles") !=
              std::string::npos);
    }
    CHECK_THROWS_WITH_AS(validate_case({"tc_grad_input", {1u << 31, 1u << 11, 1, 0}}),
                         doctest::Contains("fewer than 2^32 warp tiles"), InputError);
    CHECK(tc_grad_unfit("tc_grad_input", 1u << 31, 8, 1u << 31).empty());      // 2^27 tiles
    CHECK(tc_grad_unfit("tc_grad_weights", 1u << 31, 8, 1u << 31).empty());    // 2^27 tiles
    CHECK(tc_grad_unfit("tc_grad_weights", 1, 1u << 11, 1u << 31).find("2^32") != std::string::npos);
    // The launch: 16 x 8 warp tiles of dX (samples x columns) and of dW (outputs x inputs).
    CHECK(tc_grad_input_tiles(64, 784) == 4 * 98);
    CHECK(tc_grad_input_tiles(17, 9) == 2 * 2);
    CHECK(tc_grad_input_tiles(1, 1) == 1);
    CHECK(tc_grad_weights_tiles(784, 128) == 8 * 98);
    CHECK(tc_grad_weights_tiles(128, 10) == 1 * 16);
    CHECK(tc_grad_weights_tiles(9, 5) == 1 * 2);
    CHECK(tc_grad_weights_tiles(1, 1) == 1);
    // The default set: both MNIST layers, edge sizes, both act codes; the quick set one case each.
    size_t n_in = 0, relu_in = 0, n_w = 0, relu_w = 0, big_o = 0, big_b = 0;
    for (const auto& c : default_cases()) {
        if (c.entry == "tc_grad_input") ++n_in, relu_in += c.shape[3] == 1, big_o += c.shape[2] >= 1024;
        if (c.entry == "tc_grad_weights") ++n_w, relu_w += c.shape[3] == 1, big_b += c.shape[0] >= 1000;
    }
    CHECK(n_in == 7);
    CHECK(relu_in == 4);
    CHECK(big_o == 1);
    CHECK(n_w == 8);
    CHECK(relu_w == 5);
    CHECK(big_b == 2);
    size_t quick_in = 0, quick_w = 0;
    for (const auto& c : quick_cases()) quick_in += c.entry == "tc_grad_input", quick_w += c.entry == "tc_grad_weights";
    CHECK(quick_in == 1);
    CHECK(quick_w == 1);
}

TEST_CASE("tc: the shapes tc_grad_weights_wide takes, its blocks and its shared memory") {
    const std::string e = "tc_grad_weights_wide";
    CHECK(shape_names(e) == "B,I,O,act");
    CHECK(shape_text({e, {64, 1024, 1024, 0}}) == "B=64 I=1024 O=1024 act=0");
    CHECK_NOTHROW(validate_case({e, {64, 784, 1024, 1}}));
    CHECK_NOTHROW(validate_case({e, {1, 1, 1, 0}}));
    CHECK_NOTHROW(validate_case({e, {128, 65, 130, 1}}));
    CHECK_THROWS_WITH_AS(validate_case({e, {129, 65, 130, 1}}), doctest::Contains("B up to 128, got B=129"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({e, {17, 9, 5, 2}}), doctest::Contains("act must be 0 (none) or 1 (ReLU)"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({e, {0, 9, 5, 1}}), doctest::Contains("shape sizes must be >= 1"), InputError);
    // B: 1 to 128, the batch it stages; I and O: the family's 2^31 and fewer than 2^32 warp tiles.
    CHECK(tc_grad_wide_unfit(1, 1, 1).empty());
    CHECK(tc_grad_wide_unfit(kTcWideMaxBatch, 1024, 1024).empty());
    CHECK(tc_grad_wide_unfit(0, 1, 1).find(e + " needs B, I, O >= 1, got B=0") != std::string::npos);
    CHECK(tc_grad_wide_unfit(1, 0, 1).find("got B=1 I=0 O=1") != std::string::npos);
    CHECK(tc_grad_wide_unfit(1, 1, 0).find("got B=1 I=1 O=0") != std::string::npos);
    CHECK(tc_grad_wide_unfit(129, 1, 1) == e + " stages the whole batch in shared memory: it takes B up to 128, got "
                                               "B=129 (tc_grad_weights takes any batch)");
    CHECK(tc_grad_wide_unfit((1u << 31) + 1, 1, 1).find("up to 2147483648") != std::string::npos);
    CHECK(tc_grad_wide_unfit(1, (1u << 31) + 1, 1).find("up to 2147483648") != std::string::npos);
    CHECK(tc_grad_wide_unfit(1, 1, (1u << 31) + 1).find("up to 2147483648") != std::string::npos);
    CHECK(tc_grad_wide_unfit(1, 1u << 31, 8).empty());      // 2^28 tiles, 2^25 blocks
    CHECK(tc_grad_wide_unfit(128, 8, 1u << 31).empty());    // 2^27 tiles, 2^25 blocks
    CHECK(tc_grad_wide_unfit(1, 1u << 11, 1u << 31).find("fewer than 2^32 warp tiles") != std::string::npos);
    // The tiles' limit keeps the grid below 2^31 blocks (tc.cpp): every accepted I, O near the
    // powers of two has fewer, and some are refused.
    size_t refused = 0;
    std::vector<unsigned> sizes;
    for (unsigned k = 0; k <= 31; ++k)
        for (int64_t d : {-1, 0, 1})
            sizes.push_back(unsigned(std::clamp<int64_t>((int64_t(1) << k) + d, 1, kTcMaxSize)));
    for (unsigned I : sizes)
        for (unsigned O : sizes) {
            if (!tc_grad_wide_unfit(kTcWideMaxBatch, I, O).empty()) {
                ++refused;
                continue;
            }
            INFO("I, O = ", I, ", ", O);
            CHECK(tc_grad_weights_wide_blocks(I, O) < (size_t(1) << 31));
        }
    CHECK(refused > 0);
    // The launch: 64 x 64 blocks of dW; G, Y and X staged as 8-sample k tiles of 72-float rows.
    CHECK(tc_grad_weights_wide_blocks(1024, 1024) == 16 * 16);
    CHECK(tc_grad_weights_wide_blocks(784, 1024) == 13 * 16);
    CHECK(tc_grad_weights_wide_blocks(1024, 10) == 16);
    CHECK(tc_grad_weights_wide_blocks(65, 130) == 2 * 3);
    CHECK(tc_grad_weights_wide_blocks(64, 64) == 1);
    CHECK(tc_grad_weights_wide_blocks(1, 1) == 1);
    CHECK(tc_grad_weights_wide_smem(1) == 3 * 8 * 72 * 4);
    CHECK(tc_grad_weights_wide_smem(8) == tc_grad_weights_wide_smem(1));
    CHECK(tc_grad_weights_wide_smem(9) == 2 * tc_grad_weights_wide_smem(1));
    CHECK(tc_grad_weights_wide_smem(64) == 55296);
    CHECK(tc_grad_weights_wide_smem(kTcWideMaxBatch) == 110592);  // past 48 KB: launch_smem raises the opt-in
    // The default set: the 1024-wide layers at batch 64 and edge sizes, both act codes, no BF16
    // version; the quick set one case; bench times the MNIST hidden layer's dW up to batch 128.
    size_t n = 0, relu = 0, wide = 0;
    for (const auto& c : default_cases()) {
        if (c.entry.starts_with(e)) CHECK(c.entry == e);
        if (c.entry == e) ++n, relu += c.shape[3] == 1, wide += c.shape[1] >= 1024 || c.shape[2] >= 1024;
    }
    CHECK(n == 8);
    CHECK(relu == 4);
    CHECK(wide == 3);
    size_t quick = 0;
    for (const auto& c : quick_cases()) quick += c.entry == e;
    CHECK(quick == 1);
    const KernelRow& row = kernel_row(e);
    CHECK(row.bench_shape(64) == std::vector<unsigned>{64, 784, 128, kTcActNone});
    CHECK(row.bench_shape(128).has_value());
    CHECK(!row.bench_shape(129).has_value());
}

TEST_CASE("tc: the float64 references of the backward products by hand") {
    // dY, Y [2][2] (samples x outputs); with act 1, G = [[1, 0], [0, 3]] (Y = 0 and Y < 0 mask).
    const std::vector<float> dY = {1, -2, 0.5f, 3}, Y = {1, 0, -1, 2};
    const double u = 0x1p-24;
    // tc_grad_input: W [2][3] (outputs x inputs), dX [2][3] = G W.
    const std::vector<float> W = {1, 0, -1, 2, 1, 0.5f};
    const Bounded x0 = ref_tc_grad_input(dY, Y, W, 2, 3, 2, 0);
    CHECK(x0.v == std::vector<double>{-3, -2, -2, 6.5, 3, 1});
    // dX[0][0]: S = |1*1| + |-2*2| = 5; dX[1][1]: S = |0.5*0| + |3*1| = 3; no rounding after the chain.
    CHECK(x0.e[0] == doctest::Approx(tc_sum_bound(2) * 5));
    CHECK(x0.e[4] == doctest::Approx(tc_sum_bound(2) * 3));
    const Bounded x1 = ref_tc_grad_input(dY, Y, W, 2, 3, 2, 1);
    CHECK(x1.v == std::vector<double>{1, 0, -1, 6, 3, 1.5});
    CHECK(x1.e[1] == 0);  // G[0][0] W[0][1] = 0 and G[0][1] masked: an exact 0
    CHECK(x1.e[3] == doctest::Approx(tc_sum_bound(2) * 6));
    // tc_grad_weights: X [2][3] (samples x inputs), scale 0.5: dW [2][3] = scale G^T X, db = scale sum_s G.
    const std::vector<float> X = {1, 2, 3, -1, 0, 2};
    Bounded dW, db;
    ref_tc_grad_weights(dY, Y, X, 2, 3, 2, 0, 0.5f, dW, db);
    CHECK(dW.v == std::vector<double>{0.25, 1, 2, -2.5, -2, 0});
    CHECK(db.v == std::vector<double>{0.75, 0.5});
    // dW[1][2]: the sum -2*3 + 3*2 = 0 exactly, S = 12; then one rounding of the scale.
    const double ec = tc_sum_bound(2) * 12;
    CHECK(dW.e[5] == doctest::Approx(0.5 * (ec + u * ec)));
    // dW[0][2]: sum 4, S = |1*3| + |0.5*2| = 4.
    CHECK(dW.e[2] == doctest::Approx(0.5 * (tc_sum_bound(2) * 4 + u * (4 + tc_sum_bound(2) * 4))));
    // db[1]: sum |G| = 5, gamma_2.
    CHECK(db.e[1] == doctest::Approx(0.5 * tc_bias_bound(2) * 5));
    ref_tc_grad_weights(dY, Y, X, 2, 3, 2, 1, 0.5f, dW, db);
    CHECK(dW.v == std::vector<double>{0.5, 1, 1.5, -1.5, 0, 3});
    CHECK(db.v == std::vector<double>{0.5, 1.5});
    CHECK(dW.e[4] == 0);  // G[1][1] X[1][1] = 3 * 0: an exact 0
    // A negative scale: the values negated, the bounds the same (|scale|).
    Bounded nW, nb;
    ref_tc_grad_weights(dY, Y, X, 2, 3, 2, 1, -0.5f, nW, nb);
    for (size_t k = 0; k < dW.size(); ++k) {
        CHECK(nW.v[k] == -dW.v[k]);
        CHECK(nW.e[k] == dW.e[k]);
    }
    for (size_t k = 0; k < db.size(); ++k) {
        CHECK(nb.v[k] == -db.v[k]);
        CHECK(nb.e[k] == db.e[k]);
    }
    // A NaN Y masks (Y > 0 fails), as the kernels' setp.gt and the twin's !(Y > 0) do.
    const Bounded xn = ref_tc_grad_input({2}, {NAN}, {3}, 1, 1, 1, 1);
    CHECK(xn.v[0] == 0);
}

TEST_CASE("tc: the backward products' bounds are not vacuous") {
    // db: gamma_B, a plain FP32 chain.
    CHECK(tc_bias_bound(1) == doctest::Approx(0x1p-24));
    CHECK(tc_bias_bound(1000) < 1e-4);
    CHECK(tc_bias_bound(1000) > tc_bias_bound(64));
    CHECK(std::isinf(tc_bias_bound(1u << 24)));
    // dW at batch 1000 (K = 1000 samples): TF32's 2^-10 dominates, below 2^-9 of sum |g x|.
    CHECK(tc_sum_bound(1000) < 0x1p-9);
    // On the MNIST layer's inputs, the bound of most outputs is a small fraction of the value.
    Rng rng(5);
    const unsigned B = 64, I = 784, O = 128;
    std::vector<float> dY(size_t(B) * O), Y(size_t(B) * O), X(size_t(B) * I), W(size_t(O) * I);
    for (auto& v : dY) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : Y) v = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
    for (auto& v : X) v = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
    for (auto& v : W) v = rng.uniform(-0.0357f, 0.0357f);
    auto median_rel = [](const Bounded& r) {
        std::vector<double> q;
        for (size_t k = 0; k < r.size(); ++k)
            if (r.v[k] != 0) q.push_back(r.e[k] / std::fabs(r.v[k]));
        std::nth_element(q.begin(), q.begin() + q.size() / 2, q.end());
        return q[q.size() / 2];
    };
    CHECK(median_rel(ref_tc_grad_input(dY, Y, W, B, I, O, 1)) < 0.05);
    Bounded dW, db;
    ref_tc_grad_weights(dY, Y, X, B, I, O, 1, 1.0f / B, dW, db);
    CHECK(median_rel(dW) < 0.05);
    CHECK(median_rel(db) < 1e-4);
}

TEST_CASE("tc: truncating models of tc_grad_input and tc_grad_weights are within the bounds, wrong layouts are not") {
    Rng rng(13);
    for (const std::vector<unsigned>& s :
         {std::vector<unsigned>{17, 9, 5, 1}, {64, 128, 10, 0}, {65, 257, 130, 1}, {7, 33, 300, 0}, {1003, 33, 17, 1}}) {
        const unsigned B = s[0], I = s[1], O = s[2], act = s[3];
        INFO("B, I, O, act = ", B, ", ", I, ", ", O, ", ", act);
        const float scale = rng.uniform(0.5f, 2.0f) / float(B);
        const auto [dY, Y, X, W] = random_grad_inputs(rng, B, I, O);
        // tc_grad_input: every dX written, all within the bound; W's fragment transposed is far outside.
        const Bounded rx = ref_tc_grad_input(dY, Y, W, B, I, O, act);
        CHECK(outside(model_tc_grad_input(dY, Y, W, B, I, O, act), rx) == 0);  // a NaN (unwritten) is outside
        const auto bad_x = model_tc_grad_input(dY, Y, W, B, I, O, act, true);
        CHECK(outside(bad_x, rx) > bad_x.size() / 4);
        // tc_grad_weights: dW and db; G's fragment untransposed is far outside.
        Bounded rw, rb;
        ref_tc_grad_weights(dY, Y, X, B, I, O, act, scale, rw, rb);
        const WeightGrads m = model_tc_grad_weights(dY, Y, X, B, I, O, act, scale);
        CHECK(outside(m.dW, rw) == 0);
        CHECK(outside(m.db, rb) == 0);
        const WeightGrads bad_w = model_tc_grad_weights(dY, Y, X, B, I, O, act, scale, false, Slip::UntransposedA);
        CHECK(outside(bad_w.dW, rw) > bad_w.dW.size() / 4);
    }
}

TEST_CASE("tc: a truncating model of tc_grad_weights_wide is within tc_grad_weights' bounds, a short chain is not") {
    Rng rng(29);
    for (const std::vector<unsigned>& s : {std::vector<unsigned>{64, 100, 70, 1}, {128, 65, 130, 0}, {128, 33, 17, 1},
                                           {100, 257, 63, 0}, {7, 64, 64, 1}}) {
        const unsigned B = s[0], I = s[1], O = s[2], act = s[3];
        INFO("B, I, O, act = ", B, ", ", I, ", ", O, ", ", act);
        const float scale = rng.uniform(0.5f, 2.0f) / float(B);
        const GradInputs in = random_grad_inputs(rng, B, I, O);
        // ref_tc_grad_weights, tc_grad_weights' reference, is the wide kernel's (tc.hpp).
        Bounded rw, rb;
        ref_tc_grad_weights(in.dY, in.Y, in.X, B, I, O, act, scale, rw, rb);
        const WeightGrads m = model_tc_grad_weights(in.dY, in.Y, in.X, B, I, O, act, scale, true);
        CHECK(outside(m.dW, rw) == 0);  // a NaN (unwritten) is outside
        CHECK(outside(m.db, rb) == 0);
        // Past 32 samples one chain is another order than tc_grad_weights' four: some sums differ.
        if (B > 32) {
            const WeightGrads four = model_tc_grad_weights(in.dY, in.Y, in.X, B, I, O, act, scale);
            size_t differ = 0;
            for (size_t k = 0; k < m.dW.size(); ++k) differ += m.dW[k] != four.dW[k];
            CHECK(differ > 0);
        }
        // The chain stopping one k tile early (8 samples, or 4 of B = 100, or all 7) is far outside.
        const WeightGrads bad = model_tc_grad_weights(in.dY, in.Y, in.X, B, I, O, act, scale, true, Slip::ShortChain);
        CHECK(outside(bad.dW, rw) > bad.dW.size() / 2);
    }
}

TEST_CASE("tc: --kernels tc and tc-reference, the kernels a run loads, the recipes it refuses") {
    CHECK(parse_kernel_choice("tc") == KernelChoice{Design::Tc, KernelSource::Ptx});
    CHECK(parse_kernel_choice("tc-reference") == KernelChoice{Design::Tc, KernelSource::Reference});
    CHECK(to_string(KernelChoice{Design::Tc, KernelSource::Ptx}) == "tc");
    CHECK(to_string(KernelChoice{Design::Tc, KernelSource::Reference}) == "tc-reference");
    TrainConfig cfg;
    cfg.kernels = parse_kernel_choice("tc");
    // Batch 64 (the default): the whole step in one tc_step launch; the forward kernels stay
    // for the evaluation.
    CHECK(training_entries(cfg) == std::vector<std::string>{"tc_forward", "fused_output", "tc_step", "gather"});
    cfg.optim.kind = OptimKind::NAdam;  // every optimizer runs in tc_step, nadam too
    CHECK(training_entries(cfg) == std::vector<std::string>{"tc_forward", "fused_output", "tc_step", "gather"});
    cfg.optim.kind = OptimKind::Nesterov;
    // Larger batches, or --three-launches: the separate launches and the optimizer kernel.
    const std::vector<std::string> want = {"tc_forward", "fused_output", "tc_grad_weights", "optim_sgd", "gather"};
    cfg.batch = 65;
    CHECK(training_entries(cfg) == want);
    cfg.batch = 64;
    cfg.one_launch = false;
    CHECK(training_entries(cfg) == want);
    cfg.one_launch = true;
    cfg.layers = {784, 129, 10};  // past tc_step's 128 hidden units
    CHECK(training_entries(cfg) == want);
    cfg.layers = {784, 128, 10};
    CHECK(forward_entries(Design::Tc, cfg.layers) == std::vector<std::string>{"tc_forward", "fused_output"});
    cfg.validate_flags();  // the default recipe (ReLU, 784-128-10) runs
    cfg.activation = Activation::Gelu;
    CHECK_THROWS_WITH_AS(cfg.validate_flags(), doctest::Contains("runs ReLU hidden layers"), InputError);
    cfg.activation = Activation::Relu;
    cfg.layers = {784, 64, 32, 10};
    CHECK_THROWS_WITH_AS(cfg.validate_flags(), doctest::Contains("runs 2-layer networks"), InputError);
}

TEST_CASE("tc_step: its limits, its verify shapes, the runs that use it") {
    CHECK(tc_step_unfit(64, 784, 128, 10).empty());
    CHECK(tc_step_unfit(1, 1, 1, 1).empty());
    CHECK(tc_step_unfit(64, 896, 128, 16).empty());
    CHECK(tc_step_unfit(65, 784, 128, 10).find("B <= 64") != std::string::npos);
    CHECK(tc_step_unfit(64, 897, 128, 10).find("I <= 896") != std::string::npos);
    CHECK(tc_step_unfit(64, 784, 129, 10).find("H <= 128") != std::string::npos);
    CHECK(tc_step_unfit(64, 784, 128, 17).find("O <= 16") != std::string::npos);
    CHECK(tc_step_unfit(0, 784, 128, 10).find(">= 1") != std::string::npos);
    // The verify shape: B,I,H,O,loss,optim; out-of-range sizes and codes are refused.
    CHECK(shape_text({"tc_step", {64, 784, 128, 10, 1, 2}}) == "B=64 I=784 H=128 O=10 loss=1 optim=2 (nesterov)");
    CHECK_NOTHROW(validate_case({"tc_step", {64, 784, 128, 10, 1, 2}}));
    CHECK_THROWS_WITH_AS(validate_case({"tc_step", {65, 784, 128, 10, 1, 2}}), doctest::Contains("B <= 64"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"tc_step", {64, 784, 128, 10, 2, 2}}), doctest::Contains("loss code"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"tc_step", {64, 784, 128, 10, 1}}), doctest::Contains("(6 numbers), got 5"),
                         InputError);
    size_t n = 0;
    for (const auto& c : default_cases()) n += c.entry == "tc_step";
    CHECK(n == 10);
    CHECK_NOTHROW(validate_case({"tc_step", {64, 784, 128, 10, 1, 6}}));  // nadam, recipe.hpp's last code
    CHECK_THROWS_WITH_AS(validate_case({"tc_step", {64, 784, 128, 10, 1, 7}}), doctest::Contains("6 nadam, got 7"),
                         InputError);
    // train and bench run it for the tc set at batches up to 64 (the separate launches past it).
    TrainConfig cfg;
    cfg.kernels = parse_kernel_choice("tc-reference");
    const auto one = training_entries(cfg);
    CHECK(one.back() == "gather");
    CHECK(std::find(one.begin(), one.end(), "tc_step") != one.end());
    cfg.batch = 100;
    const auto split = training_entries(cfg);
    CHECK(std::find(split.begin(), split.end(), "tc_step") == split.end());
}

namespace {
// cvt.rn.bf16x2.f32 on one finite value: round to 8 significant bits, nearest, ties to even.
float bf16(float x) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    return std::bit_cast<float>((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// tc_forward_bf16 as the PTX computes it, with a tensor core that adds the 16 products of an
// m16n8k16 onto c one by one, each addition truncated; four chains over the 32-column chunks
// (j, j + 4, ...), joined by (c0 + c1) + (c2 + c3). swap_pairs: each pair (2q, 2q + 1) of X
// packed the wrong way round (the planted bug of the GPU test), columns k and k ^ 1 exchanged.
std::vector<float> model_tc_forward_bf16(const std::vector<float>& X, const std::vector<float>& W,
                                         const std::vector<float>& b, unsigned B, unsigned I, unsigned H,
                                         bool swap_pairs = false) {
    auto x_at = [&](unsigned s, unsigned k) { return k < I ? X[size_t(s) * I + k] : 0.0f; };
    std::vector<float> A(size_t(B) * H);
    for (unsigned s = 0; s < B; ++s)
        for (unsigned h = 0; h < H; ++h) {
            float cg[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (unsigned k = 0; k < (I + 15) / 16 * 16; ++k) {
                const float x = x_at(s, swap_pairs ? k ^ 1u : k);
                const float w = k < I ? W[size_t(h) * I + k] : 0.0f;
                float& c = cg[k / 32 % 4];
                c = add_rz(c, bf16(x) * bf16(w));  // two 8-bit significands: the product is exact
            }
            A[size_t(s) * H + h] = (cg[0] + cg[1]) + (cg[2] + cg[3]) + b[h];
        }
    return A;
}
}  // namespace

TEST_CASE("tc bf16: the entries, their shapes and the BF16 bound") {
    CHECK(tc_precision_of("tc_forward_bf16") == TcPrecision::Bf16);
    CHECK(tc_precision_of("tc_grad_weights") == TcPrecision::Tf32);
    CHECK(tc_base_entry("tc_grad_input_bf16") == "tc_grad_input");
    CHECK(tc_base_entry("tc_forward") == "tc_forward");
    CHECK(shape_names("tc_forward_bf16") == "B,I,H,act");
    CHECK(shape_names("tc_grad_weights_bf16") == "B,I,O,act");
    CHECK_NOTHROW(validate_case({"tc_grad_weights_bf16", {1003, 33, 17, 0}}));
    CHECK_THROWS_WITH_AS(validate_case({"tc_forward_bf16", {17, 9, 5, 2}}), doctest::Contains("act must be 0"),
                         InputError);
    CHECK(tc_grad_unfit("tc_grad_weights_bf16", 1, 1u << 11, 1u << 31).find("2^32") != std::string::npos);
    // BF16's products err by 2^-7 + 2^-16 where TF32's err by 2^-10 + 2^-22; one m16n8k16
    // takes 16 k, so the chain's gamma counts 64 u a 16 columns (TF32: 32 u an 8).
    CHECK(tc_sum_bound(1, TcPrecision::Bf16) == tc_sum_bound(16, TcPrecision::Bf16));
    CHECK(tc_sum_bound(17, TcPrecision::Bf16) > tc_sum_bound(16, TcPrecision::Bf16));
    CHECK(tc_sum_bound(1, TcPrecision::Bf16) > 0x1p-7);
    CHECK(tc_sum_bound(784, TcPrecision::Bf16) < 0x1p-6);
    CHECK(tc_sum_bound(784, TcPrecision::Bf16) > 4 * tc_sum_bound(784));
    CHECK(std::isinf(tc_sum_bound(1u << 23, TcPrecision::Bf16)));
    // verify runs the BF16 versions on the TF32 kernels' shapes; the quick set one each.
    size_t n = 0, tf = 0, quick = 0;
    for (const auto& c : default_cases()) {
        const std::string_view b = tc_base_entry(c.entry);
        n += c.entry.ends_with("_bf16");
        tf += b == "tc_forward" || b == "tc_grad_input" || b == "tc_grad_weights";
    }
    for (const auto& c : quick_cases()) quick += c.entry.ends_with("_bf16");
    CHECK(n == 22);
    CHECK(tf == 44);
    CHECK(quick == 3);
}

TEST_CASE("tc bf16: a truncating BF16 model is within the BF16 bound, pairs packed the wrong way round are not") {
    Rng rng(23);
    for (const std::vector<unsigned>& s : {std::vector<unsigned>{17, 784, 5}, {65, 257, 13}, {3, 41, 33}}) {
        const unsigned B = s[0], I = s[1], H = s[2];
        INFO("B, I, H = ", B, ", ", I, ", ", H);
        const Inputs in = random_inputs(rng, B, I, H);
        const Bounded ref = ref_tc_forward(in.X, in.W, in.b, B, I, H, 0, TcPrecision::Bf16);
        const auto m = model_tc_forward_bf16(in.X, in.W, in.b, B, I, H);
        CHECK(outside(m, ref) == 0);
        // The model rounds to BF16, not TF32: most outputs differ from the TF32 model's.
        const auto t = model_tc_forward(in.X, in.W, in.b, B, I, H, 0);
        size_t differ = 0;
        for (size_t i = 0; i < m.size(); ++i) differ += m[i] != t[i];
        CHECK(differ > m.size() / 2);
        const auto bad = model_tc_forward_bf16(in.X, in.W, in.b, B, I, H, true);
        CHECK(outside(bad, ref) > bad.size() / 4);
    }
}

TEST_CASE("tc bf16: the tc-bf16 set trains with the _bf16 kernels, one launch each") {
    CHECK(parse_kernel_choice("tc-bf16") == KernelChoice{Design::Tc, KernelSource::Ptx, true});
    CHECK(parse_kernel_choice("tc-bf16-reference") == KernelChoice{Design::Tc, KernelSource::Reference, true});
    CHECK(to_string(KernelChoice{Design::Tc, KernelSource::Ptx, true}) == "tc-bf16");
    CHECK(to_string(KernelChoice{Design::Tc, KernelSource::Reference, true}) == "tc-bf16-reference");
    CHECK_THROWS_WITH_AS(parse_kernel_choice("bf16"), doctest::Contains("tc-bf16"), InputError);
    TrainConfig cfg;
    cfg.kernels = parse_kernel_choice("tc-bf16");
    // No tc_step in BF16: the separate launches at every batch (64 included).
    CHECK(training_entries(cfg) ==
          std::vector<std::string>{"tc_forward_bf16", "fused_output", "tc_grad_weights_bf16", "optim_sgd", "gather"});
    CHECK(with_precision({"tc_forward", "fused_output", "tc_grad_input"}, cfg.kernels) ==
          std::vector<std::string>{"tc_forward_bf16", "fused_output", "tc_grad_input_bf16"});
    CHECK(with_precision({"tc_forward"}, parse_kernel_choice("tc")) == std::vector<std::string>{"tc_forward"});
    cfg.validate_flags();
    cfg.activation = Activation::Tanh;
    CHECK_THROWS_WITH_AS(cfg.validate_flags(), doctest::Contains("runs ReLU hidden layers"), InputError);
}
