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

namespace {
unsigned fresh_seed() { return std::random_device{}(); }

// Each set on its own every output written and within the float64 bound; the two sets equal to the bit.
void check_fc3_both_sets(std::vector<unsigned> shape) {
    const unsigned seed = fresh_seed();
    INFO("seed ", seed);
    CaseResult r = verify_one("fc3_step", std::move(shape), KernelDirs::from_environment(), seed);
    INFO(format_result(r));
    CHECK(r.elements > 0);
    CHECK(r.unwritten_ptx == 0);
    CHECK(r.f64_fail_ptx == 0);
    CHECK(r.unwritten_ref == 0);
    CHECK(r.f64_fail_ref == 0);
    CHECK(r.differing == 0);
    CHECK(r.max_ulp == 0);
}
}  // namespace

TEST_CASE("kernels: fc3_step, both sets, every loss and optimizer") {
    for (unsigned loss : {0u, 1u})
        for (const OptimizerRow& row : optimizer_rows()) {
            CAPTURE(loss);
            CAPTURE(row.name);
            check_fc3_both_sets({64, 784, 256, 128, 10, loss, optim_code(row.kind())});  // the network
        }
    check_fc3_both_sets({1, 784, 256, 128, 10, 1, 2});    // one sample: rows 1..63 padding
    check_fc3_both_sets({37, 300, 72, 40, 7, 1, 5});      // two ranks with columns, part-empty tiles
    check_fc3_both_sets({5, 13, 9, 3, 3, 0, 4});          // 4-byte copies, one cluster
    check_fc3_both_sets({64, 784, 256, 128, 16, 1, 1});   // the limits
    check_fc3_both_sets({64, 784, 16, 128, 10, 1, 2});    // clusters with an H2 tile and no H1 tile
    check_fc3_both_sets({64, 784, 256, 16, 10, 1, 6});    // clusters with an H1 tile and no H2 tile
}

TEST_CASE("kernels: an fc3_step with a planted bug is caught by verify") {
    const unsigned seed = fresh_seed();
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
