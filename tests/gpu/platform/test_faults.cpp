// Faults a lab must survive: a batch that does not fit in GPU memory, a kernel that never
// finishes, Ctrl-C during training. Each runs the ptxlab executable and checks its message,
// its exit code and what it leaves behind.
#include "../../helpers.hpp"
#include "../common.hpp"
#include "ptx_text.hpp"
#include "safetensors.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace ptxlab;
using namespace ptxlab::test;

TEST_CASE("faults: a batch too large for GPU memory gives a clear message naming the buffer") {
    // Per-sample gradients of a 784-100000-10 network for 60000 samples: about 19 PB.
    RunResult r = run_command(ptxlab_cmd("train --kernels ptx --hidden 100000 --batch 60000 --max-steps 1 --no-progress"));
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("out of GPU memory allocating buffer 'gW1 (per-sample)'") != std::string::npos);
    CHECK(r.output.find("MiB free of") != std::string::npos);
}

TEST_CASE("faults: Ctrl-C stops training after the current chunk, saves, and prints the summary") {
    TempDir t;
    const std::string out = t.file("out.txt"), model = t.file("m.safetensors");
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        // The seed kernels: slow enough (about 14 ms a step) that training is surely under way.
        execl(PTXLAB_BINARY, PTXLAB_BINARY, "train", "--kernels", "ptx", "--epochs", "1", "--no-progress", "--save",
              model.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    // Wait until the run has started training (its header is printed after loading and JIT).
    bool started = false;
    for (int i = 0; i < 600 && !started; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::ifstream f(out);
        std::string text((std::istreambuf_iterator<char>(f)), {});
        started = text.find("ptxlab train:") != std::string::npos;
    }
    REQUIRE(started);
    std::this_thread::sleep_for(std::chrono::seconds(3));
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    std::ifstream f(out);
    std::string text((std::istreambuf_iterator<char>(f)), {});
    CAPTURE(text);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 130);
    CHECK(text.find("summary: interrupted after step") != std::string::npos);
    CHECK(text.find("saved " + model) != std::string::npos);
    NetParams back = load_safetensors(model);  // complete and loadable
    CHECK(back.sizes == std::vector<unsigned>{784, 128, 10});
    size_t files = 0;  // out.txt and the checkpoint: no temporary file left behind
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(t.path)) ++files;
    CHECK(files == 2);
    // The message says how to continue, and --resume does.
    CHECK(text.find("continue with the same flags and --resume " + model) != std::string::npos);
    const size_t at = text.find("interrupted after step ");
    REQUIRE(at != std::string::npos);
    const unsigned step = static_cast<unsigned>(std::stoul(text.substr(at + 23)));
    RunResult again = run_command(ptxlab_cmd("train --kernels ptx --epochs 1 --no-progress --resume " + model +
                                             " --max-steps " + std::to_string(step + 8)));
    CAPTURE(again.output);
    CHECK(again.code == 0);
    CHECK(again.output.find(fmt::format("resumed from {} at step {}", model, step)) != std::string::npos);
    CHECK(again.output.find(fmt::format("stopped after {} steps", step + 8)) != std::string::npos);
}

TEST_CASE("faults: a kernel that never finishes is stopped by --timeout and named") {
    // gather.ptx with an injected endless loop: every thread spins on a value no index has.
    TempDir t;
    std::string src = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/gather.ptx").text;
    const std::string store = "    // dst[e] = v.\n";
    REQUIRE(src.find(store) != std::string::npos);
    src.replace(src.find(store), store.size(),
                "SPIN:\n    ld.volatile.global.u32  src_row, [idx];\n    setp.ne.u32     idle, src_row, 0xDEADBEEF;\n"
                "    @idle bra       SPIN;\n" + store);
    write_text(t.file("gather.ptx"), src);
    // coreutils' timeout is the backstop: if the watchdog fails, the test fails after 60 s instead of hanging.
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = run_command("timeout -s KILL 60 " +
                              ptxlab_cmd("verify --kernel gather --shape 10,10,10 --timeout 2 --ptx-dir " + t.path.string()));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CAPTURE(r.output);
    CHECK(r.code == 4);  // kExitTimeout
    CHECK(r.output.find("kernel 'gather' (") != std::string::npos);
    CHECK(r.output.find("did not finish within 2 s (--timeout)") != std::string::npos);
    CHECK(seconds < 30);
}
