// Every kernel, both sets (hand-written PTX and NVRTC twin), against the float64
// reference and each other; and a deliberately wrong kernel that must be caught.
#include "../../helpers.hpp"
#include "../common.hpp"
#include "../../planted.hpp"
#include "fused.hpp"
#include "optimizers.hpp"
#include "ptx_text.hpp"
#include "recipe.hpp"
#include "rng.hpp"
#include "tcstep.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
CaseResult verify_one(const std::string& entry, std::vector<unsigned> shape, const KernelDirs& ptx_dirs) {
    VerifyOptions opt;
    opt.seed = std::random_device{}();  // fresh inputs every run; printed on failure
    opt.reference_dirs = KernelDirs::from_environment();
    opt.ptx_dirs = ptx_dirs;
    auto r = run_verify(gpu(), {{entry, std::move(shape)}}, opt);
    INFO("seed ", opt.seed);
    return r.at(0);
}

// A planted kernel in directory `dir` on the command line: verify exits 1, its one case failed.
RunResult check_cli_fails_in(const std::string& entry, const std::string& shape, const std::string& dir) {
    RunResult run = run_command(ptxlab_cmd("verify --kernel " + entry + " --shape " + shape + " --ptx-dir " + dir));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("0 cases passed, 1 failed") != std::string::npos);
    return run;
}

// A planted kernel (tests/planted.hpp) on the command line: verify says FAIL and exits 1.
void check_cli_fails(const std::string& entry, const std::string& shape, const PlantedKernel& planted) {
    RunResult run = check_cli_fails_in(entry, shape, planted.dir());
    CAPTURE(run.output);
    CHECK(run.output.find("FAIL") != std::string::npos);
}

}  // namespace

// The last number of the forward and delta kernels' shapes is the activation code (recipe.hpp
// act_code: 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu); grad2, grad3 and fused_output's
// number before it the loss code: 0 y - t, 1 softmax(y) - t.
namespace {
// A planted one-launch step at `shape`: verify catches it, every output is written, and the first
// mismatch is the buffer `first` names (e.g. "W1[": the outputs listed before it are right).
void check_first_mismatch(const std::string& entry, std::vector<unsigned> shape, const KernelDirs& dirs,
                          const char* first) {
    CaseResult r = verify_one(entry, std::move(shape), dirs);
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find(first) == 0);
}
}  // namespace

TEST_CASE("kernels: forward2, both sets, every activation") {
    for (unsigned act = 0; act <= kActGelu; ++act) {
        CAPTURE(act);
        check_both_sets("forward2", {63, 784, 100, 10, act});
    }
}
TEST_CASE("kernels: forward3, both sets, every activation") {
    for (unsigned act = 0; act <= kActGelu; ++act) {
        CAPTURE(act);
        check_both_sets("forward3", {64, 300, 129, 33, 7, act});
    }
}
TEST_CASE("kernels: grad2, both sets, both loss codes, every activation") {
    for (unsigned act = 0; act <= kActGelu; ++act) {
        CAPTURE(act);
        check_both_sets("grad2", {65, 784, 128, 10, 0, act});
        check_both_sets("grad2", {65, 784, 128, 10, 1, act});
    }
}
TEST_CASE("kernels: grad3, both sets, both loss codes, every activation") {
    for (unsigned act = 0; act <= kActGelu; ++act) {
        CAPTURE(act);
        check_both_sets("grad3", {33, 784, 128, 64, 10, 0, act});
        check_both_sets("grad3", {33, 784, 128, 64, 10, 1, act});
    }
}
TEST_CASE("kernels: batch_mean, both sets") {
    check_both_sets("batch_mean", {100352, 64});  // W1 of the MNIST net at batch 64
    check_both_sets("batch_mean", {1000, 13});    // one group of eight rows and five single rows
}
// Every optimizer variant (verify.hpp: optim_variants) at the 784-128-10 network's parameter count.
TEST_CASE("kernels: optim_sgd, both sets, every variant") {
    for (unsigned v = 0; v < optim_variants("optim_sgd"); ++v) {
        INFO("variant ", v, " (", optim_variant_text("optim_sgd", v), ")");
        check_both_sets("optim_sgd", {101770, v});
    }
}
TEST_CASE("kernels: optim_adam, both sets, every variant") {
    for (unsigned v = 0; v < optim_variants("optim_adam"); ++v) {
        INFO("variant ", v, " (", optim_variant_text("optim_adam", v), ")");
        check_both_sets("optim_adam", {101770, v});
    }
}
TEST_CASE("kernels: optim_rmsprop, both sets, every variant") {
    for (unsigned v = 0; v < optim_variants("optim_rmsprop"); ++v) {
        INFO("variant ", v, " (", optim_variant_text("optim_rmsprop", v), ")");
        check_both_sets("optim_rmsprop", {101770, v});
    }
}
TEST_CASE("kernels: gather, both sets") { check_both_sets("gather", {1000, 784, 60000}); }
TEST_CASE("kernels: fused_forward, both sets, every activation") {
    for (unsigned act = 0; act <= kActGelu; ++act) {
        CAPTURE(act);
        check_both_sets("fused_forward", {63, 784, 128, act});
    }
}
TEST_CASE("kernels: fused_output, both sets, both loss codes, every activation") {
    for (unsigned act = 0; act <= kActGelu; ++act) {
        CAPTURE(act);
        check_both_sets("fused_output", {65, 300, 17, 0, act});
        check_both_sets("fused_output", {65, 300, 17, 1, act});
    }
}
TEST_CASE("kernels: fused_grad, both sets") { check_both_sets("fused_grad", {65, 784, 128, 10}); }
TEST_CASE("kernels: outer, both sets") { check_both_sets("outer", {65, 128, 784}); }
// fused_step's shape ends in the loss code, the optimizer code (recipe.hpp optim_code: 0 sgd,
// 1 momentum, 2 nesterov, 3 adam, 4 adamw, 5 rmsprop, 6 nadam; nadam with weight decay for loss
// 1, without for loss 0) and the activation code (0 relu .. 4 gelu).
TEST_CASE("kernels: fused_step, both sets, every loss, optimizer and activation") {
    for (unsigned loss : {0u, 1u})
        for (const OptimizerRow& row : optimizer_rows()) {  // every row of the table, by its code
            const unsigned optim = optim_code(row.kind());
            CAPTURE(loss);
            CAPTURE(row.name);
            check_both_sets("fused_step", {64, 784, 128, 10, loss, optim, 0});  // one chunk, one tile a cluster
            check_both_sets("fused_step", {130, 257, 300, 17, loss, optim, 0});  // three chunks, 19 tiles
        }
    for (unsigned act = 1; act <= 4; ++act) {
        CAPTURE(act);
        check_both_sets("fused_step", {64, 784, 128, 10, 1, 2, act});
        check_both_sets("fused_step", {130, 257, 300, 17, 0, 3, act});  // three chunks: Z read back from memory
    }
}

namespace {
// A one-launch step kernel (fused_step, or tc_step: ReLU) with S steps in one launch, and as
// S launches of one step, on S random batches from one random network and optimizer state,
// with a different learning rate each step; every output of each run, as bits.
struct StepRun {
    std::vector<std::vector<float>> out;  // P (W1 b1 W2 b2) M V A Y
};
StepRun run_steps(const std::string& entry, KernelSource src, unsigned B, unsigned I, unsigned H, unsigned O,
                  unsigned S, Loss loss, OptimKind kind, unsigned act, bool one_launch, uint64_t seed) {
    Rng rng(seed);  // the same inputs for every run of one seed
    auto rand = [&](size_t n, float lo, float hi) {
        std::vector<float> v(n);
        for (auto& x : v) x = rng.uniform(lo, hi);
        return v;
    };
    const size_t N = size_t(H) * I + H + size_t(O) * H + O;
    const std::vector<std::vector<float>> init = {rand(N, -0.1f, 0.1f), rand(N, -0.01f, 0.01f),
                                                  rand(N, 0.0f, 1e-4f), rand(size_t(B) * H, -1.0f, 1.0f),
                                                  rand(size_t(S) * B * O, -1.0f, 1.0f)};
    std::vector<float> X = rand(size_t(S) * B * I, 0.0f, 1.0f), T(size_t(S) * B * O, 0.0f);
    for (size_t s = 0; s < size_t(S) * B; ++s) T[s * O + rng.below(O)] = 1.0f;
    OptimConfig o;
    o.kind = kind;
    o.weight_decay = 1e-3f;
    std::vector<StepHyper> hyp;
    for (unsigned j = 0; j < S; ++j) hyp.push_back(step_hyper(o, rng.uniform(0.01f, 0.3f), 10 + j));

    KernelSet ks(src, gpu().info(), KernelDirs::from_environment(), {entry});
    const Kernel& k = ks.get(entry);
    auto launch = [&](const FusedArgs& a, CUstream st) {
        if (entry == "tc_step") launch_tc_step(k, a, st);
        else launch_fused_step(k, a, st);
    };
    std::vector<DeviceBuffer> p;  // P M V A Y: A and Y start as poison (random bits here)
    for (size_t i = 0; i < init.size(); ++i) {
        p.emplace_back(init[i].size() * 4, "p");
        p.back().upload(init[i]);
    }
    DeviceBuffer dX(X.size() * 4, "X"), dT(T.size() * 4, "T"), Yp(fused_step_partials(B, H, O) * 4, "Yp"),
        sync(8, "sync"), dh(S * sizeof(StepHyper), "hyp"), dZ(size_t(B) * H * 4, "Z");
    dX.upload(X);
    dT.upload(T);
    CU(cuMemcpyHtoD, dh.ptr(), hyp.data(), S * sizeof(StepHyper));
    Yp.fill_u32(0x7fc00bad);
    sync.fill_u32(0);
    Stream st;
    const CUdeviceptr P = p[0].ptr();
    FusedArgs a{dX.ptr(), dT.ptr(), P, P + size_t(H) * I * 4, P + (size_t(H) * I + H) * 4,
                P + (size_t(H) * I + H + size_t(O) * H) * 4, p[3].ptr(), p[4].ptr(), 0, 0, B, I, H, O};
    a.P = P;
    a.M = p[1].ptr();
    a.V = p[2].ptr();
    a.hyp = dh.ptr();
    a.Yp = Yp.ptr();
    a.sync = sync.ptr();
    a.loss = loss_code(loss);
    a.scale = grad_scale(loss, B, O);
    a.optim = o;
    a.act = act;
    a.D1 = dZ.ptr();  // fused_step's Z scratch
    if (one_launch) {
        a.steps = S;
        launch(a, st.get());
    } else {
        for (unsigned j = 0; j < S; ++j) {
            FusedArgs b = a;
            b.X += size_t(j) * B * I * 4;
            b.T += size_t(j) * B * O * 4;
            b.Y += size_t(j) * B * O * 4;
            b.hyp += size_t(j) * sizeof(StepHyper);
            launch(b, st.get());
        }
    }
    st.synchronize();
    StepRun r;
    for (const auto& b : p) r.out.push_back(b.download_vector<float>());
    // Every step changed the parameters: the run did S real steps.
    CHECK(r.out[0] != init[0]);
    return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

void check_steps_in_one_launch(unsigned B, unsigned I, unsigned H, unsigned O, unsigned S, Loss loss, OptimKind kind,
                               unsigned act = kActRelu, const std::string& entry = "fused_step") {
    const uint64_t seed = std::random_device{}();
    INFO(entry, " B=", B, " I=", I, " H=", H, " O=", O, " steps=", S, " loss ", to_string(loss), " optimizer ",
         to_string(kind), " activation ", act, " seed ", seed);
    const StepRun ptx_one = run_steps(entry, KernelSource::Ptx, B, I, H, O, S, loss, kind, act, true, seed);
    const StepRun ptx_many = run_steps(entry, KernelSource::Ptx, B, I, H, O, S, loss, kind, act, false, seed);
    const StepRun ref_one = run_steps(entry, KernelSource::Reference, B, I, H, O, S, loss, kind, act, true, seed);
    const StepRun ref_many = run_steps(entry, KernelSource::Reference, B, I, H, O, S, loss, kind, act, false, seed);
    const char* names[] = {"P", "M", "V", "A", "Y"};
    for (size_t i = 0; i < 5; ++i) {
        INFO(names[i]);
        CHECK(same_bits(ptx_one.out[i], ptx_many.out[i]));
        CHECK(same_bits(ref_one.out[i], ref_many.out[i]));
        CHECK(same_bits(ptx_one.out[i], ref_one.out[i]));
    }
}
}  // namespace

TEST_CASE("kernels: fused_step runs S steps in one launch bit for bit as S launches of one step, both sets") {
    // The MNIST step (one chunk, one tile a cluster: the parameters stay on chip), with the
    // default recipe's loss and optimizer, Adam, and the classic recipe.
    check_steps_in_one_launch(64, 784, 128, 10, 5, Loss::Ce, OptimKind::Nesterov);
    check_steps_in_one_launch(64, 784, 128, 10, 5, Loss::Ce, OptimKind::Adam);
    check_steps_in_one_launch(64, 784, 128, 10, 3, Loss::Mse, OptimKind::Sgd);
    check_steps_in_one_launch(65, 13, 5, 3, 4, Loss::Ce, OptimKind::AdamW);       // two chunks (X restaged), single-float copies
    check_steps_in_one_launch(9, 257, 33, 17, 3, Loss::HalfSse, OptimKind::RmsProp);  // partial chunk and tile, O > 16
    check_steps_in_one_launch(64, 100, 2000, 10, 3, Loss::Ce, OptimKind::Momentum);  // 125 tiles: clusters loop over tiles
    check_steps_in_one_launch(64, 784, 128, 10, 4, Loss::Ce, OptimKind::Nesterov, kActTanh);  // activations through Z
    check_steps_in_one_launch(65, 13, 5, 3, 3, Loss::Ce, OptimKind::Adam, kActGelu);
    check_steps_in_one_launch(64, 784, 128, 10, 5, Loss::Ce, OptimKind::NAdam);  // NAdam: a coefficient pair a step
    check_steps_in_one_launch(65, 13, 5, 3, 4, Loss::Mse, OptimKind::NAdam);
}

// tc_step (tcstep.ptx): whole steps in one 16-block cluster, TF32 products. Shape
// B,I,H,O,loss,optim (ReLU).
TEST_CASE("kernels: tc_step, both sets, every loss and optimizer") {
    for (unsigned loss : {0u, 1u})
        for (const OptimizerRow& row : optimizer_rows()) {  // every row of the table, by its code
            CAPTURE(loss);
            CAPTURE(row.name);
            check_both_sets("tc_step", {64, 784, 128, 10, loss, optim_code(row.kind())});  // the MNIST step
        }
    check_both_sets("tc_step", {37, 300, 72, 7, 1, 5});   // 13 blocks with columns, 9 with units
    check_both_sets("tc_step", {5, 13, 9, 3, 0, 4});      // single-float copies, a part-empty unit block
    check_both_sets("tc_step", {64, 896, 128, 16, 1, 1});  // the limits: 56 columns in each of 16 blocks
}

TEST_CASE("kernels: tc_step runs S steps in one launch bit for bit as S launches of one step, both sets") {
    check_steps_in_one_launch(64, 784, 128, 10, 5, Loss::Ce, OptimKind::Nesterov, kActRelu, "tc_step");
    check_steps_in_one_launch(64, 784, 128, 10, 4, Loss::Ce, OptimKind::Adam, kActRelu, "tc_step");
    check_steps_in_one_launch(37, 300, 72, 7, 3, Loss::Mse, OptimKind::Sgd, kActRelu, "tc_step");
    check_steps_in_one_launch(5, 13, 9, 3, 4, Loss::HalfSse, OptimKind::RmsProp, kActRelu, "tc_step");
    check_steps_in_one_launch(64, 784, 128, 10, 4, Loss::Ce, OptimKind::NAdam, kActRelu, "tc_step");
}

// The CNN's kernels (conv.ptx, pool.ptx): the network's layers at batch 64, and odd
// sizes. Shapes: N,C,H,W,K,KS,act (act 0 none, 1 ReLU) and N,C,H,W.
TEST_CASE("kernels: conv_fwd, conv_bwd_data, conv_bwd_weights, both sets") {
    for (const char* e : {"conv_fwd", "conv_bwd_data", "conv_bwd_weights"}) {
        CAPTURE(e);
        check_both_sets(e, {64, 1, 28, 28, 32, 3, 1});   // conv1
        check_both_sets(e, {64, 32, 14, 14, 64, 3, 1});  // conv2
        check_both_sets(e, {3, 9, 9, 9, 17, 5, 0});      // odd everything, 5x5
    }
}
// The convolutions on the tensor cores (tcconv.ptx): the same shapes, and a 16x16 image (a whole
// strip of 256 pixels: every warp busy) with 33 and 40 channels (part-empty groups and chunks).
TEST_CASE("kernels: conv_fwd and tc_conv_fwd with their 2x2 max-pool, both sets") {
    check_both_sets("conv_fwd", {64, 1, 28, 28, 32, 3, 1, 1});  // conv1 and pool1 of the CNN
    check_both_sets("conv_fwd", {3, 3, 9, 9, 17, 3, 1, 1});     // odd sizes, a part-empty channel group
    check_both_sets("tc_conv_fwd", {64, 32, 14, 14, 64, 3, 1, 1});  // conv2 and pool2 of the CNN
    check_both_sets("tc_conv_fwd", {1, 32, 14, 14, 64, 3, 1, 1});   // strips cut finer, even rows
}

TEST_CASE("kernels: tc_conv_fwd, tc_conv_bwd_data, both sets") {
    for (const char* e : {"tc_conv_fwd", "tc_conv_bwd_data"}) {
        CAPTURE(e);
        check_both_sets(e, {64, 1, 28, 28, 32, 3, 1});   // conv1
        check_both_sets(e, {64, 32, 14, 14, 64, 3, 1});  // conv2
        check_both_sets(e, {3, 9, 9, 9, 17, 5, 0});      // odd everything, 5x5
        check_both_sets(e, {2, 33, 16, 16, 40, 3, 1});
    }
    // tc_conv_bwd_data with the backward pass of the 2x2 max-pool below in its epilogue (pool
    // 1 + (1: PH odd) + (2: PW odd) + (4: no mask)): conv2 back to pool1's 28x28 in the CNN
    // (mask, act 0), odd pool inputs, no mask, part-empty channel groups and pixel tiles.
    check_both_sets("tc_conv_bwd_data", {64, 32, 14, 14, 64, 3, 0, 1});
    check_both_sets("tc_conv_bwd_data", {3, 9, 9, 9, 17, 5, 0, 4});
    check_both_sets("tc_conv_bwd_data", {2, 40, 13, 11, 33, 3, 1, 2});
    check_both_sets("tc_conv_bwd_data", {2, 33, 7, 7, 40, 3, 0, 3});
    check_both_sets("tc_conv_bwd_data", {3, 17, 6, 5, 9, 1, 1, 8});
}
// tc_conv_bwd_weights (tcwgrad.ptx): conv_bwd_weights' sums on TF32 mma.sync, the same shapes.
TEST_CASE("kernels: tc_conv_bwd_weights, both sets") {
    check_both_sets("tc_conv_bwd_weights", {64, 1, 28, 28, 32, 3, 1});   // conv1: 9 columns of 64, 98 k-steps an image
    check_both_sets("tc_conv_bwd_weights", {64, 32, 14, 14, 64, 3, 1});  // conv2: 5 column groups, 4 row tiles
    check_both_sets("tc_conv_bwd_weights", {3, 9, 9, 9, 17, 5, 0});      // odd everything, 5x5, ranks without images
    check_both_sets("tc_conv_bwd_weights", {3, 17, 1, 1, 5, 3, 1});      // one pixel: a part-empty k-step, all halo
    check_both_sets("tc_conv_bwd_weights", {2, 3, 9, 9, 8, 1, 1});       // 1x1 kernels
}
TEST_CASE("kernels: fc_bwd_data, both sets") {
    check_both_sets("fc_bwd_data", {64, 3136, 128, 1});   // the CNN's fc1: 4 warps a block, 392 blocks
    check_both_sets("fc_bwd_data", {64, 256, 128, 1});    // the MLP's 128 -> 256: 1 warp a block, 128 blocks
    check_both_sets("fc_bwd_data", {5, 257, 33, 0});      // part-empty sample group and column tile
    check_both_sets("fc_bwd_data", {9, 70, 301, 1});      // three chunks, the last of 45; 4-byte copies
    check_both_sets("fc_bwd_data", {256, 1024, 300, 1});  // 8 warps, two buffers of W, G and Y (96 KB)
    check_both_sets("fc_bwd_data", {1, 1, 1, 1});
}
// The tensor-core kernels (tc.ptx): TF32 mma.sync; shape B,I,H,act (act 0 none, 1 ReLU).
TEST_CASE("kernels: tc_forward, both sets") {
    check_both_sets("tc_forward", {64, 784, 128, 1});  // the MNIST net's first layer: full 16 x 8 and k tiles
    check_both_sets("tc_forward", {17, 9, 5, 1});      // part-empty tiles of samples, units and columns
}
// Shape B,I,O,act (act 0 none, 1 ReLU: G = dY masked by Y > 0).
TEST_CASE("kernels: tc_grad_input, both sets") {
    check_both_sets("tc_grad_input", {64, 784, 128, 1});  // the MNIST net's first layer back to the image
    check_both_sets("tc_grad_input", {64, 128, 10, 0});   // its second layer: one part-empty k tile of outputs
    check_both_sets("tc_grad_input", {17, 9, 5, 1});      // part-empty tiles of samples, columns and outputs
    check_both_sets("tc_grad_input", {7, 300, 1024, 1});  // 128 k tiles
}
TEST_CASE("kernels: tc_grad_weights, both sets") {
    check_both_sets("tc_grad_weights", {64, 784, 128, 1});  // the MNIST net's first layer: dW 128 x 784, db
    check_both_sets("tc_grad_weights", {1000, 128, 10, 0});  // its second layer at batch 1000: 125 k tiles
    check_both_sets("tc_grad_weights", {17, 9, 5, 1});       // part-empty tiles of outputs, inputs and samples
    check_both_sets("tc_grad_weights", {1003, 33, 17, 0});   // a part-empty last k tile of samples, db over 1003
}
TEST_CASE("kernels: tc_grad_weights_wide, both sets") {
    check_both_sets("tc_grad_weights_wide", {64, 784, 1024, 1});   // the 784 -> 1024 layer at batch 64, masked
    check_both_sets("tc_grad_weights_wide", {64, 1024, 1024, 0});  // 1024 -> 1024: 256 blocks of 64 x 64
    check_both_sets("tc_grad_weights_wide", {17, 9, 5, 1});        // part-empty tiles, blocks and k tiles
    check_both_sets("tc_grad_weights_wide", {128, 65, 130, 1});    // the most samples it stages (108 KB)
}
TEST_CASE("kernels: pool_fwd and pool_bwd, both sets") {
    check_both_sets("pool_fwd", {64, 32, 28, 28});
    check_both_sets("pool_fwd", {3, 3, 7, 7});
    check_both_sets("pool_bwd", {64, 32, 28, 28, 1});  // with the ReLU mask from pool_fwd's Y
    check_both_sets("pool_bwd", {3, 3, 7, 7, 1});
    check_both_sets("pool_bwd", {3, 3, 9, 9, 0});      // without
}

namespace {
// A conv forward pass with a planted bug (tests/fixtures/planted/PATCH.patch) fails verify at
// `shape` with every output written and Y wrong, the file's backward entry `intact` passes, and
// the CLI exits 1.
void check_planted_conv_fwd(const char* patch, const char* entry, const char* intact, const std::vector<unsigned>& shape,
                            const char* shape_text) {
    const PlantedKernel planted = plant(patch);
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    CaseResult r = verify_one(entry, shape, bad);
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("Y[") == 0);
    CaseResult ok = verify_one(intact, shape, bad);
    INFO(format_result(ok));
    CHECK(ok.pass());
    check_cli_fails(entry, shape_text, planted);
}
}  // namespace

TEST_CASE("kernels: bn_fwd and bn_bwd, both sets (train and eval, each activation, batch 1, planes past 1024)") {
    for (unsigned act : {0u, 1u, 5u}) {
        check_both_sets("bn_fwd", {64, 32, 784, act, 1});  // after conv1 of the CNN at batch 64
        check_both_sets("bn_fwd", {64, 32, 784, act, 0});
        check_both_sets("bn_bwd", {64, 32, 784, act});
        check_both_sets("bn_fwd", {64, 128, 1, act, 1});   // BatchNorm1d after fc128
        check_both_sets("bn_bwd", {64, 128, 1, act});
        check_both_sets("bn_fwd", {1, 3, 9, act, 1});      // one sample: the statistics of one plane
        check_both_sets("bn_bwd", {1, 3, 9, act});
        check_both_sets("bn_fwd", {2, 5, 1, act, 1});      // two values a channel
        check_both_sets("bn_bwd", {2, 5, 1, act});
        check_both_sets("bn_fwd", {17, 3, 1030, act, 1});  // a thread's step wraps inside a plane
        check_both_sets("bn_bwd", {17, 3, 1030, act});
        check_both_sets("bn_fwd", {1, 5, 1, act, 0});      // evaluation takes one value a channel
    }
}

TEST_CASE("kernels: bn_fwd normalizing with the unbiased variance is caught by verify") {
    // bn_unbiased_variance.patch: var = sum / (n - 1) in the normalization. Every Y is written,
    // off by sqrt(n / (n - 1)) of its centred value; evaluation (train 0) does not use it.
    const PlantedKernel planted = plant("bn_unbiased_variance");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    for (const std::vector<unsigned>& shape : std::vector<std::vector<unsigned>>{{64, 8, 49, 0, 1}, {2, 5, 1, 5, 1}}) {
        CaseResult r = verify_one("bn_fwd", shape, bad);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
    }
    CaseResult ok = verify_one("bn_fwd", {64, 8, 49, 0, 0}, bad);
    INFO(format_result(ok));
    CHECK(ok.pass());
    check_cli_fails("bn_fwd", "64,8,49,0,1", planted);
}

TEST_CASE("kernels: a conv with its padding off by one is caught by verify") {
    // conv_padding_off_by_one.patch: conv_fwd stages its input one column off.
    check_planted_conv_fwd("conv_padding_off_by_one", "conv_fwd", "conv_bwd_data", {3, 3, 9, 9, 5, 3, 0}, "3,3,9,9,5,3,0");
}

TEST_CASE("kernels: a NAdam step without its gradient term is caught by verify") {
    // nadam_without_gradient_term.patch: optim_adam's rule 2 branches past p -= cg g / d. Every
    // element is written, P is wrong; Adam (variant 0) and AdamW (2) of the same file pass.
    const PlantedKernel planted = plant("nadam_without_gradient_term");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    for (unsigned variant : {3u, 4u}) {
        CaseResult r = verify_one("optim_adam", {1000, variant}, bad);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
        REQUIRE_FALSE(r.mismatches.empty());
        CHECK(r.mismatches[0].find("P[") == 0);
    }
    for (unsigned variant : {0u, 2u}) {
        CaseResult ok = verify_one("optim_adam", {1000, variant}, bad);
        INFO(format_result(ok));
        CHECK(ok.pass());
    }
    check_cli_fails("optim_adam", "1000,3", planted);
}

TEST_CASE("kernels: a fused_step NAdam step without its gradient term is caught by verify") {
    // fused_step_nadam_without_gradient_term.patch: the inline update of the W1 elements (the
    // main role) branches past p -= cg g / d; optimizer_update (b1, W2, b2; optim.ptx) is intact. A and Y
    // (before the update), b1, W2, b2, M and V are right, W1 is wrong: with weight decay (loss
    // 1) and without (loss 0). Adam through the same inline path passes.
    const PlantedKernel planted = plant("fused_step_nadam_without_gradient_term");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    for (unsigned loss : {0u, 1u}) {
        CAPTURE(loss);
        // A and Y, listed before the parameters, are right.
        check_first_mismatch("fused_step", {64, 784, 128, 10, loss, 6, 0}, bad, "W1[");
    }
    CaseResult ok = verify_one("fused_step", {64, 784, 128, 10, 1, 3, 0}, bad);
    INFO(format_result(ok));
    CHECK(ok.pass());
    check_cli_fails("fused_step", "64,784,128,10,1,6,0", planted);
}

TEST_CASE("kernels: a NAdam optimizer_update without its gradient term is caught in tc_step and fused_step by verify") {
    // optimizer_update_nadam_without_gradient_term.patch: optim.ptx's optimizer_update, the one
    // copy linked into both steps (ptx_link.hpp), branches past p -= cg g / d. tc_step: A and Y
    // are right, W1 (the first parameter) is wrong, with weight decay (MNIST sizes, CE) and
    // without (5 x 13 x 9 x 3, MSE). fused_step: its W1 elements run the rule inline and are
    // right, b1 (the next parameter, through the call) is wrong. Adam passes in both, and
    // optim_adam's own NAdam rule (the same file) too.
    const PlantedKernel planted = plant("optimizer_update_nadam_without_gradient_term");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    for (const std::vector<unsigned>& shape : {std::vector<unsigned>{64, 784, 128, 10, 1, 6}, {5, 13, 9, 3, 0, 6}}) {
        check_first_mismatch("tc_step", shape, bad, "W1[");
    }
    for (unsigned loss : {0u, 1u}) {
        CAPTURE(loss);
        check_first_mismatch("fused_step", {64, 784, 128, 10, loss, 6, 0}, bad, "b1[");
    }
    CaseResult ok = verify_one("tc_step", {64, 784, 128, 10, 1, 3}, bad);
    INFO(format_result(ok));
    CHECK(ok.pass());
    CaseResult fused_ok = verify_one("fused_step", {64, 784, 128, 10, 1, 3, 0}, bad);
    INFO(format_result(fused_ok));
    CHECK(fused_ok.pass());
    CaseResult optim_ok = verify_one("optim_adam", {1000, 3}, bad);
    INFO(format_result(optim_ok));
    CHECK(optim_ok.pass());
    check_cli_fails("tc_step", "64,784,128,10,1,6", planted);
    check_cli_fails("fused_step", "64,784,128,10,1,6,0", planted);
}

TEST_CASE("kernels: a tc_forward with a wrong fragment layout is caught by verify") {
    // tc_forward_fragment.patch: the mma's A fragment with a1 and a2 exchanged, so each 16-sample
    // tile mixes the columns of its two halves; every output is written, the sums are wrong.
    const PlantedKernel planted = plant("tc_forward_fragment");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    CaseResult r = verify_one("tc_forward", {64, 784, 128, 0}, bad);
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("A[") == 0);
    check_cli_fails("tc_forward", "17,9,5,0", planted);
}

TEST_CASE("kernels: a tc_conv_fwd with a wrong fragment layout is caught by verify") {
    // tcconv_forward_fragment.patch: tc_conv_fwd passes its A fragment as {a0, a2, a1, a3}, so
    // pixels g and g+8 of each tile swap patch columns; every output is written, the sums are
    // wrong. tc_conv_bwd_data is intact.
    check_planted_conv_fwd("tcconv_forward_fragment", "tc_conv_fwd", "tc_conv_bwd_data", {3, 3, 9, 9, 17, 3, 0}, "3,3,9,9,17,3,0");
}

TEST_CASE("kernels: a tc_conv_bwd_data whose pooled epilogue writes the wrong cell position is caught by verify") {
    // tcconv_pool_bwd_position.patch: the window's second row is tested against the first row's
    // indices: every element is written, dX (the pool's input deltas) is wrong where the argmax
    // lies in either row. The plain pass (no pool below) is intact.
    const PlantedKernel planted = plant("tcconv_pool_bwd_position");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    for (const std::vector<unsigned>& shape : std::vector<std::vector<unsigned>>{{3, 9, 7, 7, 17, 3, 0, 1},
                                                                                 {2, 9, 7, 7, 17, 3, 1, 4}}) {
        CaseResult r = verify_one("tc_conv_bwd_data", shape, bad);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
        REQUIRE_FALSE(r.mismatches.empty());
        CHECK(r.mismatches[0].find("dX[") == 0);
    }
    CaseResult ok = verify_one("tc_conv_bwd_data", {3, 9, 7, 7, 17, 3, 0}, bad);
    INFO(format_result(ok));
    CHECK(ok.pass());
    check_cli_fails("tc_conv_bwd_data", "3,9,7,7,17,3,0,1", planted);
}

TEST_CASE("kernels: a tc_conv_bwd_weights with a wrong fragment layout is caught by verify") {
    // tcwgrad_fragment.patch: the eight mma.sync take their A fragment as {a0, a2, a1, a3}: output
    // channels k0+g+8 and pixels px0+q+4 change places in each 16 x 8 tile, so dW is wrong in
    // every tile while every element is still written; db (summed apart from the mma) is right.
    const PlantedKernel planted = plant("tcwgrad_fragment");
    CaseResult r = verify_one("tc_conv_bwd_weights", {3, 9, 9, 9, 17, 3, 1}, KernelDirs::from_ptx_dir(planted.dir()));
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("dW[") == 0);
    check_cli_fails_in("tc_conv_bwd_weights", "64,32,14,14,64,3,1", planted.dir());
}

namespace {
// tc_step with a planted bug (tcstep_forward_fragment.patch, tcstep_gradient_fragment.patch): the
// mma.sync of one product take their A fragment as {a0, a2, a1, a3} (rows g and g+8 of each
// 16-row tile swap columns 0..3 and 4..7 of the k tile): those of the forward product (A, Y and
// everything after are wrong), or those of W1's gradient (A and Y right, W1 wrong). Every output
// is still written.
CaseResult planted_tc_step(const PlantedKernel& planted) {
    return verify_one("tc_step", {64, 784, 128, 10, 1, 2}, KernelDirs::from_ptx_dir(planted.dir()));
}
}  // namespace

TEST_CASE("kernels: a tc_step with a wrong fragment layout is caught by verify") {
    {
        const PlantedKernel forward = plant("tcstep_forward_fragment");  // the eight mma of its k loop
        CaseResult r = planted_tc_step(forward);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
        REQUIRE_FALSE(r.mismatches.empty());
        CHECK(r.mismatches[0].find("A[") == 0);  // verify lists A, Y, then the parameters
    }
    const PlantedKernel gradient = plant("tcstep_gradient_fragment");  // the seven mma of W1's gradient
    CaseResult r = planted_tc_step(gradient);
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("W1[") == 0);  // A and Y, listed before the parameters, are right
    check_cli_fails_in("tc_step", "64,784,128,10,1,2", gradient.dir());
}

// The BF16 versions (ptx/tcbf16.ptx): m16n8k16, k tiles of 16; the same shapes and bit-for-bit
// twins, each set within its BF16 bound of the float64 reference.
TEST_CASE("kernels: tc_forward_bf16, tc_grad_input_bf16, tc_grad_weights_bf16, both sets") {
    check_both_sets("tc_forward_bf16", {64, 784, 128, 1});        // the MNIST net's first layer: 49 k tiles
    check_both_sets("tc_forward_bf16", {17, 9, 5, 1});            // part-empty tiles and one part-empty k tile
    check_both_sets("tc_forward_bf16", {1000, 300, 40, 0});       // four k groups, a last chunk of 12 columns
    check_both_sets("tc_grad_input_bf16", {64, 784, 128, 1});     // back to the image: 8 k tiles of outputs
    check_both_sets("tc_grad_input_bf16", {64, 128, 10, 0});      // one k tile, outputs 10..15 padded
    check_both_sets("tc_grad_input_bf16", {17, 9, 5, 1});
    check_both_sets("tc_grad_weights_bf16", {64, 784, 128, 1});   // dW1 and db1 of a step
    check_both_sets("tc_grad_weights_bf16", {1003, 33, 17, 0});   // four k groups, a last tile of 11 samples
    check_both_sets("tc_grad_weights_bf16", {17, 9, 5, 1});
}

TEST_CASE("kernels: a tc_forward_bf16 with its pairs packed the wrong way round is caught by verify") {
    // tcbf16_pair_order.patch: tc_forward_bf16's A fragment pairs packed the wrong way round
    // (cvt.rn.bf16x2.f32 fa0, x0, x1: the lower k in the upper half), the slip the pair layout
    // invites: columns 2q and 2q + 1 of X change places in every product.
    const PlantedKernel planted = plant("tcbf16_pair_order");
    CaseResult r = verify_one("tc_forward_bf16", {64, 784, 128, 0}, KernelDirs::from_ptx_dir(planted.dir()));
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("A[") == 0);
    check_cli_fails_in("tc_forward_bf16", "17,9,5,0", planted.dir());
}

TEST_CASE("kernels: a deliberately wrong PTX kernel is caught by verify") {
    // mean_skips_last_row.patch: batch_mean skips the last row of the batch.
    const PlantedKernel planted = plant("mean_skips_last_row");
    KernelDirs wrong = KernelDirs::from_ptx_dir(planted.dir());
    CaseResult r = verify_one("batch_mean", {1000, 64}, wrong);
    INFO(format_result(r));
    check_planted_caught(r);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("G[") == 0);
    check_cli_fails("batch_mean", "1000,64", planted);
}

TEST_CASE("kernels: an fc_bwd_data that sums its second chunk from the first chunk's buffer is caught by verify") {
    // fc_chunk_wrong_buffer.patch: every chunk of 128 outputs is summed from buffer 0, so with
    // 129 <= O <= 256 the second chunk repeats the first one's rows. One chunk is intact.
    const PlantedKernel planted = plant("fc_chunk_wrong_buffer");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    for (const std::vector<unsigned>& shape : std::vector<std::vector<unsigned>>{{6, 96, 200, 1}, {5, 33, 129, 0}}) {
        CaseResult r = verify_one("fc_bwd_data", shape, bad);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
        REQUIRE_FALSE(r.mismatches.empty());
        CHECK(r.mismatches[0].find("dX[") == 0);
    }
    CaseResult ok = verify_one("fc_bwd_data", {5, 257, 128, 1}, bad);
    INFO(format_result(ok));
    CHECK(ok.pass());
    check_cli_fails("fc_bwd_data", "6,96,200,1", planted);
}

TEST_CASE("kernels: a softmax that does not subtract the max is caught by verify with loss code 1") {
    // softmax_without_max.patch: fused_output's softmax computes 2^(y log2 e) without subtracting
    // the max. verify's loss-1 inputs lift the odd samples' logits to 96..128, where that
    // overflows float: NaN deltas.
    const PlantedKernel planted = plant("softmax_without_max");
    KernelDirs bad = KernelDirs::from_ptx_dir(planted.dir());
    CaseResult r = verify_one("fused_output", {64, 128, 10, 1, 0}, bad);
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("D2[") == 0);  // Y is right; the deltas are not
    // Loss code 0 never reaches the softmax: the same file passes.
    CaseResult r0 = verify_one("fused_output", {64, 128, 10, 0, 0}, bad);
    INFO(format_result(r0));
    CHECK(r0.pass());
    check_cli_fails("fused_output", "64,128,10,1,0", planted);
}

TEST_CASE("kernels: an out-of-bounds write is caught by verify's guard bands and named") {
    // gather_one_row_on.patch stores every row one row on: the last lands past the end of dst.
    const PlantedKernel planted = plant("gather_one_row_on");
    RunResult run = run_command(ptxlab_cmd("verify --kernel gather --shape 4,8,10 --ptx-dir " + planted.dir()));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("dst: " + planted.path + " wrote out of bounds: 0 words in the 4096 words "
                          "before it, 8 in the 4096 after it (the last 8 past its end)") != std::string::npos);
    CHECK(run.output.find("dst[0][0]: unwritten by ptx") != std::string::npos);
    CHECK(run.output.find("0 cases passed, 1 failed") != std::string::npos);
}

TEST_CASE("kernels: a kernel that faults during training is named, and ptxlab exits cleanly") {
    // gather.ptx storing 2^44 bytes away: an illegal address, reported at the next synchronisation.
    TempDir t;
    for (const char* f : {"fused.ptx", "step.ptx", "optim.ptx", "gather.ptx"})
        std::filesystem::copy_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/" + f, t.file(f));
    std::string src = read_source_file(t.file("gather.ptx")).text;
    const std::string store = "    st.global.f32   [addr], v;\n";
    REQUIRE(src.find(store) != std::string::npos);
    src.replace(src.find(store), store.size(), "    add.u64         addr, addr, 0x100000000000;\n" + store);
    write_text(t.file("gather.ptx"), src);
    RunResult run = run_command("timeout -s KILL 120 " +
                                ptxlab_cmd("train --max-steps 5 --no-progress --ptx-dir " + t.path.string()));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("CUDA_ERROR_ILLEGAL_ADDRESS") != std::string::npos);
    CHECK(run.output.find("'gather' (" + t.file("gather.ptx") + ")") != std::string::npos);
}
