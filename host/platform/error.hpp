// Errors: every failure in ptxlab is an exception that says what failed and where.
// Only main() turns exceptions into exit codes (see cli/main.cpp).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ptxlab {

// A failure with a message for the user. `where` is the source location that
// raised it (file:line), kept apart so that main() can show it in verbose mode.
class Error : public std::runtime_error {
public:
    explicit Error(std::string msg, std::string where = {})
        : std::runtime_error(std::move(msg)), where_(std::move(where)) {}
    const std::string& where() const { return where_; }

private:
    std::string where_;
};

// No usable GPU: no driver library, the toolkit's stub, or no device.
// Commands that need a GPU exit with kExitNoGpu; GPU tests skip (exit 77).
class NoGpuError : public Error {
public:
    using Error::Error;
};

// Bad user input (flags, files, shapes): reported with exit code kExitUsage.
class InputError : public Error {
public:
    using Error::Error;
};

// Exit codes of the ptxlab executable.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // a check or verification failed, or an internal error
inline constexpr int kExitUsage = 2;    // bad flags or bad input files
inline constexpr int kExitNoGpu = 3;    // the command needs a GPU and there is none
inline constexpr int kExitTimeout = 4;    // a kernel ran past --timeout
inline constexpr int kExitInterrupted = 130;

inline std::string source_location(const char* file, int line) {
    std::string f = file;
    auto pos = f.rfind("/host/");
    if (pos == std::string::npos) pos = f.rfind("/tests/");
    return fmt::format("{}:{}", pos == std::string::npos ? f : f.substr(pos + 1), line);
}

}  // namespace ptxlab

// Throw an exception of type TYPE whose message is fmt::format(...), tagged with file:line.
#define PTXLAB_THROW(TYPE, ...) \
    throw TYPE(fmt::format(__VA_ARGS__), ::ptxlab::source_location(__FILE__, __LINE__))
