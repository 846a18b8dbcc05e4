// The CNN layers' kernels: ptx/conv.ptx (conv_fwd, conv_bwd_data, conv_bwd_weights), their
// tensor-core twins ptx/tcconv.ptx (tc_conv_fwd, tc_conv_bwd_data) and ptx/tcwgrad.ptx
// (tc_conv_bwd_weights), ptx/pool.ptx (pool_fwd, pool_bwd) and ptx/fc.ptx (fc_bwd_data): one
// module, as they share their harnesses, the CNN's shapes and the default set's order. Fresh
// random inputs, the float64 reference with its bound (ref_conv.hpp), the launch (conv.hpp).
// Shapes: conv_* take N,C,H,W,K,KS,act (act 0 none, 1 ReLU), conv_fwd also N,C,H,W,K,KS,act,pool
// (pool 1: with its 2x2 max-pool); pool_fwd takes N,C,H,W, pool_bwd N,C,H,W,mask (mask 1: with
// the ReLU mask from pool_fwd's Y, 0: without).
#include "conv.hpp"
#include "recipe.hpp"
#include "ref_conv.hpp"
#include "registry.hpp"
#include "tcconv.hpp"
#include "tcwgrad.hpp"

#include <bit>
#include <cmath>

namespace ptxlab::verify_detail {

namespace {

ConvDims dims_of(const VerifyCase& c) {
    const auto& z = c.shape;
    return {z[0], z[1], z[2], z[3], z[4], z[5]};
}

// Pool inputs on a grid of 9 levels in [-1, 1], so that windows often hold equal maxima
// (the first in row-major order must win).
std::vector<float> tied_values(Rng& rng, size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = std::round(rng.uniform(-1.0f, 1.0f) * 4.0f) / 4.0f;
    return v;
}

Bounded exact(const std::vector<double>& v) {
    Bounded b;
    b.v = v;
    b.e.assign(v.size(), 0.0);
    return b;
}

// With the pool (conv_fwd's 8th shape number): the float64 outputs pooled, each maximum within
// the largest bound of its window (a maximum moves no further than its operands do); its index
// is the reference's argmax (the first of equal values), or cannot be told (an infinite bound:
// skipped) where another value of the window lies within the two values' nonzero bounds of the
// maximum.
Bounded pool_of(const ConvDims& d, const Bounded& y, Bounded& idx) {
    const unsigned Ho = d.H / 2, Wo = d.W / 2;
    Bounded r;
    r.v.assign(size_t(d.N) * d.K * Ho * Wo, 0.0);
    r.e.assign(r.v.size(), 0.0);
    idx.v.assign(r.v.size(), 0.0);
    idx.e.assign(r.v.size(), 0.0);
    for (size_t q = 0; q < size_t(d.N) * d.K; ++q)
        for (unsigned oy = 0; oy < Ho; ++oy)
            for (unsigned ox = 0; ox < Wo; ++ox) {
                size_t at[4];
                for (unsigned i = 0; i < 4; ++i) at[i] = size_t(2 * oy + i / 2) * d.W + 2 * ox + i % 2;
                const double* v = y.v.data() + q * d.H * d.W;
                const double* e = y.e.data() + q * d.H * d.W;
                unsigned best = 0;
                for (unsigned i = 1; i < 4; ++i)
                    if (v[at[i]] > v[at[best]]) best = i;
                bool tie = false;
                double emax = 0;
                for (unsigned i = 0; i < 4; ++i) {
                    emax = std::max(emax, e[at[i]]);
                    // Equal exact values (e = 0: ReLU's zeros) are no tie: the first wins in both.
                    const double eb = e[at[best]] + e[at[i]];
                    if (i != best && eb > 0 && v[at[best]] - v[at[i]] <= eb) tie = true;
                }
                const size_t o = (q * Ho + oy) * Wo + ox;
                r.v[o] = v[at[best]];
                r.e[o] = emax;
                idx.v[o] = double(at[best]);
                idx.e[o] = tie ? INFINITY : 0.0;
            }
    return r;
}

Harness make_conv_fwd(const ConvDims& d, unsigned act, ConvArith arith, bool pool, Rng& rng) {
    const float w = 1.0f / std::sqrt(float(d.C * d.KS * d.KS));  // nn.Conv2d's init bound
    Harness h;
    std::vector<float> X = random_vector(rng, d.x_size(), -1.0f, 1.0f);
    std::vector<float> Wt = random_vector(rng, d.w_size(), -w, w);
    std::vector<float> b = random_vector(rng, d.K, -w, w);
    h.expected["Y"] = ref_conv_fwd(d, X, Wt, b, act, arith);
    h.tensors = {{"X", {d.N, d.C, d.H, d.W}, Role::In, X},
                 {"Wt", {d.K, d.C, d.KS, d.KS}, Role::In, Wt},
                 {"b", {d.K}, Role::In, b},
                 {"Y", {d.N, d.K, d.H, d.W}, Role::Out, {}}};
    if (pool) {
        const Bounded full = h.expected["Y"];
        h.expected["Y"] = pool_of(d, full, h.expected["idx"]);
        h.tensors.back().dims = {d.N, d.K, d.H / 2, d.W / 2};
        h.tensors.push_back({"idx", {d.N, d.K, d.H / 2, d.W / 2}, Role::Out, {}, true});
        h.launch = [d, act, arith](const Kernel& k, const DevicePtrs& m, CUstream s) {
            (arith == ConvArith::Tf32 ? launch_tc_conv_fwd : launch_conv_fwd)(k, d, m.at("X"), m.at("Wt"), m.at("b"),
                                                                              m.at("Y"), act, s, m.at("idx"));
        };
        return h;
    }
    h.launch = [d, act, arith](const Kernel& k, const DevicePtrs& m, CUstream s) {
        if (arith == ConvArith::Tf32) launch_tc_conv_fwd(k, d, m.at("X"), m.at("Wt"), m.at("b"), m.at("Y"), act, s);
        else launch_conv_fwd(k, d, m.at("X"), m.at("Wt"), m.at("b"), m.at("Y"), act, s);
    };
    return h;
}

Harness make_conv_bwd_data(const ConvDims& d, unsigned act, ConvArith arith, Rng& rng) {
    const float w = 1.0f / std::sqrt(float(d.C * d.KS * d.KS));
    Harness h;
    std::vector<float> dY = random_vector(rng, d.y_size(), -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, d.y_size());
    std::vector<float> Wt = random_vector(rng, d.w_size(), -w, w);
    h.expected["dX"] = ref_conv_bwd_data(d, dY, Y, Wt, act, arith);
    h.tensors = {{"dX", {d.N, d.C, d.H, d.W}, Role::Out, {}},
                 {"dY", {d.N, d.K, d.H, d.W}, Role::In, dY},
                 {"Y", {d.N, d.K, d.H, d.W}, Role::In, Y},
                 {"Wt", {d.K, d.C, d.KS, d.KS}, Role::In, Wt}};
    h.launch = [d, act, arith](const Kernel& k, const DevicePtrs& m, CUstream s) {
        if (arith == ConvArith::Tf32)
            launch_tc_conv_bwd_data(k, d, m.at("dX"), m.at("dY"), m.at("Y"), m.at("Wt"), act, s);
        else launch_conv_bwd_data(k, d, m.at("dX"), m.at("dY"), m.at("Y"), m.at("Wt"), act, s);
    };
    return h;
}

// tc_conv_bwd_data with the 2x2 max-pool below in its epilogue (shape N,C,H,W,K,KS,act,pool,
// pool >= 1; pool - 1 = 1 PH odd + 2 PW odd + 4 no mask): the pool's input PH x PW (2H or 2H+1,
// 2W or 2W+1) of tied values, its argmax and maxima from maxpool2_forward (every place of the
// argmax in a window, ties among them); the reference is pool_bwd's (maxpool2_backward, with the
// mask unless bit 4) of conv_bwd_data's float64 sums, their bounds routed the same way (the pool
// only copies: +0 elsewhere exactly).
std::vector<float> as_floats(const std::vector<uint32_t>& v);

Harness make_tc_conv_bwd_data_pooled(const ConvDims& d, unsigned act, unsigned pool, Rng& rng) {
    const unsigned code = pool - 1, PH = 2 * d.H + (code & 1), PW = 2 * d.W + (code >> 1 & 1), P = d.N * d.C;
    const bool mask = (code & 4) == 0;
    Harness h = make_conv_bwd_data(d, act, ConvArith::Tf32, rng);
    const std::vector<float> X = tied_values(rng, size_t(P) * PH * PW);
    const PoolResult r = maxpool2_forward(P, PH, PW, {X.begin(), X.end()});
    const Bounded sums = h.expected["dX"];
    Bounded& dX = h.expected["dX"];
    dX.v = maxpool2_backward(P, PH, PW, sums.v, r.idx, mask ? &r.Y : nullptr);
    dX.e = maxpool2_backward(P, PH, PW, sums.e, r.idx, mask ? &r.Y : nullptr);
    h.tensors[0].dims = {d.N, d.C, PH, PW};  // dX: the pool's input deltas
    h.tensors.push_back({"idx", {d.N, d.C, d.H, d.W}, Role::In, as_floats(r.idx), true});
    h.tensors.push_back({"Yp", {d.N, d.C, d.H, d.W}, Role::In, {r.Y.begin(), r.Y.end()}});
    h.launch = [d, act, PH, PW, mask](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_tc_conv_bwd_data(k, d, m.at("dX"), m.at("dY"), m.at("Y"), m.at("Wt"), act, s,
                                {m.at("idx"), mask ? m.at("Yp") : 0, PH, PW});
    };
    return h;
}

// conv_bwd_weights, and tc_conv_bwd_weights (tc: the same inputs and signature, its TF32
// reference and bound from tcwgrad.hpp).
Harness make_conv_bwd_weights(const ConvDims& d, unsigned act, bool tc, Rng& rng) {
    const float scale = rng.uniform(0.5f, 2.0f) / float(d.N);  // about 1/N, the batch mean
    Harness h;
    std::vector<float> X = relu_outputs(rng, d.x_size());
    std::vector<float> dY = random_vector(rng, d.y_size(), -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, d.y_size());
    if (tc) ref_tc_conv_bwd_weights(d, X, dY, Y, act, scale, h.expected["dW"], h.expected["db"]);
    else ref_conv_bwd_weights(d, X, dY, Y, act, scale, h.expected["dW"], h.expected["db"]);
    h.tensors = {{"dW", {d.K, d.C, d.KS, d.KS}, Role::Out, {}},
                 {"db", {d.K}, Role::Out, {}},
                 {"X", {d.N, d.C, d.H, d.W}, Role::In, X},
                 {"dY", {d.N, d.K, d.H, d.W}, Role::In, dY},
                 {"Y", {d.N, d.K, d.H, d.W}, Role::In, Y}};
    h.launch = [d, act, scale, tc](const Kernel& k, const DevicePtrs& m, CUstream s) {
        (tc ? launch_tc_conv_bwd_weights : launch_conv_bwd_weights)(k, d, m.at("dW"), m.at("db"), m.at("X"),
                                                                    m.at("dY"), m.at("Y"), act, scale, s);
    };
    return h;
}

// fc_bwd_data (B,I,O,act): conv_bwd_data's sums for a 1x1 convolution of a 1x1 image, so the
// same float64 reference and bound.
Harness make_fc_bwd_data(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], I = c.shape[1], O = c.shape[2], act = c.shape[3];
    const ConvDims d{B, I, 1, 1, O, 1};
    const float w = 1.0f / std::sqrt(float(I));
    Harness h;
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    std::vector<float> W = random_vector(rng, size_t(O) * I, -w, w);
    h.expected["dX"] = ref_conv_bwd_data(d, dY, Y, W, act);
    h.tensors = {{"dX", {B, I}, Role::Out, {}}, {"dY", {B, O}, Role::In, dY}, {"Y", {B, O}, Role::In, Y},
                 {"W", {O, I}, Role::In, W}};
    h.launch = [B, I, O, act](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_fc_bwd_data(k, B, I, O, m.at("dX"), m.at("dY"), m.at("Y"), m.at("W"), act, s);
    };
    return h;
}

std::vector<float> as_floats(const std::vector<uint32_t>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = std::bit_cast<float>(v[i]);
    return f;
}

// pool_fwd, or pool_bwd (backward).
Harness make_pool(const VerifyCase& c, Rng& rng, bool backward) {
    const unsigned N = c.shape[0], C = c.shape[1], H = c.shape[2], W = c.shape[3], P = N * C;
    const size_t Ho = H / 2, Wo = W / 2;
    std::vector<float> X = tied_values(rng, size_t(P) * H * W);
    const PoolResult r = maxpool2_forward(P, H, W, {X.begin(), X.end()});
    Harness h;
    if (!backward) {
        h.expected["Y"] = exact(r.Y);
        h.expected["idx"] = exact({r.idx.begin(), r.idx.end()});
        h.tensors = {{"Y", {N, C, Ho, Wo}, Role::Out, {}},
                     {"idx", {N, C, Ho, Wo}, Role::Out, {}, true},
                     {"X", {N, C, H, W}, Role::In, X}};
        h.launch = [P, H, W](const Kernel& k, const DevicePtrs& m, CUstream s) {
            launch_pool_fwd(k, P, H, W, m.at("Y"), m.at("idx"), m.at("X"), s);
        };
    } else {
        // The mask's inputs: pool_fwd's maxima of the tied values, a third of them <= 0 (0 among them).
        const bool mask = c.shape[4] == 1;
        std::vector<float> dY = random_vector(rng, size_t(P) * Ho * Wo, -1.0f, 1.0f);
        h.expected["dX"] = exact(maxpool2_backward(P, H, W, {dY.begin(), dY.end()}, r.idx, mask ? &r.Y : nullptr));
        h.tensors = {{"dX", {N, C, H, W}, Role::Out, {}},
                     {"dY", {N, C, Ho, Wo}, Role::In, dY},
                     {"idx", {N, C, Ho, Wo}, Role::In, as_floats(r.idx), true},
                     {"Yp", {N, C, Ho, Wo}, Role::In, {r.Y.begin(), r.Y.end()}}};
        h.launch = [P, H, W, mask](const Kernel& k, const DevicePtrs& m, CUstream s) {
            launch_pool_bwd(k, P, H, W, m.at("dX"), m.at("dY"), m.at("idx"), mask ? m.at("Yp") : 0, s);
        };
    }
    return h;
}

bool pooled(const VerifyCase& c) { return c.shape.size() == 8 && c.shape[7] == 1; }

// The shape's count (conv_fwd, tc_conv_fwd: 7 numbers, or 8 with their pool) and its sizes >= 1.
void check_count(const VerifyCase& c, size_t sizes) {
    const KernelRow& row = kernel_row(c.entry);
    const std::string names = shape_names(c.entry, c.shape.size());
    const size_t want = size_t(std::count(names.begin(), names.end(), ',')) + 1;
    if (c.shape.size() != want)
        PTXLAB_THROW(InputError, "kernel '{}' takes a shape {} ({} numbers{}), got {}", c.entry, names, want,
                     row.shape_alt.empty() ? std::string() : fmt::format("; or {}: 8", row.shape_alt), c.shape.size());
    for (size_t k = 0; k < sizes; ++k)
        if (c.shape[k] == 0) PTXLAB_THROW(InputError, "kernel '{}': shape sizes must be >= 1", c.entry);
}

// N,C,H,W,K,KS,act[,pool]: `unfit` says why the kernel cannot run the dimensions (with the
// pool: conv_pool_unfit).
void validate_conv(const VerifyCase& c, std::string (*unfit)(const ConvDims&)) {
    check_count(c, 4);
    if (c.shape[6] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': act must be 0 (none) or 1 (ReLU), got {}", c.entry, c.shape[6]);
    const ConvDims d = dims_of(c);
    const bool pool = c.shape.size() == 8;
    if (pool && c.shape[7] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': pool must be 0 (none) or 1 (a 2x2 max-pool), got {}", c.entry, c.shape[7]);
    std::string why = pool && c.shape[7] == 1 ? conv_pool_unfit(d) : unfit(d);
    if (!why.empty())
        PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

// tc_conv_bwd_data: N,C,H,W,K,KS,act[,pool], pool 0 (none) or 1..8 (make_tc_conv_bwd_data_pooled).
void validate_tc_conv_bwd_data(const VerifyCase& c) {
    check_count(c, 4);
    if (c.shape[6] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': act must be 0 (none) or 1 (ReLU), got {}", c.entry, c.shape[6]);
    if (c.shape.size() == 8 && c.shape[7] > 8)
        PTXLAB_THROW(InputError,
                     "kernel '{}': pool must be 0 (none) or 1 + (1: PH odd) + (2: PW odd) + (4: no mask), got {}",
                     c.entry, c.shape[7]);
    if (std::string why = tcconv_unfit(dims_of(c)); !why.empty())
        PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

void validate_fc(const VerifyCase& c) {
    check_count(c, 3);
    if (c.shape[3] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': act must be 0 (none) or 1 (ReLU), got {}", c.entry, c.shape[3]);
}

void validate_pool(const VerifyCase& c) {
    check_count(c, 4);
    if (c.shape[2] < 2 || c.shape[3] < 2)
        PTXLAB_THROW(InputError, "kernel '{}': a 2x2 pool needs H, W >= 2, got {}x{}", c.entry, c.shape[2],
                     c.shape[3]);
    if (c.shape.size() == 5 && c.shape[4] > 1)  // pool_bwd's mask
        PTXLAB_THROW(InputError, "kernel '{}': mask must be 0 (none) or 1 (ReLU mask from pool_fwd's Y), got {}",
                     c.entry, c.shape[4]);
}

// The CNN's layers (conv1 1->32 on 28x28, conv2 32->64 on 14x14, at batch 64 and 1) and
// the edges: batches 1, 3, 64; channels 1, 3, 32, 64 and counts that leave a group of 8
// part-empty (5, 17, 9); images 28, 14, 7 and 9 (odd); kernels 1, 3 and 5; both act codes.
std::vector<VerifyCase> conv_default_cases() {
    const std::vector<std::vector<unsigned>> conv = {
        {64, 1, 28, 28, 32, 3, 1}, {64, 32, 14, 14, 64, 3, 1}, {1, 1, 28, 28, 32, 3, 1}, {3, 3, 9, 9, 5, 3, 0},
        {3, 3, 7, 7, 17, 5, 1},    {1, 64, 7, 7, 3, 5, 0},     {3, 32, 28, 28, 64, 3, 1}, {2, 3, 9, 9, 8, 1, 1},
        {1, 9, 14, 14, 3, 3, 1},   {64, 1, 28, 28, 32, 5, 1},  {3, 64, 9, 9, 32, 5, 0}};
    std::vector<VerifyCase> v;
    for (const char* e : {"conv_fwd", "conv_bwd_data", "conv_bwd_weights", "tc_conv_fwd", "tc_conv_bwd_data"})
        for (const auto& s : conv) v.push_back({e, s});
    // The tensor-core kernels' edges besides: 33 and 40 output channels leave a group of 32
    // part-empty (and, backward, 33 and 40 channels summed leave a chunk of 8 part-empty);
    // a 16 x 16 image is a whole strip of 256 pixels (all 8 warps busy), 13 x 11 leaves the
    // last pixel tile part-empty.
    for (const char* e : {"tc_conv_fwd", "tc_conv_bwd_data"})
        for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
                 {2, 33, 16, 16, 40, 3, 1}, {3, 40, 13, 11, 33, 5, 0}, {1, 1, 1, 1, 1, 1, 0}})
            v.push_back({e, s});
    const std::vector<std::vector<unsigned>> pool = {{64, 32, 28, 28}, {64, 64, 14, 14}, {1, 1, 28, 28}, {3, 3, 7, 7},
                                                     {3, 3, 9, 9},     {1, 1, 2, 2},     {64, 3, 28, 28}};
    for (const auto& s : pool) {
        v.push_back({"pool_fwd", s});
        for (unsigned mask : {1u, 0u}) {
            std::vector<unsigned> sm = s;
            sm.push_back(mask);
            v.push_back({"pool_bwd", sm});
        }
    }
    // conv_fwd with its pool: conv1 of the CNN at batch 64 (strips of 8, 8, 8 and 4 rows) and 1;
    // conv2's shape; 9x9 (odd: the last row and column in no window), 5x5 taps, 1x1, a part-empty
    // channel group (17), 2x2 images; and pool 0 (the plain pass, 8 numbers).
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 1, 28, 28, 32, 3, 1, 1}, {1, 1, 28, 28, 32, 3, 1, 1}, {64, 32, 14, 14, 64, 3, 1, 1},
             {3, 3, 9, 9, 17, 3, 1, 1}, {3, 3, 7, 7, 5, 5, 0, 1}, {2, 3, 10, 6, 8, 1, 1, 1}, {3, 2, 2, 2, 3, 3, 1, 1},
             {3, 3, 9, 9, 5, 3, 1, 0}})
        v.push_back({"conv_fwd", s});
    // tc_conv_fwd with its pool: conv2 of the CNN (one strip of 14 rows), batch 1 (strips cut
    // finer: even rows only), 28x28 (strips of 8 rows), part-empty channel groups and an odd
    // 9x9, 5x5 taps; pool 0.
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 32, 14, 14, 64, 3, 1, 1}, {1, 32, 14, 14, 64, 3, 1, 1}, {3, 32, 28, 28, 64, 3, 1, 1},
             {2, 33, 9, 9, 40, 5, 0, 1}, {3, 9, 2, 2, 17, 3, 1, 1}, {2, 33, 16, 16, 40, 3, 1, 0}})
        v.push_back({"tc_conv_fwd", s});
    // tc_conv_bwd_data with the pool below in its epilogue: conv2 back to pool1's 28x28 at batch
    // 64 (the CNN, with the mask) and 1; without the mask; odd pool inputs (PH, PW or both odd:
    // the last row and column in no window); a part-empty channel group (C 33, 40) and chunk,
    // 13 x 11 (a part-empty pixel tile), 5x5 taps, 1x1 images, pool 0.
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 32, 14, 14, 64, 3, 0, 1}, {1, 32, 14, 14, 64, 3, 0, 1}, {3, 32, 14, 14, 64, 3, 1, 5},
             {2, 9, 7, 7, 17, 3, 0, 4}, {3, 33, 9, 9, 40, 3, 1, 2}, {2, 40, 13, 11, 33, 5, 0, 3},
             {3, 17, 6, 5, 9, 1, 1, 8}, {1, 3, 1, 1, 8, 3, 0, 4}, {2, 33, 16, 16, 40, 3, 1, 0}})
        v.push_back({"tc_conv_bwd_data", s});
    // tc_conv_bwd_weights: conv_bwd_weights' shapes, and images of one pixel (a single part-empty
    // k-step, every tap but the centre in the halo), 1x1x1, C*T past one 64-column group (17 x 9,
    // 3 x 25), K past a tile of 16 (17, 64), batches that leave ranks without images (1, 3).
    for (const auto& s : conv) v.push_back({"tc_conv_bwd_weights", s});
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {3, 17, 1, 1, 5, 3, 1}, {1, 1, 1, 1, 1, 1, 0}, {3, 17, 9, 9, 64, 3, 1}, {9, 3, 14, 14, 17, 5, 1},
             {1, 3, 28, 28, 1, 1, 0}, {64, 32, 14, 14, 64, 3, 0}})
        v.push_back({"tc_conv_bwd_weights", s});
    // fc_bwd_data (conv.hpp fc_plan: blocks of 32 columns by 4 warps samples, chunks of 128 o):
    // the CNN's fc1 (3136 -> 128) at batch 64 (4 warps a block) and 500 (8), both act codes, and
    // at batch 1; the MLP's 128 -> 256 at batch 64 (1 warp); 1x1x1; batches and widths that leave
    // a sample group or a column tile part-empty (2 warps at 64 x 1000); eight chunks; O past a
    // chunk by 1 (the second chunk one step), by 4 (one 4-step) and by 45 with O and I not
    // multiples of 4 (4-byte copies of W and G, three chunks); two buffers of W, G and Y at 8
    // warps (96 KB of shared memory).
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 3136, 128, 1}, {64, 3136, 128, 0}, {500, 3136, 128, 1}, {1, 3136, 128, 1}, {64, 256, 128, 1},
             {1, 1, 1, 0}, {3, 9, 5, 1}, {5, 257, 33, 1}, {7, 1000, 10, 1}, {64, 1000, 10, 0}, {2, 300, 1024, 0},
             {4, 64, 129, 1}, {6, 96, 132, 0}, {9, 70, 301, 1}, {256, 1024, 300, 1}})
        v.push_back({"fc_bwd_data", s});
    return v;
}

std::vector<VerifyCase> conv_quick_cases() {
    return {{"conv_fwd", {3, 3, 9, 9, 17, 3, 1}},         {"conv_fwd", {1, 9, 7, 7, 5, 5, 0}},
            {"conv_fwd", {3, 3, 9, 9, 17, 3, 1, 1}},      {"tc_conv_fwd", {3, 9, 9, 9, 17, 3, 1, 1}},
            {"conv_bwd_data", {3, 9, 9, 9, 5, 3, 1}},     {"conv_bwd_data", {1, 3, 7, 7, 17, 5, 0}},
            {"conv_bwd_weights", {3, 3, 9, 9, 5, 3, 1}},  {"conv_bwd_weights", {1, 2, 7, 7, 3, 5, 0}},
            {"pool_fwd", {3, 3, 9, 9}},                   {"pool_bwd", {3, 3, 7, 7, 1}},
            {"fc_bwd_data", {5, 257, 33, 1}},             {"fc_bwd_data", {9, 70, 301, 1}},
            {"tc_conv_fwd", {3, 3, 9, 9, 17, 3, 1}},
            {"tc_conv_bwd_data", {3, 9, 9, 9, 5, 3, 1}},   {"tc_conv_bwd_data", {3, 9, 7, 7, 17, 3, 0, 4}},
            {"tc_conv_bwd_weights", {3, 17, 9, 9, 5, 3, 1}}};
}

// bench: the least traffic (bytes) and arithmetic (flops, an FMA = 2) of a conv or pool case at
// the CNN's layers; the backward passes with act 1 read the layer's output Y for the ReLU mask,
// pool_bwd with the mask the pooled maxima.
enum class Pass { Fwd, BwdData, BwdWeights };

std::pair<double, double> conv_work(const VerifyCase& c, Pass pass) {
    const auto& z = c.shape;
    const double N = z[0], C = z[1], H = z[2], W = z[3];
    const double K = z[4], T = double(z[5]) * z[5], x = N * C * H * W, y = N * K * H * W, w = K * C * T;
    const double macs = 2 * N * K * C * H * W * T, ry = z[6] == 1 ? 2 : 1;  // dY, and Y for the mask
    const bool pool = z.size() == 8 && z[7] >= 1;
    if (pass == Pass::Fwd && pool) return {4 * (x + w + K + y / 2), macs + y};  // (tc_)conv_fwd: Y, idx pooled
    if (pass == Pass::Fwd) return {4 * (x + w + K + y), macs + y};
    if (pass == Pass::BwdData && pool) {  // tc_conv_bwd_data with the pool below: dX 4x, idx and Yp
        const unsigned code = z[7] - 1;
        const double px = N * C * (2 * H + (code & 1)) * (2 * W + (code >> 1 & 1));
        return {4 * (ry * y + w + px + (code & 4 ? 1 : 2) * x), macs};
    }
    if (pass == Pass::BwdData) return {4 * (ry * y + w + x), macs};
    return {4 * (x + ry * y + w + K), macs + y};  // (tc_)conv_bwd_weights: dW and db
}

std::pair<double, double> pool_work(const VerifyCase& c) {
    const auto& z = c.shape;
    const double N = z[0], C = z[1], H = z[2], W = z[3];
    if (z.size() == 4) return {4 * (N * C * H * W + 2 * N * C * (H / 2) * (W / 2)), 0};  // pool_fwd
    return {4 * (N * C * H * W + (2 + z[4]) * N * C * (H / 2) * (W / 2)), 0};            // pool_bwd
}

std::pair<double, double> fc_work(const VerifyCase& c) {  // B,I,O: read dY, Y, W; write dX
    const auto& z = c.shape;
    const double B = z[0], I = z[1], O = z[2];
    return {4 * (2 * B * O + O * I + B * I), 2 * B * I * O};
}

// A conv-shaped row: its entry, the fields' forms, its check and harness, its work.
KernelRow conv_row(const char* entry, bool with_pool, void (*validate)(const VerifyCase&),
                   Harness (*harness)(const VerifyCase&, Rng&), Pass pass) {
    KernelRow r{.entry = entry,
                .shape = "N,C,H,W,K,KS,act",
                .shape_alt = with_pool ? "N,C,H,W,K,KS,act,pool" : "",
                .act_named = false,
                .validate = validate,
                .harness = harness};
    switch (pass) {
    case Pass::Fwd: r.work = [](const VerifyCase& c) { return conv_work(c, Pass::Fwd); }; break;
    case Pass::BwdData: r.work = [](const VerifyCase& c) { return conv_work(c, Pass::BwdData); }; break;
    case Pass::BwdWeights: r.work = [](const VerifyCase& c) { return conv_work(c, Pass::BwdWeights); }; break;
    }
    return r;
}

std::vector<KernelRow> conv_rows() {
    std::vector<KernelRow> rows;
    rows.push_back(conv_row(
        "conv_fwd", true, [](const VerifyCase& c) { validate_conv(c, conv_unfit); },
        [](const VerifyCase& c, Rng& rng) {
            return make_conv_fwd(dims_of(c), c.shape[6], ConvArith::Fp32, pooled(c), rng);
        },
        Pass::Fwd));
    rows.push_back(conv_row(
        "conv_bwd_data", false, [](const VerifyCase& c) { validate_conv(c, conv_unfit); },
        [](const VerifyCase& c, Rng& rng) { return make_conv_bwd_data(dims_of(c), c.shape[6], ConvArith::Fp32, rng); },
        Pass::BwdData));
    rows.push_back(conv_row(
        "conv_bwd_weights", false, [](const VerifyCase& c) { validate_conv(c, conv_unfit); },
        [](const VerifyCase& c, Rng& rng) { return make_conv_bwd_weights(dims_of(c), c.shape[6], false, rng); },
        Pass::BwdWeights));
    rows.push_back({.entry = "fc_bwd_data", .shape = "B,I,O,act", .act_named = false, .validate = validate_fc,
                    .harness = make_fc_bwd_data, .work = fc_work});
    rows.push_back({.entry = "pool_fwd", .shape = "N,C,H,W", .validate = validate_pool,
                    .harness = [](const VerifyCase& c, Rng& rng) { return make_pool(c, rng, false); },
                    .work = pool_work});
    rows.push_back({.entry = "pool_bwd", .shape = "N,C,H,W,mask", .validate = validate_pool,
                    .harness = [](const VerifyCase& c, Rng& rng) { return make_pool(c, rng, true); },
                    .work = pool_work});
    // The tensor-core twins of conv_fwd and conv_bwd_data (tcconv.hpp): the same tensors and
    // launch arguments, TF32 bounds; tc_conv_bwd_weights: conv_bwd_weights' (tcwgrad.hpp).
    rows.push_back(conv_row(
        "tc_conv_fwd", true, [](const VerifyCase& c) { validate_conv(c, tcconv_unfit); },
        [](const VerifyCase& c, Rng& rng) {
            return make_conv_fwd(dims_of(c), c.shape[6], ConvArith::Tf32, pooled(c), rng);
        },
        Pass::Fwd));
    rows.push_back(conv_row(
        "tc_conv_bwd_data", false, validate_tc_conv_bwd_data,
        [](const VerifyCase& c, Rng& rng) {
            if (c.shape.size() == 8 && c.shape[7] >= 1)
                return make_tc_conv_bwd_data_pooled(dims_of(c), c.shape[6], c.shape[7], rng);
            return make_conv_bwd_data(dims_of(c), c.shape[6], ConvArith::Tf32, rng);
        },
        Pass::BwdData));
    rows.back().shape_alt = "N,C,H,W,K,KS,act,pool";  // pool: the 2x2 max-pool below (make_tc_conv_bwd_data_pooled)
    rows.push_back(conv_row(
        "tc_conv_bwd_weights", false, [](const VerifyCase& c) { validate_conv(c, tcwgrad_unfit); },
        [](const VerifyCase& c, Rng& rng) { return make_conv_bwd_weights(dims_of(c), c.shape[6], true, rng); },
        Pass::BwdWeights));
    return rows;
}

}  // namespace

const KernelFamily& conv_family() {
    static const KernelFamily f{
        "conv", {"conv", "tcconv", "pool", "tcwgrad", "fc"}, conv_rows(), conv_default_cases, conv_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{conv_family, 80, 90};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
