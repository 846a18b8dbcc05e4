// PTX files that share a function. A file may declare `.extern .func NAME(...)` and call it; the
// `.ptx` file beside it that defines `.visible .func NAME(...) { ... }` supplies it (ptx/step.ptx
// and ptx/tcstep.ptx take optimizer_update and optimizer_state from ptx/optim.ptx: one copy).
//
// ptxlab links such files as text, before the assembler: each declaration's `.extern` becomes
// `.visible` (a forward declaration, on the same line) and the definition's lines are appended,
// so the driver's JIT, nvJitLink (check, sass, profile) and every line of the file see one
// module, assembled whole. An object-level link (each file assembled on its own, ptxas -c, then
// nvlink or cuLink) makes every call go through the ABI with a callee the assembler cannot see:
// measured with CUDA 13.0's ptxas for sm_90, fused_step went from 172 registers and no stack
// frame to 208 and 16 bytes, tc_step from 172 to 255, 24 bytes and a spill; linked as text,
// both stay at 172 and no frame.
#pragma once

#include "ptx_text.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace ptxlab {

// One `.func` of a PTX text, declared or defined.
struct PtxFunc {
    std::string name;
    std::string linkage;    // ".extern", ".visible", ".weak" or "" (file-local)
    std::string signature;  // the types without the names: "(.param .align 16 .b8 [16]) (.reg .f32, .reg .u32)"
    int line = 0;           // the line of `.func`
    size_t begin = 0;       // offset of the linkage directive (or of `.func`)
    size_t end = 0;         // offset past the declaration's `;` or the body's `}`
    bool defined = false;   // has a body
};

// Every `.func` of a text (comments ignored), in order. Tolerant, as parse_ptx: a head it cannot
// read is skipped and left to the assembler.
std::vector<PtxFunc> ptx_functions(std::string_view text);

// A function appended to a linked text: its file, where its lines sit in the text and in the file.
struct LinkedPiece {
    SourceFile file;
    std::string function;
    int first_line = 0;  // its first line in the linked text
    int file_line = 0;   // the same line in `file`
    int lines = 0;
};

struct LinkedPtx {
    std::string text;                  // the text to assemble (the file's own when it declares nothing)
    int own_lines = 0;                 // lines 1..own_lines of `text` are the file's own lines
    std::vector<LinkedPiece> pieces;   // the definitions appended, in order
    std::vector<Diagnostic> problems;  // at the declaration's line: no definition, two, another signature
    std::vector<std::string> files() const;  // the files linked in, each once
    std::vector<LineSpan> spans() const;     // the pieces for annotate_line_info
};

// Links `src` with the definitions of its `.extern .func` declarations, found among the `.ptx`
// files of `dir` (src's own directory when empty; src's own file name is skipped). A declaration
// of a function the driver provides (vprintf, malloc, free, __assertfail) is left as it is. What
// cannot be linked is a problem at the declaration's line, naming the files.
LinkedPtx link_ptx(const SourceFile& src, const std::string& dir = "");

// The assembler's diagnostics of a linked text (lines of `text`), each where it belongs: a line of
// the file's own stays; a line of an appended function becomes a diagnostic without a line whose
// message names the function and quotes its file's line ("ptx/optim.ptx:350: error: ...").
std::vector<Diagnostic> attribute_diagnostics(const LinkedPtx& linked, std::vector<Diagnostic> diags);

}  // namespace ptxlab
