// The float64 reference of a whole --model (see ref_model.hpp).
#include "ref_model.hpp"

#include "error.hpp"

namespace ptxlab {

namespace {

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

ModelForward64 model_forward64(const Model& m, const std::vector<double>& params, const std::vector<double>& X,
                               unsigned B, Activation act, std::vector<double>* running, bool train) {
    check_inputs(m, params, X, B, "model_forward64");
    if (running && running->size() != m.buffer_count)
        PTXLAB_THROW(Error, "model_forward64: {} running statistics given, the model {} has {}", running->size(),
                     m.text(), m.buffer_count);
    if (!train && m.has_buffers() && !running)
        PTXLAB_THROW(Error, "model_forward64: evaluating {} needs its bn layers' running statistics", m.text());
    const size_t L = m.layers.size();
    ModelForward64 f;
    f.a.resize(L + 1);
    f.z.resize(L + 1);
    f.idx.resize(L + 1);
    f.bn.resize(L + 1);
    f.a[0].assign(X.begin(), X.begin() + long(size_t(B) * m.layers.front().in.size()));
    for (size_t l = 0; l < L; ++l) {
        const LayerSpec& ly = m.layers[l];
        layer_row(ly.kind).forward64(
            ly, {params, B, act, f.a[l], f.z[l + 1], f.a[l + 1], f.idx[l + 1], f.bn[l + 1], running, train});
    }
    return f;
}

double model_loss_grad64(const Model& m, const std::vector<double>& params, const Recipe& r,
                         const std::vector<double>& X, const std::vector<uint8_t>& labels, unsigned B,
                         std::vector<double>* grad, std::vector<double>* running) {
    if (labels.size() < B) PTXLAB_THROW(Error, "model_loss_grad64: {} samples need {} labels (got {})", B, B, labels.size());
    ModelForward64 f = model_forward64(m, params, X, B, r.activation, running, true);
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
        // Down the layers: act'(z) at every activated layer's pre-activation, then its row's
        // backward pass (its parameters' gradient, and the deltas of its input above the first).
        for (size_t l = m.layers.size(); l-- > 0;) {
            const LayerSpec& ly = m.layers[l];
            if (ly.activation)
                for (size_t i = 0; i < d.size(); ++i) d[i] *= activate_grad(r.activation, f.z[l + 1][i]);
            const LayerPass64 p{params,      B,         r.activation, f.a[l], f.z[l + 1],
                                f.a[l + 1], f.idx[l + 1], f.bn[l + 1], running, true};
            d = layer_row(ly.kind).backward64(ly, p, std::move(d), *grad, l > 0);
        }
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
