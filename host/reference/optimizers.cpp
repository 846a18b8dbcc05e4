#include "optimizers.hpp"

#include "error.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace ptxlab {

namespace {

using namespace bounded;

// NAdam's momentum coefficient mu_t = b1 (1 - 0.96^(0.004 t) / 2) (torch.optim.NAdam's
// momentum_decay 0.004) and the product mu_1 ... mu_t. The trainer asks for t, t + 1, ... in
// turn: the last product is kept (per thread: the next epoch's table is made on another one).
double nadam_mu(double b1, uint64_t t) { return b1 * (1.0 - 0.5 * std::pow(0.96, double(t) * 0.004)); }
double nadam_mu_product(double b1, uint64_t t) {
    thread_local double last_b1 = -1, last_product = 1;
    thread_local uint64_t last_t = 0;
    if (last_b1 != b1 || last_t > t) {
        last_b1 = b1;
        last_t = 0;
        last_product = 1;
    }
    for (; last_t < t; ++last_t) last_product *= nadam_mu(b1, last_t + 1);
    return last_product;
}

// ---- The float64 rules -----------------------------------------------------------------
// PyTorch's documented algorithms (the pseudo-code on each page):
//   SGD:     https://pytorch.org/docs/1.13/generated/torch.optim.SGD.html
//            g += wd p; b_t = mu b_{t-1} + (1 - tau) g (b_1 = g; tau = 0 here, and b_0 = 0 gives
//            the same b_1); nesterov: g = g + mu b_t, else g = b_t; p -= lr g.
//   Adam:    https://pytorch.org/docs/1.13/generated/torch.optim.Adam.html
//            g += wd p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; the implementation
//            (torch/optim/adam.py, _single_tensor_adam) writes the first as m.lerp_(g, 1 - b1)
//            and the step as p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), bc_i = 1 - b_i^t.
//   AdamW:   https://pytorch.org/docs/1.13/generated/torch.optim.AdamW.html
//            p = p - lr wd p first, then Adam's moments on the raw g (no wd p in g).
//   RMSprop: https://pytorch.org/docs/1.13/generated/torch.optim.RMSprop.html
//            g += wd p; v = alpha v + (1 - alpha) g^2; p -= lr g / (sqrt(v) + eps)
//            (momentum 0, centered False).
//   NAdam:   torch.optim.NAdam (recipe.hpp), momentum_decay 0.004, decay coupled as Adam's.

void sgd64(const OptimStep64& s, double* p, const double* g, double*, double*, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] -= s.lr * (g[i] + s.wd * p[i]);
}

template <bool Nesterov> void momentum64(const OptimStep64& s, double* p, const double* g, double* m, double*, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const double gi = g[i] + s.wd * p[i];
        m[i] = s.mu * m[i] + gi;
        if (Nesterov) p[i] -= s.lr * (gi + s.mu * m[i]);
        else p[i] -= s.lr * m[i];
    }
}

template <bool Decoupled> void adam64(const OptimStep64& s, double* p, const double* g, double* m, double* v, size_t n) {
    const double lr = s.lr, wd = s.wd, b1 = s.b1, b2 = s.b2;
    for (size_t i = 0; i < n; ++i) {
        double gi = g[i];
        if (Decoupled) p[i] *= 1.0 - lr * wd;
        else gi += wd * p[i];
        m[i] += (1.0 - b1) * (gi - m[i]);
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        p[i] -= (lr / s.bc1) * m[i] / (std::sqrt(v[i]) / s.bc2_sqrt + s.eps);
    }
}

void rmsprop64(const OptimStep64& s, double* p, const double* g, double*, double* v, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        const double gi = g[i] + s.wd * p[i];
        v[i] = s.alpha * v[i] + (1.0 - s.alpha) * gi * gi;
        p[i] -= s.lr * gi / (std::sqrt(v[i]) + s.eps);
    }
}

void nadam64(const OptimStep64& s, double* p, const double* g, double* m, double* v, size_t n) {
    const double lr = s.lr, b1 = s.b1, b2 = s.b2, bc2_sqrt = s.bc2_sqrt;
    const uint64_t t = s.t;
    for (size_t i = 0; i < n; ++i) {
        const double gi = g[i] + s.wd * p[i];
        m[i] += (1.0 - b1) * (gi - m[i]);
        v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
        const double d = std::sqrt(v[i] / (bc2_sqrt * bc2_sqrt)) + s.eps;
        p[i] -= lr * (1.0 - nadam_mu(b1, t)) / (1.0 - nadam_mu_product(b1, t)) * gi / d +
                lr * nadam_mu(b1, t + 1) / (1.0 - nadam_mu_product(b1, t + 1)) * m[i] / d;
    }
}

// NAdam's record: lr (1 - mu_t) / (1 - Pi_t) in place of lr, lr mu_t+1 / (1 - Pi_t+1) in place
// of the step size.
void nadam_hyper(const OptimConfig& o, double lr, uint64_t t, StepHyper& h) {
    const double b1 = o.beta1;
    h.lr = static_cast<float>(lr * (1.0 - nadam_mu(b1, t)) / (1.0 - nadam_mu_product(b1, t)));
    h.step_size = static_cast<float>(lr * nadam_mu(b1, t + 1) / (1.0 - nadam_mu_product(b1, t + 1)));
}

// ---- The rounding bounds: the kernels' instruction sequences (ptx/optim.ptx) -------------

void sgd_bound(const OptimBoundConsts& c, OptimBoundState& s) { s.p = fma_rn(neg(c.lr), s.g, s.p); }

template <bool Nesterov> void momentum_bound(const OptimBoundConsts& c, OptimBoundState& s) {
    s.m = add_rn(mul_rn(c.mu, s.m), s.g);
    s.p = fma_rn(neg(c.lr), Nesterov ? fma_rn(c.mu, s.m, s.g) : s.m, s.p);
}

// Adam's and AdamW's (and NAdam's, which first takes the gradient's term, its coefficient in h.lr).
template <bool NAdam> void adam_bound(const OptimBoundConsts& c, OptimBoundState& s) {
    const BV m0 = s.m, v0 = s.v;
    s.m = fma_rn(sub_rn(c.one, c.b1), sub_rn(s.g, m0), m0);
    s.v = fma_rn(sub_rn(c.one, c.b2), mul_rn(s.g, s.g), mul_rn(v0, c.b2));
    const BV denom = add_rn(div_rn(sqrt_rn(s.v), c.bc2), c.eps);
    if (NAdam) s.p = fma_rn(neg(c.lr), div_rn(s.g, denom), s.p);
    s.p = fma_rn(neg(c.step), div_rn(s.m, denom), s.p);
}

void rmsprop_bound(const OptimBoundConsts& c, OptimBoundState& s) {
    s.v = fma_rn(sub_rn(c.one, c.alpha), mul_rn(s.g, s.g), mul_rn(s.v, c.alpha));
    s.p = fma_rn(neg(c.lr), div_rn(s.g, add_rn(sqrt_rn(s.v), c.eps)), s.p);
}

// ---- The table -------------------------------------------------------------------------
// Rows in code order. entry_flag: optim_sgd's nesterov (0, 1), optim_adam's rule (0 Adam,
// 1 AdamW, 2 NAdam). Variant numbers: each entry's list as verify has always numbered it.
constexpr OptimizerRow kOptimizers[] = {
    {.name = "sgd", .torch = "torch.optim.SGD", .m = false, .v = false, .flags = 0,
     .decoupled = false, .note = "", .entry = "optim_sgd", .entry_flag = 0,
     .plain = {0, "plain", false}, .decayed = {4, "plain+wd", true}, .step_decay = StepCaseDecay::Off,
     .hyper = nullptr, .rule = sgd64, .bound = sgd_bound},
    {.name = "momentum", .torch = "torch.optim.SGD", .m = true, .v = false,
     .flags = kFlagMomentum, .decoupled = false, .note = "", .entry = "optim_sgd", .entry_flag = 0,
     .plain = {1, "momentum", false}, .decayed = {}, .step_decay = StepCaseDecay::On,
     .hyper = nullptr, .rule = momentum64<false>, .bound = momentum_bound<false>},
    {.name = "nesterov", .torch = "torch.optim.SGD", .m = true, .v = false,
     .flags = kFlagMomentum, .decoupled = false, .note = "", .entry = "optim_sgd", .entry_flag = 1,
     .plain = {2, "nesterov", false}, .decayed = {3, "nesterov+wd", true}, .step_decay = StepCaseDecay::Off,
     .hyper = nullptr, .rule = momentum64<true>, .bound = momentum_bound<true>},
    {.name = "adam", .torch = "torch.optim.Adam", .m = true, .v = true,
     .flags = kFlagBetas | kFlagEps, .decoupled = false, .note = "", .entry = "optim_adam", .entry_flag = 0,
     .plain = {0, "adam", false}, .decayed = {1, "adam+wd", true}, .step_decay = StepCaseDecay::On,
     .hyper = nullptr, .rule = adam64<false>, .bound = adam_bound<false>},
    {.name = "adamw", .torch = "torch.optim.AdamW", .m = true, .v = true,
     .flags = kFlagBetas | kFlagEps, .decoupled = true, .note = "", .entry = "optim_adam", .entry_flag = 1,
     .plain = {}, .decayed = {2, "adamw", true}, .step_decay = StepCaseDecay::On,
     .hyper = nullptr, .rule = adam64<true>, .bound = adam_bound<false>},
    {.name = "rmsprop", .torch = "torch.optim.RMSprop", .m = false, .v = true,
     .flags = kFlagAlpha | kFlagEps, .decoupled = false, .note = "", .entry = "optim_rmsprop", .entry_flag = 0,
     .plain = {0, "plain", false}, .decayed = {1, "+wd", true}, .step_decay = StepCaseDecay::On,
     .hyper = nullptr, .rule = rmsprop64, .bound = rmsprop_bound},
    {.name = "nadam", .torch = "torch.optim.NAdam, momentum decay 0.004", .m = true,
     .v = true, .flags = kFlagBetas | kFlagEps, .decoupled = false, .note = "momentum decay 0.004",
     .entry = "optim_adam", .entry_flag = 2, .plain = {3, "nadam", false}, .decayed = {4, "nadam+wd", true},
     .step_decay = StepCaseDecay::CeOnly, .hyper = nadam_hyper, .rule = nadam64, .bound = adam_bound<true>},
};
// OptimKind's enumerators name these rows' codes (test_optimizers.cpp holds each to its name).
constexpr unsigned kOptimCodes = std::size(kOptimizers);

}  // namespace

std::span<const OptimizerRow> optimizer_rows() { return kOptimizers; }

OptimKind OptimizerRow::kind() const {
    for (unsigned c = 0; c < kOptimCodes; ++c)
        if (this == &kOptimizers[c]) return OptimKind(c);
    PTXLAB_THROW(Error, "internal error: an optimizer row outside the table");
}

const OptimizerRow& optimizer_row(OptimKind k) {
    if (optim_code(k) >= kOptimCodes) PTXLAB_THROW(Error, "internal error: unknown optimizer kind {}", optim_code(k));
    return kOptimizers[optim_code(k)];
}

// ---- recipe.hpp's optimizer functions, read from the table ------------------------------

OptimKind parse_optimizer(const std::string& name) {
    std::string choices;
    for (size_t i = 0; i < kOptimCodes; ++i) {
        if (name == kOptimizers[i].name) return kOptimizers[i].kind();
        choices += fmt::format("{}{}", i == 0 ? "" : i + 1 == kOptimCodes ? " or " : ", ", kOptimizers[i].name);
    }
    PTXLAB_THROW(InputError, "unknown optimizer '{}' (choose {})", name, choices);
}

std::string to_string(OptimKind k) { return optim_code(k) < kOptimCodes ? kOptimizers[optim_code(k)].name : "?"; }

unsigned optim_code_count() { return kOptimCodes; }

std::string optim_code_list() {
    std::string out;
    for (unsigned c = 0; c < kOptimCodes; ++c) out += fmt::format("{}{} {}", c ? ", " : "", c, kOptimizers[c].name);
    return out;
}

bool optim_uses_m(OptimKind k) { return optimizer_row(k).m; }
bool optim_uses_v(OptimKind k) { return optimizer_row(k).v; }

unsigned OptimConfig::state_buffers() const { return unsigned(optim_uses_m(kind)) + unsigned(optim_uses_v(kind)); }

namespace {
// describe()'s words for each flag an optimizer reads, in this order.
constexpr struct {
    unsigned flag;
    std::string (*text)(const OptimConfig& o);
} kDescribeFlags[] = {
    {kFlagMomentum, [](const OptimConfig& o) { return fmt::format("momentum {}", o.momentum); }},
    {kFlagBetas, [](const OptimConfig& o) { return fmt::format("betas {}, {}", o.beta1, o.beta2); }},
    {kFlagAlpha, [](const OptimConfig& o) { return fmt::format("alpha {}", o.alpha); }},
    {kFlagEps, [](const OptimConfig& o) { return fmt::format("eps {}", o.eps); }},
};
}  // namespace

std::string OptimConfig::describe() const {
    const OptimizerRow& r = optimizer_row(kind);
    std::vector<std::string> parts;
    for (const auto& f : kDescribeFlags)
        if (r.flags & f.flag) parts.push_back(f.text(*this));
    if (*r.note) parts.push_back(r.note);
    std::string s = r.name;
    for (size_t i = 0; i < parts.size(); ++i) s += (i == 0 ? " (" : ", ") + parts[i];
    if (!parts.empty()) s += ")";
    if (weight_decay != 0.0f) s += fmt::format(", {}weight decay {}", r.decoupled ? "decoupled " : "", weight_decay);
    return s;
}

void OptimConfig::validate() const {
    // Written as !(in range) so that NaN fails too.
    if (!(momentum >= 0.0f && momentum < 1.0f))
        PTXLAB_THROW(InputError, "--momentum {} is out of range (it must be in [0, 1))", momentum);
    if ((optimizer_row(kind).flags & kFlagMomentum) && !(momentum > 0.0f))
        PTXLAB_THROW(InputError, "--momentum {} with --optimizer {}: momentum must be > 0 (use --optimizer sgd for none)",
                     momentum, to_string(kind));
    if (!(weight_decay >= 0.0f && std::isfinite(weight_decay)))
        PTXLAB_THROW(InputError, "--weight-decay {} is out of range (it must be >= 0)", weight_decay);
    if (!(beta1 >= 0.0f && beta1 < 1.0f))
        PTXLAB_THROW(InputError, "--beta1 {} is out of range (it must be in [0, 1))", beta1);
    if (!(beta2 >= 0.0f && beta2 < 1.0f))
        PTXLAB_THROW(InputError, "--beta2 {} is out of range (it must be in [0, 1))", beta2);
    if (!(eps > 0.0f && std::isfinite(eps))) PTXLAB_THROW(InputError, "--eps {} is out of range (it must be > 0)", eps);
    if (!(alpha >= 0.0f && alpha < 1.0f))
        PTXLAB_THROW(InputError, "--alpha {} is out of range (it must be in [0, 1))", alpha);
}

StepHyper step_hyper(const OptimConfig& o, double lr, uint64_t t) {
    if (t == 0) PTXLAB_THROW(Error, "step_hyper: the step t is 1-based (got 0)");
    const double b1t = std::pow(double(o.beta1), double(t)), b2t = std::pow(double(o.beta2), double(t));
    StepHyper h;
    h.lr = static_cast<float>(lr);
    h.step_size = static_cast<float>(lr / (1.0 - b1t));
    h.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - b2t));
    h.decay = static_cast<float>(1.0 - lr * double(o.weight_decay));
    if (const auto special = optimizer_row(o.kind).hyper) special(o, lr, t, h);
    return h;
}

void optim_step(const OptimConfig& o, double lr, uint64_t t, double* p, const double* g, double* m, double* v,
                size_t n) {
    if (t == 0) PTXLAB_THROW(Error, "optim_step: the step t is 1-based (got 0)");
    const OptimizerRow& r = optimizer_row(o.kind);
    if ((r.m && m == nullptr) || (r.v && v == nullptr))
        PTXLAB_THROW(Error, "optim_step: {} needs its state buffers", r.name);
    const double b1 = o.beta1, b2 = o.beta2;
    const OptimStep64 s{lr, t, o.momentum, o.weight_decay, b1, b2, o.eps, o.alpha,
                        1.0 - std::pow(b1, double(t)), std::sqrt(1.0 - std::pow(b2, double(t)))};
    r.rule(s, p, g, m, v, n);
}

// ---- The launch, verify's variants, --help ---------------------------------------------

OptimKernelArgs optimizer_kernel_args(const OptimConfig& o) {
    const OptimizerRow& r = optimizer_row(o.kind);
    return {r.entry, r.m, r.v, (r.flags & kFlagMomentum) ? o.momentum : 0.0f, r.entry_flag};
}

std::vector<std::string> optimizer_entries() {
    std::vector<std::string> out;
    for (const OptimizerRow& r : kOptimizers)
        if (std::find(out.begin(), out.end(), r.entry) == out.end()) out.push_back(r.entry);
    return out;
}

std::vector<std::string> optimizer_variant_names(const std::string& entry) {
    std::vector<std::string> names;
    for (const OptimizerRow& r : kOptimizers) {
        if (entry != r.entry) continue;
        for (const OptimVariant& v : {r.plain, r.decayed}) {
            if (!v.name) continue;
            if (names.size() <= v.index) names.resize(v.index + 1);
            if (!names[v.index].empty())
                PTXLAB_THROW(Error, "internal error: {} has two variants {}", entry, v.index);
            names[v.index] = v.name;
        }
    }
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i].empty()) PTXLAB_THROW(Error, "internal error: {} has no variant {}", entry, i);
    return names;
}

OptimVariantOf optimizer_variant(const std::string& entry, unsigned index) {
    for (const OptimizerRow& r : kOptimizers)
        for (const OptimVariant& v : {r.plain, r.decayed})
            if (entry == r.entry && v.name && v.index == index) return {&r, v.weight_decay};
    PTXLAB_THROW(Error, "internal error: {} has no variant {}", entry, index);
}

const OptimizerRow& optimizer_of_entry(const std::string& entry, unsigned flag) {
    for (const OptimizerRow& r : kOptimizers)
        if (entry == r.entry && r.entry_flag == flag) return r;
    PTXLAB_THROW(Error, "internal error: {} takes no optimizer with flag {}", entry, flag);
}

std::string optimizer_help() {
    std::string s;
    for (size_t i = 0; i < kOptimCodes; ++i) {
        const OptimizerRow& r = kOptimizers[i];
        s += fmt::format("{}{}", i ? ", " : "", r.name);
        if (i + 1 == kOptimCodes || std::string(kOptimizers[i + 1].torch) != r.torch) s += fmt::format(" ({})", r.torch);
    }
    return s;
}

std::string optimizers_with(unsigned flag, bool decoupled) {
    std::string s;
    for (const OptimizerRow& r : kOptimizers)
        if ((flag && (r.flags & flag)) || (decoupled && r.decoupled)) s += fmt::format("{}{}", s.empty() ? "" : ", ", r.name);
    return s;
}

std::string optimizer_flag_unused(OptimKind k, const std::string& flag) {
    struct FlagBit {
        const char* flag;
        unsigned bit;
    };
    constexpr FlagBit kFlags[] = {{"--momentum", kFlagMomentum}, {"--beta1", kFlagBetas}, {"--beta2", kFlagBetas},
                                  {"--eps", kFlagEps},           {"--alpha", kFlagAlpha}};
    for (const FlagBit& f : kFlags)
        if (flag == f.flag && !(optimizer_row(k).flags & f.bit))
            return fmt::format("{} does not apply to --optimizer {}: it sets {}", flag, to_string(k),
                               optimizers_with(f.bit));
    return {};
}

}  // namespace ptxlab
