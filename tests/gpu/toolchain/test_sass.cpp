// `ptxlab sass` with the real nvdisasm. NEEDS nvdisasm, which the device's CUDA toolkit has
// and the CI machine lacks: this runs with the GPU tests (skipped without a GPU), not because
// sass needs a GPU. The CPU tests (tests/cpu/toolchain/test_sass.cpp) cover the same code with a
// stand-in nvdisasm and hand-made listings; this test checks that nvdisasm's real listing
// reads the same way: a tensor-core kernel gets its HMMA counted, and the SASS sits under
// the PTX lines it came from (the line info survived nvJitLink -lineinfo and nvdisasm -g).
#include "../../helpers.hpp"
#include "../common.hpp"
#include "ptx_text.hpp"

#include <doctest/doctest.h>

#include <regex>

using namespace ptxlab::test;

namespace {
std::string lesson(const std::string& name) { return std::string(PTXLAB_FIXTURES) + "/../../ptx/lessons/" + name; }
}  // namespace

TEST_CASE("sass: the real nvdisasm on lesson 10 (mma.sync TF32): an HMMA counted, SASS under its PTX line") {
    const std::string file = lesson("10_mma_tf32.ptx");
    RunResult r = run_command("env -u PTXLAB_NVDISASM " + ptxlab_cmd("sass " + file));
    CAPTURE(r.output);
    REQUIRE_MESSAGE(r.code == 0, "ptxlab sass needs nvdisasm (the device's CUDA toolkit)");
    // The summary counts at least one HMMA (mma.sync.m16n8k8 TF32 is HMMA.1688.F32.TF32 on sm_90).
    std::smatch m;
    REQUIRE(std::regex_search(r.output, m, std::regex(R"(HMMA (\d+))")));
    CHECK(std::stoi(m[1].str()) >= 1);
    CHECK(r.output.find("summary of mma_tf32:") != std::string::npos);
    CHECK(std::regex_search(r.output, std::regex(R"(registers [1-9]\d*, barriers)")));
    // Line mapping: the mma.sync line of the file heads an HMMA instruction.
    CHECK(std::regex_search(r.output, std::regex(R"(\n +\d+ \| mma\.sync\.aligned\.m16n8k8[^\n]*\n( +/\*[0-9a-f]+\*/  [^\n]*\n)*? +/\*[0-9a-f]+\*/  HMMA)")));
    // Nearly every instruction has a line of the file (no "(no line info)" headings but maybe the first).
    std::regex no_info(R"(\? \| \(no line info\))");
    CHECK(std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), no_info), std::sregex_iterator()) <= 1);

    // --diff of the file with itself: the same opcodes.
    RunResult d = run_command("env -u PTXLAB_NVDISASM " + ptxlab_cmd("sass " + file + " --diff " + file));
    CAPTURE(d.output);
    CHECK(d.code == 0);
    CHECK(d.output.find("the opcodes are the same") != std::string::npos);
}

TEST_CASE("sass: --diff of a one-line change inside a called .func shows it under that .func") {
    // ptx/forward.ptx's activation helpers are .func that forward2 and forward3 call (CALL in
    // their SASS): change one fma.rn.f32 there into a mul.rn.f32. The entries' own SASS stays
    // the same; the function's counts lose an FFMA and gain an FMUL.
    const std::string src = ptxlab::read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/forward.ptx").text;
    const std::string right = "fma.rn.f32      t, az, 0f3E6D3389, 0f3F800000;";
    const size_t at = src.find(right);
    REQUIRE(at != std::string::npos);
    std::string changed = src;
    changed.replace(at, right.size(), "mul.rn.f32      t, az, 0f3E6D3389;");
    TempDir t;
    write_text(t.file("forward.ptx"), changed);
    RunResult d = run_command("env -u PTXLAB_NVDISASM " +
                              ptxlab_cmd("sass " + std::string(PTXLAB_SOURCE_DIR) + "/ptx/forward.ptx --diff " +
                                         t.file("forward.ptx")));
    CAPTURE(d.output);
    REQUIRE(d.code == 0);
    CHECK(d.output.find(".entry forward2: A =") != std::string::npos);
    std::smatch m;
    REQUIRE(std::regex_search(d.output, m, std::regex(R"(\n\.func ([A-Za-z_0-9$.]+): A = )")));
    CHECK(std::regex_search(d.output, std::regex(R"(FFMA +\d+ +\d+ +-1\n)")));
    CHECK(std::regex_search(d.output, std::regex(R"(FMUL +\d+ +\d+ +\+1\n)")));  // "+1": B-A is signed
    CHECK(d.output.find("mul.rn.f32      t, az, 0f3E6D3389;") != std::string::npos);  // the '+' line's PTX
}

TEST_CASE("sass --control: the real nvdisasm's encodings of ptx/forward.ptx decode into control bits and stall sums") {
    const std::string file = std::string(PTXLAB_SOURCE_DIR) + "/ptx/forward.ptx";
    // The whole file: forward2's loads are in the .func it calls (dense), listed after the entries.
    RunResult r = run_command("env -u PTXLAB_NVDISASM " + ptxlab_cmd("sass --control " + file));
    CAPTURE(r.output);
    REQUIRE_MESSAGE(r.code == 0, "ptxlab sass needs nvdisasm (the device's CUDA toolkit)");
    CHECK(r.output.find("control bits (sm_90)") != std::string::npos);
    CHECK(r.output.find("(no encoding in the listing)") == std::string::npos);  // -hex gave every instruction's two words
    // An EXIT with ptxas's usual stall 5 and yield bit; an LDG that sets a write scoreboard.
    CHECK(std::regex_search(r.output, std::regex(R"(/\*[0-9a-f]+\*/  S05 Y W- R- wait [-0-5]{6} reuse [-a-d]{4}  (@!?P\d )?EXIT)")));
    CHECK(std::regex_search(r.output, std::regex(R"(/\*[0-9a-f]+\*/  S\d\d [Y-] W[0-5] R[-0-5] wait [-0-5]{6} reuse [-a-d]{4}  (@!?P\d )?LDG)")));
    CHECK(std::regex_search(r.output, std::regex(R"(total of forward2: [1-9]\d* stall cycles over [1-9]\d* instructions\n)")));
}
