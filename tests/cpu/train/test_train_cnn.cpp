// The CNN trainer's checks that need no GPU (host/train/train_cnn.hpp): what it refuses, which kernels
// it loads. Its device behaviour is in tests/gpu/train/test_cnn_train.cpp.
#include "error.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "reference.hpp"
#include "ref_conv.hpp"
#include "ref_model.hpp"
#include "rng.hpp"
#include "train_cnn.hpp"
#include "cnn_ops.hpp"
#include "layer_steps.hpp"
#include "layers.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

using namespace ptxlab;

namespace {

// The step's operations on host memory, in float64 from float32 buffers (the kernels'
// semantics: ref_conv.hpp, reference.hpp), with host pointers as the addresses: the trainer's own data flow
// (cnn_forward, cnn_backward) runs on them without a GPU.
template <class T> T* host(CUdeviceptr p) { return reinterpret_cast<T*>(static_cast<uintptr_t>(p)); }
template <class T> CUdeviceptr addr(T* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }
std::vector<double> get(CUdeviceptr p, size_t n) { return {host<float>(p), host<float>(p) + n}; }
std::vector<float> getf(CUdeviceptr p, size_t n) { return {host<float>(p), host<float>(p) + n}; }
void put(CUdeviceptr p, const std::vector<double>& v) {
    for (size_t i = 0; i < v.size(); ++i) host<float>(p)[i] = static_cast<float>(v[i]);
}
std::vector<double> masked(CUdeviceptr dY, CUdeviceptr Y, size_t n, unsigned act) {
    std::vector<double> g = get(dY, n);
    if (act == 1)
        for (size_t i = 0; i < n; ++i)
            if (!(host<float>(Y)[i] > 0.0f)) g[i] = 0.0;
    return g;
}

struct HostOps : CnnOps {
    // With idx: the conv's outputs (rounded to float, as a kernel's buffer holds them) pooled.
    void conv_fwd(const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b, CUdeviceptr Y, unsigned act,
                  CUdeviceptr idx) override {
        std::vector<double> z = conv2d_forward(d, get(X, d.x_size()), get(Wt, d.w_size()), get(b, d.K),
                                               act == 1 ? std::optional(Activation::Relu) : std::nullopt);
        if (!idx) return put(Y, z);
        ++pooled;
        for (auto& v : z) v = double(float(v));
        const PoolResult r = maxpool2_forward(d.N * d.K, d.H, d.W, z);
        put(Y, r.Y);
        std::copy(r.idx.begin(), r.idx.end(), host<uint32_t>(idx));
    }
    bool pools_in_conv(const ConvDims&) const override { return fuse; }
    bool fuse = false;  // conv_fwd pools where it can, and conv_bwd_data_pool takes the pool below
    int pooled = 0;     // conv_fwd calls with the pool
    int pooled_bwd = 0; // conv_bwd_data_pool calls
    // The deltas (rounded to float, as a kernel's buffer would hold them) through pool_bwd.
    bool pools_in_conv_bwd(const ConvDims&) const override { return fuse; }
    void conv_bwd_data_pool(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                            unsigned act, const PoolBelow& p) override {
        ++pooled_bwd;
        REQUIRE(p.PH / 2 == d.H);
        REQUIRE(p.PW / 2 == d.W);
        std::vector<float> sums(d.x_size());
        conv_bwd_data(d, addr(sums.data()), dY, Y, Wt, act);
        pool_bwd(d.N * d.C, p.PH, p.PW, dX, addr(sums.data()), p.idx, p.Yp);
    }
    void conv_bwd_data(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                       unsigned act) override {
        put(dX, conv2d_backward_input(d, masked(dY, Y, d.y_size(), act), get(Wt, d.w_size())));
    }
    void conv_bwd_weights(const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X, CUdeviceptr dY,
                          CUdeviceptr Y, unsigned act, float scale) override {
        std::vector<double> gw, gb;
        conv2d_backward_weights(d, get(X, d.x_size()), masked(dY, Y, d.y_size(), act), gw, gb);
        for (auto& v : gw) v *= scale;
        for (auto& v : gb) v *= scale;
        put(dW, gw);
        put(db, gb);
    }
    void pool_fwd(unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx, CUdeviceptr X) override {
        const PoolResult r = maxpool2_forward(P, H, W, get(X, size_t(P) * H * W));
        put(Y, r.Y);
        std::copy(r.idx.begin(), r.idx.end(), host<uint32_t>(idx));
    }
    void pool_bwd(unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr idx,
                  CUdeviceptr Yp) override {
        const size_t n = size_t(P) * (H / 2) * (W / 2);
        const std::vector<double> mask = Yp ? get(Yp, n) : std::vector<double>{};
        put(dX, maxpool2_backward(P, H, W, get(dY, n), std::vector<uint32_t>(host<uint32_t>(idx), host<uint32_t>(idx) + n),
                                  Yp ? &mask : nullptr));
    }
    // fused_output: y = b + W a; D2 = the loss code's delta; D1 = (W^T D2) f' (ReLU: where a > 0).
    // The fused kernels' float64 references (reference.hpp), on the buffers' float values.
    // fused_output: for GELU, Z from D1 (fused_forward's Z output, as train points it there).
    void fused_output(const FusedArgs& f) override {
        const std::vector<float> Z = f.act == kActGelu ? getf(f.D1, size_t(f.B) * f.H) : std::vector<float>{};
        const RefFusedOutput r = ref_fused_output(getf(f.A1, size_t(f.B) * f.H), getf(f.W2, size_t(f.O) * f.H),
                                                  getf(f.b2, f.O), getf(f.T, size_t(f.B) * f.O), f.B, f.H, f.O,
                                                  f.loss, f.act, f.act == kActGelu ? &Z : nullptr);
        put(f.Y, r.Y.v);
        put(f.D2, r.D2.v);
        put(f.D1, r.D1.v);
    }
    // fused_forward: A = f(X W^T + b); for GELU Z into D1 as well (launch_fused_forward's rule).
    void fused_forward(const FusedArgs& f) override {
        Bounded Z;
        put(f.A1, ref_fused_forward(getf(f.X, size_t(f.B) * f.I), getf(f.W1, size_t(f.H) * f.I), getf(f.b1, f.H), f.B,
                                    f.I, f.H, f.act, &Z)
                      .v);
        if (f.act == kActGelu) {
            REQUIRE(f.D1 != 0);
            put(f.D1, Z.v);
        }
    }
    // act.ptx: A = f(Z); G = dA * f' from A (codes 0..3; ReLU a select) or Z (GELU), G may be dA.
    void act_fwd(unsigned n, CUdeviceptr A, CUdeviceptr Z, unsigned code) override {
        ++act_launches;
        put(A, ref_act_fwd(getf(Z, n), code).v);
    }
    void act_bwd(unsigned n, CUdeviceptr G, CUdeviceptr dA, CUdeviceptr A, CUdeviceptr Z, unsigned code) override {
        ++act_launches;
        REQUIRE((code == kActGelu ? Z : A) != 0);
        const std::vector<float> none(n, 0.0f);
        put(G, ref_act_bwd(getf(dA, n), code == kActGelu ? none : getf(A, n), code == kActGelu ? getf(Z, n) : none,
                           code)
                   .v);
    }
    int act_launches = 0;
    void fc_bwd_data(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr W,
                     unsigned act) override {
        const ConvDims d{B, I, 1, 1, O, 1};
        conv_bwd_data(d, dX, dY, Y, W, act);
    }
    // With wgk: an fc layer's deltas as dense_wg_k runs them where the step keeps W^T (KernelOps'
    // rule: dY already dL/dZ or no activation), dX = dY W from W^T, unmasked dY, then +0 where
    // !(Yb > 0); else fc_bwd_data. A wrong dz in the data flow (dY taken as masked when it is
    // not) carries gradient through dead units: the float64 comparison fails.
    bool wgk = false;
    int wgk_deltas = 0, transposes = 0;
    bool fc_deltas(const FcDeltas& d) override {
        if (!wgk || !d.Wt || !(d.act == 0 || d.dy_masked)) return CnnOps::fc_deltas(d);
        ++wgk_deltas;
        const std::vector<double> dy = get(d.dY, size_t(d.B) * d.O), wt = get(d.Wt, size_t(d.I) * d.O);
        std::vector<double> dx(size_t(d.B) * d.I, 0.0);
        for (size_t s = 0; s < d.B; ++s)
            for (size_t i = 0; i < d.I; ++i) {
                double sum = 0.0;
                for (size_t o = 0; o < d.O; ++o) sum += dy[s * d.O + o] * wt[i * d.O + o];
                dx[s * d.I + i] = d.Yb && !(host<float>(d.Yb)[s * d.I + i] > 0.0f) ? 0.0 : sum;
            }
        put(d.dX, dx);
        return d.Yb != 0;
    }
    void transpose_weights(unsigned O, unsigned I, CUdeviceptr Wt, CUdeviceptr W) override {
        ++transposes;
        for (size_t o = 0; o < O; ++o)
            for (size_t i = 0; i < I; ++i) host<float>(Wt)[i * O + o] = host<float>(W)[o * I + i];
    }
    void fused_grad(const FusedArgs& f) override {
        Bounded G, Gb;
        ref_fused_grad(G, Gb, getf(f.D1, size_t(f.B) * f.H), getf(f.X, size_t(f.B) * f.I), f.B, f.H, f.I, f.scale);
        put(f.GW1, G.v);
        put(f.Gb1, Gb.v);
        ref_fused_grad(G, Gb, getf(f.D2, size_t(f.B) * f.O), getf(f.A1, size_t(f.B) * f.H), f.B, f.O, f.H, f.scale);
        put(f.GW2, G.v);
        put(f.Gb2, Gb.v);
    }
    // A layer's own kernel (bn's): the step row's float64 semantics on the buffers' float values.
    void layer_kernel(const LayerKernel& k) override {
        REQUIRE(k.host64);
        k.host64();
    }
    // The ranges cnn_backward says are ready for the optimizer, in order; each overwritten with
    // NaN in `params` (as an update in place would change it), so that a launch issued after
    // params_ready that still read them (a deltas pass) would spoil the gradient.
    std::vector<std::pair<size_t, size_t>> ready;
    std::vector<float>* params = nullptr;
    void params_ready(size_t first, size_t count) override {
        ready.emplace_back(first, count);
        REQUIRE(params);
        REQUIRE(first + count <= params->size());
        std::fill(params->begin() + first, params->begin() + first + count, std::nanf(""));
    }
};

// params_ready's ranges: each conv and fc layer's parameters exactly once (the last two fc
// layers' as one range when fused_grad takes both), none of a bn's.
void check_ready_ranges(const Model& m, std::vector<std::pair<size_t, size_t>> ready) {
    std::vector<char> seen(m.param_count, 0);
    for (const auto& [first, count] : ready)
        for (size_t i = first; i < first + count; ++i) ++seen[i];
    for (const LayerSpec& l : m.layers) {
        const size_t end = l.bias_offset + l.bias_count();
        for (size_t i = l.weight_offset; i < end; ++i) {
            CAPTURE(l.name);
            CAPTURE(i);
            CHECK(seen[i] == (l.is_bn() ? 0 : 1));
            if (seen[i] != (l.is_bn() ? 0 : 1)) return;
        }
    }
}

}  // namespace

TEST_CASE("train_cnn: the flags it takes and those it refuses, with the reason") {
    TrainConfig c;
    c.model = parse_model("cnn");
    CHECK_NOTHROW(c.validate_flags());
    // Every activation (ReLU in the kernels' epilogues, the others through act.ptx).
    for (Activation a : {Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid, Activation::Gelu}) {
        c.activation = a;
        CHECK_NOTHROW(c.validate_flags());
    }
    c.activation = Activation::Relu;
    c.batch = 0;
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("--batch must be at least 1"), InputError);
    c.batch = 64;
    // The MLP's layer checks are not a model's: its `layers` are not used.
    c.layers = {};
    CHECK_NOTHROW(c.validate_flags());
    c.model = parse_model("conv4,pool,fc10", Shape3{1, 8, 8});
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("takes 1x8x8 images; MNIST's are 1x28x28"), InputError);
    // Every conv and pool layer of a 28x28 model fits the kernels, 5x5 included.
    c.model = parse_model("conv16k5,pool,conv32k5,pool,conv8k1,fc64,fc10");
    CHECK_NOTHROW(c.validate_flags());
}

TEST_CASE("train_cnn: the kernels a run loads") {
    OptimConfig o;
    auto has = [](const std::vector<std::string>& v, const char* e) { return std::find(v.begin(), v.end(), e) != v.end(); };
    const auto v = cnn_training_entries(o);
    for (const char* e : {"conv_fwd", "conv_bwd_data", "conv_bwd_weights", "pool_fwd", "pool_bwd", "fused_output",
                          "fused_forward", "fused_grad", "fc_bwd_data", "gather", "optim_sgd", "dense_mm"})
        CHECK(has(v, e));
    o.kind = OptimKind::Adam;
    CHECK(has(cnn_training_entries(o), "optim_adam"));
    CHECK(kCnnDefaultLr == 0.05f);
    // `ptxlab eval` loads only the forward pass's kernels: the hidden fc layers' fused_forward
    // among them (an eval of `--model cnn`, whose fc128 is hidden, once stopped on its absence).
    const auto f = cnn_forward_entries();
    for (const char* e : {"conv_fwd", "pool_fwd", "fused_forward", "fused_output", "dense_mm"}) CHECK(has(f, e));
    for (const auto& e : f) CHECK(has(v, e.c_str()));
    CHECK_FALSE(has(v, "tc_conv_fwd"));
    // --kernels tc: the tensor-core convolutions besides the FP32 ones (a pass over fewer than
    // kTcConvMinChannels channels, conv1's forward, stays FP32), in training and in eval.
    const auto t = cnn_training_entries(o, ConvKernels::Tc);
    for (const char* e : {"tc_conv_fwd", "tc_conv_bwd_data", "tc_conv_bwd_weights", "conv_fwd", "conv_bwd_data",
                          "conv_bwd_weights"})
        CHECK(has(t, e));
    CHECK_FALSE(has(v, "tc_conv_bwd_weights"));
    const auto tf = cnn_forward_entries(ConvKernels::Tc);
    CHECK(has(tf, "tc_conv_fwd"));
    CHECK(has(tf, "conv_fwd"));
    CHECK_FALSE(has(tf, "tc_conv_bwd_data"));
    CHECK_FALSE(has(tf, "tc_conv_bwd_weights"));
    CHECK(conv_kernels_of({Design::Tc, KernelSource::Reference}) == ConvKernels::Tc);
    CHECK(conv_kernels_of({Design::Seed, KernelSource::Ptx}) == ConvKernels::Fp32);
}

namespace {

// The trainer's cnn_forward and cnn_backward (the same code the GPU runs, with HostOps for the
// launches) on `spec` at B = 3 on 8x8 images, against model_loss_grad64's logits and gradient.
// act.ptx's passes: none with ReLU; else after a conv with the activation, or a bn with tanh,
// sigmoid or GELU (ReLU and leaky-ReLU in bn's own epilogue); act_bwd for an fc but the one under the last.
void check_act_passes(const Model& m, const HostOps& ops, Activation act) {
    if (act == Activation::Relu) {
        CHECK(ops.act_launches == 0);
        return;
    }
    const bool bn_own = act == Activation::LeakyRelu;
    bool act_pass = false;
    for (size_t l = 0; l + 1 < m.layers.size(); ++l) {
        const LayerSpec& ly = m.layers[l];
        act_pass |= ly.activation && (ly.kind == LayerKind::Conv || (ly.is_bn() && !bn_own) ||
                                      (ly.kind == LayerKind::Fc && l + 2 != m.layers.size()));
    }
    CHECK((ops.act_launches > 0) == act_pass);
}

std::vector<float> check_host_step(const char* spec, Loss loss, bool fuse, Activation act) {
    CAPTURE(spec);
    CAPTURE(to_string(loss));
    CAPTURE(fuse);
    CAPTURE(to_string(act));
    const Shape3 in{1, 8, 8};
    const unsigned B = 3;
    const Model m = parse_model(spec, in);
    std::vector<float> params = init_model_params(m, Init::Torch, 4);
    for (auto& p : params) p *= 2.0f;  // fewer dead ReLUs
    Rng rng(8);
    std::vector<float> X(size_t(B) * in.size()), T(size_t(B) * kClasses, 0.0f);
    std::vector<uint8_t> labels(B);
    for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
    for (unsigned s = 0; s < B; ++s) T[s * kClasses + (labels[s] = uint8_t(rng.below(10)))] = 1.0f;
    // The buffers, NaN-poisoned: whatever is read before it is written shows.
    const float nan = std::nanf("");
    std::vector<float> grads(m.param_count, nan), Y(size_t(B) * kClasses, nan), D2(Y.size(), nan);
    std::vector<std::vector<float>> out, delta, z;
    std::vector<std::vector<uint32_t>> idx;
    for (const LayerSpec& l : m.layers) {
        out.emplace_back(size_t(B) * l.out.size(), nan);
        z.emplace_back(size_t(B) * l.out.size(), nan);
        idx.emplace_back(size_t(B) * l.out.size(), 0xffffffffu);
        if (out.size() < m.layers.size()) delta.emplace_back(size_t(B) * l.out.size(), nan);
    }
    CnnBuffers b;
    b.B = B;
    b.act = act;
    b.params = addr(params.data());
    b.grads = addr(grads.data());
    b.D2 = addr(D2.data());
    for (auto& d : delta) b.delta.push_back(addr(d.data()));
    for (size_t l = 0; l < m.layers.size(); ++l) {
        b.out.push_back(addr(out[l].data()));
        b.idx.push_back(addr(idx[l].data()));
        b.z.push_back(addr(z[l].data()));
    }
    std::vector<float> running = m.initial_buffers();
    b.running = addr(running.data());
    const std::vector<float> params0 = params;  // params_ready poisons the parameters it is told of
    HostOps ops;
    ops.params = &params;
    ops.fuse = fuse;
    // With the fusions, the layers the tc set keeps W^T for run their deltas as dense_wg_k does.
    ops.wgk = fuse;
    std::vector<std::vector<float>> wt(m.layers.size());
    int kept = 0;
    for (size_t l = 0; l < m.layers.size(); ++l) {
        const bool keep = fuse && cnn_detail::keeps_transposed_weights(m, l, true, true);
        if (keep) wt[l].assign(m.layers[l].weight_count(), nan), ++kept;
        b.wt.push_back(keep ? addr(wt[l].data()) : 0);
    }
    cnn_transpose_weights(ops, m, b);
    CHECK(ops.transposes == kept);
    cnn_forward(ops, m, b, addr(X.data()), addr(T.data()), addr(Y.data()), loss_code(loss));
    cnn_backward(ops, m, b, addr(X.data()), grad_scale(loss, B, kClasses));
    // Every conv under a pool pools in conv_fwd when the ops can, with ReLU; another activation
    // runs conv -> act_fwd -> pool, and act.ptx's passes only then.
    const std::string sp = spec;
    const int pools = sp == "conv4,pool,conv3k5,pool,fc6,fc10"                                               ? 2
                      : sp == "conv4,pool,fc10" || sp == "pool,conv2,pool,fc10" || sp == "conv4,pool,fc8,fc10" ? 1
                                                                                                               : 0;
    CHECK(ops.pooled == (fuse && act == Activation::Relu ? pools : 0));
    // A conv over a pool over a conv: the pool's backward in the upper conv's deltas pass (any
    // activation; the pool's output deltas stay NaN, unread).
    CHECK(ops.pooled_bwd == (fuse && sp == "conv4,pool,conv3k5,pool,fc6,fc10" ? 1 : 0));
    // dense_wg_k's deltas wherever W^T is kept: after fused_output's masked D1 and then down the
    // chain of masked deltas (each fc layer of widths % 4 == 0 over another fc); with ReLU not
    // under fc_bwd_data's unmasked deltas (fc8,fc8,fc6,fc10's fc2), with other activations there
    // too (act_bwd made dL/dZ).
    const int wgk = sp == "fc8,fc8,fc4,fc10"                                                      ? 2
                    : sp == "fc6,fc5,fc4,fc10"                                                          ? 1
                    : sp == "fc8,fc8,fc6,fc10" && act != Activation::Relu                               ? 1
                                                                                                        : 0;
    CHECK(ops.wgk_deltas == (fuse ? wgk : 0));
    check_act_passes(m, ops, act);
    check_ready_ranges(m, ops.ready);

    Recipe r;
    r.loss = loss;
    r.activation = act;
    const std::vector<double> P(params0.begin(), params0.end()), X64(X.begin(), X.end());
    const std::vector<float> run0 = m.initial_buffers();
    std::vector<double> g, run64(run0.begin(), run0.end());
    model_loss_grad64(m, P, r, X64, labels, B, &g, &run64);
    for (size_t i = 0; i < running.size(); ++i) CHECK(running[i] == doctest::Approx(run64[i]).epsilon(1e-5));
    const auto f = model_forward64(m, P, X64, B, act);
    for (size_t i = 0; i < Y.size(); ++i) CHECK(Y[i] == doctest::Approx(f.logits()[i]).epsilon(1e-5));
    // float32 buffers between float64 operations: each within 1e-5 of the largest |g|.
    double gmax = 0;
    for (double v : g) gmax = std::max(gmax, std::fabs(v));
    REQUIRE(gmax > 0);
    size_t bad = 0;
    for (size_t i = 0; i < g.size(); ++i)
        if (!(std::fabs(double(grads[i]) - g[i]) <= 1e-5 * gmax)) {
            if (bad++ < 5) CHECK_MESSAGE(false, "parameter ", i, ": ", grads[i], " vs ", g[i]);
        }
    CHECK(bad == 0);
    return grads;
}

// The last three with bn: after each conv and a hidden fc (the running statistics checked too),
// straight into the last fc, and under another fc.
const char* const kHostSpecs[] = {"conv4,pool,conv3k5,pool,fc6,fc10", "conv4,pool,fc10", "pool,conv2,pool,fc10",
                                  "conv3k1,fc7,fc10", "conv2k1,fc10", "fc6,fc5,fc4,fc10", "fc7,fc10",
                                  "conv4,bn,pool,conv3k5,bn,pool,fc6,bn,fc10", "conv3,bn,fc10", "fc6,bn,fc5,fc10",
                                  "fc8,fc8,fc4,fc10", "conv4,fc8,fc10", "conv4,pool,fc8,fc10", "fc8,fc8,fc6,fc10"};

}  // namespace

TEST_CASE("train_cnn: the step's data flow, run on host memory, gives the float64 reference's logits and gradient") {
    // Each loss, ten models (two convs and two fc; a pool straight into the last fc; a pool
    // first; a 1x1 conv; a conv straight into the last fc; fc only, 3 and 1 hidden layers), each
    // with and without the pools in conv_fwd (ops.fuse); three of them with bn.
    for (const char* spec : kHostSpecs)
        for (Loss loss : {Loss::Ce, Loss::Mse, Loss::HalfSse}) {
            // The pools in the conv kernels (forward and backward) change no bit of the gradient.
            const std::vector<float> g0 = check_host_step(spec, loss, false, Activation::Relu);
            const std::vector<float> g1 = check_host_step(spec, loss, true, Activation::Relu);
            CHECK(std::memcmp(g0.data(), g1.data(), g0.size() * 4) == 0);
        }
}

TEST_CASE("train_cnn: every activation's data flow (act.ptx's passes, conv -> act -> pool) gives the float64 step") {
    // Every model above with each activation other than ReLU, two losses (CE, and MSE or half-SSE
    // in turn), with and without the pools in conv_fwd (which the activation turns off).
    unsigned n = 0;
    for (Activation act : {Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid, Activation::Gelu})
        for (const char* spec : kHostSpecs)
            for (Loss loss : {Loss::Ce, ++n % 2 ? Loss::Mse : Loss::HalfSse})
                for (bool fuse : {false, true}) check_host_step(spec, loss, fuse, act);
}

TEST_CASE("train_cnn: an fc layer is a 1x1 convolution of a 1x1 image") {
    const Model m = parse_model("cnn");
    const ConvDims d = cnn_kernel_dims(m.layers[4], 64);  // fc1: 64x7x7 -> 128
    CHECK(d.N == 64);
    CHECK(d.C == 3136);
    CHECK(d.H == 1);
    CHECK(d.W == 1);
    CHECK(d.K == 128);
    CHECK(d.KS == 1);
    CHECK(d.w_size() == m.layers[4].weight_count());  // nn.Linear's [out][in] is Conv2d's [out][in][1][1]
    const ConvDims c = cnn_kernel_dims(m.layers[2], 64);  // conv2: 32x14x14 -> 64, 3x3
    CHECK(c.C == 32);
    CHECK(c.H == 14);
    CHECK(c.K == 64);
    CHECK(c.KS == 3);
}

TEST_CASE("train_cnn: the kernels a step launches, as train prints them") {
    // Three small fc layers (under dense.hpp's kDenseMin weights a layer): fused_forward,
    // fc_bwd_data and fc1's weight gradient on tc_grad_weights (tc) or dense_mm (FP32: a 1x1
    // conv_bwd_weights would be milliseconds); the last two share fused_grad.
    const Model fc = parse_model("fc256,fc128,fc10");
    CHECK(cnn_step_kernels(fc, ConvKernels::Tc, 64) ==
          "fused_forward x2, fused_output, fused_grad, fc_bwd_data, tc_grad_weights");
    CHECK(cnn_step_kernels(fc, ConvKernels::Fp32, 64) == "fused_forward x2, fused_output, fused_grad, fc_bwd_data, dense_mm");
    // 1024-wide: the products on dense_mm, the weight gradients at batch 64 on tc_grad_weights_wide
    // (tc; the last two layers' as two launches; dense_mm on FP32 and past batch 128).
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 64) ==
          "dense_mm x3, fused_output, tc_grad_weights_wide x3");
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 128) ==
          "dense_mm x3, fused_output, tc_grad_weights_wide x3");
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 129) == "dense_mm x6, fused_output");
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Fp32, 64) == "dense_mm x6, fused_output");
    // At batch 4096, without dense_wg_k (a device other than 9.0: test_densewgk.cpp has 9.0's), the
    // tc set's products of a full wave of 128 x 128 tiles or more (densetc.hpp's
    // kDenseTcMinOutputs) take dense_tc: both forward passes and fc2's deltas
    // (4096 x 1024 outputs); the weight gradients (1024 x 785, 1024 x 1025, 10 x 1025) stay on
    // dense_mm. The FP32 set keeps dense_mm everywhere, and batch 64 is as above on either set.
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 4096) ==
          "dense_tc x3, fused_output, dense_mm x3");
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Fp32, 4096) == "dense_mm x6, fused_output");
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 2048) == "dense_mm x6, fused_output");
    CHECK(cnn_step_kernels(fc, ConvKernels::Tc, 64).find("dense_tc") == std::string::npos);
    // The default CNN: its fc layers are a pair, so no dense weight gradient changes kernel.
    const std::string cnn = cnn_step_kernels(parse_model("cnn"), ConvKernels::Tc, 64);
    CHECK(cnn.find("dense_tc") == std::string::npos);
    CHECK(cnn.find("tc_grad_weights") == std::string::npos);
    CHECK(cnn.find("conv_fwd+pool") != std::string::npos);
    CHECK(cnn.find("tc_conv_fwd+pool") != std::string::npos);
}

TEST_CASE("train_cnn: bn layers: the kernels a step launches, the batch they take") {
    const Model m = parse_model("conv32,bn,pool,conv64,bn,pool,fc128,fc10");
    const std::string k = cnn_step_kernels(m, ConvKernels::Tc, 64);
    MESSAGE(k);
    CHECK(k.find("bn_fwd x2") != std::string::npos);
    CHECK(k.find("bn_bwd x2") != std::string::npos);
    CHECK(k.find("+pool") == std::string::npos);  // a bn between: the conv's epilogue cannot pool
    CHECK(k.find("act_") == std::string::npos);
    const std::string table = cnn_layer_kernels(m, ConvKernels::Tc, 64);
    MESSAGE(table);
    CHECK(table.find("bn1     bn_fwd") != std::string::npos);
    // Leaky-ReLU in bn's epilogue; tanh, sigmoid and GELU: bn_fwd without, then act_fwd.
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::LeakyRelu).find("act_") == std::string::npos);
    for (Activation act : {Activation::Tanh, Activation::Sigmoid, Activation::Gelu}) {
        const std::string ka = cnn_step_kernels(m, ConvKernels::Tc, 64, act);
        CAPTURE(ka);
        CHECK(ka.find("bn_fwd x2") != std::string::npos);
        CHECK(ka.find("act_fwd x2") != std::string::npos);
        CHECK(ka.find("act_bwd x2") != std::string::npos);
        CHECK(cnn_layer_kernels(m, ConvKernels::Tc, 64, act).find("bn1     bn_fwd, act_fwd") != std::string::npos);
    }
    // Under the last fc, fused_output applies the derivative: act_fwd, no act_bwd.
    const Model mg = parse_model("conv8,pool,fc64,bn,fc10");
    const std::string kg = cnn_step_kernels(mg, ConvKernels::Tc, 64, Activation::Gelu);
    CAPTURE(kg);
    CHECK(kg.find("act_fwd x2") != std::string::npos);
    CHECK(kg.find("act_bwd x") == std::string::npos);  // conv1's alone
    CHECK(cnn_layer_kernels(mg, ConvKernels::Tc, 64, Activation::Gelu).find("bn1     bn_fwd, act_fwd  ") !=
          std::string::npos);
    // An fc under a bn has no activation: tc_forward with the tensor cores, a 1x1 conv_fwd in FP32.
    CHECK(cnn_step_kernels(parse_model("fc64,bn,fc10"), ConvKernels::Tc, 64).find("tc_forward, bn_fwd") == 0);
    CHECK(cnn_step_kernels(parse_model("fc64,bn,fc10"), ConvKernels::Fp32, 64).find("conv_fwd, bn_fwd") == 0);
    const auto tf = cnn_forward_entries(ConvKernels::Tc);
    CHECK(std::find(tf.begin(), tf.end(), "tc_forward") != tf.end());
    OptimConfig o;
    const auto v = cnn_training_entries(o);
    CHECK(std::find(v.begin(), v.end(), "bn_bwd") != v.end());
    const auto f = cnn_forward_entries();
    CHECK(std::find(f.begin(), f.end(), "bn_fwd") != f.end());
    TrainConfig c;
    c.model = m;
    CHECK_NOTHROW(c.validate_flags());
    for (Activation act : {Activation::LeakyRelu, Activation::Tanh, Activation::Sigmoid, Activation::Gelu}) {
        c.activation = act;
        CHECK_NOTHROW(c.validate_flags());
    }
    c.activation = Activation::Relu;
    c.model = parse_model("fc64,bn,fc10");
    c.batch = 1;  // BatchNorm1d of one value a channel, as PyTorch refuses in training
    CHECK_THROWS_WITH_AS(c.validate_flags(), doctest::Contains("more than 1 value per channel"), InputError);
    c.model = parse_model("conv8,bn,pool,fc10");
    CHECK_NOTHROW(c.validate_flags());  // BatchNorm2d at batch 1: 784 values a channel
}

TEST_CASE("train_cnn: the kernels of each layer, as train prints them") {
    const std::string cnn = cnn_layer_kernels(parse_model("cnn"), ConvKernels::Tc, 64);
    MESSAGE(cnn);
    auto row = [](const std::string& table, const std::string& layer) {
        const size_t at = table.find("\n  " + layer + " ");
        REQUIRE(at != std::string::npos);
        return table.substr(at + 1, table.find('\n', at + 1) - at - 1);
    };
    CHECK(row(cnn, "conv1").find("conv_fwd+pool") != std::string::npos);
    CHECK(row(cnn, "conv1").find("conv_bwd_weights") != std::string::npos);
    CHECK(row(cnn, "pool1").find("in conv1's epilogue") != std::string::npos);
    CHECK(row(cnn, "conv2").find("tc_conv_fwd+pool") != std::string::npos);
    CHECK(row(cnn, "conv2").find("tc_conv_bwd_data") != std::string::npos);
    CHECK(row(cnn, "conv2").find("tc_conv_bwd_weights") != std::string::npos);
    CHECK(row(cnn, "pool2").find("pool_bwd") != std::string::npos);
    // By default pool1's backward is its own pool_bwd (TrainConfig::pool_bwd_in_conv off).
    CHECK(row(cnn, "pool1").find("pool_bwd") != std::string::npos);
    CHECK(cnn.find("bwd_data+pool") == std::string::npos);
    CHECK(cnn_step_kernels(parse_model("cnn"), ConvKernels::Tc, 64).find("pool_bwd x2") != std::string::npos);
    // Asked for: pool1's backward in conv2's tc_conv_bwd_data (its epilogue); the FP32 set keeps pool_bwd.
    const std::string fused = cnn_layer_kernels(parse_model("cnn"), ConvKernels::Tc, 64, Activation::Relu, true);
    CHECK(row(fused, "conv2").find("tc_conv_bwd_data+pool") != std::string::npos);
    CHECK(row(fused, "pool1").find("in conv2's epilogue") != std::string::npos);
    CHECK(row(fused, "pool1").find("pool_bwd") == std::string::npos);
    const std::string fp = cnn_layer_kernels(parse_model("cnn"), ConvKernels::Fp32, 64, Activation::Relu, true);
    CHECK(row(fp, "pool1").find("pool_bwd") != std::string::npos);
    CHECK(fp.find("bwd_data+pool") == std::string::npos);
    const std::string steps = cnn_step_kernels(parse_model("cnn"), ConvKernels::Tc, 64, Activation::Relu, true);
    CHECK(steps.find("pool_bwd") != std::string::npos);  // pool2's
    CHECK(steps.find("pool_bwd x2") == std::string::npos);
    // Every conv over a pool over a conv (the GPU test's net: conv3 on 7x7 under the last fc).
    const std::string three =
        cnn_step_kernels(parse_model("conv8,pool,conv16,pool,conv16,fc10"), ConvKernels::Tc, 5, Activation::Relu, true);
    MESSAGE(three);
    CHECK(three.find("tc_conv_bwd_data+pool x2") != std::string::npos);
    CHECK(three.find("pool_bwd") == std::string::npos);
    // 3136 x 128 (401K weights) is under kDenseMin: fc1 keeps the older kernels, 116 against 132 us a step.
    CHECK(row(cnn, "fc1").find("fused_forward") != std::string::npos);
    CHECK(row(cnn, "fc1").find("fused_grad (with fc2)") != std::string::npos);
    CHECK(row(cnn, "fc1").find("dense_mm") == std::string::npos);
    CHECK(row(cnn, "fc2").find("fused_output (logits, loss)") != std::string::npos);
    // A large hidden fc layer's forward pass, deltas and weight gradient on dense_mm with the FP32
    // set; the tc set's weight gradients at batch 64 on tc_grad_weights_wide.
    for (ConvKernels k : {ConvKernels::Tc, ConvKernels::Fp32}) {
        const std::string fc3 = cnn_layer_kernels(parse_model("fc1024,fc1024,fc10"), k, 64);
        const std::string fc1 = row(fc3, "fc1"), fc2 = row(fc3, "fc2");
        const std::string grad = k == ConvKernels::Tc ? "tc_grad_weights_wide" : "dense_mm";
        CHECK(fc1.find("dense_mm") != std::string::npos);  // the forward pass
        CHECK(fc1.rfind(grad) > fc1.find("dense_mm"));      // and the weight gradient
        CHECK(fc1.find(" - ") != std::string::npos);        // no deltas below the first layer
        CHECK(fc2.find("dense_mm") != fc2.rfind("dense_mm"));  // the forward pass and the deltas
        CHECK(fc2.find(grad + " (with fc3)") != std::string::npos);
    }
    // A small one keeps the older kernels; its FP32 weight gradient is dense_mm's.
    const std::string small = row(cnn_layer_kernels(parse_model("fc256,fc128,fc10"), ConvKernels::Fp32, 64), "fc1");
    CHECK(small.find("fused_forward") != std::string::npos);
    CHECK(small.find("dense_mm") != std::string::npos);
}

TEST_CASE("train: an MLP run's step, and why no one-launch step runs it") {
    TrainConfig c;
    c.kernels = {Design::Fused, KernelSource::Ptx};
    CHECK(mlp_step_kernels(c) == "fused_step (the whole step in one launch, every step of a chunk a launch)");
    c.steps_per_launch = 1;
    CHECK(mlp_step_kernels(c) == "fused_step (the whole step in one launch, 1 steps a launch)");
    for (OptimKind k : {OptimKind::Sgd, OptimKind::Adam, OptimKind::RmsProp, OptimKind::NAdam}) {  // every rule
        CAPTURE(to_string(k));
        c.optim.kind = k;
        CHECK(mlp_step_kernels(c) == "fused_step (the whole step in one launch, 1 steps a launch)");
    }
    c.optim.kind = OptimKind::Nesterov;
    c.batch = 256;
    CHECK(mlp_step_kernels(c) == "fused_forward, fused_output, fused_grad, optim_sgd (no one-launch step: fused_step "
                                 "takes batches up to 64 (larger ones run faster as separate launches))");
    c.batch = 64;
    c.one_launch = false;
    CHECK(mlp_step_kernels(c).find("(no one-launch step: --three-launches)") != std::string::npos);
    c.one_launch = true;
    c.kernels = {Design::Tc, KernelSource::Ptx};
    c.layers = {784, 256, 10};
    CHECK(mlp_step_kernels(c).find("tc_forward, fused_output, tc_grad_weights, optim_sgd (no one-launch step: tc_step: ") == 0);
    c.layers = {784, 64, 32, 10};
    c.kernels = {Design::Seed, KernelSource::Ptx};
    CHECK(mlp_step_kernels(c) == "grad3, batch_mean x6, optim_sgd (no one-launch step: fused_step and tc_step take "
                                 "networks of 2 fc layers)");
}

TEST_CASE("train_cnn: another activation than ReLU shows act.ptx's launches, and no pool in a conv's epilogue") {
    auto row = [](const std::string& table, const std::string& layer) {
        const size_t at = table.find("\n  " + layer + " ");
        REQUIRE(at != std::string::npos);
        return table.substr(at + 1, table.find('\n', at + 1) - at - 1);
    };
    const Model cnn = parse_model("cnn");
    const std::string t = cnn_layer_kernels(cnn, ConvKernels::Tc, 64, Activation::Gelu, true);
    MESSAGE(t);
    CHECK(row(t, "conv1").find("conv_fwd, act_fwd") != std::string::npos);
    CHECK(row(t, "pool1").find("pool_fwd") != std::string::npos);
    CHECK(row(t, "conv2").find("tc_conv_fwd, act_fwd") != std::string::npos);
    CHECK(row(t, "conv2").find("act_bwd, tc_conv_bwd_data") != std::string::npos);
    CHECK(row(t, "conv1").find("act_bwd") != std::string::npos);
    CHECK(row(t, "fc1").find("act_bwd") == std::string::npos);  // fused_output applies fc1's derivative
    CHECK(t.find("fwd+pool") == std::string::npos);
    // The pool's backward has no mask to give up: pool1's still runs in conv2's deltas pass.
    CHECK(row(t, "conv2").find("tc_conv_bwd_data+pool") != std::string::npos);
    // A pool under the last fc: fc_bwd_data redoes its deltas without ReLU's mask.
    const std::string p = cnn_layer_kernels(parse_model("conv8,pool,fc10"), ConvKernels::Tc, 64, Activation::Tanh);
    CHECK(row(p, "fc1").find("fc_bwd_data") != std::string::npos);
    CHECK(row(cnn_layer_kernels(parse_model("conv8,pool,fc10"), ConvKernels::Tc, 64), "fc1").find("in fused_output") !=
          std::string::npos);
    CHECK(cnn_step_kernels(parse_model("fc256,fc128,fc10"), ConvKernels::Tc, 64, Activation::Sigmoid) ==
          "fused_forward x2, fused_output, fused_grad, fc_bwd_data, act_bwd, tc_grad_weights");
    // ReLU's listing is unchanged by the activation parameter.
    CHECK(cnn_layer_kernels(cnn, ConvKernels::Tc, 64, Activation::Relu) == cnn_layer_kernels(cnn, ConvKernels::Tc, 64));
}

TEST_CASE("train_cnn: the layer step table: a place for every layer kind, bn's row complete, its kernels loaded") {
    for (size_t k = 0; k < layer_rows().size(); ++k) CHECK_NOTHROW(layer_step_row(static_cast<LayerKind>(k)));
    CHECK_THROWS_AS(layer_step_row(static_cast<LayerKind>(layer_rows().size())), Error);
    // conv, pool and fc are the data flow's own.
    for (LayerKind k : {LayerKind::Conv, LayerKind::Pool, LayerKind::Fc}) CHECK(layer_step_row(k) == nullptr);
    const LayerStepRow* bn = layer_step_row(LayerKind::Bn);
    REQUIRE(bn);
    CHECK((bn->forward && bn->backward && bn->scratch && bn->unfit && bn->scratch_name && bn->weight_gradient));
    const Model m = parse_model("conv8,bn,pool,fc10");  // alive while l is used
    const LayerSpec& l = m.layers[1];
    CHECK(bn->scratch(l, 64) == 16);  // mean and rstd of 8 channels
    CHECK(bn->unfit(l, 64).empty());
    CHECK(bn->unfit(parse_model("fc8,bn,fc10").layers[1], 1).find("more than 1 value per channel") != std::string::npos);
    CHECK(layer_step_entries(false) == std::vector<std::string>{"bn_fwd"});
    CHECK(layer_step_entries(true) == std::vector<std::string>{"bn_fwd", "bn_bwd"});
    const auto f = cnn_forward_entries(), t = cnn_training_entries(OptimConfig{});
    CHECK(std::count(f.begin(), f.end(), "bn_fwd") == 1);
    CHECK(std::count(f.begin(), f.end(), "bn_bwd") == 0);
    CHECK(std::count(t.begin(), t.end(), "bn_fwd") == 1);
    CHECK(std::count(t.begin(), t.end(), "bn_bwd") == 1);
}
