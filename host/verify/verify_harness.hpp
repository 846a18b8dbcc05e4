// The pieces of a verify case that the harness files share (verify.cpp and the family modules,
// family_*.cpp): its tensors, their float64 reference, and how to launch the kernel on them.
#pragma once

#include "kernels.hpp"
#include "recipe.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "verify.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <utility>
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

// A random network of the given sizes: He-uniform weights, small random biases.
inline NetParams random_net(Rng& rng, const std::vector<unsigned>& sizes) {
    NetParams net;
    net.sizes = sizes;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        const float w = std::sqrt(6.0f / float(sizes[l]));
        net.W.push_back(random_vector(rng, size_t(sizes[l + 1]) * sizes[l], -w, w));
        net.b.push_back(random_vector(rng, sizes[l + 1], -0.1f, 0.1f));
    }
    return net;
}

// Random one-hot targets [B][O].
inline std::vector<float> random_targets(Rng& rng, unsigned B, unsigned O) {
    std::vector<float> t(size_t(B) * O, 0.0f);
    for (unsigned s = 0; s < B; ++s) t[size_t(s) * O + rng.below(O)] = 1.0f;
    return t;
}

inline CUdeviceptr ptr(const DevicePtrs& m, const char* name) { return m.at(name); }

// family_step.cpp: fused_step's harness, which tc_step (family_tcstep.cpp) takes too (tc), and
// the work of a step that bench times (at the MNIST sizes).
Harness make_step_harness(const VerifyCase& c, Rng& rng, bool tc);
std::pair<double, double> step_work(const VerifyCase& c);
// The one-launch steps' optimizer constants (family_step.cpp): random in their ranges, weight decay
// as the optimizer's row says for the loss code (fused_step, tc_step and fc3_step take them).
OptimConfig random_optim(OptimKind kind, unsigned loss, Rng& rng);

// family_fc3step.cpp: fc3_step's float64 reference of one step (that file's header gives the
// bounds) on the network `net` (sizes {I, H1, H2, O}) and B samples of X [B][I], T [B][O]: the
// logits Y [B][O] and the gradient G = scale * the sums of W1, b1, W2, b2, W3, b3 back to back (P's
// layout), which ref_optim_bounded takes on to the optimizer's step.
struct Fc3Ref {
    Bounded Y, G;
};
Fc3Ref ref_fc3_step(const NetParams& net, const float* X, const float* T, unsigned B, unsigned loss, float scale);

}  // namespace ptxlab::verify_detail
