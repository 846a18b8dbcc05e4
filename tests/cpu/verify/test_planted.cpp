// The planted bugs (tests/fixtures/planted/*.patch, tests/planted.hpp): each applies to today's
// kernel exactly as it says, changes it, and still assembles, so that the GPU test that runs it
// tests a wrong kernel and not a file that fails to load (for sm_90a where the kernel is: ptx/hopper).
// A stale patch fails here first.
#include "../../helpers.hpp"
#include "../../planted.hpp"
#include "compile.hpp"
#include "ptx_text.hpp"

#include <doctest/doctest.h>

#include <filesystem>

using namespace ptxlab;
using namespace ptxlab::test;

TEST_CASE("planted: every patch applies to today's kernel, changes it, and the result assembles") {
    size_t patches = 0;
    for (const auto& e : std::filesystem::directory_iterator(planted_dir())) {
        if (e.path().extension() != ".patch") continue;
        ++patches;
        const std::string name = e.path().stem().string();
        CAPTURE(name);
        const PlantedPatch p = read_planted(name);
        const std::string live = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/" + p.target).text;
        std::string planted;
        REQUIRE_NOTHROW(planted = apply_planted(p, live));
        CHECK(planted != live);
        // A kernel for sm_90a (ptx/hopper's wgmma) assembles for sm_90a, the others for sm_90;
        // linked as plant() puts it: beside the tree's other kernels (step.ptx with optim.ptx).
        const std::string arch = assembly_arch("sm_90", parse_ptx(planted).target);
        const AssemblyResult r = assemble_offline(SourceFile{p.target + " (" + name + ")", planted}, arch,
                                                  AssembleOptions{.link_dir = std::string(PTXLAB_SOURCE_DIR) + "/ptx"});
        CAPTURE(r.error_log);
        CHECK(r.ok);
        // Each patch names the test file that runs it, and that file names the patch.
        const size_t at = p.text.find("# tests/gpu/");
        REQUIRE(at != std::string::npos);
        const std::string test_file = p.text.substr(at + 2, p.text.find(':', at) - at - 2);
        const std::string test_src = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/tests/" + test_file.substr(6)).text;
        CHECK(test_src.find("\"" + name + "\"") != std::string::npos);
    }
    CHECK(patches >= 13);
}

TEST_CASE("planted: a stale or malformed patch fails loudly, naming the text") {
    const std::string source = "    add.u32 a, b, c;\n    mul.lo.u32 a, a, 2;\n    add.u32 a, b, c;\n";
    auto apply = [&](const std::string& body) { return apply_planted(PlantedPatch{"p", "ptx/x.ptx", "file ptx/x.ptx\n" + body}, source); };
    // The right counts, both forms.
    CHECK(apply("all 2\nswap add.u32 => sub.u32\n") == "    sub.u32 a, b, c;\n    mul.lo.u32 a, a, 2;\n    sub.u32 a, b, c;\n");
    CHECK(apply("first 2\nswap add.u32 => sub.u32\n") == "    sub.u32 a, b, c;\n    mul.lo.u32 a, a, 2;\n    add.u32 a, b, c;\n");
    CHECK(apply("find\n    mul.lo.u32 a, a, 2;\ninto\n    mul.lo.u32 a, a, 3;\n    // two lines now\nend\n") ==
          "    add.u32 a, b, c;\n    mul.lo.u32 a, a, 3;\n    // two lines now\n    add.u32 a, b, c;\n");
    // A find block matches whole lines only: a line that merely contains it does not count.
    CHECK_THROWS_WITH_AS(apply("find\nmul.lo.u32 a, a, 2;\ninto\nx\nend\n"), doctest::Contains("occurs 0 times"), std::runtime_error);
    // The kernel moved on: the text is gone, or occurs another number of times.
    CHECK_THROWS_WITH_AS(apply("swap div.u32 => sub.u32\n"), doctest::Contains("`div.u32` occurs 0 times in ptx/x.ptx, the patch expects 1"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(apply("swap add.u32 => sub.u32\n"), doctest::Contains("occurs 2 times"), std::runtime_error);
    CHECK_THROWS_WITH_AS(apply("all 3\nswap add.u32 => sub.u32\n"), doctest::Contains("the patch expects 3"), std::runtime_error);
    // Malformed.
    CHECK_THROWS_WITH_AS(apply("swap add.u32 sub.u32\n"), doctest::Contains("OLD => NEW"), std::runtime_error);
    CHECK_THROWS_WITH_AS(apply("find\nx\n"), doctest::Contains("`into` and `end`"), std::runtime_error);
    CHECK_THROWS_WITH_AS(apply("frobnicate\n"), doctest::Contains("unknown line"), std::runtime_error);
    CHECK_THROWS_WITH_AS(apply("# nothing\n"), doctest::Contains("no change"), std::runtime_error);
}
