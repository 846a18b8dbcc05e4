#include "files.hpp"

#include "error.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ptxlab {

namespace {

std::string errno_reason(int err) {
    switch (err) {
        case ENOENT: return "does not exist";
        case EACCES: return "permission denied";
        case ENOTDIR: return "does not exist (a part of the path is not a directory)";
        case ELOOP: return "is a symbolic link loop";
        case ENAMETOOLONG: return "is too long a name";
        default: {
            std::string s = std::strerror(err);
            if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
            return "cannot be opened: " + s;
        }
    }
}

std::string not_regular_reason(unsigned mode) {
    if (S_ISDIR(mode)) return "is a directory";
    return "is " + file_kind(mode) + ", not a regular file";
}

[[noreturn]] void refuse(const std::string& path, const std::string& what, const std::string& reason,
                         const char* file, int line) {
    throw InputError(what.empty() ? fmt::format("{}: {}", path, reason) : fmt::format("{} '{}' {}", what, path, reason),
                     source_location(file, line));
}

}  // namespace

std::string file_kind(unsigned mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

std::string unusable_file_reason(const std::string& path) {
    if (path.empty()) return "is an empty path";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return errno_reason(errno);
    if (!S_ISREG(st.st_mode)) return not_regular_reason(st.st_mode);
    if (::access(path.c_str(), R_OK) != 0) return errno_reason(errno);
    return {};
}

int open_input_file(const std::string& path, const std::string& what) {
    if (path.empty()) refuse(path, what, "is an empty path", __FILE__, __LINE__);
    // Non-blocking, so that opening a FIFO with no writer returns at once instead of hanging.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        struct stat st {};
        if (err == EACCES || ::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode))
            refuse(path, what, errno_reason(err), __FILE__, __LINE__);
        refuse(path, what, not_regular_reason(st.st_mode), __FILE__, __LINE__);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        refuse(path, what, errno_reason(err), __FILE__, __LINE__);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        refuse(path, what, not_regular_reason(st.st_mode), __FILE__, __LINE__);
    }
    int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

std::vector<uint8_t> read_input_file(const std::string& path, size_t max_bytes, const std::string& what) {
    int fd = open_input_file(path, what);
    std::vector<uint8_t> bytes;
    uint8_t buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            ::close(fd);
            refuse(path, what, "cannot be read: " + std::string(std::strerror(err)), __FILE__, __LINE__);
        }
        if (n == 0) break;
        if (bytes.size() + size_t(n) > max_bytes) {
            ::close(fd);
            refuse(path, what, fmt::format("is over {} bytes; refusing to read it", max_bytes), __FILE__, __LINE__);
        }
        bytes.insert(bytes.end(), buf, buf + n);
    }
    ::close(fd);
    return bytes;
}

void require_directory(const std::string& path, const std::string& what) {
    if (path.empty()) refuse(path, what, "is an empty path", __FILE__, __LINE__);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) refuse(path, what, errno_reason(errno), __FILE__, __LINE__);
    if (!S_ISDIR(st.st_mode))
        refuse(path, what, "is " + file_kind(st.st_mode) + ", not a directory", __FILE__, __LINE__);
}

void require_output_file(const std::string& path, const std::string& what) {
    if (path.empty()) refuse(path, what, "is an empty path", __FILE__, __LINE__);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (!S_ISREG(st.st_mode)) refuse(path, what, "is " + file_kind(st.st_mode) + ", not a file to write", __FILE__, __LINE__);
        if (::access(path.c_str(), W_OK) != 0) refuse(path, what, errno_reason(errno), __FILE__, __LINE__);
        return;
    }
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    if (::stat(dir.c_str(), &st) != 0)
        refuse(path, what, "cannot be created: its directory " + dir + " " + errno_reason(errno), __FILE__, __LINE__);
    if (!S_ISDIR(st.st_mode))
        refuse(path, what, "cannot be created: " + dir + " is " + file_kind(st.st_mode), __FILE__, __LINE__);
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        refuse(path, what, "cannot be created in " + dir + ": " + errno_reason(errno), __FILE__, __LINE__);
}

}  // namespace ptxlab
