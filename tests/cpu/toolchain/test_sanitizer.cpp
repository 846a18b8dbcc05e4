// verify --racecheck / --synccheck without a GPU: the command line compute-sanitizer gets (this
// same verify again, with the seed fixed), how its output is judged, its absence, and the
// command end to end with a stand-in (tests/fixtures/sanitizer/fake_compute_sanitizer.sh) that
// prints a summary instead of running anything. tests/gpu/toolchain/test_lessons.cpp runs the
// real one on lesson 04's planted mistake.
#include "../../helpers.hpp"
#include "sanitizer.hpp"

#include <doctest/doctest.h>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
std::string fake() { return fixture("sanitizer/fake_compute_sanitizer.sh"); }
std::string lesson04() { return fixture("../../ptx/lessons/04_shared_barrier.ptx"); }
ProcessResult result(int code, const std::string& out) {
    ProcessResult r;
    r.exit_code = code;
    r.out = out;
    return r;
}
}  // namespace

TEST_CASE("sanitizer: the arguments run the program under the tool, errors giving their own exit status") {
    const auto a = sanitizer_args("racecheck", "/bin/ptxlab", {"verify", "k.ptx", "--seed", "7"});
    CHECK(a == std::vector<std::string>{"--tool", "racecheck", "--error-exitcode", "86", "--print-limit", "20",
                                        "/bin/ptxlab", "verify", "k.ptx", "--seed", "7"});
    const auto s = sanitizer_args("synccheck", "/bin/ptxlab", {"verify"});
    CHECK(s == std::vector<std::string>{"--tool", "synccheck", "--error-exitcode", "86", "--print-limit", "20",
                                        "/bin/ptxlab", "verify"});
}

TEST_CASE("sanitizer: a hazard, an error, a failed run or no summary fail, and a clean summary passes") {
    const std::string clean = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
                              "========= ERROR SUMMARY: 0 errors\n";
    CHECK(judge_sanitizer_run("racecheck", result(0, clean)).ok);
    const auto h = judge_sanitizer_run(
        "racecheck", result(86, "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)\n"
                                "========= ERROR SUMMARY: 3 errors\n"));
    CHECK_FALSE(h.ok);
    CHECK(h.hazards == 3);
    CHECK(h.why == "compute-sanitizer --tool racecheck reported 3 hazards");
    const auto w = judge_sanitizer_run(  // warnings only: still hazards
        "racecheck", result(0, "========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)\n"
                               "========= ERROR SUMMARY: 0 errors\n"));
    CHECK_FALSE(w.ok);
    CHECK(w.why == "compute-sanitizer --tool racecheck reported 1 hazard");
    const auto e = judge_sanitizer_run("synccheck", result(86, "========= ERROR SUMMARY: 2 errors\n"));
    CHECK(e.why == "compute-sanitizer --tool synccheck reported 2 errors");
    const auto f = judge_sanitizer_run("synccheck", result(1, "========= ERROR SUMMARY: 0 errors\n"));
    CHECK(f.why == "the verify run under compute-sanitizer --tool synccheck failed (exited with status 1)");
    const auto n = judge_sanitizer_run("racecheck", result(0, "hello\n"));
    CHECK_FALSE(n.ok);
    CHECK(n.why.find("printed no summary") != std::string::npos);
}

TEST_CASE("sanitizer: without compute-sanitizer the message names it, its package and where ptxlab looked") {
    ToolSearch s;
    s.dirs = {{"/nonexistent/cuda/bin", "$CUDA_HOME/bin"}};
    CHECK_THROWS_WITH_AS(find_compute_sanitizer(s, "--racecheck"),
                         doctest::Contains("compute-sanitizer not found. `ptxlab verify --racecheck` needs "
                                           "compute-sanitizer, part of the CUDA toolkit"),
                         MissingToolError);
    CHECK_THROWS_WITH_AS(find_compute_sanitizer(s, "--racecheck"),
                         doctest::Contains("/nonexistent/cuda/bin/compute-sanitizer ($CUDA_HOME/bin)"), MissingToolError);
    s.override_path = "/nonexistent/compute-sanitizer";
    CHECK_THROWS_WITH_AS(find_compute_sanitizer(s, "--synccheck"),
                         doctest::Contains("PTXLAB_COMPUTE_SANITIZER=/nonexistent/compute-sanitizer is not an executable"),
                         MissingToolError);
    // The toolkit's compute-sanitizer/ folder beside each bin/ is searched too.
    bool beside = false;
    for (const auto& [dir, from] : compute_sanitizer_search_from_environment().dirs)
        beside |= dir == "/usr/local/cuda/compute-sanitizer";
    CHECK(beside);
}

TEST_CASE("sanitizer: verify FILE --racecheck runs the same verify under the tool and fails on its hazards") {
    const std::string env = "PTXLAB_COMPUTE_SANITIZER=" + fake() + " PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 ";
    RunResult ok = run_command(env + ptxlab_cmd("verify " + lesson04() + " --racecheck --seed 7 --shape B=2"));
    CAPTURE(ok.output);
    CHECK(ok.code == 0);  // no GPU needed: the stand-in runs nothing
    CHECK(ok.output.find("fake compute-sanitizer: --tool racecheck --error-exitcode 86") != std::string::npos);
    CHECK(ok.output.find(" verify " + lesson04() + " --shape B=2 --seed 7 --timeout 120 --device 0\n") !=
          std::string::npos);
    CHECK(ok.output.find("verify --racecheck: PASS: no hazard reported") != std::string::npos);

    RunResult bad = run_command("FAKE_SANITIZER_HAZARDS=2 " + env +
                                ptxlab_cmd("verify " + lesson04() + " --racecheck --synccheck --seed 7"));
    CAPTURE(bad.output);
    CHECK(bad.code == 1);
    CHECK(bad.output.find("verify --racecheck: FAIL: compute-sanitizer --tool racecheck reported 2 hazards") !=
          std::string::npos);
    CHECK(bad.output.find("verify --synccheck: FAIL: compute-sanitizer --tool synccheck reported 2 errors") !=
          std::string::npos);

    // The seed is fixed for the re-run even when none was given.
    RunResult seeded = run_command(env + ptxlab_cmd("verify " + lesson04() + " --synccheck"));
    CHECK(seeded.output.find(" --seed ") != std::string::npos);

    RunResult missing = run_command("PTXLAB_COMPUTE_SANITIZER=/nonexistent/cs " + ptxlab_cmd("verify " + lesson04() + " --racecheck"));
    CHECK(missing.code == 1);
    CHECK(missing.output.find("`ptxlab verify --racecheck` needs compute-sanitizer") != std::string::npos);

    RunResult list = run_command(env + ptxlab_cmd("verify " + lesson04() + " --racecheck --list"));
    CHECK(list.code == 2);
    CHECK(list.output.find("--list only names the cases") != std::string::npos);
}
