// ptx/mean.ptx: batch_mean, the mean over a batch of per-sample gradients (the fast set).
// Shape: N,B (N elements, B samples).
#include "ref_optim.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

Harness make_mean_harness(const VerifyCase& c, Rng& rng) {
    const unsigned N = c.shape[0], B = c.shape[1];
    const float scale = rng.uniform(0.5f, 2.0f) / float(B);  // about 1/B, as the losses' grad_scale
    Harness h;
    std::vector<float> Gs = random_vector(rng, size_t(B) * N, -1.0f, 1.0f);
    h.expected["G"] = ref_batch_mean(Gs, N, B, scale);
    h.tensors.push_back({"G", {N}, Role::Out, {}});
    h.tensors.push_back({"Gs", {B, N}, Role::In, std::move(Gs)});
    h.launch = [N, B, scale](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(grid_for(N), 256, s, ptr(m, "G"), ptr(m, "Gs"), N, B, scale);
    };
    return h;
}

// One element, odd batches (the eight-row groups and the rest), W1 of the MNIST net (100352 =
// 128 x 784) at batch 64, a batch of 1000.
std::vector<VerifyCase> mean_default_cases() {
    std::vector<VerifyCase> v;
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 1}, {10, 63}, {100, 64}, {100352, 64}, {1280, 1000}})
        v.push_back({"batch_mean", s});
    return v;
}

std::vector<VerifyCase> mean_quick_cases() { return {{"batch_mean", {10, 63}}, {"batch_mean", {1000, 64}}}; }

// bench: the W1 mean gradient of one step; B adds and the scale an element.
BenchShape mean_bench_shape(unsigned B) { return std::vector<unsigned>{kBenchH * kBenchI, B}; }

std::pair<double, double> mean_work(const VerifyCase& c) {
    const double B = c.shape[1], I = kBenchI, H = kBenchH;
    return {4 * (B * H * I + H * I), B * H * I + H * I};
}

}  // namespace

const KernelFamily& mean_family() {
    static const KernelFamily f{"mean",
                                {"mean"},
                                {{.entry = "batch_mean",
                                  .shape = "N,B",
                                  .validate = validate_named_shape,
                                  .harness = make_mean_harness,
                                  .bench_shape = mean_bench_shape,
                                  .work = mean_work}},
                                mean_default_cases,
                                mean_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{mean_family, 20, 20};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
