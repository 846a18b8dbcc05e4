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
#include <fcntl.h>
#include <iostream>
#include <unistd.h>

namespace {

// Whether the "(raised at host/FILE.cpp:LINE)" line follows an error: with --verbose only.
bool g_verbose = false;

// Prints to stderr and never throws: an error while reporting an error (stderr closed, a full
// disk) must not end in std::terminate. What cannot be written is lost; the exit code stays.
template <class... Args> void say(fmt::format_string<Args...> f, Args&&... args) noexcept {
    try {
        const std::string text = fmt::format(f, std::forward<Args>(args)...);
        std::fwrite(text.data(), 1, text.size(), stderr);
        std::fflush(stderr);
    } catch (...) {
    }
}

// A standard stream that was closed before ptxlab started (`2>&-`) would be the number the next
// open() returns: a checkpoint or log would then receive the diagnostics. Standard input and
// error are pointed at /dev/null instead; a closed standard output is refused, since every
// command's result goes there.
bool standard_streams_open() {
    for (int fd : {0, 2})
        if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            const int n = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (n >= 0 && n != fd) ::close(n);
        }
    if (::fcntl(1, F_GETFD) < 0 && errno == EBADF) {
        const int n = ::open("/dev/null", O_WRONLY);  // takes fd 1, so that nothing else does
        (void)n;
        say("ptxlab: error: standard output is closed; run ptxlab with it open (>/dev/null to discard it)\n");
        return false;
    }
    return true;
}

// The commands and their options, the footer (exit codes, environment) and CLI11's refusals in
// ptxlab's form.
void configure(CLI::App& app, ptxlab::cli::Command& chosen) {
    using namespace ptxlab;
    app.footer(
        "Exit codes: 0 success; 1 a check, verification or run failed; 2 bad flags or input files;\n"
        "3 the command needs an NVIDIA GPU and none is usable; 4 a kernel ran past --timeout;\n"
        "130 interrupted (Ctrl-C).\n"
        "Environment: PTXLAB_PTX_DIR (kernel directory), PTXLAB_DATA_DIR (dataset directory),\n"
        "PTXLAB_REFERENCE_DIR (the CUDA C twins; default $PTXLAB_PTX_DIR/reference or the tree's\n"
        "ptx/reference), PTXLAB_LIBCUDA (driver library to open instead of libcuda.so.1),\n"
        "PTXLAB_NVDISASM (the nvdisasm that `ptxlab sass` runs; where it looks otherwise: ptxlab sass --help),\n"
        "PTXLAB_COMPUTE_SANITIZER (the compute-sanitizer that `verify --racecheck` and `--synccheck` run),\n"
        "PTXLAB_CUPTI_LIB (the libcupti that `ptxlab profile` opens; where it looks otherwise: ptxlab profile --help).\n"
        "CUDA_CACHE_DISABLE: ptxlab sets it to 1 unless you set it, so that the driver's JIT always runs ptxas\n"
        "and its info log (registers, spills) is never empty.");
    app.require_subcommand(1);
    app.set_version_flag("--version", "ptxlab 0.1.0");
    app.add_flag("--verbose", g_verbose, "with an error, also print where in ptxlab's source it was raised");
    app.fallthrough();  // --verbose after the subcommand too
    // CLI11's own refusals (unknown flags, values that do not convert) in ptxlab's form.
    app.failure_message([](const CLI::App* a, const CLI::Error& e) {
        std::string help = "ptxlab --help";
        for (const CLI::App* sub : a->get_subcommands())
            help = fmt::format("ptxlab {} --help", sub->get_name());
        return fmt::format("ptxlab: error: {}\n        (see {})\n", e.what(), help);
    });

    cli::setup_check(app, chosen);
    cli::setup_data(app, chosen);
    cli::setup_verify(app, chosen);
    cli::setup_train(app, chosen);
    cli::setup_eval(app, chosen);
    cli::setup_bench(app, chosen);
    cli::setup_new(app, chosen);
    cli::setup_sass(app, chosen);
    cli::setup_profile(app, chosen);
}

// An unknown first word: name it and list the commands (CLI11 would say only that one is
// required). Returns true when it refused one.
bool refuse_unknown_command(CLI::App& app, int argc, char** argv) {
    if (argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool known = false;
        for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
            names += (names.empty() ? "" : ", ") + sub->get_name();
            known |= sub->get_name() == argv[1];
        }
        if (!known) {
            say("ptxlab: error: unknown command '{}' (commands: {}; see ptxlab --help)\n", argv[1], names);
            return true;
        }
    }
    return false;
}

int run(int argc, char** argv) {
    using namespace ptxlab;
    CLI::App app{
        "ptxlab: a PTX-first kernel lab. Hand-written PTX kernels for an MNIST MLP, each proven equal\n"
        "to a CUDA C twin compiled by NVRTC, and a trainer that runs them.\n\n"
        "Typical loop: edit ptx/NAME.ptx, run `ptxlab check` (no GPU needed), then `ptxlab verify`."};
    cli::Command chosen;
    configure(app, chosen);
    if (refuse_unknown_command(app, argc, argv)) return kExitUsage;

    auto report = [](const char* kind, const Error& e) {
        say("ptxlab: {}{}\n", kind, e.what());
        if (g_verbose && !e.where().empty()) say("        (raised at {})\n", e.where());
    };
    try {
        try {
            app.parse(argc, argv);  // flag callbacks (cli/flags.hpp) throw InputError, handled below
        } catch (const CLI::ParseError& e) {
            int code = app.exit(e);
            return code == 0 ? kExitOk : kExitUsage;
        }
        return chosen ? chosen() : kExitUsage;
    } catch (const NoGpuError& e) {
        report("", e);
        say("        this command needs an NVIDIA GPU with driver >= 580; `ptxlab check` and `ptxlab data` work "
            "without one\n");
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
        say("ptxlab: error: out of host memory\n");
        return kExitFailure;
    } catch (const std::exception& e) {
        if (std::ferror(stdout)) {  // fmt::print throws when stdout cannot be written (a full disk, /dev/full)
            say("ptxlab: error: writing to standard output failed: {}\n", e.what());
            return kExitFailure;
        }
        say("ptxlab: internal error: {}\n", e.what());
        return kExitFailure;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (!standard_streams_open()) return ptxlab::kExitFailure;
    int code = run(argc, argv);
    // Output that could not be written is a failure, as in coreutils: `ptxlab data >/dev/full`
    // must not exit 0. std::cout (CLI11's --help) writes through stdout, so one check covers both.
    errno = 0;
    std::cout.flush();
    const bool flushed = std::fflush(stdout) == 0;
    if (!flushed || std::ferror(stdout) || !std::cout) {
        const int err = errno;
        say("ptxlab: error: writing to standard output failed{}{}\n", err ? ": " : "", err ? std::strerror(err) : "");
        if (code == ptxlab::kExitOk) code = ptxlab::kExitFailure;
    }
    return code;
}
