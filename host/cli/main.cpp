// ptxlab: a PTX-first kernel lab. This file only wires the subcommands together
// and turns exceptions into messages and exit codes.
#include "commands.hpp"
#include "cuda.hpp"
#include "error.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
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
        "PTXLAB_LIBCUDA (driver library to open instead of libcuda.so.1).");
    app.require_subcommand(1);
    app.set_version_flag("--version", "ptxlab 0.1.0");

    cli::Command chosen;
    cli::setup_check(app, chosen);
    cli::setup_data(app, chosen);
    cli::setup_verify(app, chosen);
    cli::setup_train(app, chosen);
    cli::setup_eval(app, chosen);
    cli::setup_bench(app, chosen);

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
        fmt::print(stderr, "ptxlab: internal error: {}\n", e.what());
        return kExitFailure;
    }
}
