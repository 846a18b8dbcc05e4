// Reading nvdisasm's listing of a cubin: the SASS instructions of each function with the
// source lines they came from (`nvdisasm --print-code --print-line-info`), their counts by
// class, and the two views of `ptxlab sass`: the listing interleaved with the PTX lines, and
// the comparison of two versions of a kernel (--diff). Text in, text out: no GPU, no nvdisasm.
//
// The listing's format (CUDA Binary Utilities, nvdisasm): per function a section
//     .section  .text.NAME,"ax",@progbits        (and the label `.text.NAME:`)
//     .other    NAME,@"STO_CUDA_ENTRY STV_DEFAULT"   (a kernel, not a device function)
// then instructions, labels and, with line info, comments naming the source line of the
// instructions that follow, printed when it changes:
//     //## File "/abs/k.ptx", line 14                     (-g)
//     //## File "/abs/k.ptx", line 9 inlined at "/abs/k.ptx", line 30   (-gi, innermost first)
//     //## File ".nv_debug_ptx_txt", line 52              (-gp: a line of the PTX as assembled)
//         /*0040*/               @P0 FFMA.FTZ R4, R2, R3, R4 ;
//     .L_x_0:
#pragma once

#include "compile.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlab {

struct SassFrame {
    std::string file;
    int line = 0;
};

struct SassInstruction {
    unsigned address = 0;
    std::string predicate;  // "@P0", "@!PT", or ""
    std::string opcode;     // with its modifiers: "FFMA.FTZ", "LDG.E.128"
    std::string operands;   // "R4, R2, R3, R4" (no ';')
    std::vector<SassFrame> frames;  // the line-info frames in force, innermost first; empty: none
    std::string label;              // the label just before it (".L_x_3"), or ""
    bool padding = false;           // the closing self-branch and NOPs after the code (not counted)
    int encoding_words = 0;         // how many words of the encoding nvdisasm printed (-hex): 0, 1 or 2
    uint64_t encoding[2] = {0, 0};  // its 128 bits as nvdisasm prints them (-hex): low word, high word
    std::string text() const;       // "@P0 FFMA.FTZ R4, R2, R3, R4"
};

struct SassFunction {
    std::string name;
    bool entry = false;  // a kernel (.entry), from STO_CUDA_ENTRY
    std::vector<SassInstruction> code;
};

// Parses nvdisasm's listing (with -hex, each instruction's encoding too: the low word after its
// ';', the high word alone on the next line); tolerant of lines it does not know (directives, other sections).
std::vector<SassFunction> parse_nvdisasm(std::string_view listing);

// The class of an opcode: its name before the first '.' when that is one of FFMA, FADD,
// FMUL, HMMA, IMAD, LDG, STG, LDS, STS, BAR, SHFL, MUFU, BRA, CALL (a 32I immediate form
// counts as its base: FFMA32I is FFMA), "LDL/STL" for LDL and STL, else "other".
std::string opcode_class(std::string_view opcode);
const std::vector<std::string>& opcode_class_names();  // in the order shown, "other" last

struct ClassCounts {
    std::map<std::string, int> by_class;  // every name of opcode_class_names(), zeros included
    std::map<std::string, int> other;     // the "other" instructions by base opcode (MOV, ISETP, ...)
    int total = 0;                        // instructions counted (padding excluded)
    int padding = 0;
};
ClassCounts count_classes(const SassFunction& f);

// The PTX a listing came from: what the user named and what the assembler saw.
struct SassSource {
    std::string path;                // as given, shown in the output
    std::string line_info_path;      // the `.file` name written for the assembler (absolute)
    std::vector<std::string> lines;  // the user's file, line k at [k - 1]
    std::vector<int> line_map;       // line k of the assembled text came from user line line_map[k - 1]
};
SassSource make_sass_source(const SourceFile& src, const AssemblyResult& res);

// Where an instruction came from: a line of the source (in_source), a line of another file, or nothing (line 0).
struct SourceRef {
    std::string file;
    int line = 0;
    bool in_source = false;
};
SourceRef resolve_line(const SassInstruction& ins, const SassSource& src);

// "35" (a line of the source), "lib.cu:77" (another file's), "?" (none); and the text of that line.
std::string source_ref_text(const SourceRef& r);
std::string source_line_text(const SourceRef& r, const SassSource& src);

// Whether two file names from a listing and the command line name the same file (equal once
// normalised, or one a whole-component suffix of the other: "k.ptx" and "/x/k.ptx").
bool same_file(std::string_view a, std::string_view b);

// The SASS of `f`, each run of instructions under the source line it came from. `preamble` goes
// under the header line; `column` (if given) adds a column before each instruction's text
// (sass --control: its control bits).
std::string format_listing(const SassFunction& f, const SassSource& src, const std::string& preamble = "",
                           const std::function<std::string(const SassInstruction&)>& column = nullptr);

// Registers, stack, spills, shared memory (from the assembler's log; `r` may be null) and the
// instruction counts by class.
std::string format_summary(const SassFunction& f, const EntryResources* r);

// One side of a comparison.
struct SassVersion {
    const SassFunction* function = nullptr;
    const SassSource* source = nullptr;
    const EntryResources* resources = nullptr;  // may be null
};
// The counts by class side by side with the difference, then a unified listing of the
// opcodes (predicates without their register, no operands or addresses), each with its PTX line.
std::string format_diff(const SassVersion& a, const SassVersion& b, int context = 3);

}  // namespace ptxlab
