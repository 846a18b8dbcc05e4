#include "cupti.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string_view>

namespace ptxlab {

namespace {
std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
}
constexpr const char* kSoname = "libcupti.so.13";
}  // namespace

std::vector<std::pair<std::string, std::string>> cupti_candidates() {
    std::vector<std::pair<std::string, std::string>> out;
    if (!env("PTXLAB_CUPTI_LIB").empty()) return {{env("PTXLAB_CUPTI_LIB"), "$PTXLAB_CUPTI_LIB"}};
    out.emplace_back(kSoname, "the loader's search path");
    auto add_root = [&](const std::string& root, const std::string& from) {
        if (root.empty()) return;
        for (const char* sub : {"/extras/CUPTI/lib64/", "/lib64/", "/lib/"}) {
            const std::string p = std::filesystem::path(root + sub + kSoname).lexically_normal().string();
            bool seen = false;
            for (const auto& [q, f] : out) seen |= q == p;
            if (!seen) out.emplace_back(p, from);
        }
    };
    add_root(env("CUDA_HOME"), "$CUDA_HOME");
    add_root(env("CUDA_PATH"), "$CUDA_PATH");
    add_root("/usr/local/cuda", "the default toolkit");
#ifdef PTXLAB_CUDA_BIN_DIR
    add_root(std::string(PTXLAB_CUDA_BIN_DIR) + "/..", "the toolkit ptxlab was built with");
#endif
    return out;
}

std::string profiling_permission_help() {
    return "The NVIDIA driver lets only administrators read the GPU's performance counters "
           "(`grep RmProfilingAdminOnly /proc/driver/nvidia/params` shows 1). Run ptxlab as root, or allow every "
           "user: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` in a file under /etc/modprobe.d/, "
           "then reload the nvidia module or reboot (https://developer.nvidia.com/ERR_NVGPUCTRPERM). In a "
           "container the host's driver decides.";
}

std::string sample_overflow_help() {
    return "Take fewer samples: raise --period (one sample every 2^period cycles per SM: each step up halves "
           "them; the default is 8), or profile less: fewer --max-steps with --train, a smaller --repeat with "
           "FILE.ptx.";
}

#if PTXLAB_HAVE_CUPTI_HEADERS

namespace {

Cupti load_cupti() {
    const auto candidates = cupti_candidates();
    void* handle = nullptr;
    std::string looked, used;
    for (const auto& [path, from] : candidates) {
        handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle) {
            used = path;
            break;
        }
        const char* why = dlerror();
        looked += fmt::format("\n  {} ({}): {}", path, from, why ? why : "cannot be opened");
    }
    if (!handle)
        PTXLAB_THROW(CuptiError,
                     "CUPTI not found: `ptxlab profile` samples the GPU's program counters through CUPTI "
                     "({}, part of the CUDA toolkit: extras/CUPTI/lib64 or lib64; NVIDIA's package cuda-cupti-13-0). "
                     "Looked for:{}\nInstall CUPTI, set CUDA_HOME to the toolkit, or set "
                     "PTXLAB_CUPTI_LIB=/path/to/libcupti.so.13.",
                     kSoname, looked);
    Cupti c;
    c.path = used;
#define PTXLAB_FETCH_CUPTI(name)                                                                              \
    c.name = reinterpret_cast<decltype(c.name)>(dlsym(handle, #name));                                       \
    if (!c.name)                                                                                             \
        PTXLAB_THROW(CuptiError, "{} has no {}: not a CUPTI library, or one too old for PC sampling (CUDA 13's " \
                                 "is needed)", used, #name);
    PTXLAB_CUPTI_FUNCTIONS(PTXLAB_FETCH_CUPTI)
#undef PTXLAB_FETCH_CUPTI
    if (CUptiResult r = c.cuptiGetVersion(&c.version); r != CUPTI_SUCCESS)
        PTXLAB_THROW(CuptiError, "{}: cuptiGetVersion failed ({})", used, static_cast<int>(r));
    // CUpti_PCSamplingPCData gained correlationId in CUPTI API 22 (CUDA 12.4): an older library
    // would write records of another size than the ones allocated here.
    if (c.version < CUPTI_API_VERSION && c.version < 22)
        PTXLAB_THROW(CuptiError, "{} is CUPTI API version {}, older than this ptxlab's headers ({}); its PC sampling "
                                 "records have another layout. Point PTXLAB_CUPTI_LIB at the CUDA 13 toolkit's "
                                 "libcupti.so.13", used, c.version, CUPTI_API_VERSION);
    return c;
}

}  // namespace

const Cupti& cupti() {
    static std::once_flag once;
    static Cupti c;
    static std::string failure, failure_where;
    std::call_once(once, [] {
        try {
            c = load_cupti();
        } catch (const Error& e) {
            failure = e.what();
            failure_where = e.where();
        }
    });
    if (!failure.empty()) throw CuptiError(failure, failure_where);
    return c;
}

std::string cupti_result_text(CUptiResult r) {
    const char* text = nullptr;
    if (cupti().cuptiGetResultString(r, &text) != CUPTI_SUCCESS || !text) text = "unknown CUptiResult";
    return fmt::format("{} ({})", text, static_cast<int>(r));
}

std::string cupti_failure_message(CUptiResult r, const char* call, const std::string& result_text) {
    std::string msg = fmt::format("{} failed: {}", call, result_text);
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
        return fmt::format("PC sampling is not permitted for this user ({}).\n{}", msg, profiling_permission_help());
    if (r == CUPTI_ERROR_OUT_OF_MEMORY && std::string_view(call) == "cuptiPCSamplingGetData")
        return fmt::format("the GPU took PC samples faster than CUPTI could read them out: its hardware buffer filled "
                           "and samples were lost ({}).\n{}", msg, sample_overflow_help());
    if (r == CUPTI_ERROR_NOT_SUPPORTED)
        msg += " (PC sampling needs a GPU of compute capability 7.0 or newer, not under MIG or vGPU without "
               "profiling, and no other profiler attached)";
    else if (r == CUPTI_ERROR_HARDWARE_BUSY)
        msg += " (another profiling session holds this GPU's sampling hardware: ncu, nsys or another ptxlab "
               "profile; run it again once that one ends)";
    else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
        msg += " (another CUPTI client holds the subscription: run ptxlab profile outside ncu, nsys and "
               "compute-sanitizer)";
    return msg;
}

void cupti_check(CUptiResult r, const char* call, const char* file, int line) {
    if (r == CUPTI_SUCCESS) return;
    throw CuptiError(cupti_failure_message(r, call, cupti_result_text(r)), source_location(file, line));
}

#else

void cupti_unavailable() {
    PTXLAB_THROW(CuptiError, "this ptxlab was built without the CUPTI headers (cupti.h, cupti_pcsampling.h: the CUDA "
                             "toolkit's CUPTI component), so `ptxlab profile` cannot sample; rebuild against a "
                             "toolkit that has them");
}

#endif

}  // namespace ptxlab
