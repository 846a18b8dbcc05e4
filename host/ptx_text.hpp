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
// mark, a non-ASCII character (file:line:column, the character named as U+XXXX), no .version
// directive (errors), a very long line (a note). Empty for a plain PTX file.
std::vector<Diagnostic> ptx_text_problems(std::string_view text);

// Lines longer than this get a note from ptx_text_problems when a file fails to assemble.
inline constexpr size_t kMaxPtxLineBytes = 1u << 16;

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

// Rewrites "line N" in a ptxas log from annotated lines to original lines.
std::string remap_log_lines(std::string_view log, const std::vector<int>& line_map);

}  // namespace ptxlab
