// ptx/act.ptx: act_fwd and act_bwd, the hidden activation as its own elementwise pass (the
// model trainer's layers other than ReLU). Shapes: N,act (act: recipe.hpp's code).
#include "act.hpp"
#include "recipe.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

// Pre-activations from four ranges at random: near 0 (GELU's polynomial at t ~ 1, the kinks),
// training's usual [-4, 4], [-12, 12], and |z| in [44, 60], where tanh's and sigmoid's ex2
// overflows or underflows (saturation) and GELU's density is 0.
std::vector<float> pre_activations(Rng& rng, size_t n) {
    std::vector<float> z(n);
    for (auto& x : z) {
        switch (rng.below(4)) {
            case 0: x = rng.uniform(-1e-3f, 1e-3f); break;
            case 1: x = rng.uniform(-4.0f, 4.0f); break;
            case 2: x = rng.uniform(-12.0f, 12.0f); break;
            default: x = rng.uniform(44.0f, 60.0f) * (rng.below(2) ? 1.0f : -1.0f); break;
        }
    }
    return z;
}

Harness make_act_fwd(const VerifyCase& c, Rng& rng) {
    const unsigned N = c.shape[0], act = c.shape[1];
    Harness h;
    std::vector<float> Z = pre_activations(rng, N);
    h.expected["A"] = ref_act_fwd(Z, act);
    h.tensors.push_back({"A", {N}, Role::Out, {}});
    h.tensors.push_back({"Z", {N}, Role::In, std::move(Z)});
    h.launch = [N, act](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_act_fwd(k, N, ptr(m, "A"), ptr(m, "Z"), act, s);
    };
    return h;
}

// A = f(Z) rounded to float, as act_fwd (or fused_forward) leaves it; dA in [-1, 1].
Harness make_act_bwd(const VerifyCase& c, Rng& rng) {
    const unsigned N = c.shape[0], act = c.shape[1];
    Harness h;
    std::vector<float> Z = pre_activations(rng, N), A(N);
    for (unsigned i = 0; i < N; ++i) A[i] = float(activate(activation_of_code(act), Z[i]));
    std::vector<float> dA = random_vector(rng, N, -1.0f, 1.0f);
    h.expected["G"] = ref_act_bwd(dA, A, Z, act);
    h.tensors.push_back({"G", {N}, Role::Out, {}});
    h.tensors.push_back({"dA", {N}, Role::In, std::move(dA)});
    h.tensors.push_back({"A", {N}, Role::In, std::move(A)});
    h.tensors.push_back({"Z", {N}, Role::In, std::move(Z)});
    h.launch = [N, act](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_act_bwd(k, N, ptr(m, "G"), ptr(m, "dA"), ptr(m, "A"), ptr(m, "Z"), act, s);
    };
    return h;
}

// Every activation at one element, an odd count (a partial last block) and conv1's output of
// the CNN at batch 64 (64 x 32 x 28 x 28, 6272 blocks).
std::vector<VerifyCase> act_default_cases() {
    std::vector<VerifyCase> v;
    for (const char* e : {"act_fwd", "act_bwd"})
        for (unsigned N : {1u, 1001u, 64u * 32 * 28 * 28}) add_with_acts(v, 0, e, {N}, kActGelu);
    return v;
}

std::vector<VerifyCase> act_quick_cases() {
    std::vector<VerifyCase> v;
    for (const char* e : {"act_fwd", "act_bwd"}) add_quick(v, {e, {1001}});
    return v;
}

// bench: the MNIST net's hidden layer at batch B, GELU (the longest sequence).
BenchShape act_bench_shape(unsigned B) { return std::vector<unsigned>{B * kBenchH, kActGelu}; }

std::pair<double, double> act_fwd_work(const VerifyCase& c) { return {8.0 * c.shape[0], 0}; }
std::pair<double, double> act_bwd_work(const VerifyCase& c) { return {16.0 * c.shape[0], 0}; }

}  // namespace

const KernelFamily& act_family() {
    static const KernelFamily f{"act",
                                {"act"},
                                {{.entry = "act_fwd",
                                  .shape = "N,act",
                                  .validate = validate_named_shape,
                                  .harness = make_act_fwd,
                                  .bench_shape = act_bench_shape,
                                  .work = act_fwd_work},
                                 {.entry = "act_bwd",
                                  .shape = "N,act",
                                  .validate = validate_named_shape,
                                  .harness = make_act_bwd,
                                  .bench_shape = act_bench_shape,
                                  .work = act_bwd_work}},
                                act_default_cases,
                                act_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{act_family, 150, 130};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
