// libFuzzer target: everything ptxlab reads from PTX text without a GPU.
//
// The entry/parameter-list parser and the check of each entry against the host's
// launch signature, comment stripping, line annotation for the JIT, and ptxas log
// parsing with the diagnostics it prints. The input is used both as PTX and as a
// ptxas log. Each must return or throw ptxlab::InputError; a crash, a sanitizer
// report or an invariant below failing is a bug.
//
//   tests/fuzz/run.sh ptx 60        (builds with clang, runs 60 s on tests/fuzz/corpus/ptx)
#include "error.hpp"
#include "kernels.hpp"
#include "ptx_text.hpp"

#include <cstddef>
#include <cstdint>
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
    } catch (const ptxlab::InputError&) {
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
