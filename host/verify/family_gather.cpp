// ptx/gather.ptx: gather, rows of a matrix picked by an index (a batch of images from the
// training set). Shape: rows,cols,src_rows.
#include "registry.hpp"

#include <bit>

namespace ptxlab::verify_detail {

namespace {

Harness make_gather_harness(const VerifyCase& c, Rng& rng) {
    const unsigned rows = c.shape[0], cols = c.shape[1], src_rows = c.shape[2];
    if (src_rows == 0) PTXLAB_THROW(InputError, "gather needs src_rows >= 1");
    Harness h;
    std::vector<float> src = random_vector(rng, size_t(src_rows) * cols, -1.0f, 1.0f);
    std::vector<uint32_t> idx(rows);
    for (auto& i : idx) i = static_cast<uint32_t>(rng.below(src_rows));
    h.expected["dst"] = ref_gather(src, idx, cols);
    std::vector<float> idx_bits(rows);
    for (unsigned r = 0; r < rows; ++r) idx_bits[r] = std::bit_cast<float>(idx[r]);
    h.tensors.push_back({"src", {src_rows, cols}, Role::In, std::move(src)});
    h.tensors.push_back({"idx", {rows}, Role::In, std::move(idx_bits)});
    h.tensors.push_back({"dst", {rows, cols}, Role::Out, {}});
    h.launch = [rows, cols](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(grid_for(size_t(rows) * cols), 256, s, ptr(m, "dst"), ptr(m, "src"), ptr(m, "idx"), rows, cols);
    };
    return h;
}

std::vector<VerifyCase> gather_default_cases() {
    std::vector<VerifyCase> v;
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 1, 1}, {63, 784, 100}, {1000, 784, 2000}, {64, 10, 60000}})
        v.push_back({"gather", s});
    return v;
}

std::vector<VerifyCase> gather_quick_cases() { return {{"gather", {63, 784, 100}}}; }

// bench: one batch of images from the 60000 of MNIST's training set.
BenchShape gather_bench_shape(unsigned B) { return std::vector<unsigned>{B, kBenchI, 60000}; }

std::pair<double, double> gather_work(const VerifyCase& c) {
    const double B = c.shape[0], I = kBenchI;
    return {4 * (2 * B * I + B), 0};
}

}  // namespace

const KernelFamily& gather_family() {
    static const KernelFamily f{"gather",
                                {"gather"},
                                {{.entry = "gather",
                                  .shape = "rows,cols,src_rows",
                                  .validate = validate_named_shape,
                                  .harness = make_gather_harness,
                                  .bench_shape = gather_bench_shape,
                                  .work = gather_work}},
                                gather_default_cases,
                                gather_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{gather_family, 40, 30};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
