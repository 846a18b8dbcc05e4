// ptx/optim.ptx: the optimizers' update of a flat parameter array (optim_sgd, optim_adam,
// optim_rmsprop). Shape: N,variant; the variant picks the flags (KernelRow::variants).
#include "recipe.hpp"
#include "ref_optim.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

enum class Rule { Sgd, Adam, RmsProp };

// Fresh parameters, gradients and state (M in [-0.5, 0.5], V in [0, 0.5]), random constants,
// and this step's record {lr, step_size, bc2_sqrt, decay} as recipe.hpp's step_hyper makes it:
// lr in [0.01, 0.5] at a random step t in 1..1000.
Harness make_optim_harness(const VerifyCase& c, Rng& rng, Rule rule) {
    const unsigned N = c.shape[0], variant = c.shape[1];
    const bool sgd = rule == Rule::Sgd, adam = rule == Rule::Adam;
    const bool momentum = sgd && variant >= 1 && variant <= 3, nesterov = sgd && (variant == 2 || variant == 3);
    // optim_adam's variants: 0 adam, 1 adam+wd, 2 adamw, 3 nadam, 4 nadam+wd; its rule 0 Adam,
    // 1 AdamW, 2 NAdam.
    const unsigned adam_rule = !adam ? 0 : variant == 2 ? 1 : variant >= 3 ? 2 : 0;
    const bool wd_on = sgd    ? (variant == 3 || variant == 4)
                       : adam ? (variant == 1 || variant == 2 || variant == 4)
                              : variant >= 1;
    const float mu = momentum ? rng.uniform(0.5f, 0.99f) : 0.0f;
    const float wd = wd_on ? rng.uniform(1e-4f, 0.1f) : 0.0f;
    const float beta1 = rng.uniform(0.8f, 0.95f), beta2 = rng.uniform(0.9f, 0.9999f);
    const float eps = rng.uniform(1e-8f, 1e-6f), alpha = rng.uniform(0.9f, 0.999f);
    const float lr = rng.uniform(0.01f, 0.5f);
    const uint64_t t = 1 + rng.below(1000);
    StepHyper hy;
    hy.lr = lr;
    hy.step_size = static_cast<float>(double(lr) / (1.0 - std::pow(double(beta1), double(t))));
    hy.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
    hy.decay = static_cast<float>(1.0 - double(lr) * double(wd));
    if (adam_rule == 2) {  // NAdam's coefficients of g and m in place of lr and the step size
        OptimConfig o;
        o.kind = OptimKind::NAdam;
        o.beta1 = beta1;
        o.beta2 = beta2;
        o.weight_decay = wd;
        hy = step_hyper(o, lr, t);
    }

    std::vector<float> P = random_vector(rng, N, -1.0f, 1.0f), G = random_vector(rng, N, -1.0f, 1.0f);
    std::vector<float> M = random_vector(rng, N, -0.5f, 0.5f), V = random_vector(rng, N, 0.0f, 0.5f);
    RefOptim r = sgd    ? ref_optim_sgd(P, G, momentum ? M : std::vector<float>{}, hy, mu, wd, nesterov)
                 : adam ? ref_optim_adam(P, G, M, V, hy, beta1, beta2, eps, wd, adam_rule)
                        : ref_optim_rmsprop(P, G, V, hy, alpha, eps, wd);
    const bool use_m = momentum || adam, use_v = !sgd;
    Harness h;
    h.expected["P"] = std::move(r.P);
    h.tensors.push_back({"P", {N}, Role::InOut, std::move(P)});
    h.tensors.push_back({"G", {N}, Role::In, std::move(G)});
    if (use_m) {
        h.expected["M"] = std::move(r.M);
        h.tensors.push_back({"M", {N}, Role::InOut, std::move(M)});
    }
    if (use_v) {
        h.expected["V"] = std::move(r.V);
        h.tensors.push_back({"V", {N}, Role::InOut, std::move(V)});
    }
    h.tensors.push_back({"hyp", {4}, Role::In, {hy.lr, hy.step_size, hy.bc2_sqrt, hy.decay}});
    h.launch = [=](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        const CUdeviceptr dM = use_m ? ptr(m, "M") : 0, dV = use_v ? ptr(m, "V") : 0;
        if (sgd)
            k.launch(grid_for(N), 256, s, ptr(m, "P"), ptr(m, "G"), dM, ptr(m, "hyp"), N, mu, wd, nesterov ? 1u : 0u);
        else if (adam)
            k.launch(grid_for(N), 256, s, ptr(m, "P"), ptr(m, "G"), dM, dV, ptr(m, "hyp"), N, beta1, beta2, eps, wd,
                     adam_rule);
        else
            k.launch(grid_for(N), 256, s, ptr(m, "P"), ptr(m, "G"), dV, ptr(m, "hyp"), N, alpha, eps, wd);
    };
    return h;
}

// Every variant at one element, 1000, and the 784-128-10 network's parameter count (101770:
// W1, b1, W2, b2 in one flat array).
std::vector<VerifyCase> optim_default_cases() {
    std::vector<VerifyCase> v;
    for (const char* e : {"optim_sgd", "optim_adam", "optim_rmsprop"})
        for (unsigned variant = 0; variant < optim_variants(e); ++variant)
            for (unsigned n : {1u, 1000u, 101770u}) v.push_back({e, {n, variant}});
    return v;
}

std::vector<VerifyCase> optim_quick_cases() {
    return {{"optim_sgd", {1000, 3}},    {"optim_adam", {1000, 1}}, {"optim_adam", {1000, 2}},
            {"optim_adam", {1000, 4}},   {"optim_rmsprop", {1000, 1}}};
}

// bench: every parameter of the MNIST network at once (independent of the batch).
constexpr unsigned kBenchParams = kBenchH * kBenchI + kBenchH + kBenchO * kBenchH + kBenchO;

double bench_params() {
    const double I = kBenchI, H = kBenchH, O = kBenchO;
    return H * I + H + O * H + O;
}

}  // namespace

const KernelFamily& optim_family() {
    static const KernelFamily f{
        "optim",
        {"optim"},
        {{.entry = "optim_sgd",
          .shape = "N,variant",
          .variants = {"plain", "momentum", "nesterov", "nesterov+wd", "plain+wd"},
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_optim_harness(c, rng, Rule::Sgd); },
          // Nesterov: reads P, G, M, writes P, M; mul, add and two fmas an element.
          .bench_shape = [](unsigned) -> BenchShape { return std::vector<unsigned>{kBenchParams, 2}; },
          .work = [](const VerifyCase&) -> std::pair<double, double> {
              const double params = bench_params();
              return {4 * 5 * params, 6 * params};
          }},
         {.entry = "optim_adam",
          .shape = "N,variant",
          .variants = {"adam", "adam+wd", "adamw", "nadam", "nadam+wd"},
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_optim_harness(c, rng, Rule::Adam); },
          // Adam: reads P, G, M, V, writes P, M, V; 3 fmas, 3 subs, 2 muls, add, sqrt, 2 divs (each 1 here).
          .bench_shape = [](unsigned) -> BenchShape { return std::vector<unsigned>{kBenchParams, 0}; },
          .work = [](const VerifyCase&) -> std::pair<double, double> {
              const double params = bench_params();
              return {4 * 7 * params, 15 * params};
          }},
         {.entry = "optim_rmsprop",
          .shape = "N,variant",
          .variants = {"plain", "+wd"},
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_optim_harness(c, rng, Rule::RmsProp); }}},
        optim_default_cases,
        optim_quick_cases};
    return f;
}

}  // namespace ptxlab::verify_detail
