// Offline assembly (nvJitLink) and `ptxlab check`: good PTX, broken PTX at known lines,
// parameter lists compared with the twins.
#include "../helpers.hpp"
#include "compile.hpp"
#include "kernels.hpp"

#include <doctest/doctest.h>

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
    for (const auto& spec : kernel_specs()) CHECK(run.output.find(spec.entry) != std::string::npos);
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
    CHECK(run.output.find("missing.ptx: cannot open file") != std::string::npos);
    CHECK(run.output.find("empty.ptx: file is empty") != std::string::npos);
}
