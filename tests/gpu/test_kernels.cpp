// Every kernel, both sets (hand-written PTX and NVRTC twin), against the float64
// reference and each other; and a deliberately wrong kernel that must be caught.
#include "../helpers.hpp"
#include "common.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

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

TEST_CASE("kernels: forward2, both sets") { check_both_sets("forward2", {63, 784, 100, 10}); }
TEST_CASE("kernels: forward3, both sets") { check_both_sets("forward3", {64, 300, 129, 33, 7}); }
TEST_CASE("kernels: grad2, both sets") { check_both_sets("grad2", {65, 784, 128, 10}); }
TEST_CASE("kernels: grad3, both sets") { check_both_sets("grad3", {33, 784, 128, 64, 10}); }
TEST_CASE("kernels: update, both sets") { check_both_sets("update", {100352, 64}); }
TEST_CASE("kernels: gather, both sets") { check_both_sets("gather", {1000, 784, 60000}); }
TEST_CASE("kernels: fused_forward, both sets") { check_both_sets("fused_forward", {63, 784, 128}); }
TEST_CASE("kernels: fused_output, both sets") { check_both_sets("fused_output", {65, 300, 17}); }
TEST_CASE("kernels: fused_sgd, both sets") { check_both_sets("fused_sgd", {65, 784, 128, 10}); }

TEST_CASE("kernels: a deliberately wrong PTX kernel is caught by verify") {
    KernelDirs wrong = KernelDirs::from_ptx_dir(fixture("wrong"));
    CaseResult r = verify_one("update", {1000, 64}, wrong);
    INFO(format_result(r));
    CHECK_FALSE(r.pass());
    CHECK(r.differing > 0);
    CHECK(r.f64_fail_ptx > 0);   // the broken PTX misses the float64 reference ...
    CHECK(r.f64_fail_ref == 0);  // ... while its twin does not
    REQUIRE_FALSE(r.mismatches.empty());
    CHECK(r.mismatches[0].find("P[") == 0);
    // The command line says FAIL and exits 1.
    RunResult run = run_command(ptxlab_cmd("verify --kernel update --shape 1000,64 --ptx-dir " + fixture("wrong")));
    CHECK(run.code == 1);
    CHECK(run.output.find("FAIL") != std::string::npos);
    CHECK(run.output.find("0 cases passed, 1 failed") != std::string::npos);
}
