// The hidden activations (--activation) on the GPU: a few training steps of the seed (ptx)
// and fused kernel sets with every activation against the float64 recipe step
// (cpu_recipe_step), the PTX against its NVRTC twins bit for bit, and `train` with every
// activation on every kernel set; a wrong derivative in the PTX is caught by verify.
#include "../../helpers.hpp"
#include "../common.hpp"
#include "../../planted.hpp"
#include "ptx_text.hpp"
#include "fused.hpp"
#include "optim.hpp"
#include "recipe.hpp"
#include "rng.hpp"
#include "train.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

constexpr unsigned kB = 32, kI = 64, kH = 48, kO = 10, kSteps = 5;
constexpr float kLr = 0.1f;

// kSteps batches of inputs in [0, 1) and random labels, from a fixed seed: a ReLU or
// leaky-ReLU unit whose pre-activation lands within rounding of 0 could take either side
// in float32 and float64, so the inputs are fixed (and were seen to have none there).
struct Batches {
    std::vector<float> X, T;  // [kSteps * kB][kI], one-hot [kSteps * kB][kO]
    std::vector<uint8_t> labels;
};
Batches make_batches() {
    Rng rng(20261123);
    Batches d;
    d.X.resize(size_t(kSteps) * kB * kI);
    for (auto& x : d.X) x = rng.uniform(0.0f, 1.0f);
    d.T.assign(size_t(kSteps) * kB * kO, 0.0f);
    for (unsigned s = 0; s < kSteps * kB; ++s) {
        d.labels.push_back(static_cast<uint8_t>(rng.below(kO)));
        d.T[size_t(s) * kO + d.labels.back()] = 1.0f;
    }
    return d;
}

// The flat parameters W1 b1 W2 b2 of a 2-layer net.
std::vector<float> flat(const NetParams& n) {
    std::vector<float> p;
    for (size_t l = 0; l < n.layers(); ++l) {
        p.insert(p.end(), n.W[l].begin(), n.W[l].end());
        p.insert(p.end(), n.b[l].begin(), n.b[l].end());
    }
    return p;
}
std::vector<double> flat(const Net64& n) {
    std::vector<double> p;
    for (size_t l = 0; l + 1 < n.sizes.size(); ++l) {
        p.insert(p.end(), n.W[l].begin(), n.W[l].end());
        p.insert(p.end(), n.b[l].begin(), n.b[l].end());
    }
    return p;
}

// kSteps steps of cross-entropy + plain SGD (lr kLr) with the seed set (grad2, batch_mean,
// optim_sgd) or the fused set (fused_forward, fused_output, fused_grad, optim_sgd) of
// `source`; the flat parameters after each step.
std::vector<std::vector<float>> gpu_steps(Design design, KernelSource source, unsigned act, const NetParams& start,
                                          const Batches& d) {
    const bool fused = design == Design::Fused;
    const std::vector<std::string> entries =
        fused ? std::vector<std::string>{"fused_forward", "fused_output", "fused_grad", "optim_sgd"}
              : std::vector<std::string>{"grad2", "batch_mean", "optim_sgd"};
    KernelSet ks(source, gpu().info(), KernelDirs::from_environment(), entries);
    const std::vector<float> p0 = flat(start);
    const size_t nW1 = size_t(kH) * kI, nW2 = size_t(kO) * kH, N = p0.size();
    const size_t oW1 = 0, ob1 = nW1, oW2 = ob1 + kH, ob2 = oW2 + nW2;
    DeviceBuffer P(N * 4, "P"), G(N * 4, "G"), X(d.X.size() * 4, "X"), T(d.T.size() * 4, "T");
    DeviceBuffer A1(size_t(kB) * kH * 4, "A1"), Y(size_t(kB) * kO * 4, "Y");
    DeviceBuffer D1(size_t(kB) * kH * 4, "D1"), D2(size_t(kB) * kO * 4, "D2");
    DeviceBuffer gW1(size_t(kB) * nW1 * 4, "gW1"), gW2(size_t(kB) * nW2 * 4, "gW2");
    DeviceBuffer hyp(sizeof(StepHyper), "hyp");
    P.upload(p0);
    X.upload(d.X);
    T.upload(d.T);
    OptimConfig o;
    o.kind = OptimKind::Sgd;
    const float scale = grad_scale(Loss::Ce, kB, kO);
    auto at = [](const DeviceBuffer& b, size_t floats) { return b.ptr() + floats * 4; };
    Stream st;
    std::vector<std::vector<float>> out;
    for (unsigned k = 0; k < kSteps; ++k) {
        const StepHyper h = step_hyper(o, kLr, k + 1);
        hyp.upload(&h, sizeof h);
        const CUdeviceptr Xk = at(X, size_t(k) * kB * kI), Tk = at(T, size_t(k) * kB * kO);
        if (fused) {
            FusedArgs a{Xk, Tk, at(P, oW1), at(P, ob1), at(P, oW2), at(P, ob2), A1.ptr(), Y.ptr(), D2.ptr(), D1.ptr(),
                        kB, kI, kH, kO};
            a.loss = kLossSoftmax;
            a.scale = scale;
            a.act = act;
            a.GW1 = at(G, oW1), a.Gb1 = at(G, ob1), a.GW2 = at(G, oW2), a.Gb2 = at(G, ob2);
            launch_fused_forward(ks, a, st.get());
            launch_fused_output(ks, a, st.get());
            launch_fused_grad(ks, a, st.get());
        } else {
            // Per-sample gradients (the deltas are the bias gradients: D1, D2), then their means.
            ks.get("grad2").launch(grid_for(kB, 64), 64, st.get(), Xk, Tk, at(P, oW1), at(P, ob1), at(P, oW2),
                                   at(P, ob2), A1.ptr(), Y.ptr(), gW1.ptr(), D1.ptr(), gW2.ptr(), D2.ptr(), kB, kI, kH,
                                   kO, kLossSoftmax, act);
            const Kernel& m = ks.get("batch_mean");
            const unsigned n1 = unsigned(nW1), n2 = unsigned(nW2);
            m.launch(grid_for(n1), 256, st.get(), at(G, oW1), gW1.ptr(), n1, kB, scale);
            m.launch(grid_for(kH), 256, st.get(), at(G, ob1), D1.ptr(), kH, kB, scale);
            m.launch(grid_for(n2), 256, st.get(), at(G, oW2), gW2.ptr(), n2, kB, scale);
            m.launch(grid_for(kO), 256, st.get(), at(G, ob2), D2.ptr(), kO, kB, scale);
        }
        launch_optimizer(ks, o, P.ptr(), G.ptr(), 0, 0, hyp.ptr(), unsigned(N), st.get());
        st.synchronize();
        out.push_back(P.download_vector<float>());
    }
    return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace

TEST_CASE("activation: a few SGD steps of the ptx and fused sets follow the float64 recipe step, for every activation") {
    const Batches d = make_batches();
    const NetParams start = init_params({kI, kH, kO}, Init::Torch, 7);
    for (unsigned act = kActRelu; act <= kActGelu; ++act) {
        const Activation f = activation_of_code(act);
        CAPTURE(to_string(f));
        // The float64 ground truth: cpu_recipe_step with the same start, batches and recipe.
        Net64 net;
        net.sizes = start.sizes;
        for (size_t l = 0; l < start.layers(); ++l) {
            net.W.emplace_back(start.W[l].begin(), start.W[l].end());
            net.b.emplace_back(start.b[l].begin(), start.b[l].end());
        }
        OptimState64 state;
        Recipe r;
        r.loss = Loss::Ce;
        r.optim.kind = OptimKind::Sgd;
        r.activation = f;
        std::vector<std::vector<double>> truth;
        for (unsigned k = 0; k < kSteps; ++k) {
            std::vector<double> Xk(d.X.begin() + long(k) * kB * kI, d.X.begin() + long(k + 1) * kB * kI);
            std::vector<uint8_t> lk(d.labels.begin() + long(k) * kB, d.labels.begin() + long(k + 1) * kB);
            cpu_recipe_step(net, state, r, Xk, lk, kB, kLr);
            truth.push_back(flat(net));
        }
        const std::vector<float> p0 = flat(start);
        for (Design design : {Design::Seed, Design::Fused}) {
            CAPTURE(design == Design::Fused ? "fused" : "ptx");
            const auto ptx = gpu_steps(design, KernelSource::Ptx, act, start, d);
            const auto ref = gpu_steps(design, KernelSource::Reference, act, start, d);
            for (unsigned k = 0; k < kSteps; ++k) {
                CAPTURE(k);
                // PTX and twin: the same bits after every step.
                CHECK(same_bits(ptx[k], ref[k]));
                // Against float64: every parameter within 1e-5 (the float32 steps differ from
                // it by about 1e-7; a wrong derivative moves parameters by about 1e-3).
                double worst = 0.0, moved = 0.0;
                for (size_t i = 0; i < p0.size(); ++i) {
                    worst = std::max(worst, std::fabs(double(ptx[k][i]) - truth[k][i]));
                    moved = std::max(moved, std::fabs(truth[k][i] - double(p0[i])));
                }
                CAPTURE(worst);
                CAPTURE(moved);
                CHECK(worst <= 1e-5);
                CHECK(moved > 1e-3);  // the steps did move the parameters: the comparison means something
            }
        }
    }
}

TEST_CASE("activation: train runs every activation on every kernel set, the PTX as its twins") {
    const Dataset data = load_dataset(default_data_dir());
    for (unsigned act = kActLeakyRelu; act <= kActGelu; ++act) {
        CAPTURE(to_string(activation_of_code(act)));
        for (auto [ptx, ref] : {std::pair{KernelChoice{Design::Fused, KernelSource::Ptx},
                                          KernelChoice{Design::Fused, KernelSource::Reference}},
                                std::pair{KernelChoice{Design::Fast, KernelSource::Ptx},
                                          KernelChoice{Design::Fast, KernelSource::Reference}},
                                std::pair{KernelChoice{Design::Seed, KernelSource::Ptx},
                                          KernelChoice{Design::Seed, KernelSource::Reference}}}) {
            CAPTURE(to_string(ptx));
            // The fused set runs fused_step (batch 64); `split` runs its separate launches.
            auto run = [&](KernelChoice k, bool split) {
                TrainConfig cfg;
                cfg.kernels = k;
                cfg.max_steps = 60;
                cfg.seed = 2;
                cfg.progress = false;
                cfg.activation = activation_of_code(act);
                cfg.one_launch = !split;
                std::ostringstream out;
                return train(gpu(), data, cfg, out);
            };
            const TrainResult a = run(ptx, false), b = run(ref, false);
            REQUIRE(a.step_losses.size() == 60);
            CHECK(a.step_losses == b.step_losses);
            CHECK(a.model.W == b.model.W);
            CHECK(a.step_losses.back() < a.step_losses.front());
            CHECK_FALSE(a.diverged);
            // The trained model evaluates with its activation as train reported it.
            KernelSet ks(KernelSource::Ptx, gpu().info(), KernelDirs::from_environment(),
                         forward_entries(ptx.design, a.model.sizes));
            const EvalResult e = evaluate(ks, a.model, data.test, Loss::Ce, activation_of_code(act));
            CHECK(e.accuracy == doctest::Approx(a.accuracy).epsilon(1e-12));
            if (ptx.design == Design::Fused) {
                const TrainResult c = run(ptx, true), d = run(ref, true);
                REQUIRE(c.step_losses.size() == 60);
                CHECK(c.step_losses == d.step_losses);
                CHECK(c.step_losses.back() < c.step_losses.front());
            }
        }
    }
}

TEST_CASE("activation: a wrong tanh derivative in grad.ptx is caught by verify for tanh, and only for tanh") {
    // grad_tanh_derivative.patch: activate_grad computes 1 + a^2 for tanh instead of 1 - a^2.
    const PlantedKernel planted = plant("grad_tanh_derivative");
    VerifyOptions opt;
    opt.seed = 5;
    opt.ptx_dirs = KernelDirs::from_ptx_dir(planted.dir());
    opt.reference_dirs = KernelDirs::from_environment();
    const auto r = run_verify(gpu(), {{"grad2", {64, 100, 37, 10, 1, kActTanh}}, {"grad2", {64, 100, 37, 10, 1, kActGelu}},
                                      {"grad2", {64, 100, 37, 10, 1, kActRelu}}},
                              opt);
    INFO(format_result(r[0]));
    CHECK_FALSE(r[0].pass());
    CHECK(r[0].f64_fail_ptx > 0);   // the wrong PTX misses the float64 reference ...
    CHECK(r[0].f64_fail_ref == 0);  // ... its twin does not
    REQUIRE_FALSE(r[0].mismatches.empty());
    CHECK(r[0].mismatches[0].find("gW1[") == 0);  // A1 and Y are right; the hidden layer's gradient is not
    // The other activations never reach that line.
    CHECK(r[1].pass());
    CHECK(r[2].pass());
}

TEST_CASE("activation: act_fwd and act_bwd (ptx/act.ptx), both sets, every activation, edge sizes") {
    // One element, an odd count, conv1's output of the CNN at batch 64; pre-activations near 0,
    // in [-12, 12] and saturating (|z| in [44, 60]) in every case (family_act.cpp).
    std::vector<VerifyCase> cases;
    for (const char* e : {"act_fwd", "act_bwd"})
        for (unsigned N : {1u, 1001u, 64u * 32 * 28 * 28})
            for (unsigned act = kActRelu; act <= kActGelu; ++act) cases.push_back({e, {N, act}});
    VerifyOptions opt;
    opt.seed = 3;
    opt.ptx_dirs = KernelDirs::from_environment();
    opt.reference_dirs = KernelDirs::from_environment();
    const auto r = run_verify(gpu(), cases, opt);
    REQUIRE(r.size() == cases.size());
    for (size_t i = 0; i < r.size(); ++i) {
        INFO(format_result(r[i]));
        CHECK(r[i].pass());
        CHECK(r[i].differing == 0);
        CHECK(r[i].unwritten_ptx == 0);
        CHECK(r[i].f64_fail_ptx == 0);
    }
}

TEST_CASE("activation: a wrong GELU derivative in act.ptx is caught by verify for GELU, and only there") {
    // act_gelu_derivative.patch: activate_grad returns z phi(z) for GELU, without Phi(z).
    const PlantedKernel planted = plant("act_gelu_derivative");
    VerifyOptions opt;
    opt.seed = 5;
    opt.ptx_dirs = KernelDirs::from_ptx_dir(planted.dir());
    opt.reference_dirs = KernelDirs::from_environment();
    const auto r = run_verify(gpu(), {{"act_bwd", {1001, kActGelu}}, {"act_bwd", {1001, kActTanh}},
                                      {"act_fwd", {1001, kActGelu}}, {"act_bwd", {1001, kActRelu}}},
                              opt);
    INFO(format_result(r[0]));
    CHECK_FALSE(r[0].pass());
    CHECK(r[0].differing > 0);
    CHECK(r[0].f64_fail_ptx > 0);   // the wrong PTX misses the float64 reference ...
    CHECK(r[0].f64_fail_ref == 0);  // ... its twin does not
    REQUIRE_FALSE(r[0].mismatches.empty());
    CHECK(r[0].mismatches[0].find("G[") == 0);
    // The other codes and the forward pass never reach that line.
    CHECK(r[1].pass());
    CHECK(r[2].pass());
    CHECK(r[3].pass());
    // On the command line too: verify says FAIL and exits 1.
    const RunResult run =
        run_command(ptxlab_cmd("verify --kernel act_bwd --shape 1001,4 --ptx-dir " + planted.dir()));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("FAIL") != std::string::npos);
}
