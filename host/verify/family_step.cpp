// ptx/step.ptx: fused_step, a whole training step of the 2-layer MLP in one launch (forward,
// loss, backward and the optimizer, a grid barrier between the phases). Shape:
// B,I,H,O,loss,optim,act: the loss code, then the optimizer code (recipe.hpp optim_code: 0 sgd,
// 1 momentum, 2 nesterov, 3 adam, 4 adamw, 5 rmsprop, 6 nadam), then the activation code. Its
// harness serves tc_step too (family_tcstep.cpp).
#include "fused.hpp"
#include "optimizers.hpp"
#include "ref_optim.hpp"
#include "registry.hpp"
#include "tcstep.hpp"

#include <bit>

namespace ptxlab::verify_detail {

// The optimizer's constants, random in their ranges, with weight decay as the optimizer's row
// says (optimizers.hpp step_decay: momentum, adam, adamw and rmsprop with it, sgd and nesterov
// without, nadam with it for loss code 1 only: the default cases, which run every optimizer with
// both losses, take it both ways).
OptimConfig random_optim(OptimKind kind, unsigned loss, Rng& rng) {
    OptimConfig o;
    o.kind = kind;
    o.momentum = rng.uniform(0.5f, 0.99f);
    o.beta1 = rng.uniform(0.8f, 0.95f);
    o.beta2 = rng.uniform(0.9f, 0.9999f);
    o.eps = rng.uniform(1e-8f, 1e-6f);
    o.alpha = rng.uniform(0.9f, 0.999f);
    const StepCaseDecay decay = optimizer_row(kind).step_decay;
    const bool wd_on = decay == StepCaseDecay::On || (decay == StepCaseDecay::CeOnly && loss == kLossSoftmax);
    o.weight_decay = wd_on ? rng.uniform(1e-4f, 0.1f) : 0.0f;
    return o;
}

namespace {

// The parameters W1, b1, W2, b2 in one flat array P (the layout the kernel takes), the
// reference's gradient G in the same layout, and the parts' names and shapes.
void flatten(const NetParams& net, const RefFusedStep& r, unsigned I, unsigned H, unsigned O, std::vector<float>& P,
             Bounded& G, std::vector<Tensor::Part>& parts) {
    const Bounded* grads[] = {&r.GW1, &r.Gb1, &r.GW2, &r.Gb2};
    const std::vector<float>* params[] = {&net.W[0], &net.b[0], &net.W[1], &net.b[1]};
    const std::vector<std::vector<size_t>> dims = {{H, I}, {H}, {O, H}, {O}};
    for (int t = 0; t < 4; ++t) {
        parts.push_back({t % 2 ? fmt::format("b{}", t / 2 + 1) : fmt::format("W{}", t / 2 + 1), P.size(), dims[t]});
        P.insert(P.end(), params[t]->begin(), params[t]->end());
        G.v.insert(G.v.end(), grads[t]->v.begin(), grads[t]->v.end());
        G.e.insert(G.e.end(), grads[t]->e.begin(), grads[t]->e.end());
    }
}

// The parts of a state array (M, V): the parameters' parts, named "M(W1)" and so on.
std::vector<Tensor::Part> state_parts(std::vector<Tensor::Part> parts, const char* name) {
    for (auto& p : parts) p.name = fmt::format("{}({})", name, p.name);
    return parts;
}

}  // namespace

// fused_step: a random network, batch, optimizer state and step record; the parameters and
// the state each in one flat array (W1, b1, W2, b2: the layout the kernel takes). Yp
// (scratch) starts as poison, the grid barrier's 64-bit count as 0 (as train sets it). The
// optimizer's constants are random in their ranges (random_optim: which run with weight decay).
// tc_step (tcstep.hpp) takes the same harness with ReLU, TF32 bounds for its two products,
// and neither Yp, sync nor Z.
Harness make_step_harness(const VerifyCase& c, Rng& rng, bool tc) {
    const unsigned B = c.shape[0], I = c.shape[1], H = c.shape[2], O = c.shape[3], loss = c.shape[4];
    const unsigned act = tc ? kActRelu : c.shape[6];
    if (!tc && !fused_step_fits(I, O))
        PTXLAB_THROW(InputError, "fused_step takes I <= 800 and O <= 32, got I = {}, O = {}", I, O);
    const OptimConfig o = random_optim(static_cast<OptimKind>(c.shape[5]), loss, rng);
    const StepHyper hy = step_hyper(o, rng.uniform(0.01f, 0.5f), 1 + rng.below(1000));
    const float scale = grad_scale(loss == kLossSoftmax ? Loss::Ce : Loss::Mse, B, O);
    NetParams net = random_net(rng, {I, H, O});
    std::vector<float> X = random_vector(rng, size_t(B) * I, 0.0f, 1.0f);
    std::vector<float> T = random_targets(rng, B, O);
    const TcProducts products = tc_step_products(B, I);
    RefFusedStep r = ref_fused_step(net, X, T, B, loss, scale, act, tc ? &products : nullptr);

    // The flat arrays: parameters, their gradient (the reference's), the state.
    std::vector<float> P;
    Bounded G;
    std::vector<Tensor::Part> parts;
    flatten(net, r, I, H, O, P, G, parts);
    const size_t N = P.size();
    const bool use_m = optim_uses_m(o.kind), use_v = optim_uses_v(o.kind);
    std::vector<float> M = use_m ? random_vector(rng, N, -0.5f, 0.5f) : std::vector<float>{};
    std::vector<float> V = use_v ? random_vector(rng, N, 0.0f, 0.5f) : std::vector<float>{};
    RefOptim after = ref_optim_bounded(o, hy, P, G, M, V);

    Harness h;
    h.expected = {{"A", std::move(r.A)}, {"Y", std::move(r.Y)}, {"P", std::move(after.P)}};
    const std::vector<float> sync = {0.0f, 0.0f};
    // The outputs in data-flow order (verify lists mismatches in this order): A, Y, then the
    // updated parameters and state.
    h.tensors = {{"X", {B, I}, Role::In, X},
                 {"T", {B, O}, Role::In, T},
                 {"A", {B, H}, Role::Out, {}},
                 {"Y", {B, O}, Role::Out, {}},
                 {"P", {N}, Role::InOut, std::move(P)},
                 {"Yp", {fused_step_partials(B, H, O)}, Role::In,
                  std::vector<float>(fused_step_partials(B, H, O), std::bit_cast<float>(kPoison))},
                 {"sync", {2}, Role::In, sync},
                 {"hyp", {4}, Role::In, {hy.lr, hy.step_size, hy.bc2_sqrt, hy.decay}},
                 // Z: scratch for the pre-activations (written and read when act is not ReLU).
                 {"Z", {B, H}, Role::In, std::vector<float>(size_t(B) * H, std::bit_cast<float>(kPoison))}};
    if (tc) h.tensors.erase(h.tensors.begin() + 5, h.tensors.begin() + 7);  // no Yp, no sync
    if (tc) h.tensors.pop_back();                                           // no Z
    h.tensors[4].parts = parts;  // P
    if (use_m) {
        h.expected["M"] = std::move(after.M);
        h.tensors.push_back({"M", {N}, Role::InOut, std::move(M)});
        h.tensors.back().parts = state_parts(parts, "M");
    }
    if (use_v) {
        h.expected["V"] = std::move(after.V);
        h.tensors.push_back({"V", {N}, Role::InOut, std::move(V)});
        h.tensors.back().parts = state_parts(parts, "V");
    }
    h.launch = [=](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        const CUdeviceptr dP = ptr(m, "P");
        FusedArgs a{ptr(m, "X"), ptr(m, "T"), dP, dP + size_t(H) * I * 4, dP + (size_t(H) * I + H) * 4,
                    dP + (size_t(H) * I + H + size_t(O) * H) * 4, ptr(m, "A"), ptr(m, "Y"), 0, 0, B, I, H, O};
        a.P = dP;
        a.M = use_m ? ptr(m, "M") : 0;
        a.V = use_v ? ptr(m, "V") : 0;
        a.hyp = ptr(m, "hyp");
        a.loss = loss;
        a.scale = scale;
        a.optim = o;
        a.act = act;
        if (tc) return launch_tc_step(k, a, s);
        a.Yp = ptr(m, "Yp");
        a.sync = ptr(m, "sync");
        a.D1 = ptr(m, "Z");
        launch_fused_step(k, a, s);
    };
    return h;
}

namespace {

// The MNIST sizes; batches of 1 and 63 (partial chunk) and 1000 (16 chunks: X restaged in phase
// 2); 300 hidden units (19 tiles, partial last tile) and 2000 (125 tiles: more tiles than
// resident clusters, so clusters loop); I = 13 and 257 (single-float copies, ranks with few or no
// columns), I = 800 (the widest it takes), O = 32 (the most), 1 x 1 x 1 x 1. The first three
// shapes with every loss and optimizer code (ReLU), and every other activation with CE and
// Nesterov; the others with one (loss, optimizer) pair and one activation each, in turn.
std::vector<VerifyCase> step_default_cases() {
    std::vector<VerifyCase> v;
    const std::vector<std::vector<unsigned>> step_shapes = {
        {64, 784, 128, 10}, {65, 13, 5, 3},     {1, 1, 1, 1},      {1, 784, 128, 10}, {63, 784, 128, 10},
        {1000, 784, 128, 10}, {64, 784, 300, 10}, {64, 100, 2000, 10}, {9, 257, 33, 17}, {64, 800, 16, 32}};
    for (size_t i = 0; i < step_shapes.size(); ++i) {
        auto with = [&](unsigned loss, unsigned optim, unsigned act) {
            std::vector<unsigned> s = step_shapes[i];
            s.push_back(loss);
            s.push_back(optim);
            s.push_back(act);
            v.push_back({"fused_step", s});
        };
        if (i < 3) {
            for (unsigned loss : {kLossDiff, kLossSoftmax})
                for (unsigned o = 0; o < optim_code_count(); ++o) with(loss, o, kActRelu);
            for (unsigned act = kActRelu + 1; act <= kActGelu; ++act)
                with(kLossSoftmax, optim_code(OptimKind::Nesterov), act);
        } else {
            const unsigned pair = unsigned(i - 3) * 5;  // walks the pairs
            with(pair % 2, (pair / 2) % optim_code_count(), unsigned(i) % (kActGelu + 1));
        }
    }
    return v;
}

std::vector<VerifyCase> step_quick_cases() {
    return {{"fused_step", {63, 784, 128, 10, 1, 2, 0}}, {"fused_step", {65, 13, 5, 3, 0, 4, 4}},
            {"fused_step", {64, 784, 128, 10, 1, 6, 0}}};
}

}  // namespace

// Reads X, T, the parameters and m, writes A, Y, the parameters and m (Nesterov).
std::pair<double, double> step_work(const VerifyCase& c) {
    const double B = c.shape[0];
    const double I = kBenchI, H = kBenchH, O = kBenchO, params = H * I + H + O * H + O;
    return {4 * (B * I + B * O + 4 * params + B * H + B * O),
            2 * B * (I * H + 2 * H * O) + 2 * B * ((I + 1) * H + (H + 1) * O) + 7 * params};
}

const KernelFamily& step_family() {
    static const KernelFamily f{
        "step",
        {"step"},
        {{.entry = "fused_step",
          .shape = "B,I,H,O,loss,optim,act",
          .validate = validate_named_shape,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_step_harness(c, rng, false); },
          // bench: the default recipe's step (cross-entropy, Nesterov, ReLU).
          .bench_shape = [](unsigned B) -> BenchShape {
              return std::vector<unsigned>{B, kBenchI, kBenchH, kBenchO, kLossSoftmax,
                                               optim_code(OptimKind::Nesterov), kActRelu};
          },
          .work = step_work}},
        step_default_cases,
        step_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{step_family, 60, 60};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
