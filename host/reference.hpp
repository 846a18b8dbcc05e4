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
RefForward ref_forward(const NetParams& net, const std::vector<float>& X, unsigned B);

// Per-sample gradients: gW[l] is [B][sizes[l+1]][sizes[l]], gb[l] is [B][sizes[l+1]].
struct RefGrad {
    RefForward fwd;
    std::vector<Bounded> gW, gb;
};
RefGrad ref_grad(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, unsigned B);

// The mean gradient (batch_mean) and the optimizer kernels: ref_optim.hpp.

// ---- The fused set (fused.ptx). Its sums run in another order than index order,
// so each bound takes the sum's length plus the extra roundings of that order. ----

// A = relu(X W^T + b): [B][H]; bound gamma_{I+10} (see the summation order in fused.ptx).
Bounded ref_fused_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                          unsigned B, unsigned I, unsigned H);

// Y = A W^T + b (bound gamma_{H+6}), D2 = Y - T, D1 = (D2 W) * [A > 0] (bound gamma_O).
struct RefFusedOutput {
    Bounded Y, D2, D1;
};
RefFusedOutput ref_fused_output(const std::vector<float>& A, const std::vector<float>& W, const std::vector<float>& b,
                                const std::vector<float>& T, unsigned B, unsigned H, unsigned O);

// P[r][c] - lr (sum_s L[s][r] R[s][c]) / B and Pb[r] - lr (sum_s L[s][r]) / B; bound gamma_{B+2}.
void ref_fused_sgd(Bounded& P, Bounded& Pb, const std::vector<float>& P0, const std::vector<float>& Pb0,
                   const std::vector<float>& L, const std::vector<float>& R, unsigned B, unsigned rows, unsigned cols,
                   float lr);

// One whole step of fused_step (step.ptx) on a 2-layer net: A, Y, and the parameters after
// p -= lr * (batch gradient) / B (the kernel rounds lr/B once and applies fma(-(lr/B), sum, p):
// the same bound as rounding sum/B). Bounds: A gamma_{I+10}; Y gamma_{H+ceil(H/16)+1} (16-unit
// tile chains, then the tiles and the bias); D1 gamma_O; each gradient gamma_B over the
// propagated bounds of its factors. A parameter whose gradient depends on a hidden unit at
// the ReLU kink gets an infinite bound.
struct RefFusedStep {
    Bounded A, Y, W1, b1, W2, b2;
};
RefFusedStep ref_fused_step(const NetParams& net, const std::vector<float>& X, const std::vector<float>& T, unsigned B,
                            float lr);

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
