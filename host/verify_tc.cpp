// verify harness of the tensor-core kernels (ptx/tc.ptx): fresh random inputs, the float64
// reference with its TF32 bound and the launch (tc.hpp). Shape: tc_forward takes B,I,H,act
// (act 0 none, 1 ReLU).
#include "tc.hpp"
#include "verify_harness.hpp"

#include <cmath>

namespace ptxlab::verify_detail {

namespace {

// tc_forward (B,I,H,act): X in [-1, 1], W and b within nn.Linear's init bound 1/sqrt(I).
Harness make_tc_forward(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], I = c.shape[1], H = c.shape[2], act = c.shape[3];
    const float w = 1.0f / std::sqrt(float(I));
    Harness h;
    std::vector<float> X = random_vector(rng, size_t(B) * I, -1.0f, 1.0f);
    std::vector<float> W = random_vector(rng, size_t(H) * I, -w, w);
    std::vector<float> b = random_vector(rng, H, -w, w);
    h.expected["A"] = ref_tc_forward(X, W, b, B, I, H, act);
    h.tensors = {{"X", {B, I}, Role::In, X}, {"W", {H, I}, Role::In, W}, {"b", {H}, Role::In, b},
                 {"A", {B, H}, Role::Out, {}}};
    h.launch = [B, I, H, act](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_tc_forward(k, B, I, H, m.at("X"), m.at("W"), m.at("b"), m.at("A"), act, s);
    };
    return h;
}

}  // namespace

bool is_tc_entry(const std::string& e) { return e == "tc_forward"; }

std::string tc_shape_names(const std::string&) { return "B,I,H,act"; }

void validate_tc_case(const VerifyCase& c) {
    const std::string names = tc_shape_names(c.entry);
    if (c.shape.size() != 4)
        PTXLAB_THROW(InputError, "kernel '{}' takes a shape {} (4 numbers), got {}", c.entry, names, c.shape.size());
    for (size_t k = 0; k < 3; ++k)
        if (c.shape[k] == 0) PTXLAB_THROW(InputError, "kernel '{}': shape sizes must be >= 1", c.entry);
    if (c.shape[3] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': act must be 0 (none) or 1 (ReLU), got {}", c.entry, c.shape[3]);
    if (std::string why = tc_unfit(c.shape[0], c.shape[1], c.shape[2]); !why.empty())
        PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

// The MNIST net's first layer (784 -> 128) at batch 64, both act codes, and at batch 1000;
// 1x1x1; sizes that leave a tile of 16 samples, 8 units and a k tile of 8 columns part-empty
// (17, 9, 5; 65, 257, 130; 3, 33); I = 800, a hundred full k tiles.
std::vector<VerifyCase> tc_default_cases() {
    std::vector<VerifyCase> v;
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 128, 1}, {64, 784, 128, 0}, {1, 1, 1, 0}, {17, 9, 5, 1}, {1000, 784, 128, 1},
             {3, 800, 33, 0}, {65, 257, 130, 1}})
        v.push_back({"tc_forward", s});
    return v;
}

std::vector<VerifyCase> tc_quick_cases() { return {{"tc_forward", {17, 9, 5, 1}}}; }

Harness make_tc_harness(const VerifyCase& c, Rng& rng) { return make_tc_forward(c, rng); }

}  // namespace ptxlab::verify_detail
