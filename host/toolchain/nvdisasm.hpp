// Finding and running nvdisasm, the CUDA toolkit's disassembler, on a cubin (ptxlab sass).
// nvdisasm is not a library: it ships in the toolkit's bin/ and is absent from minimal
// installations (the CI machine has none), so its absence is a clear error, not a crash.
#pragma once

#include "error.hpp"

#include <string>
#include <utility>
#include <vector>

namespace ptxlab {

// nvdisasm (or another tool a command needs) is not installed where ptxlab looked.
class MissingToolError : public Error {
public:
    using Error::Error;
};

// Where to look for nvdisasm. When `override_path` is set (from $PTXLAB_NVDISASM) it is the
// only candidate; otherwise the directories in order, each with where it came from.
struct ToolSearch {
    std::string override_path;
    std::vector<std::pair<std::string, std::string>> dirs;  // (directory, "$CUDA_HOME/bin", ...)
};

// $PTXLAB_NVDISASM; else $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, the toolkit
// ptxlab was built with, then each directory of $PATH.
ToolSearch nvdisasm_search_from_environment();
// The same directories for any of the toolkit's programs, the override from $`override_var`.
ToolSearch toolkit_search_from_environment(const char* override_var);

// The path of nvdisasm, or MissingToolError naming the tool, where it comes from and where ptxlab looked.
std::string find_nvdisasm(const ToolSearch& search);

// The options ptxlab passes before the cubin: code sections only, with source line info; with
// `encodings`, -hex too (each instruction's encoding, for `sass --control`).
const std::vector<std::string>& nvdisasm_options(bool encodings = false);

// Runs `nvdisasm` on `cubin` (ELF bytes, written to a temporary file) and returns its listing.
// `what` names the input in messages ("k.ptx for sm_90"). Throws Error when it cannot be
// started, exits non-zero, is killed or prints nothing.
std::string run_nvdisasm(const std::string& nvdisasm, const std::string& cubin, const std::string& what,
                         bool encodings = false);

}  // namespace ptxlab
