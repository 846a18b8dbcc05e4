// dense_mm's host side (host/kernels/dense.hpp): the launch plan (tiles, the cluster split of
// K and each rank's k tiles), the shapes it refuses, and the three products' arguments: a CPU
// emulation of the kernel's summation order (dense.ptx's header) on the strides they pass
// must give the layer's maths within the rounding bound.
#include "dense.hpp"
#include "error.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

using namespace ptxlab;

TEST_CASE("dense: the plan takes the least cluster that gives about a block an SM, keeping a k tile a rank") {
    // B = 64, 1024 -> 1024 forward: 16 tiles of 64 x 64, K = 1024 in 64 k tiles: clusters of 8.
    DensePlan p = dense_plan(64, 1024, 1024, false, 132);
    CHECK(p.tiles_m == 1);
    CHECK(p.tiles_n == 16);
    CHECK(p.ktiles == 64);
    CHECK(p.cluster == 8);
    CHECK(p.grid == 128);
    // Its weight gradient: 1024 x (1024 + the ones column) outputs, K = 64: 272 tiles, no split.
    p = dense_plan(1024, 1024, 64, true, 132);
    CHECK(p.tiles_n == 17);
    CHECK(p.cluster == 1);
    CHECK(p.grid == 272);
    // K = 33 (3 k tiles): 2 ranks at most, then 4 would leave ranks without a tile.
    CHECK(dense_plan(5, 257, 33, false, 132).cluster == 2);
    CHECK(dense_plan(1, 1, 1, false, 132).cluster == 1);
    // 8 tiles at batch 500, 784 -> 1024 (128 tiles): a split of 2 reaches 132 SMs.
    CHECK(dense_plan(500, 1024, 784, false, 132).cluster == 2);
    // A forced cluster is taken as it is.
    p = dense_plan(5, 257, 33, false, 132, 8);
    CHECK(p.cluster == 8);
    CHECK(p.grid == 5 * 8);
}

TEST_CASE("dense: the ranks' k tiles cover every tile once, in rank order") {
    for (unsigned K : {1u, 15u, 16u, 17u, 33u, 64u, 100u, 784u, 1024u, 4096u})
        for (unsigned R : {1u, 2u, 4u, 8u}) {
            const DensePlan p = dense_plan(64, 64, K, false, 132, R);
            unsigned next = 0;
            for (unsigned r = 0; r < R; ++r) {
                const DenseRange g = dense_rank_range(p, r);
                CHECK(g.first <= g.end);
                if (g.first < g.end) {
                    CHECK(g.first == next);
                    next = g.end;
                }
            }
            CHECK(next == p.ktiles);
        }
}

TEST_CASE("dense: the shapes it refuses") {
    DenseArgs a = dense_forward_args(0, 3, 4, 1, 2, 3, 4, 1);
    CHECK(dense_unfit(a).find("M, N, K >= 1") != std::string::npos);
    a = dense_forward_args(2, 3, 4, 1, 2, 3, 4, 1);
    CHECK(dense_unfit(a).empty());
    a.C = 0;
    CHECK(!dense_unfit(a).empty());
}

namespace {
// The kernel's order on the CPU: per rank a fmaf chain over its k tiles (padding included),
// the ranks joined in order, the epilogue. Buffers are found by their (fake) pointer value.
struct Emulated {
    std::vector<float> C, db;
};
Emulated emulate(const DenseArgs& a, const std::map<CUdeviceptr, const std::vector<float>*>& mem, unsigned R) {
    auto at = [&](CUdeviceptr p, size_t i) { return (*mem.at(p))[i]; };
    const DensePlan p = dense_plan(a.M, a.N, a.K, a.db != 0, 132, R);
    const unsigned Np = a.N + (a.db ? 1 : 0);
    Emulated e{std::vector<float>(size_t(a.M) * a.N), std::vector<float>(a.db ? a.M : 0)};
    for (unsigned m = 0; m < a.M; ++m)
        for (unsigned n = 0; n < Np; ++n) {
            float sum = 0.0f;
            for (unsigned r = 0; r < R; ++r) {
                const DenseRange g = dense_rank_range(p, r);
                float part = 0.0f;
                for (unsigned k = g.first * 16; k < g.end * 16; ++k) {
                    float x = 0.0f, y = 0.0f;
                    if (k < a.K) {
                        const size_t o = size_t(m) * a.a_sm + size_t(k) * a.a_sk;
                        x = at(a.A, o);
                        if (a.Am && !(at(a.Am, o) > 0.0f)) x = 0.0f;
                        y = n == a.N ? 1.0f : at(a.Bo, size_t(n) * a.b_sn + size_t(k) * a.b_sk);
                    }
                    part = std::fma(x, y, part);
                }
                sum = r == 0 ? part : sum + part;
            }
            float v = sum * a.scale;
            if (n == a.N) {
                e.db[m] = v;
                continue;
            }
            if (a.bias) v += at(a.bias, n);
            if (a.relu) v = std::max(v, 0.0f);
            e.C[size_t(m) * a.N + n] = v;
        }
    return e;
}

double gamma_of(size_t n) { return double(n) * 0x1p-24 / (1.0 - double(n) * 0x1p-24); }

std::vector<float> rand(Rng& rng, size_t n, bool relu) {
    std::vector<float> v(n);
    for (auto& x : v) x = relu ? std::max(rng.uniform(-1.0f, 1.0f), 0.0f) : rng.uniform(-1.0f, 1.0f);
    return v;
}
}  // namespace

TEST_CASE("dense: the three products' strides, emulated in the kernel's order, give the layer's maths") {
    Rng rng(33);
    for (const auto& s : std::vector<std::vector<unsigned>>{{3, 9, 5}, {5, 257, 33}, {1, 1, 1}, {67, 20, 130}})
        for (unsigned R : {1u, 2u, 8u}) {
            const unsigned B = s[0], I = s[1], O = s[2];
            CAPTURE(B);
            CAPTURE(I);
            CAPTURE(O);
            CAPTURE(R);
            const auto X = rand(rng, size_t(B) * I, false), W = rand(rng, size_t(O) * I, false);
            const auto b = rand(rng, O, false);
            const auto dY = rand(rng, size_t(B) * O, false), Y = rand(rng, size_t(B) * O, true);
            const std::map<CUdeviceptr, const std::vector<float>*> mem = {
                {1, &X}, {2, &W}, {3, &b}, {4, &dY}, {5, &Y}};
            const float scale = 0.37f;
            const Emulated f = emulate(dense_forward_args(B, I, O, 1, 2, 3, 9, 1), mem, R);
            const Emulated d = emulate(dense_bwd_data_args(B, I, O, 9, 4, 5, 2, 1), mem, R);
            const Emulated w = emulate(dense_bwd_weights_args(B, I, O, 9, 8, 1, 4, 5, 1, scale), mem, R);
            auto g = [&](size_t s_, size_t o) { return Y[s_ * O + o] > 0.0f ? double(dY[s_ * O + o]) : 0.0; };
            for (unsigned t = 0; t < B; ++t)
                for (unsigned o = 0; o < O; ++o) {  // forward: Y = ReLU(X W^T + b)
                    double z = b[o], mag = std::fabs(b[o]);
                    for (unsigned i = 0; i < I; ++i) {
                        const double p = double(X[t * I + i]) * W[o * I + i];
                        z += p, mag += std::fabs(p);
                    }
                    CHECK(std::fabs(f.C[t * O + o] - std::max(z, 0.0)) <= gamma_of(dense_depth(I, R)) * mag);
                }
            for (unsigned t = 0; t < B; ++t)
                for (unsigned i = 0; i < I; ++i) {  // deltas: dX = G W
                    double z = 0, mag = 0;
                    for (unsigned o = 0; o < O; ++o) {
                        const double p = g(t, o) * W[o * I + i];
                        z += p, mag += std::fabs(p);
                    }
                    CHECK(std::fabs(d.C[t * I + i] - z) <= gamma_of(dense_depth(O, R)) * mag);
                }
            for (unsigned o = 0; o < O; ++o) {  // weights: dW = scale G^T X, db = scale sum_s G
                double zb = 0, mb = 0;
                for (unsigned t = 0; t < B; ++t) zb += g(t, o), mb += std::fabs(g(t, o));
                CHECK(std::fabs(w.db[o] - scale * zb) <= gamma_of(dense_depth(B, R)) * scale * mb);
                for (unsigned i = 0; i < I; ++i) {
                    double z = 0, mag = 0;
                    for (unsigned t = 0; t < B; ++t) {
                        const double p = g(t, o) * X[t * I + i];
                        z += p, mag += std::fabs(p);
                    }
                    CHECK(std::fabs(w.C[o * I + i] - scale * z) <= gamma_of(dense_depth(B, R)) * scale * mag);
                }
            }
        }
}
