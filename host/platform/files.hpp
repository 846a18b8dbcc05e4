// Opening the files and directories a user names: every input path goes through here, so
// that a directory, a FIFO, a device or an unreadable file is refused at once with the
// reason (from stat/errno) instead of hanging or failing later with a vague message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ptxlab {

// Why `path` cannot be read as a regular file, or "" when it can be opened:
// "does not exist", "is a directory", "is a FIFO, not a regular file", "permission denied", ...
std::string unusable_file_reason(const std::string& path);

// Opens `path` for reading and returns the file descriptor (O_CLOEXEC). Refuses anything but
// a regular file with InputError "<what> '<path>' <reason>" (or "<path>: <reason>" when what is empty).
// A FIFO is refused without blocking (the open is non-blocking; the flag is cleared afterwards).
int open_input_file(const std::string& path, const std::string& what = {});

// Reads a whole regular file (through open_input_file). Refuses files over max_bytes.
std::vector<uint8_t> read_input_file(const std::string& path, size_t max_bytes, const std::string& what = {});

// Refuses a path that is not a directory: "does not exist", "is a regular file, not a directory", ...
void require_directory(const std::string& path, const std::string& what);

// Refuses, before any work is done, an output path that cannot be written: an empty path, a
// directory, a FIFO or device, a missing or unwritable parent directory. `what` names the flag.
// A `stream` (a log written as it goes, never renamed into place) may also be a character
// device such as /dev/null or /dev/stderr.
void require_output_file(const std::string& path, const std::string& what, bool stream = false);

// Writes `bytes` to a temporary file beside `path` and renames it into place: `path` is either
// its old self or the whole new content, never half-written, and nothing is created when the
// write fails. A character device (/dev/null, /dev/stdout) is written directly.
void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& what);

// While it lives, `path` is removed if the process is ended by SIGINT, SIGTERM or SIGHUP (then
// the signal's default action follows): a temporary file never outlives a Ctrl-C. Up to 16 at
// once (more are not watched). The handlers are installed only for signals whose action is the
// default, so a caller's own handler (train's Ctrl-C) and an ignored signal (nohup) stay.
class RemoveOnSignal {
public:
    explicit RemoveOnSignal(const std::string& path);
    ~RemoveOnSignal();
    RemoveOnSignal(const RemoveOnSignal&) = delete;
    RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

private:
    int slot_ = -1;
};

// "a regular file", "a directory", "a FIFO", "a character device", ... for an st_mode.
std::string file_kind(unsigned mode);

}  // namespace ptxlab
