// ptxlab check [FILE...]: assemble PTX offline and compare parameter lists with the twins.
// Every file is checked, even after one fails; diagnostics go to stderr as
// `file:line: error: ...`, the per-entry report and the summary to stdout.
#include "commands.hpp"
#include "flags.hpp"
#include "compile.hpp"
#include "contract.hpp"
#include "files.hpp"
#include "kernels.hpp"
#include "ptx_lint.hpp"

#include <cstdio>
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

// "path:12: entry ..." -> "path:12: error: entry ..." (the messages of check_against_specs carry no tag).
std::string tag_error(const std::string& msg, const std::string& path) {
    size_t pos = msg.rfind(path, 0) == 0 ? path.size() : std::string::npos;
    if (pos == std::string::npos) return "error: " + msg;
    if (pos < msg.size() && msg[pos] == ':') {
        size_t p = pos + 1;
        while (p < msg.size() && std::isdigit(static_cast<unsigned char>(msg[p]))) ++p;
        if (p > pos + 1 && p < msg.size() && msg[p] == ':') pos = p;
        if (pos + 1 < msg.size() && msg[pos + 1] == ' ') return msg.substr(0, pos + 2) + "error: " + msg.substr(pos + 2);
    }
    return "error: " + msg;
}

void diag(const std::string& text) {
    std::fflush(stdout);  // keep the report and the diagnostics in order on a terminal
    fmt::print(stderr, "{}", text);
    if (!text.empty() && text.back() != '\n') fmt::print(stderr, "\n");
}

// Compiles the twin with NVRTC into `twin` and checks the contract's parameter types against it;
// returns the number of errors.
int compile_twin(const std::string& path, const std::string& twin_path, const SourceFile& src,
                 const ContractParse& contract, const CheckOptions& o, PtxInfo& twin, bool& have_twin) {
    int errors = 0;
    std::string why = unusable_file_reason(twin_path);
    if (!why.empty()) {
        diag(fmt::format("{}: error: no CUDA C twin: {} {} (twins come from $PTXLAB_REFERENCE_DIR, else "
                         "$PTXLAB_PTX_DIR/reference, else the tree's ptx/reference; --no-twins skips them)\n",
                         path, twin_path, why));
        return 1;
    }
    try {
        NvrtcOutput out = nvrtc_compile(read_source_file(twin_path), virtual_arch_of(o.arch));
        if (!out.log.empty()) diag(fmt::format("{}: warning: NVRTC log:\n{}\n", twin_path, out.log));
        twin = parse_ptx(out.ptx);
        have_twin = true;
        if (contract.contract)
            for (const auto& d : check_contract_twin(*contract.contract, twin, twin_path)) {
                diag(format_diagnostic(src, d));
                ++errors;
            }
    } catch (const InputError& e) {
        diag(tag_error(e.what(), twin_path));
        ++errors;
    }
    return errors;
}

// The per-entry report (resources, and the parameter list against the twin's when there is one);
// returns the number of errors.
int report_entries(const std::string& path, const PtxInfo& info, const AssemblyResult& res, const PtxInfo* twin,
                   const std::string& twin_path) {
    int errors = 0;
    const bool have_twin = twin != nullptr;
    for (const auto& e : info.entries) {
        const EntryResources* r = nullptr;
        for (const auto& x : res.entries)
            if (x.name == e.name) r = &x;
        std::string twin_note = "no twin";
        if (have_twin) {
            const PtxEntry* t = twin->find(e.name);
            if (!t) {
                twin_note = "MISSING in twin";
                diag(fmt::format("{}:{}: error: entry '{}' has no counterpart in the twin {}\n", path, e.line, e.name,
                                 twin_path));
                ++errors;
            } else if (t->signature() != e.signature()) {
                twin_note = "DIFFERS from twin";
                diag(fmt::format("{}:{}: error: entry '{}' takes {} parameters {}\n"
                                 "{}: note: the twin's '{}' takes {} parameters {}\n",
                                 path, e.line, e.name, e.params.size(), e.signature(), twin_path, e.name,
                                 t->params.size(), t->signature()));
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
        for (const auto& t : twin->entries)
            if (!info.find(t.name)) {
                diag(fmt::format("{}: error: the twin {} has entry '{}' which this file lacks\n", path, twin_path,
                                 t.name));
                ++errors;
            }
    return errors;
}

// Checks one PTX file; returns the number of errors.
int check_file(const std::string& path, std::string twin_path, const CheckOptions& o) {
    int errors = 0;
    SourceFile src;
    PtxInfo info;
    try {
        src = read_source_file(path);
        info = parse_ptx(src.text);
    } catch (const InputError& e) {
        std::string msg = e.what();
        diag(msg.rfind(path, 0) == 0 ? tag_error(msg, path) : fmt::format("{}: error: {}", path, msg));
        fmt::print("{}: FAIL\n", path);
        return 1;
    }
    // A file for sm_90a (wgmma) assembles only for sm_90a: its own target where that is --arch's.
    const std::string arch = assembly_arch(o.arch, info.target);
    AssemblyResult res = assemble_offline(src, arch);
    for (const auto& d : res.diagnostics) {
        diag(format_diagnostic(src, d));
        errors += d.severity == "error";
    }
    if (!res.ok) {
        fmt::print("{}: FAIL (does not assemble for {})\n", path, arch);
        return std::max(errors, 1);
    }
    if (info.entries.empty()) {
        diag(fmt::format("{}: error: no .entry in this file; a kernel file defines at least one "
                         "`.visible .entry NAME(...)`{}\n",
                         path, src.text.find(".func") != std::string::npos ? " (.func is a device function, not a kernel)" : ""));
        ++errors;
    }

    // The contract header (contract.hpp), if any: its problems, its entry against the file's, every
    // expression at every shape, its twin.
    ContractParse contract = parse_contract(src);
    if (contract.contract) {
        for (const auto& d : check_contract(*contract.contract, info)) contract.problems.push_back(d);
        for (const auto& d : check_contract_values(*contract.contract)) contract.problems.push_back(d);
        twin_path = contract.contract->twin_path();
    }
    for (const auto& d : contract.problems) diag(format_diagnostic(src, d));
    errors += static_cast<int>(contract.problems.size());
    // What ptxas accepts silently: warnings, not errors.
    for (const auto& d : param_width_warnings(src.text, info)) diag(format_diagnostic(src, d));

    const std::string stem = fs::path(path).stem().string();
    // What the host launches must match what the file declares.
    for (const auto& p : check_against_specs(info, path, stem)) {
        diag(tag_error(p, path));
        ++errors;
    }
    // The twin's parameter lists, from the PTX that NVRTC emits.
    PtxInfo twin;
    bool have_twin = false;
    // A broken contract header names no twin that can be trusted: its errors come first.
    if (!o.no_twin && (contract.contract || contract.problems.empty()))
        errors += compile_twin(path, twin_path, src, contract, o, twin, have_twin);
    // The files linked in for its `.extern .func` declarations (ptx_link.hpp), before the entries.
    for (const auto& l : res.linked) fmt::print("  links {} (the .visible .func of its .extern .func)\n", l);
    errors += report_entries(path, info, res, have_twin ? &twin : nullptr, twin_path);
    fmt::print("{}: {} ({} entr{}, {})\n", path, errors ? "FAIL" : "ok", info.entries.size(),
               info.entries.size() == 1 ? "y" : "ies", arch);
    return errors;
}

int run_check(const CheckOptions& o) {
    require_supported_arch(o.arch);
    if (!o.ptx_dir.empty() && !o.files.empty())
        PTXLAB_THROW(InputError,
                     "--ptx-dir {} and FILEs given together: --ptx-dir checks every .ptx in that directory, FILEs "
                     "check those files; give one or the other",
                     o.ptx_dir);
    // One meaning of --ptx-dir in check and verify: where the .ptx files are read. The twins
    // always come from the reference directory ($PTXLAB_REFERENCE_DIR, else $PTXLAB_PTX_DIR/reference,
    // else the tree's ptx/reference), as in verify.
    const KernelDirs env = KernelDirs::from_environment();
    KernelDirs dirs = env;
    if (!o.ptx_dir.empty()) {
        require_directory(o.ptx_dir, "--ptx-dir");
        dirs.ptx_dir = o.ptx_dir;
    }
    auto twin_of = [&](const std::string& ptx) {
        return (fs::path(env.reference_dir) / (fs::path(ptx).stem().string() + ".cu")).string();
    };
    std::vector<std::string> work;
    if (o.files.empty()) {
        for (const auto& p : find_kernel_pairs(dirs)) work.push_back(p.ptx_path);
        if (work.empty()) PTXLAB_THROW(InputError, "no .ptx files in {}", dirs.ptx_dir);
    } else {
        // A directory among the FILEs stands for its .ptx files (not its subdirectories).
        for (const auto& f : o.files) {
            std::error_code ec;
            if (!fs::is_directory(f, ec)) {
                work.push_back(f);
                continue;
            }
            const size_t before = work.size();
            for (const auto& p : find_kernel_pairs(KernelDirs::from_ptx_dir(f))) work.push_back(p.ptx_path);
            if (work.size() == before) work.push_back(f);  // no .ptx in it: reported as a directory
        }
    }
    int errors = 0, failed = 0;
    for (const auto& ptx : work) {
        int e = check_file(ptx, twin_of(ptx), o);
        errors += e;
        failed += e > 0;
    }
    fmt::print("check: {} file{}: {} ok, {} failed ({} error{}, {})\n", work.size(), work.size() == 1 ? "" : "s",
               work.size() - size_t(failed), failed, errors, errors == 1 ? "" : "s", o.arch);
    return errors ? kExitFailure : kExitOk;
}

}  // namespace

void setup_check(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<CheckOptions>();
    auto* sub = app.add_subcommand("check",
                                   "Assemble PTX offline (nvJitLink, no GPU needed) and report per entry point the "
                                   "registers, stack, shared memory and spills; compare each entry's parameter list "
                                   "(count, order, type and size) with its CUDA C twin (NAME.cu in the reference "
                                   "directory, compiled by NVRTC) and with what the host launches; qualifiers that "
                                   "change nothing the host passes (.ptr, .align N, which NVRTC writes for sm_100 and "
                                   "later) are not compared. A file without a .entry is an error. Every file is "
                                   "checked; errors go to stderr as file:line: error: with the source line, then a "
                                   "summary line; exit 1 when any file fails. A contract header (// @contract) is "
                                   "checked against the entry and its twin; ld.param of the wrong width is a warning.");
    sub->add_option("files", o->files,
                    "PTX files (or directories of them) to check (default: every .ptx in the kernel directory); a "
                    "file with a contract header (// @contract) is checked against it and uses the twin it names");
    sub->add_option("--arch", o->arch, "target architecture (sm_NN; those this nvJitLink accepts)")->capture_default_str();
    sub->add_option("--ptx-dir", o->ptx_dir,
                    "check every .ptx in this directory (default: $PTXLAB_PTX_DIR or the tree's ptx/); the twins "
                    "still come from the reference directory ($PTXLAB_REFERENCE_DIR, else $PTXLAB_PTX_DIR/reference, "
                    "else the tree's ptx/reference), as in verify. Not with FILEs")->check(kNonEmptyPath);
    sub->add_flag("--no-twins,--no-twin", o->no_twin,
                  "skip the comparison with the CUDA C twins (without it a missing twin is an error)");
    sub->callback([o, &chosen] { chosen = [o] { return run_check(*o); }; });
}

}  // namespace ptxlab::cli
