// Reading PTX as text: parameter lists, comments, diagnostics, line info.
#include "error.hpp"
#include "ptx_text.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

using namespace ptxlab;

TEST_CASE("ptx_text: entries and parameter lists are read, comments ignored") {
    const std::string ptx = R"(.version 8.0
.target sm_80   // the target
.address_size 64
/* .entry fake(.param .u32 x) */
.visible .entry k1(
    .param .u64 k1_p,   // a pointer
    .param .align 8 .b8 k1_s[16],
    .param .f32 k1_f
)
{ ret; }
.entry k2() { ret; }
)";
    PtxInfo info = parse_ptx(ptx);
    CHECK(info.version == "8.0");
    CHECK(info.target == "sm_80");
    CHECK(info.target_line == 2);
    REQUIRE(info.entries.size() == 2);
    CHECK(info.entries[0].name == "k1");
    CHECK(info.entries[0].line == 5);
    CHECK(info.entries[0].signature() == "(.u64, .align 8 .b8[16], .f32)");
    CHECK(info.entries[0].params[2].name == "k1_f");
    CHECK(info.entries[1].signature() == "()");
    CHECK(info.find("k2") != nullptr);
    CHECK(info.find("fake") == nullptr);
}

TEST_CASE("ptx_text: an unclosed parameter list is an error naming the entry") {
    CHECK_THROWS_WITH_AS(parse_ptx(".entry broken(.param .u32 a,\n .param .u32 b\n{ ret; }"),
                         doctest::Contains("entry 'broken' has no closing"), InputError);
}

TEST_CASE("ptx_text: ptxas diagnostics are parsed with their lines") {
    auto d = parse_ptxas_log(
        "ptxas application ptx input, line 9; error   : Unknown symbol 'f7'\n"
        "ptxas application ptx input, line 12; warning : something odd\n"
        "ptxas fatal   : Ptx assembly aborted due to errors\n");
    REQUIRE(d.size() == 3);
    CHECK(d[0].line == 9);
    CHECK(d[0].severity == "error");
    CHECK(d[0].message == "Unknown symbol 'f7'");
    CHECK(d[1].severity == "warning");
    CHECK(d[2].line == 0);
    CHECK(d[2].severity == "fatal");

    SourceFile src{"k.ptx", "a\nb\nc\nd\ne\nf\ng\nh\nbad line\nj\nk\n"};
    std::string text = format_diagnostic(src, d[0]);
    CHECK(text.find("k.ptx:9: error: Unknown symbol 'f7'") == 0);
    CHECK(text.find(">     9 | bad line") != std::string::npos);
    CHECK(text.find("      7 | g") != std::string::npos);
}

TEST_CASE("ptx_text: line info is added before instructions and maps back to the original lines") {
    const std::string ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n"
                            "    .reg .u32 a;\nL:\n    mov.u32 a, 1;   // one\n    ret;\n}\n";
    AnnotatedPtx a = annotate_line_info(ptx, "dir/k.ptx");
    CHECK(a.text.find(".file 1 \"dir/k.ptx\"") != std::string::npos);
    CHECK(a.text.find(".loc 1 8 0\n    mov.u32 a, 1;") != std::string::npos);
    CHECK(a.text.find(".loc 1 9 0\n    ret;") != std::string::npos);
    CHECK(a.text.find(".loc 1 6 0") == std::string::npos);  // declarations get none
    CHECK(a.text.find(".loc 1 7 0") == std::string::npos);  // labels get none
    // Every annotated line maps to an original line; the log is rewritten with them.
    size_t mov_line = 0, n = 0;
    for (size_t i = 0; i < a.text.size(); ++i)
        if (a.text[i] == '\n') {
            ++n;
            if (a.text.compare(i + 1, 12, "    mov.u32 ") == 0) mov_line = n + 1;
        }
    REQUIRE(mov_line > 0);
    CHECK(a.line_map[mov_line - 1] == 8);
    CHECK(remap_log_lines(fmt::format("ptx input, line {}; error : x", mov_line), a.line_map) ==
          "ptx input, line 8; error : x");
}

TEST_CASE("ptx_text: source files that are empty, binary or missing are refused") {
    CHECK_THROWS_WITH_AS(read_source_file("/nonexistent/k.ptx"), doctest::Contains("cannot open"), InputError);
    char tmpl[] = "/tmp/ptxlab-src-XXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    close(fd);
    { std::ofstream(tmpl) << "  \n\t\n"; }
    CHECK_THROWS_WITH_AS(read_source_file(tmpl), doctest::Contains("file is empty"), InputError);
    { std::ofstream(tmpl, std::ios::binary) << std::string("\x7f" "ELF\x02\x01\x01\x00\x00", 9); }
    CHECK_THROWS_WITH_AS(read_source_file(tmpl), doctest::Contains("binary data"), InputError);
    std::remove(tmpl);
}
