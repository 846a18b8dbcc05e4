// `verify --racecheck` / `--synccheck`: the same verify invocation run under the CUDA
// toolkit's compute-sanitizer (racecheck: shared-memory data races, such as a missing
// bar.sync; synccheck: barriers used wrongly), failing when it reports a hazard. Like nvdisasm,
// compute-sanitizer is a program of the toolkit, absent from minimal installations: its absence
// is a clear error. Finding it, the command line and reading its verdict need no GPU.
#pragma once

#include "nvdisasm.hpp"
#include "process.hpp"

#include <string>
#include <vector>

namespace ptxlab {

// $PTXLAB_COMPUTE_SANITIZER; else the directories of nvdisasm's search (toolkit_search_from_environment),
// each toolkit's (not $PATH's) also with its compute-sanitizer/ folder beside bin/.
ToolSearch compute_sanitizer_search_from_environment();
// The path of compute-sanitizer, or MissingToolError naming it, its package and where ptxlab looked.
std::string find_compute_sanitizer(const ToolSearch& search, const std::string& flag);

// The exit status compute-sanitizer is asked to use when it finds errors (--error-exitcode).
inline constexpr int kSanitizerErrorExit = 86;

// compute-sanitizer's arguments to run `exe args...` under `tool` ("racecheck" or "synccheck").
std::vector<std::string> sanitizer_args(const std::string& tool, const std::string& exe,
                                        const std::vector<std::string>& args);

struct SanitizerVerdict {
    bool ok = false;
    int hazards = -1, errors = -1;  // from its summary lines; -1 when not printed
    std::string why;                // what failed, or "" when ok
};
// Reads a run's result: failing on any hazard or error in the summary, on the sanitizer's error
// status, on the verify run's own failure, and on a run that printed no summary at all.
SanitizerVerdict judge_sanitizer_run(const std::string& tool, const ProcessResult& r);

}  // namespace ptxlab
