// The training recipe: initialisation, loss, optimizer, learning-rate schedule and
// activation. Each is a named choice with one table row (its flag name, what it is, and
// the PyTorch equivalent), a float64 CPU reference, and the codes the kernels take.
//
// The kernels split the recipe in two places:
//   - the loss: the output-delta code (kLossDiff, kLossSoftmax) given to grad2/grad3 and
//     fused_output, and the scale that turns a batch sum of per-sample gradients into the
//     mean gradient (grad_scale), given to batch_mean and fused_grad;
//   - the optimizer: one entry of ptx/optim.ptx, which reads this step's StepHyper record
//     (learning rate and the bias corrections, from a per-epoch device table) and the
//     optimizer's constants (OptimConfig).
#pragma once

#include "model.hpp"
#include "reference.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ptxlab {

// ---- Initialisation -----------------------------------------------------------------
//   Torch      nn.Linear's default: weights AND biases ~ U(-1/sqrt(fan_in), +1/sqrt(fan_in))
//   HeUniform  weights ~ U(+-sqrt(6/fan_in)), zero biases
//   HeNormal   weights ~ N(0, 2/fan_in), zero biases
//   Xavier     weights ~ U(+-sqrt(6/(fan_in + fan_out))), zero biases
//   Notebook   weights and biases ~ N(0, 0.01^2)
class Rng;

enum class Init { Torch, HeUniform, HeNormal, Xavier, Notebook };
Init parse_init(const std::string& name);  // "torch" | "he-uniform" | "he-normal" | "xavier" | "notebook"
std::string to_string(Init i);
std::string describe(Init i);  // one line for the run's header, e.g. "U(+-1/sqrt(fan_in)) weights and biases (nn.Linear)"

// Initial parameters from the seeded PRNG (rng.hpp), layer by layer: weights row by row, then biases.
NetParams init_params(const std::vector<unsigned>& sizes, Init init, uint64_t seed);
// The same for any --model, in its flat layout (model.hpp), conv layers as nn.Conv2d: fan_in =
// in*k*k, fan_out = out*k*k (Torch: U(+-1/sqrt(fan_in)) weights and biases, nn.Conv2d's
// kaiming_uniform(a = sqrt(5)) default). One stream, layer by layer, weights then biases, so an
// fc-only model gets exactly init_params's numbers, flattened.
// Each layer as its row says (layers.cpp defines it: conv and fc draw, bn sets gamma 1, pool has none).
std::vector<float> init_model_params(const Model& m, Init init, uint64_t seed);
// One layer's weight W [nW] and bias b [nb] from the stream: the weights first, in their flat
// order, then the biases (only the inits that draw them; else 0). fan_in and fan_out as
// PyTorch's torch.nn.init computes them: nn.Linear in and out, nn.Conv2d in*k*k and out*k*k.
void init_layer_params(Rng& rng, Init init, double fan_in, double fan_out, float* W, size_t nW, float* b,
                       size_t nb);

// ---- Loss ----------------------------------------------------------------------------
//   Ce       softmax cross-entropy on the logits, mean over the batch (F.cross_entropy);
//            per-sample gradient softmax(y) - t
//   Mse      nn.MSELoss: mean over samples and outputs of (y - t)^2; gradient 2 (y - t) / O
//   HalfSse  the notebook's 0.5 |y - t|^2 per sample, averaged over the batch; gradient y - t
enum class Loss { Ce, Mse, HalfSse };
Loss parse_loss(const std::string& name);  // "ce" | "mse" | "half-sse"
std::string to_string(Loss l);

// The output-delta code a kernel takes (its `loss` parameter: kLossDiff, kLossSoftmax of
// reference.hpp):
unsigned loss_code(Loss l);                  // Ce -> kLossSoftmax, else kLossDiff
// The factor from the batch sum of per-sample deltas (code's d) to the mean gradient:
// 1/B for Ce and HalfSse, 2/(O B) for Mse (computed in double, rounded to float once).
float grad_scale(Loss l, unsigned B, unsigned O);

// Float64 reference, one sample of O outputs y against one-hot (or any) targets t:
double loss_value(Loss l, const double* y, const double* t, unsigned O);
// Ce: -sum t_i log softmax(y)_i, computed as sum t_i (lse(y) - y_i) with the max subtracted.
// dL/dy for one sample, without the batch mean: Ce softmax(y) - t (exact when sum t = 1, as
// for one-hot targets), Mse 2 (y - t) / O, HalfSse y - t.
void loss_grad(Loss l, const double* y, const double* t, unsigned O, double* dy);

// ---- Optimizer -----------------------------------------------------------------------
// PyTorch's update rules (torch.optim), dampening 0, not centered, no amsgrad:
//   Sgd       p -= lr (g + wd p)
//   Momentum  g' = g + wd p; m = mu m + g'; p -= lr m                      (SGD, momentum)
//   Nesterov  g' = g + wd p; m = mu m + g'; p -= lr (g' + mu m)            (SGD, nesterov=True)
//   Adam      g' = g + wd p; m = lerp(m, g', 1-b1); v = b2 v + (1-b2) g'^2;
//             p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
//   AdamW     as Adam with g' = g and p *= 1 - lr wd first (decoupled decay)
//   NAdam     g', m, v as Adam; mu_t = b1 (1 - 0.96^(0.004 t) / 2), Pi_t = mu_1 ... mu_t;
//             d = sqrt(v)/sqrt(1-b2^t) + eps; p -= lr (1-mu_t)/(1-Pi_t) g'/d + lr mu_t+1/(1-Pi_t+1) m/d
//             (torch.optim.NAdam: momentum_decay 0.004, decay coupled as Adam's)
//   RmsProp   g' = g + wd p; v = alpha v + (1-alpha) g'^2; p -= lr g' / (sqrt(v) + eps)
// State buffers start at zero, as in PyTorch. Each optimizer is one row of the optimizer table
// (optimizers.hpp, optimizers.cpp), which every function below reads: its name, state, flags,
// per-step constants, float64 rule and rounding bound, its kernel entry and flag.
//
// An optimizer's code is the index of its row in that table. The enumerators name the codes the
// host and the tests refer to by name; a new optimizer needs none (its row is its code, and
// parse_optimizer returns it), so adding one does not touch this file.
enum class OptimKind : unsigned { Sgd, Momentum, Nesterov, Adam, AdamW, RmsProp, NAdam };
// A row's name: "sgd" | "momentum" | "nesterov" | "adam" | "adamw" | "rmsprop" | "nadam" | ...
OptimKind parse_optimizer(const std::string& name);
std::string to_string(OptimKind k);
// The optimizer code the one-launch steps take (the `optim` parameter of fused_step, step.ptx,
// and tc_step, tcstep.ptx): 0 sgd, 1 momentum, 2 nesterov, 3 adam, 4 adamw, 5 rmsprop, 6 nadam
// (a new optimizer takes the next code: its row of the optimizer table, and optim.ptx's
// optimizer_update and optimizer_state). optim_code_count(): how many (the table's rows);
// optim_code_list(): "0 sgd, 1 momentum, ...".
inline unsigned optim_code(OptimKind k) { return static_cast<unsigned>(k); }
unsigned optim_code_count();
std::string optim_code_list();

// Which state buffers an optimizer keeps: m (Momentum, Nesterov, Adam, AdamW, NAdam), v (Adam,
// AdamW, NAdam, RmsProp).
bool optim_uses_m(OptimKind k);
bool optim_uses_v(OptimKind k);

struct OptimConfig {
    OptimKind kind = OptimKind::Nesterov;
    float momentum = 0.9f;       // Momentum, Nesterov
    float weight_decay = 0.0f;   // all (AdamW: decoupled)
    float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // Adam, AdamW (eps also RmsProp)
    float alpha = 0.99f;         // RmsProp
    // State buffers of the size of the parameters: 0 (Sgd), 1 (m or v), 2 (m and v).
    unsigned state_buffers() const;
    std::string describe() const;  // "nesterov (momentum 0.9)", "adam (betas 0.9, 0.999, eps 1e-08)", ...
    // Ranges: --momentum [0, 1) and > 0 for momentum and nesterov; --weight-decay >= 0;
    // --beta1, --beta2, --alpha [0, 1); --eps > 0.
    void validate() const;         // throws InputError naming the flag and the value
};

// The per-step values an optimizer kernel reads from the device table (four floats; see
// ptx/optim.ptx): lr; Adam's step size lr / (1 - b1^t) and sqrt(1 - b2^t); AdamW's decay
// factor 1 - lr wd. NAdam: lr (1 - mu_t) / (1 - Pi_t) in place of lr and lr mu_t+1 / (1 - Pi_t+1)
// in place of the step size. Computed in double from lr and the 1-based step t, each rounded once.
struct StepHyper {
    float lr, step_size, bc2_sqrt, decay;
};
StepHyper step_hyper(const OptimConfig& o, double lr, uint64_t t);

// One float64 optimizer step on n parameters, PyTorch's rules as above; m and v are the
// state buffers (unused ones may be null). t is the 1-based step.
void optim_step(const OptimConfig& o, double lr, uint64_t t, double* p, const double* g, double* m, double* v, size_t n);

// ---- Schedule ------------------------------------------------------------------------
// Step s (0-based) of S steps with peak learning rate `peak`. Every schedule first takes
// W = round(warmup * S) steps (halves away from zero, std::llround) of linear warm-up from 0
// (W = 0: none):
//   s < W     lr(s) = peak * s / W
// and then, for W <= s < S:
//   Const     peak
//   Cosine    peak * (1 + cos(pi (s - W) / (S - W))) / 2      (peak at s = W, towards 0 at S)
//   OneCycle  peak * (S - s) / (S - W)                         (linear decay; 0 would be at s = S;
//             the PyTorch recipe in ptx-notes.md: 20 % linear warm-up from 0, linear decay to 0)
//   Step      peak * gamma^floor(s / step_every)               (s counted from 0, warm-up included)
enum class ScheduleKind { Const, Cosine, OneCycle, Step };
ScheduleKind parse_schedule(const std::string& name);  // "const" | "cosine" | "onecycle" | "step"
std::string to_string(ScheduleKind k);

struct ScheduleConfig {
    ScheduleKind kind = ScheduleKind::OneCycle;
    double warmup = 0.2;        // fraction of the steps, in [0, 1) (--warmup)
    uint64_t step_every = 0;    // Step: steps between decays, >= 1 (--step-every)
    double gamma = 0.1;         // Step: the decay factor, in (0, 1] (--gamma)
    std::string describe() const;  // "onecycle (linear decay to 0), linear warm-up from 0 over 20% of the steps", ...
    void validate() const;         // throws InputError naming the flag and the value
};

// The learning rate of step s (0-based, s < S) of S steps, in double, as above.
double schedule_lr(const ScheduleConfig& c, double peak, uint64_t s, uint64_t S);

// ---- Activation (hidden layers) ------------------------------------------------------
enum class Activation { Relu, LeakyRelu, Tanh, Sigmoid, Gelu };
Activation parse_activation(const std::string& name);  // "relu" | "leaky-relu" | "tanh" | "sigmoid" | "gelu"
std::string to_string(Activation a);
double activate(Activation a, double x);        // LeakyRelu slope 0.01; Gelu the exact erf form
double activate_grad(Activation a, double x);   // d activate / dx at the pre-activation x

// The activation code a kernel takes (its `act` parameter: forward2/3, grad2/3,
// fused_forward, fused_output); the kernels take any other value as kActRelu.
inline constexpr unsigned kActRelu = 0;
inline constexpr unsigned kActLeakyRelu = 1;
inline constexpr unsigned kActTanh = 2;
inline constexpr unsigned kActSigmoid = 3;
inline constexpr unsigned kActGelu = 4;
unsigned act_code(Activation a);            // Relu 0, LeakyRelu 1, Tanh 2, Sigmoid 3, Gelu 4
Activation activation_of_code(unsigned c);  // the inverse; throws InputError for a code > 4
// The kernels' instruction sequences (PTX and twin issue exactly these; z is the float
// pre-activation, a = f(z) the float activation, L = 0f3FB8AA3B = log2(e) as a float,
// ex2 = ex2.approx.f32, not .ftz; the twins write exp2f, which NVRTC turns into that):
//   relu        a = max.f32(z, +0)
//               back: d = a > 0 ? sum : +0   (setp.gt + selp, or the sum skipped)
//   leaky-relu  a = z > 0 ? z : mul.rn(z, 0f3C23D70A)            (0.01 as a float)
//               back: d = mul.rn(sum, a > 0 ? 1 : 0f3C23D70A)
//   tanh        a = sub.rn(1, div.rn(2, add.rn(ex2(mul.rn(z, 0f4038AA3B)), 1)))   (2 L, exact)
//               (z > 44: ex2 = +inf, a = 1; z < -44: ex2 = 0, a = -1)
//               back: d = mul.rn(sum, fma.rn(-a, a, 1))
//   sigmoid     a = div.rn(1, add.rn(1, ex2(mul.rn(z, 0fBFB8AA3B))))         (-L)
//               back: d = mul.rn(sum, mul.rn(a, sub.rn(1, a)))
//   gelu        z Phi(z) with Phi by Abramowitz & Stegun 26.2.17 (|error| < 7.5e-8):
//                 E   = ex2(mul.rn(mul.rn(z, z), 0fBF38AA3B))           (e^(-z^2/2); -L/2)
//                 phi = mul.rn(E, 0f3ECC422A)                           (1/sqrt(2 pi))
//                 t   = div.rn(1, fma.rn(|z|, 0f3E6D3389, 1))          (p = 0.2316419)
//                 P   = b5; P = fma.rn(P, t, b) for b = b4, b3, b2, b1; P = mul.rn(P, t)
//                       (b1..b5 = 0f3EA385FA 0fBEB68F87 0f3FE40778 0fBFE91EEA 0f3FAA466F)
//                 Q   = mul.rn(phi, P)                                  (1 - Phi(|z|))
//                 Phi = z > 0 ? sub.rn(1, Q) : Q
//               a = mul.rn(z, Phi)
//               back: d = mul.rn(sum, fma.rn(z, phi, Phi)) from the pre-activation z, which the
//               forward pass leaves where the delta goes (grad.ptx: the gb row; fused_forward:
//               its Z output, which train points at D1, for fused_output to read)
// The float64 bounds of these (reference.cpp act_bounded, act_grad_bounded) cover ex2's 2 ulp,
// every rounding, the constants' float rounding and A&S's 7.5e-8.

// ---- A float64 training step with any recipe (the ground truth for the trainer) ----
struct Recipe {
    Loss loss = Loss::Ce;
    OptimConfig optim;
    Activation activation = Activation::Relu;
};
struct OptimState64 {
    std::vector<std::vector<double>> mW, mb, vW, vb;  // per layer, sized on first use
    uint64_t t = 0;                                   // steps taken
};
// Forward (the activation on every hidden layer, none on the output), loss (mean over the
// batch of loss_value against one-hot targets), backward (per-sample loss_grad / B, through
// activate_grad at the pre-activations, summed over the batch), then optim_step on every W
// and b with learning rate lr. The state is sized on first use and st.t is incremented
// before the step (the first step has t = 1). Returns the batch loss before the step.
double cpu_recipe_step(Net64& net, OptimState64& st, const Recipe& r, const std::vector<double>& X,
                       const std::vector<uint8_t>& labels, unsigned B, double lr);

}  // namespace ptxlab
