#include "ref_optim.hpp"

#include "error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ptxlab {

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of float32 round-to-nearest
constexpr double kInf = std::numeric_limits<double>::infinity();

double gamma(size_t n) { return n == 0 ? 0.0 : (double(n) * kU) / (1.0 - double(n) * kU); }

// A value and the bound on how far the float32 computation may be from it.
struct BV {
    double v, e;
};

BV exact(float x) { return {double(x), 0.0}; }

// One .rn rounding of a result whose operands carried the propagated error `prop`.
BV rounded(double x, double prop) { return {x, prop + kU * (std::fabs(x) + prop)}; }

// a * b + c, one rounding (fma.rn).
BV fma_rn(BV a, BV b, BV c) {
    return rounded(a.v * b.v + c.v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e + c.e);
}
BV mul_rn(BV a, BV b) { return rounded(a.v * b.v, std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e); }
BV add_rn(BV a, BV b) { return rounded(a.v + b.v, a.e + b.e); }
BV sub_rn(BV a, BV b) { return rounded(a.v - b.v, a.e + b.e); }
// a / b (div.rn, correctly rounded): infinite bound when b's error could reach zero.
BV div_rn(BV a, BV b) {
    const double x = a.v / b.v;
    if (!(b.e < std::fabs(b.v))) return {x, kInf};
    return rounded(x, (a.e + std::fabs(x) * b.e) / (std::fabs(b.v) - b.e));
}
// sqrt(a) (sqrt.rn, correctly rounded); a's computed value is never negative (a sum of
// non-negative roundings), so the error of sqrt is at most min(sqrt(ea), ea / sqrt(a)).
BV sqrt_rn(BV a) {
    const double x = std::sqrt(std::max(a.v, 0.0));
    double prop = std::sqrt(a.e);
    if (a.v > 0.0) prop = std::min(prop, a.e / x);
    return rounded(x, prop);
}
BV neg(BV a) { return {-a.v, a.e}; }

void put(Bounded& b, size_t i, BV x) {
    b.v[i] = x.v;
    b.e[i] = x.e;
}

void check_sizes(const char* what, size_t n, size_t got, const char* name) {
    if (got != n)
        PTXLAB_THROW(Error, "internal error: {}: {} has {} elements, P has {}", what, name, got, n);
}

}  // namespace

Bounded ref_batch_mean(const std::vector<float>& Gs, unsigned N, unsigned B, float scale) {
    check_sizes("ref_batch_mean", size_t(N) * B, Gs.size(), "Gs");
    Bounded out;
    out.resize(N);
    for (unsigned i = 0; i < N; ++i) {
        double sum = 0.0, mag = 0.0;
        for (unsigned b = 0; b < B; ++b) {
            const double g = Gs[size_t(b) * N + i];
            sum += g;
            mag += std::fabs(g);
        }
        // B - 1 roundings: the first add, +0 + Gs[0][i], is exact.
        put(out, i, mul_rn({sum, gamma(B - 1) * mag}, exact(scale)));
    }
    return out;
}

RefOptim ref_optim_sgd(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& M,
                       const StepHyper& h, float momentum, float weight_decay, bool nesterov) {
    const size_t n = P.size();
    check_sizes("ref_optim_sgd", n, G.size(), "G");
    const bool use_m = momentum != 0.0f;
    if (use_m) check_sizes("ref_optim_sgd", n, M.size(), "M");
    RefOptim r;
    r.P.resize(n);
    if (use_m) r.M.resize(n);
    const BV lr = exact(h.lr), mu = exact(momentum), wd = exact(weight_decay);
    for (size_t i = 0; i < n; ++i) {
        const BV p = exact(P[i]);
        BV g = exact(G[i]);
        if (weight_decay != 0.0f) g = fma_rn(wd, p, g);
        if (use_m) {
            const BV m = add_rn(mul_rn(mu, exact(M[i])), g);
            put(r.M, i, m);
            g = nesterov ? fma_rn(mu, m, g) : m;
        }
        put(r.P, i, fma_rn(neg(lr), g, p));
    }
    return r;
}

RefOptim ref_optim_adam(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& M,
                        const std::vector<float>& V, const StepHyper& h, float beta1, float beta2, float eps,
                        float weight_decay, bool decoupled) {
    const size_t n = P.size();
    check_sizes("ref_optim_adam", n, G.size(), "G");
    check_sizes("ref_optim_adam", n, M.size(), "M");
    check_sizes("ref_optim_adam", n, V.size(), "V");
    RefOptim r;
    r.P.resize(n);
    r.M.resize(n);
    r.V.resize(n);
    const BV one = exact(1.0f), b1 = exact(beta1), b2 = exact(beta2), e = exact(eps), wd = exact(weight_decay);
    const BV step = exact(h.step_size), bc2 = exact(h.bc2_sqrt), decay = exact(h.decay);
    for (size_t i = 0; i < n; ++i) {
        BV p = exact(P[i]), g = exact(G[i]);
        if (decoupled) p = mul_rn(p, decay);
        else if (weight_decay != 0.0f) g = fma_rn(wd, p, g);
        const BV m0 = exact(M[i]), v0 = exact(V[i]);
        const BV m = fma_rn(sub_rn(one, b1), sub_rn(g, m0), m0);
        const BV v = fma_rn(sub_rn(one, b2), mul_rn(g, g), mul_rn(v0, b2));
        put(r.M, i, m);
        put(r.V, i, v);
        const BV denom = add_rn(div_rn(sqrt_rn(v), bc2), e);
        put(r.P, i, fma_rn(neg(step), div_rn(m, denom), p));
    }
    return r;
}

RefOptim ref_optim_rmsprop(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& V,
                           const StepHyper& h, float alpha, float eps, float weight_decay) {
    const size_t n = P.size();
    check_sizes("ref_optim_rmsprop", n, G.size(), "G");
    check_sizes("ref_optim_rmsprop", n, V.size(), "V");
    RefOptim r;
    r.P.resize(n);
    r.V.resize(n);
    const BV one = exact(1.0f), a = exact(alpha), e = exact(eps), wd = exact(weight_decay), lr = exact(h.lr);
    for (size_t i = 0; i < n; ++i) {
        const BV p = exact(P[i]);
        BV g = exact(G[i]);
        if (weight_decay != 0.0f) g = fma_rn(wd, p, g);
        const BV v = fma_rn(sub_rn(one, a), mul_rn(g, g), mul_rn(exact(V[i]), a));
        put(r.V, i, v);
        put(r.P, i, fma_rn(neg(lr), div_rn(g, add_rn(sqrt_rn(v), e)), p));
    }
    return r;
}

}  // namespace ptxlab
