// Reading PTX as text: files, entry points and their parameter lists, the
// .version/.target header, ptxas diagnostics, and line info for the JIT.
// None of this needs a GPU.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ptxlab {

// A PTX (or CUDA C) source file read into memory.
struct SourceFile {
    std::string path;  // as given, used in messages
    std::string text;
};

// Reads a text file; refuses missing, unreadable, empty and binary files with a clear InputError.
SourceFile read_source_file(const std::string& path);

struct PtxParam {
    // What the comparisons look at: the type and, for arrays, the size: ".u64", ".f32", ".b8[16]".
    // Qualifiers that do not change what the host passes (".ptr", its state space, ".align N")
    // are left out here and kept in `qualifiers`: NVRTC writes `.u64 .ptr .align 1` for newer targets.
    std::string type;
    std::string qualifiers;  // e.g. ".ptr .global .align 1"; "" when none
    std::string name;
    int line = 0;
};

struct PtxEntry {
    std::string name;
    std::vector<PtxParam> params;
    int line = 0;
    std::string signature() const;  // "(.u64, .u64, .u32)"
};

struct PtxInfo {
    std::string version, target;  // e.g. "8.0", "sm_80"
    int version_line = 0, target_line = 0;
    std::vector<PtxEntry> entries;
    const PtxEntry* find(std::string_view name) const;
};

// Finds .version, .target and every .entry with its parameters. Tolerant: it
// reads what it can and leaves syntax checking to ptxas. Throws InputError only
// when an .entry's parameter list cannot be read (no closing parenthesis).
PtxInfo parse_ptx(std::string_view text);

// Replaces comments by spaces, keeping every newline, so positions stay valid.
std::string strip_comments(std::string_view text);

// One diagnostic from a ptxas log ("ptxas application ptx input, line 9; error : ...").
struct Diagnostic {
    int line = 0;  // 1-based, 0 when the log names no line
    std::string severity;  // "error", "warning", "fatal", "info"
    std::string message;
    int column = 0;  // 1-based, 0 when unknown; with a column the source line gets a caret under it
};
std::vector<Diagnostic> parse_ptxas_log(std::string_view log);

// What in a PTX text makes ptxas reject it although its log may not say so: a UTF-8 byte-order
// mark, a non-ASCII character (file:line:column, the character named as U+XXXX), a token over
// kMaxPtxTokenChars (file:line:column), no .version directive (errors), a very long line (a
// note). Empty for a plain PTX file. One pass over the text finds the first of each.
std::vector<Diagnostic> ptx_text_problems(std::string_view text);

// What ptxlab refuses before nvJitLink or the driver's JIT sees the text, because they would
// crash on it: today a token over kMaxPtxTokenChars (an error at its line and column). Empty
// for a text they can be given. The same pass as ptx_text_problems.
std::vector<Diagnostic> ptx_limit_problems(std::string_view text);
// The message for them: each formatted (format_diagnostic: file:line:column, the source line).
std::string format_limit_problems(const SourceFile& src, const std::vector<Diagnostic>& problems);

// Lines longer than this get a note from ptx_text_problems when a file fails to assemble.
inline constexpr size_t kMaxPtxLineBytes = 1u << 16;

// The longest token ptxlab passes on: an identifier, directive, register, number (a run of
// letters, digits and _ $ % .) or string literal ("..." with its quotes). nvJitLink (CUDA 13.0)
// formats each message into a 100 000-byte buffer with vsprintf: a message quoting a token of
// about 99 870 characters or more ("Unknown symbol 'A...'", "Parsing error near '...'", an entry
// name in its report) overflows it and corrupts the heap (measured: 99 869 fine, 99 932 an ASan
// heap-buffer-overflow). 8192 leaves room for messages that quote a token several times, is far
// above any real identifier, and keeps the regexes that still read nvdisasm's listings (sass.cpp)
// well inside the stack. Comments and the length of a line are not limited: ptxas takes a 5 MB
// comment line and a 1 MB line of instructions.
inline constexpr size_t kMaxPtxTokenChars = 8192;

// "path:line: severity: message" (or "path:line:column: ...") followed by the source line and its neighbours.
std::string format_diagnostic(const SourceFile& src, const Diagnostic& d, int context = 2);

// The PTX with `.file 1 "path"` and a `.loc 1 N 0` before every instruction, so
// that compute-sanitizer and profilers name lines of the original file.
// line_map[k] is the original line of annotated line k+1.
struct AnnotatedPtx {
    std::string text;
    std::vector<int> line_map;
};
AnnotatedPtx annotate_line_info(std::string_view text, const std::string& path);

// Lines of another file inside an annotated text (a function linked in, ptx_link.hpp): text lines
// first_line .. first_line + lines - 1 are that file's lines file_line, file_line + 1, ...
struct LineSpan {
    int first_line = 0, lines = 0, file_line = 0;
    std::string path;
};
// As above, each span's instructions with `.file K "span path"` and `.loc K N 0` (K = 2, 3, ...,
// one a file). line_map still maps to lines of `text`.
AnnotatedPtx annotate_line_info(std::string_view text, const std::string& path, const std::vector<LineSpan>& spans);

// Rewrites "line N" in a ptxas log from annotated lines to original lines.
std::string remap_log_lines(std::string_view log, const std::vector<int>& line_map);

}  // namespace ptxlab
