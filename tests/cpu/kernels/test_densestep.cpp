// dense_program's host side (host/kernels/densestep.hpp): the record's layout against the offsets
// the PTX reads, the ksplit choice, the phase table of an fc step (stages, shapes, pointers) and,
// emulated on the CPU in the kernel's summation order (densestep.ptx's header) on host buffers,
// the step that table computes against the float64 step of the same network.
#include "../../helpers.hpp"
#include "densestep.hpp"
#include "error.hpp"
#include "files.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "rng.hpp"
#include "train_cnn.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <vector>

using namespace ptxlab;

TEST_CASE("densestep: the record's layout is the one densestep.ptx and its twin read") {
    CHECK(sizeof(DensePhase) == 128);
    const std::map<std::string, size_t> host = {
        {"op", offsetof(DensePhase, op)},       {"M", offsetof(DensePhase, M)},
        {"N", offsetof(DensePhase, N)},         {"K", offsetof(DensePhase, K)},
        {"a_sm", offsetof(DensePhase, a_sm)},   {"a_sk", offsetof(DensePhase, a_sk)},
        {"b_sn", offsetof(DensePhase, b_sn)},   {"b_sk", offsetof(DensePhase, b_sk)},
        {"relu", offsetof(DensePhase, relu)},   {"scale", offsetof(DensePhase, scale)},
        {"ks", offsetof(DensePhase, ksplit)},   {"rot", offsetof(DensePhase, rot)},
        {"bflag", offsetof(DensePhase, barrier)}, {"loss", offsetof(DensePhase, loss)},
        {"C", offsetof(DensePhase, C)},         {"db", offsetof(DensePhase, db)},
        {"A", offsetof(DensePhase, A)},         {"Am", offsetof(DensePhase, Am)},
        {"Bo", offsetof(DensePhase, Bo)},       {"bias", offsetof(DensePhase, bias)}};
    // Every `ld.global.TYPE REG, [rec+OFF];` of the PTX: the field it loads is at that offset.
    const std::string ptx = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/densestep.ptx").text;
    const std::regex ld(R"(ld\.global\.(u32|u64|f32)\s+(\w+), \[rec\+(\d+)\];)");
    std::map<std::string, size_t> seen;
    for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), ld); it != std::sregex_iterator(); ++it) {
        const std::string reg = (*it)[2];
        CAPTURE(reg);
        REQUIRE(host.count(reg) == 1);
        CHECK(host.at(reg) == std::stoul((*it)[3]));
        CHECK(std::string((*it)[1]) == (host.at(reg) >= 56 ? "u64" : reg == "scale" ? "f32" : "u32"));
        seen[reg] = std::stoul((*it)[3]);
    }
    CHECK(seen.size() == host.size());
    CHECK(ptx.find("mul.wide.u32    off, ph, 128;") != std::string::npos);  // the record's stride
    // The twin declares the same fields in the same order.
    const std::string twin = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/reference/densestep.cu").text;
    CHECK(twin.find("unsigned op, M, N, K, a_sm, a_sk, b_sn, b_sk, relu;\n    float scale;\n    unsigned ksplit, rot, "
                    "barrier, loss;\n    unsigned long long C, db, A, Am, Bo, bias;\n    unsigned long long reserved[3];") !=
          std::string::npos);
}

TEST_CASE("densestep: ksplit takes the fewest k tiles one after another, the smaller on a tie") {
    // 784 -> 256 at B = 64: 4 tiles, 49 k tiles; on 16 clusters one round either way: 8 ranks (7 k tiles).
    CHECK(densestep_ksplit(4, 49, 16) == 8);
    // Its weight gradient: 256 x 785 is 52 tiles, K = 64 is 4 k tiles: ks 2 (2 k tiles, one round).
    CHECK(densestep_ksplit(52, 4, 16) == 2);
    // 1024 x 1025 at B = 64 (272 tiles) on 16 clusters: ks 4, 9 rounds of one k tile.
    CHECK(densestep_ksplit(272, 4, 16) == 4);
    CHECK(densestep_ksplit(1, 1, 16) == 1);
    CHECK(densestep_ksplit(1, 1000, 1, 4) == 4);  // never more than the cluster
}

namespace {
// A network's buffers on the host, their addresses as the "device" pointers.
struct HostNet {
    std::vector<unsigned> sizes;
    unsigned B;
    std::vector<float> X, T, Y, D, P, G;
    std::vector<std::vector<float>> act, delta;
    DenseNet net;
    HostNet(std::vector<unsigned> w, unsigned B_, Rng& rng) : sizes(std::move(w)), B(B_) {
        const size_t L = sizes.size() - 1;
        size_t np = 0;
        for (size_t l = 0; l < L; ++l) np += size_t(sizes[l + 1]) * (sizes[l] + 1);
        P.resize(np);
        for (auto& p : P) p = rng.uniform(-0.3f, 0.3f);
        G.assign(np, NAN);
        X.resize(size_t(B) * sizes[0]);
        for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
        T.assign(size_t(B) * sizes[L], 0.0f);
        for (unsigned s = 0; s < B; ++s) T[size_t(s) * sizes[L] + rng.below(sizes[L])] = 1.0f;
        Y.assign(T.size(), NAN);
        D.assign(T.size(), NAN);
        net.B = B, net.sizes = sizes, net.loss = kLossSoftmax, net.scale = 1.0f / float(B);
        auto at = [](std::vector<float>& v, size_t i) { return CUdeviceptr(reinterpret_cast<uintptr_t>(v.data() + i)); };
        net.X = at(X, 0), net.T = at(T, 0), net.Y = at(Y, 0), net.D = at(D, 0);
        size_t off = 0;
        for (size_t l = 0; l < L; ++l) {
            const size_t nw = size_t(sizes[l + 1]) * sizes[l];
            net.W.push_back(at(P, off)), net.gW.push_back(at(G, off));
            net.b.push_back(at(P, off + nw)), net.gb.push_back(at(G, off + nw));
            off += nw + sizes[l + 1];
        }
        for (size_t l = 0; l + 1 < L; ++l) {
            act.emplace_back(size_t(B) * sizes[l + 1], NAN);
            delta.emplace_back(size_t(B) * sizes[l + 1], NAN);
        }
        for (size_t l = 0; l + 1 < L; ++l) net.act.push_back(at(act[l], 0)), net.delta.push_back(at(delta[l], 0));
    }
};

float* fp(uint64_t p) { return reinterpret_cast<float*>(uintptr_t(p)); }

// dense_program on the CPU, phase by phase, in the kernel's order: per group rank kr a fmaf chain
// over its k tiles, the ranks added in order, the scale, the bias, ReLU; the delta's sequence
// with exp2f in place of ex2.approx.
void emulate(const std::vector<DensePhase>& phases) {
    for (const DensePhase& p : phases) {
        if (p.op == kDensePhaseDelta) {
            for (unsigned s = 0; s < p.M; ++s) {
                const float *y = fp(p.A) + size_t(s) * p.N, *t = fp(p.Bo) + size_t(s) * p.N;
                float* d = fp(p.C) + size_t(s) * p.N;
                float mx = y[0], sum = 0.0f;
                for (unsigned o = 1; o < p.N; ++o) mx = std::max(mx, y[o]);
                for (unsigned o = 0; o < p.N; ++o) sum += (d[o] = std::exp2((y[o] - mx) * 1.44269502162933349609375f));
                for (unsigned o = 0; o < p.N; ++o) d[o] = d[o] / sum - t[o];
            }
            continue;
        }
        const unsigned ktn = (p.K + 15) / 16, tpr = (ktn + p.ksplit - 1) / p.ksplit, Np = p.N + (p.db ? 1 : 0);
        for (unsigned m = 0; m < p.M; ++m)
            for (unsigned n = 0; n < Np; ++n) {
                float sum = 0.0f;
                for (unsigned kr = 0; kr < p.ksplit; ++kr) {
                    float part = 0.0f;
                    for (unsigned k = kr * tpr * 16; k < std::min(kr * tpr + tpr, ktn) * 16 && k < p.K; ++k) {
                        const size_t ao = size_t(m) * p.a_sm + size_t(k) * p.a_sk;
                        float a = fp(p.A)[ao];
                        if (p.Am && !(fp(p.Am)[ao] > 0.0f)) a = 0.0f;
                        const float b = n == p.N ? 1.0f : fp(p.Bo)[size_t(n) * p.b_sn + size_t(k) * p.b_sk];
                        part = std::fma(a, b, part);
                    }
                    sum = kr == 0 ? part : sum + part;
                }
                float v = sum * p.scale;
                if (n == p.N) {
                    fp(p.db)[m] = v;
                    continue;
                }
                if (p.bias) v += fp(p.bias)[n];
                if (p.relu) v = std::max(v, 0.0f);
                fp(p.C)[size_t(m) * p.N + n] = v;
            }
    }
}

// The float64 step of the same network: the mean cross-entropy's gradient in the flat layout.
std::vector<double> step64(const HostNet& h) {
    const size_t L = h.sizes.size() - 1;
    const unsigned B = h.B;
    std::vector<std::vector<double>> a(L + 1);
    a[0].assign(h.X.begin(), h.X.end());
    std::vector<size_t> woff(L);
    for (size_t l = 0, off = 0; l < L; ++l) woff[l] = off, off += size_t(h.sizes[l + 1]) * (h.sizes[l] + 1);
    for (size_t l = 0; l < L; ++l) {
        const unsigned I = h.sizes[l], O = h.sizes[l + 1];
        a[l + 1].assign(size_t(B) * O, 0.0);
        for (unsigned s = 0; s < B; ++s)
            for (unsigned o = 0; o < O; ++o) {
                double z = h.P[woff[l] + size_t(O) * I + o];
                for (unsigned i = 0; i < I; ++i) z += double(h.P[woff[l] + size_t(o) * I + i]) * a[l][size_t(s) * I + i];
                a[l + 1][size_t(s) * O + o] = l + 1 < L ? std::max(z, 0.0) : z;
            }
    }
    const unsigned O = h.sizes[L];
    std::vector<double> g(size_t(B) * O), grad(h.P.size());
    for (unsigned s = 0; s < B; ++s) {
        double mx = a[L][size_t(s) * O], sum = 0.0;
        for (unsigned o = 0; o < O; ++o) mx = std::max(mx, a[L][size_t(s) * O + o]);
        for (unsigned o = 0; o < O; ++o) sum += std::exp(a[L][size_t(s) * O + o] - mx);
        for (unsigned o = 0; o < O; ++o)
            g[size_t(s) * O + o] = std::exp(a[L][size_t(s) * O + o] - mx) / sum - h.T[size_t(s) * O + o];
    }
    for (size_t l = L; l-- > 0;) {
        const unsigned I = h.sizes[l], Ol = h.sizes[l + 1];
        for (unsigned o = 0; o < Ol; ++o) {
            double gb = 0.0;
            for (unsigned s = 0; s < B; ++s) gb += g[size_t(s) * Ol + o];
            grad[woff[l] + size_t(Ol) * I + o] = gb / B;
            for (unsigned i = 0; i < I; ++i) {
                double gw = 0.0;
                for (unsigned s = 0; s < B; ++s) gw += g[size_t(s) * Ol + o] * a[l][size_t(s) * I + i];
                grad[woff[l] + size_t(o) * I + i] = gw / B;
            }
        }
        if (l == 0) break;
        std::vector<double> below(size_t(B) * I, 0.0);
        for (unsigned s = 0; s < B; ++s)
            for (unsigned i = 0; i < I; ++i) {
                double d = 0.0;
                for (unsigned o = 0; o < Ol; ++o) d += g[size_t(s) * Ol + o] * h.P[woff[l] + size_t(o) * I + i];
                below[size_t(s) * I + i] = a[l][size_t(s) * I + i] > 0.0 ? d : 0.0;
            }
        g = std::move(below);
    }
    return grad;
}
}  // namespace

TEST_CASE("densestep: the phase table of 784-256-128-10 at batch 64, stage by stage") {
    Rng rng(1);
    HostNet h({784, 256, 128, 10}, 64, rng);
    const DenseNet& n = h.net;
    const std::vector<DensePhase> v = densestep_phases(n, 16);
    REQUIRE(v.size() == 9);
    CHECK(dense_phases_unfit(v).empty());
    // Stages: fwd1 | fwd2 | fwd3 | delta | gW3, dX2 | gW2, dX1 | gW1 (no barrier after the last).
    const std::vector<unsigned> barrier = {1, 1, 1, 1, 0, 1, 0, 1, 0};
    for (size_t i = 0; i < v.size(); ++i) CHECK(v[i].barrier == barrier[i]);
    // Forward: M = B, N = out, K = in; X, act1, act2 in; act1, act2, Y out; ReLU but on the logits.
    const unsigned fN[] = {256, 128, 10}, fK[] = {784, 256, 128};
    const CUdeviceptr fin[] = {n.X, n.act[0], n.act[1]}, fout[] = {n.act[0], n.act[1], n.Y};
    for (unsigned l = 0; l < 3; ++l) {
        CAPTURE(l);
        CHECK(v[l].op == kDensePhaseGemm);
        CHECK(v[l].M == 64);
        CHECK(v[l].N == fN[l]);
        CHECK(v[l].K == fK[l]);
        CHECK(v[l].A == fin[l]);
        CHECK(v[l].Bo == n.W[l]);
        CHECK(v[l].bias == n.b[l]);
        CHECK(v[l].C == fout[l]);
        CHECK(v[l].relu == (l < 2 ? 1u : 0u));
        CHECK(v[l].Am == 0);
        CHECK(v[l].db == 0);
        CHECK(v[l].a_sm == fK[l]);
        CHECK(v[l].a_sk == 1);
    }
    CHECK(v[0].ksplit == 8);  // 4 tiles, 49 k tiles
    // The delta: D from Y and T, the loss code.
    CHECK(v[3].op == kDensePhaseDelta);
    CHECK(v[3].M == 64);
    CHECK(v[3].N == 10);
    CHECK(v[3].A == n.Y);
    CHECK(v[3].Bo == n.T);
    CHECK(v[3].C == n.D);
    CHECK(v[3].loss == kLossSoftmax);
    // Backward: gW3 from D (no mask) and act2; dX2 = D W3; gW2 from delta2 masked by act2 and act1;
    // dX1 = (delta2 masked) W2; gW1 from delta1 masked by act1 and X; all scaled 1/B.
    CHECK(v[4].C == n.gW[2]);
    CHECK(v[4].db == n.gb[2]);
    CHECK(v[4].A == n.D);
    CHECK(v[4].Am == 0);
    CHECK(v[4].Bo == n.act[1]);
    CHECK(v[4].M == 10);
    CHECK(v[4].N == 128);
    CHECK(v[4].K == 64);
    CHECK(v[4].scale == 1.0f / 64);
    CHECK(v[5].C == n.delta[1]);
    CHECK(v[5].A == n.D);
    CHECK(v[5].Bo == n.W[2]);
    CHECK(v[5].M == 64);
    CHECK(v[5].N == 128);
    CHECK(v[5].K == 10);
    CHECK(v[6].C == n.gW[1]);
    CHECK(v[6].A == n.delta[1]);
    CHECK(v[6].Am == n.act[1]);
    CHECK(v[6].Bo == n.act[0]);
    CHECK(v[7].C == n.delta[0]);
    CHECK(v[7].A == n.delta[1]);
    CHECK(v[7].Am == n.act[1]);
    CHECK(v[7].Bo == n.W[1]);
    CHECK(v[8].C == n.gW[0]);
    CHECK(v[8].db == n.gb[0]);
    CHECK(v[8].A == n.delta[0]);
    CHECK(v[8].Am == n.act[0]);
    CHECK(v[8].Bo == n.X);
    CHECK(v[8].M == 256);
    CHECK(v[8].N == 784);
    CHECK(v[8].ksplit == 2);  // 52 tiles, 4 k tiles
    // rot: a stage's second phase starts where the first one's tile slots end.
    CHECK(v[5].rot == densestep_slots(v[4]));
    CHECK(v[7].rot == densestep_slots(v[6]));
    CHECK(v[4].rot == 0);
    // The grid: the largest stage's slots (gW1: 52 tiles in groups of 4 a cluster, 13).
    CHECK(densestep_clusters_wanted(v) == 13);
    CHECK(densestep_plan(n, 16, 32).clusters == 13);
    CHECK(densestep_plan(n, 16, 4).clusters == 4);
    CHECK(densestep_plan(n, 16, 4).phases[8].ksplit == 2);  // the order: the nominal clusters'
}

TEST_CASE("densestep: the table's step, emulated in the kernel's order, is the float64 step's gradient") {
    Rng rng(7);
    for (const std::vector<unsigned>& w : {std::vector<unsigned>{9, 7, 5, 3}, std::vector<unsigned>{30, 1, 70, 4},
                                           std::vector<unsigned>{20, 65, 10}, std::vector<unsigned>{11, 33, 17, 9, 6, 5}}) {
        for (unsigned B : {1u, 5u, 67u}) {
            CAPTURE(w.size());
            CAPTURE(B);
            HostNet h(w, B, rng);
            emulate(densestep_plan(h.net, 3, 3).phases);
            const std::vector<double> ref = step64(h);
            double worst = 0.0, scale = 1e-6;
            for (double r : ref) scale = std::max(scale, std::fabs(r));
            for (size_t i = 0; i < ref.size(); ++i) {
                REQUIRE(!std::isnan(h.G[i]));  // every gradient written
                worst = std::max(worst, std::fabs(h.G[i] - ref[i]));
            }
            CHECK(worst <= 1e-4 * scale);
        }
    }
}

TEST_CASE("densestep: the networks and tables it refuses, with a reason") {
    Rng rng(3);
    HostNet h({9, 7, 5, 3}, 4, rng);
    DenseNet n = h.net;
    CHECK(dense_net_unfit(n).empty());
    n.sizes = {9, 3};
    CHECK(dense_net_unfit(n).find("2 layers or more") != std::string::npos);
    n = h.net;
    n.B = 0;
    CHECK(dense_net_unfit(n).find("batch") != std::string::npos);
    n = h.net;
    n.sizes[1] = 0;
    CHECK(dense_net_unfit(n).find("widths") != std::string::npos);
    n = h.net;
    n.delta.pop_back();
    CHECK(dense_net_unfit(n).find("each of its") != std::string::npos);
    n = h.net;
    n.gb[1] = 0;
    CHECK(dense_net_unfit(n).find("missing") != std::string::npos);
    n = h.net;
    n.loss = 2;
    CHECK(dense_net_unfit(n).find("loss code") != std::string::npos);
    CHECK_THROWS_AS(densestep_phases(n, 4), InputError);
    std::vector<DensePhase> v = densestep_phases(h.net, 4);
    v[2].ksplit = 3;
    CHECK(dense_phases_unfit(v).find("ksplit 3") != std::string::npos);
    v = densestep_phases(h.net, 4);
    v[0].op = 7;
    CHECK(dense_phases_unfit(v).find("op 7") != std::string::npos);
    CHECK(!dense_phases_unfit({}).empty());
}

TEST_CASE("densestep: the fc-only networks the model trainer runs as dense_program + the optimizer, and its listing") {
    const KernelChoice tc{Design::Tc, KernelSource::Ptx}, fused{Design::Fused, KernelSource::Reference};
    const Model m = parse_model("fc256,fc128,fc10");
    CHECK(dense_step_unfit(m, tc, 64, Activation::Relu).empty());
    CHECK(dense_step_unfit(m, fused, 64, Activation::Relu).empty());
    CHECK(dense_step_unfit(parse_model("fc128,fc10"), tc, 1, Activation::Relu).empty());
    CHECK(dense_step_unfit(parse_model("cnn"), tc, 64, Activation::Relu).find("fc layers only") != std::string::npos);
    CHECK(dense_step_unfit(parse_model("fc64,bn,fc10"), tc, 64, Activation::Relu).find("fc layers only") !=
          std::string::npos);
    CHECK(dense_step_unfit(m, tc, 64, Activation::Tanh).find("ReLU") != std::string::npos);
    CHECK(dense_step_unfit(m, {Design::Seed, KernelSource::Ptx}, 64, Activation::Relu).find("fused and tc") !=
          std::string::npos);
    // The table: each layer's forward stage, its deltas' and weight gradient's (one stage).
    const std::string t = dense_step_layer_kernels(m);
    CAPTURE(t);
    CHECK(t.find("fc1     dense_program (stage 1)") != std::string::npos);
    CHECK(t.find("fc3     dense_program (stage 3, loss 4)") != std::string::npos);
    CHECK(t.find("dense_program (5)    dense_program (5)") != std::string::npos);  // fc3's deltas, gradient
    CHECK(t.find("-                    dense_program (7)") != std::string::npos);  // fc1: no deltas below it
}
