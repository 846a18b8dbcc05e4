// ptx/outer.ptx: outer, the per-sample outer products of the fast set's gradients. Shape: B,R,C.
#include "fused.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

Harness make_outer_harness(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], R = c.shape[1], C = c.shape[2];
    Harness h;
    std::vector<float> D = random_vector(rng, size_t(B) * R, -1.0f, 1.0f);
    std::vector<float> V = random_vector(rng, size_t(B) * C, -1.0f, 1.0f);
    h.expected["G"] = ref_outer(D, V, B, R, C);
    h.tensors.push_back({"D", {B, R}, Role::In, std::move(D)});
    h.tensors.push_back({"V", {B, C}, Role::In, std::move(V)});
    h.tensors.push_back({"G", {B, R, C}, Role::Out, {}});
    h.launch = [B, R, C](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(outer_grid(B, R, C), kFusedBlock, s, ptr(m, "G"), ptr(m, "D"), ptr(m, "V"), B, R, C);
    };
    return h;
}

// gW1 and gW2 of a batch of 64 (16-byte path), odd row lengths (single floats), one element.
std::vector<VerifyCase> outer_default_cases() {
    std::vector<VerifyCase> v;
    for (const auto& s : std::vector<std::vector<unsigned>>{{64, 128, 784}, {64, 10, 128}, {63, 37, 13}, {5, 3, 2001}, {1, 1, 1}})
        v.push_back({"outer", s});
    return v;
}

std::vector<VerifyCase> outer_quick_cases() { return {{"outer", {63, 128, 784}}, {"outer", {9, 7, 13}}}; }

// bench: gW1 of one step.
BenchShape outer_bench_shape(unsigned B) { return std::vector<unsigned>{B, kBenchH, kBenchI}; }

std::pair<double, double> outer_work(const VerifyCase& c) {
    const double B = c.shape[0], I = kBenchI, H = kBenchH;
    return {4 * (B * H + B * I + B * H * I), B * H * I};
}

}  // namespace

const KernelFamily& outer_family() {
    static const KernelFamily f{"outer",
                                {"outer"},
                                {{.entry = "outer",
                                  .shape = "B,R,C",
                                  .validate = validate_named_shape,
                                  .harness = make_outer_harness,
                                  .bench_shape = outer_bench_shape,
                                  .work = outer_work}},
                                outer_default_cases,
                                outer_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{outer_family, 70, 50};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
