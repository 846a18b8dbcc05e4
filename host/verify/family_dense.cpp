// ptx/dense.ptx (dense_mm): a dense layer's three products on one GEMM kernel, each checked
// against its own float64 loops (written from the layer's maths, not from the strides the
// launch passes, so a wrong stride cannot hide). Shape: op,B,I,O,act,cluster with op 0 the
// forward pass (Y[B][O] = X W^T + b, ReLU'd with act 1), 1 the deltas to the input (dX[B][I] =
// G W, G = dY masked by Y > 0 with act 1), 2 the weight gradient (dW[O][I] = scale G^T X,
// db[O] = scale sum_s G); cluster 0 the launch's own choice (dense_plan), else 1, 2, 4 or 8.
#include "dense.hpp"
#include "dense_products.hpp"
#include "parallel_rows.hpp"
#include "registry.hpp"

#include <algorithm>
#include <cmath>

namespace ptxlab::verify_detail {

namespace {

// The float64 loops below run on for_rows' threads, over independent output rows. The forward
// pass interleaves 4 samples' chains (dots4), the backward ones take kGroup rows at a time
// against one row of the other operand (which then stays in cache); each output's terms are
// still added one by one in the order of the layer's maths.
constexpr unsigned kGroup = 8;

double gamma_of(size_t n) {
    const double u = std::ldexp(1.0, -24);
    return double(n) * u / (1.0 - double(n) * u);
}

// The bound of one output: gamma over dense_depth (R = 8 where the launch picks it), times
// |scale| sum |a b| + |bias| (ReLU is 1-Lipschitz: the same bound).
double dense_bound(unsigned K, unsigned cluster, double mag) {
    return gamma_of(dense_depth(K, cluster ? cluster : kDenseMaxCluster)) * mag;
}


Harness make_forward(unsigned B, unsigned I, unsigned O, unsigned act, unsigned cl, Rng& rng) {
    const float w = 1.0f / std::sqrt(float(I));
    std::vector<float> X = random_vector(rng, size_t(B) * I, -1.0f, 1.0f);
    std::vector<float> W = random_vector(rng, size_t(O) * I, -w, w);
    std::vector<float> b = random_vector(rng, O, -w, w);
    Harness h;
    Bounded& Y = h.expected["Y"];
    Y.resize(size_t(B) * O);
    for_rows(B, double(I) * O, [&](size_t s0, size_t s1) {
        for (size_t g0 = s0; g0 < s1; g0 += 4)  // 4 samples against each row of W
            for (unsigned o = 0; o < O; ++o) {
                const size_t n = std::min<size_t>(s1 - g0, 4);
                double v[4] = {0, 0, 0, 0}, mag[4];
                std::fill_n(mag, 4, std::fabs(double(b[o])));
                dots4(X.data() + g0 * I, I, n, W.data() + size_t(o) * I, I, v, mag);
                for (size_t k = 0; k < n; ++k) {
                    const double z = v[k] + b[o];
                    Y.v[(g0 + k) * O + o] = act == 1 ? std::max(z, 0.0) : z;
                    Y.e[(g0 + k) * O + o] = dense_bound(I, cl, mag[k]);
                }
            }
    });
    h.tensors = {{"X", {B, I}, Role::In, X}, {"W", {O, I}, Role::In, W}, {"b", {O}, Role::In, b},
                 {"Y", {B, O}, Role::Out, {}}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_dense_mm(k, dense_forward_args(B, I, O, m.at("X"), m.at("W"), m.at("b"), m.at("Y"), act), s, cl);
    };
    return h;
}

Harness make_deltas(unsigned B, unsigned I, unsigned O, unsigned act, unsigned cl, Rng& rng) {
    const float w = 1.0f / std::sqrt(float(I));
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    std::vector<float> W = random_vector(rng, size_t(O) * I, -w, w);
    const std::vector<double> G = masked_g(dY, Y, act);
    Harness h;
    Bounded& dX = h.expected["dX"];
    dX.resize(size_t(B) * I);
    for_rows(B, double(I) * O, [&](size_t s0, size_t s1) {
        // kGroup samples' dX rows (sums and magnitudes), summed along W's rows.
        std::vector<double> v(size_t(kGroup) * I), mag(size_t(kGroup) * I);
        for (size_t g0 = s0; g0 < s1; g0 += kGroup) {
            const size_t n = std::min<size_t>(s1 - g0, kGroup);
            std::fill(v.begin(), v.end(), 0.0);
            std::fill(mag.begin(), mag.end(), 0.0);
            for (unsigned o = 0; o < O; ++o)
                for (size_t k = 0; k < n; ++k) {
                    const double g = G[(g0 + k) * O + o];
                    for (unsigned i = 0; i < I; ++i) {
                        const double p = g * W[size_t(o) * I + i];
                        v[k * I + i] += p;
                        mag[k * I + i] += std::fabs(p);
                    }
                }
            for (size_t k = 0; k < n * I; ++k) {
                dX.v[g0 * I + k] = v[k];
                dX.e[g0 * I + k] = dense_bound(O, cl, mag[k]);
            }
        }
    });
    h.tensors = {{"dX", {B, I}, Role::Out, {}}, {"dY", {B, O}, Role::In, dY}, {"Y", {B, O}, Role::In, Y},
                 {"W", {O, I}, Role::In, W}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_dense_mm(k, dense_bwd_data_args(B, I, O, m.at("dX"), m.at("dY"), m.at("Y"), m.at("W"), act), s, cl);
    };
    return h;
}

Harness make_weights(unsigned B, unsigned I, unsigned O, unsigned act, unsigned cl, Rng& rng) {
    const float scale = rng.uniform(0.5f, 2.0f) / float(B);
    std::vector<float> X = relu_outputs(rng, size_t(B) * I);
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    const std::vector<double> G = masked_g(dY, Y, act);
    const double sc = scale;
    Harness h;
    Bounded& dW = h.expected["dW"];
    Bounded& db = h.expected["db"];
    dW.resize(size_t(O) * I);
    db.resize(O);
    for_rows(O, double(B) * I, [&](size_t o0, size_t o1) {
        // kGroup outputs' dW rows and db (sums and magnitudes), summed along X's rows.
        std::vector<double> v(size_t(kGroup) * I), mag(size_t(kGroup) * I), vb(kGroup), mb(kGroup);
        for (size_t g0 = o0; g0 < o1; g0 += kGroup) {
            const size_t n = std::min<size_t>(o1 - g0, kGroup);
            std::fill(v.begin(), v.end(), 0.0);
            std::fill(mag.begin(), mag.end(), 0.0);
            std::fill(vb.begin(), vb.end(), 0.0);
            std::fill(mb.begin(), mb.end(), 0.0);
            for (unsigned s = 0; s < B; ++s)
                for (size_t k = 0; k < n; ++k) {
                    const double g = G[size_t(s) * O + g0 + k];
                    vb[k] += g, mb[k] += std::fabs(g);
                    for (unsigned i = 0; i < I; ++i) {
                        const double p = g * X[size_t(s) * I + i];
                        v[k * I + i] += p;
                        mag[k * I + i] += std::fabs(p);
                    }
                }
            for (size_t k = 0; k < n; ++k) {
                db.v[g0 + k] = sc * vb[k];
                db.e[g0 + k] = dense_bound(B, cl, std::fabs(sc) * mb[k]);
            }
            for (size_t k = 0; k < n * I; ++k) {
                dW.v[g0 * I + k] = sc * v[k];
                dW.e[g0 * I + k] = dense_bound(B, cl, std::fabs(sc) * mag[k]);
            }
        }
    });
    h.tensors = {{"dW", {O, I}, Role::Out, {}}, {"db", {O}, Role::Out, {}}, {"X", {B, I}, Role::In, X},
                 {"dY", {B, O}, Role::In, dY},    {"Y", {B, O}, Role::In, Y}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_dense_mm(k,
                        dense_bwd_weights_args(B, I, O, m.at("dW"), m.at("db"), m.at("X"), m.at("dY"), m.at("Y"),
                                               act, scale),
                        s, cl);
    };
    return h;
}

Harness make_dense(const VerifyCase& c, Rng& rng) {
    const auto& z = c.shape;
    const unsigned op = z[0], B = z[1], I = z[2], O = z[3], act = z[4], cl = z[5];
    if (op == kOpForward) return make_forward(B, I, O, act, cl, rng);
    if (op == kOpDeltas) return make_deltas(B, I, O, act, cl, rng);
    return make_weights(B, I, O, act, cl, rng);
}

void validate_dense(const VerifyCase& c) {
    const auto& z = c.shape;
    if (z.size() != 6)
        PTXLAB_THROW(InputError, "kernel 'dense_mm' takes a shape op,B,I,O,act,cluster (6 numbers), got {}", z.size());
    if (z[0] > 2) PTXLAB_THROW(InputError, "kernel 'dense_mm': op must be 0 (forward), 1 (deltas) or 2 (weights)");
    for (size_t k = 1; k < 4; ++k)
        if (z[k] == 0 || z[k] > 16384) PTXLAB_THROW(InputError, "kernel 'dense_mm': B, I, O must be 1 .. 16384");
    if (z[4] > 1) PTXLAB_THROW(InputError, "kernel 'dense_mm': act must be 0 (none) or 1 (ReLU), got {}", z[4]);
    if (z[5] != 0 && z[5] != 1 && z[5] != 2 && z[5] != 4 && z[5] != 8)
        PTXLAB_THROW(InputError, "kernel 'dense_mm': cluster must be 0 (the launch's choice), 1, 2, 4 or 8");
}

// Each op at: 1x1x1; sizes that leave a 64 x 64 tile and a 16-k tile part-empty (3, 9, 5;
// 5, 257, 33; 67, 129, 65; 130, 1, 3); the MLP widths at batch 64 (784 -> 256 -> 128 -> 10,
// 784 -> 1024 -> 1024); batch 500; a large case; every cluster size on two shapes (ranks
// without k tiles where K = 33 splits 8 ways), both act codes.
std::vector<VerifyCase> dense_default_cases() {
    std::vector<VerifyCase> v;
    const std::vector<std::vector<unsigned>> shapes = {
        {1, 1, 1},        {3, 9, 5},         {5, 257, 33},      {67, 129, 65},      {130, 1, 3},
        {64, 784, 256},   {64, 256, 128},    {64, 128, 10},     {64, 784, 1024},    {64, 1024, 1024},
        {500, 784, 1024}, {512, 2048, 1024}, {1, 300, 7}};
    for (unsigned op = 0; op < 3; ++op) {
        for (size_t i = 0; i < shapes.size(); ++i)
            v.push_back({"dense_mm", {op, shapes[i][0], shapes[i][1], shapes[i][2], unsigned((i + op) % 2 == 0), 0}});
        for (unsigned cl : {1u, 2u, 4u, 8u}) {
            v.push_back({"dense_mm", {op, 5, 257, 33, 1, cl}});
            v.push_back({"dense_mm", {op, 64, 1024, 1024, cl % 2, cl}});
        }
    }
    return v;
}

std::vector<VerifyCase> dense_quick_cases() {
    return {{"dense_mm", {0, 5, 257, 33, 1, 0}}, {"dense_mm", {1, 5, 257, 33, 1, 2}},
            {"dense_mm", {2, 5, 257, 33, 1, 0}}};
}

// bench: the MNIST net's hidden layer forward (784 -> 128, ReLU) at batch B.
BenchShape dense_bench_shape(unsigned B) {
    return std::vector<unsigned>{kOpForward, B, kBenchI, kBenchH, 1, 0};
}

std::vector<KernelRow> dense_rows() {
    return {{.entry = "dense_mm", .shape = "op,B,I,O,act,cluster", .act_named = false, .validate = validate_dense,
             .harness = make_dense, .bench_shape = dense_bench_shape, .work = dense_product_work}};
}

}  // namespace

const KernelFamily& dense_family() {
    static const KernelFamily f{"dense", {"dense"}, dense_rows(), dense_default_cases, dense_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{dense_family, 110, 110};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
