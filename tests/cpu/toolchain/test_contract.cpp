// Contract headers (contract.hpp): the expression evaluator, good and bad headers with their
// file:line errors, `ptxlab new`, `check` on files with a header, the wrong-width parameter
// load warning (ptx_lint.hpp) and the messages about non-ASCII text.
#include "../../helpers.hpp"
#include "contract.hpp"
#include "error.hpp"
#include "kernels.hpp"
#include "ptx_lint.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

// `ptxlab new NAME` in a temporary directory; the .ptx text.
std::string new_kernel(const TempDir& t, const std::string& name) {
    RunResult r = run_command(ptxlab_cmd("new " + name + " --dir " + t.path.string()));
    REQUIRE(r.code == 0);
    return read_source_file(t.file(name + ".ptx")).text;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
    const auto pos = s.find(from);
    REQUIRE_MESSAGE(pos != std::string::npos, from);
    return s.replace(pos, from.size(), to);
}

// The line number (1-based) of the first line containing `what`.
int line_of(const std::string& text, const std::string& what) {
    const auto pos = text.find(what);
    REQUIRE(pos != std::string::npos);
    return 1 + int(std::count(text.begin(), text.begin() + long(pos), '\n'));
}

ContractParse parse_text(const std::string& text) { return parse_contract(SourceFile{"k.ptx", text}); }

// The errors of a header and of the header against the entry.
std::vector<Diagnostic> all_problems(const std::string& text) {
    ContractParse cp = parse_text(text);
    if (cp.contract)
        for (const auto& d : check_contract(*cp.contract, parse_ptx(text))) cp.problems.push_back(d);
    return cp.problems;
}

}  // namespace

TEST_CASE("contract: expressions are exact, with ceil, floor, min, max and parentheses") {
    const ShapeVars v{{"N", 1000}, {"B", 64}, {"I", 784}};
    CHECK(eval_whole("ceil(N / 256)", v, "x", 0, 1 << 30) == 4);
    CHECK(eval_whole("floor(N / 256)", v, "x", 0, 1 << 30) == 3);
    CHECK(eval_whole("B * (I + 1) - 2 * N", v, "x", 0, 1 << 30) == 64 * 785 - 2000);
    CHECK(eval_whole("N / 8 * 2", v, "x", 0, 1 << 30) == 250);
    CHECK(eval_whole("min(B, I) + max(B, I)", v, "x", 0, 1 << 30) == 848);
    CHECK(eval_whole("-B + 100", v, "x", 0, 1 << 30) == 36);
    CHECK(eval_expr("0.125 * 8", v).value() == 1.0);
    CHECK(eval_expr("1e-3", v).value() == doctest::Approx(1e-3));
    CHECK(eval_whole("ceil(7 / 2)", {}, "x", 0, 10) == 4);
    CHECK(eval_whole("ceil(-7 / 2)", {}, "x", -10, 10) == -3);
    // A length that is not whole, unknown names, division by zero, syntax, overflow: errors.
    CHECK_THROWS_WITH_AS(eval_whole("N / 256", v, "grid.x", 1, 1 << 30),
                         doctest::Contains("grid.x = `N / 256` is 125/32, not a whole number at B=64 I=784 N=1000; "
                                           "write ceil(N / 256) or floor(N / 256)"),
                         InputError);
    CHECK_THROWS_WITH_AS(eval_expr("N * M", v), doctest::Contains("unknown name 'M'"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("N / (B - 64)", v), doctest::Contains("division by zero"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("(N + 1", v), doctest::Contains("expected ')'"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("N +", v), doctest::Contains("missing operand"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("sqrt(N)", v), doctest::Contains("unknown function 'sqrt'"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("N $ 2", v), doctest::Contains("unexpected '$'"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("4294967296 * 4294967296", v), doctest::Contains("overflow"), InputError);
    CHECK_THROWS_AS(eval_whole("N", v, "x", 0, 999), InputError);  // past the upper limit
    CHECK(expr_names("ceil(N / B) + I") == std::vector<std::string>{"N", "B", "I"});
}

TEST_CASE("contract: the header that `ptxlab new` writes is read completely") {
    TempDir t;
    const std::string text = new_kernel(t, "mine");
    ContractParse cp = parse_text(text);
    REQUIRE(cp.problems.empty());
    REQUIRE(cp.contract);
    const Contract& c = *cp.contract;
    CHECK(c.entry == "mine");
    CHECK(c.vars == std::vector<std::string>{"N"});
    REQUIRE(c.shapes.size() == 3);
    CHECK(c.shapes[0].at("N") == 1000);
    REQUIRE(c.params.size() == 5);
    CHECK(c.params[0].role == ParamRole::Out);
    CHECK(c.params[1].role == ParamRole::In);
    CHECK(c.params[1].lo == -1.0);
    CHECK(c.params[2].role == ParamRole::Scalar);
    CHECK(c.params[3].value == "2.5");
    CHECK(c.compare == CompareKind::Bitwise);
    CHECK(c.twin_path() == (std::filesystem::path("k.ptx").parent_path() / "reference/mine.cu").string());
    CHECK(check_contract(c, parse_ptx(text)).empty());
    const LaunchShape l = launch_shape(c, c.shapes[2]);
    CHECK(l.grid[0] == 391);  // ceil(100003 / 256)
    CHECK(l.block[0] == 256);
    CHECK(buffer_length(c, c.params[0], c.shapes[2]) == 100003);
    CHECK(shape_text(parse_shape("N=5", c, "--shape")) == "N=5");
    CHECK_THROWS_WITH_AS(parse_shape("N=5,M=2", c, "--shape"), doctest::Contains("'M' is not a variable"), InputError);
    CHECK_THROWS_WITH_AS(parse_shape("N=0", c, "--shape"), doctest::Contains("outside 1 .. 2^31"), InputError);
    CHECK_THROWS_WITH_AS(parse_shape("N=x", c, "--shape"), doctest::Contains("not a whole number"), InputError);
}

TEST_CASE("contract: bad headers are errors at the line they concern") {
    TempDir t;
    const std::string good = new_kernel(t, "mine");
    struct Case {
        const char* from;
        const char* to;
        const char* at;       // the line the error must name (a piece of it, in the bad text)
        const char* message;  // a piece of the message
    };
    const Case cases[] = {
        {"//   block    256", "//   blocks   256", "//   blocks", "unknown key 'blocks'"},
        {"f32[N]   -1 .. 1", "f32[N * K]   -1 .. 1", "N * K", "uses 'K', which is not a declared variable"},
        {"f32[N]   -1 .. 1", "f32[N +]   -1 .. 1", "N +", "missing operand"},
        {"f32[N]   -1 .. 1", "f32[N]", "param    x  in   f32[N]", "needs its random range"},
        {"f32[N]   -1 .. 1", "f32[N]   1 .. -1", "1 .. -1", "is empty"},
        {"out  f32[N]", "out  f32[N]  0 .. 1", "out  f32[N]", "takes no range"},
        {"out  f32[N]", "outt  f32[N]", "outt", "role 'outt'"},
        {"in   f32[N]", "in   f64[N]", "f64[N]", "element type 'f64'"},
        {"//   shape    N=1\n", "//   shape    M=1\n", "M=1", "'M' is not a variable"},
        {"//   compare  bitwise", "//   compare  ulp 2", "ulp 2", "needs a `why` line"},
        {"//   compare  bitwise", "//   compare  close", "close", "use bitwise, ulp N or rel X"},
        {"//   grid     ceil(N / 256)", "//   grid     ceil(N / 256)\n//   grid     1", "//   grid     1", "given twice"},
        // Against the entry: a name, a type, a missing parameter, an unknown entry.
        {"param    n  u32 = N", "param    count  u32 = N", "count  u32", "parameter 3 is 'count' in the contract but 'n'"},
        {"param    n  u32 = N", "param    n  f32 = N", "n  f32", "needs `.param .f32` but entry 'mine' declares .u32"},
        {"//   param    b  f32 = -0.75\n", "", ".param .f32 b)", "parameter 5 'b' of entry 'mine' is not in the contract"},
        {"//   entry    mine", "//   entry    yours", "entry    yours", "entry 'yours' is not in this file (entries: mine)"},
    };
    for (const Case& c : cases) {
        CAPTURE(c.to);
        const std::string bad = replace(good, c.from, c.to);
        const auto problems = all_problems(bad);
        REQUIRE(!problems.empty());
        const int want = line_of(bad, c.at);
        bool found = false;
        for (const auto& d : problems)
            found |= d.line == want && d.severity == "error" && d.message.find(c.message) != std::string::npos;
        CAPTURE(problems.front().line);
        CAPTURE(problems.front().message);
        CHECK(found);
    }
    // No @end, a second @contract, a code line inside the block.
    CHECK(all_problems(replace(good, "// @end", "//")).front().message.find("no `// @end`") != std::string::npos);
    CHECK(all_problems(replace(good, "// @end", "// @end\n// @contract\n// @end")).front().message.find("second @contract") !=
          std::string::npos);
    CHECK(all_problems(replace(good, "//   vars     N", "   vars N")).front().message.find("no `// @end` before this line") !=
          std::string::npos);
    // No header at all: no contract, no problems.
    ContractParse none = parse_text(".version 8.0\n.target sm_80\n");
    CHECK_FALSE(none.contract);
    CHECK(none.problems.empty());
}

TEST_CASE("contract: `ptxlab new` output passes check, a bad header fails check at file:line") {
    TempDir t;
    const std::string good = new_kernel(t, "mine");
    RunResult ok = run_command(ptxlab_cmd("check " + t.file("mine.ptx")));
    CAPTURE(ok.output);
    CHECK(ok.code == 0);
    CHECK(ok.output.find("params  5 = twin") != std::string::npos);
    // A directory given to check stands for its .ptx files.
    CHECK(run_command(ptxlab_cmd("check " + t.path.string())).code == 0);
    // new refuses to overwrite, and refuses names that are not identifiers.
    RunResult again = run_command(ptxlab_cmd("new mine --dir " + t.path.string()));
    CHECK(again.code == 2);
    CHECK(again.output.find("already exists") != std::string::npos);
    CHECK(run_command(ptxlab_cmd("new 9lives --dir " + t.path.string())).code == 2);

    write_text(t.file("mine.ptx"), replace(good, "//   block    256", "//   threads  256"));
    RunResult bad = run_command(ptxlab_cmd("check " + t.file("mine.ptx")));
    CAPTURE(bad.output);
    CHECK(bad.code == 1);
    CHECK(bad.output.find(t.file("mine.ptx") + ":" + std::to_string(line_of(good, "//   block    256")) +
                          ": error: unknown key 'threads'") != std::string::npos);
    // A twin whose parameter list differs from the contract's.
    write_text(t.file("mine.ptx"), good);
    std::string cu = read_source_file(t.file("reference/mine.cu")).text;
    write_text(t.file("reference/mine.cu"), replace(cu, "unsigned n, float a", "int n, double a"));
    RunResult twin = run_command(ptxlab_cmd("check " + t.file("mine.ptx")));
    CAPTURE(twin.output);
    CHECK(twin.code == 1);
    CHECK(twin.output.find("the twin's 'mine' takes (.u64, .u64, .u32, .f64, .f32) but the contract lists (.u64, .u64, "
                           ".u32, .f32, .f32)") != std::string::npos);
    // verify FILE.ptx reads the header before it looks for a GPU.
    write_text(t.file("reference/mine.cu"), cu);
    RunResult shape = run_command(ptxlab_cmd("verify " + t.file("mine.ptx") + " --shape N=3,Q=2"));
    CHECK(shape.code == 2);
    CHECK(shape.output.find("'Q' is not a variable of this contract") != std::string::npos);
}

TEST_CASE("lint: a parameter loaded with the wrong width is a warning from check") {
    const std::string ptx = R"(.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 p, .param .u32 n)
{
    .reg .u64 %a, %b;
    .reg .u32 %c;
    ld.param.u64 %a, [p];
    ld.param.u64 %b, [n];
    ld.param.u32 %c, [p];
    ld.param.u32 %c, [n];
    ret;
}
)";
    const auto w = param_width_warnings(ptx, parse_ptx(ptx));
    REQUIRE(w.size() == 2);
    CHECK(w[0].line == 9);
    CHECK(w[0].severity == "warning");
    CHECK(w[0].message.find("ld.param.u64 reads 8 bytes of parameter 'n', which is declared .u32 (4 bytes)") !=
          std::string::npos);
    CHECK(w[1].line == 10);
    CHECK(w[1].message.find("keeps only part of it") != std::string::npos);
    // Through check: a warning, and the file still passes (ptxas accepts it).
    TempDir t;
    write_text(t.file("k.ptx"), ptx);
    RunResult r = run_command(ptxlab_cmd("check --no-twins " + t.file("k.ptx")));
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find(t.file("k.ptx") + ":9: warning: ld.param.u64 reads 8 bytes of parameter 'n'") != std::string::npos);
}

TEST_CASE("check: a non-ASCII character and a missing .version are named with file:line:column") {
    TempDir t;
    const std::string good = new_kernel(t, "mine");
    // A gamma in a comment, as in the notebook's training kernel.
    write_text(t.file("mine.ptx"), replace(good, "one rounding.", "one rounding (\xce\xb3 = 1)."));
    RunResult r = run_command(ptxlab_cmd("check " + t.file("mine.ptx")));
    CAPTURE(r.output);
    CHECK(r.code == 1);
    const int line = line_of(good, "one rounding.");
    CHECK(r.output.find(fmt::format("mine.ptx:{}:", line)) != std::string::npos);
    CHECK(r.output.find("non-ASCII character U+03B3") != std::string::npos);
    write_text(t.file("mine.ptx"), replace(good, ".version 8.0\n", ""));
    RunResult v = run_command(ptxlab_cmd("check " + t.file("mine.ptx")));
    CAPTURE(v.output);
    CHECK(v.code == 1);
    CHECK(v.output.find("no .version directive") != std::string::npos);
}

TEST_CASE("contract: verify and bench FILE.ptx need a header, and the lessons stay out of the trainer's kernels") {
    TempDir t;
    std::filesystem::copy_file(KernelDirs::from_environment().ptx_dir + "/mean.ptx", t.file("plain.ptx"));
    for (const char* cmd : {"verify ", "bench "}) {
        RunResult r = run_command(ptxlab_cmd(cmd + t.file("plain.ptx")));
        CAPTURE(r.output);
        CHECK(r.code == 2);
        CHECK(r.output.find("plain.ptx: no contract header") != std::string::npos);
    }
    CHECK(run_command(ptxlab_cmd("verify --kernel gather " + t.file("plain.ptx"))).code == 2);
    CHECK(run_command(ptxlab_cmd("bench --shape N=5")).code == 2);
    // find_kernel_pairs reads ptx/ only, not ptx/lessons: check over ptx/ is unchanged.
    for (const auto& p : find_kernel_pairs(KernelDirs::from_environment())) {
        CAPTURE(p.ptx_path);
        CHECK(p.ptx_path.find("/lessons/") == std::string::npos);  // not the checkout's own path (a worktree may be named so)
        CHECK(p.stem.find("_") != 2);  // no "01_..." lesson stems
    }
}

TEST_CASE("contract: the evaluator says when a value overflows 64-bit integers, never wraps it") {
    const ShapeVars big{{"N", int64_t(1) << 31}};
    CHECK_THROWS_WITH_AS(eval_expr("N * N * N", big), doctest::Contains("overflows 64-bit integers"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("N * N * 2 + N * N * 2", big), doctest::Contains("overflows 64-bit integers"),
                         InputError);
    // 1/2 + 2^62 = (2^63 + 1) / 2: the subtraction negates -2^63, which used to wrap to a negative value.
    CHECK_THROWS_WITH_AS(eval_expr("1 / 2 - -(2147483648 * 2147483648)", {}),
                         doctest::Contains("overflows 64-bit integers"), InputError);
    CHECK(eval_expr("1 / 2 - -(2147483648 * 1073741824)", {}).num == (int64_t(1) << 62) + 1);
    CHECK_THROWS_WITH_AS(eval_expr("1e-19", {}), doctest::Contains("overflows 64-bit integers"), InputError);
    CHECK_THROWS_WITH_AS(eval_expr("1234567890123456789", {}), doctest::Contains("more than 18 digits is too large"),
                         InputError);
    // eval_whole names the value, the shape and where its range comes from.
    CHECK_THROWS_WITH_AS(eval_whole("N * 4294967296", {{"N", 1000}}, "parameter 'n'", 0, UINT32_MAX, "out of u32 range"),
                         doctest::Contains("parameter 'n' = `N * 4294967296` is 4294967296000 at N=1000, outside [0, "
                                           "4294967295] (out of u32 range)"),
                         InputError);
    CHECK_THROWS_WITH_AS(eval_whole("N * N * N", big, "the length of 'x'", 1, 100),
                         doctest::Contains("the length of 'x' = `N * N * N`: overflows 64-bit integers (a value past "
                                           "2^63) at N=2147483648"),
                         InputError);
}

TEST_CASE("contract: check_contract_values evaluates every key at every shape and reports at the key's line") {
    TempDir t;
    const std::string good = new_kernel(t, "mine");
    ContractParse ok = parse_text(good);
    REQUIRE(ok.contract);
    CHECK(check_contract_values(*ok.contract).empty());
    struct Case {
        const char* from;
        const char* to;
        const char* at;       // a piece of the line the error must name
        const char* message;  // a piece of the message
    };
    const Case cases[] = {
        {"//   block    256", "//   block    2048", "block    2048",
         "block.x = `2048` is 2048 at N=1000, outside [1, 1024] (a block has at most 1024 threads)"},
        {"//   block    256", "//   block    1024, 1, 2", "block    1024, 1, 2",
         "block 1024x1x2 has 2048 threads at N=1000; a block has at most 1024 threads"},
        {"//   block    256", "//   block    1, 1, 65", "block    1, 1, 65", "(block.z takes at most 64)"},
        // Only the third shape (N=100003) is past the limit: every shape is evaluated.
        {"//   block    256", "//   block    min(N, 2048)", "min(N, 2048)", "is 2048 at N=100003, outside [1, 1024]"},
        {"//   grid     ceil(N / 256)", "//   grid     N / 256", "grid     N / 256",
         "grid.x = `N / 256` is 125/32, not a whole number at N=1000; write ceil(N / 256) or floor(N / 256)"},
        {"//   grid     ceil(N / 256)", "//   grid     N * 4294967296", "grid     N * 4294967296",
         "outside [1, 2147483647] (grid.x takes at most 2^31 - 1)"},
        {"//   grid     ceil(N / 256)", "//   grid     1, 70000, 1", "grid     1, 70000",
         "grid.y = `70000` is 70000 at N=1000, outside [1, 65535] (grid.y and grid.z take at most 65535)"},
        {"//   grid     ceil(N / 256)", "//   grid     1, 1, N", "grid     1, 1, N", "grid.z = `N` is 100003 at N=100003"},
        {"//   block    256\n", "//   block    256\n//   shared   300000\n", "shared   300000",
         "shared = `300000` is 300000 at N=1000, outside [0, 232448] (227 KiB: the most dynamic shared memory any GPU"},
        {"y  out  f32[N]", "y  out  f32[N*N*N*N*N]", "f32[N*N*N*N*N]",
         "the length of 'y' = `N*N*N*N*N` is 1000000000000000 at N=1000, outside [1, 4294967296] (overflows the 2^32 "
         "elements a buffer may have)"},
        {"y  out  f32[N]", "y  out  f32[N*N*N*N*N*N*N]", "f32[N*N*N*N*N*N*N]",
         "the length of 'y' = `N*N*N*N*N*N*N`: overflows 64-bit integers (a value past 2^63) at N=1000"},
        {"n  u32 = N", "n  u32 = N*4294967296", "n  u32 = N*4294967296", "(out of u32 range)"},
        {"n  u32 = N", "n  u32 = N - 2", "n  u32 = N - 2", "parameter 'n' = `N - 2` is -1 at N=1, outside [0, 4294967295]"},
        {"n  u32 = N", "n  s32 = N*4294967296", "n  s32 = N*4294967296", "outside [-2147483648, 2147483647] (out of s32 range)"},
        {"n  u32 = N", "n  u32 = N / 2", "n  u32 = N / 2", "not a whole number at N=1; write ceil(N / 2)"},
        {"//   bytes    8 * N", "//   bytes    8 - N", "bytes    8 - N", "bytes = `8 - N` is -992 at N=1000: a count of bytes"},
        {"//   flops    2 * N", "//   flops    N*N*N*N*N*N*N", "flops    N*N*N*N*N*N*N", "flops = `N*N*N*N*N*N*N`: overflows 64-bit"},
    };
    for (const Case& c : cases) {
        const std::string to = c.to;
        CAPTURE(to);
        const std::string bad = replace(good, c.from, c.to);
        ContractParse cp = parse_text(bad);
        REQUIRE(cp.problems.empty());
        REQUIRE(cp.contract);
        const auto problems = check_contract_values(*cp.contract);
        REQUIRE(problems.size() == 1);
        CAPTURE(problems[0].message);
        CHECK(problems[0].line == line_of(bad, c.at));
        CHECK(problems[0].severity == "error");
        CHECK(problems[0].message.find(c.message) != std::string::npos);
    }
    // Several keys wrong: one error each, in line order. At a --shape instead of the contract's.
    const std::string two = replace(replace(good, "//   block    256", "//   block    2048"), "n  u32 = N", "n  u32 = N - 5");
    ContractParse cp = parse_text(two);
    REQUIRE(cp.contract);
    auto problems = check_contract_values(*cp.contract);
    REQUIRE(problems.size() == 2);
    CHECK(problems[0].line == line_of(two, "n  u32 = N - 5"));
    CHECK(problems[1].line == line_of(two, "block    2048"));
    problems = check_contract_values(*cp.contract, {parse_shape("N=5000", *cp.contract, "--shape")});
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].message.find("is 2048 at N=5000") != std::string::npos);
    // A shape value too large to be a size says so.
    CHECK_THROWS_WITH_AS(parse_shape("N=99999999999", *cp.contract, "--shape"),
                         doctest::Contains("--shape: N=99999999999 is too large, outside 1 .. 2^31"), InputError);
    CHECK_THROWS_WITH_AS(parse_shape("N=2147483649", *cp.contract, "--shape"), doctest::Contains("is too large"), InputError);
    CHECK(parse_shape("N=2147483648", *cp.contract, "--shape").at("N") == 2147483648);
    CHECK(parse_shape("N=0000000000007", *cp.contract, "--shape").at("N") == 7);
    CHECK_THROWS_WITH_AS(parse_shape("N=" + std::string(5000, '9'), *cp.contract, "--shape"),
                         doctest::Contains("N=99999999999999999999... (5000 digits) is too large"), InputError);
    const ContractParse shape_line = parse_text(replace(good, "shape    N=1\n", "shape    N=99999999999\n"));
    REQUIRE(shape_line.problems.size() == 1);
    CHECK(shape_line.problems[0].message.find("is too large") != std::string::npos);
}

TEST_CASE("contract: a 1 MB why line is read quickly, and other contract lines are limited") {
    TempDir t;
    const std::string good = new_kernel(t, "mine");
    const std::string why(1 << 20, 'w');
    const std::string text = replace(good, "//   compare  bitwise", "//   compare  ulp 2\n//   why      " + why);
    const auto t0 = std::chrono::steady_clock::now();
    ContractParse cp = parse_text(text);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    REQUIRE(cp.problems.empty());
    REQUIRE(cp.contract);
    CHECK(cp.contract->why == why);
    CHECK(s < 5.0);  // linear: well under a second; std::regex crashed at 50 KB
    // Any other key: at most kMaxContractLineChars characters, an error at its line.
    const std::string grid = "//   grid     " + std::string(kMaxContractLineChars, '1');
    const std::string bad = replace(good, "//   grid     ceil(N / 256)", grid);
    const auto problems = parse_text(bad).problems;
    REQUIRE(problems.size() >= 1);
    CHECK(problems[0].line == line_of(bad, "//   grid     1"));
    CHECK(problems[0].message == fmt::format("a `grid` line of {} characters; ptxlab takes contract lines of at most {} "
                                             "(only `why` lines may be longer)",
                                             grid.size(), kMaxContractLineChars));
    // At the limit the line is read (and its value judged as any other).
    const std::string at_limit = "//   shared   " + std::string(kMaxContractLineChars - 15, ' ') + "0";
    REQUIRE(at_limit.size() == kMaxContractLineChars);
    ContractParse edge = parse_text(replace(good, "//   block    256\n", "//   block    256\n" + at_limit + "\n"));
    CHECK(edge.problems.empty());
    // The header's forms, read by hand now: params with and without spaces around `=`, a length
    // with brackets inside, names that are not identifiers.
    ContractParse forms = parse_text(replace(replace(good, "n  u32 = N", "n u32=N"), "x  in   f32[N]   -1 .. 1",
                                             "x  in   f32 [min(N, N)]-1 .. 1"));
    REQUIRE(forms.problems.empty());
    CHECK(forms.contract->params[2].value == "N");
    CHECK(forms.contract->params[1].length == "min(N, N)");
    CHECK(forms.contract->params[1].lo == -1.0);
    const auto not_name = all_problems(replace(good, "//   vars     N", "//   vars     N 9x"));
    REQUIRE(!not_name.empty());
    CHECK(not_name[0].message.find("variable '9x' is not a name") != std::string::npos);
    const auto bad_param = all_problems(replace(good, "n  u32 = N", "9n u32 = N"));
    REQUIRE(!bad_param.empty());
    CHECK(bad_param[0].message.find("param `9n u32 = N`: write") != std::string::npos);
}

TEST_CASE("lint: the wrong-width load is found by plain scanning, whatever the spacing") {
    // 200 000 spaces before the comma overflowed std::regex's stack (a crash of `check`).
    const std::string ptx = ".version 8.0\n.target sm_80\n.address_size 64\n"
                            ".visible .entry k(.param .u64 p, .param .u32 n)\n{\n"
                            "    .reg .u64 %a;\n    .reg .u32 %c;\n"
                            "    ld.param.u64 %a" + std::string(200000, ' ') + ",\n  [ n ];\n"
                            "    ld.param.u32 %c, [p+4];\n"          // an offset: not judged
                            "    ld.param.v2.u32 {%c, %c}, [p];\n"   // a vector: not judged
                            "    ld.param.u32 %c, [n];\n"            // right
                            "    ld.param.u32 %c, [p];\n"            // a pointer truncated
                            "    ret;\n}\n";
    const auto w = param_width_warnings(ptx, parse_ptx(ptx));
    REQUIRE(w.size() == 2);
    CHECK(w[0].line == 8);
    CHECK(w[0].message.find("ld.param.u64 reads 8 bytes of parameter 'n'") == 0);
    CHECK(w[1].line == 13);
    CHECK(w[1].message.find("keeps only part of it") != std::string::npos);
}

TEST_CASE("contract: a length written as a product names elements by their coordinates") {
    ContractParam p;
    p.name = "C";
    p.length = "M * N";
    const ShapeVars s{{"M", 5}, {"N", 512}};
    CHECK(buffer_extents(p, s) == std::vector<int64_t>{5, 512});
    CHECK(element_name("C", buffer_extents(p, s), 1553) == "C[3][17]");
    CHECK(element_name("C", buffer_extents(p, s), 0) == "C[0][0]");
    CHECK(element_name("C", buffer_extents(p, s), 5 * 512 - 1) == "C[4][511]");
    p.length = "4 * (Q + 1) * 2";  // three factors, one in parentheses
    CHECK(buffer_extents(p, {{"Q", 2}}) == std::vector<int64_t>{4, 3, 2});
    CHECK(element_name("y", buffer_extents(p, {{"Q", 2}}), 23) == "y[3][2][1]");
    for (const char* flat : {"N", "N + 1", "M * N + 4", "2 * N / 2", "(M * N)"}) {
        CAPTURE(flat);
        p.length = flat;
        CHECK(buffer_extents(p, s).empty());
    }
    CHECK(element_name("y", {}, 1553) == "y[1553]");
}
