// ptx/optim.ptx: the optimizers' update of a flat parameter array (optim_sgd, optim_adam,
// optim_rmsprop). Shape: N,variant; the variant picks the optimizer and its weight decay
// (KernelRow::variants, from the optimizer table's rows: optimizers.hpp).
#include "optim.hpp"
#include "optimizers.hpp"
#include "ref_optim.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

// Fresh parameters, gradients and state (M in [-0.5, 0.5], V in [0, 0.5]), random constants,
// and this step's record {lr, step_size, bc2_sqrt, decay} as recipe.hpp's step_hyper makes it:
// lr in [0.01, 0.5] at a random step t in 1..1000. The variant names the optimizer and whether
// it runs with weight decay (the optimizer table, optimizers.cpp: each row's variants).
Harness make_optim_harness(const VerifyCase& c, Rng& rng) {
    const unsigned N = c.shape[0];
    const OptimVariantOf variant = optimizer_variant(c.entry, c.shape[1]);
    const OptimizerRow& row = *variant.row;
    OptimConfig o;
    o.kind = row.kind();
    o.momentum = (row.flags & kFlagMomentum) ? rng.uniform(0.5f, 0.99f) : 0.0f;
    o.weight_decay = variant.weight_decay ? rng.uniform(1e-4f, 0.1f) : 0.0f;
    o.beta1 = rng.uniform(0.8f, 0.95f);
    o.beta2 = rng.uniform(0.9f, 0.9999f);
    o.eps = rng.uniform(1e-8f, 1e-6f);
    o.alpha = rng.uniform(0.9f, 0.999f);
    const float lr = rng.uniform(0.01f, 0.5f);
    const uint64_t t = 1 + rng.below(1000);
    const StepHyper hy = step_hyper(o, lr, t);

    std::vector<float> P = random_vector(rng, N, -1.0f, 1.0f), G = random_vector(rng, N, -1.0f, 1.0f);
    std::vector<float> M = random_vector(rng, N, -0.5f, 0.5f), V = random_vector(rng, N, 0.0f, 0.5f);
    const bool use_m = row.m, use_v = row.v;
    Bounded exact_G;
    exact_G.resize(N);
    for (size_t i = 0; i < N; ++i) exact_G.v[i] = G[i];
    RefOptim r = ref_optim_bounded(o, hy, P, exact_G, use_m ? M : std::vector<float>{}, use_v ? V : std::vector<float>{});
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
        launch_optimizer_kernel(k, o, ptr(m, "P"), ptr(m, "G"), dM, dV, ptr(m, "hyp"), N, s);
    };
    return h;
}

// Every variant at one element, 1000, and the 784-128-10 network's parameter count (101770:
// W1, b1, W2, b2 in one flat array).
std::vector<VerifyCase> optim_default_cases() {
    std::vector<VerifyCase> v;
    for (const std::string& e : optimizer_entries())
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
          .variants = optimizer_variant_names("optim_sgd"),
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_optim_harness(c, rng); },
          // Nesterov: reads P, G, M, writes P, M; mul, add and two fmas an element.
          .bench_shape = [](unsigned) -> BenchShape { return std::vector<unsigned>{kBenchParams, 2}; },
          .work = [](const VerifyCase&) -> std::pair<double, double> {
              const double params = bench_params();
              return {4 * 5 * params, 6 * params};
          }},
         {.entry = "optim_adam",
          .shape = "N,variant",
          .variants = optimizer_variant_names("optim_adam"),
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_optim_harness(c, rng); },
          // Adam: reads P, G, M, V, writes P, M, V; 3 fmas, 3 subs, 2 muls, add, sqrt, 2 divs (each 1 here).
          .bench_shape = [](unsigned) -> BenchShape { return std::vector<unsigned>{kBenchParams, 0}; },
          .work = [](const VerifyCase&) -> std::pair<double, double> {
              const double params = bench_params();
              return {4 * 7 * params, 15 * params};
          }},
         {.entry = "optim_rmsprop",
          .shape = "N,variant",
          .variants = optimizer_variant_names("optim_rmsprop"),
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_optim_harness(c, rng); }}},
        optim_default_cases,
        optim_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{optim_family, 30, 80};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
