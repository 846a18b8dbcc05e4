// dense_program (ptx/densestep.ptx): an fc network's step in one launch, the PTX against its twin
// bit for bit and both against the float64 step within its bound, on random networks of 2 to 5
// layers; a planted bug (the ReLU mask ignored) must be caught.
#include "../../helpers.hpp"
#include "../../planted.hpp"
#include "../common.hpp"
#include "densestep.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
CaseResult verify_densestep(std::vector<unsigned> shape, const KernelDirs& ptx_dirs, unsigned seed) {
    return verify_one("dense_program", std::move(shape), ptx_dirs, seed);
}
}  // namespace

TEST_CASE("densestep: dense_program equals its twin bit for bit and float64 within its bound") {
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    // The network first, then random ones: 2 to 5 layers, widths from 1, batches from 1.
    const CaseResult mnist = verify_densestep({64, 1, 784, 256, 128, 10, 0, 0}, KernelDirs::from_environment(), seed);
    INFO(format_result(mnist));
    CHECK(mnist.pass());
    CHECK(mnist.elements > 0);
    std::mt19937 gen(seed);
    auto size = [&](unsigned hi) { return std::uniform_int_distribution<unsigned>(1, hi)(gen); };
    for (int i = 0; i < 16; ++i) {
        const bool big = i % 5 == 4;
        std::vector<unsigned> shape = {big ? size(200) : size(130), unsigned(i % 2)};
        const unsigned layers = 2 + unsigned(i % 4);
        for (unsigned l = 0; l <= layers; ++l) shape.push_back(big ? size(900) : size(l == 0 ? 300 : 150));
        shape.resize(8, 0);
        const CaseResult r = verify_densestep(shape, KernelDirs::from_environment(), seed + i);
        INFO(format_result(r));
        CHECK(r.pass());
        CHECK(r.elements > 0);
    }
}

TEST_CASE("densestep: a dense_program that ignores the ReLU mask is caught by verify") {
    // densestep_mask_ignored.patch: the GEMM phases never read Am, so the deltas and weight
    // gradients below a hidden layer take dY where its output is 0 (all still written).
    const PlantedKernel planted = plant("densestep_mask_ignored");
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    const CaseResult r = verify_densestep({64, 1, 784, 256, 128, 10, 0, 0}, KernelDirs::from_ptx_dir(planted.dir()), seed);
    INFO(format_result(r));
    check_planted_caught(r);
    CHECK(r.unwritten_ptx == 0);
    RunResult run = run_command(ptxlab_cmd("verify --kernel dense_program --shape 3,0,9,5,2,7,0,0 --ptx-dir " +
                                           planted.dir()));
    CAPTURE(run.output);
    CHECK(run.code == 1);
}
