// The float64 reference of convolution and max-pool (host/reference/ref_conv.hpp): hand-computed small
// cases (orientation, padding, bias, ties), finite differences for the backward passes, and
// the bounded versions that verify uses.
#include "conv.hpp"
#include "tcconv.hpp"
#include "error.hpp"
#include "ref_conv.hpp"
#include "rng.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

using namespace ptxlab;

namespace {
std::vector<double> iota(size_t n, double from) {
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = from + double(i);
    return v;
}
std::vector<double> random_doubles(Rng& rng, size_t n) {
    std::vector<double> v(n);
    for (auto& x : v) x = rng.uniform(-1.0f, 1.0f);
    return v;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}
}  // namespace

TEST_CASE("conv: forward is a cross-correlation with zero padding and a bias") {
    // X = 1..9 (3x3); the only nonzero weight is Wt[0][0][1][2]: Z[y][x] = X[y][x+1] + b.
    const ConvDims d{1, 1, 3, 3, 1, 3};
    std::vector<double> Wt(9, 0.0);
    Wt[1 * 3 + 2] = 2.0;
    const auto Y = conv2d_forward(d, iota(9, 1), Wt, {0.5}, std::nullopt);
    CHECK(Y == std::vector<double>{4.5, 6.5, 0.5, 10.5, 12.5, 0.5, 16.5, 18.5, 0.5});
    // All-ones 3x3 filter: the corner sums four pixels, the edge six, the centre nine; ReLU of
    // a negative bias.
    const auto S = conv2d_forward(d, iota(9, 1), std::vector<double>(9, 1.0), {-13.0}, Activation::Relu);
    CHECK(S == std::vector<double>{0, 8, 3, 14, 32, 20, 11, 26, 15});
    // Two channels in, two out, 1x1 kernel: a per-pixel matrix product.
    const ConvDims d1{1, 2, 1, 2, 2, 1};
    const auto P = conv2d_forward(d1, {1, 2, 3, 4}, {1, 10, 100, 1000}, {0, 1}, std::nullopt);
    CHECK(P == std::vector<double>{31, 42, 3101, 4201});
}

TEST_CASE("conv: 5x5 kernels pad by 2") {
    // 1 x 1 image: only the centre tap sees it.
    const ConvDims d{1, 1, 1, 1, 1, 5};
    std::vector<double> Wt = iota(25, 0);
    CHECK(conv2d_forward(d, {3}, Wt, {0}, std::nullopt) == std::vector<double>{36});  // 3 * Wt[2][2] = 3 * 12
}

TEST_CASE("conv: backward to the input and the weights, by hand") {
    const ConvDims d{1, 1, 3, 3, 1, 3};
    std::vector<double> Wt(9, 0.0);
    Wt[1 * 3 + 2] = 2.0;  // Z[y][x] = 2 X[y][x+1]: so dX[y][x] = 2 G[y][x-1]
    const auto dX = conv2d_backward_input(d, iota(9, 1), Wt);
    CHECK(dX == std::vector<double>{0, 2, 4, 0, 8, 10, 0, 14, 16});
    std::vector<double> dW, db;
    conv2d_backward_weights(d, iota(9, 1), std::vector<double>(9, 1.0), dW, db);
    // dW[ky][kx] = sum of X over the pixels that tap sees: the corner taps see a 2x2 block.
    CHECK(dW == std::vector<double>{12, 21, 16, 27, 45, 33, 24, 39, 28});
    CHECK(db == std::vector<double>{9});
}

TEST_CASE("conv: the backward passes match finite differences (tanh activation, odd sizes, two kernels sizes)") {
    Rng rng(7);
    for (const ConvDims d : {ConvDims{2, 3, 5, 4, 2, 3}, ConvDims{1, 2, 3, 5, 3, 5}}) {
        CAPTURE(d.KS);
        auto X = random_doubles(rng, d.x_size()), Wt = random_doubles(rng, d.w_size());
        auto b = random_doubles(rng, d.K), R = random_doubles(rng, d.y_size());
        // L = sum R * tanh(Z); G = dL/dZ = R * tanh'(Z).
        auto loss = [&] { return dot(R, conv2d_forward(d, X, Wt, b, Activation::Tanh)); };
        const auto Z = conv2d_forward(d, X, Wt, b, std::nullopt);
        std::vector<double> G(Z.size());
        for (size_t i = 0; i < G.size(); ++i) G[i] = R[i] * activate_grad(Activation::Tanh, Z[i]);
        const auto dX = conv2d_backward_input(d, G, Wt);
        std::vector<double> dW, db;
        conv2d_backward_weights(d, X, G, dW, db);
        auto check = [&](std::vector<double>& v, const std::vector<double>& grad) {
            for (size_t i = 0; i < v.size(); ++i) {
                const double h = 1e-6, keep = v[i];
                v[i] = keep + h;
                const double up = loss();
                v[i] = keep - h;
                const double down = loss();
                v[i] = keep;
                CAPTURE(i);
                CHECK(grad[i] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-6));
            }
        };
        check(X, dX);
        check(Wt, dW);
        check(b, db);
    }
}

TEST_CASE("pool: max, its index in the plane, first in row-major order on ties, and backward scatters") {
    // One 4x4 plane: windows {1,5,2,6}, {3,7,4,8} (max last), a tie of three 9s (first wins),
    // and a window whose max is at (1,0).
    const std::vector<double> X = {1, 2, 3, 4,   //
                                   5, 6, 7, 8,   //
                                   9, 9, 0, 0,   //
                                   9, 1, 6, 0};
    PoolResult r = maxpool2_forward(1, 4, 4, X);
    CHECK(r.Y == std::vector<double>{6, 8, 9, 6});
    CHECK(r.idx == std::vector<uint32_t>{5, 7, 8, 14});
    // All equal: index of (0, 0).
    CHECK(maxpool2_forward(1, 2, 2, {-1, -1, -1, -1}).idx == std::vector<uint32_t>{0});
    const auto dX = maxpool2_backward(1, 4, 4, {10, 20, 30, 40}, r.idx);
    CHECK(dX == std::vector<double>{0, 0, 0, 0, 0, 10, 0, 20, 30, 0, 0, 0, 0, 0, 40, 0});
    // Odd sizes: floor; the last row and column are dropped (and get 0 gradient).
    PoolResult o = maxpool2_forward(2, 3, 3, iota(18, 0));
    CHECK(o.Y == std::vector<double>{4, 13});
    CHECK(o.idx == std::vector<uint32_t>{4, 4});
    CHECK(maxpool2_backward(2, 3, 3, {1, 2}, o.idx) ==
          std::vector<double>{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0});
}

TEST_CASE("pool: backward matches finite differences") {
    Rng rng(3);
    const unsigned P = 3, H = 6, W = 4;
    auto X = random_doubles(rng, size_t(P) * H * W), R = random_doubles(rng, size_t(P) * 3 * 2);
    const auto grad = maxpool2_backward(P, H, W, R, maxpool2_forward(P, H, W, X).idx);
    for (size_t i = 0; i < X.size(); ++i) {
        const double h = 1e-7, keep = X[i];
        X[i] = keep + h;
        const double up = dot(R, maxpool2_forward(P, H, W, X).Y);
        X[i] = keep - h;
        const double down = dot(R, maxpool2_forward(P, H, W, X).Y);
        X[i] = keep;
        CHECK(grad[i] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-6));
    }
}

TEST_CASE("conv: bounded references hold a float32 emulation of the kernels' order and catch an off-by-one") {
    Rng rng(11);
    const ConvDims d{2, 3, 7, 9, 4, 3};
    std::vector<float> X(d.x_size()), Wt(d.w_size()), b(d.K);
    for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
    for (auto& w : Wt) w = rng.uniform(-0.5f, 0.5f);
    for (auto& v : b) v = rng.uniform(-0.1f, 0.1f);
    const Bounded ref = ref_conv_fwd(d, X, Wt, b, 0);
    // The kernels' order: fma from +0 over c, ky, kx, then + b; and the same with the padding
    // off by one (taps shifted one pixel), which must leave the bound.
    auto emulate = [&](int shift) {
        std::vector<float> Y(d.y_size());
        const int p = int(d.pad()) + shift;
        for (unsigned n = 0; n < d.N; ++n)
            for (unsigned k = 0; k < d.K; ++k)
                for (unsigned y = 0; y < d.H; ++y)
                    for (unsigned x = 0; x < d.W; ++x) {
                        float acc = 0.0f;
                        for (unsigned c = 0; c < d.C; ++c)
                            for (unsigned ky = 0; ky < d.KS; ++ky)
                                for (unsigned kx = 0; kx < d.KS; ++kx) {
                                    const int iy = int(y + ky) - p, ix = int(x + kx) - p;
                                    const bool in = iy >= 0 && ix >= 0 && iy < int(d.H) && ix < int(d.W);
                                    const float xv = in ? X[((size_t(n) * d.C + c) * d.H + iy) * d.W + ix] : 0.0f;
                                    acc = std::fma(xv, Wt[((size_t(k) * d.C + c) * d.KS + ky) * d.KS + kx], acc);
                                }
                        Y[((size_t(n) * d.K + k) * d.H + y) * d.W + x] = acc + b[k];
                    }
        return Y;
    };
    size_t good_fail = 0, bad_fail = 0;
    const auto good = emulate(0), bad = emulate(1);
    for (size_t i = 0; i < good.size(); ++i) {
        CHECK(std::isfinite(ref.e[i]));
        good_fail += !within_bound(good[i], ref.v[i], ref.e[i]);
        bad_fail += !within_bound(bad[i], ref.v[i], ref.e[i]);
    }
    CHECK(good_fail == 0);
    CHECK(bad_fail > good.size() / 2);
    // The ReLU version: outputs at the kink are not compared; negatives are exactly 0.
    const Bounded relu = ref_conv_fwd(d, X, Wt, b, 1);
    for (size_t i = 0; i < good.size(); ++i)
        if (std::isfinite(relu.e[i])) CHECK(within_bound(std::max(good[i], 0.0f), relu.v[i], relu.e[i]));
}

TEST_CASE("conv: bounded backward references mask by the layer's output and scale the weight gradient") {
    const ConvDims d{1, 1, 3, 3, 1, 3};
    std::vector<float> W(9, 0.0f);
    W[1 * 3 + 2] = 2.0f;
    const std::vector<float> dY = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const std::vector<float> Y = {1, 0, 1, 1, 1, -1, 1, 1, 0};  // mask out dY[1], dY[5], dY[8]
    const Bounded dX = ref_conv_bwd_data(d, dY, Y, W, 1);
    CHECK(dX.v == std::vector<double>{0, 2, 0, 0, 8, 10, 0, 14, 16});
    CHECK(ref_conv_bwd_data(d, dY, Y, W, 0).v == std::vector<double>{0, 2, 4, 0, 8, 10, 0, 14, 16});
    Bounded dW, db;
    ref_conv_bwd_weights(d, std::vector<float>(9, 1.0f), dY, Y, 1, 0.5f, dW, db);
    CHECK(db.v == std::vector<double>{0.5 * (1 + 3 + 4 + 5 + 7 + 8)});
    CHECK(dW.v[4] == db.v[0]);  // the centre tap sees every pixel of an all-ones X
    CHECK(dW.e[4] > 0);
    CHECK(dW.e[4] < 2e-5);
}

TEST_CASE("conv: launch shapes and the sizes the kernels take") {
    // Strips of whole rows, at most 256 pixels each (conv.ptx's header).
    CHECK(conv_strips(28, 28).strips == 4);
    CHECK(conv_strips(28, 28).rows == 7);
    CHECK(conv_strips(14, 14).strips == 1);
    CHECK(conv_strips(14, 14).rows == 14);
    CHECK(conv_strips(9, 9).rows == 9);
    CHECK(conv_strips(1, 256).rows == 1);
    CHECK(conv_unfit({64, 1, 28, 28, 32, 3}).empty());
    CHECK(conv_unfit({64, 32, 14, 14, 64, 5}).empty());
    CHECK(conv_unfit({1, 1, 28, 28, 1, 4}).find("kernel sizes 1, 3 and 5") != std::string::npos);
    CHECK(conv_unfit({1, 1, 1, 300, 1, 3}).find("up to 256 wide") != std::string::npos);
    CHECK(conv_unfit({1, 1, 40, 40, 1, 3}).find("H*W <= 1024") != std::string::npos);
    CHECK(conv_unfit({1, 0, 28, 28, 1, 3}).find(">= 1") != std::string::npos);
    // verify refuses what the kernels cannot take, and an act code other than 0 and 1.
    CHECK_THROWS_AS(validate_case({"conv_fwd", {1, 1, 28, 28, 1, 3, 2}}), InputError);
    CHECK_THROWS_AS(validate_case({"conv_fwd", {1, 1, 28, 28, 1, 3}}), InputError);
    CHECK_THROWS_AS(validate_case({"conv_bwd_weights", {1, 1, 40, 40, 1, 3, 1}}), InputError);
    CHECK_THROWS_AS(validate_case({"pool_fwd", {1, 1, 1, 8}}), InputError);
    CHECK_NOTHROW(validate_case({"pool_bwd", {3, 3, 7, 7, 1}}));
    CHECK_NOTHROW(validate_case({"pool_bwd", {3, 3, 7, 7, 0}}));
    CHECK_THROWS_WITH_AS(validate_case({"pool_bwd", {3, 3, 7, 7}}), doctest::Contains("N,C,H,W,mask (5 numbers)"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"pool_bwd", {3, 3, 7, 7, 2}}), doctest::Contains("mask must be 0"),
                         InputError);
    CHECK(shape_text({"conv_fwd", {64, 1, 28, 28, 32, 3, 1}}) == "N=64 C=1 H=28 W=28 K=32 KS=3 act=1");
    // conv_fwd with its pool: 8 numbers; strips of even rows; images up to 128 wide.
    CHECK(shape_text({"conv_fwd", {64, 1, 28, 28, 32, 3, 1, 1}}) == "N=64 C=1 H=28 W=28 K=32 KS=3 act=1 pool=1");
    CHECK_NOTHROW(validate_case({"conv_fwd", {3, 3, 9, 9, 17, 3, 1, 1}}));
    CHECK_THROWS_WITH_AS(validate_case({"conv_fwd", {3, 3, 9, 9, 17, 3, 1, 2}}), doctest::Contains("pool must be 0"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"conv_fwd", {1, 1, 2, 200, 1, 3, 1, 1}}),
                         doctest::Contains("images up to 128 wide"), InputError);
    CHECK_THROWS_AS(validate_case({"conv_bwd_data", {3, 3, 9, 9, 17, 3, 1, 1}}), InputError);  // 8 only for conv_fwd
    CHECK(conv_strips(28, 28).rows == 7);
    CHECK(conv_strips(28, 28, true).strips == 4);
    CHECK(conv_strips(28, 28, true).rows == 8);  // 8, 8, 8 and 4 rows
    CHECK(conv_strips(14, 14, true).rows == 14);
    CHECK(conv_strips(9, 9, true).rows == 10);   // one strip of 9 rows (windows in rows 0..7)
    CHECK(conv_strips(9, 64, true).strips == 3);
    CHECK(conv_strips(9, 64, true).rows == 4);   // 4, 4 and 1 rows
    CHECK(conv_pool_unfit({1, 1, 1, 8, 1, 3}).find("H, W >= 2") != std::string::npos);
    // tc_conv_fwd's strips with the pool: conv2 at batch 64 one strip of 14 rows; at batch 1 cut
    // finer into even rows only (14 = 2 + ... : 7 strips of 2 rows, not 2 strips of 7).
    CHECK(tcconv_strips({64, 32, 14, 14, 64, 3}, 64, true).strips == 1);
    CHECK(tcconv_strips({1, 32, 14, 14, 64, 3}, 64, true).rows % 2 == 0);
    CHECK(tcconv_strips({1, 32, 14, 14, 64, 3}, 64, false).rows == 1);
    CHECK(tcconv_strips({3, 32, 28, 28, 64, 3}, 64, true).rows % 2 == 0);
    // fc_bwd_data: B,I,O,act, any sizes >= 1 (it stages O in chunks of 128).
    CHECK_NOTHROW(validate_case({"fc_bwd_data", {64, 3136, 128, 1}}));
    CHECK_NOTHROW(validate_case({"fc_bwd_data", {1, 1, 1024, 0}}));
    CHECK_NOTHROW(validate_case({"fc_bwd_data", {1, 1, 1025, 0}}));
    CHECK_NOTHROW(validate_case({"fc_bwd_data", {3, 5, 100000, 1}}));
    CHECK_THROWS_WITH_AS(validate_case({"fc_bwd_data", {1, 1, 8, 2}}), doctest::Contains("act must be 0"), InputError);
    CHECK_THROWS_AS(validate_case({"fc_bwd_data", {0, 1, 8, 0}}), InputError);
    CHECK_THROWS_AS(validate_case({"fc_bwd_data", {1, 1, 8}}), InputError);
    CHECK(shape_text({"fc_bwd_data", {64, 3136, 128, 1}}) == "B=64 I=3136 O=128 act=1");
}

TEST_CASE("conv: fc_bwd_data's launch plan (ptx/fc.ptx's header)") {
    // The most warps (4 samples each) a block of 32 columns that leave 256 blocks, else 1; shared
    // memory: a buffer (two where O > 128) of 128 W rows (16 KB), 4 warps G rows and, with act 1,
    // as many Y rows (2 KB a warp each).
    auto check = [](unsigned B, unsigned I, unsigned O, unsigned act, unsigned warps, size_t grid, unsigned smem) {
        CAPTURE(B);
        CAPTURE(I);
        CAPTURE(O);
        CAPTURE(act);
        const FcPlan p = fc_plan(B, I, O, act);
        CHECK(p.warps == warps);
        CHECK(p.block == 32 * warps);
        CHECK(p.grid == grid);
        CHECK(p.smem == smem);
    };
    check(64, 256, 128, 1, 1, 8 * 16, 16384 + 2 * 2048);         // the MLP's 128 -> 256 at batch 64
    check(64, 256, 128, 0, 1, 8 * 16, 16384 + 2048);
    check(64, 3136, 128, 1, 4, 98 * 4, 16384 + 2 * 8192);       // the CNN's fc1
    check(500, 3136, 128, 1, 8, 98 * 16, 16384 + 2 * 16384);
    check(64, 1000, 10, 0, 2, 32 * 8, 16384 + 4096);
    check(1, 1, 1, 0, 1, 1, 16384 + 2048);
    check(9, 70, 301, 1, 1, 3 * 3, 2 * (16384 + 2 * 2048));       // three chunks: two buffers
    check(256, 1024, 300, 1, 8, 32 * 8, 2 * (16384 + 2 * 16384));  // 96 KB, the most it takes
    check(1, 3136, 129, 1, 1, 98, 2 * (16384 + 2 * 2048));
    // The launch refuses empty sizes and a grid past 2^31 - 1 blocks before it touches the kernel.
    check(0xffffffffu, 0xffffffffu, 1, 0, 8, size_t(1) << 54, 16384 + 16384);
    CHECK_THROWS_WITH_AS(launch_fc_bwd_data(Kernel{}, 0xffffffffu, 0xffffffffu, 1, 0, 0, 0, 0, 0, nullptr),
                         doctest::Contains("more than a grid takes"), InputError);
    CHECK_THROWS_WITH_AS(launch_fc_bwd_data(Kernel{}, 1, 1, 0, 0, 0, 0, 0, 0, nullptr),
                         doctest::Contains("B, I, O >= 1"), InputError);
}

TEST_CASE("conv: conv_bwd_weights' launch plan for the CNN's layers and the verify shapes") {
    // conv1: one input channel, 256 lanes on it; 4 groups of 8 output channels.
    const ConvWgradPlan c1 = conv_wgrad_plan({64, 1, 28, 28, 32, 3});
    CHECK(c1.cs == 1);
    CHECK(c1.lanes == 256);
    CHECK(c1.slices == 1);
    CHECK(c1.kgroups == 4);
    CHECK(c1.grid == 32);
    CHECK(c1.passes == 1);
    CHECK(c1.smem == 10240 + 8 * 944 + 128 * 784);
    CHECK(conv_wgrad_plan({64, 1, 28, 28, 32, 3}, 0).smem == 10240 + 8 * 944 + 64 * 784);  // act 0: no Y
    CHECK(conv_wgrad_depth({64, 1, 28, 28, 32, 3}) == 8 * 4 + 5 + 7 + 7 + 1);
    // conv2: slices of 16 channels, 16 lanes each; 8 x 2 clusters = 128 blocks.
    const ConvWgradPlan c2 = conv_wgrad_plan({64, 32, 14, 14, 64, 3});
    CHECK(c2.cs == 16);
    CHECK(c2.lanes == 16);
    CHECK(c2.slices == 2);
    CHECK(c2.kgroups == 8);
    CHECK(c2.grid == 128);
    CHECK(c2.smem == 10240 + 8 * 16 * 272 + 128 * 196);
    CHECK(conv_wgrad_depth({64, 32, 14, 14, 64, 3}) == 8 * 13 + 4 + 7 + 1);
    // 5x5 taps take three passes; 1x1 one; C not a power of two rounds the slice up.
    CHECK(conv_wgrad_plan({64, 1, 28, 28, 32, 5}).passes == 3);
    CHECK(conv_wgrad_plan({2, 3, 9, 9, 8, 1}).passes == 1);
    CHECK(conv_wgrad_plan({3, 3, 7, 7, 17, 5}).cs == 4);
    CHECK(conv_wgrad_plan({3, 3, 7, 7, 17, 5}).kgroups == 3);
    CHECK(conv_wgrad_plan({3, 64, 9, 9, 32, 5}).slices == 4);
    CHECK(conv_wgrad_plan({1, 9, 14, 14, 3, 3}).cs == 16);
    // 16 channels of 28x28 with their halo would pass 200 KB: 8 of them.
    CHECK(conv_wgrad_plan({3, 32, 28, 28, 64, 3}).cs == 8);
    // The kernel reads the slice width back from the grid: the least power of two >= ceil(C / slices).
    for (const ConvDims d : {ConvDims{64, 1, 28, 28, 32, 3}, ConvDims{64, 32, 14, 14, 64, 3}, ConvDims{3, 3, 7, 7, 17, 5},
                             ConvDims{3, 32, 28, 28, 64, 3}, ConvDims{1, 9, 14, 14, 3, 3}, ConvDims{3, 64, 9, 9, 32, 5},
                             ConvDims{64, 1568, 1, 1, 10, 1}, ConvDims{2, 17, 32, 32, 5, 5}, ConvDims{2, 5, 32, 32, 5, 5}}) {
        CAPTURE(d.C);
        CAPTURE(d.H);
        const ConvWgradPlan p = conv_wgrad_plan(d);
        const unsigned slices = p.grid / 8 / ((d.K + 7) / 8), want = (d.C + slices - 1) / slices;
        unsigned cs = 1;
        while (cs < want) cs *= 2;
        CHECK(cs == p.cs);
        CHECK(p.cs * p.lanes == 256);
        CHECK(p.smem <= kConvWgradSmem);
        CHECK(p.smem == conv_wgrad_smem(d, p.cs));
    }
    // Every shape conv_unfit takes fits with a slice of one channel.
    CHECK(conv_wgrad_smem({1, 1, 32, 32, 1, 5}, 1) <= kConvWgradSmem);
    CHECK(conv_wgrad_smem({1, 1, 4, 256, 1, 5}, 1) <= kConvWgradSmem);
}

namespace {
// conv_bwd_weights' summation order (conv.ptx's header), emulated in float32 from the plan.
std::vector<float> emulate_wgrad(const ConvDims& d, const std::vector<float>& X, const std::vector<float>& G,
                                 float scale, int shift) {
    const ConvWgradPlan p = conv_wgrad_plan(d);
    const unsigned L = p.lanes, seg = std::min(L, 32u), nseg = L > 32 ? L / 32 : 1, HW = d.H * d.W, T = d.KS * d.KS;
    const int pad = int(d.pad()) + shift;
    std::vector<float> dW(d.w_size());
    for (unsigned k = 0; k < d.K; ++k)
        for (unsigned c = 0; c < d.C; ++c)
            for (unsigned tap = 0; tap < T; ++tap) {
                float ranks[8];
                for (unsigned r = 0; r < 8; ++r) {
                    std::vector<float> lane(L, 0.0f);
                    for (unsigned j = 0; j < L; ++j)
                        for (unsigned n = r; n < d.N; n += 8)
                            for (unsigned q = j; q < HW; q += L) {
                                const int iy = int(q / d.W + tap / d.KS) - pad, ix = int(q % d.W + tap % d.KS) - pad;
                                const bool in = iy >= 0 && ix >= 0 && iy < int(d.H) && ix < int(d.W);
                                const float x = in ? X[((size_t(n) * d.C + c) * d.H + iy) * d.W + ix] : 0.0f;
                                lane[j] = std::fma(G[(size_t(n) * d.K + k) * HW + q], x, lane[j]);
                            }
                    for (unsigned m = seg / 2; m >= 1; m /= 2) {
                        std::vector<float> o = lane;
                        for (unsigned j = 0; j < L; ++j) lane[j] = o[j] + o[j ^ m];
                    }
                    float s = lane[0];
                    for (unsigned w = 1; w < nseg; ++w) s += lane[w * 32];
                    ranks[r] = s;
                }
                float sum = ranks[0];
                for (unsigned r = 1; r < 8; ++r) sum += ranks[r];
                dW[(size_t(k) * d.C + c) * T + tap] = sum * scale;
            }
    return dW;
}
}  // namespace

TEST_CASE("conv: conv_bwd_weights' bound holds a float32 emulation of its order and catches an off-by-one") {
    Rng rng(12);
    for (const ConvDims d : {ConvDims{20, 3, 9, 9, 5, 3}, ConvDims{9, 17, 7, 7, 3, 5}, ConvDims{3, 1, 28, 28, 2, 3}}) {
        CAPTURE(d.C);
        std::vector<float> X(d.x_size()), dY(d.y_size()), Y(d.y_size());
        for (auto& x : X) x = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
        for (auto& v : dY) v = rng.uniform(-1.0f, 1.0f);
        for (auto& v : Y) v = std::max(rng.uniform(-1.0f, 1.0f), 0.0f);
        std::vector<float> G(dY.size());
        for (size_t i = 0; i < G.size(); ++i) G[i] = Y[i] > 0.0f ? dY[i] : 0.0f;
        const float scale = 1.0f / float(d.N);
        Bounded dW, db;
        ref_conv_bwd_weights(d, X, dY, Y, 1, scale, dW, db);
        const auto good = emulate_wgrad(d, X, G, scale, 0), bad = emulate_wgrad(d, X, G, scale, 1);
        size_t good_fail = 0, bad_fail = 0;
        for (size_t i = 0; i < good.size(); ++i) {
            good_fail += !within_bound(good[i], dW.v[i], dW.e[i]);
            bad_fail += !within_bound(bad[i], dW.v[i], dW.e[i]);
        }
        CHECK(good_fail == 0);
        CHECK(bad_fail > good.size() / 2);
    }
}

namespace {
// cvt.rna.tf32.f32: keep 10 fraction bits, nearest, ties away from zero.
float tf32_rna(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x1000u) & ~0x1fffu;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}
// A float truncated toward zero from a double (a tensor core's group sum, tc.hpp item 2).
float toward_zero(double v) {
    float f = float(v);
    if (std::fabs(double(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
    return f;
}
}  // namespace

TEST_CASE("conv: the tensor-core bound holds a TF32 emulation of tc_conv_fwd's chain and catches swapped patches") {
    Rng rng(17);
    const ConvDims d{2, 11, 7, 9, 5, 3};  // 11 channels: two chunks of 8, the second part-empty
    std::vector<float> X(d.x_size()), Wt(d.w_size()), b(d.K);
    for (auto& x : X) x = rng.uniform(-1.0f, 1.0f);
    for (auto& w : Wt) w = rng.uniform(-0.3f, 0.3f);
    for (auto& v : b) v = rng.uniform(-0.1f, 0.1f);
    const Bounded ref = ref_conv_fwd(d, X, Wt, b, 0, ConvArith::Tf32);
    const Bounded fp32 = ref_conv_fwd(d, X, Wt, b, 0);
    const unsigned T = d.KS * d.KS;
    // The kernel's chain: for each chunk of 8 channels and k step of 8 patch values one mma,
    // here the 8 TF32 products and c summed exactly and truncated toward zero; then + b.
    // swap: pixel x takes pixel x+1's patch values in k slots 4..7 (a fragment mix-up).
    auto emulate = [&](bool swap) {
        std::vector<float> Y(d.y_size());
        for (unsigned n = 0; n < d.N; ++n)
            for (unsigned k = 0; k < d.K; ++k)
                for (unsigned y = 0; y < d.H; ++y)
                    for (unsigned x = 0; x < d.W; ++x) {
                        float c = 0.0f;
                        for (unsigned c0 = 0; c0 < d.C; c0 += 8)
                            for (unsigned s = 0; s < T; ++s) {
                                double sum = c;
                                for (unsigned j = 0; j < 8; ++j) {
                                    const unsigned kk = 8 * s + j, ch = c0 + kk / T, tap = kk % T;
                                    if (ch >= d.C) continue;
                                    const unsigned px = swap && j >= 4 ? (x + 1) % d.W : x;
                                    const int iy = int(y + tap / d.KS) - 1, ix = int(px + tap % d.KS) - 1;
                                    const bool in = iy >= 0 && ix >= 0 && iy < int(d.H) && ix < int(d.W);
                                    const float xv = in ? X[((size_t(n) * d.C + ch) * d.H + iy) * d.W + ix] : 0.0f;
                                    sum += double(tf32_rna(xv)) * tf32_rna(Wt[(size_t(k) * d.C + ch) * T + tap]);
                                }
                                c = toward_zero(sum);
                            }
                        Y[((size_t(n) * d.K + k) * d.H + y) * d.W + x] = c + b[k];
                    }
        return Y;
    };
    const auto good = emulate(false), bad = emulate(true);
    size_t good_fail = 0, bad_fail = 0, fp32_fail = 0;
    for (size_t i = 0; i < good.size(); ++i) {
        good_fail += !within_bound(good[i], ref.v[i], ref.e[i]);
        bad_fail += !within_bound(bad[i], ref.v[i], ref.e[i]);
        fp32_fail += !within_bound(good[i], fp32.v[i], fp32.e[i]);
    }
    CHECK(good_fail == 0);
    CHECK(bad_fail > good.size() / 2);
    CHECK(fp32_fail > 0);  // TF32's error is beyond float32's bound: the TF32 bound is needed
}

TEST_CASE("conv: tc_conv's strips fill the GPU and every strip starts inside the image") {
    // The CNN at batch 64: conv2 forward (K 64: 2 groups) 128 blocks of one strip; backward (C 32:
    // 1 group) cut into 2 strips of 7 rows; conv1 (28x28) 4 strips of 7 rows; one image of 14x14
    // with one group: every row a strip.
    CHECK(tcconv_strips({64, 32, 14, 14, 64, 3}, 64).strips == 1);
    const ConvStrips s2 = tcconv_strips({64, 32, 14, 14, 64, 3}, 32);
    CHECK(s2.strips == 2);
    CHECK(s2.rows == 7);
    CHECK(tcconv_strips({64, 1, 28, 28, 32, 3}, 32).strips == 4);
    CHECK(tcconv_strips({1, 3, 14, 14, 5, 3}, 5).strips == 14);
    for (unsigned H : {1u, 7u, 9u, 13u, 14u, 28u})
        for (unsigned N : {1u, 3u, 64u}) {
            const ConvDims d{N, 3, H, H, 40, 5};
            const ConvStrips s = tcconv_strips(d, 40);
            CAPTURE(H);
            CAPTURE(N);
            CHECK(s.rows * H <= 256);
            CHECK((s.strips - 1) * s.rows < H);  // the last strip starts inside the image
            CHECK(s.strips * s.rows >= H);
            CHECK(tcconv_smem(d, 40) <= 227u * 1024);
        }
}
