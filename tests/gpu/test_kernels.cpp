// Every kernel, both sets (hand-written PTX and NVRTC twin), against the float64
// reference and each other; and a deliberately wrong kernel that must be caught.
#include "../helpers.hpp"
#include "common.hpp"
#include "fused.hpp"
#include "ptx_text.hpp"
#include "recipe.hpp"
#include "rng.hpp"
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

void check_both_sets(const std::string& entry, const std::vector<unsigned>& shape) {
    CaseResult r = verify_one(entry, shape, KernelDirs::from_environment());
    INFO(format_result(r));
    CHECK(r.elements > 0);
    // Each set on its own: every output written and within the float64 bound.
    CHECK(r.unwritten_ptx == 0);
    CHECK(r.f64_fail_ptx == 0);
    CHECK(r.unwritten_ref == 0);
    CHECK(r.f64_fail_ref == 0);
    // And the two sets agree to the bit.
    CHECK(r.differing == 0);
    CHECK(r.max_ulp == 0);
}
}  // namespace

// The last number of the forward and delta kernels' shapes is the activation code (recipe.hpp
// act_code: 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu); grad2, grad3 and fused_output's
// number before it the loss code: 0 y - t, 1 softmax(y) - t.
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
TEST_CASE("kernels: fused_step, both sets") {
    check_both_sets("fused_step", {64, 784, 128, 10});  // one chunk, one tile a cluster
    check_both_sets("fused_step", {130, 257, 300, 17}); // three chunks, single-float copies, 19 tiles
}

namespace {
// fused_step with S steps in one launch, and as S launches of one step, on S random
// batches from one random network; every output of each run, as bits.
struct StepRun {
    std::vector<std::vector<float>> out;  // W1 b1 W2 b2 A Y
};
StepRun run_steps(KernelSource src, unsigned B, unsigned I, unsigned H, unsigned O, unsigned S, bool one_launch,
                  uint64_t seed) {
    Rng rng(seed);  // the same inputs for every run of one seed
    auto rand = [&](size_t n, float lo, float hi) {
        std::vector<float> v(n);
        for (auto& x : v) x = rng.uniform(lo, hi);
        return v;
    };
    const float w1 = std::sqrt(6.0f / float(I)), w2 = std::sqrt(6.0f / float(H));
    const std::vector<std::vector<float>> init = {rand(size_t(H) * I, -w1, w1), rand(H, -0.1f, 0.1f),
                                                  rand(size_t(O) * H, -w2, w2), rand(O, -0.1f, 0.1f),
                                                  rand(size_t(B) * H, -1.0f, 1.0f), rand(size_t(S) * B * O, -1.0f, 1.0f)};
    std::vector<float> X = rand(size_t(S) * B * I, 0.0f, 1.0f), T(size_t(S) * B * O, 0.0f);
    for (size_t s = 0; s < size_t(S) * B; ++s) T[s * O + rng.below(O)] = 1.0f;
    const float lr = rng.uniform(0.05f, 1.0f);

    KernelSet ks(src, gpu().info(), KernelDirs::from_environment(), {"fused_step"});
    const Kernel& k = ks.get("fused_step");
    std::vector<DeviceBuffer> p;  // W1 b1 W2 b2 A Y: A and Y start as poison (random bits here)
    for (size_t i = 0; i < init.size(); ++i) {
        p.emplace_back(init[i].size() * 4, "p");
        p.back().upload(init[i]);
    }
    DeviceBuffer dX(X.size() * 4, "X"), dT(T.size() * 4, "T"), Yp(fused_step_partials(B, H, O) * 4, "Yp"),
        sync(8, "sync");
    dX.upload(X);
    dT.upload(T);
    Yp.fill_u32(0x7fc00bad);
    sync.fill_u32(0);
    Stream st;
    FusedArgs a{dX.ptr(), dT.ptr(), p[0].ptr(), p[1].ptr(), p[2].ptr(), p[3].ptr(), p[4].ptr(), p[5].ptr(), 0, 0,
                B, I, H, O, lr};
    a.Yp = Yp.ptr();
    a.sync = sync.ptr();
    a.overlap = true;
    if (one_launch) {
        a.steps = S;
        launch_fused_step(k, a, st.get());
    } else {
        for (unsigned j = 0; j < S; ++j) {
            FusedArgs b = a;
            b.X += size_t(j) * B * I * 4;
            b.T += size_t(j) * B * O * 4;
            b.Y += size_t(j) * B * O * 4;
            launch_fused_step(k, b, st.get());
        }
    }
    st.synchronize();
    StepRun r;
    for (const auto& b : p) r.out.push_back(b.download_vector<float>());
    // Every step changed the parameters: the run did S real steps.
    for (size_t i = 0; i < 4; ++i) CHECK(r.out[i] != init[i]);
    return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

void check_steps_in_one_launch(unsigned B, unsigned I, unsigned H, unsigned O, unsigned S) {
    const uint64_t seed = std::random_device{}();
    INFO("B=", B, " I=", I, " H=", H, " O=", O, " steps=", S, " seed ", seed);
    const StepRun ptx_one = run_steps(KernelSource::Ptx, B, I, H, O, S, true, seed);
    const StepRun ptx_many = run_steps(KernelSource::Ptx, B, I, H, O, S, false, seed);
    const StepRun ref_one = run_steps(KernelSource::Reference, B, I, H, O, S, true, seed);
    const StepRun ref_many = run_steps(KernelSource::Reference, B, I, H, O, S, false, seed);
    const char* names[] = {"W1", "b1", "W2", "b2", "A", "Y"};
    for (size_t i = 0; i < 6; ++i) {
        INFO(names[i]);
        CHECK(same_bits(ptx_one.out[i], ptx_many.out[i]));
        CHECK(same_bits(ref_one.out[i], ref_many.out[i]));
        CHECK(same_bits(ptx_one.out[i], ref_one.out[i]));
    }
}
}  // namespace

TEST_CASE("kernels: fused_step runs S steps in one launch bit for bit as S launches of one step, both sets") {
    check_steps_in_one_launch(64, 784, 128, 10, 5);   // the MNIST step: one chunk, one tile a cluster
    check_steps_in_one_launch(65, 13, 5, 3, 4);       // two chunks (X restaged), single-float copies
    check_steps_in_one_launch(9, 257, 33, 17, 3);     // partial chunk and tile, O > 16
    check_steps_in_one_launch(64, 100, 2000, 10, 3);  // 125 tiles: clusters loop over tiles
}

TEST_CASE("kernels: a deliberately wrong PTX kernel is caught by verify") {
    KernelDirs wrong = KernelDirs::from_ptx_dir(fixture("wrong"));
    // tests/fixtures/wrong/mean.ptx is batch_mean that skips the last row of the batch.
    CaseResult r = verify_one("batch_mean", {1000, 64}, wrong);
    INFO(format_result(r));
    CHECK_FALSE(r.pass());
    CHECK(r.differing > 0);
    CHECK(r.f64_fail_ptx > 0);   // the broken PTX misses the float64 reference ...
    CHECK(r.f64_fail_ref == 0);  // ... while its twin does not
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("G[") == 0);
    // The command line says FAIL and exits 1.
    RunResult run = run_command(ptxlab_cmd("verify --kernel batch_mean --shape 1000,64 --ptx-dir " + fixture("wrong")));
    CHECK(run.code == 1);
    CHECK(run.output.find("FAIL") != std::string::npos);
    CHECK(run.output.find("0 cases passed, 1 failed") != std::string::npos);
}

TEST_CASE("kernels: a softmax that does not subtract the max is caught by verify with loss code 1") {
    // tests/fixtures/softmax/fused.ptx: ptx/fused.ptx with fused_output's softmax computing
    // 2^(y log2 e) without subtracting the max. verify's loss-1 inputs lift the odd samples'
    // logits to 96..128, where that overflows float: NaN deltas.
    KernelDirs bad = KernelDirs::from_ptx_dir(fixture("softmax"));
    CaseResult r = verify_one("fused_output", {64, 128, 10, 1, 0}, bad);
    INFO(format_result(r));
    CHECK_FALSE(r.pass());
    CHECK(r.differing > 0);
    CHECK(r.f64_fail_ptx > 0);   // the broken PTX misses the float64 reference ...
    CHECK(r.f64_fail_ref == 0);  // ... while its twin does not
    CHECK(r.unwritten_ptx == 0);
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("D2[") == 0);  // Y is right; the deltas are not
    // Loss code 0 never reaches the softmax: the same file passes.
    CaseResult r0 = verify_one("fused_output", {64, 128, 10, 0, 0}, bad);
    INFO(format_result(r0));
    CHECK(r0.pass());
    // The command line says FAIL and exits 1.
    RunResult run = run_command(
        ptxlab_cmd("verify --kernel fused_output --shape 64,128,10,1,0 --ptx-dir " + fixture("softmax")));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("FAIL") != std::string::npos);
    CHECK(run.output.find("0 cases passed, 1 failed") != std::string::npos);
}

TEST_CASE("kernels: an out-of-bounds write is caught by verify's guard bands and named") {
    // tests/fixtures/oob/gather.ptx stores every row one row on: the last lands past the end of dst.
    RunResult run = run_command(ptxlab_cmd("verify --kernel gather --shape 4,8,10 --ptx-dir " + fixture("oob")));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("dst: " + fixture("oob") + "/gather.ptx wrote out of bounds: 0 words in the 4096 words "
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
