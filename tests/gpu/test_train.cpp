// Training on MNIST with both kernel sets (needs data/mnist: tools/fetch_mnist.sh).
#include "../helpers.hpp"
#include "common.hpp"
#include "safetensors.hpp"
#include "train.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
const KernelChoice kSeedPtx{Design::Seed, KernelSource::Ptx}, kSeedRef{Design::Seed, KernelSource::Reference};
const KernelChoice kFusedPtx{Design::Fused, KernelSource::Ptx}, kFusedRef{Design::Fused, KernelSource::Reference};
const KernelChoice kFastPtx{Design::Fast, KernelSource::Ptx}, kFastRef{Design::Fast, KernelSource::Reference};
const Dataset& mnist() {
    static Dataset d = load_dataset(default_data_dir());
    return d;
}
TrainResult run(KernelChoice k, unsigned steps, uint64_t seed, const std::vector<unsigned>& layers = {784, 128, 10},
                bool graphs = true, const std::string& ptx_dir = {}, bool overlap = true, bool one_launch = true,
                unsigned steps_per_launch = 0) {
    TrainConfig cfg;
    cfg.kernels = k;
    cfg.one_launch = one_launch;
    cfg.steps_per_launch = steps_per_launch;
    cfg.graphs = graphs;
    cfg.overlap = overlap;
    if (!ptx_dir.empty()) cfg.dirs = KernelDirs::from_ptx_dir(ptx_dir);
    cfg.max_steps = steps;
    cfg.seed = seed;
    cfg.layers = layers;
    cfg.progress = false;
    std::ostringstream out;
    return train(gpu(), mnist(), cfg, out);
}
}  // namespace

TEST_CASE("train: 50 steps give the same losses with the PTX and the reference kernels") {
    TrainResult a = run(kSeedPtx, 50, 3), b = run(kSeedRef, 50, 3);
    REQUIRE(a.step_losses.size() == 50);
    CHECK(a.step_losses == b.step_losses);  // bit-identical kernels give identical curves
    CHECK(a.accuracy == b.accuracy);
    TrainResult c = run(kSeedPtx, 20, 3, {784, 64, 32, 10}), d = run(kSeedRef, 20, 3, {784, 64, 32, 10});
    CHECK(c.step_losses == d.step_losses);
}

TEST_CASE("train: 200 steps lower the loss") {
    TrainResult r = run(kSeedPtx, 200, 4);
    REQUIRE(r.step_losses.size() == 200);
    double first = 0, last = 0;
    for (int i = 0; i < 20; ++i) {
        first += r.step_losses[size_t(i)];
        last += r.step_losses[size_t(180 + i)];
    }
    CHECK(last < 0.7 * first);
    CHECK(r.accuracy > 0.80);
}

TEST_CASE("train: the same seed gives bit-identical loss curves run after run") {
    TrainResult a = run(kSeedPtx, 30, 9), b = run(kSeedPtx, 30, 9);
    CHECK(a.step_losses == b.step_losses);
}

TEST_CASE("train: eval of a saved checkpoint gives the accuracy train reported") {
    TrainResult r = run(kSeedPtx, 120, 5);
    TempDir t;
    save_safetensors(t.file("m.safetensors"), r.model);
    NetParams back = load_safetensors(t.file("m.safetensors"));
    KernelSet ks(KernelSource::Ptx, gpu().info(), KernelDirs::from_environment(), {"forward2"});
    EvalResult e = evaluate(ks, back, mnist().test);
    CHECK(e.accuracy == r.accuracy);
    size_t total = 0;
    for (auto c : e.confusion) total += c;
    CHECK(total == mnist().test.count);
}

TEST_CASE("train: a checkpoint whose shapes do not fit the data is refused") {
    NetParams net = init_params({100, 8, 10}, Init::HeUniform, 1);
    KernelSet ks(KernelSource::Ptx, gpu().info(), KernelDirs::from_environment(), {"forward2"});
    CHECK_THROWS_WITH_AS(evaluate(ks, net, mnist().test), doctest::Contains("takes 100 inputs but the images have 28x28"),
                         InputError);
}

TEST_CASE("train: the fused set gives the same losses as its twins, with and without graphs and overlap") {
    TrainResult a = run(kFusedPtx, 300, 3), b = run(kFusedRef, 300, 3), c = run(kFusedPtx, 300, 3, {784, 128, 10}, false);
    TrainResult d = run(kFusedPtx, 300, 3, {784, 128, 10}, true, {}, false);
    // One launch a step, and 7 steps a launch, instead of every step of a chunk (128, 128, 44).
    TrainResult e = run(kFusedPtx, 300, 3, {784, 128, 10}, true, {}, true, true, 1);
    TrainResult f = run(kFusedPtx, 300, 3, {784, 128, 10}, true, {}, true, true, 7);
    REQUIRE(a.step_losses.size() == 300);
    CHECK(a.step_losses == b.step_losses);
    CHECK(a.step_losses == c.step_losses);  // graph replay == plain launches
    CHECK(a.step_losses == d.step_losses);  // programmatic dependent launches == serialised ones
    CHECK(a.step_losses == e.step_losses);  // steps back to back in one launch == a launch a step
    CHECK(a.step_losses == f.step_losses);
    CHECK(a.model.W == d.model.W);
    CHECK(a.model.W == e.model.W);
    CHECK(a.model.b == e.model.b);
    CHECK(a.model.W == f.model.W);
    CHECK(a.accuracy == b.accuracy);
}

// `r` (400 steps) learned like the seed set `p` from the same start and data order: the
// last 40 step losses within 5 %, the accuracy within 2 points. The sums run in another
// order, so the curves are close, not identical.
static void check_learns_like(const TrainResult& r, const TrainResult& p) {
    REQUIRE(r.step_losses.size() == 400);
    REQUIRE(p.step_losses.size() == 400);
    double lr = 0, lp = 0;
    for (size_t i = 360; i < 400; ++i) {
        lr += r.step_losses[i];
        lp += p.step_losses[i];
    }
    CHECK(lr == doctest::Approx(lp).epsilon(0.05));
    CHECK(r.accuracy > 0.85);
    CHECK(std::fabs(r.accuracy - p.accuracy) < 0.02);
}

TEST_CASE("train: the fused set learns like the seed set") {
    check_learns_like(run(kFusedPtx, 400, 4), run(kSeedPtx, 400, 4));
}

TEST_CASE("train: the fused set's three-launch step matches its twins and learns like the one-launch step") {
    const std::vector<unsigned> net = {784, 128, 10};
    TrainResult a = run(kFusedPtx, 400, 5, net, true, {}, true, false), b = run(kFusedRef, 400, 5, net, true, {}, true, false);
    REQUIRE(a.step_losses.size() == 400);
    CHECK(a.step_losses == b.step_losses);
    CHECK(a.model.W == b.model.W);
    TrainResult one = run(kFusedPtx, 400, 5);
    CHECK(one.step_losses != a.step_losses);  // the two steps sum in different orders
    check_learns_like(one, a);
}

TEST_CASE("train: the fast set gives the same losses as its twins, and learns like the seed set") {
    TrainResult a = run(kFastPtx, 400, 4), b = run(kFastRef, 400, 4), p = run(kSeedPtx, 400, 4);
    REQUIRE(a.step_losses.size() == 400);
    CHECK(a.step_losses == b.step_losses);
    CHECK(a.model.W == b.model.W);
    // The same per-sample gradients as the seed set, from deltas summed in another order.
    check_learns_like(a, p);
}

TEST_CASE("train: the fused set is bit-identical run after run") {
    TrainResult a = run(kFusedPtx, 500, 9), b = run(kFusedPtx, 500, 9);
    CHECK(a.step_losses == b.step_losses);
    CHECK(a.model.W == b.model.W);
}

TEST_CASE("train: a kernel that writes NaN is named, with the element") {
    // One injected fault in each fused step: unit 3 of every sample's hidden layer becomes NaN,
    // in fused_forward (fused.ptx, the three-launch step) and in fused_step (step.ptx).
    TempDir t;
    auto inject = [&](const char* file, const std::string& relu, const std::string& fault) {
        std::string src = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/" + file).text;
        REQUIRE(src.find(relu) != std::string::npos);
        src.replace(src.find(relu), relu.size(), relu + fault);
        write_text(t.file(file), src);
    };
    inject("fused.ptx", "    max.f32         z, z, 0f00000000;\n",
           "    setp.eq.u32     ok, h, 3;\n    @ok mov.f32     z, 0f7FFFFFFF;\n");
    inject("step.ptx", "    max.f32         a, z, 0f00000000;\n",
           "    setp.eq.u32     ok2, h, 3;\n    @ok2 mov.f32    a, 0f7FFFFFFF;\n");
    std::filesystem::copy_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/gather.ptx", t.file("gather.ptx"));
    for (const bool one_launch : {false, true}) {
        const std::string kernel = one_launch ? "fused_step" : "fused_forward";
        TrainResult r = run(kFusedPtx, 100, 1, {784, 128, 10}, true, t.path.string(), true, one_launch);
        CAPTURE(kernel);
        CHECK(r.diverged);
        CHECK(r.steps == 1);
        CAPTURE(r.fault);
        CHECK(r.fault.find("kernel '" + kernel + "'") != std::string::npos);
        CHECK(r.fault.find("A1[") != std::string::npos);
        CHECK(r.fault.find("][3] = nan") != std::string::npos);
        CHECK(r.fault.find("ptxlab verify --kernel " + kernel) != std::string::npos);
    }
}
