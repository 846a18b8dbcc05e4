// dense_mm (ptx/dense.ptx): the PTX against its twin bit for bit and both against float64 on
// random shapes of each of a dense layer's three products and every cluster size; a planted
// bug in its cross-rank join must be caught.
#include "../../helpers.hpp"
#include "../../planted.hpp"
#include "../common.hpp"
#include "dense.hpp"
#include "idx.hpp"
#include "model.hpp"
#include "train.hpp"
#include "train_cnn.hpp"
#include "recipe.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <random>
#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
CaseResult verify_dense(std::vector<unsigned> shape, const KernelDirs& ptx_dirs, unsigned seed) {
    return verify_one("dense_mm", std::move(shape), ptx_dirs, seed);
}
}  // namespace

TEST_CASE("dense: dense_mm equals its twin bit for bit and float64 within its bound on random shapes") {
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    std::mt19937 gen(seed);
    auto size = [&](unsigned hi) { return std::uniform_int_distribution<unsigned>(1, hi)(gen); };
    const unsigned clusters[] = {0, 1, 2, 4, 8};
    for (int i = 0; i < 24; ++i) {
        // op, B, I, O, act, cluster: mostly small sizes, now and then a training-sized one.
        const bool big = i % 6 == 5;
        const unsigned op = unsigned(i % 3), B = big ? size(600) : size(130), I = big ? size(1100) : size(300);
        const unsigned O = big ? size(1100) : size(300), act = size(2) - 1, cl = clusters[size(5) - 1];
        const std::vector<unsigned> shape = {op, B, I, O, act, cl};
        const CaseResult r = verify_dense(shape, KernelDirs::from_environment(), seed + i);
        INFO(format_result(r));
        CHECK(r.pass());
        CHECK(r.elements > 0);
    }
}

TEST_CASE("dense: a dense_mm whose join skips a rank is caught by verify") {
    // dense_join_skips_rank.patch: the join starts at rank 2, so with clusters of 2 or more
    // blocks rank 1's partial sums are missing from every output (all still written).
    const PlantedKernel planted = plant("dense_join_skips_rank");
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    for (unsigned op = 0; op < 3; ++op) {
        const CaseResult r = verify_dense({op, 64, 300, 200, 1, 4}, KernelDirs::from_ptx_dir(planted.dir()), seed);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
    }
    // Clusters of one block never join another rank: the planted kernel is right there.
    const CaseResult one = verify_dense({0, 64, 300, 200, 1, 1}, KernelDirs::from_ptx_dir(planted.dir()), seed);
    INFO(format_result(one));
    CHECK(one.pass());
    RunResult run =
        run_command(ptxlab_cmd("verify --kernel dense_mm --shape 1,64,1024,1024,1,8 --ptx-dir " + planted.dir()));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("0 cases passed, 1 failed") != std::string::npos);
}

TEST_CASE("dense: train --model fc1024,fc1024,fc10 --kernels tc at batch 64 on dense_wg_k (9.0) and tc_grad_weights_wide, the PTX as its twins") {
    // The 1024-wide layers take tc_grad_weights_wide for fc1's weight gradient and the last two
    // layers' gradients (dense_replaces_fused_grad, batch <= 128); their forward passes and fc2's
    // deltas (from W^T, a transpose32 copy) dense_wg_k on a device of compute capability 9.0
    // (cnn_ops.hpp), else dense_mm: 64 steps of the PTX and of the twins, bit for bit.
    const bool wgk = cnn_wgk_loaded(gpu().info());
    INFO("dense_wg_k loaded: ", wgk);
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 64, Activation::Relu, false, wgk) ==
          (wgk ? "transpose32, dense_wg_k x3, fused_output, tc_grad_weights_wide x3"
               : "dense_mm x3, fused_output, tc_grad_weights_wide x3"));
    const Dataset data = load_dataset(default_data_dir());
    // (one_launch off: the layer-by-layer step, as train runs it without --dense-program.)
    const TrainResult ptx = train_model_steps(data, "fc1024,fc1024,fc10", 64, KernelSource::Ptx, 0, false),
                      twin = train_model_steps(data, "fc1024,fc1024,fc10", 64, KernelSource::Reference, 0, false);
    CHECK(ptx.steps == 64);
    CHECK(ptx.step_losses == twin.step_losses);
    REQUIRE(ptx.params.size() == twin.params.size());
    CHECK(std::memcmp(ptx.params.data(), twin.params.data(), ptx.params.size() * 4) == 0);
    CHECK(ptx.step_losses.back() < ptx.step_losses.front());
}

TEST_CASE("dense: the optimizer by layer on the side streams gives the bits of one launch after the step") {
    // With its weight gradients on side streams (cfg.overlap, train's default) the model trainer
    // updates each layer of 512K parameters or more there, right after its gradient and its
    // deltas (LayerUpdates, train_cnn.cpp); the others (here the bn's, between two such ranges)
    // after the join. An update that read a gradient not yet written, wrote a weight a deltas
    // launch still read, skipped a range or offset the optimizer's state wrongly would change
    // bits somewhere in 64 steps (CUDA graphs).
    const Dataset data = load_dataset(default_data_dir());
    for (const ModelRun& run : {ModelRun{"fc1024,fc1024,fc10", OptimKind::Nesterov, 0.05f},
                                ModelRun{"fc1024,fc1024,fc10", OptimKind::Adam, 1e-3f},
                                ModelRun{"fc1024,bn,fc512,fc10", OptimKind::RmsProp, 1e-3f}}) {
        CAPTURE(run.model);
        CAPTURE(static_cast<int>(run.optim));
        auto steps = [&](bool overlap) {
            TrainConfig cfg = model_run_config(run, 64);
            cfg.overlap = overlap;
            std::ostringstream out;
            return train(gpu(), data, cfg, out);
        };
        const TrainResult on = steps(true), off = steps(false);
        CHECK(on.steps == 64);
        CHECK(on.step_losses == off.step_losses);
        REQUIRE(on.params.size() == off.params.size());
        CHECK(std::memcmp(on.params.data(), off.params.data(), on.params.size() * 4) == 0);
        CHECK(on.step_losses.back() < on.step_losses.front());
    }
}

TEST_CASE("dense: train --model fc1024,fc1024,fc10 --kernels tc --max-steps 64 lists dense_wg_k for fc1 and fc2 on 9.0") {
    const Dataset data = load_dataset(default_data_dir());  // (skips without MNIST, as train would fail)
    const RunResult r = run_command(ptxlab_cmd("train --model fc1024,fc1024,fc10 --kernels tc --max-steps 64 --no-progress"));
    INFO(r.output);
    CHECK(r.code == 0);
    const bool wgk = cnn_wgk_loaded(gpu().info());
    CHECK((r.output.find("fc1     dense_wg_k") != std::string::npos) == wgk);
    CHECK((r.output.find("fc2     dense_wg_k") != std::string::npos) == wgk);
    CHECK(r.output.find("fc3     dense_wg_k") == std::string::npos);  // the output layer: fused_output
}

TEST_CASE("dense: dense_wg_k equals its twin bit for bit and float64 within its bound at verify's cases, skipped off 9.0") {
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    const bool wgk = cnn_wgk_loaded(gpu().info());
    size_t n = 0;
    for (const VerifyCase& c : default_cases()) {
        if (c.entry != "dense_wg_k") continue;
        const CaseResult r = verify_one(c.entry, c.shape, KernelDirs::from_environment(), seed + unsigned(n++));
        INFO(format_result(r));
        if (wgk) {
            CHECK(r.pass());
            CHECK(r.elements > 0);
            CHECK(r.skipped.empty());
        } else {
            CHECK(r.skipped.find("compute capability 9.0") != std::string::npos);
            CHECK_FALSE(r.pass());
        }
    }
    CHECK(n >= 20);
    // The command: every case passes (exit 0) on 9.0; elsewhere they are named as skipped.
    const RunResult v = run_command(ptxlab_cmd("verify --kernel dense_wg_k --seed 5"));
    INFO(v.output);
    CHECK(v.code == 0);
    CHECK((v.output.find("skipped") != std::string::npos) == !wgk);
}

namespace {
CaseResult verify_densetc(std::vector<unsigned> shape, const KernelDirs& ptx_dirs, unsigned seed) {
    return verify_one("dense_tc", std::move(shape), ptx_dirs, seed);
}
}  // namespace

TEST_CASE("dense: dense_tc equals its twin bit for bit and float64 within its TF32 bound at edge and random shapes") {
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    // op, B, I, O, act: 1s, odd sizes, one past and one short of a 128 x 128 tile and of a
    // 16-k chunk, the ones column alone in a tile (I = 128 with db), each product, both acts.
    std::vector<std::vector<unsigned>> shapes;
    for (unsigned op = 0; op < 3; ++op)
        for (const auto& s : std::vector<std::array<unsigned, 3>>{
                 {1, 1, 1}, {1, 17, 1}, {3, 9, 5}, {129, 127, 17}, {127, 129, 16}, {257, 128, 33}, {130, 1, 255}})
            for (unsigned act : {0u, 1u}) shapes.push_back({op, s[0], s[1], s[2], act});
    std::mt19937 gen(seed);
    auto size = [&](unsigned hi) { return std::uniform_int_distribution<unsigned>(1, hi)(gen); };
    for (int i = 0; i < 12; ++i) shapes.push_back({unsigned(i % 3), size(400), size(400), size(400), size(2) - 1});
    for (size_t i = 0; i < shapes.size(); ++i) {
        const CaseResult r = verify_densetc(shapes[i], KernelDirs::from_environment(), seed + unsigned(i));
        INFO(format_result(r));
        CHECK(r.pass());
        CHECK(r.elements > 0);
    }
}

TEST_CASE("dense: a dense_tc that skips its last k chunk is caught by verify") {
    // densetc_skips_last_chunk.patch: each rank's loop (both paths) stops before its last chunk's
    // (pair's) mma, so with K = 130 .. 301 every output misses some products (all still
    // written); with K <= 16 (one chunk, one pair, one rank) it is right. I = 300: every product
    // on the cp.async path; I = 301 (W's and X's strides odd): on the register-staged path. The
    // split is forced to 2: the launch's own choice, 8 ranks for these few tiles, leaves a rank one
    // pair of the cp.async path (K = 130 or 200), whose loop has no step to skip.
    const PlantedKernel planted = plant("densetc_skips_last_chunk");
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    for (unsigned I : {300u, 301u})
        for (unsigned op = 0; op < 3; ++op) {
            INFO("op ", op, " I ", I);
            const CaseResult r = verify_densetc({op, 130, I, 200, 1, 2}, KernelDirs::from_ptx_dir(planted.dir()), seed);
            INFO(format_result(r));
            check_planted_caught(r);
            CHECK(r.unwritten_ptx == 0);
        }
    const CaseResult one = verify_densetc({0, 64, 16, 200, 1}, KernelDirs::from_ptx_dir(planted.dir()), seed);
    INFO(format_result(one));
    CHECK(one.pass());
}

TEST_CASE("dense: train --kernels tc at batch 4096 on dense_wg_k (9.0) and dense_tc, the PTX as its twins") {
    // At batch 4096 fc1024,fc1024,fc10's two forward passes and fc2's deltas (4096 x 1024 outputs)
    // take dense_wg_k on a 9.0 device (cnn_ops.hpp), dense_tc elsewhere. fc1022,fc1022,fc10 puts
    // fc2's forward pass and deltas on dense_tc there too: K = 1022 and O = 1022 are not multiples of
    // 4, which dense_wg_k's tensor maps need. The weight gradients stay on dense_mm. 10 steps of the
    // PTX and of the twins of each, bit for bit.
    const bool wgk = cnn_wgk_loaded(gpu().info());
    const std::string wide = cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 4096,
                                              Activation::Relu, false, wgk),
                      odd = cnn_step_kernels(parse_model("fc1022,fc1022,fc10"), ConvKernels::Tc, 4096,
                                             Activation::Relu, false, wgk);
    CHECK(wide == (wgk ? "transpose32, dense_wg_k x3, fused_output, dense_mm x3" : "dense_tc x3, fused_output, dense_mm x3"));
    CHECK(odd.find("dense_tc") != std::string::npos);
    CHECK((odd.find("dense_wg_k") != std::string::npos) == wgk);  // fc1's forward pass (K = 784)
    const Dataset data = load_dataset(default_data_dir());
    for (const char* spec : {"fc1024,fc1024,fc10", "fc1022,fc1022,fc10"}) {
        CAPTURE(spec);
        const TrainResult ptx = train_model_steps(data, spec, 10, KernelSource::Ptx, 4096),
                          twin = train_model_steps(data, spec, 10, KernelSource::Reference, 4096);
        CHECK(ptx.steps == 10);
        CHECK(ptx.step_losses == twin.step_losses);
        REQUIRE(ptx.params.size() == twin.params.size());
        CHECK(std::memcmp(ptx.params.data(), twin.params.data(), ptx.params.size() * 4) == 0);
        CHECK(ptx.step_losses.back() < ptx.step_losses.front());
    }
}
