// CUPTI, the CUDA Profiling Tools Interface, loaded at run time (ptxlab profile).
//
// libcupti is opened with dlopen, as libcuda is (cuda.hpp): the build, CI and every other
// command need no CUPTI library, and `profile` on a machine without it says where it looked
// and how to get it (exit 1). Every call goes through CUPTI_CALL(...), which raises CuptiError
// naming the call and cuptiGetResultString's text. The headers (cupti.h, cupti_pcsampling.h)
// come with the CUDA toolkit; a toolkit without them builds a ptxlab whose profile says so.
#pragma once

#include "error.hpp"

#include <string>
#include <utility>
#include <vector>

#if __has_include(<cupti.h>) && __has_include(<cupti_pcsampling.h>)
#define PTXLAB_HAVE_CUPTI_HEADERS 1
#include <cupti.h>
#include <cupti_pcsampling.h>
#else
#define PTXLAB_HAVE_CUPTI_HEADERS 0
#endif

namespace ptxlab {

// CUPTI is missing, too old, or PC sampling is not permitted or not supported here.
class CuptiError : public Error {
public:
    using Error::Error;
};

// Where to look for libcupti: $PTXLAB_CUPTI_LIB alone when set; else the loader's path
// (libcupti.so.13), $CUDA_HOME, $CUDA_PATH, /usr/local/cuda and the toolkit ptxlab was built
// with, each under extras/CUPTI/lib64, lib64 and lib.
std::vector<std::pair<std::string, std::string>> cupti_candidates();  // (path, where it came from)

#if PTXLAB_HAVE_CUPTI_HEADERS

#define PTXLAB_CUPTI_FUNCTIONS(X)                                                                            \
    X(cuptiGetResultString) X(cuptiGetVersion) X(cuptiSubscribe) X(cuptiUnsubscribe) X(cuptiEnableCallback)  \
    X(cuptiPCSamplingGetNumStallReasons) X(cuptiPCSamplingGetStallReasons)                                   \
    X(cuptiPCSamplingSetConfigurationAttribute) X(cuptiPCSamplingEnable) X(cuptiPCSamplingDisable)           \
    X(cuptiPCSamplingStart) X(cuptiPCSamplingStop) X(cuptiPCSamplingGetData) X(cuptiGetCubinCrc)

struct Cupti {
#define PTXLAB_DECLARE_CUPTI(name) decltype(&::name) name = nullptr;
    PTXLAB_CUPTI_FUNCTIONS(PTXLAB_DECLARE_CUPTI)
#undef PTXLAB_DECLARE_CUPTI
    std::string path;      // the library opened
    uint32_t version = 0;  // cuptiGetVersion (CUPTI_API_VERSION of the library)
};

// The loaded library; the first call opens it. Throws CuptiError with where ptxlab looked and
// what to do when it is missing, lacks an entry point, or is older than the headers' layout.
const Cupti& cupti();

// "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35): ..." from cuptiGetResultString.
std::string cupti_result_text(CUptiResult r);
void cupti_check(CUptiResult r, const char* call, const char* file, int line);
// cupti_check's message for `r` (`result_text`: cupti_result_text's), with what to do where there
// is something to do (not permitted: profiling_permission_help(); cuptiPCSamplingGetData's
// CUPTI_ERROR_OUT_OF_MEMORY, CUPTI's hardware buffer full: sample_overflow_help()).
std::string cupti_failure_message(CUptiResult r, const char* call, const std::string& result_text);

#else
// Built without the CUPTI headers: throws CuptiError saying so.
void cupti_unavailable();
#endif

// What to do when the driver refuses profiling to this user (CUPTI_ERROR_INSUFFICIENT_PRIVILEGES).
std::string profiling_permission_help();
// What to do when CUPTI's hardware buffer filled and samples were lost (cuptiPCSamplingGetData's
// CUPTI_ERROR_OUT_OF_MEMORY): sample less often, or a shorter run.
std::string sample_overflow_help();

}  // namespace ptxlab

#define CUPTI_CALL(name, ...) ::ptxlab::cupti_check(::ptxlab::cupti().name(__VA_ARGS__), #name, __FILE__, __LINE__)
