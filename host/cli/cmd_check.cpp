// ptxlab check [FILE...]: assemble PTX offline and compare parameter lists with the twins.
#include "commands.hpp"
#include "compile.hpp"
#include "kernels.hpp"

#include <filesystem>

namespace fs = std::filesystem;

namespace ptxlab::cli {

namespace {

struct CheckOptions {
    std::vector<std::string> files;
    std::string arch = "sm_90";
    std::string ptx_dir;
    bool no_twin = false;
};

// Checks one PTX file; returns the number of errors.
int check_file(const std::string& path, const std::string& twin_path, const CheckOptions& o) {
    int errors = 0;
    SourceFile src;
    try {
        src = read_source_file(path);
    } catch (const InputError& e) {
        fmt::print("{}\n", e.what());
        return 1;
    }
    AssemblyResult res = assemble_offline(src, o.arch);
    for (const auto& d : res.diagnostics) {
        fmt::print("{}", format_diagnostic(src, d));
        errors += d.severity != "warning";
    }
    if (!res.ok) {
        fmt::print("{}: FAIL (does not assemble for {})\n", path, o.arch);
        return std::max(errors, 1);
    }

    PtxInfo info = parse_ptx(src.text);
    const std::string stem = fs::path(path).stem().string();
    // What the host launches must match what the file declares.
    for (const auto& p : check_against_specs(info, path, stem)) {
        fmt::print("{}\n", p);
        ++errors;
    }
    // The twin's parameter lists, from the PTX that NVRTC emits.
    PtxInfo twin;
    bool have_twin = false;
    if (!o.no_twin && !twin_path.empty()) {
        try {
            NvrtcOutput out = nvrtc_compile(read_source_file(twin_path), virtual_arch_of(o.arch));
            if (!out.log.empty()) fmt::print("{}: NVRTC log:\n{}\n", twin_path, out.log);
            twin = parse_ptx(out.ptx);
            have_twin = true;
        } catch (const InputError& e) {
            fmt::print("{}\n", e.what());
            ++errors;
        }
    } else if (!o.no_twin) {
        fmt::print("{}: warning: no CUDA C twin ({}.cu in the reference directory)\n", path, stem);
    }

    for (const auto& e : info.entries) {
        const EntryResources* r = nullptr;
        for (const auto& x : res.entries)
            if (x.name == e.name) r = &x;
        std::string twin_note = "no twin";
        if (have_twin) {
            const PtxEntry* t = twin.find(e.name);
            if (!t) {
                twin_note = "MISSING in twin";
                fmt::print("{}:{}: error: entry '{}' has no counterpart in the twin {}\n", path, e.line, e.name,
                           twin_path);
                ++errors;
            } else if (t->signature() != e.signature()) {
                twin_note = "DIFFERS from twin";
                fmt::print("{}:{}: error: entry '{}' takes {} parameters {}\n", path, e.line, e.name, e.params.size(),
                           e.signature());
                fmt::print("{}: note: the twin's '{}' takes {} parameters {}\n", twin_path, e.name, t->params.size(),
                           t->signature());
                ++errors;
            } else {
                twin_note = "= twin";
            }
        }
        if (r)
            fmt::print("  {:<10} regs {:>3}  stack {:>4}  smem {:>5}  lmem {:>4}  spill st/ld {}/{}  params {:>2} {}\n",
                       e.name, r->registers, r->stack, r->shared, r->local, r->spill_stores, r->spill_loads,
                       e.params.size(), twin_note);
        else
            fmt::print("  {:<10} params {:>2} {}\n", e.name, e.params.size(), twin_note);
    }
    if (have_twin)
        for (const auto& t : twin.entries)
            if (!info.find(t.name)) {
                fmt::print("{}: error: the twin {} has entry '{}' which this file lacks\n", path, twin_path, t.name);
                ++errors;
            }
    fmt::print("{}: {} ({} entr{}, {})\n", path, errors ? "FAIL" : "ok", info.entries.size(),
               info.entries.size() == 1 ? "y" : "ies", o.arch);
    return errors;
}

int run_check(const CheckOptions& o) {
    virtual_arch_of(o.arch);
    KernelDirs dirs = o.ptx_dir.empty() ? KernelDirs::from_environment() : KernelDirs::from_ptx_dir(o.ptx_dir);
    std::vector<std::pair<std::string, std::string>> work;  // ptx path, twin path
    if (o.files.empty()) {
        for (const auto& p : find_kernel_pairs(dirs)) work.emplace_back(p.ptx_path, p.reference_path);
        if (work.empty()) PTXLAB_THROW(InputError, "no .ptx files in {}", dirs.ptx_dir);
    } else {
        for (const auto& f : o.files) {
            fs::path twin = fs::path(f).parent_path() / "reference" / (fs::path(f).stem().string() + ".cu");
            std::error_code ec;
            work.emplace_back(f, fs::is_regular_file(twin, ec) ? twin.string() : std::string());
        }
    }
    int errors = 0, failed = 0;
    for (const auto& [ptx, twin] : work) {
        int e = check_file(ptx, twin, o);
        errors += e;
        failed += e > 0;
    }
    fmt::print("check: {} file{} checked, {} failed ({} error{})\n", work.size(), work.size() == 1 ? "" : "s", failed,
               errors, errors == 1 ? "" : "s");
    return errors ? kExitFailure : kExitOk;
}

}  // namespace

void setup_check(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<CheckOptions>();
    auto* sub = app.add_subcommand("check",
                                   "Assemble PTX offline (nvJitLink, no GPU needed) and report per entry point the "
                                   "registers, stack, shared memory and spills; compare each entry's parameter list "
                                   "with its CUDA C twin (ptx/reference/NAME.cu, compiled by NVRTC) and with what the "
                                   "host launches. Errors are printed as file:line with the source line.");
    sub->add_option("files", o->files, "PTX files to check (default: every .ptx in the kernel directory)");
    sub->add_option("--arch", o->arch, "target architecture")->capture_default_str();
    sub->add_option("--ptx-dir", o->ptx_dir, "kernel directory (default: $PTXLAB_PTX_DIR or the source tree's ptx/)");
    sub->add_flag("--no-twin", o->no_twin, "skip the comparison with the CUDA C twins");
    sub->callback([o, &chosen] { chosen = [o] { return run_check(*o); }; });
}

}  // namespace ptxlab::cli
