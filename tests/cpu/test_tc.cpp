// The tensor-core kernels' host side (host/tc.hpp, host/verify_tc.cpp): the shapes verify
// takes, the float64 reference by hand, and its TF32 bound: not vacuous, and wide enough for a
// CPU model of the tensor core that truncates every addition, but not for a wrong fragment layout.
#include "error.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "tc.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

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
// of an mma onto c one by one, each addition truncated. swap_a1_a2: the fragment registers a1
// and a2 exchanged (tests/fixtures/tc/tc.ptx): in each 16 x 8 tile of X, rows 0..7 see rows
// 8..15's columns 0..3 in their columns 4..7, and rows 8..15 rows 0..7's columns 4..7 in 0..3.
std::vector<float> model_tc_forward(const std::vector<float>& X, const std::vector<float>& W,
                                    const std::vector<float>& b, unsigned B, unsigned I, unsigned H, unsigned act,
                                    bool swap_a1_a2 = false) {
    auto x_at = [&](unsigned s, unsigned k) { return s < B && k < I ? X[size_t(s) * I + k] : 0.0f; };
    std::vector<float> A(size_t(B) * H);
    for (unsigned s = 0; s < B; ++s)
        for (unsigned h = 0; h < H; ++h) {
            const unsigned r = s % 16;
            float c = 0.0f;
            for (unsigned k0 = 0; k0 < I; k0 += 8)
                for (unsigned j = 0; j < 8; ++j) {
                    float x = x_at(s, k0 + j);
                    if (swap_a1_a2 && r < 8 && j >= 4) x = x_at(s + 8, k0 + j - 4);
                    if (swap_a1_a2 && r >= 8 && j < 4) x = x_at(s - 8, k0 + j + 4);
                    const float w = k0 + j < I ? W[size_t(h) * I + k0 + j] : 0.0f;
                    c = add_rz(c, tf32(x) * tf32(w));  // the product of two tf32 values is exact
                }
            float z = c + b[h];
            if (act == 1) z = std::max(z, 0.0f);
            A[size_t(s) * H + h] = z;
        }
    return A;
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
        // The planted bug of tests/fixtures/tc/tc.ptx (a1 and a2 exchanged) is far outside.
        const auto bad = model_tc_forward(in.X, in.W, in.b, B, I, H, act, true);
        CHECK(outside(bad, ref) > bad.size() / 4);
    }
}
