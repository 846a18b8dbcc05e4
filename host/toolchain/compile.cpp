#include "compile.hpp"

#include <nvJitLink.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <sstream>

namespace ptxlab {

// ---- nvJitLink (offline) ----------------------------------------------------

namespace {

const char* jitlink_result_name(nvJitLinkResult r) {
    switch (r) {
        case NVJITLINK_SUCCESS: return "NVJITLINK_SUCCESS";
        case NVJITLINK_ERROR_UNRECOGNIZED_OPTION: return "NVJITLINK_ERROR_UNRECOGNIZED_OPTION";
        case NVJITLINK_ERROR_MISSING_ARCH: return "NVJITLINK_ERROR_MISSING_ARCH";
        case NVJITLINK_ERROR_INVALID_INPUT: return "NVJITLINK_ERROR_INVALID_INPUT";
        case NVJITLINK_ERROR_PTX_COMPILE: return "NVJITLINK_ERROR_PTX_COMPILE";
        case NVJITLINK_ERROR_NVVM_COMPILE: return "NVJITLINK_ERROR_NVVM_COMPILE";
        case NVJITLINK_ERROR_INTERNAL: return "NVJITLINK_ERROR_INTERNAL";
        case NVJITLINK_ERROR_UNRECOGNIZED_INPUT: return "NVJITLINK_ERROR_UNRECOGNIZED_INPUT";
        case NVJITLINK_ERROR_INCORRECT_INPUT_TYPE: return "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE (not recognised as PTX)";
        case NVJITLINK_ERROR_ARCH_MISMATCH: return "NVJITLINK_ERROR_ARCH_MISMATCH";
        case NVJITLINK_ERROR_UNRECOGNIZED_ARCH: return "NVJITLINK_ERROR_UNRECOGNIZED_ARCH";
        case NVJITLINK_ERROR_UNSUPPORTED_ARCH: return "NVJITLINK_ERROR_UNSUPPORTED_ARCH";
        default: return "NVJITLINK_ERROR (other)";
    }
}

void jitlink_check(nvJitLinkResult r, const char* call, const char* file, int line) {
    if (r != NVJITLINK_SUCCESS)
        throw Error(fmt::format("{} failed: {} ({})", call, jitlink_result_name(r), static_cast<int>(r)),
                    source_location(file, line));
}
#define JL(call, ...) jitlink_check(call(__VA_ARGS__), #call, __FILE__, __LINE__)

std::string jitlink_log(nvJitLinkHandle h, bool error) {
    size_t n = 0;
    if (error) JL(nvJitLinkGetErrorLogSize, h, &n);
    else JL(nvJitLinkGetInfoLogSize, h, &n);
    std::string s(n, '\0');
    if (n) {
        if (error) JL(nvJitLinkGetErrorLog, h, s.data());
        else JL(nvJitLinkGetInfoLog, h, s.data());
    }
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

}  // namespace

std::string virtual_arch_of(const std::string& arch) {
    static const std::regex re(R"(sm_(\d{2,3}[a-f]?))");
    std::smatch m;
    if (!std::regex_match(arch, m, re))
        PTXLAB_THROW(InputError, "architecture '{}' is not of the form sm_NN (for example sm_90)", arch);
    return "compute_" + m[1].str();
}

std::string assembly_arch(const std::string& arch, const std::string& target) {
    const bool suffixed = target.size() == arch.size() + 1 && target.compare(0, arch.size(), arch) == 0 &&
                          (target.back() == 'a' || target.back() == 'f');
    return suffixed ? target : arch;
}

std::vector<EntryResources> parse_resource_log(const std::string& log) {
    // The entry's name is found by plain scanning: it is the user's token (up to kMaxPtxTokenChars),
    // and std::regex recurses once per character matched. The other patterns match only numbers.
    const std::string entry_tag = "Compiling entry function '";
    static const std::regex regs_re(R"(Used (\d+) registers(?:, used (\d+) barriers)?)");
    static const std::regex stack_re(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
    static const std::regex smem_re(R"((\d+) bytes smem)");
    static const std::regex cmem_re(R"((\d+) bytes cmem\[0\])");
    static const std::regex lmem_re(R"((\d+) bytes lmem)");
    std::vector<EntryResources> out;
    EntryResources* cur = nullptr;
    bool in_entry_props = false;
    std::istringstream in(log);
    std::string line;
    std::smatch m;
    while (std::getline(in, line)) {
        if (const size_t at = line.find(entry_tag); at != std::string::npos) {
            const size_t start = at + entry_tag.size(), end = line.find('\'', start);
            if (end != std::string::npos && end > start) {
                out.push_back({});
                cur = &out.back();
                cur->name = line.substr(start, end - start);
                in_entry_props = false;
                continue;
            }
        }
        if (!cur) continue;
        // "Function properties for X": entry's own, or a callee's (.func) frame.
        if (line.find("Function properties for") != std::string::npos) {
            in_entry_props = line.find("for " + cur->name) != std::string::npos;
            continue;
        }
        if (std::regex_search(line, m, stack_re) && in_entry_props) {
            cur->stack = std::stoi(m[1].str());
            cur->spill_stores = std::stoi(m[2].str());
            cur->spill_loads = std::stoi(m[3].str());
        }
        if (std::regex_search(line, m, regs_re)) {
            cur->registers = std::stoi(m[1].str());
            if (m[2].matched) cur->barriers = std::stoi(m[2].str());
            if (std::regex_search(line, m, smem_re)) cur->shared = std::stoi(m[1].str());
            if (std::regex_search(line, m, cmem_re)) cur->constant = std::stoi(m[1].str());
            if (std::regex_search(line, m, lmem_re)) cur->local = std::stoi(m[1].str());
        }
    }
    return out;
}

namespace {
// Whether nvJitLink accepts -arch=ARCH (nvJitLinkCreate rejects an unknown or retired target).
bool jitlink_accepts(const std::string& arch) {
    const std::string arch_opt = "-arch=" + arch;
    const char* opts[] = {arch_opt.c_str()};
    nvJitLinkHandle h = nullptr;
    nvJitLinkResult r = nvJitLinkCreate(&h, 1, opts);
    if (h) nvJitLinkDestroy(&h);
    return r == NVJITLINK_SUCCESS;
}
}  // namespace

const std::vector<std::string>& supported_archs() {
    // The real architectures NVIDIA has shipped; the list keeps those this nvJitLink accepts.
    static const std::vector<std::string> archs = [] {
        std::vector<std::string> out;
        for (int n : {30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110,
                      120, 121})
            if (jitlink_accepts(fmt::format("sm_{}", n))) out.push_back(fmt::format("sm_{}", n));
        return out;
    }();
    return archs;
}

void require_supported_arch(const std::string& arch) {
    virtual_arch_of(arch);  // validates the form
    if (jitlink_accepts(arch)) return;
    const auto& all = supported_archs();
    std::string list;
    for (const auto& a : all) list += (list.empty() ? "" : ", ") + a;
    PTXLAB_THROW(InputError, "architecture '{}' is not supported by this nvJitLink ({} .. {}: {})", arch,
                 all.empty() ? "?" : all.front(), all.empty() ? "?" : all.back(), list);
}

namespace {
// A failed assembly: what in the text explains it (BOM, non-ASCII, no .version, a huge line),
// then nvJitLink's own log, whole, unless its errors were read with their lines already.
void explain_failure(AssemblyResult& res, const SourceFile& ptx, nvJitLinkResult failed) {
    std::vector<Diagnostic> found = ptx_text_problems(ptx.text);
    bool has_line = false;
    for (const auto& d : res.diagnostics) has_line |= d.line > 0 && d.severity != "warning";
    if (!has_line) {
        std::string log = res.error_log;
        while (!log.empty() && (log.back() == '\n' || log.back() == ' ')) log.pop_back();
        std::string code = jitlink_result_name(failed);
        res.diagnostics.erase(std::remove_if(res.diagnostics.begin(), res.diagnostics.end(),
                                             [](const Diagnostic& d) { return d.line == 0 && d.severity != "warning"; }),
                              res.diagnostics.end());
        res.diagnostics.push_back(
            {0, "error",
             log.empty() ? fmt::format("nvJitLink rejected the file ({}) and wrote no error log", code)
                         : fmt::format("nvJitLink rejected the file ({}); its error log:\n{}", code, log)});
    }
    if (has_line)  // the log names the lines: the notes (a long line) would only distract
        found.erase(std::remove_if(found.begin(), found.end(), [](const Diagnostic& d) { return d.severity == "note"; }),
                    found.end());
    res.diagnostics.insert(res.diagnostics.begin(), found.begin(), found.end());
}
}  // namespace

namespace {
// The text nvJitLink sees with line info: `.file 1 "/abs/path"` (and one for each linked file)
// and `.loc` lines added; res.line_map maps its logs back to the linked text's lines.
std::string with_line_info(const SourceFile& ptx, const LinkedPtx& linked, AssemblyResult& res) {
    auto absolute = [](const std::string& path) {
        std::error_code ec;
        const std::filesystem::path abs = std::filesystem::absolute(path, ec);
        return ec ? path : abs.lexically_normal().string();
    };
    res.line_info_path = absolute(ptx.path);
    std::vector<LineSpan> spans = linked.spans();
    for (auto& s : spans) s.path = absolute(s.path);
    AnnotatedPtx ann = annotate_line_info(linked.text, res.line_info_path, spans);
    res.line_map = std::move(ann.line_map);
    return std::move(ann.text);
}
}  // namespace

AssemblyResult assemble_offline(const SourceFile& ptx, const std::string& arch, const AssembleOptions& o) {
    require_supported_arch(arch);  // validates the name and names the supported range
    AssemblyResult res;
    // Text nvJitLink would crash on (a token past kMaxPtxTokenChars) never reaches it: a failed
    // result with that error at its line and column, and whatever else the text shows.
    if (!ptx_limit_problems(ptx.text).empty()) {
        for (auto& d : ptx_text_problems(ptx.text))
            if (d.severity == "error") res.diagnostics.push_back(std::move(d));
        return res;
    }
    // The definitions of its `.extern .func` declarations, appended (ptx_link.hpp); one that no
    // file, or two, define is a failed result at the declaration's line.
    const LinkedPtx linked = link_ptx(ptx, o.link_dir);
    res.linked = linked.files();
    if (!linked.problems.empty()) {
        res.diagnostics = linked.problems;
        return res;
    }
    if (auto limits = ptx_limit_problems(linked.text); !limits.empty()) {
        res.diagnostics = attribute_diagnostics(linked, std::move(limits));
        return res;
    }
    const std::string text = o.line_info ? with_line_info(ptx, linked, res) : linked.text;
    const std::string arch_opt = "-arch=" + arch;
    // -no-cache: with a cached result ptxas does not run, and its resource report (-verbose) would be missing.
    std::vector<const char*> opts = {arch_opt.c_str(), "-verbose", "-no-cache"};
    if (o.line_info) opts.push_back("-lineinfo");
    nvJitLinkHandle h = nullptr;
    JL(nvJitLinkCreate, &h, static_cast<uint32_t>(opts.size()), opts.data());
    std::unique_ptr<nvJitLinkHandle, void (*)(nvJitLinkHandle*)> guard(&h, [](nvJitLinkHandle* p) {
        nvJitLinkDestroy(p);
    });

    // A PTX error is returned by AddData (NVJITLINK_ERROR_PTX_COMPILE); Complete would still succeed.
    nvJitLinkResult add = nvJitLinkAddData(h, NVJITLINK_INPUT_PTX, text.c_str(), text.size() + 1,
                                           ptx.path.c_str());
    nvJitLinkResult done = NVJITLINK_SUCCESS;
    if (add == NVJITLINK_SUCCESS) done = nvJitLinkComplete(h);
    res.error_log = jitlink_log(h, true);
    res.info_log = jitlink_log(h, false);
    if (o.line_info) {
        res.error_log = remap_log_lines(res.error_log, res.line_map);
        res.info_log = remap_log_lines(res.info_log, res.line_map);
    }
    // Any failure of AddData or Complete is the input's (ptxlab passes valid options): a result with
    // the log and, where the log says nothing useful, what the text lacks; never a bare error code.
    if (add == NVJITLINK_ERROR_INTERNAL || done == NVJITLINK_ERROR_INTERNAL || add == NVJITLINK_ERROR_THREADPOOL ||
        done == NVJITLINK_ERROR_THREADPOOL) {
        if (res.error_log.empty()) jitlink_check(add != NVJITLINK_SUCCESS ? add : done, "nvJitLinkAddData", __FILE__,
                                                 __LINE__);
    }
    res.ok = add == NVJITLINK_SUCCESS && done == NVJITLINK_SUCCESS;
    res.diagnostics = parse_ptxas_log(res.error_log);
    for (auto& d : res.diagnostics)
        if (d.severity == "fatal") d.severity = "error";  // "error:" tags, as compilers write them
    for (const auto& d : parse_ptxas_log(res.info_log))
        if (d.severity == "warning") res.diagnostics.push_back(d);
    if (!res.ok) explain_failure(res, ptx, add != NVJITLINK_SUCCESS ? add : done);
    res.diagnostics = attribute_diagnostics(linked, std::move(res.diagnostics));  // a linked function's lines
    res.entries = parse_resource_log(res.info_log);
    if (res.ok && o.cubin) {
        size_t n = 0;
        JL(nvJitLinkGetLinkedCubinSize, h, &n);
        res.cubin.assign(n, '\0');
        if (n) JL(nvJitLinkGetLinkedCubin, h, res.cubin.data());
    }
    return res;
}

// ---- Driver JIT -------------------------------------------------------------

Module::Module(const SourceFile& src, bool line_info, const std::string& link_dir) : path_(src.path) {
    // The driver's JIT is the same assembler as nvJitLink: text it would crash on is refused first.
    if (auto limits = ptx_limit_problems(src.text); !limits.empty())
        throw PtxError(format_limit_problems(src, limits), source_location(__FILE__, __LINE__));
    // The definitions of its `.extern .func` declarations, appended (ptx_link.hpp): one module.
    const LinkedPtx linked = link_ptx(src, link_dir);
    linked_ = linked.files();
    if (auto problems = linked.problems; !problems.empty() || !(problems = ptx_limit_problems(linked.text)).empty())
        throw PtxError(format_limit_problems(src, attribute_diagnostics(linked, problems)),
                       source_location(__FILE__, __LINE__));
    AnnotatedPtx ann = line_info ? annotate_line_info(linked.text, src.path, linked.spans())
                                 : AnnotatedPtx{linked.text, {}};
    std::string error_log(1 << 16, '\0'), info_log(1 << 16, '\0');
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                           CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE, CU_JIT_GENERATE_LINE_INFO};
    void* vals[] = {error_log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(error_log.size())),
                    info_log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(info_log.size())),
                    reinterpret_cast<void*>(static_cast<uintptr_t>(1)),
                    reinterpret_cast<void*>(static_cast<uintptr_t>(line_info ? 1 : 0))};
    CUresult r = driver().cuModuleLoadDataEx(&mod_, ann.text.c_str(), 6, opts, vals);
    error_log.resize(error_log.find('\0') == std::string::npos ? error_log.size() : error_log.find('\0'));
    info_log.resize(info_log.find('\0') == std::string::npos ? info_log.size() : info_log.find('\0'));
    if (line_info) {
        error_log = remap_log_lines(error_log, ann.line_map);
        info_log = remap_log_lines(info_log, ann.line_map);
    }
    info_log_ = info_log;
    if (r == CUDA_SUCCESS) return;

    std::string msg = fmt::format("{}: the driver JIT rejected this PTX: cuModuleLoadDataEx failed: {}\n", src.path,
                                  cu_result_text(r));
    for (const auto& d : attribute_diagnostics(linked, parse_ptxas_log(error_log))) msg += format_diagnostic(src, d);
    PtxInfo info = parse_ptx(src.text);
    if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
        msg += fmt::format("{}:{}: note: .version {} is newer than this driver ({}.{}) accepts\n", src.path,
                           info.version_line, info.version, driver().version / 1000, driver().version % 1000 / 10);
    // A .target above the GPU's architecture: say which line and what the GPU is.
    CUdevice dev = 0;
    int major = 0, minor = 0;
    unsigned target = 0;
    if (info.target.rfind("sm_", 0) == 0 && std::sscanf(info.target.c_str() + 3, "%u", &target) == 1 &&
        driver().cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
        driver().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) == CUDA_SUCCESS &&
        driver().cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) == CUDA_SUCCESS &&
        target > unsigned(major * 10 + minor))
        msg += fmt::format("{}:{}: note: .target {} is newer than this GPU (sm_{}{}); expected .target sm_{}{} or lower\n",
                           src.path, info.target_line, info.target, major, minor, major, minor);
    msg += "JIT error log:\n" + (error_log.empty() ? std::string("(empty)\n") : error_log + "\n");
    throw PtxError(msg, source_location(__FILE__, __LINE__));
}

Module::~Module() {
    if (mod_ && !device_hung()) driver().cuModuleUnload(mod_);
}

CUfunction Module::function(const std::string& entry) const {
    CUfunction f = nullptr;
    CUresult r = driver().cuModuleGetFunction(&f, mod_, entry.c_str());
    if (r == CUDA_ERROR_NOT_FOUND)
        PTXLAB_THROW(PtxError, "{}: no entry point '{}' (expected `.visible .entry {}(...)`)", path_, entry, entry);
    cu_check(r, "cuModuleGetFunction", __FILE__, __LINE__);
    return f;
}

// ---- NVRTC ------------------------------------------------------------------

namespace {
void nvrtc_check(nvrtcResult r, const char* call, const char* file, int line) {
    if (r != NVRTC_SUCCESS)
        throw Error(fmt::format("{} failed: {} ({})", call, nvrtcGetErrorString(r), static_cast<int>(r)),
                    source_location(file, line));
}
#define NVRTC(call, ...) nvrtc_check(call(__VA_ARGS__), #call, __FILE__, __LINE__)
}  // namespace

NvrtcOutput nvrtc_compile(const SourceFile& cu, const std::string& virtual_arch,
                          const std::vector<std::string>& extra_options) {
    nvrtcProgram prog = nullptr;
    NVRTC(nvrtcCreateProgram, &prog, cu.text.c_str(), cu.path.c_str(), 0, nullptr, nullptr);
    std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> guard(&prog, [](nvrtcProgram* p) {
        nvrtcDestroyProgram(p);
    });
    std::vector<std::string> opts = {"--gpu-architecture=" + virtual_arch, "--std=c++17", "-lineinfo"};
    // A twin may #include a header beside it (ptx/reference/recipe.cuh).
    const std::string dir = std::filesystem::path(cu.path).parent_path().string();
    opts.push_back("--include-path=" + (dir.empty() ? std::string(".") : dir));
    opts.insert(opts.end(), extra_options.begin(), extra_options.end());
    std::vector<const char*> copts;
    for (const auto& o : opts) copts.push_back(o.c_str());
    nvrtcResult compiled = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());

    NvrtcOutput out;
    size_t n = 0;
    NVRTC(nvrtcGetProgramLogSize, prog, &n);
    out.log.assign(n, '\0');
    if (n) NVRTC(nvrtcGetProgramLog, prog, out.log.data());
    while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();

    if (compiled == NVRTC_ERROR_COMPILATION)
        PTXLAB_THROW(InputError, "{}: NVRTC compilation failed for {}:\n{}", cu.path, virtual_arch, out.log);
    nvrtc_check(compiled, "nvrtcCompileProgram", __FILE__, __LINE__);
    NVRTC(nvrtcGetPTXSize, prog, &n);
    out.ptx.assign(n, '\0');
    NVRTC(nvrtcGetPTX, prog, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
    return out;
}

}  // namespace ptxlab
