// The pieces of a verify case that the harness files share (verify.cpp, verify_conv.cpp,
// verify_tc.cpp):
// its tensors, their float64 reference, and how to launch the kernel on them.
#pragma once

#include "kernels.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "verify.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ptxlab::verify_detail {

enum class Role { In, Out, InOut };

struct Tensor {
    std::string name;
    std::vector<size_t> dims;
    Role role = Role::In;
    std::vector<float> data;  // inputs (In, InOut); idx tensors are stored bit-cast
    // An integer tensor (stored bit-cast): compared with the reference's integer values
    // exactly, instead of within a float bound.
    bool bits = false;
    // A flat array of several tensors back to back (fused_step's parameters and optimizer
    // state): their names and shapes, for messages.
    struct Part {
        std::string name;
        size_t offset;
        std::vector<size_t> dims;
    };
    std::vector<Part> parts = {};
    size_t count() const {
        size_t n = 1;
        for (auto d : dims) n *= d;
        return n;
    }
};

using DevicePtrs = std::map<std::string, CUdeviceptr>;

// Everything one case needs: its tensors, the f64 reference of its outputs, and how to launch it.
struct Harness {
    std::vector<Tensor> tensors;
    std::map<std::string, Bounded> expected;
    std::function<void(const Kernel&, const DevicePtrs&, CUstream)> launch;
};

inline std::vector<float> random_vector(Rng& rng, size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = rng.uniform(lo, hi);
    return v;
}

// Activations as a ReLU layer leaves them (a masked backward pass's Y, a layer's input X):
// uniform in [-1, 1] clamped at 0, so about half are exact zeros.
inline std::vector<float> relu_outputs(Rng& rng, size_t n) {
    std::vector<float> a = random_vector(rng, n, -1.0f, 1.0f);
    for (auto& x : a) x = std::max(x, 0.0f);
    return a;
}

// verify_conv.cpp: the conv and pool kernels (conv_fwd, conv_bwd_data, conv_bwd_weights,
// pool_fwd, pool_bwd).
bool is_conv_entry(const std::string& entry);
std::string conv_shape_names(const std::string& entry, size_t count = 0);  // "N,C,H,W,K,KS,act", "N,C,H,W" or "B,I,O,act"
void validate_conv_case(const VerifyCase& c);            // throws InputError
std::vector<VerifyCase> conv_default_cases();
std::vector<VerifyCase> conv_quick_cases();
Harness make_conv_harness(const VerifyCase& c, Rng& rng);

// verify_tc.cpp: the tensor-core kernels (tc_forward, tc_grad_input, tc_grad_weights).
bool is_tc_entry(const std::string& entry);
std::string tc_shape_names(const std::string& entry);  // "B,I,H,act" (tc_forward) or "B,I,O,act"
void validate_tc_case(const VerifyCase& c);            // throws InputError
std::vector<VerifyCase> tc_default_cases();
std::vector<VerifyCase> tc_quick_cases();
Harness make_tc_harness(const VerifyCase& c, Rng& rng);

}  // namespace ptxlab::verify_detail
