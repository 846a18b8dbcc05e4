// dense_tc's host side (host/kernels/densetc.hpp): the launch plan, the shapes it refuses, the
// threshold where the tc set's fc products take it, verify's shape checks; that densetc.ptx
// assembles for sm_90 without spills; and a CPU model of the kernel's chain (densetc.ptx's
// header: TF32 inputs, one accumulator a k tile of 8, the padding included, the epilogue) on
// the strides the three products pass, which must give the layer's maths within the bound.
#include "compile.hpp"
#include "dense.hpp"
#include "densetc.hpp"
#include "error.hpp"
#include "files.hpp"
#include "registry.hpp"
#include "verify_harness.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <array>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace ptxlab;

TEST_CASE("densetc: the plan is a cluster of S blocks a 128 x 128 tile over M x (N + the ones column)") {
    // The layer, 1024 -> 1024 at batch 4096: forward and deltas 32 x 8 tiles, unsplit
    // (256 blocks fill the 264 a 132-SM H100 holds; S = 2 would take two waves of 32 chunks).
    DenseTcPlan p = densetc_plan(4096, 1024, 1024, false, 132);
    CHECK(p.tiles_m == 32);
    CHECK(p.tiles_n == 8);
    CHECK(p.chunks == 64);
    CHECK(p.split == 1);
    CHECK(p.per_rank == 64);
    CHECK(p.grid == 256);
    // Its weight gradient: 1024 x (1024 + 1) outputs, K = 4096: the ones column a tile column of
    // its own; 72 tiles split 7 ways: 504 blocks, two waves of 37 chunks (S = 3: one wave of 86;
    // S = 8: three waves of 32; unsplit: 256).
    p = densetc_plan(1024, 1024, 4096, true, 132);
    CHECK(p.tiles_m == 8);
    CHECK(p.tiles_n == 9);
    CHECK(p.chunks == 256);
    CHECK(p.split == 7);
    CHECK(p.per_rank == 37);
    CHECK(p.grid == 504);
    CHECK(densetc_rank_range(p, 0).first == 0);
    CHECK(densetc_rank_range(p, 0).end == 37);
    CHECK(densetc_rank_range(p, 6).first == 222);
    CHECK(densetc_rank_range(p, 6).end == 256);
    // Edges: 1 x 1 x 1 (one chunk: no split); one past and one short of a tile; K = 17, two chunks.
    p = densetc_plan(1, 1, 1, false, 132);
    CHECK(p.grid == 1);
    CHECK(p.chunks == 1);
    CHECK(p.split == 1);
    p = densetc_plan(129, 127, 17, false, 132);
    CHECK(p.tiles_m == 2);
    CHECK(p.tiles_n == 1);
    CHECK(p.chunks == 2);
    CHECK(p.split == 2);
    CHECK(p.grid == 4);
    CHECK(densetc_plan(129, 127, 17, true, 132).tiles_n == 1);  // 127 + 1 columns: still one tile
    CHECK(densetc_plan(129, 128, 17, true, 132).tiles_n == 2);  // 128 + 1: the ones column alone
    // A forced split, more ranks than chunks: the ranks past the chunks have none.
    p = densetc_plan(1, 1, 20, false, 132, 8);
    CHECK(p.split == 8);
    CHECK(p.chunks == 2);
    CHECK(p.per_rank == 1);
    CHECK(p.grid == 8);
    CHECK(densetc_rank_range(p, 1).first == 1);
    CHECK(densetc_rank_range(p, 1).end == 2);
    CHECK(densetc_rank_range(p, 2).first == densetc_rank_range(p, 2).end);
    CHECK(densetc_rank_range(p, 7).first == densetc_rank_range(p, 7).end);
    // Every split covers every chunk once, in rank order.
    for (unsigned s = 1; s <= kDenseTcMaxSplit; ++s)
        for (unsigned K : {1u, 16u, 17u, 130u, 300u, 4096u}) {
            p = densetc_plan(200, 300, K, true, 132, s);
            unsigned next = 0;
            for (unsigned r = 0; r < s; ++r) {
                const DenseTcRange g = densetc_rank_range(p, r);
                if (g.first == g.end) continue;
                CHECK(g.first == next);
                next = g.end;
            }
            CHECK(next == p.chunks);
        }
}

TEST_CASE("densetc: the shapes it refuses, each in one message") {
    DenseArgs a = dense_forward_args(0, 3, 4, 1, 2, 3, 4, 1);
    CHECK(densetc_unfit(a).find("dense_tc takes M, N, K >= 1") != std::string::npos);
    a = dense_forward_args(2, 3, 4, 1, 2, 3, 4, 1);
    CHECK(densetc_unfit(a).empty());
    a.C = 0;
    CHECK(densetc_unfit(a) == "dense_tc needs C, A and Bop");
    a = dense_forward_args(2, 3, 0x80000000u, 1, 2, 3, 4, 1);
    CHECK(densetc_unfit(a).find("below 2^31") != std::string::npos);
    // N = 2^31 - 1 with the ones column would need 2^31 columns.
    a = dense_bwd_weights_args(4, 0x7fffffffu, 3, 1, 2, 3, 4, 0, 0, 1.0f);
    CHECK(densetc_unfit(a).find("below 2^31") != std::string::npos);
    // A launch of an unfit shape throws InputError before it touches the (empty) kernel.
    Kernel k;
    CHECK_THROWS_AS(launch_dense_tc(k, dense_forward_args(0, 3, 4, 1, 2, 3, 4, 1), nullptr), InputError);
    CHECK_THROWS_WITH_AS(launch_dense_tc(k, dense_forward_args(2, 3, 4, 1, 2, 3, 4, 1), nullptr, false, 9),
                         doctest::Contains("1 .. 8"), InputError);
}

TEST_CASE("densetc: the tc set takes it only from a full wave of 128 x 128 tiles, and today's batch-64 models stay below") {
    CHECK(kDenseTcMinOutputs == 132u * 128 * 128);
    CHECK(densetc_product(4096, 1024));   // the forward and deltas
    CHECK(densetc_product(1024, 4096));
    CHECK(!densetc_product(1024, 1024));  // 784-1024-1024-10's weight gradient at any batch
    // Every product of today's models at batch 64 (784-128-10, 784-256-128-10, 784-1024-1024-10,
    // the CNN's fc layers): outputs B x O, B x I and O x I.
    for (const auto& l : std::vector<std::array<unsigned, 2>>{
             {784, 128}, {128, 10}, {784, 256}, {256, 128}, {784, 1024}, {1024, 1024}, {1024, 10}, {3136, 128}}) {
        CHECK(!densetc_product(64, l[1]));
        CHECK(!densetc_product(64, l[0]));
        CHECK(!densetc_product(l[1], l[0] + 1));
    }
}

TEST_CASE("densetc: verify's shapes: op,B,I,O,act[,split]") {
    const KernelRow& row = kernel_row("dense_tc");
    CHECK(row.shape == "op,B,I,O,act");
    CHECK(row.shape_alt == "op,B,I,O,act,split");
    CHECK(shape_names("dense_tc", 6) == "op,B,I,O,act,split");
    CHECK_NOTHROW(row.validate({"dense_tc", {2, 4096, 1024, 1024, 1}}));
    CHECK_NOTHROW(row.validate({"dense_tc", {2, 4096, 1024, 1024, 1, 0}}));
    CHECK_NOTHROW(row.validate({"dense_tc", {2, 4096, 1024, 1024, 1, 8}}));
    CHECK_THROWS_WITH_AS(row.validate({"dense_tc", {0, 4, 4, 4, 1, 9}}), doctest::Contains("split must be 0"),
                         InputError);
    CHECK_THROWS_WITH_AS(row.validate({"dense_tc", {0, 4, 4, 4, 1, 0, 0}}),
                         doctest::Contains("op,B,I,O,act[,split] (5 or 6 numbers)"), InputError);
    CHECK_THROWS_WITH_AS(row.validate({"dense_tc", {3, 4, 4, 4, 1}}), doctest::Contains("op must be 0"), InputError);
    CHECK_THROWS_WITH_AS(row.validate({"dense_tc", {0, 0, 4, 4, 1}}), doctest::Contains("1 .. 16384"), InputError);
    CHECK_THROWS_WITH_AS(row.validate({"dense_tc", {0, 4, 4, 4, 2}}), doctest::Contains("act must be 0"), InputError);
    // The default set runs each product at the shape and at a 1 x 1 x 1 (the launch's
    // split and split 8), and each at splits 1, 3 and 8 with k strides multiple of 4 and odd;
    // three forward passes at the cp.async path's edges (splits 0, 2, 3).
    size_t big = 0, one = 0, split[9] = {};
    for (const VerifyCase& c : default_cases())
        if (c.entry == "dense_tc") {
            CHECK_NOTHROW(row.validate(c));
            big += c.shape[1] == 4096 && c.shape[2] == 1024 && c.shape[3] == 1024;
            one += c.shape[1] == 1 && c.shape[2] == 1 && c.shape[3] == 1;
            ++split[c.shape.size() > 5 ? c.shape[5] : 0];
        }
    CHECK(big == 3);
    CHECK(one == 6);
    CHECK(split[1] == 10);
    CHECK(split[2] == 4);
    CHECK(split[3] == 10);
    CHECK(split[8] == 10);
}

TEST_CASE("densetc: the cp.async path takes operands k-major or along rows, and verify's cases reach each") {
    // the rule on its own: 16-byte units along k (row stride % 4 == 0) or along rows
    DenseArgs a;
    a.A = 256, a.Bo = 512, a.a_sm = 8, a.a_sk = 1, a.b_sn = 1, a.b_sk = 12;
    CHECK(densetc_cp_async(a));
    a.b_sk = 10;
    CHECK_FALSE(densetc_cp_async(a));  // W's k stride not a multiple of 4
    a.b_sk = 12, a.a_sm = 1, a.a_sk = 4;
    CHECK(densetc_cp_async(a));
    a.Am = 260;
    CHECK_FALSE(densetc_cp_async(a));  // the mask's base not 16-byte aligned
    a.Am = 0, a.a_sm = 2, a.a_sk = 4;
    CHECK_FALSE(densetc_cp_async(a));  // neither k-major nor along rows
    // the verify cases: each product with the mask on and off reaches the cp.async path (at
    // device pointers, 256-byte aligned), the ones column and a split above 1 among them; the
    // last three fall back
    const std::vector<VerifyCase> cases = verify_detail::densetc_fast_cases();
    REQUIRE(cases.size() == 11);
    std::map<std::pair<unsigned, unsigned>, int> reached;  // (op, act) -> cases on the path
    int split_many = 0, k_odd = 0, fallback = 0;
    for (const VerifyCase& c : cases) {
        const unsigned op = c.shape[0], B = c.shape[1], I = c.shape[2], O = c.shape[3], act = c.shape[4];
        const CUdeviceptr p = 1 << 20;
        const DenseArgs d = op == 1 ? dense_bwd_data_args(B, I, O, p, p, act ? p : 0, p, act)
                                    : dense_bwd_weights_args(B, I, O, p, p, p, p, act ? p : 0, act, 1.0f);
        if (!densetc_cp_async(d)) {
            ++fallback;
            continue;
        }
        ++reached[{op, act}];
        split_many += c.shape[5] > 1;
        k_odd += d.K % 4 != 0;
        CHECK((d.M % 128 != 0 || (d.N + (d.db ? 1 : 0)) % 128 != 0));
    }
    CHECK(reached.size() == 4);
    CHECK(split_many >= 4);
    CHECK(k_odd >= 3);
    CHECK(fallback == 3);
}

TEST_CASE("densetc: densetc.ptx assembles for sm_90: no spills, its shared memory all dynamic") {
    const SourceFile src = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/densetc.ptx");
    const AssemblyResult r = assemble_offline(src, "sm_90");
    CAPTURE(r.error_log);
    REQUIRE(r.ok);
    REQUIRE(r.entries.size() == 1);
    const EntryResources& e = r.entries[0];
    CHECK(e.name == "dense_tc");
    CHECK(e.spill_stores == 0);
    CHECK(e.spill_loads == 0);
    CHECK(e.local == 0);
    CHECK(e.registers <= 128);  // .minnctapersm 2: two blocks of 256 threads an SM
    CHECK(e.shared == 0);  // the stages are dynamic: kDenseTcSmem at launch
    CHECK(kDenseTcSmem == 110592u);
    CHECK(2 * (kDenseTcSmem + 1024) <= 228u * 1024);  // two blocks an SM (1 KB reserved a block)
}

namespace {
// cvt.rna.tf32.f32 on the CPU: nearest, ties away from zero, the 13 low bits cleared (finite x).
float tf32(float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x1000u) & ~0x1fffu;
    std::memcpy(&x, &u, 4);
    return x;
}
// A model of one mma's sums: the 8 exact products and c summed exactly, then truncated toward
// zero to FP32 (the tensor core's truncation, at its worst: the bound must hold for it).
float mma_model(const float* a, const float* b, float c) {
    double s = c;
    for (int k = 0; k < 8; ++k) s += double(a[k]) * b[k];
    float f = float(s);
    if (std::fabs(double(f)) > std::fabs(s)) f = std::nextafter(f, 0.0f);
    return f;
}
// The kernel's chain for every output on the CPU (the header's order), from the arguments'
// strides: buffers found by their (fake) pointer value.
struct ChainOut {
    std::vector<float> C, db;
};
ChainOut model(const DenseArgs& a, unsigned split, const std::map<CUdeviceptr, const std::vector<float>*>& mem) {
    auto at = [&](CUdeviceptr p, size_t i) { return (*mem.at(p))[i]; };
    const unsigned Np = a.N + (a.db ? 1 : 0);
    const DenseTcPlan p = densetc_plan(a.M, a.N, a.K, a.db != 0, 132, split);
    ChainOut r{std::vector<float>(size_t(a.M) * a.N), std::vector<float>(a.db ? a.M : 0)};
    for (unsigned m = 0; m < a.M; ++m)
        for (unsigned n = 0; n < Np; ++n) {
            float sum = 0.0f;
            for (unsigned rank = 0; rank < p.split; ++rank) {  // rank r's chain over its chunks, joined in order
                const DenseTcRange g = densetc_rank_range(p, rank);
                float c = 0.0f;
                for (unsigned k0 = 16 * g.first; k0 < 16 * g.end; k0 += 8) {
                    float x[8] = {}, y[8] = {};
                    for (unsigned j = 0; j < 8 && k0 + j < a.K; ++j) {
                        const size_t o = size_t(m) * a.a_sm + size_t(k0 + j) * a.a_sk;
                        x[j] = a.Am && !(at(a.Am, o) > 0.0f) ? 0.0f : tf32(at(a.A, o));
                        y[j] = n == a.N ? 1.0f : tf32(at(a.Bo, size_t(n) * a.b_sn + size_t(k0 + j) * a.b_sk));
                    }
                    c = mma_model(x, y, c);
                }
                sum = rank == 0 ? c : sum + c;
            }
            float v = sum * a.scale;
            if (n == a.N) {
                r.db[m] = v;
                continue;
            }
            if (a.bias) v += at(a.bias, n);
            if (a.relu) v = std::max(v, 0.0f);
            r.C[size_t(m) * a.N + n] = v;
        }
    return r;
}
std::vector<float> rand(Rng& rng, size_t n, bool relu) {
    std::vector<float> v(n);
    for (auto& x : v) x = relu ? std::max(rng.uniform(-1.0f, 1.0f), 0.0f) : rng.uniform(-1.0f, 1.0f);
    return v;
}
}  // namespace

TEST_CASE("densetc: a model of the split chains on the three products' strides is within the TF32 bound") {
    Rng rng(34);
    for (const auto& s : std::vector<std::vector<unsigned>>{
             {3, 9, 5, 1}, {5, 257, 33, 3}, {1, 1, 1, 8}, {17, 130, 40, 1}, {17, 130, 40, 5}, {70, 33, 100, 8}}) {
        const unsigned B = s[0], I = s[1], O = s[2], split = s[3];
        CAPTURE(split);
        CAPTURE(B);
        CAPTURE(I);
        CAPTURE(O);
        const auto X = rand(rng, size_t(B) * I, false), W = rand(rng, size_t(O) * I, false);
        const auto b = rand(rng, O, false);
        const auto dY = rand(rng, size_t(B) * O, false), Y = rand(rng, size_t(B) * O, true);
        const std::map<CUdeviceptr, const std::vector<float>*> mem = {{1, &X}, {2, &W}, {3, &b}, {4, &dY}, {5, &Y}};
        const float scale = 0.37f;
        const ChainOut f = model(dense_forward_args(B, I, O, 1, 2, 3, 9, 1), split, mem);
        const ChainOut d = model(dense_bwd_data_args(B, I, O, 9, 4, 5, 2, 1), split, mem);
        const ChainOut w = model(dense_bwd_weights_args(B, I, O, 9, 8, 1, 4, 5, 1, scale), split, mem);
        auto g = [&](size_t t, size_t o) { return Y[t * O + o] > 0.0f ? double(dY[t * O + o]) : 0.0; };
        for (unsigned t = 0; t < B; ++t)
            for (unsigned o = 0; o < O; ++o) {  // forward: Y = ReLU(X W^T + b)
                double z = 0, mag = 0;
                for (unsigned i = 0; i < I; ++i) z += double(X[t * I + i]) * W[o * I + i], mag += std::fabs(double(X[t * I + i]) * W[o * I + i]);
                CHECK(std::fabs(f.C[t * O + o] - std::max(z + b[o], 0.0)) <= densetc_bound(I, split, mag, 1.0f, z, z + b[o]));
            }
        for (unsigned t = 0; t < B; ++t)
            for (unsigned i = 0; i < I; ++i) {  // deltas: dX = G W
                double z = 0, mag = 0;
                for (unsigned o = 0; o < O; ++o) z += g(t, o) * W[o * I + i], mag += std::fabs(g(t, o) * W[o * I + i]);
                CHECK(std::fabs(d.C[t * I + i] - z) <= densetc_bound(O, split, mag, 1.0f, z, z));
            }
        for (unsigned o = 0; o < O; ++o) {  // weights: dW = scale G^T X, db = scale sum_s G
            double zb = 0, mb = 0;
            for (unsigned t = 0; t < B; ++t) zb += g(t, o), mb += std::fabs(g(t, o));
            CHECK(std::fabs(w.db[o] - scale * zb) <= densetc_bound(B, split, mb, scale, scale * zb, scale * zb));
            for (unsigned i = 0; i < I; ++i) {
                double z = 0, mag = 0;
                for (unsigned t = 0; t < B; ++t) z += g(t, o) * X[t * I + i], mag += std::fabs(g(t, o) * X[t * I + i]);
                CHECK(std::fabs(w.C[o * I + i] - scale * z) <= densetc_bound(B, split, mag, scale, scale * z, scale * z));
            }
        }
    }
}

TEST_CASE("densetc: verify's float64 reference of each product is the layer's maths on the harness's inputs") {
    using verify_detail::Harness;
    for (unsigned op = 0; op < 3; ++op) {
        CAPTURE(op);
        const unsigned B = 5, I = 7, O = 3;
        Rng rng(7 + op);
        const Harness h = kernel_row("dense_tc").harness({"dense_tc", {op, B, I, O, 1}}, rng);
        std::map<std::string, const std::vector<float>*> in;
        for (const auto& t : h.tensors) in[t.name] = &t.data;
        auto G = [&](unsigned s, unsigned o) {  // dY masked by Y > 0 (act 1)
            return (*in.at("Y"))[s * O + o] > 0.0f ? double((*in.at("dY"))[s * O + o]) : 0.0;
        };
        if (op == 0) {
            const auto &X = *in.at("X"), &W = *in.at("W"), &b = *in.at("b");
            for (unsigned s = 0; s < B; ++s)
                for (unsigned o = 0; o < O; ++o) {
                    double z = b[o];
                    for (unsigned i = 0; i < I; ++i) z += double(X[s * I + i]) * W[o * I + i];
                    CHECK(h.expected.at("Y").v[s * O + o] == doctest::Approx(std::max(z, 0.0)).epsilon(1e-12));
                }
        } else if (op == 1) {
            const auto& W = *in.at("W");
            for (unsigned s = 0; s < B; ++s)
                for (unsigned i = 0; i < I; ++i) {
                    double z = 0;
                    for (unsigned o = 0; o < O; ++o) z += G(s, o) * W[o * I + i];
                    CHECK(h.expected.at("dX").v[s * I + i] == doctest::Approx(z).epsilon(1e-12));
                    CHECK(h.expected.at("dX").e[s * I + i] >= 0.0);
                }
        } else {
            // dW = scale G^T X, db = scale sum_s G, one scale (drawn in [0.5, 2] / B) for all.
            const auto& X = *in.at("X");
            double scale = 0;
            for (unsigned o = 0; o < O; ++o) {
                double zb = 0;
                for (unsigned s = 0; s < B; ++s) zb += G(s, o);
                if (zb != 0 && scale == 0) scale = h.expected.at("db").v[o] / zb;
                CHECK(h.expected.at("db").v[o] == doctest::Approx(scale * zb).epsilon(1e-12));
                for (unsigned i = 0; i < I; ++i) {
                    double z = 0;
                    for (unsigned s = 0; s < B; ++s) z += G(s, o) * X[s * I + i];
                    CHECK(h.expected.at("dW").v[o * I + i] == doctest::Approx(scale * z).epsilon(1e-12));
                }
            }
            CHECK(scale >= 0.5 / B);
            CHECK(scale <= 2.0 / B);
        }
    }
}
