// The float64 reference of a whole --model (see ref_model.hpp).
#include "ref_model.hpp"

#include "error.hpp"
#include "ref_conv.hpp"

#include <cmath>

namespace ptxlab {

namespace {

ConvDims conv_dims(const LayerSpec& l, unsigned B) { return {B, l.in.c, l.in.h, l.in.w, l.width, l.ksize}; }

std::vector<double> slice(const std::vector<double>& v, size_t offset, size_t count) {
    return {v.begin() + long(offset), v.begin() + long(offset + count)};
}

// out = act(in) elementwise (or a copy without an activation).
std::vector<double> activated(const std::vector<double>& z, bool on, Activation act) {
    std::vector<double> a(z);
    if (on)
        for (auto& x : a) x = activate(act, x);
    return a;
}

// Layer l's forward pass on the batch `in`: its output, pre-activation and pool argmax.
struct BnMode64 {
    std::vector<double>* running;
    bool train;
};

void forward_layer(const LayerSpec& l, const std::vector<double>& P, unsigned B, Activation act,
                   const std::vector<double>& in, std::vector<double>& z, std::vector<double>& out,
                   std::vector<uint32_t>& idx, std::vector<double>& stats, BnMode64 mode) {
    switch (l.kind) {
    case LayerKind::Bn: {
        const unsigned C = l.width, HW = l.in.h * l.in.w;
        double* rm = mode.running ? mode.running->data() + l.buffer_offset : nullptr;
        z.assign(in.size(), 0.0);
        stats.assign(2 * size_t(C), 0.0);
        bn_forward64(in.data(), B, C, HW, P.data() + l.weight_offset, P.data() + l.bias_offset, mode.train, rm,
                     rm ? rm + C : nullptr, z.data(), stats.data(), stats.data() + C);
        out = activated(z, l.activation, act);
        return;
    }
    case LayerKind::Conv: {
        z = conv2d_forward(conv_dims(l, B), in, slice(P, l.weight_offset, l.weight_count()),
                           slice(P, l.bias_offset, l.bias_count()), std::nullopt);
        out = activated(z, l.activation, act);
        return;
    }
    case LayerKind::Pool: {
        PoolResult r = maxpool2_forward(B * l.in.c, l.in.h, l.in.w, in);
        out = std::move(r.Y);
        idx = std::move(r.idx);
        return;
    }
    case LayerKind::Fc: {
        const size_t rows = l.width, cols = l.in.size();
        const double* W = P.data() + l.weight_offset;
        const double* b = P.data() + l.bias_offset;
        z.assign(size_t(B) * rows, 0.0);
        for (unsigned n = 0; n < B; ++n)
            for (size_t row = 0; row < rows; ++row) {
                double acc = b[row];
                for (size_t c = 0; c < cols; ++c) acc += W[row * cols + c] * in[n * cols + c];
                z[n * rows + row] = acc;
            }
        out = activated(z, l.activation, act);
        return;
    }
    }
}

// Layer l's backward pass: from d = dL/d(its output) it adds its parameters' gradient to
// grad and returns dL/d(its input) (empty when `below` is false: the first layer).
std::vector<double> backward_layer(const LayerSpec& l, const std::vector<double>& P, unsigned B, Activation act,
                                   const std::vector<double>& in, const std::vector<double>& z,
                                   const std::vector<uint32_t>& idx, const std::vector<double>& stats,
                                   std::vector<double> d, std::vector<double>& grad, bool below) {
    if (l.activation)
        for (size_t i = 0; i < d.size(); ++i) d[i] *= activate_grad(act, z[i]);
    switch (l.kind) {
    case LayerKind::Bn: {
        const unsigned C = l.width;
        std::vector<double> dx(d.size());
        bn_backward64(in.data(), d.data(), B, C, l.in.h * l.in.w, P.data() + l.weight_offset, stats.data(),
                      stats.data() + C, grad.data() + l.weight_offset, grad.data() + l.bias_offset, dx.data());
        return dx;
    }
    case LayerKind::Conv: {
        const ConvDims cd = conv_dims(l, B);
        std::vector<double> dW, db;
        conv2d_backward_weights(cd, in, d, dW, db);
        std::copy(dW.begin(), dW.end(), grad.begin() + long(l.weight_offset));
        std::copy(db.begin(), db.end(), grad.begin() + long(l.bias_offset));
        if (!below) return {};
        return conv2d_backward_input(cd, d, slice(P, l.weight_offset, l.weight_count()));
    }
    case LayerKind::Pool: return maxpool2_backward(B * l.in.c, l.in.h, l.in.w, d, idx);
    case LayerKind::Fc: {
        const size_t rows = l.width, cols = l.in.size();
        const double* W = P.data() + l.weight_offset;
        double* gW = grad.data() + l.weight_offset;
        double* gb = grad.data() + l.bias_offset;
        // Sample by sample, as cpu_recipe_step sums them.
        for (unsigned n = 0; n < B; ++n)
            for (size_t row = 0; row < rows; ++row) {
                gb[row] += d[n * rows + row];
                for (size_t c = 0; c < cols; ++c) gW[row * cols + c] += d[n * rows + row] * in[n * cols + c];
            }
        if (!below) return {};
        std::vector<double> dIn(size_t(B) * cols, 0.0);
        for (unsigned n = 0; n < B; ++n)
            for (size_t c = 0; c < cols; ++c) {
                double sum = 0.0;
                for (size_t row = 0; row < rows; ++row) sum += W[row * cols + c] * d[n * rows + row];
                dIn[n * cols + c] = sum;
            }
        return dIn;
    }
    }
    return {};
}

void check_inputs(const Model& m, const std::vector<double>& params, const std::vector<double>& X, unsigned B,
                  const char* who) {
    if (m.layers.empty()) PTXLAB_THROW(Error, "{}: the model has no layer", who);
    if (params.size() != m.param_count)
        PTXLAB_THROW(Error, "{}: {} parameters given, the model {} has {}", who, params.size(), m.text(),
                     m.param_count);
    const size_t I = m.layers.front().in.size();
    if (B == 0 || X.size() < size_t(B) * I)
        PTXLAB_THROW(Error, "{}: {} samples of {} inputs need {} values (got {})", who, B, I, size_t(B) * I, X.size());
}

}  // namespace

void bn_forward64(const double* x, unsigned B, unsigned C, unsigned HW, const double* gamma, const double* beta,
                  bool train, double* run_mean, double* run_var, double* z, double* mean, double* rstd) {
    const size_t n = size_t(B) * HW;
    if (train && n < 2)
        PTXLAB_THROW(InputError, "bn: expected more than 1 value per channel when training (batch {} of {}x1 planes)",
                     B, C);
    auto at = [&](unsigned b, unsigned c, size_t i) { return (size_t(b) * C + c) * HW + i; };
    for (unsigned c = 0; c < C; ++c) {
        double mu = 0.0, var = 0.0;
        if (train) {
            for (unsigned b = 0; b < B; ++b)
                for (size_t i = 0; i < HW; ++i) mu += x[at(b, c, i)];
            mu /= double(n);
            for (unsigned b = 0; b < B; ++b)
                for (size_t i = 0; i < HW; ++i) var += (x[at(b, c, i)] - mu) * (x[at(b, c, i)] - mu);
            if (run_mean) {
                run_mean[c] = (1.0 - kBnMomentum) * run_mean[c] + kBnMomentum * mu;
                run_var[c] = (1.0 - kBnMomentum) * run_var[c] + kBnMomentum * var / double(n - 1);
            }
            var /= double(n);
        } else {
            mu = run_mean[c];
            var = run_var[c];
        }
        mean[c] = mu;
        rstd[c] = 1.0 / std::sqrt(var + kBnEps);
        for (unsigned b = 0; b < B; ++b)
            for (size_t i = 0; i < HW; ++i) z[at(b, c, i)] = gamma[c] * (x[at(b, c, i)] - mu) * rstd[c] + beta[c];
    }
}

void bn_backward64(const double* x, const double* dz, unsigned B, unsigned C, unsigned HW, const double* gamma,
                   const double* mean, const double* rstd, double* dgamma, double* dbeta, double* dx) {
    const double n = double(B) * HW;
    auto at = [&](unsigned b, unsigned c, size_t i) { return (size_t(b) * C + c) * HW + i; };
    for (unsigned c = 0; c < C; ++c) {
        double s1 = 0.0, s2 = 0.0;
        for (unsigned b = 0; b < B; ++b)
            for (size_t i = 0; i < HW; ++i) {
                s1 += dz[at(b, c, i)];
                s2 += dz[at(b, c, i)] * (x[at(b, c, i)] - mean[c]) * rstd[c];
            }
        dgamma[c] = s2;
        dbeta[c] = s1;
        for (unsigned b = 0; b < B; ++b)
            for (size_t i = 0; i < HW; ++i) {
                const size_t k = at(b, c, i);
                const double xhat = (x[k] - mean[c]) * rstd[c];
                dx[k] = gamma[c] * rstd[c] * (dz[k] - s1 / n - xhat * s2 / n);
            }
    }
}

ModelForward64 model_forward64(const Model& m, const std::vector<double>& params, const std::vector<double>& X,
                               unsigned B, Activation act, std::vector<double>* running, bool train) {
    check_inputs(m, params, X, B, "model_forward64");
    if (running && running->size() != m.buffer_count)
        PTXLAB_THROW(Error, "model_forward64: {} running statistics given, the model {} has {}", running->size(),
                     m.text(), m.buffer_count);
    if (!train && m.has_bn() && !running)
        PTXLAB_THROW(Error, "model_forward64: evaluating {} needs its bn layers' running statistics", m.text());
    const size_t L = m.layers.size();
    ModelForward64 f;
    f.a.resize(L + 1);
    f.z.resize(L + 1);
    f.idx.resize(L + 1);
    f.bn.resize(L + 1);
    f.a[0].assign(X.begin(), X.begin() + long(size_t(B) * m.layers.front().in.size()));
    for (size_t l = 0; l < L; ++l)
        forward_layer(m.layers[l], params, B, act, f.a[l], f.z[l + 1], f.a[l + 1], f.idx[l + 1], f.bn[l + 1],
                      {running, train});
    return f;
}

double model_loss_grad64(const Model& m, const std::vector<double>& params, const Recipe& r,
                         const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B,
                         std::vector<double>* grad, std::vector<double>* running) {
    if (labels.size() < B) PTXLAB_THROW(Error, "model_loss_grad64: {} samples need {} labels (got {})", B, B, labels.size());
    const ModelForward64 f = model_forward64(m, params, X, B, r.activation, running, true);
    const unsigned O = m.layers.back().width;
    // The loss and the output delta (each sample's gradient / B: the mean over the batch).
    double loss = 0.0;
    std::vector<double> t(O), d(size_t(B) * O);
    for (unsigned s = 0; s < B; ++s) {
        if (labels[s] >= O)
            PTXLAB_THROW(Error, "model_loss_grad64: label {} of sample {} is not below {}", labels[s], s, O);
        for (unsigned o = 0; o < O; ++o) t[o] = labels[s] == o ? 1.0 : 0.0;
        const double* y = f.logits().data() + size_t(s) * O;
        loss += loss_value(r.loss, y, t.data(), O);
        loss_grad(r.loss, y, t.data(), O, d.data() + size_t(s) * O);
        for (unsigned o = 0; o < O; ++o) d[size_t(s) * O + o] /= double(B);
    }
    if (grad) {
        grad->assign(m.param_count, 0.0);
        for (size_t l = m.layers.size(); l-- > 0;)
            d = backward_layer(m.layers[l], params, B, r.activation, f.a[l], f.z[l + 1], f.idx[l + 1], f.bn[l + 1],
                               std::move(d), *grad, l > 0);
    }
    return loss / B;
}

double cpu_model_step(const Model& m, std::vector<double>& params, ModelOptim64& st, const Recipe& r,
                      const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B, double lr,
                      std::vector<double>* running) {
    std::vector<double> g;
    const double loss = model_loss_grad64(m, params, r, X, labels, B, &g, running);
    const bool need_m = optim_uses_m(r.optim.kind), need_v = optim_uses_v(r.optim.kind);
    if (need_m && st.m.size() != params.size()) st.m.assign(params.size(), 0.0);
    if (need_v && st.v.size() != params.size()) st.v.assign(params.size(), 0.0);
    ++st.t;
    optim_step(r.optim, lr, st.t, params.data(), g.data(), need_m ? st.m.data() : nullptr,
               need_v ? st.v.data() : nullptr, params.size());
    return loss;
}

}  // namespace ptxlab
