#include "process.hpp"

#include "error.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace ptxlab {

std::string ProcessResult::status_text() const {
    if (signal) return fmt::format("was killed by signal {} ({})", signal, strsignal(signal));
    return fmt::format("exited with status {}", exit_code);
}

namespace {

// Closes a file descriptor when it goes out of scope.
struct Fd {
    int fd = -1;
    ~Fd() { reset(); }
    void reset() {
        if (fd >= 0) ::close(fd);
        fd = -1;
    }
};

void make_pipe(Fd& r, Fd& w, const std::string& exe) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
        PTXLAB_THROW(Error, "cannot run {}: pipe2 failed: {}", exe, std::strerror(errno));
    r.fd = p[0];
    w.fd = p[1];
}

// Reads both pipes to their end (a child that fills one while we wait on the other would hang).
void drain(Fd& out, Fd& err, ProcessResult& res, const std::string& exe, size_t max_output) {
    char buf[65536];
    while (out.fd >= 0 || err.fd >= 0) {
        pollfd fds[2] = {{out.fd, POLLIN, 0}, {err.fd, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
            if (errno == EINTR) continue;
            PTXLAB_THROW(Error, "reading the output of {} failed: poll: {}", exe, std::strerror(errno));
        }
        for (int i = 0; i < 2; ++i) {
            Fd& fd = i == 0 ? out : err;
            if (fd.fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = ::read(fd.fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) PTXLAB_THROW(Error, "reading the output of {} failed: {}", exe, std::strerror(errno));
            if (n == 0) fd.reset();
            else (i == 0 ? res.out : res.err).append(buf, static_cast<size_t>(n));
            if (res.out.size() + res.err.size() > max_output)
                PTXLAB_THROW(Error, "{} printed more than {} MiB; it was stopped (is it the real tool?)", exe,
                             max_output >> 20);
        }
    }
}

}  // namespace

ProcessResult run_process(const std::string& exe, const std::vector<std::string>& args, size_t max_output) {
    Fd out_r, out_w, err_r, err_w;
    make_pipe(out_r, out_w, exe);
    make_pipe(err_r, err_w, exe);
    posix_spawn_file_actions_t fa;
    if (int e = posix_spawn_file_actions_init(&fa))
        PTXLAB_THROW(Error, "cannot run {}: posix_spawn_file_actions_init: {}", exe, std::strerror(e));
    std::unique_ptr<posix_spawn_file_actions_t, void (*)(posix_spawn_file_actions_t*)> fa_guard(
        &fa, [](posix_spawn_file_actions_t* p) { posix_spawn_file_actions_destroy(p); });
    int e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!e) e = posix_spawn_file_actions_adddup2(&fa, out_w.fd, 1);
    if (!e) e = posix_spawn_file_actions_adddup2(&fa, err_w.fd, 2);
    if (e) PTXLAB_THROW(Error, "cannot run {}: posix_spawn_file_actions: {}", exe, std::strerror(e));

    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = -1;
    e = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
    if (e) PTXLAB_THROW(Error, "cannot start {}: {}", exe, std::strerror(e));
    out_w.reset();  // the child holds its own copies: EOF comes when it exits
    err_w.reset();

    ProcessResult res;
    try {
        drain(out_r, err_r, res, exe, max_output);
    } catch (...) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        throw;
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) PTXLAB_THROW(Error, "waiting for {} failed: {}", exe, std::strerror(errno));
    if (WIFEXITED(status)) res.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) res.signal = WTERMSIG(status);
    return res;
}

TempFile::TempFile(const std::string& bytes, const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/ptxlab-XXXXXX" + suffix;
    int fd = ::mkstemps(tmpl.data(), static_cast<int>(suffix.size()));
    if (fd < 0) PTXLAB_THROW(Error, "cannot create a temporary file {}: {}", tmpl, std::strerror(errno));
    path_ = tmpl;
    watch_ = std::make_unique<RemoveOnSignal>(path_);
    Fd guard{fd};
    size_t done = 0;
    while (done < bytes.size()) {
        ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            ::unlink(path_.c_str());
            PTXLAB_THROW(Error, "writing the temporary file {} failed: {}", path_, std::strerror(err));
        }
        done += static_cast<size_t>(n);
    }
    guard.fd = -1;
    if (::close(fd) != 0) {
        const int err = errno;
        ::unlink(path_.c_str());
        PTXLAB_THROW(Error, "writing the temporary file {} failed: {}", path_, std::strerror(err));
    }
}

TempFile::~TempFile() { ::unlink(path_.c_str()); }

bool is_executable_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace ptxlab
