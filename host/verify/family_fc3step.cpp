// ptx/fc3step.ptx: fc3_step, whole training steps of a 3-layer fc network (I -> H1 -> H2 -> O, ReLU)
// in one launch of G clusters of 4 blocks, its five large products on TF32 mma.sync (fc3step.hpp).
// Shape: B,I,H1,H2,O,loss,optim (the loss code; recipe.hpp's optimizer code).
//
// The harness: a random network (He-uniform weights, small biases), optimizer state and step
// record (random_optim), X uniform in [0, 1), one-hot T, Y poisoned, the scratch `work` zero (as the
// host keeps it before the first launch). An optimizer that keeps state runs one step. Plain SGD
// (code 0) runs two, the first with lr = 0: that step leaves every parameter bit for bit as it
// found it (fma.rn(-0, g, p) = p), so the float64 reference of the second starts from known
// floats, and the case covers the launch's multi-step path: the batches at X + j B I, T + j B O and
// Y + j B O, the records hyp[j], the tiles kept in shared memory between steps, and W1's and W2's
// write-back in the last step only.
//
// The float64 reference (ref_fc3_step) follows fc3step.ptx's summation order, each sum bounded by
// its roundings over the magnitude of its terms (the factors' bounds included), u = 2^-24, the
// tensor core's additions by tc.hpp's model (32 u a mma of its magnitude, gamma(32 n) over a chain
// of n), T2 = ceil(H2/16):
// The products read X, W1, W2, D2 and D1 as their FP32 bits, which the tensor core truncates to
// TF32 (trunc: bits & 0xffffe000, within 2^-10 of the input, kTruncErr); A1 is rounded once as it is
// staged (cvt.rna.tf32: tf32, within 2^-11, kTf32Half).
//   z1 = X W1^T + b1      the exact products of trunc(X), trunc(W1) (known floats): only the chain's
//                         additions err, gamma(32 n + 5) (the longer of E and O, 4 adds, the bias)
//   z2 = A1 W2^T + b2     trunc(W2) exact; tf32(A1) between tf32(A1 - e) and tf32(A1 + e) (tf32 is
//                         monotone); its own additions gamma(32 n + 4) (a rank's chain, 3 joins, the bias)
//   Y  = A2 W3^T + b3     gamma(min(H2, 16) + T2) (a tile's fma chain, T2 - 1 joins, the bias)
//   D3                    ref_output_delta (the loss code's sequence)
//   D2 = D3 W3 [A2 > 0]   gamma(O) (fma.rn chain); trunc(D2) within 2^-10 more for D1
//   D1 = D2 W2 [A1 > 0]   trunc(W2) exact; gamma(32 n + T2 - 1) (a tile's two mma, the joins)
//   dW1 = D1^T X          2^-10 (trunc of D1; trunc(X) exact) + gamma(32 ceil(B/8)); dW2 = D2^T A1
//                         2^-10 + 2^-11 + 2^-21 (trunc(D2), tf32(A1)) + gamma(32 ceil(B/8)); dW3 and the
//                         bias sums gamma(B); mul.rn by scale
// Worst-case propagation through the wide sums of three layers would leave Y within tens of percent
// (each layer multiplies a relative error by about sum |w a| / |sum w a|) and the gradients without
// a useful bound. So the errors stay linear in their sources while they can: with the units of A2
// whose mask is sure (on), Y's error is sum_h C[o][h] eps_h over A1's TF32 inputs' errors eps_h,
// C = W3 diag(on) trunc(W2), plus those units' own roundings, and D1's is sum_o C[o][h] (D3's errors)
// plus D2's roundings; only the rest is taken term by term. A hidden unit within its bound of the
// ReLU kink may take either mask in the kernel: its output is bounded as max is (1-Lipschitz) but
// enters as an independent error, and its delta carries |sum| + its bound (0 or the sum), finite,
// so that every gradient stays compared. ref_optim_bounded takes the gradient on to the step.
#include "fc3step.hpp"
#include "bounded_ops.hpp"
#include "parallel_rows.hpp"
#include "ref_optim.hpp"
#include "registry.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace ptxlab::verify_detail {

namespace {

using bounded::eprod;
using bounded::gamma;

// bench's 3-layer network: kBenchI-256-128-kBenchO (784-256-128-10, the model trainer's fc3 net).
constexpr unsigned kFc3BenchH1 = 256, kFc3BenchH2 = 128;

// cvt.rna.tf32.f32 on a finite float: half of the 13 dropped bits added to the magnitude, then
// cleared (nearest, ties away from zero); the result is within 2^-11 of its input (kTf32Half).
float tf32(float x) { return std::bit_cast<float>((std::bit_cast<uint32_t>(x) + 0x1000u) & 0xffffe000u); }
constexpr double kTf32Half = 0x1p-11;
// The tensor core's reading of FP32 bits as a TF32: the 13 low mantissa bits ignored, a truncation
// toward zero within 2^-10 of the input (kTruncErr). tools/dev/tf32_probe.cu: on an H100 the mma
// gave the same accumulators from the raw bits as from bits & 0xffffe000 in 2^27 of 2^27.
float trunc_tf32(float x) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffffe000u); }
std::vector<float> trunc_all(std::vector<float> v) {
    for (float& x : v) x = trunc_tf32(x);
    return v;
}
constexpr double kTruncErr = 0x1p-10;
// x rounded to a float toward +inf (up) or -inf.
float float_toward(double x, bool up) {
    const float f = float(x);
    if (up ? double(f) < x : double(f) > x) return std::nextafter(f, up ? INFINITY : -INFINITY);
    return f;
}

// A hidden unit's mask in the kernel: surely off (z + bound <= 0: the kernel's max gives exactly
// 0), surely on, or at the ReLU kink (either).
enum Mask : char { kOff, kOn, kKink };
Mask mask_of(double z, double ez) { return z + ez <= 0.0 ? kOff : (z - ez > 0.0 ? kOn : kKink); }

// The sizes and the accumulation bounds of the kernel's chains (the header's table).
struct Fc3Dims {
    unsigned I, H1, H2, O, T2;
    double acc1, acc2, acc_y, acc_d1;
    explicit Fc3Dims(const NetParams& n)
        : I(n.sizes[0]), H1(n.sizes[1]), H2(n.sizes[2]), O(n.sizes[3]), T2((H2 + 15) / 16) {
        const unsigned tile = std::min(H2, 16u), mma1 = ((std::min(I, 196u) + 7) / 8 + 1) / 2;
        acc1 = gamma(32 * mma1 + 5);                            // the longer chain of E and O, then 5 adds
        acc2 = gamma(32 * ((std::min(H1, 64u) + 7) / 8) + 4);  // a rank's chain, 3 rank joins, the bias
        acc_y = gamma(tile + T2);                                // a tile's fma chain, the tile joins, the bias
        acc_d1 = gamma(32 * ((tile + 7) / 8) + T2 - 1);          // a tile's two mma, the tile joins
    }
};

// One step's values by sample ([B][width] each) and the scratch of one sample.
struct Fc3Rows {
    Bounded A1, A2, Y, D3, D2, D1;
};
struct Fc3Scratch {
    std::vector<char> m1, m2;            // the masks of A1 and A2 (Mask)
    std::vector<double> a1t, eta;        // fc2's TF32 input tf32(A1): the middle of its range, its half width
    std::vector<double> xi, C;           // z2's own rounding; C [O][H1]
    std::vector<double> acc2d, rho, th;  // D2's own rounding; its TF32 rounding; its TF32 input error
};

// Sample s's forward pass. z1 from the TF32 inputs themselves (X and W1 are exact: w1t, xt), so only
// the chain's additions err; A1 enters fc2 as tf32(A1), within eta of the middle a1t of its range
// (the roundings of A1's extremes); z2 = b2 + w2t a1t
// within its inputs' propagated error plus its own rounding xi. Y's error is linear in the sources
// until a kink: sum_h C[o][h] eps_h, C = W3 diag(on) w2t, plus the units on's xi, the kink units'
// whole bound and Y's own rounding.
void fc3_forward(const NetParams& n, const Fc3Dims& d, const float* w1t, const float* w2t, const float* xt, size_t s,
                 Fc3Rows& r, Fc3Scratch& w) {
    const unsigned I = d.I, H1 = d.H1, H2 = d.H2, O = d.O;
    for (unsigned h = 0; h < H1; ++h) {
        double z = n.b[0][h], mag = std::fabs(z);
        for (unsigned i = 0; i < I; ++i) {
            const double p = double(xt[i]) * w1t[size_t(h) * I + i];  // exact
            z += p;
            mag += std::fabs(p);
        }
        const double ez = d.acc1 * mag;
        w.m1[h] = mask_of(z, ez);
        const double a = std::max(z, 0.0), ea = w.m1[h] == kOff ? 0.0 : ez;
        r.A1.v[s * H1 + h] = a, r.A1.e[s * H1 + h] = ea;
        // tf32 is monotone: tf32(A1) lies between the roundings of A1's extremes (A1 >= 0).
        const double lo = tf32(float_toward(std::max(a - ea, 0.0), false)), hi = tf32(float_toward(a + ea, true));
        w.a1t[h] = 0.5 * (lo + hi), w.eta[h] = 0.5 * (hi - lo);
    }
    std::fill(w.C.begin(), w.C.end(), 0.0);
    for (unsigned g = 0; g < H2; ++g) {
        const float* wg = w2t + size_t(g) * H1;
        double z = n.b[1][g], mag = std::fabs(z), prop = 0.0;
        for (unsigned h = 0; h < H1; ++h) {
            const double a = w.a1t[h], aw = std::fabs(double(wg[h]));
            z += wg[h] * a;
            mag += aw * (a + w.eta[h]);
            prop += aw * w.eta[h];
        }
        w.xi[g] = d.acc2 * mag;
        const double ez = prop + w.xi[g];
        w.m2[g] = mask_of(z, ez);
        r.A2.v[s * H2 + g] = std::max(z, 0.0), r.A2.e[s * H2 + g] = w.m2[g] == kOff ? 0.0 : ez;
        if (w.m2[g] == kOn)
            for (unsigned o = 0; o < O; ++o)
                for (unsigned h = 0; h < H1; ++h) w.C[size_t(o) * H1 + h] += double(n.W[2][size_t(o) * H2 + g]) * wg[h];
    }
    for (unsigned o = 0; o < O; ++o) {
        double y = n.b[2][o], mag = std::fabs(y), e = 0.0;
        for (unsigned g = 0; g < H2; ++g) {
            const double w3 = std::fabs(double(n.W[2][size_t(o) * H2 + g])), a = r.A2.v[s * H2 + g];
            y += n.W[2][size_t(o) * H2 + g] * a;
            mag += w3 * (a + r.A2.e[s * H2 + g]);
            e += w3 * (w.m2[g] == kOn ? w.xi[g] : r.A2.e[s * H2 + g]);
        }
        for (unsigned h = 0; h < H1; ++h) e += std::fabs(w.C[size_t(o) * H1 + h]) * w.eta[h];
        r.Y.v[s * O + o] = y, r.Y.e[s * O + o] = e + d.acc_y * mag;
    }
}

// Sample s's deltas. D3 by ref_output_delta; D2 = D3 W3 on A2's mask (fma.rn chain over O); D1 =
// trunc(D2) w2t on A1's mask, its error linear in D3's through C where D2's units are on, plus their
// own roundings, the kink units' whole bound and D1's chains. A unit at a kink may take either mask:
// its delta carries |sum| + its bound (0 or the sum), finite, so that the gradients stay compared.
void fc3_backward(const NetParams& n, const Fc3Dims& d, const float* w2t, const float* t, unsigned loss, size_t s,
                  Fc3Rows& r, Fc3Scratch& w) {
    const unsigned H1 = d.H1, H2 = d.H2, O = d.O;
    double *d3 = &r.D3.v[s * O], *e3 = &r.D3.e[s * O];
    ref_output_delta(loss, &r.Y.v[s * O], &r.Y.e[s * O], t, O, d3, e3);
    auto masked = [](Mask m, double on, double sum, double esum, double& v, double& e) {
        v = m == kOff || !(on > 0.0) ? 0.0 : sum;
        e = m == kKink ? std::fabs(sum) + esum : (m == kOn ? esum : 0.0);
    };
    for (unsigned g = 0; g < H2; ++g) {
        double sum = 0.0, mag = 0.0, prop = 0.0;
        for (unsigned o = 0; o < O; ++o) {
            const double w3 = n.W[2][size_t(o) * H2 + g];
            sum += d3[o] * w3;
            mag += std::fabs(w3) * (std::fabs(d3[o]) + e3[o]);
            prop += std::fabs(w3) * e3[o];
        }
        w.acc2d[g] = gamma(O) * mag;
        double& v = r.D2.v[s * H2 + g];
        double& e = r.D2.e[s * H2 + g];
        masked(Mask(w.m2[g]), r.A2.v[s * H2 + g], sum, prop + w.acc2d[g], v, e);
        w.rho[g] = kTruncErr * (std::fabs(v) + e);
        w.th[g] = e + w.rho[g];
    }
    for (unsigned h = 0; h < H1; ++h) {
        double sum = 0.0, mag = 0.0, e = 0.0;
        for (unsigned g = 0; g < H2; ++g) {
            const double w2 = w2t[size_t(g) * H1 + h], dg = r.D2.v[s * H2 + g];
            sum += w2 * dg;
            mag += std::fabs(w2) * (std::fabs(dg) + w.th[g]);
            e += std::fabs(w2) * (w.m2[g] == kOn ? w.acc2d[g] + w.rho[g] : w.th[g]);
        }
        for (unsigned o = 0; o < O; ++o) e += std::fabs(w.C[size_t(o) * H1 + h]) * e3[o];
        masked(Mask(w.m1[h]), r.A1.v[s * H1 + h], sum, e + d.acc_d1 * mag, r.D1.v[s * H1 + h], r.D1.e[s * H1 + h]);
    }
}

// Appends [rows][cols] = scale sum_{s<B} L[s][row] R[s][col] (R null: a bias sum, R = 1) to out,
// the sum within rel of its magnitude, then mul.rn by scale (one rounding more).
void layer_grads(const Bounded& L, unsigned rows, const Bounded* R, unsigned cols, unsigned B, float scale,
                 double rel, Bounded& out) {
    const size_t base = out.v.size();
    out.v.resize(base + size_t(rows) * cols);
    out.e.resize(base + size_t(rows) * cols);
    const double sc = scale;
    for_rows(rows, double(B) * cols, [&](size_t r0, size_t r1) {
        for (size_t row = r0; row < r1; ++row)
            for (unsigned col = 0; col < cols; ++col) {
                double sum = 0.0, mag = 0.0, prop = 0.0;
                for (unsigned s = 0; s < B; ++s) {
                    const double l = L.v[size_t(s) * rows + row], el = L.e[size_t(s) * rows + row];
                    const double r = R ? R->v[size_t(s) * cols + col] : 1.0, er = R ? R->e[size_t(s) * cols + col] : 0.0;
                    sum += l * r;
                    mag += eprod(std::fabs(l) + el, std::fabs(r) + er);
                    prop += eprod(std::fabs(l), er) + eprod(std::fabs(r), el) + eprod(el, er);
                }
                const double esum = rel * mag + prop, v = sc * sum, ev = std::fabs(sc) * esum;
                out.v[base + row * cols + col] = v;
                out.e[base + row * cols + col] = ev + bounded::kU * (std::fabs(v) + ev);
            }
    });
}

void validate_fc3_step(const VerifyCase& c) {
    validate_named_shape(c);
    const auto& z = c.shape;
    if (std::string why = fc3_step_unfit(z[0], z[1], z[2], z[3], z[4]); !why.empty())
        PTXLAB_THROW(InputError, "kernel 'fc3_step': {}", why);
}

// The parts of the flat parameters (W1, b1, W2, b2, W3, b3: the model trainer's layout) and of a
// state array ("M(fc1.weight)", ...).
std::vector<Tensor::Part> fc3_parts(unsigned I, unsigned H1, unsigned H2, unsigned O, const char* state) {
    const unsigned w[] = {I, H1, H2, O};
    std::vector<Tensor::Part> parts;
    size_t off = 0;
    for (unsigned l = 0; l < 3; ++l) {
        for (bool bias : {false, true}) {
            std::string name = fmt::format("fc{}.{}", l + 1, bias ? "bias" : "weight");
            if (state) name = fmt::format("{}({})", state, name);
            parts.push_back({name, off, bias ? std::vector<size_t>{w[l + 1]} : std::vector<size_t>{w[l + 1], w[l]}});
            off += bias ? w[l + 1] : size_t(w[l + 1]) * w[l];
        }
    }
    return parts;
}

// The step records of a case: a random lr and step count t; SGD's two steps run the first at lr = 0
// (the header).
std::vector<StepHyper> fc3_records(const OptimConfig& o, unsigned steps, Rng& rng) {
    const double lr = rng.uniform(0.01f, 0.5f);
    const uint64_t t = 1 + rng.below(1000);
    std::vector<StepHyper> hy;
    for (unsigned j = 0; j < steps; ++j) hy.push_back(step_hyper(o, j + 1 < steps ? 0.0 : lr, t + j));
    return hy;
}

Harness make_fc3_step(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], I = c.shape[1], H1 = c.shape[2], H2 = c.shape[3], O = c.shape[4];
    const unsigned loss = c.shape[5];
    const OptimConfig o = random_optim(static_cast<OptimKind>(c.shape[6]), loss, rng);
    const unsigned steps = o.kind == OptimKind::Sgd ? 2 : 1;
    const std::vector<StepHyper> hy = fc3_records(o, steps, rng);
    std::vector<float> hyp;
    for (const StepHyper& r : hy) hyp.insert(hyp.end(), {r.lr, r.step_size, r.bc2_sqrt, r.decay});
    const float scale = grad_scale(loss == kLossSoftmax ? Loss::Ce : Loss::Mse, B, O);
    const NetParams net = random_net(rng, {I, H1, H2, O});
    const std::vector<float> X = random_vector(rng, size_t(steps) * B * I, 0.0f, 1.0f);
    std::vector<float> T;
    for (unsigned j = 0; j < steps; ++j) {
        const std::vector<float> tj = random_targets(rng, B, O);
        T.insert(T.end(), tj.begin(), tj.end());
    }
    // Every step starts from the parameters of the net (SGD's first step leaves them as they were).
    Bounded Y, G;
    for (unsigned j = 0; j < steps; ++j) {
        Fc3Ref r = ref_fc3_step(net, X.data() + size_t(j) * B * I, T.data() + size_t(j) * B * O, B, loss, scale);
        Y.v.insert(Y.v.end(), r.Y.v.begin(), r.Y.v.end());
        Y.e.insert(Y.e.end(), r.Y.e.begin(), r.Y.e.end());
        G = std::move(r.G);
    }
    std::vector<float> P;
    for (unsigned l = 0; l < 3; ++l) {
        P.insert(P.end(), net.W[l].begin(), net.W[l].end());
        P.insert(P.end(), net.b[l].begin(), net.b[l].end());
    }
    const size_t N = P.size();
    const bool use_m = optim_uses_m(o.kind), use_v = optim_uses_v(o.kind);
    std::vector<float> M = use_m ? random_vector(rng, N, -0.5f, 0.5f) : std::vector<float>{};
    std::vector<float> V = use_v ? random_vector(rng, N, 0.0f, 0.5f) : std::vector<float>{};
    RefOptim after = ref_optim_bounded(o, hy.back(), P, G, M, V);

    Harness h;
    h.expected = {{"Y", std::move(Y)}, {"P", std::move(after.P)}};
    // The outputs in data-flow order (verify lists mismatches in this order): Y, then the
    // parameters and their state.
    h.tensors = {{"X", {steps, B, I}, Role::In, X},
                 {"T", {steps, B, O}, Role::In, T},
                 {"Y", {steps, B, O}, Role::Out, {}},
                 {"P", {N}, Role::InOut, std::move(P)},
                 {"hyp", {steps, 4}, Role::In, hyp},
                 {"work", {kFc3StepWorkBytes / 4}, Role::In, std::vector<float>(kFc3StepWorkBytes / 4, 0.0f)}};
    h.tensors[3].parts = fc3_parts(I, H1, H2, O, nullptr);
    if (use_m) {
        h.expected["M"] = std::move(after.M);
        h.tensors.push_back({"M", {N}, Role::InOut, std::move(M)});
        h.tensors.back().parts = fc3_parts(I, H1, H2, O, "M");
    }
    if (use_v) {
        h.expected["V"] = std::move(after.V);
        h.tensors.push_back({"V", {N}, Role::InOut, std::move(V)});
        h.tensors.back().parts = fc3_parts(I, H1, H2, O, "V");
    }
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        Fc3StepArgs a;
        a.X = ptr(m, "X"), a.T = ptr(m, "T"), a.P = ptr(m, "P"), a.Y = ptr(m, "Y");
        a.M = use_m ? ptr(m, "M") : 0;
        a.V = use_v ? ptr(m, "V") : 0;
        a.hyp = ptr(m, "hyp"), a.work = ptr(m, "work");
        a.B = B, a.I = I, a.H1 = H1, a.H2 = H2, a.O = O, a.steps = steps;
        a.loss = loss, a.scale = scale, a.optim = o;
        launch_fc3_step(k, a, s);
    };
    return h;
}

// The MNIST network 784-256-128-10 with CE and Nesterov (the default recipe), Adam, and MSE with
// plain SGD (two steps: the header); a batch of 1; odd sizes (I = 300: ranks of 196 and 104
// columns and two with none; H1 = 72: a part-empty H1 tile and ranks with 64, 8, 0, 0 columns of
// H1; H2 = 40: three H2 tiles, the last part-empty; O = 7) with RMSprop, and with CE and SGD's two
// steps at I = 100, H1 = 40, H2 = 20; 5 x 13 x 9 x 3 x 3 (one rank with columns) with AdamW; the
// limits (O = 16) with momentum; H1 = 16 (one H1 tile: 7 of the 8 clusters have only an H2 tile)
// and H2 = 16 (one H2 tile: 15 of the 16 clusters have only an H1 tile) with NAdam; 1 x 1 x 1 x 1 x 1.
std::vector<VerifyCase> fc3step_default_cases() {
    std::vector<VerifyCase> v;
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 256, 128, 10, 1, 2}, {64, 784, 256, 128, 10, 1, 3}, {64, 784, 256, 128, 10, 0, 0},
             {1, 784, 256, 128, 10, 1, 2}, {37, 300, 72, 40, 7, 1, 5}, {9, 100, 40, 20, 5, 1, 0},
             {5, 13, 9, 3, 3, 0, 4}, {64, 784, 256, 128, 16, 1, 1}, {64, 784, 16, 128, 10, 1, 2},
             {64, 784, 256, 16, 10, 1, 6}, {1, 1, 1, 1, 1, 1, 2}})
        v.push_back({"fc3_step", s});
    return v;
}

std::vector<VerifyCase> fc3step_quick_cases() { return {{"fc3_step", {37, 300, 72, 40, 7, 1, 5}}}; }

// bench: the default recipe's step (cross-entropy, Nesterov) on 784-256-128-10 at batches up to 64.
BenchShape fc3step_bench_shape(unsigned B) {
    if (!fc3_step_unfit(B, kBenchI, kFc3BenchH1, kFc3BenchH2, kBenchO).empty()) return std::nullopt;
    return std::vector<unsigned>{B,      kBenchI,      kFc3BenchH1, kFc3BenchH2,
                                 kBenchO, kLossSoftmax, optim_code(OptimKind::Nesterov)};
}

// Reads X, T, the parameters and m, writes Y, the parameters and m (Nesterov); the three layers'
// forward products, two delta products and three weight-gradient products, the bias sums and the
// optimizer's 7 flops a parameter.
std::pair<double, double> fc3step_work(const VerifyCase& c) {
    const double B = c.shape[0], I = c.shape[1], H1 = c.shape[2], H2 = c.shape[3], O = c.shape[4];
    const double params = H1 * I + H1 + H2 * H1 + H2 + O * H2 + O;
    const double fwd = I * H1 + H1 * H2 + H2 * O;
    return {4 * (B * I + 2 * B * O + 4 * params), 2 * B * (2 * fwd + H1 * H2 + H2 * O) + B * (H1 + H2 + O) + 7 * params};
}

}  // namespace

Fc3Ref ref_fc3_step(const NetParams& net, const float* X, const float* T, unsigned B, unsigned loss, float scale) {
    const Fc3Dims d(net);
    const unsigned I = d.I, H1 = d.H1, H2 = d.H2, O = d.O;
    // The TF32 inputs the kernel's products take from exact floats: X, W1, W2, truncated.
    Bounded xt;
    xt.resize(size_t(B) * I);
    for (size_t i = 0; i < xt.size(); ++i) xt.v[i] = trunc_tf32(X[i]);
    const std::vector<float> xf(xt.v.begin(), xt.v.end()), w1t = trunc_all(net.W[0]), w2t = trunc_all(net.W[1]);
    Fc3Rows r;
    r.A1.resize(size_t(B) * H1), r.D1.resize(size_t(B) * H1);
    r.A2.resize(size_t(B) * H2), r.D2.resize(size_t(B) * H2);
    r.Y.resize(size_t(B) * O), r.D3.resize(size_t(B) * O);
    for_rows(B, double(H1) * (I + 2.0 * H2 * (O + 1)), [&](size_t s0, size_t s1) {  // the samples: independent rows
        Fc3Scratch w{std::vector<char>(H1),   std::vector<char>(H2),  std::vector<double>(H1),
                     std::vector<double>(H1), std::vector<double>(H2), std::vector<double>(size_t(O) * H1),
                     std::vector<double>(H2), std::vector<double>(H2), std::vector<double>(H2)};
        for (size_t s = s0; s < s1; ++s) {
            fc3_forward(net, d, w1t.data(), w2t.data(), xf.data() + s * I, s, r, w);
            fc3_backward(net, d, w2t.data(), T + s * O, loss, s, r, w);
        }
    });
    // The gradients: fc1's products take trunc(D1) and the exact trunc(X) (one truncation,
    // kTruncErr), fc2's trunc(D2) and tf32(A1) ((1 + 2^-10)(1 + 2^-11) - 1); an mma chain over the
    // sample steps either way.
    Fc3Ref out;
    out.Y = std::move(r.Y);
    const double chain = gamma(32 * ((B + 7) / 8)), g = gamma(B);
    const double p2 = kTruncErr + kTf32Half + kTruncErr * kTf32Half;
    layer_grads(r.D1, H1, &xt, I, B, scale, kTruncErr + chain * (1.0 + kTruncErr), out.G);
    layer_grads(r.D1, H1, nullptr, 1, B, scale, g, out.G);
    layer_grads(r.D2, H2, &r.A1, H1, B, scale, p2 + chain * (1.0 + p2), out.G);
    layer_grads(r.D2, H2, nullptr, 1, B, scale, g, out.G);
    layer_grads(r.D3, O, &r.A2, H2, B, scale, g, out.G);
    layer_grads(r.D3, O, nullptr, 1, B, scale, g, out.G);
    return out;
}

const KernelFamily& fc3step_family() {
    static const KernelFamily f{
        "fc3step",
        {"fc3step"},
        {{.entry = "fc3_step",
          .shape = "B,I,H1,H2,O,loss,optim",
          .validate = validate_fc3_step,
          .harness = make_fc3_step,
          .bench_shape = fc3step_bench_shape,
          .work = fc3step_work}},
        fc3step_default_cases,
        fc3step_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{fc3step_family, 105, 75};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
