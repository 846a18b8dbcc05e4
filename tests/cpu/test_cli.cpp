// The ptxlab executable: help, the no-GPU behaviour, data, and flag validation.
#include "../helpers.hpp"

#include <doctest/doctest.h>

using namespace ptxlab::test;

TEST_CASE("cli: --help lists the commands and the exit codes") {
    RunResult r = run_command(ptxlab_cmd("--help"));
    CHECK(r.code == 0);
    for (const char* c : {"check", "data", "verify", "train", "eval"}) CHECK(r.output.find(c) != std::string::npos);
    CHECK(r.output.find("Exit codes") != std::string::npos);
    RunResult none = run_command(ptxlab_cmd(""));
    CHECK(none.code == 2);
}

TEST_CASE("cli: commands that need a GPU fail fast with one sentence when there is no driver") {
    const std::string env = "PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 ";
    for (const char* cmd : {"train", "verify", "eval --load x.safetensors"}) {
        CAPTURE(cmd);
        RunResult r = run_command(env + ptxlab_cmd(cmd));
        CHECK(r.code == 3);
        CHECK(r.output.find("ptxlab: no NVIDIA driver found (/nonexistent/libcuda.so.1") != std::string::npos);
        CHECK(r.output.find("terminate") == std::string::npos);
    }
    // The toolkit's stub library is recognised as such.
    RunResult stub = run_command("PTXLAB_LIBCUDA=" CUDA_STUB_LIBCUDA " " + ptxlab_cmd("train"));
    CHECK(stub.code == 3);
    CHECK(stub.output.find("stub library") != std::string::npos);
}

TEST_CASE("cli: bad training flags are rejected with the reason before any GPU work") {
    struct Case {
        const char* flags;
        const char* reason;
    };
    for (Case c : {Case{"--batch 0", "--batch must be at least 1"},
                   Case{"--lr -1", "--lr must be a positive finite number"},
                   Case{"--lr nan", "--lr"},
                   Case{"--lr 0", "--lr must be a positive"},
                   Case{"--target 1.5", "--target must be in (0, 1]"},
                   Case{"--target 0", "--target must be in (0, 1]"},
                   Case{"--layers 784,0,10", "out of range"},
                   Case{"--layers 784,10", "give 3 (I,H,O) or 4"},
                   Case{"--hidden 0", "--hidden must be at least 1"},
                   Case{"--kernels fastest", "unknown kernel set 'fastest'"},
                   Case{"--loss hinge", "unknown loss 'hinge'"},
                   Case{"--preset colab", "unknown preset 'colab'"},
                   Case{"--epochs 0", "--epochs must be at least 1"}}) {
        CAPTURE(c.flags);
        RunResult r = run_command("PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 " + ptxlab_cmd(std::string("train ") + c.flags));
        CHECK(r.code == 2);
        CHECK(r.output.find(c.reason) != std::string::npos);
    }
}

TEST_CASE("cli: data validates a dataset and reports a missing one with how to fetch it") {
    RunResult missing = run_command(ptxlab_cmd("data /nonexistent/mnist"));
    CHECK(missing.code == 2);
    CHECK(missing.output.find("tools/fetch_mnist.sh") != std::string::npos);
}
