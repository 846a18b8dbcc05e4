// ptx/hopper/densewgk.ptx (dense_wg_k): a dense layer's forward product for few rows on wgmma TF32
// fed by TMA, K split over a cluster of R blocks (sm_90a: a device of compute capability 9.0 only;
// elsewhere verify reports its cases as skipped). Shape M,N,K,R,flags: C [M][N] = mask?(relu?(A [M][K]
// B [N][K]^T + bias)), flags bit 0 ReLU, bit 1 the bias, bit 2 the mask (+0 where !(Y [M][N] > 0),
// Y random in [-1, 1): about half the outputs cleared); R 1, 2, 4 or 8 ranks, 0 the launch's own
// choice (densewgk_plan; the bound then takes 8). Each output against float64 within
// densewgk_bound (densewgk.hpp: TF32 truncation, the chain, the join, the bias), the PTX against
// its twin bit for bit (verify's rule for every kernel).
// Beside it ptx/hopper/transpose.ptx (transpose32, the trainer's W^T for dense_wg_k's deltas): shape
// R,C, out [C][R] = in [R][C]^T, a copy (bound 0).
#include "densewgk.hpp"
#include "dense_products.hpp"
#include "parallel_rows.hpp"
#include "registry.hpp"

#include <algorithm>
#include <cmath>

namespace ptxlab::verify_detail {

namespace {

Harness make_densewgk(const VerifyCase& c, Rng& rng) {
    const auto& z = c.shape;
    const unsigned M = z[0], N = z[1], K = z[2], R = z[3], flags = z[4];
    const bool relu = flags & kDenseWgkFlagRelu, has_bias = flags & kDenseWgkFlagBias;
    const bool masked = flags & kDenseWgkFlagMask;
    const unsigned bound_ranks = R ? R : kDenseWgkMaxRanks;
    const float w = 1.0f / std::sqrt(float(K));
    std::vector<float> A = random_vector(rng, size_t(M) * K, -1.0f, 1.0f);
    std::vector<float> B = random_vector(rng, size_t(N) * K, -w, w);
    std::vector<float> b = random_vector(rng, N, -w, w);
    std::vector<float> Y = random_vector(rng, size_t(M) * N, -1.0f, 1.0f);
    Harness h;
    Bounded& C = h.expected["C"];
    C.resize(size_t(M) * N);
    for_rows(M, double(K) * N, [&](size_t m0, size_t m1) {
        for (size_t g0 = m0; g0 < m1; g0 += 4)  // 4 rows of A against each row of B
            for (unsigned n = 0; n < N; ++n) {
                const size_t cnt = std::min<size_t>(m1 - g0, 4);
                double sum[4] = {0, 0, 0, 0}, mag[4] = {0, 0, 0, 0};
                dots4(A.data() + g0 * K, K, cnt, B.data() + size_t(n) * K, K, sum, mag);
                for (size_t k = 0; k < cnt; ++k) {
                    const double exact = sum[k] + (has_bias ? double(b[n]) : 0.0);
                    const size_t i = (g0 + k) * N + n;
                    const bool cleared = masked && !(Y[i] > 0.0f);
                    C.v[i] = cleared ? 0.0 : relu ? std::max(exact, 0.0) : exact;
                    C.e[i] = cleared ? 0.0 : densewgk_bound(K, bound_ranks, mag[k], exact);
                }
            }
    });
    h.tensors = {{"A", {M, K}, Role::In, A}, {"B", {N, K}, Role::In, B}, {"bias", {N}, Role::In, b},
                 {"Y", {M, N}, Role::In, Y}, {"C", {M, N}, Role::Out, {}}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) {
        DenseWgkArgs a;
        a.C = m.at("C"), a.A = m.at("A"), a.B = m.at("B"), a.bias = has_bias ? m.at("bias") : 0;
        a.mask = masked ? m.at("Y") : 0;
        a.M = M, a.N = N, a.K = K, a.relu = relu;
        launch_dense_wg_k(k, a, s, false, R);
    };
    return h;
}

void validate_densewgk(const VerifyCase& c) {
    const auto& z = c.shape;
    if (z.size() != 5)
        PTXLAB_THROW(InputError, "kernel 'dense_wg_k' takes a shape M,N,K,R,flags (5 numbers), got {}", z.size());
    if (z[0] == 0 || z[0] > 16384 || z[1] == 0 || z[1] > 16384)
        PTXLAB_THROW(InputError, "kernel 'dense_wg_k': M and N must be 1 .. 16384, got M={} N={}", z[0], z[1]);
    if (z[2] < 4 || z[2] % 4 != 0 || z[2] > 16384)
        PTXLAB_THROW(InputError, "kernel 'dense_wg_k': K must be a multiple of 4 in 4 .. 16384 (TMA's 16-byte rows), got {}",
                     z[2]);
    if (z[3] != 0 && z[3] != 1 && z[3] != 2 && z[3] != 4 && z[3] != 8)
        PTXLAB_THROW(InputError, "kernel 'dense_wg_k': R must be 0 (the launch's choice), 1, 2, 4 or 8, got {}", z[3]);
    if (z[4] > 7)
        PTXLAB_THROW(InputError, "kernel 'dense_wg_k': flags must be 0 .. 7 (1 ReLU + 2 bias + 4 mask), got {}", z[4]);
}

// Edge shapes: M = 1, 63, 64, 65, 129 (one row; one short of, at and one past a 64-row tile; three
// tiles); N = 1, 10, 127, 128, 129, 1024 (scalar stores where N % 4 != 0; one short of, at, past a
// 128-column tile; eight clusters); K = 4 (one k tile of 4 k, 28 zero-filled), 36 (a second tile
// of 4 k), 784, 1024 (the trainer's layers: 25 and 32 k tiles, the ring wrapping at R = 1, 2);
// every R (with K = 4 and 36: ranks without tiles, their partial +0) and every flag, each shape
// under two (R, flags) pairs taken in turn. Then the trainer's two forward products at the
// launch's R, and its deltas (the mask alone: 784,1024,1024,10's and 784,256,128,10's, the CNN's
// fc1 into pool2's 3136), one with an odd N (scalar loads of Y).
std::vector<VerifyCase> densewgk_default_cases() {
    const std::vector<std::vector<unsigned>> shapes = {
        {1, 1, 4},      {63, 10, 36},    {64, 127, 784},  {65, 128, 1024}, {129, 129, 36},  {1, 1024, 1024},
        {64, 1024, 4},  {63, 129, 784},  {65, 10, 1024},  {129, 1, 784},   {64, 128, 36},   {1, 127, 1024},
        {129, 1024, 784}};
    const unsigned ranks[] = {1, 2, 4, 8};
    std::vector<VerifyCase> v;
    unsigned n = 0;
    for (const auto& s : shapes)
        for (unsigned j = 0; j < 2; ++j, ++n) v.push_back({"dense_wg_k", {s[0], s[1], s[2], ranks[n % 4], (n / 4 + n) % 4}});
    v.push_back({"dense_wg_k", {64, 1024, 784, 0, 3}});
    v.push_back({"dense_wg_k", {64, 1024, 1024, 0, 3}});
    for (const std::vector<unsigned>& s : {std::vector<unsigned>{64, 1024, 1024}, {64, 256, 128}, {64, 3136, 128},
                                           {65, 130, 36}})
        v.push_back({"dense_wg_k", {s[0], s[1], s[2], 0, 4}});
    v.push_back({"dense_wg_k", {63, 129, 100, 2, 7}});
    // transpose32: one element, edges past a tile either way, the trainer's W^T (1024 x 1024,
    // 128 x 256, the CNN's fc1 128 x 3136).
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{{1, 1}, {33, 65}, {1000, 3}, {1024, 1024},
                                                                             {128, 256}, {128, 3136}})
        v.push_back({"transpose32", s});
    return v;
}

// The quick set: a part tile with scalar stores at R = 8 (empty ranks), the ring wrapping at R = 1.
std::vector<VerifyCase> densewgk_quick_cases() {
    return {{"dense_wg_k", {65, 129, 36, 8, 3}}, {"dense_wg_k", {64, 128, 1024, 1, 1}}, {"dense_wg_k", {63, 130, 64, 2, 4}},
            {"transpose32", {33, 65}}};
}

// bench: the MNIST net's hidden layer forward (784 -> 128, ReLU and bias) at batch B.
BenchShape densewgk_bench_shape(unsigned B) { return std::vector<unsigned>{B, kBenchH, kBenchI, 0, 3}; }

// Bytes (A, B, C, bias; with the mask Y) and flops (2 M N K).
std::pair<double, double> densewgk_work(const VerifyCase& c) {
    const double M = c.shape[0], N = c.shape[1], K = c.shape[2];
    const double Y = (c.shape[4] & kDenseWgkFlagMask) ? M * N : 0.0;
    return {4 * (M * K + N * K + M * N + N + Y), 2 * M * N * K};
}

Harness make_transpose(const VerifyCase& c, Rng& rng) {
    const unsigned R = c.shape[0], C = c.shape[1];
    Harness h;
    std::vector<float> in = random_vector(rng, size_t(R) * C, -1.0f, 1.0f);
    Bounded& out = h.expected["out"];
    out.resize(size_t(R) * C);
    for (size_t r = 0; r < R; ++r)
        for (size_t col = 0; col < C; ++col) out.v[col * R + r] = in[r * C + col];  // e stays 0: a copy
    h.tensors = {{"in", {R, C}, Role::In, in}, {"out", {C, R}, Role::Out, {}}};
    h.launch = [=](const Kernel& k, const DevicePtrs& m, CUstream s) { launch_transpose32(k, m.at("out"), m.at("in"), R, C, s); };
    return h;
}

void validate_transpose(const VerifyCase& c) {
    const auto& z = c.shape;
    if (z.size() != 2) PTXLAB_THROW(InputError, "kernel 'transpose32' takes a shape R,C (2 numbers), got {}", z.size());
    if (z[0] == 0 || z[1] == 0 || uint64_t(z[0]) * z[1] > (1u << 26))
        PTXLAB_THROW(InputError, "kernel 'transpose32': R and C must be >= 1 with R * C <= 2^26, got R={} C={}", z[0],
                     z[1]);
}

// bench: the trainer's W^T of a 1024 x 1024 layer (B unused).
BenchShape transpose_bench_shape(unsigned) { return std::vector<unsigned>{1024, 1024}; }
std::pair<double, double> transpose_work(const VerifyCase& c) { return {8.0 * c.shape[0] * c.shape[1], 0.0}; }

std::vector<KernelRow> densewgk_rows() {
    return {{.entry = "dense_wg_k", .shape = "M,N,K,R,flags", .act_named = false, .validate = validate_densewgk,
             .harness = make_densewgk, .bench_shape = densewgk_bench_shape, .work = densewgk_work},
            {.entry = "transpose32", .shape = "R,C", .act_named = false, .validate = validate_transpose,
             .harness = make_transpose, .bench_shape = transpose_bench_shape, .work = transpose_work}};
}

}  // namespace

const KernelFamily& densewgk_family() {
    static const KernelFamily f{"densewgk", {"hopper/densewgk", "hopper/transpose"}, densewgk_rows(), densewgk_default_cases,
                                densewgk_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{densewgk_family, 130, 160};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
