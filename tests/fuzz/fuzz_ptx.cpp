// libFuzzer target: everything ptxlab reads from PTX text without a GPU.
//
// The entry/parameter-list parser and the check of each entry against the host's
// launch signature, comment stripping, line annotation for the JIT, the text checks
// (BOM, non-ASCII, the token limit), the wrong-width ld.param warning, and ptxas log
// parsing with the diagnostics it prints. The input is used both as PTX and as a
// ptxas log. Each must return or throw ptxlab::InputError; a crash, a sanitizer
// report or an invariant below failing is a bug. Nothing here uses std::regex:
// inputs up to 64 KiB, long enough for a token over the limit.
//
//   tests/fuzz/run.sh ptx 60        (builds with clang, runs 60 s on tests/fuzz/corpus/ptx)
#include "error.hpp"
#include "kernels.hpp"
#include "ptx_lint.hpp"
#include "ptx_text.hpp"

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

static void require(bool ok) {
    if (!ok) std::abort();
}

static size_t count_newlines(std::string_view s) {
    size_t n = 0;
    for (char c : s) n += c == '\n';
    return n;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);

    // Comments become spaces; the length and every newline stay where they were.
    const std::string stripped = ptxlab::strip_comments(text);
    require(stripped.size() == text.size());
    require(count_newlines(stripped) == count_newlines(text));

    try {
        ptxlab::PtxInfo info = ptxlab::parse_ptx(text);
        const int lines = int(count_newlines(text)) + 1;
        for (const auto& e : info.entries) {
            require(e.line >= 1 && e.line <= lines);
            for (const auto& p : e.params) require(p.line >= 1 && p.line <= lines);
            (void)e.signature();
        }
        for (const char* stem : {"forward", "grad", "mean", "optim", "gather", "fused"})
            (void)ptxlab::check_against_specs(info, "fuzz.ptx", stem);
        for (const auto& d : ptxlab::param_width_warnings(text, info)) require(d.line >= 1 && d.line <= lines);
    } catch (const ptxlab::InputError&) {
    }

    // The text checks: every problem at a line of the text (0: none), a column only with a line;
    // the limit problems are among them, and say no when no token is longer than the limit.
    {
        const int lines = int(count_newlines(text)) + 1;
        const auto problems = ptxlab::ptx_text_problems(text);
        for (const auto& d : problems) require(d.line >= 0 && d.line <= lines && (d.column == 0 || d.line >= 1));
        const auto limits = ptxlab::ptx_limit_problems(text);
        require(limits.size() <= 1);
        if (!limits.empty()) {
            require(std::find_if(problems.begin(), problems.end(), [&](const ptxlab::Diagnostic& d) {
                        return d.line == limits[0].line && d.column == limits[0].column;
                    }) != problems.end());
            require(text.size() > ptxlab::kMaxPtxTokenChars);
        }
    }

    // Line info for the JIT: one map entry per annotated line, each naming a real line.
    ptxlab::AnnotatedPtx ann = ptxlab::annotate_line_info(text, "fuzz.ptx");
    const int lines = int(count_newlines(text)) + 1;
    for (int l : ann.line_map) require(l >= 0 && l <= lines);

    // The same bytes as a ptxas log: parsed, remapped, and printed against the source.
    const ptxlab::SourceFile src{"fuzz.ptx", text};
    for (const auto& d : ptxlab::parse_ptxas_log(text)) (void)ptxlab::format_diagnostic(src, d);
    (void)ptxlab::remap_log_lines(text, ann.line_map);
    return 0;
}
