#include "files.hpp"

#include "error.hpp"

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <optional>
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

// The paths RemoveOnSignal watches, read by a signal handler: fixed slots, each published by
// an atomic flag after its path is written.
struct WatchedPath {
    std::atomic<bool> used{false};
    char path[PATH_MAX] = {};
};
WatchedPath g_watched[16];
std::mutex g_watched_mutex;  // taking and giving back slots (not the handler, which only reads)

extern "C" void remove_watched_and_reraise(int sig) {
    for (auto& w : g_watched)
        if (w.used.load()) ::unlink(w.path);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

void install_removal_handlers() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction old {};
            if (::sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
                continue;
            struct sigaction sa {};
            sa.sa_handler = remove_watched_and_reraise;
            sigemptyset(&sa.sa_mask);
            ::sigaction(sig, &sa, nullptr);
        }
    });
}

}  // namespace

RemoveOnSignal::RemoveOnSignal(const std::string& path) {
    if (path.size() >= PATH_MAX) return;
    install_removal_handlers();
    std::lock_guard lock(g_watched_mutex);
    for (int i = 0; i < int(std::size(g_watched)); ++i)
        if (!g_watched[i].used.load()) {
            std::memcpy(g_watched[i].path, path.c_str(), path.size() + 1);
            g_watched[i].used.store(true);
            slot_ = i;
            return;
        }
}

RemoveOnSignal::~RemoveOnSignal() {
    if (slot_ < 0) return;
    std::lock_guard lock(g_watched_mutex);
    g_watched[slot_].used.store(false);
}

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

void require_output_file(const std::string& path, const std::string& what, bool stream) {
    if (path.empty()) refuse(path, what, "is an empty path", __FILE__, __LINE__);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (stream && S_ISCHR(st.st_mode)) {
            if (::access(path.c_str(), W_OK) != 0) refuse(path, what, errno_reason(errno), __FILE__, __LINE__);
            return;
        }
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

void write_file_atomically(const std::string& path, const std::string& bytes, const std::string& what) {
    struct stat st {};
    const bool device = ::stat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
    std::string tmp = device ? path : path + ".tmp-XXXXXX";
    const int fd = device ? ::open(path.c_str(), O_WRONLY | O_CLOEXEC) : ::mkstemp(tmp.data());
    if (fd < 0) refuse(path, what, "cannot be written: " + std::string(std::strerror(errno)), __FILE__, __LINE__);
    std::optional<RemoveOnSignal> watch;
    if (!device) watch.emplace(tmp);
    auto fail = [&](int err) {
        ::close(fd);
        if (!device) ::unlink(tmp.c_str());
        refuse(path, what, "cannot be written: " + std::string(std::strerror(err)), __FILE__, __LINE__);
    };
    for (size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(errno);
        done += static_cast<size_t>(n);
    }
    const mode_t mask = ::umask(0);  // mkstemp makes 0600; give the file the mode a plain create would
    ::umask(mask);
    if (!device && ::fchmod(fd, 0666 & ~mask) != 0) fail(errno);
    if (!device && ::fsync(fd) != 0) fail(errno);
    if (::close(fd) != 0) {
        const int err = errno;
        if (!device) ::unlink(tmp.c_str());
        refuse(path, what, "cannot be written: " + std::string(std::strerror(err)), __FILE__, __LINE__);
    }
    if (!device && ::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        refuse(path, what, "cannot be written: " + std::string(std::strerror(err)), __FILE__, __LINE__);
    }
}

}  // namespace ptxlab
