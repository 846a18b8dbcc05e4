#include "sanitizer.hpp"

#include "error.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <regex>

namespace ptxlab {

ToolSearch compute_sanitizer_search_from_environment() {
    ToolSearch s = toolkit_search_from_environment("PTXLAB_COMPUTE_SANITIZER");
    // A toolkit keeps the program in compute-sanitizer/ beside bin/ (bin/ holds a link to it, not always).
    std::vector<std::pair<std::string, std::string>> dirs;
    for (const auto& [dir, from] : s.dirs) {
        dirs.emplace_back(dir, from);
        const std::filesystem::path p(dir);
        if (p.filename() == "bin" && from != "$PATH")  // a toolkit's bin/, not every directory of $PATH
            dirs.emplace_back((p.parent_path() / "compute-sanitizer").string(), from);
    }
    s.dirs = std::move(dirs);
    return s;
}

std::string find_compute_sanitizer(const ToolSearch& s, const std::string& flag) {
    const std::string what = fmt::format(
        "`ptxlab verify {}` needs compute-sanitizer, part of the CUDA toolkit: $CUDA_HOME/bin/compute-sanitizer "
        "(/usr/local/cuda/bin/compute-sanitizer in a default installation; NVIDIA's package cuda-sanitizer-13-0)",
        flag);
    if (!s.override_path.empty()) {
        if (is_executable_file(s.override_path)) return s.override_path;
        PTXLAB_THROW(MissingToolError, "PTXLAB_COMPUTE_SANITIZER={} is not an executable file. {}; unset "
                                       "PTXLAB_COMPUTE_SANITIZER to search for it", s.override_path, what);
    }
    std::string looked;
    for (const auto& [dir, from] : s.dirs) {
        const std::string p = dir + "/compute-sanitizer";
        if (is_executable_file(p)) return p;
        looked += fmt::format("\n  {} ({})", p, from);
    }
    PTXLAB_THROW(MissingToolError,
                 "compute-sanitizer not found. {}. Looked for:{}\nInstall the toolkit's compute-sanitizer, set "
                 "CUDA_HOME to the toolkit, or set PTXLAB_COMPUTE_SANITIZER=/path/to/compute-sanitizer; or run verify "
                 "without {}.",
                 what, looked.empty() ? " (nowhere: no directory to search)" : looked, flag);
}

std::vector<std::string> sanitizer_args(const std::string& tool, const std::string& exe,
                                        const std::vector<std::string>& args) {
    std::vector<std::string> a = {"--tool", tool, "--error-exitcode", std::to_string(kSanitizerErrorExit),
                                  "--print-limit", "20"};
    a.push_back(exe);
    a.insert(a.end(), args.begin(), args.end());
    return a;
}

SanitizerVerdict judge_sanitizer_run(const std::string& tool, const ProcessResult& r) {
    SanitizerVerdict v;
    const std::string text = r.out + "\n" + r.err;
    std::smatch m;
    static const std::regex hazards_re(R"(RACECHECK SUMMARY:\s*(\d+)\s+hazard)");
    static const std::regex errors_re(R"(ERROR SUMMARY:\s*(\d+)\s+error)");
    if (std::regex_search(text, m, hazards_re)) v.hazards = std::stoi(m[1].str());
    if (std::regex_search(text, m, errors_re)) v.errors = std::stoi(m[1].str());
    if (v.hazards > 0)
        v.why = fmt::format("compute-sanitizer --tool {} reported {} hazard{}", tool, v.hazards, v.hazards == 1 ? "" : "s");
    else if (v.errors > 0)
        v.why = fmt::format("compute-sanitizer --tool {} reported {} error{}", tool, v.errors, v.errors == 1 ? "" : "s");
    else if (r.exit_code == kSanitizerErrorExit)
        v.why = fmt::format("compute-sanitizer --tool {} exited with its error status {}", tool, kSanitizerErrorExit);
    else if (!r.ok())
        v.why = fmt::format("the verify run under compute-sanitizer --tool {} failed ({})", tool, r.status_text());
    else if (v.errors < 0 && v.hazards < 0)
        v.why = fmt::format("compute-sanitizer --tool {} printed no summary (no `ERROR SUMMARY` line): its verdict "
                            "is unknown", tool);
    v.ok = v.why.empty();
    return v;
}

}  // namespace ptxlab
