// The three ways ptxlab turns source into machine code:
//   assemble_offline  PTX -> SASS with nvJitLink, in process, no GPU needed (ptxlab check)
//   Module            PTX -> loaded module with the driver JIT (cuModuleLoadDataEx)
//   nvrtc_compile     CUDA C -> PTX (and CUBIN) with NVRTC, no GPU needed
// Logs are always kept; failures name the file and line and quote the source.
#pragma once

#include "cuda.hpp"
#include "ptx_link.hpp"
#include "ptx_text.hpp"

#include <string>
#include <vector>

namespace ptxlab {

// Resources of one entry point, from the assembler's info log.
struct EntryResources {
    std::string name;
    int registers = -1, barriers = 0;
    int stack = 0, spill_stores = 0, spill_loads = 0;
    int shared = 0, constant = 0, local = 0;
};

struct AssemblyResult {
    bool ok = false;
    std::vector<Diagnostic> diagnostics;  // errors and warnings, with source lines
    std::string error_log, info_log;
    std::vector<EntryResources> entries;
    std::string cubin;  // the ELF bytes, when AssembleOptions::cubin was asked for and ok
    // With line info: the .file name written into the PTX (absolute) and, for each line of the
    // text nvJitLink saw, the line of the user's file it came from (see annotate_line_info).
    std::string line_info_path;
    std::vector<int> line_map;
    // The files whose functions were linked in (ptx_link.hpp: the definitions of the file's
    // `.extern .func` declarations), e.g. ptx/optim.ptx for ptx/step.ptx.
    std::vector<std::string> linked;
};

struct AssembleOptions {
    bool line_info = false;  // add `.file`/`.loc` (annotate_line_info) and pass -lineinfo
    bool cubin = false;      // keep the linked cubin (nvJitLinkGetLinkedCubin) in the result
    std::string link_dir = "";  // where `.extern .func` definitions are found; "" = the file's own directory
};

// Assembles PTX for `arch` (e.g. "sm_90") with nvJitLink, linked first with the files that define
// its `.extern .func` declarations (link_ptx). A PTX error, or a declaration no file defines, is a
// result (ok == false), not an exception; a failing nvJitLink call throws.
// Diagnostics always name lines of `ptx.path` (an error inside a linked function: a line-0
// diagnostic quoting that file's line), with or without line info.
AssemblyResult assemble_offline(const SourceFile& ptx, const std::string& arch, const AssembleOptions& opts = {});

// Parses "Compiling entry function 'f'", "Used N registers", "N bytes stack frame, ...".
std::vector<EntryResources> parse_resource_log(const std::string& info_log);

// A PTX error found while loading: carries the formatted diagnostics and the JIT log.
class PtxError : public InputError {
public:
    using InputError::InputError;
};

// A module JIT-loaded by the driver from PTX text, with line info pointing at `src.path` (and at
// the files linked in for its `.extern .func` declarations, link_ptx: from `link_dir`, else from
// src's own directory, which is --ptx-dir for a kernel set).
class Module {
public:
    // Throws PtxError (file:line, source lines, the JIT's error log) when the PTX is rejected or
    // a declared function cannot be linked.
    explicit Module(const SourceFile& src, bool line_info = true, const std::string& link_dir = "");
    ~Module();
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    CUfunction function(const std::string& entry) const;
    const std::string& info_log() const { return info_log_; }
    const std::string& path() const { return path_; }
    const std::vector<std::string>& linked() const { return linked_; }  // the files linked in

private:
    CUmodule mod_ = nullptr;
    std::string path_, info_log_;
    std::vector<std::string> linked_;
};

struct NvrtcOutput {
    std::string ptx;
    std::string log;  // the program log, also on success (warnings)
};

// Compiles CUDA C to PTX for a virtual architecture (e.g. "compute_90").
// A compile error throws InputError with the program log.
NvrtcOutput nvrtc_compile(const SourceFile& cu, const std::string& virtual_arch,
                          const std::vector<std::string>& extra_options = {});

// The real architectures (sm_NN) this nvJitLink accepts, oldest first (probed once).
const std::vector<std::string>& supported_archs();

// Refuses an --arch that is malformed or that nvJitLink does not accept, naming the supported range.
void require_supported_arch(const std::string& arch);

// "sm_90" -> "compute_90"; validates the form "sm_NN" / "sm_NNa".
std::string virtual_arch_of(const std::string& arch);

// The architecture to assemble a file for: `arch`, or the file's `.target` where that is `arch`
// with an architecture-specific suffix ("sm_90a" for "sm_90": wgmma, setmaxnreg), which ptxas
// assembles only for itself ("PTX with .target 'sm_90a' cannot be compiled for architecture 'sm_90'").
std::string assembly_arch(const std::string& arch, const std::string& target);

}  // namespace ptxlab
