// fc3_step (ptx/fc3step.ptx): whole training steps of a 3-layer fc network in one launch of
// clusters of 4, TF32 products. The PTX against its twin bit for bit and both within the float64
// step's bound, every loss and optimizer at the MNIST sizes and edge shapes; two planted bugs
// (a join that skips a rank, a gradient fragment out of place) must be caught.
// Shape B,I,H1,H2,O,loss,optim (family_fc3step.cpp).
#include "../../helpers.hpp"
#include "../../planted.hpp"
#include "../common.hpp"
#include "optimizers.hpp"
#include "recipe.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <random>

using namespace ptxlab;
using namespace ptxlab::test;

TEST_CASE("kernels: fc3_step, both sets, every loss and optimizer") {
    for (unsigned loss : {0u, 1u})
        for (const OptimizerRow& row : optimizer_rows()) {
            CAPTURE(loss);
            CAPTURE(row.name);
            check_both_sets("fc3_step", {64, 784, 256, 128, 10, loss, optim_code(row.kind())});  // the network
        }
    check_both_sets("fc3_step", {1, 784, 256, 128, 10, 1, 2});    // one sample: rows 1..63 padding
    check_both_sets("fc3_step", {37, 300, 72, 40, 7, 1, 5});      // two ranks with columns, part-empty tiles
    check_both_sets("fc3_step", {5, 13, 9, 3, 3, 0, 4});          // 4-byte copies, one cluster
    check_both_sets("fc3_step", {64, 784, 256, 128, 16, 1, 1});   // the limits
    check_both_sets("fc3_step", {64, 784, 16, 128, 10, 1, 2});    // clusters with an H2 tile and no H1 tile
    check_both_sets("fc3_step", {64, 784, 256, 16, 10, 1, 6});    // clusters with an H1 tile and no H2 tile
}

TEST_CASE("kernels: an fc3_step with a planted bug is caught by verify") {
    const unsigned seed = std::random_device{}();
    INFO("seed ", seed);
    for (const char* name : {"fc3step_join_skips_rank", "fc3step_gradient_fragment"}) {
        CAPTURE(name);
        const PlantedKernel planted = plant(name);
        CaseResult r = verify_one("fc3_step", {64, 784, 256, 128, 10, 1, 2}, KernelDirs::from_ptx_dir(planted.dir()), seed);
        INFO(format_result(r));
        check_planted_caught(r);
        CHECK(r.unwritten_ptx == 0);
    }
}
