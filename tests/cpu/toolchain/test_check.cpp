// Offline assembly (nvJitLink) and `ptxlab check`: good PTX, broken PTX at known lines,
// parameter lists compared with the twins.
#include "../../helpers.hpp"
#include "compile.hpp"
#include "kernels.hpp"
#include "ptx_text.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace ptxlab;
using namespace ptxlab::test;

TEST_CASE("check: the fixture kernel assembles and reports its resources") {
    AssemblyResult r = assemble_offline(read_source_file(fixture("ptx/scale.ptx")), "sm_90");
    CHECK(r.ok);
    CHECK(r.diagnostics.empty());
    REQUIRE(r.entries.size() == 1);
    CHECK(r.entries[0].name == "scale");
    CHECK(r.entries[0].registers > 0);
    CHECK(r.entries[0].spill_stores == 0);
}

TEST_CASE("check: broken PTX is reported at the right line") {
    struct Case {
        const char* file;
        const char* message;
    };
    for (Case c : {Case{"ptx/syntax_error.ptx", "syntax error"},
                   Case{"ptx/undeclared_register.ptx", "Unknown symbol 'w'"},
                   Case{"ptx/wrong_operand_type.ptx", "Arguments mismatch for instruction 'fma'"}}) {
        CAPTURE(c.file);
        AssemblyResult r = assemble_offline(read_source_file(fixture(c.file)), "sm_90");
        CHECK_FALSE(r.ok);
        bool found = false;
        for (const auto& d : r.diagnostics)
            if (d.line == 33 && d.message.find(c.message) != std::string::npos) found = true;
        CHECK(found);
        // The command prints file:line: and the source line, and exits 1.
        RunResult run = run_command(ptxlab_cmd("check --no-twin " + fixture(c.file)));
        CHECK(run.code == 1);
        CHECK(run.output.find(fixture(c.file) + ":33:") != std::string::npos);
        CHECK(run.output.find(">    33 |") != std::string::npos);
    }
}

TEST_CASE("check: every kernel under ptx/ assembles and matches its twin and the host") {
    RunResult run = run_command(ptxlab_cmd("check"));
    CAPTURE(run.output);
    CHECK(run.code == 0);
    // A file in a subdirectory (hopper/densewgk: sm_90a code, not for every architecture) is
    // checked by `cpu:check: ptx/lessons and the contract fixtures` instead.
    for (const auto& spec : kernel_specs())
        if (spec.file.find('/') == std::string::npos) CHECK(run.output.find(spec.entry) != std::string::npos);
    CHECK(run.output.find("DIFFERS") == std::string::npos);
    CHECK(run.output.find("0 failed") != std::string::npos);
}

TEST_CASE("check: a parameter list that differs from the twin fails") {
    TempDir t;
    std::filesystem::create_directories(t.path / "reference");
    std::string ptx = read_source_file(KernelDirs::from_environment().ptx_dir + "/mean.ptx").text;
    // Make scale a .f64 parameter: the twin and the host pass a float.
    auto swap = [&](const std::string& from, const std::string& to) {
        auto pos = ptx.find(from);
        REQUIRE(pos != std::string::npos);
        ptx.replace(pos, from.size(), to);
    };
    swap(".param .f32 mean_scale", ".param .f64 mean_scale");
    swap("ld.param.f32    scale, [mean_scale];", "ld.param.f64    scaled, [mean_scale];\n    cvt.rn.f32.f64  scale, scaled;");
    swap(".reg .f32   scale,", ".reg .f64   scaled;\n    .reg .f32   scale,");
    write_text(t.file("mean.ptx"), ptx);
    std::filesystem::copy_file(KernelDirs::from_environment().reference_dir + "/mean.cu", t.path / "reference/mean.cu");
    RunResult run = run_command(ptxlab_cmd("check " + t.file("mean.ptx")));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("entry 'batch_mean' takes 5 parameters (.u64, .u64, .u32, .u32, .f64)") != std::string::npos);
    CHECK(run.output.find("the twin's 'batch_mean' takes 5 parameters (.u64, .u64, .u32, .u32, .f32)") !=
          std::string::npos);
    CHECK(run.output.find("but the host launches it with 5 (.u64, .u64, .u32, .u32, .f32)") != std::string::npos);
}

TEST_CASE("check: a file that does not exist, or is empty, fails with its name") {
    TempDir t;
    write_text(t.file("empty.ptx"), "");
    RunResult run = run_command(ptxlab_cmd("check --no-twin " + t.file("missing.ptx") + " " + t.file("empty.ptx")));
    CHECK(run.code == 1);
    CHECK(run.output.find("missing.ptx: error: does not exist") != std::string::npos);
    CHECK(run.output.find("empty.ptx: error: file is empty") != std::string::npos);
    CHECK(run.output.find("check: 2 files: 0 ok, 2 failed") != std::string::npos);
}

// The architectures nvJitLink accepts from sm_90 up (the files say .target sm_90: clusters).
static std::vector<std::string> check_targets() {
    std::vector<std::string> targets;
    for (const auto& arch : supported_archs())
        if (std::stoi(arch.substr(3)) >= 90) targets.push_back(arch);
    return targets;
}

// The unmodified kernels pass `check --arch A` for the targets at positions part, part + 3, ...
// Three test cases share the targets so that ctest runs them side by side: one check is a
// single-threaded process that takes about 7 s, and about 45 s under the sanitizers (6 targets
// with CUDA 13.0: one case of all of them reached its 300 s limit under ASan on two cores).
static void check_every_third_target(size_t part) {
    // NVRTC writes `.u64 .ptr .align 1` parameters for sm_100 and later; those are the same parameters.
    const auto targets = check_targets();
    for (size_t i = part; i < targets.size(); i += 3) {
        CAPTURE(targets[i]);
        RunResult run = run_command(ptxlab_cmd("check --arch " + targets[i]));
        CAPTURE(run.output);
        CHECK(run.code == 0);
        CHECK(run.output.find("DIFFERS") == std::string::npos);
        CHECK(run.output.find("error:") == std::string::npos);
        CHECK(run.output.find("0 failed (0 errors, " + targets[i] + ")") != std::string::npos);
    }
}

TEST_CASE("check: nvJitLink accepts sm_90 and at least one newer target") {
    const auto targets = check_targets();
    CHECK(std::find(targets.begin(), targets.end(), "sm_90") != targets.end());
    CHECK(targets.size() >= 2);  // sm_90 and at least one newer target (sm_100, sm_120 with CUDA 13)
}
TEST_CASE("check: the unmodified kernels pass on every architecture from sm_90 up, part 1 of 3") { check_every_third_target(0); }
TEST_CASE("check: the unmodified kernels pass on every architecture from sm_90 up, part 2 of 3") { check_every_third_target(1); }
TEST_CASE("check: the unmodified kernels pass on every architecture from sm_90 up, part 3 of 3") { check_every_third_target(2); }

TEST_CASE("check: a missing twin is an error unless --no-twins says so") {
    TempDir t;
    std::filesystem::copy_file(KernelDirs::from_environment().ptx_dir + "/mean.ptx", t.file("mine.ptx"));
    RunResult run = run_command(ptxlab_cmd("check " + t.file("mine.ptx")));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("mine.ptx: error: no CUDA C twin") != std::string::npos);
    CHECK(run.output.find("--no-twins") != std::string::npos);
    CHECK(run_command(ptxlab_cmd("check --no-twins " + t.file("mine.ptx"))).code == 0);
    // A reference directory that does not exist: the variable is refused, once, by name.
    RunResult nope = run_command("PTXLAB_REFERENCE_DIR=/nonexistent " + ptxlab_cmd("check"));
    CHECK(nope.code == 2);
    CHECK(nope.output.find("PTXLAB_REFERENCE_DIR '/nonexistent' does not exist") != std::string::npos);
}

TEST_CASE("check: --ptx-dir reads the .ptx files there and the twins from the reference directory, as verify") {
    TempDir t;  // no reference/ here: the tree's twins are used
    std::filesystem::copy_file(KernelDirs::from_environment().ptx_dir + "/gather.ptx", t.file("gather.ptx"));
    RunResult run = run_command(ptxlab_cmd("check --ptx-dir " + t.path.string()));
    CAPTURE(run.output);
    CHECK(run.code == 0);
    CHECK(run.output.find("= twin") != std::string::npos);
    CHECK(run.output.find("check: 1 file: 1 ok, 0 failed") != std::string::npos);
    // With files too: refused, not silently dropped.
    RunResult both = run_command(ptxlab_cmd("check --ptx-dir " + t.path.string() + " " + t.file("gather.ptx")));
    CHECK(both.code == 2);
    CHECK(both.output.find("give one or the other") != std::string::npos);
    // A file given as the directory says so.
    RunResult file = run_command(ptxlab_cmd("check --ptx-dir " + t.file("gather.ptx")));
    CHECK(file.code == 2);
    CHECK(file.output.find("--ptx-dir '" + t.file("gather.ptx") + "' is a regular file, not a directory") !=
          std::string::npos);
}

TEST_CASE("check: a file without an .entry fails") {
    TempDir t;
    const std::string header = ".version 8.0\n.target sm_90\n.address_size 64\n";
    write_text(t.file("header.ptx"), header);
    write_text(t.file("func.ptx"), header + ".visible .func f()\n{\n    ret;\n}\n");
    RunResult run = run_command(ptxlab_cmd("check --no-twins " + t.file("header.ptx") + " " + t.file("func.ptx")));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("header.ptx: error: no .entry in this file") != std::string::npos);
    CHECK(run.output.find("func.ptx: error: no .entry in this file") != std::string::npos);
    CHECK(run.output.find(".func is a device function") != std::string::npos);
    CHECK(run.output.find("check: 2 files: 0 ok, 2 failed") != std::string::npos);
}

TEST_CASE("check: every file is checked, and diagnostics go to stderr, the report and summary to stdout") {
    const std::string files = fixture("ptx/syntax_error.ptx") + " " + fixture("ptx/scale.ptx");
    // run_command appends 2>&1: the subshell keeps each redirection its own.
    RunResult out = run_command("(" + ptxlab_cmd("check --no-twins " + files) + " 2>/dev/null)");
    CAPTURE(out.output);
    CHECK(out.code == 1);
    CHECK(out.output.find("error:") == std::string::npos);
    CHECK(out.output.find("scale.ptx: ok") != std::string::npos);
    CHECK(out.output.find("check: 2 files: 1 ok, 1 failed") != std::string::npos);
    RunResult err = run_command("(" + ptxlab_cmd("check --no-twins " + files) + " >/dev/null)");
    CHECK(err.output.find(fixture("ptx/syntax_error.ptx") + ":33: error:") != std::string::npos);
    CHECK(err.output.find("scale.ptx: ok") == std::string::npos);
}

TEST_CASE("check: --arch outside what nvJitLink accepts names the supported range") {
    RunResult run = run_command(ptxlab_cmd("check --arch sm_52"));
    CHECK(run.code == 2);
    CHECK(run.output.find("architecture 'sm_52' is not supported by this nvJitLink (" + supported_archs().front() +
                          " .. " + supported_archs().back()) != std::string::npos);
    CHECK(run.output.find("nvJitLinkCreate failed") == std::string::npos);
}

TEST_CASE("check: an assembler failure always shows nvJitLink's log or what the file lacks") {
    TempDir t;
    const std::string body = ".target sm_90\n.address_size 64\n.visible .entry k()\n{\n    ret;\n}\n";
    write_text(t.file("noversion.ptx"), body);
    write_text(t.file("bom.ptx"), "\xEF\xBB\xBF.version 8.0\n" + body);
    write_text(t.file("gamma.ptx"), ".version 8.0\n" + body + "// \xCE\xB3\n");
    RunResult run = run_command(ptxlab_cmd("check --no-twins " + t.file("noversion.ptx") + " " + t.file("bom.ptx") +
                                           " " + t.file("gamma.ptx")));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find("noversion.ptx: error: no .version directive") != std::string::npos);
    CHECK(run.output.find("bom.ptx:1:1: error: the file starts with a byte-order mark (UTF-8 BOM") != std::string::npos);
    CHECK(run.output.find("gamma.ptx:8:4: error: non-ASCII character U+03B3") != std::string::npos);
    CHECK(run.output.find("check: 3 files: 0 ok, 3 failed") != std::string::npos);
}

// step.ptx and tcstep.ptx take optimizer_update and optimizer_state from optim.ptx, linked as
// text: test_ptx_link.cpp (the declarations against the definitions, check on the pair, a missing
// or different definition).
