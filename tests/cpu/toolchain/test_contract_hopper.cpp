// The contract keys for the Hopper lessons (ptx/lessons 12 to 16): `cluster` (thread-block
// clusters through the launch attribute), `param NAME tensormap(...)` (a CUtensorMap the host
// encodes), the sm_90a target that `check` and verify's preflight take from the file, and the
// five lessons with their planted mistakes.
#include "../../helpers.hpp"
#include "compile.hpp"
#include "contract.hpp"
#include "error.hpp"

#include <doctest/doctest.h>

#include <filesystem>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

std::string lesson_path(const std::string& name) { return std::string(PTXLAB_FIXTURES) + "/../../ptx/lessons/" + name; }

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
    const auto pos = s.find(from);
    REQUIRE_MESSAGE(pos != std::string::npos, from);
    return s.replace(pos, from.size(), to);
}

// A lesson's text with one contract line changed; its contract (no parse errors expected).
Contract contract_of(const std::string& text) {
    ContractParse cp = parse_contract(SourceFile{"k.ptx", text});
    CAPTURE(cp.problems.empty() ? std::string() : cp.problems.front().message);
    REQUIRE(cp.problems.empty());
    REQUIRE(cp.contract);
    return *cp.contract;
}

// The first value error of a contract, or "".
std::string first_value_error(const std::string& text) {
    const auto problems = check_contract_values(contract_of(text));
    return problems.empty() ? std::string() : problems.front().message;
}

}  // namespace

TEST_CASE("contract: `cluster` launches thread-block clusters of at most 8 blocks that divide the grid") {
    const std::string text = read_source_file(lesson_path("12_cluster_dsmem.ptx")).text;
    const Contract c = contract_of(text);
    CHECK(c.cluster_line > 0);
    CHECK(c.cluster[0] == "4");
    CHECK(check_contract_values(c).empty());
    const LaunchShape l = launch_shape(c, c.shapes[1]);
    CHECK(l.grid[0] == 4000);
    CHECK(l.cluster == std::array<unsigned, 3>{4, 1, 1});
    // Without the key: no cluster (a plain launch).
    const Contract plain = contract_of(replace_once(text, "//   cluster  4\n", ""));
    CHECK(plain.cluster_line == 0);
    CHECK(launch_shape(plain, plain.shapes[0]).cluster == std::array<unsigned, 3>{0, 0, 0});

    CHECK(first_value_error(replace_once(text, "//   cluster  4", "//   cluster  16"))
              .find("cluster.x = `16` is 16 at C=1, outside [1, 8] (a cluster has at most 8 blocks)") != std::string::npos);
    CHECK(first_value_error(replace_once(text, "//   cluster  4", "//   cluster  3"))
              .find("cluster.x = `3` is 3 at C=1, which does not divide grid.x = 4: the grid must be whole clusters") !=
          std::string::npos);
    CHECK(first_value_error(replace_once(replace_once(text, "//   grid     4 * C", "//   grid     4 * C, 4, 2"),
                                         "//   cluster  4", "//   cluster  4, 2, 2"))
              .find("cluster 4x2x2 has 16 blocks at C=1; a cluster has at most 8") != std::string::npos);
    // The error is at the cluster line; a second `cluster` is refused like a second `grid`.
    const std::string bad = replace_once(text, "//   cluster  4", "//   cluster  3");
    const auto problems = check_contract_values(contract_of(bad));
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].line == contract_of(bad).cluster_line);
    ContractParse twice = parse_contract(SourceFile{"k.ptx", replace_once(text, "//   cluster  4", "//   cluster  4\n//   cluster  2")});
    REQUIRE(!twice.problems.empty());
    CHECK(twice.problems.front().message.find("`cluster` is given twice") != std::string::npos);
}

TEST_CASE("contract: `param NAME tensormap(BUF, ROWS, COLS, BOX_ROWS, BOX_COLS)` describes a buffer") {
    const std::string text = read_source_file(lesson_path("15_tensor_map.ptx")).text;
    const Contract c = contract_of(text);
    REQUIRE(c.params.size() == 5);
    const ContractParam& p = c.params[2];
    CHECK(p.role == ParamRole::TensorMap);
    CHECK_FALSE(p.buffer());
    CHECK(p.tmap_of == "X");
    CHECK(p.tmap == std::array<std::string, 4>{"R", "C", "32", "32"});
    CHECK(p.ptx_type() == ".b8[128]");
    CHECK(check_contract(c, parse_ptx(text)).empty());  // `.param .align 64 .b8 tmap[128]`
    CHECK(check_contract_values(c).empty());
    const TensorMapShape t = tensor_map_shape(c, p, c.shapes[1]);
    CHECK(t.buffer == 1);
    CHECK(t.rows == 1000);
    CHECK(t.cols == 1004);
    CHECK(t.box_rows == 32);
    CHECK(t.box_cols == 32);
    CHECK_FALSE(t.swizzle128);
    {  // `swizzle128`: CU_TENSOR_MAP_SWIZZLE_128B, a box row of at most 128 bytes
        const Contract sw = contract_of(replace_once(text, "//   param    tmap  tensormap(X, R, C, 32, 32)",
                                                       "//   param    tmap  tensormap(X, R, C, 32, 32, swizzle128)"));
        CHECK(sw.params[2].tmap_swizzle128);
        CHECK(check_contract_values(sw).empty());
        CHECK(tensor_map_shape(sw, sw.params[2], sw.shapes[0]).swizzle128);
    }

    const std::string line = "//   param    tmap  tensormap(X, R, C, 32, 32)";
    struct Case {
        const char* to;
        const char* message;
        bool parse;  // a parse error (else a value error)
    };
    const Case cases[] = {
        {"//   param    tmap  tensormap(Z, R, C, 32, 32)", "tensor map 'tmap' describes 'Z', which is not a buffer", true},
        {"//   param    tmap  tensormap(rows, R, C, 32, 32)", "describes 'rows', which is not a buffer", true},
        {"//   param    tmap  tensormap(X, R, C, 32)", "write tensormap(BUF, ROWS, COLS, BOX_ROWS, BOX_COLS[, swizzle128])",
         true},
        {"//   param    tmap  tensormap(X, R, C, 32, 32, swizzle64)", "'swizzle64' is not a swizzle mode", true},
        {"//   param    tmap  tensormap(X, R, C, 32, 64, swizzle128)", "the 128-byte swizzle takes at most 128 bytes",
         false},
        {"//   param    tmap  tensormap(X, R, K, 32, 32)", "uses 'K', which is not a declared variable", true},
        {"//   param    tmap  tensormap(X, R * C / 2, 2, 32, 32)", "a row of 2 columns is 8 bytes", false},
        {"//   param    tmap  tensormap(X, R, C, 32, 30)", "a box row of 30 columns is 120 bytes", false},
        {"//   param    tmap  tensormap(X, R, C, 512, 32)", "outside [1, 256] (a box side is 1 .. 256 elements)", false},
        {"//   param    tmap  tensormap(X, 2 * R, C, 32, 32)", "is 128 x 96 elements at C=96 R=64, but 'X' has 6144",
         false},
    };
    for (const Case& k : cases) {
        CAPTURE(k.to);
        const std::string bad = replace_once(text, line, k.to);
        ContractParse cp = parse_contract(SourceFile{"k.ptx", bad});
        std::string msg;
        if (k.parse) {
            REQUIRE(!cp.problems.empty());
            msg = cp.problems.front().message;
        } else {
            REQUIRE(cp.contract);
            msg = first_value_error(bad);
        }
        CAPTURE(msg);
        CHECK(msg.find(k.message) != std::string::npos);
    }
    // The entry must declare 128 bytes.
    const auto wrong = check_contract(c, parse_ptx(replace_once(text, ".param .u64 X, .param .align 64 .b8 tmap[128]", ".param .u64 X, .param .u64 tmap")));
    REQUIRE(wrong.size() == 1);
    CHECK(wrong[0].message.find("needs `.param .b8[128]` but entry 'tma_transpose' declares .u64") != std::string::npos);
}

TEST_CASE("check: a file for sm_90a assembles for sm_90a, and others for the architecture asked") {
    CHECK(assembly_arch("sm_90", "sm_90a") == "sm_90a");
    CHECK(assembly_arch("sm_90", "sm_80") == "sm_90");
    CHECK(assembly_arch("sm_90", "sm_90") == "sm_90");
    CHECK(assembly_arch("sm_100", "sm_90a") == "sm_100");
    CHECK(assembly_arch("sm_100", "sm_100f") == "sm_100f");
    RunResult r = run_command(ptxlab_cmd("check " + lesson_path("16_wgmma.ptx")));
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("ok (1 entry, sm_90a)") != std::string::npos);
}

TEST_CASE("lessons: 12 to 16 have a contract, a twin and a planted mistake that differs from the lesson") {
    const std::pair<const char*, const char*> lessons[] = {
        {"12_cluster_dsmem", "12_no_cluster_barrier"}, {"13_mbarrier_bulk", "13_read_before_wait"},
        {"14_ldmatrix", "14_wrong_row"},               {"15_tensor_map", "15_swapped_coords"},
        {"16_wgmma", "16_wrong_sbo"}};
    for (const auto& [lesson, planted] : lessons) {
        const std::string name = lesson;
        CAPTURE(name);
        const SourceFile src = read_source_file(lesson_path(name + ".ptx"));
        ContractParse cp = parse_contract(src);
        REQUIRE(cp.contract);
        const Contract& c = *cp.contract;
        CHECK(check_contract(c, parse_ptx(src.text)).empty());
        CHECK(check_contract_values(c).empty());
        CHECK(std::filesystem::exists(c.twin_path()));
        const SourceFile bug = read_source_file(fixture(std::string("lessons/") + planted + ".ptx"));
        CHECK(bug.text.find("PLANTED BUG") != std::string::npos);
        ContractParse bp = parse_contract(bug);
        REQUIRE(bp.contract);
        CHECK(std::filesystem::equivalent(bp.contract->twin_path(), c.twin_path()));
        // The same file but for the note, the twin's path and the mistake itself.
        CHECK(bug.text.size() > src.text.size());
        CHECK(src.text.find(std::string(planted) + ".ptx") != std::string::npos);  // the lesson names its mistake
    }
}
