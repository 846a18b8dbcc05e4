#include "reference.hpp"

#include "parallel_rows.hpp"
#include "recipe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace ptxlab {

namespace {

constexpr double kU = 0x1p-24;  // unit roundoff of float32 round-to-nearest
constexpr double kInf = std::numeric_limits<double>::infinity();
// ex2.approx.f32 (PTX ISA 9.1, 9.7.3.21 "Floating Point Instructions: ex2",
// https://docs.nvidia.com/cuda/parallel-thread-execution/#floating-point-instructions-ex2):
// "The maximum ulp error is 2 ulp from correctly rounded result across the full range of
// inputs." The correctly rounded result is itself within 0.5 ulp of 2^z, so the result is
// within 2.5 ulp of 2^z. For a normal result 1 ulp <= 2^-23 (1 + 2^-23) |2^z| = 2u (1 + 2u) |2^z|,
// so the relative error is below 5u (1 + 2u) < 6u; a subnormal result (ulp 2^-149) adds at
// most 2.5 * 2^-149 absolute.
constexpr double kEx2Rel = 6 * kU;
constexpr double kEx2Abs = 2.5 * 0x1p-149;
// Absolute slack of a softmax probability: ex2's subnormal error over a sum >= 1, and a
// subnormal quotient's rounding (2^-150).
constexpr double kSoftmaxAbs = 2 * kEx2Abs + 0x1p-149;

double gamma(size_t n) { return n == 0 ? 0.0 : (double(n) * kU) / (1.0 - double(n) * kU); }

// A sample's multiply-adds through the net's layers (for_rows' work of a row).
double net_work(const NetParams& net) {
    double w = 0;
    for (size_t l = 0; l < net.layers(); ++l) w += double(net.sizes[l]) * net.sizes[l + 1];
    return w;
}

// a * b for error terms, where 0 * inf is 0 (an exact zero factor stays exact).
double prod(double a, double b) { return (a == 0.0 || b == 0.0) ? 0.0 : a * b; }

// Bound for the float32 product of two bounded values: one rounding plus propagation.
double product_bound(double x, double ex, double y, double ey) {
    double prop = prod(std::fabs(x), ey) + prod(std::fabs(y), ex) + prod(ex, ey);
    return prop + kU * (std::fabs(x * y) + prop);
}


// ---- Activations other than ReLU (the derivation is in reference.hpp) --------------------

// Relative error bound of ex2.approx(w) against e^x when w = fl(x log2 e) carries a relative
// error of at most theta (roundings and the constant): (1 + 6u) exp(|x| theta) - 1.
double ex2_rel(double x_abs, double theta) { return (1.0 + kEx2Rel) * std::exp(x_abs * theta) - 1.0; }

// 1 / (1 - d) - 1 for a relative error d of a divisor, with the quotient's rounding.
double quotient_rel(double d) { return d < 0.5 ? (1.0 + kU) / (1.0 - d) - 1.0 : kInf; }

constexpr double kLeakyF = double(0.01f);        // the kernels' slope, 0f3C23D70A
constexpr double kLeaky = 0.01;                  // recipe.cpp's
constexpr double kPhiApprox = 7.5e-8;            // A&S 26.2.17's stated |error| of Phi
constexpr double kGeluLip = 1.13;                // max |gelu'| = 1.1289 (at z = +-1.41)
constexpr double kGeluLip2 = 0.8;                // max |gelu''| = 2 phi(0) = 0.7979

// GELU's Phi(z-hat) as the kernels compute it (gauss_cdf of gauss_pdf): the bound of its
// evaluation error for |z-hat - z| <= ez, and phi's relative error r_phi and largest value.
struct GaussEval {
    double ePhi, r_phi, phimax;
};
GaussEval gauss_eval(double z, double ez) {
    static const double b[5] = {0.319381530, -0.356563782, 1.781477937, -1.821255978, 1.330274429};
    const double m = std::fabs(z) + ez, lo = std::max(std::fabs(z) - ez, 0.0);
    GaussEval g;
    // phi: w = fl(fl(z z) c), two roundings and c's (exact: half of log2 e's float) 0.22 u: 3 u.
    g.r_phi = (1.0 + ex2_rel(0.5 * m * m, 3 * kU)) * (1.0 + kU) * (1.0 + 0.5 * kU) - 1.0;
    g.phimax = std::exp(-0.5 * lo * lo) / std::sqrt(2.0 * std::numbers::pi);
    // t = 1 / (1 + p |z|) in (0, 1], largest at the smallest |z|; the sums grow with t.
    const double t = 1.0 / (1.0 + 0.2316419 * lo);
    double S = 0.0, S1 = 0.0, tp = t;
    for (int i = 0; i < 5; ++i, tp *= t) {
        S += std::fabs(b[i]) * tp;
        S1 += double(i + 1) * std::fabs(b[i]) * tp;
    }
    // t P(t): Horner (4 fma, 1 mul; gamma_10 for safety), the b's float rounding (u/2), t's
    // relative error (fma, div, p's rounding: 3 u) times the sensitivity sum i |b_i| t^i.
    const double etP = (gamma(10) + 0.5 * kU) * S + 3 * kU * S1;
    // Q = fl(phi-hat tP-hat); Phi = 1 - Q (one more rounding) or Q; plus A&S's own error.
    const double eQ = g.phimax * (S * (g.r_phi + kU) + etP * (1.0 + g.r_phi) * (1.0 + kU));
    g.ePhi = eQ + kU * (1.0 + eQ) + kPhiApprox;
    return g;
}

}  // namespace

ActBound act_bounded(unsigned act, double z, double ez) {
    const Activation f = activation_of_code(act);
    ActBound r{activate(f, z), 0.0, false};
    const double m = std::fabs(z) + ez;  // |z-hat| at most
    switch (f) {
        case Activation::Relu:
            r.kink = std::fabs(z) <= ez;
            r.ea = ez;
            break;
        case Activation::LeakyRelu:
            // z-hat or fl(z-hat 0.01f): Lipschitz 1, the slope's float rounding, one rounding.
            r.kink = std::fabs(z) <= ez;
            r.ea = ez + m * std::fabs(kLeakyF - kLeaky) + kU * (0.01 * m);
            break;
        case Activation::Tanh: {
            // a = 1 - q, q = 2 / (e + 1), e = ex2(fl(z 2L)) within rho of e^(2 z-hat), so e + 1
            // within rho e / (e + 1) + u (largest at the largest e); q is largest at the smallest z-hat.
            const double rho = ex2_rel(2.0 * m, 3 * kU);
            const double emax = std::exp(2.0 * (z + ez)), qmax = 2.0 / (std::exp(2.0 * (z - ez)) + 1.0);
            const double frac = std::isinf(emax) ? 1.0 : emax / (1.0 + emax);
            const double eq = qmax * quotient_rel(rho * frac + kU);  // den's relative error, then the division
            r.ea = ez + eq + kU * (std::fabs(r.a) + ez + eq);
            break;
        }
        case Activation::Sigmoid: {
            // a = 1 / (1 + e), e = ex2(fl(-z L)) within rho of e^(-z-hat), so 1 + e within
            // rho e / (1 + e) + u; a largest at the largest z-hat. Below z = -87 the result is
            // subnormal or 0 (e overflows): 2^-126 absolute covers it.
            const double rho = ex2_rel(m, 3 * kU);
            const double emax = std::exp(-(z - ez)), amax = 1.0 / (1.0 + std::exp(-(z + ez)));
            const double frac = std::isinf(emax) ? 1.0 : emax / (1.0 + emax);
            r.ea = 0.25 * ez + amax * quotient_rel(rho * frac + kU) + 0x1p-126;
            break;
        }
        case Activation::Gelu: {
            // a = fl(z-hat Phi-hat): Lipschitz 1.13, |z-hat| ePhi, one rounding.
            const GaussEval g = gauss_eval(z, ez);
            const double e0 = kGeluLip * ez + m * g.ePhi;
            r.ea = e0 + kU * (std::fabs(r.a) + e0);
            break;
        }
    }
    if (std::isnan(r.ea)) r.ea = kInf;
    return r;
}

void act_grad_bounded(unsigned act, double z, double ez, double a, double ea, double& g, double& eg) {
    const Activation f = activation_of_code(act);
    switch (f) {
        case Activation::Relu:
            g = a > 0.0 ? 1.0 : 0.0;
            eg = 0.0;
            return;
        case Activation::LeakyRelu:
            // The mask from a's sign (the kink flag covers an uncertain sign); 0.01f for 0.01.
            g = a > 0.0 ? 1.0 : kLeaky;
            eg = a > 0.0 ? 0.0 : std::fabs(kLeakyF - kLeaky);
            return;
        case Activation::Tanh: {
            // fma(-a, a, 1): |a-hat^2 - a^2| <= ea (2|a| + ea), one rounding.
            g = 1.0 - a * a;
            const double e0 = ea * (2.0 * std::fabs(a) + ea);
            eg = e0 + kU * (std::fabs(g) + e0);
            return;
        }
        case Activation::Sigmoid: {
            // fl(a fl(1 - a)): |a-hat (1 - a-hat) - a (1 - a)| <= ea (|1 - 2a| + ea), two roundings.
            g = a * (1.0 - a);
            const double e0 = ea * (std::fabs(1.0 - 2.0 * a) + ea);
            eg = e0 + 2.0001 * kU * (std::fabs(g) + e0);
            return;
        }
        case Activation::Gelu: {
            // fma(z, phi, Phi) from z-hat: 0.8 ez, |z-hat| e_phi + e_Phi, one rounding.
            g = activate_grad(f, z);
            const GaussEval q = gauss_eval(z, ez);
            const double e0 = kGeluLip2 * ez + (std::fabs(z) + ez) * q.phimax * q.r_phi + q.ePhi;
            eg = e0 + kU * (std::fabs(g) + e0);
            return;
        }
    }
}

namespace {

// One dense layer for one sample: z[r] = b[r] + sum_c W[r][c] in[c], with bounds; a hidden
// layer (hidden) applies the activation of code `act` (ReLU: max(z, 0)) and `kink` records
// the units whose sign is uncertain (ReLU, leaky-relu); zout/ezout (when given) keep z.
// `extra` adds roundings to the sum's length for kernels that sum in another order.
void dense_bounded(const float* W, const float* b, const double* in, const double* ein, unsigned rows, unsigned cols,
                   bool hidden, double* out, double* eout, std::vector<char>* kink, unsigned extra = 0,
                   unsigned act = 0, double* zout = nullptr, double* ezout = nullptr, double rel = 0.0) {
    const bool relu = hidden && act == 0;
    for (unsigned r = 0; r < rows; ++r) {
        const float* w = W + size_t(r) * cols;
        double z = b[r], mag = std::fabs(double(b[r])), prop = 0.0;
        for (unsigned c = 0; c < cols; ++c) {
            z += double(w[c]) * in[c];
            mag += std::fabs(double(w[c])) * (std::fabs(in[c]) + ein[c]);
            prop += prod(std::fabs(double(w[c])), ein[c]);
        }
        double ez = (gamma(cols + extra) + rel) * mag + prop;  // rel: TF32 products (tc_sum_bound)
        if (zout) {
            zout[r] = z;
            ezout[r] = ez;
        }
        if (relu) {
            if (kink) (*kink)[r] = std::fabs(z) <= ez;
            z = std::max(z, 0.0);
        } else if (hidden) {
            const ActBound ab = act_bounded(act, z, ez);
            if (kink) (*kink)[r] = ab.kink;
            z = ab.a;
            ez = ab.ea;
        }
        out[r] = z;
        eout[r] = ez;
    }
}

// Sample s's deltas from its bounded outputs y: D2 = the output delta of the loss code
// (ref_output_delta) and D1 = (D2 W) * [a > 0], an fma chain over the O outputs (gamma_O);
// a unit at the ReLU kink (kink[h], when given) gets an infinite bound. For another
// activation code D1 = fl((D2 W) * f'), f' from the exact inputs a or (GELU) z.
// (fused_step computes a and z itself: with zd given, a, z carry the bounds ea, ezd.)
void output_deltas(unsigned loss, const float* W, const double* y, const double* ey, const float* t, const double* a,
                   const std::vector<char>* kink, unsigned H, unsigned O, Bounded& D2, Bounded& D1, unsigned s,
                   unsigned act = 0, const float* z = nullptr, const double* ea = nullptr, const double* zd = nullptr,
                   const double* ezd = nullptr) {
    double* d = D2.v.data() + size_t(s) * O;
    double* ed = D2.e.data() + size_t(s) * O;
    ref_output_delta(loss, y, ey, t, O, d, ed);
    for (unsigned h = 0; h < H; ++h) {
        double sum = 0.0, mag = 0.0, prop = 0.0;
        for (unsigned o = 0; o < O; ++o) {
            const double w = W[size_t(o) * H + h];
            sum += w * d[o];
            mag += prod(std::fabs(w), std::fabs(d[o]) + ed[o]);
            prop += prod(std::fabs(w), ed[o]);
        }
        if (act != 0) {
            double g = 0.0, eg = 0.0;
            if (zd) act_grad_bounded(act, zd[h], ezd[h], a[h], ea[h], g, eg);
            else act_grad_bounded(act, z ? double(z[h]) : 0.0, 0.0, a[h], 0.0, g, eg);
            D1.v[size_t(s) * H + h] = sum * g;
            // leaky-relu's slope at an uncertain sign: not comparable.
            D1.e[size_t(s) * H + h] =
                (kink && (*kink)[h]) ? kInf : product_bound(sum, gamma(O) * mag + prop, g, eg);
            continue;
        }
        const bool active = a[h] > 0.0;
        D1.v[size_t(s) * H + h] = active ? sum : 0.0;
        D1.e[size_t(s) * H + h] = (kink && (*kink)[h]) ? kInf : (active ? gamma(O) * mag + prop : 0.0);
    }
}

}  // namespace

bool within_bound(float got, double ref, double bound) {
    if (std::isinf(bound)) return true;
    if (std::isnan(got)) return false;
    // A small absolute slack covers float32 subnormal rounding, which the relative bound does not.
    return std::fabs(double(got) - ref) <= bound * (1.0 + 1e-9) + 1e-38;
}

void ref_output_delta(unsigned loss, const double* y, const double* ey, const float* t, unsigned O, double* d,
                      double* ed) {
    if (O == 0) return;
    if (loss != kLossSoftmax) {
        // d = y - t: one rounding after the propagated error of y.
        for (unsigned o = 0; o < O; ++o) {
            d[o] = y[o] - double(t[o]);
            ed[o] = ey[o] + kU * (std::fabs(d[o]) + ey[o]);
        }
        return;
    }
    // d = softmax(y) - t; the derivation of the bound is in reference.hpp.
    double M = y[0], Emax = 0.0;
    for (unsigned o = 0; o < O; ++o) {
        M = std::max(M, y[o]);
        Emax = std::max(Emax, ey[o]);
    }
    std::vector<double> p(O), rho(O), phi(O);
    double S = 0.0;
    for (unsigned o = 0; o < O; ++o) S += (p[o] = std::exp(y[o] - M));
    // z = mul.rn(sub.rn(y, m), L) with L = 0f3FB8AA3B: relative error theta against (y - m) log2 e.
    const double L = double(0x1.715476p0f), log2e = 1.4426950408889634074;
    const double theta = (1.0 + kU) * (1.0 + kU) * (1.0 + std::fabs(L - log2e) / log2e) - 1.0;
    double rbar = double(O) * kEx2Abs;  // ex2's absolute error on each term, over a sum >= 1
    for (unsigned o = 0; o < O; ++o) {
        p[o] /= S;
        phi[o] = std::expm1(ey[o] + Emax);                 // softmax(y-hat) / softmax(y) - 1, at most
        const double a = (M - y[o]) + Emax + ey[o];        // m-hat - y-hat[o], at most
        rho[o] = (1.0 + kEx2Rel) * std::exp(a * theta) - 1.0;  // e-hat[o] / exp(y-hat[o] - m-hat) - 1, at most
        rbar += prod(p[o] * (1.0 + phi[o]), rho[o]);
    }
    const double g = gamma(O);
    if (!(rbar < 0.5) || !(g < 0.5)) {
        // Inputs so far off (huge logit bounds, or more outputs than float can sum) that the
        // bound below would not hold: not comparable.
        for (unsigned o = 0; o < O; ++o) {
            d[o] = p[o] - double(t[o]);
            ed[o] = kInf;
        }
        return;
    }
    double all_in = 0.0;  // sum_k p_k phi_k (float64 rounding covered by the factor below)
    for (unsigned o = 0; o < O; ++o) all_in += prod(p[o], phi[o]);
    for (unsigned o = 0; o < O; ++o) {
        // softmax(y-hat) against softmax(y): p_o phi_o, or the others' change, whichever is smaller.
        const double self = prod(p[o], phi[o]);
        const double in = std::min(self, std::max(0.0, all_in * (1.0 + 1e-12) - self));
        // The quotient e / sum, one rounding, against softmax(y-hat).
        const double rel = (1.0 + rho[o]) * (1.0 + kU) / ((1.0 - rbar) * (1.0 - g)) - 1.0;
        const double ep = in + prod(p[o] + in, rel) + kSoftmaxAbs;
        d[o] = p[o] - double(t[o]);
        ed[o] = ep + kU * (std::fabs(d[o]) + ep);  // the subtraction of t
    }
}

RefForward ref_forward(const NetParams& net, const std::vector<float>& X, unsigned B, unsigned act) {
    RefForward f;
    const size_t L = net.layers();
    f.acts.resize(L);
    for (size_t l = 0; l < L; ++l) f.acts[l].resize(size_t(B) * net.sizes[l + 1]);
    const unsigned I = net.sizes[0];
    for_rows(B, net_work(net), [&](size_t s0, size_t s1) {  // the samples: independent rows
        std::vector<double> x(I), ex(I, 0.0);
        for (size_t s = s0; s < s1; ++s) {
            for (unsigned i = 0; i < I; ++i) x[i] = X[s * I + i];
            const double* in = x.data();
            const double* ein = ex.data();
            for (size_t l = 0; l < L; ++l) {
                const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
                double* out = f.acts[l].v.data() + s * rows;
                double* eout = f.acts[l].e.data() + s * rows;
                dense_bounded(net.W[l].data(), net.b[l].data(), in, ein, rows, cols, l + 1 < L, out, eout, nullptr, 0,
                              act);
                in = out;
                ein = eout;
            }
        }
    });
    return f;
}

namespace {
// The delta one layer down and its bound: d_below[c] = (sum_r W[r][c] d[r]) * f'(z[c]), the sum
// from 0 in row order; z, ez (GELU) and a, ea are the layer below's pre-activations and outputs,
// and a unit at the ReLU kink (kink[c]) is not comparable.
void delta_below(const float* W, const double* dl, const double* edl, unsigned rows, unsigned cols, unsigned act,
                 const double* z, const double* ez, const double* a, const double* ea, const char* kink, double* db,
                 double* edb) {
    for (unsigned c = 0; c < cols; ++c) {
        double sum = 0.0, mag = 0.0, prop = 0.0;
        for (unsigned r = 0; r < rows; ++r) {
            double w = W[size_t(r) * cols + c];
            sum += w * dl[r];
            mag += prod(std::fabs(w), std::fabs(dl[r]) + edl[r]);
            prop += prod(std::fabs(w), edl[r]);
        }
        if (act != 0) {
            // fl(sum * f'), f' from the bounded a (or z, GELU) of the layer below.
            double gv = 0.0, eg = 0.0;
            act_grad_bounded(act, z[c], ez[c], a[c], ea[c], gv, eg);
            db[c] = sum * gv;
            edb[c] = product_bound(sum, gamma(rows) * mag + prop, gv, eg);
        } else {
            const bool active = a[c] > 0.0;
            db[c] = active ? sum : 0.0;
            edb[c] = active ? gamma(rows) * mag + prop : 0.0;
        }
        if (kink[c]) edb[c] = kInf;  // the mask itself is uncertain
    }
}


// One sample's forward pass, output delta, weight gradients and deltas (ref_grad's rows), in
// the per-chunk scratch of a thread: the input x, the kink flags and pre-activations of a layer.
struct GradScratch {
    std::vector<double> x, ex;
    std::vector<std::vector<char>> kink;
    std::vector<std::vector<double>> zs, ezs;  // this sample's pre-activations (GELU's derivative)
    explicit GradScratch(const NetParams& net) : x(net.sizes[0]), ex(net.sizes[0], 0.0) {
        for (size_t l = 0; l < net.layers(); ++l) {
            kink.emplace_back(net.sizes[l + 1], 0);
            zs.emplace_back(net.sizes[l + 1], 0.0);
            ezs.emplace_back(net.sizes[l + 1], 0.0);
        }
    }
};

void grad_sample(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, size_t s,
                 unsigned loss, unsigned act, GradScratch& w, RefGrad& g) {
    const size_t L = net.layers();
    const unsigned I = net.sizes[0], O = net.sizes[L];
    // Forward, remembering which hidden units sit at the ReLU kink.
    for (unsigned i = 0; i < I; ++i) w.x[i] = X[s * I + i];
    std::vector<const double*> a(L + 1), ea(L + 1);
    a[0] = w.x.data();
    ea[0] = w.ex.data();
    for (size_t l = 0; l < L; ++l) {
        const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
        double* out = g.fwd.acts[l].v.data() + s * rows;
        double* eout = g.fwd.acts[l].e.data() + s * rows;
        dense_bounded(net.W[l].data(), net.b[l].data(), a[l], ea[l], rows, cols, l + 1 < L, out, eout, &w.kink[l], 0,
                      act, w.zs[l].data(), w.ezs[l].data());
        a[l + 1] = out;
        ea[l + 1] = eout;
    }

    // Output delta of the loss code: y - t (one rounding) or softmax(y) - t.
    double* d = g.gb[L - 1].v.data() + s * O;
    double* ed = g.gb[L - 1].e.data() + s * O;
    ref_output_delta(loss, a[L], ea[L], T.data() + s * O, O, d, ed);

    // Layers from the top: weight gradient d (x) a, then the delta one layer down.
    for (size_t l = L; l-- > 0;) {
        const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
        const double* dl = g.gb[l].v.data() + s * rows;
        const double* edl = g.gb[l].e.data() + s * rows;
        double* gw = g.gW[l].v.data() + s * rows * cols;
        double* egw = g.gW[l].e.data() + s * rows * cols;
        for (unsigned r = 0; r < rows; ++r)
            for (unsigned c = 0; c < cols; ++c) {
                gw[size_t(r) * cols + c] = dl[r] * a[l][c];
                egw[size_t(r) * cols + c] = product_bound(dl[r], edl[r], a[l][c], ea[l][c]);
            }
        if (l == 0) break;
        delta_below(net.W[l].data(), dl, edl, rows, cols, act, w.zs[l - 1].data(), w.ezs[l - 1].data(), a[l], ea[l],
                    w.kink[l - 1].data(), g.gb[l - 1].v.data() + s * cols, g.gb[l - 1].e.data() + s * cols);
    }
}
}  // namespace

RefGrad ref_grad(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, unsigned B,
                 unsigned loss, unsigned act) {
    RefGrad g;
    const size_t L = net.layers();
    g.fwd.acts.resize(L);
    g.gW.resize(L);
    g.gb.resize(L);
    for (size_t l = 0; l < L; ++l) {
        g.fwd.acts[l].resize(size_t(B) * net.sizes[l + 1]);
        g.gb[l].resize(size_t(B) * net.sizes[l + 1]);
        g.gW[l].resize(size_t(B) * net.sizes[l + 1] * net.sizes[l]);
    }
    // The samples are independent rows: each writes its own slices of g (forward, delta, gW).
    for_rows(B, 3 * net_work(net), [&](size_t s0, size_t s1) {
        GradScratch w(net);
        for (size_t s = s0; s < s1; ++s) grad_sample(net, X, T, s, loss, act, w, g);
    });
    return g;
}

Bounded ref_fused_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                          unsigned B, unsigned I, unsigned H, unsigned act, Bounded* Z) {
    Bounded A;
    A.resize(size_t(B) * H);
    if (Z) Z->resize(size_t(B) * H);
    for_rows(B, double(I) * H, [&](size_t s0, size_t s1) {
        std::vector<double> x(I), ex(I, 0.0);
        for (size_t s = s0; s < s1; ++s) {
            for (unsigned i = 0; i < I; ++i) x[i] = X[s * I + i];
            // A product passes at most ceil(I/32) + 2 roundings inside its cluster rank (an fma
            // chain, then two adds joining the four partial sums), 7 joining the 8 ranks, and the
            // bias: at most I + 10 roundings, so gamma(I + 10) bounds the error.
            dense_bounded(W.data(), b.data(), x.data(), ex.data(), H, I, true, A.v.data() + s * H, A.e.data() + s * H,
                          nullptr, 10, act, Z ? Z->v.data() + s * H : nullptr, Z ? Z->e.data() + s * H : nullptr);
        }
    });
    return A;
}

RefFusedOutput ref_fused_output(const std::vector<float>& A, const std::vector<float>& W, const std::vector<float>& b,
                                const std::vector<float>& T, unsigned B, unsigned H, unsigned O, unsigned loss,
                                unsigned act, const std::vector<float>* Z) {
    RefFusedOutput r;
    r.Y.resize(size_t(B) * O);
    r.D2.resize(size_t(B) * O);
    r.D1.resize(size_t(B) * H);
    for_rows(B, 2.0 * H * O, [&](size_t s0, size_t s1) {
        std::vector<double> a(H), ea(H, 0.0);
        for (size_t s = s0; s < s1; ++s) {
            for (unsigned h = 0; h < H; ++h) a[h] = A[s * H + h];
            double* y = r.Y.v.data() + s * O;
            double* ey = r.Y.e.data() + s * O;
            // Lane sums, 5 butterfly levels, the bias: at most 6 roundings more.
            dense_bounded(W.data(), b.data(), a.data(), ea.data(), O, H, false, y, ey, nullptr, 6);
            // A is an input here: the mask is exact (no kink).
            output_deltas(loss, W.data(), y, ey, T.data() + s * O, a.data(), nullptr, H, O, r.D2, r.D1, unsigned(s),
                          act, Z ? Z->data() + s * H : nullptr);
        }
    });
    return r;
}

void ref_fused_grad(Bounded& G, Bounded& Gb, const std::vector<float>& L, const std::vector<float>& R, unsigned B,
                    unsigned rows, unsigned cols, float scale) {
    G.resize(size_t(rows) * cols);
    Gb.resize(rows);
    const double sc = scale;
    for_rows(rows, double(B) * (cols + 1), [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) {
            for (unsigned c = 0; c <= cols; ++c) {
                double sum = 0.0, mag = 0.0;
                for (unsigned s = 0; s < B; ++s) {
                    const double t =
                        double(L[size_t(s) * rows + r]) * (c == cols ? 1.0 : double(R[size_t(s) * cols + c]));
                    sum += t;
                    mag += std::fabs(t);
                }
                // Four fma chains of at most ceil(B/4) roundings, two adds to join them: gamma(B + 2);
                // then one rounding for the product with the scale.
                const double esum = gamma(B + 2) * mag, v = sc * sum, ev = std::fabs(sc) * esum;
                double& out_v = c == cols ? Gb.v[r] : G.v[size_t(r) * cols + c];
                double& out_e = c == cols ? Gb.e[r] : G.e[size_t(r) * cols + c];
                out_v = v;
                out_e = ev + kU * (std::fabs(v) + ev);
            }
        }
    });
}

RefFusedStep ref_fused_step(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, unsigned B,
                            unsigned loss, float scale, unsigned act, const TcProducts* tc) {
    const unsigned I = net.sizes[0], H = net.sizes[1], O = net.sizes[2];
    RefFusedStep r;
    r.A.resize(size_t(B) * H);
    r.Y.resize(size_t(B) * O);
    Bounded D1, D2;
    D1.resize(size_t(B) * H);
    D2.resize(size_t(B) * O);
    for_rows(B, (double(I) + 2.0 * O) * H, [&](size_t s0, size_t s1) {
        std::vector<char> kink(H);
        std::vector<double> x(I), ex(I, 0.0), z(H), ez(H);
        for (size_t s = s0; s < s1; ++s) {
            for (unsigned i = 0; i < I; ++i) x[i] = X[s * I + i];
            double* a = r.A.v.data() + s * H;
            double* ea = r.A.e.data() + s * H;
            // A rank's fma chain, 7 adds joining the 8 ranks, the bias: at most I + 8 roundings
            // (tc_step: the mma chains within tc->z of their products, 15 adds joining 16 ranks).
            dense_bounded(net.W[0].data(), net.b[0].data(), x.data(), ex.data(), H, I, true, a, ea, &kink, tc ? 17 : 10,
                          act, z.data(), ez.data(), tc ? tc->z : 0.0);
            double* y = r.Y.v.data() + s * O;
            double* ey = r.Y.e.data() + s * O;
            // A 16-term chain per tile (tc_step: 8 terms a rank), the tiles added in order, then the bias.
            dense_bounded(net.W[1].data(), net.b[1].data(), a, ea, O, H, false, y, ey, nullptr,
                          tc ? (H + 7) / 8 + 1 : (H + 15) / 16 + 1);
            output_deltas(loss, net.W[1].data(), y, ey, T.data() + s * O, a, &kink, H, O, D2, D1, unsigned(s), act,
                          nullptr, ea, z.data(), ez.data());
        }
    });
    // G = scale * sum_s L[s][row] R[s][col], R = nullptr for a bias (R = 1); both factors bounded.
    // rel: the sum's relative bound over its magnitude, gamma_B for an FP32 chain.
    auto grad = [&](Bounded& out, const Bounded& L, const Bounded* R, unsigned rows, unsigned cols, double rel) {
        out.resize(size_t(rows) * cols);
        const double sc = scale;
        for_rows(rows, double(B) * cols, [&](size_t row0, size_t row1) {
            for (size_t row = row0; row < row1; ++row)
                for (unsigned col = 0; col < cols; ++col) {
                    double sum = 0.0, mag = 0.0, prop = 0.0;
                    for (unsigned s = 0; s < B; ++s) {
                        const double l = L.v[size_t(s) * rows + row], el = L.e[size_t(s) * rows + row];
                        const double rv = R ? R->v[size_t(s) * cols + col] : 1.0;
                        const double er = R ? R->e[size_t(s) * cols + col] : 0.0;
                        sum += l * rv;
                        mag += prod(std::fabs(l) + el, std::fabs(rv) + er);
                        prop += prod(std::fabs(l), er) + prod(std::fabs(rv), el) + prod(el, er);
                    }
                    const size_t i = row * cols + col;
                    const double esum = rel * mag + prop, v = sc * sum, ev = std::fabs(sc) * esum;
                    out.v[i] = v;
                    out.e[i] = ev + kU * (std::fabs(v) + ev);  // the product with the scale, rounded once
                }
        });
    };
    Bounded Xb;
    Xb.resize(size_t(B) * I);
    for (size_t i = 0; i < Xb.size(); ++i) Xb.v[i] = X[i];
    grad(r.GW1, D1, &Xb, H, I, tc ? tc->gw1 : gamma(B));  // tc_step: an mma chain over the samples
    grad(r.Gb1, D1, nullptr, H, 1, gamma(B));
    grad(r.GW2, D2, &r.A, O, H, gamma(B));
    grad(r.Gb2, D2, nullptr, O, 1, gamma(B));
    return r;
}

Bounded ref_gather(const std::vector<float>& src, const std::vector<uint32_t>& idx, unsigned cols) {
    Bounded out;
    out.resize(idx.size() * size_t(cols));
    for (size_t r = 0; r < idx.size(); ++r)
        for (unsigned c = 0; c < cols; ++c) out.v[r * cols + c] = src[size_t(idx[r]) * cols + c];
    return out;
}

Bounded ref_outer(const std::vector<float>& D, const std::vector<float>& V, unsigned B, unsigned R, unsigned C) {
    Bounded out;
    out.resize(size_t(B) * R * C);
    for (unsigned b = 0; b < B; ++b)
        for (unsigned r = 0; r < R; ++r)
            for (unsigned c = 0; c < C; ++c) {
                // The float64 product of two floats is exact; float32 rounds it once.
                const double p = double(D[size_t(b) * R + r]) * double(V[size_t(b) * C + c]);
                const size_t i = (size_t(b) * R + r) * C + c;
                out.v[i] = p;
                out.e[i] = gamma(1) * std::fabs(p);
            }
    return out;
}

// ---- float64 training loop ------------------------------------------------------

std::vector<double> cpu_forward(const Net64& net, const std::vector<double>& X, unsigned B) {
    const size_t L = net.sizes.size() - 1;
    std::vector<double> in, out;
    std::vector<double> Y;
    for (unsigned s = 0; s < B; ++s) {
        in.assign(X.begin() + long(s) * net.sizes[0], X.begin() + long(s + 1) * net.sizes[0]);
        for (size_t l = 0; l < L; ++l) {
            const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
            out.assign(rows, 0.0);
            for (unsigned r = 0; r < rows; ++r) {
                double z = net.b[l][r];
                for (unsigned c = 0; c < cols; ++c) z += net.W[l][size_t(r) * cols + c] * in[c];
                out[r] = (l + 1 < L) ? std::max(z, 0.0) : z;
            }
            in.swap(out);
        }
        Y.insert(Y.end(), in.begin(), in.end());
    }
    return Y;
}

double cpu_train_step(Net64& net, const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B,
                      double lr) {
    const size_t L = net.sizes.size() - 1;
    std::vector<std::vector<double>> gW(L), gb(L);
    for (size_t l = 0; l < L; ++l) {
        gW[l].assign(net.W[l].size(), 0.0);
        gb[l].assign(net.b[l].size(), 0.0);
    }
    double loss = 0.0;
    for (unsigned s = 0; s < B; ++s) {
        // Forward, keeping every layer's output.
        std::vector<std::vector<double>> a(L + 1);
        a[0].assign(X.begin() + long(s) * net.sizes[0], X.begin() + long(s + 1) * net.sizes[0]);
        for (size_t l = 0; l < L; ++l) {
            const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
            a[l + 1].assign(rows, 0.0);
            for (unsigned r = 0; r < rows; ++r) {
                double z = net.b[l][r];
                for (unsigned c = 0; c < cols; ++c) z += net.W[l][size_t(r) * cols + c] * a[l][c];
                a[l + 1][r] = (l + 1 < L) ? std::max(z, 0.0) : z;
            }
        }
        // Output delta and loss.
        std::vector<double> d(net.sizes[L]);
        for (unsigned o = 0; o < net.sizes[L]; ++o) {
            d[o] = a[L][o] - (labels[s] == o ? 1.0 : 0.0);
            loss += 0.5 * d[o] * d[o];
        }
        // Backward, accumulating the batch sum of gradients.
        for (size_t l = L; l-- > 0;) {
            const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
            for (unsigned r = 0; r < rows; ++r) {
                gb[l][r] += d[r];
                for (unsigned c = 0; c < cols; ++c) gW[l][size_t(r) * cols + c] += d[r] * a[l][c];
            }
            if (l == 0) break;
            std::vector<double> below(cols, 0.0);
            for (unsigned c = 0; c < cols; ++c) {
                double sum = 0.0;
                for (unsigned r = 0; r < rows; ++r) sum += net.W[l][size_t(r) * cols + c] * d[r];
                below[c] = a[l][c] > 0.0 ? sum : 0.0;
            }
            d.swap(below);
        }
    }
    for (size_t l = 0; l < L; ++l) {
        for (size_t i = 0; i < gW[l].size(); ++i) net.W[l][i] -= lr * gW[l][i] / B;
        for (size_t i = 0; i < gb[l].size(); ++i) net.b[l][i] -= lr * gb[l][i] / B;
    }
    return loss / B;
}

}  // namespace ptxlab
