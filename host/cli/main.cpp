// ptxlab: a PTX-first kernel lab. This file only wires the subcommands together
// and turns exceptions into messages and exit codes.
#include "commands.hpp"
#include "cuda.hpp"
#include "error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace {

int run(int argc, char** argv) {
    using namespace ptxlab;
    CLI::App app{
        "ptxlab: a PTX-first kernel lab. Hand-written PTX kernels for an MNIST MLP, each proven equal\n"
        "to a CUDA C twin compiled by NVRTC, and a trainer that runs them.\n\n"
        "Typical loop: edit ptx/NAME.ptx, run `ptxlab check` (no GPU needed), then `ptxlab verify`."};
    app.footer(
        "Exit codes: 0 success; 1 a check, verification or run failed; 2 bad flags or input files;\n"
        "3 the command needs an NVIDIA GPU and none is usable; 4 a kernel ran past --timeout;\n"
        "130 interrupted (Ctrl-C).\n"
        "Environment: PTXLAB_PTX_DIR (kernel directory), PTXLAB_DATA_DIR (dataset directory),\n"
        "PTXLAB_REFERENCE_DIR (the CUDA C twins; default $PTXLAB_PTX_DIR/reference or the tree's\n"
        "ptx/reference), PTXLAB_LIBCUDA (driver library to open instead of libcuda.so.1),\n"
        "PTXLAB_NVDISASM (the nvdisasm that `ptxlab sass` runs; default: $CUDA_HOME/bin, then PATH).");
    app.require_subcommand(1);
    app.set_version_flag("--version", "ptxlab 0.1.0");

    cli::Command chosen;
    cli::setup_check(app, chosen);
    cli::setup_data(app, chosen);
    cli::setup_verify(app, chosen);
    cli::setup_train(app, chosen);
    cli::setup_eval(app, chosen);
    cli::setup_bench(app, chosen);
    cli::setup_new(app, chosen);
    cli::setup_sass(app, chosen);

    // An unknown first word: name it and list the commands (CLI11 would say only that one is required).
    if (argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool known = false;
        for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
            names += (names.empty() ? "" : ", ") + sub->get_name();
            known |= sub->get_name() == argv[1];
        }
        if (!known) {
            fmt::print(stderr, "ptxlab: error: unknown command '{}' (commands: {}; see ptxlab --help)\n", argv[1],
                       names);
            return kExitUsage;
        }
    }

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int code = app.exit(e);
        return code == 0 ? kExitOk : kExitUsage;
    }

    auto report = [](const char* kind, const Error& e) {
        fmt::print(stderr, "ptxlab: {}{}\n", kind, e.what());
        if (!e.where().empty()) fmt::print(stderr, "        (raised at {})\n", e.where());
    };
    try {
        return chosen ? chosen() : kExitUsage;
    } catch (const NoGpuError& e) {
        report("", e);
        fmt::print(stderr, "        this command needs an NVIDIA GPU with driver >= 580; `ptxlab check` and "
                           "`ptxlab data` work without one\n");
        return kExitNoGpu;
    } catch (const TimeoutError& e) {
        report("error: ", e);
        // The kernel is still running, and a normal exit would wait for it in the driver's
        // teardown. Leave at once: the kernel driver ends the GPU context with the process.
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(kExitTimeout);
    } catch (const InputError& e) {
        report("error: ", e);
        return kExitUsage;
    } catch (const Error& e) {
        report("error: ", e);
        return kExitFailure;
    } catch (const std::bad_alloc&) {
        fmt::print(stderr, "ptxlab: error: out of host memory\n");
        return kExitFailure;
    } catch (const std::exception& e) {
        if (std::ferror(stdout)) {  // fmt::print throws when stdout cannot be written (a full disk, /dev/full)
            fmt::print(stderr, "ptxlab: error: writing to standard output failed: {}\n", e.what());
            return kExitFailure;
        }
        fmt::print(stderr, "ptxlab: internal error: {}\n", e.what());
        return kExitFailure;
    }
}

}  // namespace

int main(int argc, char** argv) {
    int code = run(argc, argv);
    // Output that could not be written is a failure, as in coreutils: `ptxlab data >/dev/full`
    // must not exit 0. std::cout (CLI11's --help) writes through stdout, so one check covers both.
    errno = 0;
    std::cout.flush();
    const bool flushed = std::fflush(stdout) == 0;
    if (!flushed || std::ferror(stdout) || !std::cout) {
        const int err = errno;
        fmt::print(stderr, "ptxlab: error: writing to standard output failed{}{}\n", err ? ": " : "",
                   err ? std::strerror(err) : "");
        if (code == ptxlab::kExitOk) code = ptxlab::kExitFailure;
    }
    return code;
}
