// Running an external tool (nvdisasm) without a shell, and the temporary files it reads.
// Every failure says which program, which file and why.
#pragma once

#include "files.hpp"

#include <memory>
#include <string>
#include <vector>

namespace ptxlab {

struct ProcessResult {
    int exit_code = -1;  // the exit status, or -1 when a signal ended it
    int signal = 0;      // the signal that ended it, or 0
    std::string out, err;
    bool ok() const { return exit_code == 0; }
    // "exited with status 2" / "was killed by signal 9 (Killed)"
    std::string status_text() const;
};

// Runs `exe` (a path) with `args` as argv[1..], standard input /dev/null, the environment
// inherited, and captures standard output and standard error apart. A program that runs and
// fails is a result; one that cannot be started (missing, not executable, not a program)
// throws Error naming `exe` and the reason. A program that prints more than `max_output` bytes
// (both streams together) is killed, and that is an Error saying so: a runaway tool costs
// seconds and a bounded amount of memory, not minutes and gigabytes.
inline constexpr size_t kMaxProcessOutput = size_t(64) << 20;
ProcessResult run_process(const std::string& exe, const std::vector<std::string>& args,
                          size_t max_output = kMaxProcessOutput);

// A file in $TMPDIR (or /tmp) holding `bytes`, removed when this object goes, and by Ctrl-C
// (files.hpp: RemoveOnSignal).
class TempFile {
public:
    TempFile(const std::string& bytes, const std::string& suffix);
    ~TempFile();
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
    std::unique_ptr<RemoveOnSignal> watch_;
};

// Whether `path` is a regular file this process may execute.
bool is_executable_file(const std::string& path);

}  // namespace ptxlab
