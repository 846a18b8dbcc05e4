// The float64 reference of the mean-gradient and optimizer kernels (ptx/mean.ptx,
// ptx/optim.ptx), with a-priori error bounds.
//
// Each reference value is the exact result of the kernel's formula on the same float32
// inputs (parameters, gradients, state, this step's record, the constants). Its bound
// follows the kernel's instruction sequence: every .rn operation (add, sub, mul, fma, and
// the correctly rounded div.rn and sqrt.rn) adds one rounding, u |x| with u = 2^-24, on
// top of the error its operands carry, propagated exactly:
//   a*b + c : |a| eb + |b| ea + ea eb + ec          a +- b : ea + eb
//   a / b   : (ea + |a/b| eb) / (|b| - eb)          (infinite when eb >= |b|)
//   sqrt(a) : min(sqrt(ea), ea / sqrt(a))
// so an operation with propagated error E gives E + u (|x| + E). Negation is exact.
#pragma once

#include "recipe.hpp"
#include "reference.hpp"

#include <vector>

namespace ptxlab {

// batch_mean: G[i] = (sum_{b<B} Gs[b][i]) * scale; bound gamma_{B-1} sum |Gs[b][i]| for the
// sum (add.rn from +0 in batch order: the first add is exact), then one rounding for the scale.
Bounded ref_batch_mean(const std::vector<float>& Gs, unsigned N, unsigned B, float scale);

// The outputs of one optimizer step: the parameters and the state buffers the optimizer
// writes (an unused buffer is left empty).
struct RefOptim {
    Bounded P, M, V;
};

// optim_sgd from P, G, M (empty when momentum == 0) and this step's record (uses h.lr).
RefOptim ref_optim_sgd(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& M,
                       const StepHyper& h, float momentum, float weight_decay, bool nesterov);
// optim_adam (rule 0 Adam, 1 AdamW, 2 NAdam) from P, G, M, V and this step's record (uses
// h.step_size, h.bc2_sqrt, h.decay; NAdam also h.lr).
RefOptim ref_optim_adam(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& M,
                        const std::vector<float>& V, const StepHyper& h, float beta1, float beta2, float eps,
                        float weight_decay, unsigned rule);
// optim_rmsprop from P, G, V and this step's record (uses h.lr).
RefOptim ref_optim_rmsprop(const std::vector<float>& P, const std::vector<float>& G, const std::vector<float>& V,
                           const StepHyper& h, float alpha, float eps, float weight_decay);

// The optimizer o's step (the rules of optim.ptx's optimizer_update, which fused_step and tc_step link)
// on every parameter P[i] with state M[i], V[i] (M or V empty when o keeps none; RMSprop's one
// buffer is V) from a gradient G known only to within its bound G.e (fused_step computes it
// in the kernel). The three kernels' references above are this with exact gradients.
RefOptim ref_optim_bounded(const OptimConfig& o, const StepHyper& h, const std::vector<float>& P, const Bounded& G,
                           const std::vector<float>& M, const std::vector<float>& V);

}  // namespace ptxlab
