// tc_conv_bwd_weights' host side (host/kernels/tcwgrad.hpp): its float64 reference on a hand-computed
// case, its TF32 bound against an emulation of the kernel's input rounding, its launch plan and
// the shapes it refuses.
#include "conv.hpp"
#include "error.hpp"
#include "rng.hpp"
#include "tcwgrad.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>

using namespace ptxlab;

namespace {
// cvt.rna.tf32.f32 for finite x: nearest, ties away from zero, the 13 low bits cleared.
float tf32(float x) {
    uint32_t b = std::bit_cast<uint32_t>(x);
    b = (b + 0x1000u) & ~0x1fffu;
    return std::bit_cast<float>(b);
}
}  // namespace

TEST_CASE("tcwgrad: the reference by hand: X = 1..9 on 3x3, G at the centre and a corner, masked by Y") {
    const ConvDims d{1, 1, 3, 3, 1, 3};
    std::vector<float> X(9);
    for (int i = 0; i < 9; ++i) X[size_t(i)] = float(i + 1);  // X[r][c] = 3r + c + 1
    std::vector<float> dY(9, 0.0f), Y(9, 1.0f);
    dY[4] = 1.0f;  // the centre pixel (1, 1): tap (ky, kx) sees X[ky][kx]
    dY[0] = 2.0f;  // the corner (0, 0): tap (ky, kx) sees X[ky-1][kx-1], 0 outside
    Y[0] = 0.0f;   // ... masked with act 1
    Bounded dW, db;
    ref_tc_conv_bwd_weights(d, X, dY, Y, 0, 0.5f, dW, db);
    const std::vector<double> want0 = {0.5, 1.0, 1.5, 2.0, 0.5 * (5 + 2 * 1), 0.5 * (6 + 2 * 2),
                                       3.5, 0.5 * (8 + 2 * 4), 0.5 * (9 + 2 * 5)};
    CHECK(dW.v == want0);
    CHECK(db.v == std::vector<double>{1.5});
    // The bound of the centre tap: |scale| (2^-10 S + ...) with S = 5 + 2 = 7, and under twice that.
    CHECK(dW.e[4] > 0.5 * 7 * 0x1p-10);
    CHECK(dW.e[4] < 0.5 * 7 * 0x1p-9);
    CHECK(db.e[0] > 0);
    CHECK(db.e[0] < 1.5 * 1e-5);
    ref_tc_conv_bwd_weights(d, X, dY, Y, 1, 0.5f, dW, db);
    CHECK(dW.v == std::vector<double>{0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5});
    CHECK(db.v == std::vector<double>{0.5});
}

TEST_CASE("tcwgrad: the bound holds TF32-rounded products and catches a tap off by one") {
    const ConvDims d{3, 3, 5, 5, 4, 3};
    Rng rng(7);
    std::vector<float> X(d.x_size()), dY(d.y_size()), Y(d.y_size());
    for (auto& v : X) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : dY) v = rng.uniform(-1.0f, 1.0f);
    for (auto& v : Y) v = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
    const float scale = 1.0f / 3.0f;
    Bounded dW, db;
    ref_tc_conv_bwd_weights(d, X, dY, Y, 1, scale, dW, db);
    const long p = d.pad();
    size_t caught = 0;
    for (unsigned k = 0; k < d.K; ++k)
        for (unsigned c = 0; c < d.C; ++c)
            for (unsigned ky = 0; ky < d.KS; ++ky)
                for (unsigned kx = 0; kx < d.KS; ++kx) {
                    double good = 0, shifted = 0;  // products of tf32 inputs; the same with kx one to the right
                    for (unsigned n = 0; n < d.N; ++n)
                        for (long y = 0; y < long(d.H); ++y)
                            for (long x = 0; x < long(d.W); ++x) {
                                const size_t o = ((size_t(n) * d.K + k) * d.H + size_t(y)) * d.W + size_t(x);
                                const float g = Y[o] > 0.0f ? dY[o] : 0.0f;
                                auto xv = [&](long iy, long ix) {
                                    if (iy < 0 || ix < 0 || iy >= long(d.H) || ix >= long(d.W)) return 0.0f;
                                    return X[((size_t(n) * d.C + c) * d.H + size_t(iy)) * d.W + size_t(ix)];
                                };
                                good += double(tf32(g)) * double(tf32(xv(y + ky - p, x + kx - p)));
                                shifted += double(tf32(g)) * double(tf32(xv(y + ky - p, x + kx + 1 - p)));
                            }
                    const size_t o = ((size_t(k) * d.C + c) * d.KS + ky) * d.KS + kx;
                    CHECK(within_bound(float(double(scale) * good), dW.v[o], dW.e[o]));
                    caught += !within_bound(float(double(scale) * shifted), dW.v[o], dW.e[o]);
                }
    CHECK(caught == d.w_size());
}

TEST_CASE("tcwgrad: launch plan and shared memory for the CNN's layers") {
    // conv2: 64 output channels in 4 tiles of 16, 32 x 9 = 288 columns in 5 groups of 64.
    const TcWgradPlan c2 = tcwgrad_plan({64, 32, 14, 14, 64, 3});
    CHECK(c2.mtiles == 4);
    CHECK(c2.cgroups == 5);
    CHECK(c2.grid == 160);
    CHECK(c2.nch == 8);  // 64 columns touch at most 62/9 + 2 channels
    // ceil16(4160 + 4*200) + two buffers of 128*228 + 4*8*292 (HWP 200, GP 228, XP ceil4(256 + 2*17 + 1))
    CHECK(c2.buffers == 2);
    CHECK(c2.smem == 4960 + 2 * (29184 + 9344));
    // conv1: one input channel, 9 columns in one group; 32 output channels in 2 tiles.
    const TcWgradPlan c1 = tcwgrad_plan({64, 1, 28, 28, 32, 3});
    CHECK(c1.mtiles == 2);
    CHECK(c1.cgroups == 1);
    CHECK(c1.grid == 16);
    CHECK(c1.nch == 1);
    CHECK(c1.buffers == 2);
    CHECK(c1.smem == 7296 + 2 * (128 * 804 + 4 * 964));
    // 32 channels of 28x28: two buffers would take 274 816 bytes, so one.
    const TcWgradPlan big = tcwgrad_plan({3, 32, 28, 28, 64, 3});
    CHECK(big.buffers == 1);
    CHECK(big.smem == 7296 + 128 * 804 + 4 * 8 * 964);
    CHECK(tcwgrad_smem({3, 32, 28, 28, 64, 3}, 2) == 7296 + 2 * (128 * 804 + 4 * 8 * 964));
    // A tiny image: the staging area is smaller than the warps' tiles (32768 bytes) it is reused for.
    CHECK(tcwgrad_smem({1, 1, 1, 1, 1, 1}) == 4192 + 32768);  // ceil16(4160 + 4*8)
    // The bounds' chain lengths: conv2's warps run ceil(64/8) images x ceil(25/8) k-steps of 8 products.
    CHECK(tcwgrad_chain({64, 32, 14, 14, 64, 3}) == 8 * 8 * 4);
    // db: a thread's row, 8 images x ceil(49/16) groups of 4 pixels (conv2), 8 x ceil(196/16) (conv1).
    CHECK(tcwgrad_bias_depth({64, 32, 14, 14, 64, 3}) == 4 * 8 * 4 + 12);
    CHECK(tcwgrad_bias_depth({64, 1, 28, 28, 32, 3}) == 4 * 8 * 13 + 12);
}

TEST_CASE("tcwgrad: the shapes it takes and refuses") {
    CHECK(tcwgrad_unfit({64, 32, 14, 14, 64, 3}).empty());
    CHECK(tcwgrad_unfit({64, 1, 28, 28, 32, 5}).empty());
    CHECK(tcwgrad_unfit({1, 1, 1, 1, 1, 1}).empty());
    CHECK(tcwgrad_unfit({3, 64, 32, 32, 64, 3}).empty());  // the largest images conv_unfit takes, KS 3
    CHECK(tcwgrad_unfit({1, 0, 28, 28, 1, 3}).find(">= 1") != std::string::npos);
    CHECK(tcwgrad_unfit({1, 1, 28, 28, 0, 3}).find(">= 1") != std::string::npos);
    CHECK(tcwgrad_unfit({1, 1, 28, 28, 1, 4}).find("kernel sizes 1, 3 and 5") != std::string::npos);
    // KS 1 with 64 channels of 28x28: 64 planes to stage, more shared memory than a block has.
    CHECK(tcwgrad_unfit({1, 64, 28, 28, 8, 1}).find("shared memory") != std::string::npos);
    CHECK(tcwgrad_unfit({1, 16, 28, 28, 8, 1}).empty());
    CHECK(tcwgrad_unfit({70000, 1, 256, 256, 1, 3}).find("32 bits") != std::string::npos);
    // Every default verify case is one it takes; verify refuses the rest, and act codes past 1.
    size_t n = 0;
    for (const auto& c : default_cases())
        if (c.entry == "tc_conv_bwd_weights") {
            CAPTURE(shape_text(c));
            CHECK_NOTHROW(validate_case(c));
            ++n;
        }
    CHECK(n >= 15);
    CHECK_THROWS_WITH_AS(validate_case({"tc_conv_bwd_weights", {1, 64, 28, 28, 8, 1, 0}}),
                         doctest::Contains("shared memory"), InputError);
    CHECK_THROWS_AS(validate_case({"tc_conv_bwd_weights", {1, 1, 28, 28, 1, 3, 2}}), InputError);
    CHECK(shape_text({"tc_conv_bwd_weights", {64, 32, 14, 14, 64, 3, 1}}) == "N=64 C=32 H=14 W=14 K=64 KS=3 act=1");
}
