// The bn kernels' verify harness (host/verify/family_bn.cpp) without a GPU: a float model of
// ptx/bn.ptx (its header's sums and roundings, step by step) run on the harness's inputs lies
// within the float64 bound at every case of the default set; the same model with a planted
// slip (the unbiased variance in the normalization, eps left out, the tree's last level
// skipped) does not.
#include "bn.hpp"
#include "recipe.hpp"
#include "reference.hpp"
#include "registry.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

using namespace ptxlab;
using verify_detail::Harness;
using verify_detail::Role;

namespace {

enum class Slip { None, Unbiased, NoEps, ShortTree };

struct Model {
    unsigned B, C, HW, act;
    Slip slip = Slip::None;
    size_t n() const { return size_t(B) * HW; }
    size_t at(size_t k, unsigned c) const { return (k / HW * C + c) * HW + k % HW; }
    // The cluster's sum of f(k) over the channel's values: thread partials (thread g = 256 rank
    // + t takes k = g, g + 2048, ...), each block's tree, then the blocks in rank order.
    template <class F> float block_sum(F f) const {
        const unsigned G = kBnThreads * kBnCluster;
        std::vector<float> s(G, 0.0f);
        for (unsigned g = 0; g < G; ++g)
            for (size_t k = g; k < n(); k += G) s[g] = f(k, s[g]);
        for (unsigned r = 0; r < kBnCluster; ++r)
            for (unsigned h = kBnThreads / 2; h >= (slip == Slip::ShortTree ? 2u : 1u); h /= 2)
                for (unsigned t = 0; t < h; ++t) s[r * kBnThreads + t] = s[r * kBnThreads + t] + s[r * kBnThreads + t + h];
        float sum = s[0];
        for (unsigned r = 1; r < kBnCluster; ++r) sum = sum + s[r * kBnThreads];
        return sum;
    }
    float act_f(float z) const {
        if (act == kBnActNone) return z;
        if (act == kActLeakyRelu) return z > 0 ? z : z * 0.01f;
        return std::max(z, 0.0f);
    }
    float back(float dy, float y) const {
        if (act == kBnActNone) return dy;
        if (act == kActLeakyRelu) return dy * (y > 0 ? 1.0f : 0.01f);
        return y > 0 ? dy : 0.0f;
    }
};

using Buffers = std::map<std::string, std::vector<float>>;

Buffers inputs_of(const Harness& h) {
    Buffers b;
    for (const auto& t : h.tensors) b[t.name] = t.role == Role::Out ? std::vector<float>(t.count()) : t.data;
    return b;
}

void fwd(const Model& m, Buffers& b, bool train) {
    const float nf = float(m.n()), eps = 1e-5f;
    const std::vector<float>& X = b["X"];
    for (unsigned c = 0; c < m.C; ++c) {
        float mean, rstd;
        if (train) {
            mean = m.block_sum([&](size_t k, float s) { return s + X[m.at(k, c)]; }) / nf;
            const float sq = m.block_sum([&](size_t k, float s) {
                const float d = X[m.at(k, c)] - mean;
                return std::fma(d, d, s);
            });
            const float var = sq / (m.slip == Slip::Unbiased ? float(m.n() - 1) : nf);
            rstd = 1.0f / std::sqrt(m.slip == Slip::NoEps ? var : var + eps);
            b["stats"][c] = mean;
            b["stats"][m.C + c] = rstd;
            float& rm = b["running"][c];
            float& rv = b["running"][m.C + c];
            rm = std::fma(0.1f, mean, 0.9f * rm);
            rv = std::fma(0.1f, sq / float(m.n() - 1), 0.9f * rv);
        } else {
            mean = b["running"][c];
            rstd = 1.0f / std::sqrt(b["running"][m.C + c] + eps);
        }
        for (size_t k = 0; k < m.n(); ++k) {
            const size_t a = m.at(k, c);
            b["Y"][a] = m.act_f(std::fma(b["gamma"][c], (X[a] - mean) * rstd, b["beta"][c]));
        }
    }
}

void bwd(const Model& m, Buffers& b, float scale) {
    const float nf = float(m.n());
    for (unsigned c = 0; c < m.C; ++c) {
        const float mean = b["stats"][c], rstd = b["stats"][m.C + c];
        auto dz = [&](size_t a) { return m.back(b["dY"][a], b["Y"][a]); };
        auto xhat = [&](size_t a) { return (b["X"][a] - mean) * rstd; };
        const float S1 = m.block_sum([&](size_t k, float s) { return s + dz(m.at(k, c)); });
        const float S2 = m.block_sum([&](size_t k, float s) { return std::fma(dz(m.at(k, c)), xhat(m.at(k, c)), s); });
        b["dbeta"][c] = S1 * scale;
        b["dgamma"][c] = S2 * scale;
        const float m1 = S1 / nf, m2 = S2 / nf, k1 = b["gamma"][c] * rstd;
        for (size_t k = 0; k < m.n(); ++k) {
            const size_t a = m.at(k, c);
            b["dX"][a] = k1 * std::fma(-xhat(a), m2, dz(a) - m1);
        }
    }
}

// The elements of the model's outputs outside the harness's float64 bound.
size_t outside(const VerifyCase& c, Slip slip) {
    Rng rng(7);
    const Harness h = kernel_row(c.entry).harness(c, rng);
    Buffers b = inputs_of(h);
    const Model m{c.shape[0], c.shape[1], c.shape[2], c.shape[3], slip};
    if (c.entry == "bn_fwd") {
        fwd(m, b, c.shape[4] == 1);
    } else {
        // The harness's scale (a float, in its launch): dbeta's float64 value over channel 0's sum.
        const Bounded& db = h.expected.at("dbeta");
        double S1 = 0;
        for (size_t k = 0; k < m.n(); ++k) S1 += m.back(b["dY"][m.at(k, 0)], b["Y"][m.at(k, 0)]);
        bwd(m, b, S1 != 0 ? float(db.v[0] / S1) : 1.0f);
    }
    size_t bad = 0;
    for (const auto& t : h.tensors) {
        if (t.role == Role::In) continue;
        const Bounded& e = h.expected.at(t.name);
        for (size_t i = 0; i < e.size(); ++i)
            if (!std::isinf(e.e[i]) && !within_bound(b[t.name][i], e.v[i], e.e[i])) {
                if (slip == Slip::None && bad < 3)
                    MESSAGE(t.name, "[", i, "]: ", b[t.name][i], " vs ", e.v[i], " bound ", e.e[i]);
                ++bad;
            }
    }
    return bad;
}

}  // namespace

TEST_CASE("bn: a float model of ptx/bn.ptx lies within verify's float64 bound at every default case") {
    for (const VerifyCase& c : kernel_family("bn").default_cases()) {
        if (c.shape[0] * c.shape[1] * c.shape[2] > 2000000) continue;  // the large ones: the GPU's
        CAPTURE(shape_text(c));
        CHECK(outside(c, Slip::None) == 0);
    }
}

TEST_CASE("bn: the bound catches a planted slip (unbiased variance, no eps, a short tree)") {
    CHECK(outside({"bn_fwd", {64, 8, 49, 0, 1}}, Slip::Unbiased) > 0);
    CHECK(outside({"bn_fwd", {3, 7, 25, kBnActNone, 1}}, Slip::NoEps) > 0);
    CHECK(outside({"bn_fwd", {3, 7, 400, kBnActNone, 1}}, Slip::ShortTree) > 0);
    CHECK(outside({"bn_bwd", {3, 7, 400, kBnActNone}}, Slip::ShortTree) > 0);
}

TEST_CASE("bn: the kernels' limits, and one value a channel refused in training as PyTorch does") {
    CHECK(bn_unfit(64, 32, 784, kActRelu, true).empty());
    CHECK(bn_unfit(1, 3, 9, kBnActNone, true).empty());
    CHECK(bn_unfit(1, 5, 1, kActLeakyRelu, false).empty());
    CHECK(bn_unfit(1, 5, 1, kActRelu, true).find("more than 1 value per channel") != std::string::npos);
    CHECK(bn_unfit(64, 32, 784, kActTanh, true).find("activation codes") != std::string::npos);
    CHECK(bn_unfit(0, 32, 784, kActRelu, true).find("B, C, HW >= 1") != std::string::npos);
    CHECK(bn_unfit(65536, 1024, 32, kActRelu, true).find("2^31") != std::string::npos);
    CHECK_THROWS_WITH_AS(validate_case({"bn_fwd", {1, 5, 1, 0, 1}}), doctest::Contains("more than 1 value"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"bn_fwd", {4, 5, 1, 0, 2}}), doctest::Contains("train must be 0"), InputError);
    CHECK_THROWS_WITH_AS(validate_case({"bn_bwd", {4, 5, 1, 0, 1}}), doctest::Contains("4 shape numbers"), InputError);
}

TEST_CASE("bn: the cache's dynamic shared memory, and verify's cases on both sides of its limit") {
    // ceil(B HW / 2048) values a thread, 1 KB each a block forward (x), 3 KB backward (dY, X, Y).
    CHECK(bn_cache_bytes(64, 784, false, true) == 25 * 1024);  // the CNN's conv1: 50176 values a channel
    CHECK(bn_cache_bytes(64, 784, true, true) == 75 * 1024);
    CHECK(bn_cache_bytes(64, 196, true, true) == 21 * 1024);   // conv2: 12544, 7 a thread
    CHECK(bn_cache_bytes(64, 1, false, true) == 1024);         // BatchNorm1d: one value a thread at most
    CHECK(bn_cache_bytes(64, 784, false, false) == 0);         // evaluation reads X once: no cache
    CHECK(bn_cache_bytes(409600, 1, false, true) == kBnCacheMax);  // 200 values a thread: the limit
    CHECK(bn_cache_bytes(409601, 1, false, true) == 0);
    CHECK(bn_cache_bytes(135168, 1, true, true) == 66 * 3 * 1024);  // 66 values a thread: the most backward
    CHECK(bn_cache_bytes(135169, 1, true, true) == 0);
    CHECK(bn_cache_bytes(65535, 32767, true, true) == 0);      // no overflow near 2^31 values
    // The default cases train with the cache everywhere but at 300x2x784 (bn_bwd without) and
    // 600x1x784 (both without), so verify runs both paths of each kernel.
    int with = 0, without = 0;
    for (const VerifyCase& c : kernel_family("bn").default_cases()) {
        const bool bwd = c.entry == "bn_bwd", train = bwd || c.shape[4] == 1;
        if (!train) continue;
        const bool cached = bn_cache_bytes(c.shape[0], c.shape[2], bwd, true) != 0;
        (cached ? with : without) += 1;
        if (c.shape[0] * c.shape[2] == 300 * 784) CHECK(cached == !bwd);
        if (c.shape[0] * c.shape[2] == 600 * 784) CHECK(!cached);
    }
    CHECK(with == 17);
    CHECK(without == 3);
}
