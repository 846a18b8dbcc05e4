// `ptxlab sass`: the parser of nvdisasm's listing, the classes and counts, the interleaving
// with the PTX lines, the --diff view, the search for nvdisasm and its absence, and the whole
// command end to end with a stand-in nvdisasm (tests/fixtures/sass/fake_nvdisasm.sh) that
// prints hand-made listings of the fixtures (no nvdisasm here; tests/gpu/toolchain/test_sass.cpp runs
// the real one on the device).
#include "../../helpers.hpp"
#include "compile.hpp"
#include "nvdisasm.hpp"
#include "process.hpp"
#include "sass.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <sys/stat.h>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

std::string read_all(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// A canned listing with its line info naming the fixture STEM.ptx, as the stand-in prints it.
std::string canned(const std::string& stem) {
    std::string s = read_all(fixture("sass/" + stem + ".sass"));
    REQUIRE(!s.empty());
    const std::string ptx = fixture("sass/" + stem + ".ptx");
    for (size_t p; (p = s.find("@PTX@")) != std::string::npos;) s.replace(p, 5, ptx);
    return s;
}

// The fixture assembled as `ptxlab sass` assembles it, and its source for the views.
struct Assembled {
    SourceFile src;
    AssemblyResult res;
    SassSource source;
};
Assembled assemble(const std::string& stem) {
    Assembled a;
    a.src = read_source_file(fixture("sass/" + stem + ".ptx"));
    a.res = assemble_offline(a.src, "sm_90", AssembleOptions{.line_info = true, .cubin = true});
    REQUIRE(a.res.ok);
    a.source = make_sass_source(a.src, a.res);
    return a;
}

std::string fake() { return fixture("sass/fake_nvdisasm.sh"); }

size_t count_of(const std::string& hay, const std::string& needle) {
    size_t n = 0;
    for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
    return n;
}

}  // namespace

TEST_CASE("sass: the listing parser reads functions, instructions, predicates and line info") {
    const auto fns = parse_nvdisasm(canned("scale"));
    REQUIRE(fns.size() == 1);
    const SassFunction& f = fns[0];
    CHECK(f.name == "scale");
    CHECK(f.entry);
    REQUIRE(f.code.size() == 32);  // 0x000 .. 0x1f0
    CHECK(f.code[0].address == 0x0);
    CHECK(f.code[31].address == 0x1f0);
    CHECK(f.code[0].opcode == "LDC");
    CHECK(f.code[0].operands == "R1, c[0x0][0x28]");
    REQUIRE(f.code[0].frames.size() == 1);
    CHECK(f.code[0].frames[0].line == 17);
    CHECK(f.code[0].frames[0].file == fixture("sass/scale.ptx"));
    // 0x60 has no comment of its own: it keeps the line above it (22).
    CHECK(f.code[6].opcode == "ISETP.GE.U32.AND");
    CHECK(f.code[6].operands == "P0, PT, R0, R5, PT");
    CHECK(f.code[6].frames.at(0).line == 22);
    CHECK(f.code[7].predicate == "@P0");
    CHECK(f.code[7].opcode == "EXIT");
    CHECK(f.code[7].text() == "@P0 EXIT");
    CHECK(f.code[15].text() == "FFMA R7, R2, R7, 1");
    CHECK(f.code[15].frames.at(0).line == 35);
    // The self-branch after the last EXIT and the NOPs are padding.
    CHECK_FALSE(f.code[17].padding);
    CHECK(f.code[18].opcode == "BRA");
    CHECK(f.code[18].label == ".L_x_0");
    for (size_t i = 18; i < 32; ++i) CHECK(f.code[i].padding);
}

TEST_CASE("sass: inlined frames, the assembled PTX's own lines, other files, -hex comments and no line info") {
    const std::string listing =
        "\t.section\t.text.k,\"ax\",@progbits\n"
        "        .other          k,@\"STO_CUDA_ENTRY STV_DEFAULT\"\n"
        ".text.k:\n"
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n"
        "\t//## File \"/abs/k.ptx\", line 9 inlined at \"/abs/k.ptx\", line 30\n"
        "\t//## File \"/abs/k.ptx\", line 30\n"
        "        /*0010*/              @!PT SHFL.IDX PT, RZ, RZ, RZ, RZ ; /* 0x000fe200000e00ff */\n"
        "\t//## File \".nv_debug_ptx_txt\", line 12\n"
        "        /*0020*/                   FADD.FTZ R2, R2, R3 ;\n"
        "\t//## File \"/elsewhere/lib.cu\", line 77\n"
        "        /*0030*/                   CALL.REL.NOINC `(f) ;\n"
        "\t.section\t.text.f,\"ax\",@progbits\n"
        ".text.f:\n"
        "        /*0000*/                   RET.REL.NODEC R20 `(k) ;\n";
    const auto fns = parse_nvdisasm(listing);
    REQUIRE(fns.size() == 2);
    CHECK(fns[0].entry);
    CHECK_FALSE(fns[1].entry);
    CHECK(fns[1].name == "f");
    const auto& c = fns[0].code;
    REQUIRE(c.size() == 4);
    CHECK(c[0].frames.empty());
    REQUIRE(c[1].frames.size() == 2);  // innermost first
    CHECK(c[1].frames[0].line == 9);
    CHECK(c[1].predicate == "@!PT");
    CHECK(c[1].opcode == "SHFL.IDX");
    CHECK(c[1].operands == "PT, RZ, RZ, RZ, RZ");  // the encoding comment is not an operand

    SassSource src;
    src.path = "k.ptx";
    src.line_info_path = "/abs/k.ptx";
    for (int i = 1; i <= 40; ++i) src.lines.push_back("line " + std::to_string(i));
    for (int i = 1; i <= 20; ++i) src.line_map.push_back(i <= 10 ? i : i - 3);  // annotated line -> user line
    CHECK(resolve_line(c[0], src).line == 0);
    SourceRef r1 = resolve_line(c[1], src);
    CHECK(r1.in_source);
    CHECK(r1.line == 9);
    SourceRef r2 = resolve_line(c[2], src);  // .nv_debug_ptx_txt line 12 -> user line 9
    CHECK(r2.in_source);
    CHECK(r2.line == 9);
    SourceRef r3 = resolve_line(c[3], src);
    CHECK_FALSE(r3.in_source);
    CHECK(r3.file == "/elsewhere/lib.cu");
    CHECK(r3.line == 77);
    const std::string out = format_listing(fns[0], src);
    CHECK(out.find("? | (no line info)") != std::string::npos);
    CHECK(out.find("9 | line 9") != std::string::npos);
    CHECK(out.find("/elsewhere/lib.cu:77 | (another file)") != std::string::npos);
    CHECK(count_of(out, "9 | line 9") == 1);  // two instructions of one line: one heading
}

TEST_CASE("sass: same_file matches normalised names and whole-component suffixes only") {
    CHECK(same_file("/a/b/k.ptx", "/a/b/k.ptx"));
    CHECK(same_file("/a/b/../b/k.ptx", "/a/b/k.ptx"));
    CHECK(same_file("b/k.ptx", "/a/b/k.ptx"));
    CHECK(same_file("/a/b/k.ptx", "k.ptx"));
    CHECK_FALSE(same_file("/a/b/xk.ptx", "k.ptx"));
    CHECK_FALSE(same_file("/a/k.ptx", "/b/k.ptx"));
    CHECK_FALSE(same_file("", "k.ptx"));
}

TEST_CASE("sass: an opcode's class is its name before the first '.'") {
    struct Case {
        const char* opcode;
        const char* cls;
    };
    for (Case c : {Case{"FFMA", "FFMA"}, Case{"FFMA.FTZ", "FFMA"}, Case{"FFMA32I", "FFMA"}, Case{"FADD.FTZ", "FADD"},
                   Case{"FMUL", "FMUL"}, Case{"HMMA.1688.F32.TF32", "HMMA"}, Case{"IMAD.WIDE.U32", "IMAD"},
                   Case{"LDG.E.128.CONSTANT", "LDG"}, Case{"STG.E", "STG"}, Case{"LDS.U.128", "LDS"},
                   Case{"STS.64", "STS"}, Case{"LDL.64", "LDL/STL"}, Case{"STL", "LDL/STL"},
                   Case{"BAR.SYNC.DEFER_BLOCKING", "BAR"}, Case{"SHFL.BFLY", "SHFL"}, Case{"MUFU.EX2", "MUFU"},
                   Case{"BRA", "BRA"}, Case{"CALL.ABS.NOINC", "CALL"}, Case{"LDSM.16.M88.4", "other"},
                   Case{"IMADX", "other"}, Case{"MOV", "other"}, Case{"BRX", "other"}, Case{"HGMMA.64x8x8", "other"}}) {
        CAPTURE(c.opcode);
        CHECK(opcode_class(c.opcode) == c.cls);
    }
    CHECK(opcode_class_names().size() == 16);
    CHECK(opcode_class_names().back() == "other");
}

TEST_CASE("sass: counts by class leave the padding out and add up") {
    const auto fns = parse_nvdisasm(canned("scale"));
    const ClassCounts c = count_classes(fns.at(0));
    CHECK(c.total == 18);
    CHECK(c.padding == 14);
    CHECK(c.by_class.at("FFMA") == 1);
    CHECK(c.by_class.at("IMAD") == 3);
    CHECK(c.by_class.at("LDG") == 1);
    CHECK(c.by_class.at("STG") == 1);
    CHECK(c.by_class.at("BRA") == 0);  // the closing self-branch is padding
    CHECK(c.by_class.at("other") == 12);
    CHECK(c.other.at("LDC") == 6);
    CHECK(c.other.at("S2R") == 2);
    CHECK(c.other.at("EXIT") == 2);
    int sum = 0;
    for (const auto& [k, v] : c.by_class) sum += v;
    CHECK(sum == c.total);
    const std::string s = format_summary(fns[0], nullptr);
    CHECK(s.find("summary of scale: 18 instructions (and 14 of padding") != std::string::npos);
    CHECK(std::regex_search(s, std::regex(R"(FFMA 1\b)")));
    CHECK(std::regex_search(s, std::regex(R"(other 12\b)")));
    CHECK(s.find("other: LDC 6, EXIT 2, S2R 2, ISETP 1, ULDC 1") != std::string::npos);
}

TEST_CASE("sass: assembling with line info keeps the diagnostics' lines and gives a cubin naming the user's lines") {
    Assembled a = assemble("scale");
    CHECK(a.res.cubin.compare(0, 4, "\x7f" "ELF") == 0);
    CHECK(std::filesystem::path(a.res.line_info_path).is_absolute());
    CHECK(same_file(a.res.line_info_path, fixture("sass/scale.ptx")));
    CHECK(a.res.line_map.size() > a.source.lines.size());  // the .file and .loc lines
    CHECK(a.res.cubin.find("scale.ptx") != std::string::npos);  // the file name in .debug_line
    // The same resources as without line info.
    AssemblyResult plain = assemble_offline(a.src, "sm_90");
    REQUIRE(plain.entries.size() == 1);
    REQUIRE(a.res.entries.size() == 1);
    CHECK(a.res.entries[0].registers == plain.entries[0].registers);
    // A syntax error is still reported at the user's line 33.
    AssemblyResult bad = assemble_offline(read_source_file(fixture("ptx/syntax_error.ptx")), "sm_90",
                                          AssembleOptions{.line_info = true, .cubin = true});
    CHECK_FALSE(bad.ok);
    CHECK(bad.cubin.empty());
    bool at33 = false;
    for (const auto& d : bad.diagnostics) at33 |= d.line == 33 && d.severity == "error";
    CHECK(at33);
    // The cubin's line table (readelf, binutils) holds lines of instructions of scale.ptx: 17 (the
    // first mov) .. 38 (ret), the fma's line 35 among them, and nothing from the annotated text.
    TempDir t;
    write_text(t.file("k.cubin"), a.res.cubin);
    RunResult r = run_command("readelf --debug-dump=decodedline " + t.file("k.cubin") + " 2>/dev/null");
    REQUIRE_MESSAGE(r.output.find("scale.ptx") != std::string::npos, "readelf (binutils) is needed: " << r.output);
    std::set<int> lines;
    std::regex row(R"(scale\.ptx\s+(\d+)\s+0x)");
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), row); it != std::sregex_iterator(); ++it)
        lines.insert(std::stoi((*it)[1].str()));
    CAPTURE(r.output);
    CHECK(lines.count(35) == 1);
    CHECK(lines.count(36) == 1);
    CHECK(*lines.begin() >= 17);
    CHECK(*lines.rbegin() <= 38);
}

TEST_CASE("sass: the listing puts each run of SASS under its PTX line") {
    Assembled a = assemble("scale");
    const auto fns = parse_nvdisasm(canned("scale"));
    const std::string out = format_listing(fns.at(0), a.source);
    CAPTURE(out);
    CHECK(out.rfind(".entry scale  (" + fixture("sass/scale.ptx") + ")\n", 0) == 0);
    // Line 35 (the fma) heads the FFMA; line 22 heads both of its instructions once.
    const size_t fma = out.find("    35 | fma.rn.f32      v, a, v, 0f3F800000;\n           /*00f0*/  FFMA R7, R2, R7, 1\n");
    CHECK(fma != std::string::npos);
    CHECK(out.find("    22 | setp.ge.u32     idle, i, n;\n           /*0050*/  LDC R5, c[0x0][0x224]\n"
                   "           /*0060*/  ISETP.GE.U32.AND P0, PT, R0, R5, PT\n") != std::string::npos);
    CHECK(count_of(out, "/*0") == 18);  // every instruction once, the padding left out
    CHECK(out.find("NOP") == std::string::npos);
}

TEST_CASE("sass: --diff puts the counts side by side and lists the opcodes that differ") {
    Assembled a = assemble("scale"), b = assemble("scale_mul");
    const auto fa = parse_nvdisasm(canned("scale")), fb = parse_nvdisasm(canned("scale_mul"));
    const std::string out = format_diff({&fa.at(0), &a.source, &a.res.entries.at(0)}, {&fb.at(0), &b.source, &b.res.entries.at(0)});
    CAPTURE(out);
    CHECK(std::regex_search(out, std::regex(R"(\n  FFMA +1 +0 +-1\n)")));
    CHECK(std::regex_search(out, std::regex(R"(\n  FMUL +0 +1 +\+1\n)")));
    CHECK(std::regex_search(out, std::regex(R"(\n  FADD +0 +1 +\+1\n)")));
    CHECK(std::regex_search(out, std::regex(R"(\n  IMAD +3 +3 +0\n)")));
    CHECK(std::regex_search(out, std::regex(R"(\n  total +18 +19 +\+1\n)")));
    CHECK(std::regex_search(out, std::regex(R"(\n  registers +\d+ +\d+ +)")));
    CHECK(out.find("(2 only in A, 3 only in B;") != std::string::npos);
    CHECK(out.find("\n  - FFMA                             A:35  fma.rn.f32      v, a, v, 0f3F800000;\n"
                   "  + FMUL                             B:34  mul.rn.f32      v, a, v;\n"
                   "  + FADD                             B:35  add.rn.f32      v, v, 0f3F800000;\n"
                   "    STG.E                            A:36  B:36\n") != std::string::npos);
    CHECK(out.find("    @P EXIT                          A:23  B:22\n") != std::string::npos);  // register-free predicate
    CHECK(out.find("R7") == std::string::npos);  // no operands
    // A version against itself: no listing, one sentence.
    const std::string same = format_diff({&fa.at(0), &a.source, nullptr}, {&fa.at(0), &a.source, nullptr});
    CHECK(same.find("the opcodes are the same, in the same order (18 instructions)") != std::string::npos);
    CHECK(same.find("registers") == std::string::npos);  // no resources given
}

TEST_CASE("sass: --diff of very long functions shows the differing middle whole") {
    auto make = [](const std::vector<std::string>& ops) {
        SassFunction f{"k", true, {}};
        for (size_t i = 0; i < ops.size(); ++i) {
            SassInstruction ins;
            ins.address = static_cast<unsigned>(16 * i);
            ins.opcode = ops[i];
            f.code.push_back(ins);
        }
        return f;
    };
    std::vector<std::string> x(3100, "FFMA"), y(3100, "FFMA");
    for (size_t i = 1; i + 1 < x.size(); ++i) {
        x[i] = i % 2 ? "FADD" : "FMUL";
        y[i] = i % 3 ? "IMAD" : "MOV";
    }
    const SassFunction fa = make(x), fb = make(y);
    SassSource src;
    src.path = "k.ptx";
    const std::string out = format_diff({&fa, &src, nullptr}, {&fb, &src, nullptr}, 1);
    CHECK(out.find("too long to align") != std::string::npos);
    CHECK(count_of(out, "\n  - ") == 3098);
    CHECK(count_of(out, "\n  + ") == 3098);
    // Short ones are aligned: one change in the middle is one '-' and one '+'.
    std::vector<std::string> z = x;
    z[50] = "HMMA.1688.F32.TF32";
    const SassFunction fz = make(z), fx = make(std::vector<std::string>(x.begin(), x.begin() + 100)),
                       fz2 = make(std::vector<std::string>(z.begin(), z.begin() + 100));
    const std::string one = format_diff({&fx, &src, nullptr}, {&fz2, &src, nullptr}, 1);
    CAPTURE(one);
    CHECK(count_of(one, "\n  - ") == 1);
    CHECK(count_of(one, "\n  + HMMA.1688.F32.TF32") == 1);
    CHECK(count_of(one, "\n    ") == 2);  // one line of context on each side
    CHECK(one.find("@@ A /*0310*/  B /*0310*/ @@") != std::string::npos);
}

TEST_CASE("sass: without nvdisasm the message names the tool, where it comes from and where ptxlab looked") {
    TempDir t;
    ToolSearch s;
    s.dirs = {{t.file("cuda/bin"), "$CUDA_HOME/bin"}, {t.path.string(), "$PATH"}};
    write_text(t.file("nvdisasm"), "not executable");  // a file that is not a program is passed over
    try {
        find_nvdisasm(s);
        FAIL("find_nvdisasm found a tool in an empty search");
    } catch (const MissingToolError& e) {
        const std::string m = e.what();
        CAPTURE(m);
        CHECK(m.find("nvdisasm not found") != std::string::npos);
        CHECK(m.find("nvdisasm, part of the CUDA toolkit: $CUDA_HOME/bin/nvdisasm") != std::string::npos);
        CHECK(m.find(t.file("cuda/bin/nvdisasm") + " ($CUDA_HOME/bin)") != std::string::npos);
        CHECK(m.find(t.file("nvdisasm") + " ($PATH)") != std::string::npos);
        CHECK(m.find("PTXLAB_NVDISASM") != std::string::npos);
    }
    // An executable one is found, the first in order.
    std::filesystem::create_directories(t.file("cuda/bin"));
    write_text(t.file("cuda/bin/nvdisasm"), "#!/bin/sh\n");
    chmod(t.file("cuda/bin/nvdisasm").c_str(), 0755);
    CHECK(find_nvdisasm(s) == t.file("cuda/bin/nvdisasm"));
    // $PTXLAB_NVDISASM is the only candidate when set.
    s.override_path = t.file("none/nvdisasm");
    const std::string expected = "PTXLAB_NVDISASM=" + t.file("none/nvdisasm") + " does not exist";
    CHECK_THROWS_WITH_AS(find_nvdisasm(s), doctest::Contains(expected.c_str()), MissingToolError);
    s.override_path = fake();
    CHECK(find_nvdisasm(s) == fake());
    CHECK(nvdisasm_options() == std::vector<std::string>{"--print-code", "--print-line-info"});
}

TEST_CASE("sass: run_process captures both streams and the status, and names a program it cannot start") {
    ProcessResult r = run_process("/bin/sh", {"-c", "echo out; echo err >&2; exit 3"});
    CHECK(r.out == "out\n");
    CHECK(r.err == "err\n");
    CHECK(r.exit_code == 3);
    CHECK_FALSE(r.ok());
    CHECK(r.status_text() == "exited with status 3");
    ProcessResult k = run_process("/bin/sh", {"-c", "kill -9 $$"});
    CHECK(k.signal == 9);
    CHECK(k.status_text().find("killed by signal 9") != std::string::npos);
    // Much output on both streams at once does not hang.
    ProcessResult big = run_process("/bin/sh", {"-c", "head -c 300000 /dev/zero | tr '\\0' a; head -c 300000 /dev/zero | tr '\\0' b >&2"});
    CHECK(big.out.size() == 300000);
    CHECK(big.err.size() == 300000);
    CHECK_THROWS_WITH_AS(run_process("/nonexistent/tool", {}), doctest::Contains("cannot start /nonexistent/tool"), Error);
}

// ---- the command, end to end, with the stand-in nvdisasm ------------------------------------------

TEST_CASE("sass: the command interleaves SASS with the PTX and sums up each entry") {
    RunResult r = run_command("PTXLAB_NVDISASM=" + fake() + " " + ptxlab_cmd("sass " + fixture("sass/scale.ptx")));
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("ptxlab sass: " + fixture("sass/scale.ptx") + " for sm_90 (nvdisasm: " + fake() + ")") !=
          std::string::npos);
    CHECK(r.output.find("    35 | fma.rn.f32      v, a, v, 0f3F800000;\n           /*00f0*/  FFMA R7, R2, R7, 1\n") !=
          std::string::npos);
    CHECK(r.output.find("summary of scale: 18 instructions") != std::string::npos);
    CHECK(std::regex_search(r.output, std::regex(R"(registers [1-9]\d*, barriers 0, stack 0 B, spill stores 0 B)")));
    CHECK(std::regex_search(r.output, std::regex(R"(FFMA 1 +FADD 0 +FMUL 0 +HMMA 0 +IMAD 3 +LDG 1 +STG 1)")));
    // FILE:ENTRY selects the entry.
    RunResult one = run_command("PTXLAB_NVDISASM=" + fake() + " " + ptxlab_cmd("sass " + fixture("sass/scale.ptx") + ":scale"));
    CHECK(one.code == 0);
    CHECK(one.output.find("summary of scale") != std::string::npos);
}

TEST_CASE("sass: the command's --diff compares two versions") {
    RunResult r = run_command("PTXLAB_NVDISASM=" + fake() + " " +
                              ptxlab_cmd("sass " + fixture("sass/scale.ptx") + " --diff " + fixture("sass/scale_mul.ptx")));
    CAPTURE(r.output);
    CHECK(r.code == 0);
    CHECK(r.output.find("ptxlab sass --diff: A = " + fixture("sass/scale.ptx") + ", B = " + fixture("sass/scale_mul.ptx")) !=
          std::string::npos);
    CHECK(std::regex_search(r.output, std::regex(R"(\n  FFMA +1 +0 +-1\n)")));
    CHECK(r.output.find("\n  - FFMA ") != std::string::npos);
    CHECK(r.output.find("\n  + FMUL ") != std::string::npos);
    CHECK(r.output.find("/*00f0*/") == std::string::npos);  // no listing, only the comparison
}

TEST_CASE("sass: bad input and a missing or failing nvdisasm get a message and a non-zero exit") {
    const std::string env = "PTXLAB_NVDISASM=" + fake() + " ";
    struct Case {
        std::string args;
        int code;
        std::string message;
    };
    for (const Case& c :
         {Case{"sass /nonexistent/k.ptx", 2, "/nonexistent/k.ptx: does not exist"},
          Case{"sass " + fixture("sass/scale.ptx") + ":nope", 2, "no entry 'nope' (its entries: scale)"},
          Case{"sass " + fixture("ptx/syntax_error.ptx"), 2, "syntax_error.ptx:33: error:"},
          Case{"sass " + fixture("sass/scale.ptx") + " --diff /nonexistent/b.ptx", 2, "/nonexistent/b.ptx: does not exist"},
          Case{"sass " + fixture("sass/scale.ptx") + ":scale --diff " + fixture("contract/forward3.ptx"), 2,
               "no entry 'scale' (its entries: forward3)"},
          Case{"sass " + fixture("sass/scale.ptx") + " --diff " + fixture("contract/forward3.ptx"), 2, "no entry in common"},
          Case{"sass " + fixture("sass/scale.ptx") + " --arch sm_52", 2, "architecture 'sm_52' is not supported"},
          Case{"sass", 2, "target is required"}}) {
        CAPTURE(c.args);
        RunResult r = run_command(env + ptxlab_cmd(c.args));
        CAPTURE(r.output);
        CHECK(r.code == c.code);
        CHECK(r.output.find(c.message) != std::string::npos);
        CHECK(r.output.find("terminate") == std::string::npos);
    }
    // nvdisasm where $PTXLAB_NVDISASM says, and it is not there.
    RunResult none = run_command("PTXLAB_NVDISASM=/nonexistent/nvdisasm " + ptxlab_cmd("sass " + fixture("sass/scale.ptx")));
    CHECK(none.code == 1);
    CHECK(none.output.find("PTXLAB_NVDISASM=/nonexistent/nvdisasm does not exist") != std::string::npos);
    CHECK(none.output.find("nvdisasm, part of the CUDA toolkit: $CUDA_HOME/bin/nvdisasm") != std::string::npos);
    // nvdisasm fails: its status and its stderr are shown.
    RunResult fails = run_command("FAKE_NVDISASM_EXIT=3 " + env + ptxlab_cmd("sass " + fixture("sass/scale.ptx")));
    CHECK(fails.code == 1);
    CHECK(fails.output.find("exited with status 3:\nfake nvdisasm: failing as asked") != std::string::npos);
    // A program that is not nvdisasm.
    RunResult echo = run_command("PTXLAB_NVDISASM=/bin/echo " + ptxlab_cmd("sass " + fixture("sass/scale.ptx")));
    CHECK(echo.code == 1);
    CHECK(echo.output.find("holds no function") != std::string::npos);
}

TEST_CASE("sass: where no nvdisasm is installed (CI), the command says so, names the tool and where it looked") {
    bool installed = true;
    try {
        ::unsetenv("PTXLAB_NVDISASM");
        find_nvdisasm(nvdisasm_search_from_environment());
    } catch (const MissingToolError&) {
        installed = false;
    }
    if (installed) {
        MESSAGE("nvdisasm is installed here: the message is checked with an injected search above");
        return;
    }
    RunResult r = run_command("env -u PTXLAB_NVDISASM " + ptxlab_cmd("sass " + fixture("sass/scale.ptx")));
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("ptxlab: error: nvdisasm not found. `ptxlab sass` needs nvdisasm, part of the CUDA toolkit: "
                        "$CUDA_HOME/bin/nvdisasm") != std::string::npos);
    CHECK(r.output.find("/usr/local/cuda/bin/nvdisasm") != std::string::npos);
    CHECK(r.output.find("Looked for:") != std::string::npos);
}

TEST_CASE("sass: --help explains the command") {
    RunResult r = run_command(ptxlab_cmd("sass --help"));
    CHECK(r.code == 0);
    for (const char* s : {"nvdisasm", "--diff", "--arch", "FILE.ptx:ENTRY", "HMMA", "PTXLAB_NVDISASM"})
        CHECK(r.output.find(s) != std::string::npos);
    RunResult top = run_command(ptxlab_cmd("--help"));
    CHECK(top.output.find("sass") != std::string::npos);
}
