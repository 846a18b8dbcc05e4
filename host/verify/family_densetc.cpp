// ptx/densetc.ptx (dense_tc): dense_mm's GEMM on TF32 mma.sync in 128 x 128 tiles, for a dense
// layer's three products at large batch. Each product is checked against its own float64 loops
// (from the layer's maths, not from the strides the launch passes, so a wrong stride cannot
// hide) within the TF32 bound of densetc.hpp. Shape: op,B,I,O,act[,split] with op 0 the forward
// pass (Y[B][O] = X W^T + b, ReLU'd with act 1), 1 the deltas to the input (dX[B][I] = G W,
// G = dY masked by Y > 0 with act 1), 2 the weight gradient (dW[O][I] = scale G^T X,
// db[O] = scale sum_s G); split (dense_mm's cluster) the ranks that split K: 0 or left out the
// launch's own choice (densetc_plan; the bound then takes the largest, 8), else 1 .. 8.
#include "densetc.hpp"
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

// The split a bound must hold for: the forced one, else the largest the launch may take.
unsigned bound_split(unsigned split) { return split ? split : kDenseTcMaxSplit; }

// One output: v = scale sum a b + bias (ReLU'd with relu), with densetc_bound over K terms
// joined from `split` ranks.
struct Dot {
    double sum = 0, mag = 0;
    void add(double p) { sum += p, mag += std::fabs(p); }
    void set(Bounded& r, size_t i, unsigned K, unsigned split, float scale, double bias, bool relu) const {
        const double scaled = double(scale) * sum, exact = scaled + bias;
        r.v[i] = relu ? std::max(exact, 0.0) : exact;
        r.e[i] = densetc_bound(K, bound_split(split), mag, scale, scaled, exact);
    }
};

Harness make_forward(unsigned B, unsigned I, unsigned O, unsigned act, unsigned split, Rng& rng) {
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
                Dot d[4];
                double sum[4] = {0, 0, 0, 0}, mag[4] = {0, 0, 0, 0};
                dots4(X.data() + g0 * I, I, n, W.data() + size_t(o) * I, I, sum, mag);
                for (size_t k = 0; k < n; ++k) {
                    d[k].sum = sum[k], d[k].mag = mag[k];
                    d[k].set(Y, (g0 + k) * O + o, I, split, 1.0f, b[o], act == 1);
                }
            }
    });
    h.tensors = {{"X", {B, I}, Role::In, X}, {"W", {O, I}, Role::In, W}, {"b", {O}, Role::In, b},
                 {"Y", {B, O}, Role::Out, {}}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_dense_tc(k, dense_forward_args(B, I, O, m.at("X"), m.at("W"), m.at("b"), m.at("Y"), act), s, false,
                        split);
    };
    return h;
}

Harness make_deltas(unsigned B, unsigned I, unsigned O, unsigned act, unsigned split, Rng& rng) {
    const float w = 1.0f / std::sqrt(float(I));
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    std::vector<float> W = random_vector(rng, size_t(O) * I, -w, w);
    const std::vector<double> G = masked_g(dY, Y, act);
    Harness h;
    Bounded& dX = h.expected["dX"];
    dX.resize(size_t(B) * I);
    for_rows(B, double(I) * O, [&](size_t s0, size_t s1) {
        std::vector<Dot> rows(size_t(kGroup) * I);  // kGroup samples' dX rows, summed along W's rows
        for (size_t g0 = s0; g0 < s1; g0 += kGroup) {
            const size_t n = std::min<size_t>(s1 - g0, kGroup);
            std::fill(rows.begin(), rows.end(), Dot{});
            for (unsigned o = 0; o < O; ++o)
                for (size_t k = 0; k < n; ++k) {
                    const double g = G[(g0 + k) * O + o];
                    Dot* row = rows.data() + k * I;
                    if (g != 0.0)
                        for (unsigned i = 0; i < I; ++i) row[i].add(g * W[size_t(o) * I + i]);
                }
            for (size_t k = 0; k < n; ++k)
                for (unsigned i = 0; i < I; ++i)
                    rows[k * I + i].set(dX, (g0 + k) * I + i, O, split, 1.0f, 0.0, false);
        }
    });
    h.tensors = {{"dX", {B, I}, Role::Out, {}}, {"dY", {B, O}, Role::In, dY}, {"Y", {B, O}, Role::In, Y},
                 {"W", {O, I}, Role::In, W}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_dense_tc(k, dense_bwd_data_args(B, I, O, m.at("dX"), m.at("dY"), m.at("Y"), m.at("W"), act), s, false,
                        split);
    };
    return h;
}

Harness make_weights(unsigned B, unsigned I, unsigned O, unsigned act, unsigned split, Rng& rng) {
    const float scale = rng.uniform(0.5f, 2.0f) / float(B);
    std::vector<float> X = relu_outputs(rng, size_t(B) * I);
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    const std::vector<double> G = masked_g(dY, Y, act);
    Harness h;
    Bounded& dW = h.expected["dW"];
    Bounded& db = h.expected["db"];
    dW.resize(size_t(O) * I);
    db.resize(O);
    for_rows(O, double(B) * I, [&](size_t o0, size_t o1) {
        std::vector<Dot> rows(size_t(kGroup) * I);  // kGroup outputs' dW rows, summed along X's rows
        for (size_t g0 = o0; g0 < o1; g0 += kGroup) {
            const size_t n = std::min<size_t>(o1 - g0, kGroup);
            std::vector<Dot> d1(n);
            std::fill(rows.begin(), rows.end(), Dot{});
            for (unsigned s = 0; s < B; ++s)
                for (size_t k = 0; k < n; ++k) {
                    const double g = G[size_t(s) * O + g0 + k];
                    Dot* row = rows.data() + k * I;
                    d1[k].add(g);
                    if (g != 0.0)
                        for (unsigned i = 0; i < I; ++i) row[i].add(g * X[size_t(s) * I + i]);
                }
            for (size_t k = 0; k < n; ++k) {
                d1[k].set(db, g0 + k, B, split, scale, 0.0, false);
                for (unsigned i = 0; i < I; ++i)
                    rows[k * I + i].set(dW, (g0 + k) * I + i, B, split, scale, 0.0, false);
            }
        }
    });
    h.tensors = {{"dW", {O, I}, Role::Out, {}}, {"db", {O}, Role::Out, {}}, {"X", {B, I}, Role::In, X},
                 {"dY", {B, O}, Role::In, dY},    {"Y", {B, O}, Role::In, Y}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_dense_tc(
            k, dense_bwd_weights_args(B, I, O, m.at("dW"), m.at("db"), m.at("X"), m.at("dY"), m.at("Y"), act, scale),
            s, false, split);
    };
    return h;
}

Harness make_densetc(const VerifyCase& c, Rng& rng) {
    const auto& z = c.shape;
    const unsigned op = z[0], B = z[1], I = z[2], O = z[3], act = z[4], split = z.size() > 5 ? z[5] : 0;
    if (op == kOpForward) return make_forward(B, I, O, act, split, rng);
    if (op == kOpDeltas) return make_deltas(B, I, O, act, split, rng);
    return make_weights(B, I, O, act, split, rng);
}

void validate_densetc(const VerifyCase& c) {
    const auto& z = c.shape;
    if (z.size() != 5 && z.size() != 6)
        PTXLAB_THROW(InputError, "kernel 'dense_tc' takes a shape op,B,I,O,act[,split] (5 or 6 numbers), got {}",
                     z.size());
    if (z[0] > 2) PTXLAB_THROW(InputError, "kernel 'dense_tc': op must be 0 (forward), 1 (deltas) or 2 (weights)");
    for (size_t k = 1; k < 4; ++k)
        if (z[k] == 0 || z[k] > 16384) PTXLAB_THROW(InputError, "kernel 'dense_tc': B, I, O must be 1 .. 16384");
    if (z[4] > 1) PTXLAB_THROW(InputError, "kernel 'dense_tc': act must be 0 (none) or 1 (ReLU), got {}", z[4]);
    if (z.size() == 6 && z[5] > kDenseTcMaxSplit)
        PTXLAB_THROW(InputError, "kernel 'dense_tc': split must be 0 (the launch's choice) or 1 .. 8, got {}", z[5]);
}

}  // namespace

// The cp.async path with operands along rows (W in the deltas: A k-major, Bop along rows; dY,
// Y and X in the weight gradient: both along rows, the mask and the ones column applied in
// shared memory): each product with the mask on and off, M and N not multiples of 128 (the
// deltas' N = I = 68 in one part-tile; the weight gradient's N + 1 = 133 and 129: the ones
// column inside a unit's tile and alone in a tile of its own), K not a multiple of 32 (100,
// 36) and for the weight gradient not of 4 (K = B = 130, 33, 1, 70), at split 1 and above
// (3: unequal ranks; 8 with K = 70: 5 chunks, three empty ranks). Last, strides that must fall
// back to the register-staged path: I = 66 (W's and X's k stride 66) and O = 70 (dY's).
std::vector<VerifyCase> densetc_fast_cases() {
    return {{"dense_tc", {kOpDeltas, 130, 68, 100, 1, 1}},  {"dense_tc", {kOpDeltas, 257, 260, 36, 0, 2}},
            {"dense_tc", {kOpDeltas, 129, 132, 196, 1, 3}}, {"dense_tc", {kOpWeights, 130, 132, 196, 1, 1}},
            {"dense_tc", {kOpWeights, 33, 128, 68, 0, 3}},  {"dense_tc", {kOpWeights, 1, 4, 4, 1, 1}},
            {"dense_tc", {kOpWeights, 70, 256, 124, 1, 8}}, {"dense_tc", {kOpWeights, 260, 132, 196, 0, 2}},
            {"dense_tc", {kOpDeltas, 130, 66, 100, 1, 1}},  {"dense_tc", {kOpWeights, 130, 132, 70, 1, 2}},
            {"dense_tc", {kOpWeights, 130, 66, 132, 0, 3}}};
}

namespace {

// Each op at: 1x1x1; sizes that leave a 128 x 128 tile and a 16-k chunk part-empty (3, 9, 5;
// 5, 257, 33; 130, 1, 3; 129, 127, 17; 257, 131, 255: odd, one past and one short of a tile);
// the ones column alone in a tile of its own (weights: O rows, I = 128 columns + db); the MLP
// widths at batch 64 and 500; the 4096 x 1024 x 1024 layer of the issue; both act codes; all at
// the launch's split. Then forced splits 1, 3 and 8 (K of 9 .. 19 chunks: ranks of unequal
// length, empty ranks at 8) at sizes whose k strides are multiples of 4 (260, 132, 196: the
// row-wise 16-byte loads of the deltas' W and the weight gradient's dY, Y and X; the ones column
// at the start of a 4-row unit) and odd ones (259, 131, 197: their scalar fallback, the ones
// column inside a unit); 1 x 1 x 1 at split 8 (one chunk, seven empty ranks). Last, forward
// passes on the cp.async path (I a multiple of 4, no mask, no ones column) at its edges: K = 4
// (one chunk, a pair whose second chunk is past K), K = 36 at split 2 (rank 1's one chunk of
// 4 k), K = 68 at split 3 with M, N one past a tile. Then the cp.async path's along-rows
// operands (densetc_fast_cases).
std::vector<VerifyCase> densetc_default_cases() {
    std::vector<VerifyCase> v;
    const std::vector<std::vector<unsigned>> shapes = {
        {1, 1, 1},     {3, 9, 5},       {5, 257, 33},     {130, 1, 3},       {129, 127, 17}, {257, 131, 255},
        {33, 128, 70}, {64, 784, 1024}, {500, 784, 1024}, {4096, 1024, 1024}, {1, 300, 7}};
    for (unsigned op = 0; op < 3; ++op)
        for (size_t i = 0; i < shapes.size(); ++i)
            v.push_back({"dense_tc", {op, shapes[i][0], shapes[i][1], shapes[i][2], unsigned((i + op) % 2 == 0)}});
    const std::vector<std::vector<unsigned>> split_shapes = {{260, 132, 196}, {259, 131, 197}};
    for (unsigned op = 0; op < 3; ++op) {
        for (size_t i = 0; i < split_shapes.size(); ++i)
            for (unsigned split : {1u, 3u, 8u})
                v.push_back({"dense_tc", {op, split_shapes[i][0], split_shapes[i][1], split_shapes[i][2],
                                          unsigned((i + split) % 2), split}});
        v.push_back({"dense_tc", {op, 1, 1, 1, 1, 8}});
    }
    const std::vector<std::vector<unsigned>> fast = {
        {kOpForward, 3, 4, 5, 1}, {kOpForward, 1, 36, 1, 0, 2}, {kOpForward, 130, 68, 129, 1, 3}};
    for (const auto& z : fast) v.push_back({"dense_tc", z});
    for (const VerifyCase& c : densetc_fast_cases()) v.push_back(c);
    return v;
}

// The quick set (compute-sanitizer's): each product on the register-staged path (odd strides)
// and on the cp.async path (the deltas' W and the weight gradient's operands along rows, the
// mask on, the weight gradient's ones column at split 3).
std::vector<VerifyCase> densetc_quick_cases() {
    return {{"dense_tc", {0, 129, 127, 17, 1}},  {"dense_tc", {1, 129, 127, 17, 1}},
            {"dense_tc", {2, 129, 127, 17, 1}},  {"dense_tc", {0, 130, 68, 129, 1}},
            {"dense_tc", {1, 130, 68, 100, 1}}, {"dense_tc", {2, 130, 132, 196, 1, 3}}};
}

// bench: the MNIST net's hidden layer forward (784 -> 128, ReLU) at batch B.
BenchShape densetc_bench_shape(unsigned B) {
    return std::vector<unsigned>{kOpForward, B, kBenchI, kBenchH, 1};
}

std::vector<KernelRow> densetc_rows() {
    return {{.entry = "dense_tc", .shape = "op,B,I,O,act", .shape_alt = "op,B,I,O,act,split",
             .act_named = false, .validate = validate_densetc,
             .harness = make_densetc, .bench_shape = densetc_bench_shape, .work = dense_product_work}};
}

}  // namespace

const KernelFamily& densetc_family() {
    static const KernelFamily f{"densetc", {"densetc"}, densetc_rows(), densetc_default_cases, densetc_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{densetc_family, 120, 120};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
