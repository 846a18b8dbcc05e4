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
void require_output_file(const std::string& path, const std::string& what);

// "a regular file", "a directory", "a FIFO", "a character device", ... for an st_mode.
std::string file_kind(unsigned mode);

}  // namespace ptxlab
