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

// A product of magnitudes in an error term: an exact zero times an infinite bound (a value
// at the ReLU kink) is zero, not NaN.
double eprod(double a, double b) { return (a == 0.0 || b == 0.0) ? 0.0 : a * b; }

// One .rn rounding of a result whose operands carried the propagated error `prop`.
BV rounded(double x, double prop) { return {x, prop + kU * (std::fabs(x) + prop)}; }

// a * b + c, one rounding (fma.rn).
BV fma_rn(BV a, BV b, BV c) {
    return rounded(a.v * b.v + c.v, eprod(std::fabs(a.v), b.e) + eprod(std::fabs(b.v), a.e) + eprod(a.e, b.e) + c.e);
}
BV mul_rn(BV a, BV b) {
    return rounded(a.v * b.v, eprod(std::fabs(a.v), b.e) + eprod(std::fabs(b.v), a.e) + eprod(a.e, b.e));
}
BV add_rn(BV a, BV b) { return rounded(a.v + b.v, a.e + b.e); }
BV sub_rn(BV a, BV b) { return rounded(a.v - b.v, a.e + b.e); }
// a / b (div.rn, correctly rounded): infinite bound when b's error could reach zero.
BV div_rn(BV a, BV b) {
    const double x = a.v / b.v;
    if (!(b.e < std::fabs(b.v))) return {x, kInf};
    return rounded(x, (a.e + eprod(std::fabs(x), b.e)) / (std::fabs(b.v) - b.e));
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

namespace {

Bounded exact_vector(const std::vector<float>& x) {
    Bounded b;
    b.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) b.v[i] = x[i];
    return b;
}

}  // namespace

RefOptim ref_optim_bounded(const OptimConfig& o, const StepHyper& h, const std::vector<float>& P, const Bounded& G,
                           const std::vector<float>& M, const std::vector<float>& V) {
    const size_t n = P.size();
    const OptimKind k = o.kind;
    const bool use_m = optim_uses_m(k), use_v = optim_uses_v(k);
    check_sizes("ref_optim_bounded", n, G.size(), "G");
    if (use_m) check_sizes("ref_optim_bounded", n, M.size(), "M");
    if (use_v) check_sizes("ref_optim_bounded", n, V.size(), "V");
    RefOptim r;
    r.P.resize(n);
    if (use_m) r.M.resize(n);
    if (use_v) r.V.resize(n);
    const BV one = exact(1.0f), mu = exact(o.momentum), wd = exact(o.weight_decay), eps = exact(o.eps);
    const BV b1 = exact(o.beta1), b2 = exact(o.beta2), alpha = exact(o.alpha);
    const BV lr = exact(h.lr), step = exact(h.step_size), bc2 = exact(h.bc2_sqrt), decay = exact(h.decay);
    for (size_t i = 0; i < n; ++i) {
        BV p = exact(P[i]), g = {G.v[i], G.e[i]};
        if (k == OptimKind::AdamW) p = mul_rn(p, decay);
        else if (o.weight_decay != 0.0f) g = fma_rn(wd, p, g);
        switch (k) {
            case OptimKind::Sgd: put(r.P, i, fma_rn(neg(lr), g, p)); break;
            case OptimKind::Momentum:
            case OptimKind::Nesterov: {
                const BV m = add_rn(mul_rn(mu, exact(M[i])), g);
                put(r.M, i, m);
                put(r.P, i, fma_rn(neg(lr), k == OptimKind::Nesterov ? fma_rn(mu, m, g) : m, p));
                break;
            }
            case OptimKind::Adam:
            case OptimKind::AdamW:
            case OptimKind::NAdam: {
                const BV m0 = exact(M[i]), v0 = exact(V[i]);
                const BV m = fma_rn(sub_rn(one, b1), sub_rn(g, m0), m0);
                const BV v = fma_rn(sub_rn(one, b2), mul_rn(g, g), mul_rn(v0, b2));
                put(r.M, i, m);
                put(r.V, i, v);
                const BV denom = add_rn(div_rn(sqrt_rn(v), bc2), eps);
                // NAdam: the gradient's term first (its coefficient in h.lr), then the momentum's.
                if (k == OptimKind::NAdam) p = fma_rn(neg(lr), div_rn(g, denom), p);
                put(r.P, i, fma_rn(neg(step), div_rn(m, denom), p));
                break;
            }
            case OptimKind::RmsProp: {
                const BV v = fma_rn(sub_rn(one, alpha), mul_rn(g, g), mul_rn(exact(V[i]), alpha));
                put(r.V, i, v);
                put(r.P, i, fma_rn(neg(lr), div_rn(g, add_rn(sqrt_rn(v), eps)), p));
                break;
            }
        }
    }
    return r;
}

RefOptim ref_optim_sgd(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& M,
                       const StepHyper& h, float momentum, float weight_decay, bool nesterov) {
    OptimConfig o;
    o.kind = momentum == 0.0f ? OptimKind::Sgd : nesterov ? OptimKind::Nesterov : OptimKind::Momentum;
    o.momentum = momentum;
    o.weight_decay = weight_decay;
    return ref_optim_bounded(o, h, P, exact_vector(G), M, {});
}

RefOptim ref_optim_adam(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& M,
                        const std::vector<float>& V, const StepHyper& h, float beta1, float beta2, float eps,
                        float weight_decay, unsigned rule) {
    OptimConfig o;
    o.kind = rule == 2 ? OptimKind::NAdam : rule == 1 ? OptimKind::AdamW : OptimKind::Adam;
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = eps;
    o.weight_decay = weight_decay;
    return ref_optim_bounded(o, h, P, exact_vector(G), M, V);
}

RefOptim ref_optim_rmsprop(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& V,
                           const StepHyper& h, float alpha, float eps, float weight_decay) {
    OptimConfig o;
    o.kind = OptimKind::RmsProp;
    o.alpha = alpha;
    o.eps = eps;
    o.weight_decay = weight_decay;
    return ref_optim_bounded(o, h, P, exact_vector(G), {}, V);
}

}  // namespace ptxlab
