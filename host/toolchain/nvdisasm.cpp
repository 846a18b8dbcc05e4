#include "nvdisasm.hpp"

#include "process.hpp"

#include <cstdlib>
#include <filesystem>

namespace ptxlab {

namespace {
std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}
}  // namespace

ToolSearch nvdisasm_search_from_environment() { return toolkit_search_from_environment("PTXLAB_NVDISASM"); }

ToolSearch toolkit_search_from_environment(const char* override_var) {
    ToolSearch s;
    s.override_path = env(override_var);
    auto add = [&](std::string dir, const std::string& from) {
        if (dir.empty()) return;
        dir = std::filesystem::path(dir).lexically_normal().string();
        if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        for (const auto& [d, f] : s.dirs)
            if (d == dir) return;
        s.dirs.emplace_back(dir, from);
    };
    if (!env("CUDA_HOME").empty()) add(env("CUDA_HOME") + "/bin", "$CUDA_HOME/bin");
    if (!env("CUDA_PATH").empty()) add(env("CUDA_PATH") + "/bin", "$CUDA_PATH/bin");
    add("/usr/local/cuda/bin", "the default toolkit");
#ifdef PTXLAB_CUDA_BIN_DIR
    add(PTXLAB_CUDA_BIN_DIR, "the toolkit ptxlab was built with");
#endif
    const std::string path = env("PATH");
    for (size_t b = 0; b <= path.size();) {
        size_t e = path.find(':', b);
        if (e == std::string::npos) e = path.size();
        if (e > b) add(path.substr(b, e - b), "$PATH");
        b = e + 1;
    }
    return s;
}

std::string find_nvdisasm(const ToolSearch& s) {
    const std::string what = "`ptxlab sass` needs nvdisasm, part of the CUDA toolkit: $CUDA_HOME/bin/nvdisasm "
                             "(/usr/local/cuda/bin/nvdisasm in a default installation; NVIDIA's package "
                             "cuda-nvdisasm-13-0)";
    if (!s.override_path.empty()) {
        if (is_executable_file(s.override_path)) return s.override_path;
        std::error_code ec;
        const char* why = !std::filesystem::exists(s.override_path, ec)      ? "does not exist"
                          : std::filesystem::is_directory(s.override_path, ec) ? "is a directory"
                                                                               : "is not an executable file";
        PTXLAB_THROW(MissingToolError, "PTXLAB_NVDISASM={} {}. {}; unset PTXLAB_NVDISASM to search for it",
                     s.override_path, why, what);
    }
    std::string looked;
    for (const auto& [dir, from] : s.dirs) {
        const std::string p = dir + "/nvdisasm";
        if (is_executable_file(p)) return p;
        looked += fmt::format("\n  {} ({})", p, from);
    }
    const bool home = !std::getenv("CUDA_HOME") || !*std::getenv("CUDA_HOME");
    PTXLAB_THROW(MissingToolError,
                 "nvdisasm not found. {}. Looked for:{}{}\nInstall the toolkit's nvdisasm, set CUDA_HOME to the toolkit, "
                 "or set PTXLAB_NVDISASM=/path/to/nvdisasm. (`ptxlab check` reports registers and spills without it.)",
                 what, looked.empty() ? " (nowhere: no directory to search)" : looked,
                 home ? "\n  (CUDA_HOME is not set)" : "");
}

const std::vector<std::string>& nvdisasm_options(bool encodings) {
    static const std::vector<std::string> opts = {"--print-code", "--print-line-info"};
    static const std::vector<std::string> hex = {"--print-code", "--print-line-info", "-hex"};
    return encodings ? hex : opts;
}

std::string run_nvdisasm(const std::string& nvdisasm, const std::string& cubin, const std::string& what,
                         bool encodings) {
    TempFile file(cubin, ".cubin");
    std::vector<std::string> args = nvdisasm_options(encodings);
    args.push_back(file.path());
    const ProcessResult r = run_process(nvdisasm, args);
    std::string cmd = nvdisasm;
    for (const auto& a : args) cmd += " " + a;
    std::string err = r.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    if (!r.ok())
        PTXLAB_THROW(Error, "nvdisasm failed on the cubin of {}: `{}` {}{}", what, cmd, r.status_text(),
                     err.empty() ? " and wrote nothing on stderr" : ":\n" + err);
    if (r.out.find_first_not_of(" \t\r\n") == std::string::npos)
        PTXLAB_THROW(Error, "nvdisasm printed nothing for the cubin of {}: `{}`{}", what, cmd,
                     err.empty() ? "" : "; its stderr:\n" + err);
    return r.out;
}

}  // namespace ptxlab
