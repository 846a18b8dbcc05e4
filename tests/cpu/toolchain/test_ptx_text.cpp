// Reading PTX as text: parameter lists, comments, diagnostics, line info.
#include "error.hpp"
#include "ptx_text.hpp"
#include "sass.hpp"

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
    CHECK(info.entries[0].signature() == "(.u64, .b8[16], .f32)");
    CHECK(info.entries[0].params[1].qualifiers == ".align 8");
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

TEST_CASE("ptx_text: an instruction written over several lines gets one .loc, before its first line") {
    // A .loc between the lines of one statement is a syntax error for the JIT.
    const std::string ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n"
                            "    .reg .u32 a,\n              b;\n    add.u32 a,\n            a, 1;\n    ret;\n}\n";
    AnnotatedPtx an = annotate_line_info(ptx, "k.ptx");
    CHECK(an.text.find(".loc 1 8 0\n    add.u32 a,\n            a, 1;") != std::string::npos);
    CHECK(an.text.find(".loc 1 9 0") == std::string::npos);
    CHECK(an.text.find(".loc 1 7 0") == std::string::npos);  // the declaration's second line
    CHECK(an.text.find(".loc 1 10 0\n    ret;") != std::string::npos);
}

TEST_CASE("ptx_text: source files that are empty, binary or missing are refused") {
    CHECK_THROWS_WITH_AS(read_source_file("/nonexistent/k.ptx"), doctest::Contains("/nonexistent/k.ptx: does not exist"),
                         InputError);
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

TEST_CASE("ptx_text: .ptr, its state space and .align are qualifiers, not part of the type") {
    // NVRTC writes pointer parameters this way for sm_100 and later; the hand-written PTX says .u64.
    PtxInfo twin = parse_ptx(".version 9.0\n.target sm_100\n.address_size 64\n"
                             ".visible .entry k(\n .param .u64 .ptr .align 1 k_p,\n"
                             " .param .u64 .ptr .global .align 16 k_q,\n .param .align 4 .b8 k_s[12],\n"
                             " .param .u32 k_n\n)\n{ ret; }\n");
    PtxInfo mine = parse_ptx(".version 8.0\n.target sm_90\n.address_size 64\n"
                             ".visible .entry k(.param .u64 k_p, .param .u64 k_q, .param .b8 k_s[12], .param .u32 k_n)\n"
                             "{ ret; }\n");
    REQUIRE(twin.entries.size() == 1);
    CHECK(twin.entries[0].signature() == "(.u64, .u64, .b8[12], .u32)");
    CHECK(twin.entries[0].signature() == mine.entries[0].signature());
    CHECK(twin.entries[0].params[0].qualifiers == ".ptr .align 1");
    CHECK(twin.entries[0].params[1].qualifiers == ".ptr .global .align 16");
    // Type, size, count and order still count.
    PtxInfo other = parse_ptx(".visible .entry k(.param .u64 k_p, .param .u64 k_q, .param .b8 k_s[16], .param .u32 k_n)"
                              "{ ret; }");
    CHECK(other.entries[0].signature() != twin.entries[0].signature());
    PtxInfo swapped = parse_ptx(".visible .entry k(.param .u32 k_n, .param .u64 .ptr .align 1 k_p)"
                                "{ ret; }");
    CHECK(swapped.entries[0].signature() == "(.u32, .u64)");
}

TEST_CASE("ptx_text: what ptxas rejects without saying where is named with the line and column") {
    const std::string header = ".version 8.0\n.target sm_90\n.address_size 64\n";
    CHECK(ptx_text_problems(header + ".visible .entry k() { ret; }\n").empty());

    // A non-ASCII character in a comment: line, column (in bytes), the code point and the character.
    auto d = ptx_text_problems(header + "// mean and \xCE\xB3 (gamma)\n.visible .entry k() { ret; }\n");
    REQUIRE(d.size() == 1);
    CHECK(d[0].line == 4);
    CHECK(d[0].column == 13);
    CHECK(d[0].message.find("U+03B3 '\xCE\xB3'") != std::string::npos);
    SourceFile src{"k.ptx", header + "// mean and \xCE\xB3 (gamma)\n"};
    std::string shown = format_diagnostic(src, d[0]);
    CHECK(shown.find("k.ptx:4:13: error: non-ASCII character U+03B3") != std::string::npos);
    CHECK(shown.find(">     4 | // mean and \xCE\xB3 (gamma)\n        |             ^\n") != std::string::npos);
    // A stray byte that is not UTF-8.
    d = ptx_text_problems(header + "ret; \xFF\n");
    REQUIRE(d.size() == 1);
    CHECK(d[0].message.find("byte 0xFF, which is not valid UTF-8") != std::string::npos);

    d = ptx_text_problems("\xEF\xBB\xBF" + header);
    REQUIRE(d.size() == 1);
    CHECK(d[0].message.find("starts with a byte-order mark (UTF-8 BOM") != std::string::npos);

    d = ptx_text_problems(".target sm_90\n.address_size 64\n// .version 8.0 in a comment does not count\n");
    REQUIRE(d.size() == 1);
    CHECK(d[0].message.find("no .version directive") != std::string::npos);

    d = ptx_text_problems(header + "// " + std::string(kMaxPtxLineBytes, 'x') + "\n");
    REQUIRE(d.size() == 1);
    CHECK(d[0].severity == "note");
    CHECK(d[0].message.find("line 4 is " + std::to_string(kMaxPtxLineBytes + 3) + " bytes long") != std::string::npos);
}

TEST_CASE("ptx_text: a huge parameter list is read in linear time") {
    // 300 000 parameters on one 6 MB line: counting lines from the start for each one took minutes.
    std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(";
    for (int i = 0; i < 300000; ++i) ptx += (i ? ", .param .u32 p" : ".param .u32 p") + std::to_string(i);
    ptx += ")\n{\n    ret;\n}\n";
    PtxInfo info = parse_ptx(ptx);
    REQUIRE(info.entries.size() == 1);
    CHECK(info.entries[0].params.size() == 300000);
    CHECK(info.entries[0].params.back().line == 4);
}

TEST_CASE("ptx_text: a token over kMaxPtxTokenChars is an error at its line and column, found before nvJitLink") {
    const std::string header = ".version 8.0\n.target sm_90\n.address_size 64\n";
    auto with = [&](const std::string& line) { return header + line + "\n.visible .entry k() { ret; }\n"; };
    const std::string big(kMaxPtxTokenChars, 'A');
    // At the limit: nothing to say.
    CHECK(ptx_limit_problems(with("mov.u32 %r1, " + big + ";")).empty());
    CHECK(ptx_text_problems(with("mov.u32 %r1, " + big + ";")).empty());
    // One past it: an error at the token's first column, with its length and the limit.
    auto d = ptx_limit_problems(with("\tmov.u32 %r1, " + big + "A;"));
    REQUIRE(d.size() == 1);
    CHECK(d[0].line == 4);
    CHECK(d[0].column == 15);
    CHECK(d[0].severity == "error");
    CHECK(d[0].message == fmt::format("a token of {} characters; ptxlab takes tokens of at most {} (nvJitLink fails on "
                                      "longer ones)",
                                      kMaxPtxTokenChars + 1, kMaxPtxTokenChars));
    const std::string shown = format_diagnostic(SourceFile{"k.ptx", with("\tmov.u32 %r1, " + big + "A;")}, d[0]);
    CHECK(shown.find("k.ptx:4:15: error: a token of 8193 characters") == 0);
    // Every kind of token: a register, a directive, an entry name, a number, a string literal
    // (counted with its quotes), an unterminated one (to the end of its line).
    CHECK(ptx_limit_problems(with(".reg .b32 %" + big + ";")).size() == 1);
    CHECK(ptx_limit_problems(with("." + big)).size() == 1);
    CHECK(ptx_limit_problems(header + ".visible .entry k" + big + "() { ret; }\n").size() == 1);
    CHECK(ptx_limit_problems(with("mov.u32 %r1, " + std::string(kMaxPtxTokenChars + 1, '7') + ";")).size() == 1);
    d = ptx_limit_problems(with(".file 1 \"" + std::string(kMaxPtxTokenChars - 1, 'p') + "\""));
    REQUIRE(d.size() == 1);
    CHECK(d[0].column == 9);
    CHECK(d[0].message.find("a token of 8193 characters") == 0);
    CHECK(ptx_limit_problems(with(".file 1 \"" + std::string(kMaxPtxTokenChars - 2, 'p') + "\"")).empty());
    CHECK(ptx_limit_problems(with(".file 1 \"" + big)).size() == 1);
    // Short tokens on a long line, separated by punctuation, are not one token.
    std::string many;
    for (int i = 0; i < 100000; ++i) many += "ret; ";
    CHECK(ptx_limit_problems(with(many)).empty());
    CHECK(ptx_limit_problems(with("add.u32 %r1, " + std::string(1 << 20, ' ') + "%r1, 1;")).empty());
    // Comments are not limited: a 5 MB // comment, a /* */ comment over lines, `//` in a string.
    CHECK(ptx_limit_problems(with("// " + std::string(5u << 20, 'x'))).empty());
    CHECK(ptx_limit_problems(with("/* " + big + "\n" + big + "A */ ret;")).empty());
    d = ptx_limit_problems(with("/* a */ \"// " + big + "\""));
    REQUIRE(d.size() == 1);
    CHECK(d[0].column == 9);
    // The same pass as the BOM and non-ASCII checks: all three, in order, the token after the character.
    d = ptx_text_problems("\xEF\xBB\xBF" + with("// \xCE\xB3\nmov.u32 %r1, " + big + "A;"));
    REQUIRE(d.size() == 3);
    CHECK(d[0].message.find("byte-order mark") != std::string::npos);
    CHECK(d[1].message.find("U+03B3") != std::string::npos);
    CHECK(d[1].line == 4);
    CHECK(d[2].line == 5);
    CHECK(d[2].column == 14);
}

TEST_CASE("ptx_text: logs that quote a long token are read by plain scanning") {
    // libstdc++'s std::regex recursed once per character: a 32 KB token quoted in the log
    // overflowed the stack. A 1 MB one is read now.
    const std::string tok(1 << 20, 'A');
    auto d = parse_ptxas_log("ptxas application ptx input, line 4; error   : Unknown symbol '" + tok + "'\r\n"
                             "nvlink error   : Undefined reference to '" + tok + "' in 'k.o'\n"
                             "ptxas fatal   : Ptx assembly aborted due to errors\n"
                             "not a line 7 diagnostic\n"
                             "warnings : not one either\n"
                             "line 99999999999; error : a line number past int\n");
    REQUIRE(d.size() == 4);
    CHECK(d[0].line == 4);
    CHECK(d[0].severity == "error");
    CHECK(d[0].message == "Unknown symbol '" + tok + "'");
    CHECK(d[1].line == 0);
    CHECK(d[1].severity == "error");
    CHECK(d[1].message == "Undefined reference to '" + tok + "' in 'k.o'");
    CHECK(d[2].severity == "fatal");
    CHECK(d[3].line == 0);
    CHECK(d[3].message == "a line number past int");
    // "line N" is remapped wherever it stands; a number outside the map is left as it was.
    const std::vector<int> map{10, 20, 30};
    CHECK(remap_log_lines("line 2; error : '" + tok + "' line 3, line 9, line x, line", map) ==
          "line 20; error : '" + tok + "' line 30, line 9, line x, line");
    CHECK(remap_log_lines("inline 1 line 99999999999", map) == "inline 10 line 99999999999");
}

TEST_CASE("ptx_text: names at the token limit stay within what sass.cpp's regexes read safely") {
    // sass.cpp still reads nvdisasm's listing with std::regex, one recursion per character of a
    // function name or file path; 8192 leaves them a margin (32 KB overflowed the stack). Under
    // ASan (tools/run.sh sanitize) this runs with its larger frames too.
    const std::string name(kMaxPtxTokenChars, 'k'), path = "/" + std::string(kMaxPtxTokenChars - 1, 'p');
    const std::string listing = "\t.section\t.text." + name + ",\"ax\",@progbits\n"
                                "        .other          " + name + ",@\"STO_CUDA_ENTRY STV_DEFAULT\"\n"
                                ".text." + name + ":\n"
                                "\t//## File \"" + path + "\", line 17\n"
                                "        /*0000*/                   LDC R1, c[0x0][0x28] ;\n";
    const auto fns = parse_nvdisasm(listing);
    REQUIRE(fns.size() == 1);
    CHECK(fns[0].name == name);
    CHECK(fns[0].entry);
    REQUIRE(fns[0].code.size() == 1);
    REQUIRE(fns[0].code[0].frames.size() == 1);
    CHECK(fns[0].code[0].frames[0].file == path);
    CHECK(fns[0].code[0].frames[0].line == 17);
}
