// Training on MNIST with both kernel sets (needs data/mnist: tools/fetch_mnist.sh).
#include "../helpers.hpp"
#include "common.hpp"
#include "safetensors.hpp"
#include "train.hpp"

#include <doctest/doctest.h>

#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
const Dataset& mnist() {
    static Dataset d = load_dataset(default_data_dir());
    return d;
}
TrainResult run(KernelSource k, unsigned steps, uint64_t seed, const std::vector<unsigned>& layers = {784, 128, 10}) {
    TrainConfig cfg;
    cfg.kernels = k;
    cfg.max_steps = steps;
    cfg.seed = seed;
    cfg.layers = layers;
    cfg.progress = false;
    std::ostringstream out;
    return train(gpu(), mnist(), cfg, out);
}
}  // namespace

TEST_CASE("train: 50 steps give the same losses with the PTX and the reference kernels") {
    TrainResult a = run(KernelSource::Ptx, 50, 3), b = run(KernelSource::Reference, 50, 3);
    REQUIRE(a.step_losses.size() == 50);
    CHECK(a.step_losses == b.step_losses);  // bit-identical kernels give identical curves
    CHECK(a.accuracy == b.accuracy);
    TrainResult c = run(KernelSource::Ptx, 20, 3, {784, 64, 32, 10}), d = run(KernelSource::Reference, 20, 3, {784, 64, 32, 10});
    CHECK(c.step_losses == d.step_losses);
}

TEST_CASE("train: 200 steps lower the loss") {
    TrainResult r = run(KernelSource::Ptx, 200, 4);
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
    TrainResult a = run(KernelSource::Ptx, 30, 9), b = run(KernelSource::Ptx, 30, 9);
    CHECK(a.step_losses == b.step_losses);
}

TEST_CASE("train: eval of a saved checkpoint gives the accuracy train reported") {
    TrainResult r = run(KernelSource::Ptx, 120, 5);
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
    NetParams net = init_params({100, 8, 10}, Init::HeUniform, 0.f, 1);
    KernelSet ks(KernelSource::Ptx, gpu().info(), KernelDirs::from_environment(), {"forward2"});
    CHECK_THROWS_WITH_AS(evaluate(ks, net, mnist().test), doctest::Contains("takes 100 inputs but the images have 28x28"),
                         InputError);
}
