// The float64 references of ptx/act.ptx's passes (reference.hpp: ref_act_fwd, ref_act_bwd).
#include "reference.hpp"

#include "error.hpp"

#include <cmath>

namespace ptxlab {

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of float32 round-to-nearest

}  // namespace

Bounded ref_act_fwd(const std::vector<float>& Z, unsigned act) {
    Bounded A;
    A.resize(Z.size());
    for (size_t i = 0; i < Z.size(); ++i) {
        const ActBound r = act_bounded(act, Z[i], 0.0);  // z exact: no kink to worry about
        A.v[i] = r.a;
        A.e[i] = r.ea;
    }
    return A;
}

Bounded ref_act_bwd(const std::vector<float>& dA, const std::vector<float>& A, const std::vector<float>& Z,
                    unsigned act) {
    if (A.size() != dA.size() || Z.size() != dA.size())
        PTXLAB_THROW(Error, "ref_act_bwd: dA, A and Z differ in size ({}, {}, {})", dA.size(), A.size(), Z.size());
    Bounded G;
    G.resize(dA.size());
    for (size_t i = 0; i < dA.size(); ++i) {
        const double d = dA[i];
        if (act == 0) {  // ReLU: the select, exact
            G.v[i] = A[i] > 0.0f ? d : 0.0;
            continue;
        }
        // f' from the float A (taken as exact: it is the kernel's input) or, for GELU, from Z.
        double g = 0.0, eg = 0.0;
        act_grad_bounded(act, Z[i], 0.0, A[i], 0.0, g, eg);
        const double prop = std::fabs(d) * eg;
        G.v[i] = d * g;
        G.e[i] = prop + kU * (std::fabs(d * g) + prop);
    }
    return G;
}

}  // namespace ptxlab
