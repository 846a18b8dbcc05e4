// ptx/densestep.ptx (dense_program): an fc network's whole training step but the optimizer in one
// launch (densestep.hpp's phase table), against a float64 reference of the step written from the
// network's maths (forward with ReLU, the loss delta, the deltas and the mean gradients), with
// bounds propagated layer by layer. Shape: B,loss,w0,w1,w2,w3,w4,w5: the batch, the loss code (0
// Y - T, 1 softmax cross-entropy) and the widths {I, H.., O} (3 to 6 of them: 2 to 5 layers),
// the unused ones 0 at the end.
#include "densestep.hpp"
#include "parallel_rows.hpp"
#include "recipe.hpp"
#include "registry.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>

namespace ptxlab::verify_detail {

namespace {

constexpr size_t kMaxWidths = 6;
constexpr double kU = 0x1p-24;
constexpr double kInf = std::numeric_limits<double>::infinity();

double gamma_of(size_t n) { return double(n) * kU / (1.0 - double(n) * kU); }
double prod(double a, double b) { return (a == 0.0 || b == 0.0) ? 0.0 : a * b; }  // 0 * inf = 0

// The roundings of one GEMM output beyond its K fma: ks - 1 adds (ks <= 8), the scale, the bias.
size_t depth(unsigned K) { return size_t(K) + kDenseStepCluster + 1; }

std::vector<unsigned> widths_of(const VerifyCase& c) {
    std::vector<unsigned> w;
    for (size_t i = 2; i < c.shape.size() && c.shape[i] != 0; ++i) w.push_back(c.shape[i]);
    return w;
}

// A bounded [rows][cols] matrix of float64 values.
struct Mat {
    unsigned rows = 0, cols = 0;
    Bounded m;
    Mat(unsigned r, unsigned c) : rows(r), cols(c) { m.resize(size_t(r) * c); }
    double& v(unsigned r, unsigned c) { return m.v[size_t(r) * cols + c]; }
    double& e(unsigned r, unsigned c) { return m.e[size_t(r) * cols + c]; }
};

// out[s][o] = b[o] + sum_i in[s][i] W[o][i], ReLU'd when hidden; kink[s][o]: a hidden unit whose
// sign the bound leaves open.
Mat forward_layer(Mat& in, const std::vector<float>& W, const std::vector<float>& b, unsigned O, bool hidden,
                  std::vector<char>& kink) {
    const unsigned B = in.rows, I = in.cols;
    Mat out(B, O);
    kink.assign(size_t(B) * O, 0);
    for_rows(B, double(I) * O, [&](size_t s0, size_t s1) {  // the samples: independent rows
        for (unsigned s = unsigned(s0); s < s1; ++s)
            for (unsigned o = 0; o < O; ++o) {
                double z = b[o], mag = std::fabs(double(b[o])), prop = 0.0;
                for (unsigned i = 0; i < I; ++i) {
                    const double w = W[size_t(o) * I + i];
                    z += w * in.v(s, i);
                    mag += prod(std::fabs(w), std::fabs(in.v(s, i)) + in.e(s, i));
                    prop += prod(std::fabs(w), in.e(s, i));
                }
                const double ez = gamma_of(depth(I)) * mag + prop;
                if (hidden) {
                    kink[size_t(s) * O + o] = std::fabs(z) <= ez;
                    z = std::max(z, 0.0);  // ReLU is 1-Lipschitz: the same bound
                }
                out.v(s, o) = z;
                out.e(s, o) = ez;
            }
    });
    return out;
}

// G = dY masked where the layer's output is <= 0 (not comparable at the kink).
Mat masked(Mat& dY, Mat& A, const std::vector<char>& kink) {
    Mat g(dY.rows, dY.cols);
    for (size_t i = 0; i < g.m.size(); ++i) {
        const bool on = A.m.v[i] > 0.0;
        g.m.v[i] = on ? dY.m.v[i] : 0.0;
        g.m.e[i] = kink[i] ? kInf : (on ? dY.m.e[i] : 0.0);
    }
    return g;
}

// dX[s][i] = sum_o G[s][o] W[o][i] (unmasked: the kernel stores the deltas so).
Mat deltas_below(Mat& G, const std::vector<float>& W, unsigned I) {
    const unsigned B = G.rows, O = G.cols;
    Mat dX(B, I);
    for_rows(B, double(I) * O, [&](size_t s0, size_t s1) {  // the samples: independent rows
        for (unsigned s = unsigned(s0); s < s1; ++s)
            for (unsigned i = 0; i < I; ++i) {
                double v = 0.0, mag = 0.0, prop = 0.0;
                for (unsigned o = 0; o < O; ++o) {
                    const double w = W[size_t(o) * I + i];
                    v += G.v(s, o) * w;
                    mag += prod(std::fabs(w), std::fabs(G.v(s, o)) + G.e(s, o));
                    prop += prod(std::fabs(w), G.e(s, o));
                }
                dX.v(s, i) = v;
                dX.e(s, i) = gamma_of(depth(O)) * mag + prop;
            }
    });
    return dX;
}

// gW[o][i] = scale sum_s G[s][o] in[s][i] and gb[o] = scale sum_s G[s][o], appended to the flat
// gradient (weights, then bias: the model's layout).
void weight_grads(Mat& G, Mat& in, double scale, Bounded& out) {
    const unsigned B = G.rows, O = G.cols, I = in.cols;
    const double g = gamma_of(depth(B)), sc = std::fabs(scale);
    const size_t base = out.v.size();
    out.v.resize(base + size_t(O) * I + O);
    out.e.resize(base + size_t(O) * I + O);
    // The value and bound of gW[o][i] (i >= 0) or gb[o] (i = -1), at out[at].
    auto one = [&](unsigned o, int i, size_t at) {
        double v = 0.0, mag = 0.0, prop = 0.0;
        for (unsigned s = 0; s < B; ++s) {
            const double l = G.v(s, o), el = G.e(s, o);
            const double x = i < 0 ? 1.0 : in.v(s, unsigned(i)), ex = i < 0 ? 0.0 : in.e(s, unsigned(i));
            v += l * x;
            mag += prod(std::fabs(l) + el, std::fabs(x) + ex);
            prop += prod(std::fabs(l), ex) + prod(std::fabs(x), el) + prod(el, ex);
        }
        out.v[at] = scale * v;
        out.e[at] = sc * (g * mag + prop * (1.0 + g));
    };
    for_rows(O, double(B) * (I + 1), [&](size_t o0, size_t o1) {  // the outputs: independent rows
        for (unsigned o = unsigned(o0); o < o1; ++o) {
            for (unsigned i = 0; i < I; ++i) one(o, int(i), base + size_t(o) * I + i);
            one(o, -1, base + size_t(O) * I + o);
        }
    });
}

// The flat parameters: per layer W [out][in] then b [out] (model.hpp's order for fc layers).
std::vector<Tensor::Part> param_parts(const std::vector<unsigned>& w) {
    std::vector<Tensor::Part> parts;
    size_t off = 0;
    for (size_t l = 0; l + 1 < w.size(); ++l) {
        parts.push_back({fmt::format("fc{}.weight", l + 1), off, {w[l + 1], w[l]}});
        off += size_t(w[l + 1]) * w[l];
        parts.push_back({fmt::format("fc{}.bias", l + 1), off, {w[l + 1]}});
        off += w[l + 1];
    }
    return parts;
}

// The phase tables the launches used (by content), kept until the harness goes: a table's
// buffer must outlive the kernel that reads it.
struct Tables {
    std::vector<std::pair<std::vector<DensePhase>, DeviceBuffer>> kept;
    CUdeviceptr upload(const std::vector<DensePhase>& t) {
        for (auto& [v, buf] : kept)
            if (v.size() == t.size() && std::memcmp(v.data(), t.data(), t.size() * sizeof(DensePhase)) == 0)
                return buf.ptr();
        kept.emplace_back(t, DeviceBuffer(t.size() * sizeof(DensePhase), "dense_program phase table"));
        kept.back().second.upload(t);
        return kept.back().second.ptr();
    }
};

// The launch of a case: the step's DenseNet on the harness's buffers, its plan for this device and
// kernel (the phase table uploaded once per distinct table), dense_program.
std::function<void(const Kernel&, const DevicePtrs&, CUstream)> densestep_launch(unsigned B, unsigned loss,
                                                                                 float scale,
                                                                                 std::vector<unsigned> w) {
    const size_t L = w.size() - 1;
    auto tables = std::make_shared<Tables>();
    return [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        DenseNet n;
        n.B = B, n.sizes = w, n.loss = loss, n.scale = scale;
        n.X = ptr(m, "X"), n.T = ptr(m, "T"), n.Y = ptr(m, "Y"), n.D = ptr(m, "D");
        size_t off = 0;
        for (size_t l = 0; l < L; ++l) {
            const size_t nw = size_t(w[l + 1]) * w[l];
            n.W.push_back(ptr(m, "P") + off * 4), n.gW.push_back(ptr(m, "G") + off * 4);
            n.b.push_back(ptr(m, "P") + (off + nw) * 4), n.gb.push_back(ptr(m, "G") + (off + nw) * 4);
            off += nw + w[l + 1];
            if (l + 1 < L) {
                n.act.push_back(m.at(fmt::format("A{}", l + 1)));
                n.delta.push_back(m.at(fmt::format("dA{}", l + 1)));
            }
        }
        const DenseStepPlan plan = densestep_plan(n, densestep_nominal_clusters(), densestep_max_clusters(k));
        const CUdeviceptr table = tables->upload(plan.phases);
        launch_dense_program(k, table, unsigned(plan.phases.size()), plan.clusters, ptr(m, "sync"), s);
    };
}

Harness make_densestep(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], loss = c.shape[1];
    const std::vector<unsigned> w = widths_of(c);
    const size_t L = w.size() - 1;
    const unsigned I = w[0], O = w[L];
    const float scale = grad_scale(loss == kLossSoftmax ? Loss::Ce : Loss::Mse, B, O);
    NetParams net = random_net(rng, w);
    std::vector<float> X = random_vector(rng, size_t(B) * I, 0.0f, 1.0f);
    std::vector<float> T = random_targets(rng, B, O);

    // float64: forward (a[0] = X exact), the loss delta, then down the layers.
    std::vector<Mat> a;
    a.emplace_back(B, I);
    for (size_t i = 0; i < X.size(); ++i) a[0].m.v[i] = X[i];
    std::vector<std::vector<char>> kink(L);
    for (size_t l = 0; l < L; ++l) a.push_back(forward_layer(a[l], net.W[l], net.b[l], w[l + 1], l + 1 < L, kink[l]));
    Mat D(B, O);
    for (unsigned s = 0; s < B; ++s)
        ref_output_delta(loss, &a[L].v(s, 0), &a[L].e(s, 0), T.data() + size_t(s) * O, O, &D.v(s, 0), &D.e(s, 0));
    std::vector<Bounded> grads(L);
    std::vector<Mat> deltas(L > 1 ? L - 1 : 0, Mat(0, 0));
    Mat G = D;
    for (size_t l = L; l-- > 0;) {
        weight_grads(G, a[l], scale, grads[l]);
        if (l == 0) break;
        deltas[l - 1] = deltas_below(G, net.W[l], w[l]);
        G = masked(deltas[l - 1], a[l], kink[l - 1]);
    }

    Harness h;
    std::vector<float> P;
    Bounded flat;
    for (size_t l = 0; l < L; ++l) {
        P.insert(P.end(), net.W[l].begin(), net.W[l].end());
        P.insert(P.end(), net.b[l].begin(), net.b[l].end());
        flat.v.insert(flat.v.end(), grads[l].v.begin(), grads[l].v.end());
        flat.e.insert(flat.e.end(), grads[l].e.begin(), grads[l].e.end());
    }
    const size_t np = P.size();
    h.tensors = {{"X", {B, I}, Role::In, X}, {"T", {B, O}, Role::In, T}, {"P", {np}, Role::In, std::move(P)}};
    h.tensors.back().parts = param_parts(w);
    // The outputs in data-flow order: the hidden outputs, Y, D, the deltas, the gradient.
    for (size_t l = 0; l + 1 < L; ++l) {
        h.tensors.push_back({fmt::format("A{}", l + 1), {B, w[l + 1]}, Role::Out, {}});
        h.expected[h.tensors.back().name] = a[l + 1].m;
    }
    h.tensors.push_back({"Y", {B, O}, Role::Out, {}});
    h.expected["Y"] = a[L].m;
    h.tensors.push_back({"D", {B, O}, Role::Out, {}});
    h.expected["D"] = D.m;
    for (size_t l = 0; l + 1 < L; ++l) {
        h.tensors.push_back({fmt::format("dA{}", l + 1), {B, w[l + 1]}, Role::Out, {}});
        h.expected[h.tensors.back().name] = deltas[l].m;
    }
    h.tensors.push_back({"G", {np}, Role::Out, {}});
    h.tensors.back().parts = param_parts(w);
    h.expected["G"] = std::move(flat);
    h.tensors.push_back({"sync", {2}, Role::In, {0.0f, 0.0f}});  // the barrier's 64-bit count, 0

    h.launch = densestep_launch(B, loss, scale, w);
    return h;
}

void validate_densestep(const VerifyCase& c) {
    const auto& z = c.shape;
    if (z.size() != 2 + kMaxWidths)
        PTXLAB_THROW(InputError,
                     "kernel 'dense_program' takes a shape B,loss,w0,w1,w2,w3,w4,w5 (8 numbers: the widths of 2 to 5 "
                     "layers, the unused ones 0 at the end), got {}",
                     z.size());
    if (z[0] == 0 || z[0] > 16384) PTXLAB_THROW(InputError, "kernel 'dense_program': B must be 1 .. 16384");
    if (z[1] > 1) PTXLAB_THROW(InputError, "kernel 'dense_program': loss must be 0 (Y - T) or 1 (softmax), got {}", z[1]);
    const size_t n = widths_of(c).size();
    if (n < 3) PTXLAB_THROW(InputError, "kernel 'dense_program': give at least 3 widths (2 layers), got {}", n);
    for (size_t i = 2; i < z.size(); ++i) {
        if (i >= 2 + n && z[i] != 0)
            PTXLAB_THROW(InputError, "kernel 'dense_program': a width after a 0 (the widths come first, then the 0s)");
        if (z[i] > 16384) PTXLAB_THROW(InputError, "kernel 'dense_program': widths must be 1 .. 16384");
    }
}

// The MNIST nets at batch 64 (784-256-128-10, the issue's; 784-1024-1024-10: more tiles than
// clusters, ksplit 4; 784-128-10, 2 layers); a batch of 1 and of 65 (a tile's rows part-empty);
// widths of 1 and odd widths; 4 and 5 layers; both loss codes.
std::vector<VerifyCase> densestep_default_cases() {
    const std::vector<std::vector<unsigned>> shapes = {
        {64, 1, 784, 256, 128, 10, 0, 0}, {64, 1, 784, 1024, 1024, 10, 0, 0}, {64, 1, 784, 128, 10, 0, 0, 0},
        {1, 1, 784, 256, 128, 10, 0, 0},  {65, 0, 784, 256, 128, 10, 0, 0},   {1, 1, 1, 1, 1, 0, 0, 0},
        {3, 0, 9, 5, 2, 7, 0, 0},         {33, 1, 100, 65, 63, 17, 10, 0},    {70, 0, 50, 129, 1, 64, 3, 10},
        {130, 1, 257, 67, 1, 0, 0, 0},    {500, 1, 784, 256, 128, 10, 0, 0},  {64, 1, 13, 300, 200, 100, 50, 10}};
    std::vector<VerifyCase> v;
    for (const auto& s : shapes) v.push_back({"dense_program", s});
    return v;
}

std::vector<VerifyCase> densestep_quick_cases() {
    return {{"dense_program", {64, 1, 784, 256, 128, 10, 0, 0}}, {"dense_program", {3, 0, 9, 5, 2, 7, 0, 0}}};
}

// bench: the network, 784-256-128-10 with cross-entropy, at batch B.
BenchShape densestep_bench_shape(unsigned B) { return std::vector<unsigned>{B, 1, 784, 256, 128, 10, 0, 0}; }

std::pair<double, double> densestep_work(const VerifyCase& c) {
    const std::vector<unsigned> w = widths_of(c);
    const double B = c.shape[0];
    double bytes = 4 * B * (w.front() + 2.0 * w.back()), flops = 0;
    for (size_t l = 0; l + 1 < w.size(); ++l) {
        const double params = double(w[l]) * w[l + 1] + w[l + 1];
        bytes += 4 * (2 * params + 2 * B * w[l + 1]);
        flops += 2 * B * params * 3;  // forward, deltas, weight gradient
    }
    return {bytes, flops};
}

std::vector<KernelRow> densestep_rows() {
    return {{.entry = "dense_program",
             .shape = "B,loss,w0,w1,w2,w3,w4,w5",
             .act_named = false,
             .validate = validate_densestep,
             .harness = make_densestep,
             .bench_shape = densestep_bench_shape,
             .work = densestep_work}};
}

}  // namespace

const KernelFamily& densestep_family() {
    static const KernelFamily f{"densestep", {"densestep"}, densestep_rows(), densestep_default_cases,
                                densestep_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{densestep_family, 140, 150};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
