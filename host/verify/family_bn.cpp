// ptx/bn.ptx: bn_fwd and bn_bwd, batch normalization with the activation after it (bn.hpp).
// Shapes: bn_fwd B,C,HW,act,train (train 1: the batch's statistics, the running ones updated;
// 0: evaluation on the running ones); bn_bwd B,C,HW,act. act: 0 ReLU, 1 leaky-ReLU, 5 none.
//
// The float64 bound, a priori (u = 2^-24, gamma_k = k u / (1 - k u), d = ceil(n / 2048) + 15
// the most adds a value goes through: its thread's sum, the block tree's 8 levels, the 7 adds
// of the cluster's ranks):
//   mean   em = gamma_(d+1) sum|x| / n + u |mean|
//   sq     the squares of fl(x - mean_f) summed: Sum (x - mean_f)^2 = n var + n (mean - mean_f)^2,
//          each term rounded twice and the sum by gamma_d: esq = n em^2 + gamma_(d+3) (n var + n em^2)
//   rstd   relative ev2 / (2 (var + eps)) + 2u, ev2 = esq / n + u (var + eps) + u var
//   xhat   em rstd + |x - mean| er + 2u |xhat|;  z = gamma xhat + beta: |gamma| exhat + u |z|
//   Y      act(z): a ReLU within its bound of 0 is not compared (a kink); leaky-ReLU's 0.01 is
//          the float the kernel multiplies by, and adds u |y|
// bn_bwd, from the float mean and rstd it is given: xhat within 2u |xhat|, dz exact (leaky:
// u |dz|); S1 within gamma_d sum|dz|, S2 within gamma_d sum|dz xhat| + sum |dz| exhat; each
// rounding after them its u. Every bound is taken 1.05 times (the second-order terms).
#include "bn.hpp"
#include "recipe.hpp"
#include "registry.hpp"

#include <cmath>

namespace ptxlab::verify_detail {

namespace {

constexpr double kU = 1.0 / 16777216.0;
constexpr double kMargin = 1.05;
const double kLeaky = double(0.01f), kMom = double(0.1f), kKeep = double(0.9f), kEps = double(1e-5f);

double gam(double k) { return k * kU / (1.0 - k * kU); }

struct BnDims {
    unsigned B, C, HW, act;
    size_t n() const { return size_t(B) * HW; }
    size_t at(size_t k, unsigned c) const { return (k / HW * C + c) * HW + k % HW; }
    double depth() const {
        const size_t step = size_t(kBnThreads) * kBnCluster;
        return double((n() + step - 1) / step) + 15;
    }
};

BnDims dims_of(const VerifyCase& c) { return {c.shape[0], c.shape[1], c.shape[2], c.shape[3]}; }

// y = act(z) with z's bound ez: the value and its bound (infinite at a ReLU kink).
void activate_bounded(unsigned act, double z, double ez, double& y, double& ey) {
    if (act == kBnActNone || z > ez) {
        y = z;
        ey = ez;
    } else if (z < -ez) {
        y = act == kActLeakyRelu ? z * kLeaky : 0.0;
        ey = act == kActLeakyRelu ? kLeaky * ez + kU * std::fabs(y) : 0.0;
    } else {
        y = z > 0 ? z : act == kActLeakyRelu ? z * kLeaky : 0.0;
        ey = INFINITY;
    }
}

// The per-channel statistics the forward pass normalizes with, and their bounds.
struct ChannelStats {
    double mean = 0, rstd = 0, em = 0, er = 0, sq = 0, esq = 0;
};

ChannelStats batch_stats(const BnDims& d, const std::vector<float>& X, unsigned c) {
    const double n = double(d.n());
    ChannelStats s;
    double abs = 0;
    for (size_t k = 0; k < d.n(); ++k) {
        s.mean += X[d.at(k, c)];
        abs += std::fabs(X[d.at(k, c)]);
    }
    s.mean /= n;
    s.em = gam(d.depth() + 1) * abs / n + kU * std::fabs(s.mean);
    for (size_t k = 0; k < d.n(); ++k) s.sq += (X[d.at(k, c)] - s.mean) * (X[d.at(k, c)] - s.mean);
    s.esq = n * s.em * s.em + gam(d.depth() + 3) * (s.sq + n * s.em * s.em);
    const double var = s.sq / n, ev2 = s.esq / n + kU * (var + kEps) + kU * var;
    s.rstd = 1.0 / std::sqrt(var + kEps);
    s.er = (0.5 * ev2 / (var + kEps) + 2 * kU) * s.rstd;
    return s;
}

Harness make_bn_fwd(const VerifyCase& c, Rng& rng) {
    const BnDims d = dims_of(c);
    const bool train = c.shape[4] == 1;
    const size_t total = d.n() * d.C;
    Harness h;
    // Values off centre (mean about 0.5) so that the mean's rounding shows; gamma both signs.
    std::vector<float> X = random_vector(rng, total, -1.0f, 2.0f), gamma = random_vector(rng, d.C, -2.0f, 2.0f),
                       beta = random_vector(rng, d.C, -0.5f, 0.5f), running(2 * size_t(d.C));
    for (unsigned k = 0; k < d.C; ++k) {
        running[k] = rng.uniform(-0.5f, 0.5f);
        running[d.C + k] = rng.uniform(0.05f, 2.0f);
    }
    Bounded& Y = h.expected["Y"];
    Bounded& st = h.expected["stats"];
    Bounded& run = h.expected["running"];
    Y.resize(total);
    st.resize(2 * size_t(d.C));
    run.resize(2 * size_t(d.C));
    for (unsigned ch = 0; ch < d.C; ++ch) {
        ChannelStats s;
        if (train) {
            s = batch_stats(d, X, ch);
            st.v[ch] = s.mean, st.e[ch] = kMargin * s.em;
            st.v[d.C + ch] = s.rstd, st.e[d.C + ch] = kMargin * s.er;
            const double rm = kMom * s.mean + kKeep * running[ch];
            run.v[ch] = rm;
            run.e[ch] = kMargin * (kMom * s.em + kU * kKeep * std::fabs(running[ch]) + kU * std::fabs(rm));
            const double varu = s.sq / double(d.n() - 1), evu = s.esq / double(d.n() - 1) + kU * varu;
            const double rv = kMom * varu + kKeep * running[d.C + ch];
            run.v[d.C + ch] = rv;
            run.e[d.C + ch] = kMargin * (kMom * evu + kU * kKeep * running[d.C + ch] + kU * rv);
        } else {
            s.mean = running[ch];
            s.rstd = 1.0 / std::sqrt(double(running[d.C + ch]) + kEps);
            s.er = 3 * kU * s.rstd;
            run.v[ch] = running[ch], run.v[d.C + ch] = running[d.C + ch];  // read, not written
        }
        for (size_t k = 0; k < d.n(); ++k) {
            const size_t a = d.at(k, ch);
            const double xc = X[a] - s.mean, xhat = xc * s.rstd;
            const double exhat = s.em * s.rstd + std::fabs(xc) * s.er + 2 * kU * std::fabs(xhat);
            const double z = gamma[ch] * xhat + beta[ch], ez = std::fabs(gamma[ch]) * exhat + kU * std::fabs(z);
            activate_bounded(d.act, z, kMargin * ez, Y.v[a], Y.e[a]);
        }
    }
    h.tensors.push_back({"Y", {d.B, d.C, d.HW}, Role::Out, {}});
    if (train) h.tensors.push_back({"stats", {2, d.C}, Role::Out, {}});
    h.tensors.push_back({"running", {2, d.C}, train ? Role::InOut : Role::In, running});
    h.tensors.push_back({"X", {d.B, d.C, d.HW}, Role::In, std::move(X)});
    h.tensors.push_back({"gamma", {d.C}, Role::In, std::move(gamma)});
    h.tensors.push_back({"beta", {d.C}, Role::In, std::move(beta)});
    h.launch = [d, train](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_bn_fwd(k, d.B, d.C, d.HW, m.at("Y"), train ? m.at("stats") : 0, m.at("running"), m.at("X"),
                      m.at("gamma"), m.at("beta"), d.act, train, s);
    };
    return h;
}

// The float mean and rstd bn_fwd would leave (the batch's, rounded to float).
std::vector<float> float_stats(const BnDims& d, const std::vector<float>& X) {
    std::vector<float> st(2 * size_t(d.C));
    for (unsigned ch = 0; ch < d.C; ++ch) {
        const ChannelStats s = batch_stats(d, X, ch);
        st[ch] = float(s.mean);
        st[d.C + ch] = float(s.rstd);
    }
    return st;
}

Harness make_bn_bwd(const VerifyCase& c, Rng& rng) {
    const BnDims d = dims_of(c);
    const size_t total = d.n() * d.C;
    const float scale = rng.uniform(0.5f, 2.0f) / float(d.B);
    std::vector<float> X = random_vector(rng, total, -1.0f, 2.0f), dY = random_vector(rng, total, -1.0f, 1.0f),
                       Y = d.act == kBnActNone ? random_vector(rng, total, -1.0f, 1.0f) : relu_outputs(rng, total),
                       gamma = random_vector(rng, d.C, -2.0f, 2.0f), stats = float_stats(d, X);
    if (d.act == kActLeakyRelu)  // leaky-ReLU outputs: negative where the mask says so
        for (auto& y : Y) y = y > 0 ? y : -0.01f * rng.uniform(0.0f, 1.0f);
    Harness h;
    Bounded& dX = h.expected["dX"];
    Bounded& dgamma = h.expected["dgamma"];
    Bounded& dbeta = h.expected["dbeta"];
    dX.resize(total);
    dgamma.resize(d.C);
    dbeta.resize(d.C);
    const double n = double(d.n()), g = gam(d.depth());
    std::vector<double> dz(d.n()), edz(d.n()), xhat(d.n());
    for (unsigned ch = 0; ch < d.C; ++ch) {
        const double mean = stats[ch], rstd = stats[d.C + ch];
        double S1 = 0, S2 = 0, a1 = 0, a2 = 0, ex1 = 0, ex2 = 0;
        for (size_t k = 0; k < d.n(); ++k) {
            const size_t a = d.at(k, ch);
            const bool pos = Y[a] > 0;
            dz[k] = d.act == kBnActNone || pos ? dY[a] : d.act == kActLeakyRelu ? dY[a] * kLeaky : 0.0;
            edz[k] = d.act == kActLeakyRelu && !pos ? kU * std::fabs(dz[k]) : 0.0;
            xhat[k] = (X[a] - mean) * rstd;
            S1 += dz[k];
            S2 += dz[k] * xhat[k];
            a1 += std::fabs(dz[k]);
            ex1 += edz[k];
            a2 += std::fabs(dz[k] * xhat[k]);
            ex2 += std::fabs(dz[k]) * 2 * kU * std::fabs(xhat[k]) + edz[k] * std::fabs(xhat[k]);
        }
        const double e1 = g * a1 + (1 + g) * ex1, e2 = g * a2 + (1 + g) * ex2;
        dbeta.v[ch] = scale * S1, dbeta.e[ch] = kMargin * (scale * e1 + kU * std::fabs(scale * S1));
        dgamma.v[ch] = scale * S2, dgamma.e[ch] = kMargin * (scale * e2 + kU * std::fabs(scale * S2));
        const double m1 = S1 / n, m2 = S2 / n, em1 = e1 / n + kU * std::fabs(m1), em2 = e2 / n + kU * std::fabs(m2);
        const double k1 = double(gamma[ch]) * rstd, ek1 = kU * std::fabs(k1);
        for (size_t k = 0; k < d.n(); ++k) {
            const size_t a = d.at(k, ch);
            const double t1 = dz[k] - m1, et1 = edz[k] + em1 + kU * std::fabs(t1);
            const double t2 = t1 - xhat[k] * m2;
            const double et2 = std::fabs(xhat[k]) * em2 + std::fabs(m2) * 2 * kU * std::fabs(xhat[k]) + et1 +
                               kU * std::fabs(t2);
            dX.v[a] = k1 * t2;
            dX.e[a] = kMargin * (std::fabs(k1) * et2 + ek1 * std::fabs(t2) + kU * std::fabs(k1 * t2));
        }
    }
    h.tensors = {{"dX", {d.B, d.C, d.HW}, Role::Out, {}},
                 {"dgamma", {d.C}, Role::Out, {}},
                 {"dbeta", {d.C}, Role::Out, {}},
                 {"dY", {d.B, d.C, d.HW}, Role::In, std::move(dY)},
                 {"Y", {d.B, d.C, d.HW}, Role::In, std::move(Y)},
                 {"X", {d.B, d.C, d.HW}, Role::In, std::move(X)},
                 {"gamma", {d.C}, Role::In, std::move(gamma)},
                 {"stats", {2, d.C}, Role::In, std::move(stats)}};
    h.launch = [d, scale](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_bn_bwd(k, d.B, d.C, d.HW, m.at("dX"), m.at("dgamma"), m.at("dbeta"), m.at("dY"), m.at("Y"), m.at("X"),
                      m.at("gamma"), m.at("stats"), d.act, scale, s);
    };
    return h;
}

// B,C,HW,act[,train]: the count, the kernels' limits (bn_unfit), train 0 or 1.
void validate_bn(const VerifyCase& c) {
    const size_t want = c.entry == "bn_fwd" ? 5 : 4;
    if (c.shape.size() != want)
        PTXLAB_THROW(InputError, "kernel '{}' takes {} shape numbers ({}), got {}", c.entry, want,
                     want == 5 ? "B,C,HW,act,train" : "B,C,HW,act", c.shape.size());
    if (want == 5 && c.shape[4] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': train must be 0 (the running statistics) or 1 (the batch's), got {}",
                     c.entry, c.shape[4]);
    const bool train = want == 4 || c.shape[4] == 1;
    if (std::string why = bn_unfit(c.shape[0], c.shape[1], c.shape[2], c.shape[3], train); !why.empty())
        PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

// The CNN's bn after conv1 (batch 64, 32x28x28) and conv2 (64x14x14), after fc1 (128 units, a
// 1x1 plane: BatchNorm1d), a batch of 1 (variance over one 3x3 plane), two values a channel,
// odd sizes, planes past 1024 (a thread's step wraps inside a plane), evaluation at the
// evaluation batch and small; each activation. The kernels' cache (bn_cache_bytes): every
// training shape here takes it but two: at 300 x 2 x 784 (115 values a thread) bn_bwd runs
// without it and bn_fwd with it, at 600 x 1 x 784 (230) both without.
std::vector<VerifyCase> bn_default_cases() {
    std::vector<VerifyCase> v;
    const std::vector<std::vector<unsigned>> shapes = {{64, 32, 784, 0}, {64, 64, 196, 0}, {64, 128, 1, 0},
                                                       {1, 3, 9, kBnActNone}, {2, 5, 1, 1}, {3, 7, 25, 1},
                                                       {17, 3, 1030, kBnActNone}, {5, 1, 1, 0}, {300, 2, 784, 1},
                                                       {600, 1, 784, 0}};
    for (const auto& s : shapes) {
        v.push_back({"bn_fwd", {s[0], s[1], s[2], s[3], 1}});
        v.push_back({"bn_bwd", s});
    }
    v.push_back({"bn_fwd", {500, 32, 784, 0, 0}});
    v.push_back({"bn_fwd", {1, 5, 1, 1, 0}});  // evaluation takes a batch of 1
    v.push_back({"bn_fwd", {3, 7, 25, kBnActNone, 0}});
    return v;
}

std::vector<VerifyCase> bn_quick_cases() {
    return {{"bn_fwd", {3, 7, 25, 1, 1}}, {"bn_bwd", {3, 7, 25, 0}}, {"bn_fwd", {3, 7, 25, 0, 0}}};
}

// bench: the least traffic: forward reads X (twice in training) and writes Y; backward reads
// dY, Y, X and writes dX.
std::pair<double, double> bn_work(const VerifyCase& c) {
    const double n = double(c.shape[0]) * c.shape[1] * c.shape[2];
    return c.entry == "bn_fwd" ? std::pair{4 * 2 * n, 6 * n} : std::pair{4 * 4 * n, 10 * n};
}

}  // namespace

const KernelFamily& bn_family() {
    static const KernelFamily f{"bn",
                                {"bn"},
                                {{.entry = "bn_fwd",
                                  .shape = "B,C,HW,act,train",
                                  .act_named = false,
                                  .validate = validate_bn,
                                  .harness = make_bn_fwd,
                                  .work = bn_work},
                                 {.entry = "bn_bwd",
                                  .shape = "B,C,HW,act",
                                  .act_named = false,
                                  .validate = validate_bn,
                                  .harness = make_bn_bwd,
                                  .work = bn_work}},
                                bn_default_cases,
                                bn_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{bn_family, 160, 140};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
