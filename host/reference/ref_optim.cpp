#include "ref_optim.hpp"

#include "error.hpp"
#include "optimizers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ptxlab {

namespace {

using namespace bounded;

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
    const OptimizerRow& row = optimizer_row(o.kind);
    const bool use_m = row.m, use_v = row.v;
    check_sizes("ref_optim_bounded", n, G.size(), "G");
    if (use_m) check_sizes("ref_optim_bounded", n, M.size(), "M");
    if (use_v) check_sizes("ref_optim_bounded", n, V.size(), "V");
    RefOptim r;
    r.P.resize(n);
    if (use_m) r.M.resize(n);
    if (use_v) r.V.resize(n);
    const BV wd = exact(o.weight_decay), decay = exact(h.decay);
    const OptimBoundConsts c{exact(1.0f),  exact(o.momentum), exact(o.eps),       exact(o.beta1),    exact(o.beta2),
                             exact(o.alpha), exact(h.lr),     exact(h.step_size), exact(h.bc2_sqrt)};
    for (size_t i = 0; i < n; ++i) {
        OptimBoundState s{exact(P[i]), {G.v[i], G.e[i]}, use_m ? exact(M[i]) : BV{}, use_v ? exact(V[i]) : BV{}};
        // Weight decay: decoupled (AdamW) scales p first; coupled adds wd p to the gradient.
        if (row.decoupled) s.p = mul_rn(s.p, decay);
        else if (o.weight_decay != 0.0f) s.g = fma_rn(wd, s.p, s.g);
        row.bound(c, s);
        put(r.P, i, s.p);
        if (use_m) put(r.M, i, s.m);
        if (use_v) put(r.V, i, s.v);
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
    o.kind = optimizer_of_entry("optim_adam", rule).kind();  // rule 0 Adam, 1 AdamW, 2 NAdam
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
