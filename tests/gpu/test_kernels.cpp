// Every kernel, both sets (hand-written PTX and NVRTC twin), against the float64
// reference and each other; and a deliberately wrong kernel that must be caught.
#include "../helpers.hpp"
#include "common.hpp"
#include "ptx_text.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

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

TEST_CASE("kernels: forward2, both sets") { check_both_sets("forward2", {63, 784, 100, 10}); }
TEST_CASE("kernels: forward3, both sets") { check_both_sets("forward3", {64, 300, 129, 33, 7}); }
TEST_CASE("kernels: grad2, both sets") { check_both_sets("grad2", {65, 784, 128, 10}); }
TEST_CASE("kernels: grad3, both sets") { check_both_sets("grad3", {33, 784, 128, 64, 10}); }
TEST_CASE("kernels: update, both sets") { check_both_sets("update", {100352, 64}); }
TEST_CASE("kernels: gather, both sets") { check_both_sets("gather", {1000, 784, 60000}); }
TEST_CASE("kernels: fused_forward, both sets") { check_both_sets("fused_forward", {63, 784, 128}); }
TEST_CASE("kernels: fused_output, both sets") { check_both_sets("fused_output", {65, 300, 17}); }
TEST_CASE("kernels: fused_sgd, both sets") { check_both_sets("fused_sgd", {65, 784, 128, 10}); }
TEST_CASE("kernels: outer, both sets") { check_both_sets("outer", {65, 128, 784}); }
TEST_CASE("kernels: fused_step, both sets") {
    check_both_sets("fused_step", {64, 784, 128, 10});  // one chunk, one tile a cluster
    check_both_sets("fused_step", {130, 257, 300, 17}); // three chunks, single-float copies, 19 tiles
}

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
    for (const char* f : {"fused.ptx", "step.ptx", "gather.ptx"})
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
