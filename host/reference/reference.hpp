// The float64 CPU reference: what every kernel must compute, with error bounds.
//
// Each reference value comes with an a-priori bound on how far a correct
// float32 computation (fma.rn dot products in index order, .rn elsewhere) may
// be from it: for a dot product of n terms computed with n roundings, Higham's
//     |fl(z) - z| <= gamma_n * (|b| + sum |w_i a_i|),   gamma_n = n u / (1 - n u),  u = 2^-24,
// plus the propagated input errors sum |w_i| E(a_i); one rounding (u |x|) for a
// subtraction, product or division. A unit whose pre-activation lies within
// its bound of the ReLU kink may legitimately go either way; everything that
// depends on that unit's mask gets an infinite bound and is not compared.
//
// The hidden activations (code `act`, recipe.hpp kActRelu..kActGelu) other than ReLU: the
// float64 reference is recipe.hpp's activate / activate_grad (the exact functions: tanh,
// 1/(1+e^-x), x Phi(x) with erf); the bound of the kernel's a = f(z-hat) is
//     L |z-hat - z| + (evaluation error of the kernel's sequence at z-hat),
// L the largest |f'| (leaky-relu and tanh 1, sigmoid 1/4, GELU 1.13), and for the derivatives
// from a (tanh 1 - a^2, sigmoid a (1 - a)) the propagated error of a plus their roundings, for
// GELU's from z 0.8 |z-hat - z| (the largest |f''|) plus its evaluation error. The
// evaluation errors (act_bounded in reference.cpp, term by term): ex2.approx within 2.5 ulp
// of 2^w (relative 6u, see below) and the exponent's roundings and constant (relative error
// theta <= 3u of w, so a relative exp(|w| ln2 theta) - 1 of 2^w); one u per .rn rounding;
// 0.5 u for each constant rounded to float; for GELU, Abramowitz & Stegun 26.2.17's own
// error (|Phi error| < 7.5e-8) plus Horner's gamma_10 over sum |b_i| t^i and t's 3 u over
// sum i |b_i| t^i. Leaky-relu has a kink at 0 like ReLU: a unit within its bound of 0 makes
// the deltas below it not comparable.
//
// The softmax cross-entropy delta (loss code 1): d_o = softmax(y)_o - t_o, computed by the
// kernels as (recipe's sequence, see grad.ptx / fused.ptx)
//     m = max_o y_o;  z_o = fl(fl(y_o - m) * L);  e_o = ex2.approx(z_o);
//     S = sum_o e_o (add.rn from +0, o in order);  d_o = fl(fl(e_o / S) - t_o),
// with L = 0f3FB8AA3B, log2(e) rounded to float. The float64 reference is p_o = softmax(y*)_o
// of the float64 logits y*; the kernel's logits y-hat carry the bound ey_o of the layer
// before (|y-hat_o - y*_o| <= ey_o), E = max_o ey_o. The bound, term by term:
//   1. Input error. softmax(y-hat)_o / softmax(y*)_o = exp(D_o) / sum_k p_k exp(D_k) with
//      D = y-hat - y*, so it lies within exp(+-(ey_o + E)) (log-softmax is 2-Lipschitz in the
//      max norm): |softmax(y-hat)_o - p_o| <= p_o phi_o, phi_o = expm1(ey_o + E). Both
//      softmaxes sum to 1, so that change is also at most sum_{k != o} p_k phi_k, which is
//      much smaller for a dominant output (p_o near 1); the bound takes the smaller, in_o.
//   2. The exponent. z_o = (y-hat_o - m)(log2 e)(1 + th), |th| <= (1 + u)^2 (1 + |L - log2 e| /
//      log2 e) - 1 (two roundings and L's own error, 0.22 u), so 2^z_o = exp(y-hat_o - m)
//      exp(-a_o th'), |th'| <= th, with a_o = m - y-hat_o <= (M* - y*_o) + E + ey_o.
//   3. ex2.approx. The PTX ISA states at most 2 ulp from the correctly rounded result, so
//      within 2.5 ulp of 2^z: relative 6u for a normal result (see reference.cpp), plus
//      2.5 * 2^-149 absolute for a subnormal one. Together with 2: e_o = exp(y-hat_o - m)
//      (1 + r_o), |r_o| <= rho_o = (1 + 6u) exp(a_o th) - 1.
//   4. The sum. All terms are >= 0 and the largest is exactly 1 (ex2(+0) = 1), so the exact
//      sum s of the e_o is >= 1; recursive summation gives S = s (1 + g), |g| <= gamma_O;
//      and s = s0 (1 + rbar), s0 = sum_o exp(y-hat_o - m), with rbar <= sum_o q_o rho_o +
//      O 2.5 * 2^-149, q_o = softmax(y-hat)_o <= p_o (1 + phi_o).
//   5. The quotient, one rounding: e_o / S = softmax(y-hat)_o (1 + rel_o),
//      |rel_o| <= (1 + rho_o)(1 + u) / ((1 - rbar)(1 - gamma_O)) - 1.
//   So |fl(e_o / S) - p_o| <= in_o + (p_o + in_o) rel_o + 2 * 2.5 * 2^-149 + 2^-149
//   (subnormal ex2 results and a subnormal quotient), and the subtraction of t_o adds one
//   rounding: u (|d_o| + that bound). For exact logits spread over 16 (O = 10) the rounding
//   part is below 64 u p_o (tests/cpu/reference/test_reference.cpp checks it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ptxlab {

// Values and their absolute error bounds (infinite = not comparable).
struct Bounded {
    std::vector<double> v, e;
    void resize(size_t n) {
        v.assign(n, 0.0);
        e.assign(n, 0.0);
    }
    size_t size() const { return v.size(); }
};

// A network's parameters: sizes {I, H..., O}; W[l] is [sizes[l+1]][sizes[l]], b[l] is [sizes[l+1]].
struct NetParams {
    std::vector<unsigned> sizes;
    std::vector<std::vector<float>> W, b;
    size_t layers() const { return sizes.size() - 1; }
};

// Forward pass of B samples: acts[l] is the output of layer l ([B][sizes[l+1]]);
// the last one is Y.
struct RefForward {
    std::vector<Bounded> acts;
};
// act: the hidden activation's code (recipe.hpp), 0 ReLU.
RefForward ref_forward(const NetParams& net, const std::vector<float>& X, unsigned B, unsigned act = 0);

// One activation as the kernels compute it: a = f(z) for the float64 pre-activation z whose
// kernel value is within ez of it, with the bound ea of the kernel's a; kink: the sign of z is
// uncertain where f' jumps (ReLU, leaky-relu). And the derivative g = f'(z) the kernels
// compute from a (within ea of f(z)) or, for GELU, from z, with its bound eg.
struct ActBound {
    double a, ea;
    bool kink;
};
ActBound act_bounded(unsigned act, double z, double ez);
void act_grad_bounded(unsigned act, double z, double ez, double a, double ea, double& g, double& eg);
// act.ptx's two passes on exact float inputs (ref_act.cpp): A = f(Z) (act_bounded's bound) and
// G = dA * f'(.) from the float A (codes 0..3; ReLU a select, exact) or Z (GELU), one rounding
// of the product besides act_grad_bounded's bound of f'.
Bounded ref_act_fwd(const std::vector<float>& Z, unsigned act);
Bounded ref_act_bwd(const std::vector<float>& dA, const std::vector<float>& A, const std::vector<float>& Z,
                    unsigned act);

// The output-delta codes of the kernels' `loss` parameter, defined here once (recipe.hpp,
// which includes this header, maps a --loss to one: loss_code).
inline constexpr unsigned kLossDiff = 0;     // d = y - t
inline constexpr unsigned kLossSoftmax = 1;  // d = softmax(y) - t (max-subtracted, ex2.approx)

// The output delta of one sample with O outputs from its bounded float64 logits y (error
// bounds ey): d = y - t (one rounding) for code 0; softmax(y) - t for code 1, bounded as in
// the header comment above. Any other code is taken as 0, as the kernels do.
void ref_output_delta(unsigned loss, const double* y, const double* ey, const float* t, unsigned O, double* d,
                      double* ed);

// Per-sample gradients: gW[l] is [B][sizes[l+1]][sizes[l]], gb[l] is [B][sizes[l+1]]; the
// output delta (gb of the last layer) by the loss code; the gradients below follow from
// its bound through the same product and back-propagation bounds as for code 0.
struct RefGrad {
    RefForward fwd;
    std::vector<Bounded> gW, gb;
};
RefGrad ref_grad(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, unsigned B,
                 unsigned loss, unsigned act = 0);

// The mean gradient (batch_mean) and the optimizer kernels: ref_optim.hpp.

// ---- The fused set (fused.ptx). Its sums run in another order than index order,
// so each bound takes the sum's length plus the extra roundings of that order. ----

// A = f(X W^T + b): [B][H] for the activation code act; Z (when given) the pre-activations;
// bound gamma_{I+10} of Z (see the summation order in fused.ptx), then the activation's.
Bounded ref_fused_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                          unsigned B, unsigned I, unsigned H, unsigned act = 0, Bounded* Z = nullptr);

// Y = A W^T + b (bound gamma_{H+6}), D2 = the output delta of the loss code (Y - T or
// softmax(Y) - T), D1 = (D2 W) * [A > 0] (bound gamma_O over D2's bounds) for ReLU, or
// (D2 W) * f' for the activation code act, f' from the inputs A or (GELU) Z, taken as exact.
struct RefFusedOutput {
    Bounded Y, D2, D1;
};
RefFusedOutput ref_fused_output(const std::vector<float>& A, const std::vector<float>& W, const std::vector<float>& b,
                                const std::vector<float>& T, unsigned B, unsigned H, unsigned O, unsigned loss,
                                unsigned act = 0, const std::vector<float>* Z = nullptr);

// fused_grad: G[r][c] = scale * sum_s L[s][r] R[s][c] ([rows][cols]) and the bias gradient
// Gb[r] = scale * sum_s L[s][r]; bound gamma_{B+2} of the sum (four chains and two adds),
// scaled, plus one rounding for the product with the scale.
void ref_fused_grad(Bounded& G, Bounded& Gb, const std::vector<float>& L, const std::vector<float>& R, unsigned B,
                    unsigned rows, unsigned cols, float scale);

// The forward pass and mean gradient of one fused_step (step.ptx) on a 2-layer net: A, Y
// and G = mul.rn(sum, scale) of W1, b1, W2, b2 (the loss code's deltas; the kernel never
// stores G: ref_optim.hpp's ref_optim_bounded takes it on to the optimizer's step). Bounds:
// A gamma_{I+10}; Y gamma_{H+ceil(H/16)+1} (16-unit tile chains, then the tiles and the
// bias); D2 as ref_output_delta; D1 gamma_O; each gradient sum gamma_B over the propagated
// bounds of its factors, then one rounding for the scale. A gradient that depends on a
// hidden unit at the ReLU kink gets an infinite bound.
struct RefFusedStep {
    Bounded A, Y, GW1, Gb1, GW2, Gb2;
};
// act: the hidden activation's code (recipe.hpp act_code); D1 then takes f' from the bounded
// A (or, for GELU, Z) as fused_step computes them.
// tc_step (tcstep.hpp) takes its two large products on TF32 inputs: with tc, Z's sums carry
// the relative bound tc->z (tc.hpp's tc_sum_bound of the products, on top of FP32's
// gamma_{I+17}: 16 ranks joined, the bias) and W1's gradient sums tc->gw1 in place of
// gamma_B; Y's chains are 8 terms a rank, then the ranks and the bias (gamma_{H+ceil(H/8)+1}).
struct TcProducts {
    double z, gw1;
};
RefFusedStep ref_fused_step(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, unsigned B,
                            unsigned loss, float scale, unsigned act = 0, const TcProducts* tc = nullptr);

// dst[r][c] = src[idx[r]][c] (exact).
Bounded ref_gather(const std::vector<float>& src, const std::vector<uint32_t>& idx, unsigned cols);

// G[b][r][c] = D[b][r] * V[b][c] (one rounding: bound gamma_1).
Bounded ref_outer(const std::vector<float>& D, const std::vector<float>& V, unsigned B, unsigned R, unsigned C);

// Whether a float32 result is within the bound of a reference value.
bool within_bound(float got, double ref, double bound);

// ---- A plain float64 training loop (no bounds), the ground truth for the trainer ----

struct Net64 {
    std::vector<unsigned> sizes;
    std::vector<std::vector<double>> W, b;
};

// One SGD step on a batch: forward, MSE on one-hot targets (loss 0.5 |y - t|^2
// per sample, averaged over the batch), backward, P -= lr * mean gradient.
// Returns the batch loss before the step.
double cpu_train_step(Net64& net, const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B,
                      double lr);

// Outputs of the network for B samples ([B][O]).
std::vector<double> cpu_forward(const Net64& net, const std::vector<double>& X, unsigned B);

}  // namespace ptxlab
