#include "recipe.hpp"

#include "error.hpp"
#include "rng.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace ptxlab {

namespace {

// The flag names of a choice: parse_X and to_string(X) read this one table.
template <class E> struct Named {
    E value;
    const char* name;
};

template <class E, size_t N> E parse_named(const Named<E> (&table)[N], const std::string& name, const char* what) {
    std::string choices;
    for (size_t i = 0; i < N; ++i) {
        if (name == table[i].name) return table[i].value;
        choices += fmt::format("{}{}", i == 0 ? "" : i + 1 == N ? " or " : ", ", table[i].name);
    }
    PTXLAB_THROW(InputError, "unknown {} '{}' (choose {})", what, name, choices);
}

template <class E, size_t N> std::string name_of(const Named<E> (&table)[N], E value) {
    for (const auto& t : table)
        if (t.value == value) return t.name;
    return "?";
}

}  // namespace


// ---- Initialisation -----------------------------------------------------------------

constexpr Named<Init> kInitNames[] = {
    {Init::Torch, "torch"}, {Init::HeUniform, "he-uniform"}, {Init::HeNormal, "he-normal"},
    {Init::Xavier, "xavier"}, {Init::Notebook, "notebook"}};
Init parse_init(const std::string& name) { return parse_named(kInitNames, name, "init"); }
std::string to_string(Init i) { return name_of(kInitNames, i); }


std::string describe(Init i) {
    switch (i) {
        case Init::Torch: return "U(+-1/sqrt(fan_in)) weights and biases (nn.Linear's default)";
        case Init::HeUniform: return "He-uniform weights U(+-sqrt(6/fan_in)), zero biases";
        case Init::HeNormal: return "He-normal weights N(0, 2/fan_in), zero biases";
        case Init::Xavier: return "Xavier-uniform weights U(+-sqrt(6/(fan_in+fan_out))), zero biases";
        case Init::Notebook: return "N(0, 0.01^2) weights and biases (the notebook's)";
    }
    return "?";
}

void init_layer_params(Rng& rng, Init init, double fan_in, double fan_out, float* W, size_t nW, float* b, size_t nb) {
    std::fill(b, b + nb, 0.0f);
    switch (init) {
        case Init::Torch: {
            // nn.Linear's and nn.Conv2d's default: kaiming_uniform(a = sqrt(5)) gives the bound
            // gain sqrt(3 / fan_in) with gain sqrt(2 / (1 + 5)): 1 / sqrt(fan_in); the bias the same.
            const float bound = static_cast<float>(1.0 / std::sqrt(fan_in));
            for (size_t i = 0; i < nW; ++i) W[i] = rng.uniform(-bound, bound);
            for (size_t i = 0; i < nb; ++i) b[i] = rng.uniform(-bound, bound);
            break;
        }
        case Init::HeUniform: {
            const float bound = std::sqrt(6.0f / float(fan_in));
            for (size_t i = 0; i < nW; ++i) W[i] = rng.uniform(-bound, bound);
            break;
        }
        case Init::HeNormal: {
            const double sd = std::sqrt(2.0 / fan_in);
            for (size_t i = 0; i < nW; ++i) W[i] = static_cast<float>(sd * rng.normal());
            break;
        }
        case Init::Xavier: {
            const float bound = static_cast<float>(std::sqrt(6.0 / (fan_in + fan_out)));
            for (size_t i = 0; i < nW; ++i) W[i] = rng.uniform(-bound, bound);
            break;
        }
        case Init::Notebook:
            for (size_t i = 0; i < nW; ++i) W[i] = static_cast<float>(0.01 * rng.normal());
            for (size_t i = 0; i < nb; ++i) b[i] = static_cast<float>(0.01 * rng.normal());
            break;
    }
}

NetParams init_params(const std::vector<unsigned>& sizes, Init init, uint64_t seed) {
    Rng rng(seed);
    NetParams net;
    net.sizes = sizes;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        const size_t rows = sizes[l + 1], cols = sizes[l];
        std::vector<float> W(rows * cols), b(rows, 0.0f);
        init_layer_params(rng, init, double(cols), double(rows), W.data(), W.size(), b.data(), b.size());
        net.W.push_back(std::move(W));
        net.b.push_back(std::move(b));
    }
    return net;
}


// ---- Loss ----------------------------------------------------------------------------

constexpr Named<Loss> kLossNames[] = {
    {Loss::Ce, "ce"}, {Loss::Mse, "mse"}, {Loss::HalfSse, "half-sse"}};
Loss parse_loss(const std::string& name) { return parse_named(kLossNames, name, "loss"); }
std::string to_string(Loss l) { return name_of(kLossNames, l); }


unsigned loss_code(Loss l) { return l == Loss::Ce ? kLossSoftmax : kLossDiff; }

float grad_scale(Loss l, unsigned B, unsigned O) {
    return static_cast<float>(l == Loss::Mse ? 2.0 / (double(O) * double(B)) : 1.0 / double(B));
}

namespace {
// The largest logit and sum_i exp(y_i - max): softmax's and log-sum-exp's pieces, max-subtracted.
struct ExpSum {
    double mx, sum;
};
ExpSum exp_sum(const double* y, unsigned O) {
    double mx = y[0];
    for (unsigned i = 1; i < O; ++i) mx = std::max(mx, y[i]);
    double sum = 0.0;
    for (unsigned i = 0; i < O; ++i) sum += std::exp(y[i] - mx);
    return {mx, sum};
}
}  // namespace

double loss_value(Loss l, const double* y, const double* t, unsigned O) {
    switch (l) {
        case Loss::Ce: {
            // -sum_i t_i log softmax(y)_i = sum_i t_i (lse(y) - y_i), lse with the max subtracted.
            const auto [mx, sum] = exp_sum(y, O);
            const double lse = mx + std::log(sum);
            double loss = 0.0;
            for (unsigned i = 0; i < O; ++i) loss += t[i] * (lse - y[i]);
            return loss;
        }
        case Loss::Mse: {
            double sum = 0.0;
            for (unsigned i = 0; i < O; ++i) sum += (y[i] - t[i]) * (y[i] - t[i]);
            return sum / O;
        }
        case Loss::HalfSse: {
            double sum = 0.0;
            for (unsigned i = 0; i < O; ++i) sum += (y[i] - t[i]) * (y[i] - t[i]);
            return 0.5 * sum;
        }
    }
    PTXLAB_THROW(Error, "loss_value: unknown loss {}", int(l));
}

void loss_grad(Loss l, const double* y, const double* t, unsigned O, double* dy) {
    switch (l) {
        case Loss::Ce: {
            // softmax(y) - t: the exact gradient when sum t = 1 (one-hot or probability targets);
            // in general it is softmax(y) sum(t) - t, and the kernels compute softmax(y) - t.
            const auto [mx, sum] = exp_sum(y, O);
            for (unsigned i = 0; i < O; ++i) dy[i] = std::exp(y[i] - mx) / sum - t[i];
            return;
        }
        case Loss::Mse:
            for (unsigned i = 0; i < O; ++i) dy[i] = 2.0 * (y[i] - t[i]) / O;
            return;
        case Loss::HalfSse:
            for (unsigned i = 0; i < O; ++i) dy[i] = y[i] - t[i];
            return;
    }
    PTXLAB_THROW(Error, "loss_grad: unknown loss {}", int(l));
}

// ---- Optimizer: optimizers.cpp (the table and every function that reads it) --------------

// ---- Schedule ------------------------------------------------------------------------

constexpr Named<ScheduleKind> kScheduleKindNames[] = {
    {ScheduleKind::Const, "const"}, {ScheduleKind::Cosine, "cosine"}, {ScheduleKind::OneCycle, "onecycle"},
    {ScheduleKind::Step, "step"}};
ScheduleKind parse_schedule(const std::string& name) { return parse_named(kScheduleKindNames, name, "schedule"); }
std::string to_string(ScheduleKind k) { return name_of(kScheduleKindNames, k); }


std::string ScheduleConfig::describe() const {
    std::string s;
    switch (kind) {
        case ScheduleKind::Const: s = "const"; break;
        case ScheduleKind::Cosine: s = "cosine decay to 0"; break;
        case ScheduleKind::OneCycle: s = "onecycle (linear decay to 0)"; break;
        case ScheduleKind::Step: s = fmt::format("step (x{} every {} steps)", gamma, step_every); break;
    }
    if (warmup > 0.0) s += fmt::format(", linear warm-up from 0 over {:g}% of the steps", warmup * 100.0);
    return s;
}

void ScheduleConfig::validate() const {
    if (!(warmup >= 0.0 && warmup < 1.0))
        PTXLAB_THROW(InputError, "--warmup {} is out of range (it must be in [0, 1))", warmup);
    if (kind == ScheduleKind::Step) {
        if (step_every < 1) PTXLAB_THROW(InputError, "--step-every {} with --schedule step: it must be >= 1", step_every);
        if (!(gamma > 0.0 && gamma <= 1.0))
            PTXLAB_THROW(InputError, "--gamma {} is out of range (it must be in (0, 1])", gamma);
    }
}

double schedule_lr(const ScheduleConfig& c, double peak, uint64_t s, uint64_t S) {
    if (s >= S) PTXLAB_THROW(Error, "schedule_lr: step {} of {} steps", s, S);
    const uint64_t W = static_cast<uint64_t>(std::llround(c.warmup * double(S)));
    if (s < W) return peak * double(s) / double(W);
    switch (c.kind) {
        case ScheduleKind::Const: return peak;
        case ScheduleKind::OneCycle: return peak * double(S - s) / double(S - W);
        case ScheduleKind::Cosine:
            return peak * (1.0 + std::cos(std::numbers::pi * double(s - W) / double(S - W))) / 2.0;
        case ScheduleKind::Step:
            if (c.step_every == 0) PTXLAB_THROW(Error, "schedule_lr: step schedule with step_every 0");
            return peak * std::pow(c.gamma, double(s / c.step_every));
    }
    PTXLAB_THROW(Error, "schedule_lr: unknown schedule {}", int(c.kind));
}

// ---- Activation ----------------------------------------------------------------------

constexpr Named<Activation> kActivationNames[] = {
    {Activation::Relu, "relu"}, {Activation::LeakyRelu, "leaky-relu"}, {Activation::Tanh, "tanh"},
    {Activation::Sigmoid, "sigmoid"}, {Activation::Gelu, "gelu"}};
Activation parse_activation(const std::string& name) { return parse_named(kActivationNames, name, "activation"); }
std::string to_string(Activation a) { return name_of(kActivationNames, a); }

unsigned act_code(Activation a) {
    switch (a) {
        case Activation::Relu: return kActRelu;
        case Activation::LeakyRelu: return kActLeakyRelu;
        case Activation::Tanh: return kActTanh;
        case Activation::Sigmoid: return kActSigmoid;
        case Activation::Gelu: return kActGelu;
    }
    PTXLAB_THROW(Error, "act_code: unknown activation {}", int(a));
}

Activation activation_of_code(unsigned c) {
    for (Activation a : {Activation::Relu, Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid, Activation::Gelu})
        if (act_code(a) == c) return a;
    PTXLAB_THROW(InputError, "activation code {} is not one of 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu", c);
}


namespace {
constexpr double kLeakySlope = 0.01;
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

double activate(Activation a, double x) {
    switch (a) {
        case Activation::Relu: return x > 0.0 ? x : 0.0;
        case Activation::LeakyRelu: return x > 0.0 ? x : kLeakySlope * x;
        case Activation::Tanh: return std::tanh(x);
        case Activation::Sigmoid: return sigmoid(x);
        case Activation::Gelu: return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2));
    }
    PTXLAB_THROW(Error, "activate: unknown activation {}", int(a));
}

double activate_grad(Activation a, double x) {
    switch (a) {
        case Activation::Relu: return x > 0.0 ? 1.0 : 0.0;
        case Activation::LeakyRelu: return x > 0.0 ? 1.0 : kLeakySlope;
        case Activation::Tanh: {
            const double th = std::tanh(x);
            return 1.0 - th * th;
        }
        case Activation::Sigmoid: {
            const double sg = sigmoid(x);
            return sg * (1.0 - sg);
        }
        case Activation::Gelu: {
            // d/dx x Phi(x) = Phi(x) + x phi(x).
            const double Phi = 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2));
            const double phi = std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
            return Phi + x * phi;
        }
    }
    PTXLAB_THROW(Error, "activate_grad: unknown activation {}", int(a));
}

// ---- A float64 training step with any recipe ------------------------------------------

double cpu_recipe_step(Net64& net, OptimState64& st, const Recipe& r, const std::vector<double>& X,
                       const std::vector<uint8_t>& labels, unsigned B, double lr) {
    if (net.sizes.size() < 2) PTXLAB_THROW(Error, "cpu_recipe_step: the network has no layer");
    const size_t L = net.sizes.size() - 1;
    const unsigned I = net.sizes[0], O = net.sizes[L];
    if (B == 0 || X.size() < size_t(B) * I || labels.size() < B)
        PTXLAB_THROW(Error, "cpu_recipe_step: {} samples of {} inputs need {} values and {} labels (got {} and {})", B, I,
                     size_t(B) * I, B, X.size(), labels.size());
    std::vector<std::vector<double>> gW(L), gb(L);
    for (size_t l = 0; l < L; ++l) {
        gW[l].assign(net.W[l].size(), 0.0);
        gb[l].assign(net.b[l].size(), 0.0);
    }
    double loss = 0.0;
    std::vector<double> t(O), d(O);
    for (unsigned s = 0; s < B; ++s) {
        if (labels[s] >= O) PTXLAB_THROW(Error, "cpu_recipe_step: label {} of sample {} is not below {}", labels[s], s, O);
        // Forward, keeping every layer's pre-activation z[l] and output a[l] (a[0] = x).
        std::vector<std::vector<double>> a(L + 1), z(L + 1);
        a[0].assign(X.begin() + long(s) * I, X.begin() + long(s + 1) * I);
        for (size_t l = 0; l < L; ++l) {
            const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
            z[l + 1].assign(rows, 0.0);
            a[l + 1].assign(rows, 0.0);
            for (unsigned row = 0; row < rows; ++row) {
                double acc = net.b[l][row];
                for (unsigned c = 0; c < cols; ++c) acc += net.W[l][size_t(row) * cols + c] * a[l][c];
                z[l + 1][row] = acc;
                a[l + 1][row] = (l + 1 < L) ? activate(r.activation, acc) : acc;
            }
        }
        // Loss and output delta (the mean over the batch: 1/B on each sample's gradient).
        for (unsigned o = 0; o < O; ++o) t[o] = labels[s] == o ? 1.0 : 0.0;
        loss += loss_value(r.loss, a[L].data(), t.data(), O);
        d.resize(O);
        loss_grad(r.loss, a[L].data(), t.data(), O, d.data());
        for (auto& x : d) x /= double(B);
        // Backward, accumulating the batch sum of the (already scaled) gradients.
        for (size_t l = L; l-- > 0;) {
            const unsigned rows = net.sizes[l + 1], cols = net.sizes[l];
            for (unsigned row = 0; row < rows; ++row) {
                gb[l][row] += d[row];
                for (unsigned c = 0; c < cols; ++c) gW[l][size_t(row) * cols + c] += d[row] * a[l][c];
            }
            if (l == 0) break;
            std::vector<double> below(cols, 0.0);
            for (unsigned c = 0; c < cols; ++c) {
                double sum = 0.0;
                for (unsigned row = 0; row < rows; ++row) sum += net.W[l][size_t(row) * cols + c] * d[row];
                below[c] = sum * activate_grad(r.activation, z[l][c]);
            }
            d.swap(below);
        }
    }
    // The optimizer step, with the state sized on first use.
    const bool need_m = optim_uses_m(r.optim.kind), need_v = optim_uses_v(r.optim.kind);
    auto size_state = [&](std::vector<std::vector<double>>& sw, std::vector<std::vector<double>>& sb) {
        if (sw.size() == L) return;
        sw.assign(L, {});
        sb.assign(L, {});
        for (size_t l = 0; l < L; ++l) {
            sw[l].assign(net.W[l].size(), 0.0);
            sb[l].assign(net.b[l].size(), 0.0);
        }
    };
    if (need_m) size_state(st.mW, st.mb);
    if (need_v) size_state(st.vW, st.vb);
    ++st.t;
    for (size_t l = 0; l < L; ++l) {
        optim_step(r.optim, lr, st.t, net.W[l].data(), gW[l].data(), need_m ? st.mW[l].data() : nullptr,
                   need_v ? st.vW[l].data() : nullptr, net.W[l].size());
        optim_step(r.optim, lr, st.t, net.b[l].data(), gb[l].data(), need_m ? st.mb[l].data() : nullptr,
                   need_v ? st.vb[l].data() : nullptr, net.b[l].size());
    }
    return loss / B;
}

}  // namespace ptxlab
