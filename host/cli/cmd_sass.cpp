// ptxlab sass FILE[:ENTRY] [--arch sm_90] [--diff OTHER.ptx]: what ptxas made of your PTX.
// The PTX is assembled in process (nvJitLink, with line info), the cubin disassembled by the
// toolkit's nvdisasm, and the SASS of each entry printed under the PTX lines it came from,
// with a summary (resources, instructions by class). --diff compares two versions.
#include "commands.hpp"
#include "flags.hpp"
#include "compile.hpp"
#include "nvdisasm.hpp"
#include "sass.hpp"
#include "sass_control.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

namespace ptxlab::cli {

namespace {

struct SassOptions {
    std::string target;  // FILE or FILE:ENTRY
    std::string arch = "sm_90";
    std::string diff;
    bool control = false;  // each instruction's control bits and the stall sums (nvdisasm -hex)
};

// One PTX file, assembled and (later) disassembled.
struct SassInput {
    SourceFile src;
    PtxInfo info;
    AssemblyResult res;
    SassSource source;
    std::vector<SassFunction> functions;
};


// Reads and assembles `path` for `arch` with line info; a file that does not assemble is an
// InputError carrying the same file:line diagnostics as `ptxlab check`. Warnings go to stderr.
SassInput assemble_input(const std::string& path, const std::string& arch) {
    SassInput in;
    in.src = read_source_file(path);
    in.info = parse_ptx(in.src.text);
    in.res = assemble_offline(in.src, arch, AssembleOptions{.line_info = true, .cubin = true});
    std::string diags;
    for (const auto& d : in.res.diagnostics) diags += format_diagnostic(in.src, d);
    if (!in.res.ok) {
        while (!diags.empty() && diags.back() == '\n') diags.pop_back();
        PTXLAB_THROW(InputError, "{} does not assemble for {}:\n{}", path, arch, diags);
    }
    if (!diags.empty()) {
        std::fflush(stdout);
        fmt::print(stderr, "{}", diags);
    }
    if (in.info.entries.empty())
        PTXLAB_THROW(InputError, "{}: no .entry in this file; `ptxlab sass` shows the SASS of kernels "
                                 "(`.visible .entry NAME(...)`)", path);
    if (in.res.cubin.empty()) PTXLAB_THROW(Error, "{}: nvJitLink returned an empty cubin for {}", path, arch);
    in.source = make_sass_source(in.src, in.res);
    return in;
}

void require_entry(const SassInput& in, const std::string& entry) {
    if (!entry.empty() && !in.info.find(entry))
        PTXLAB_THROW(InputError, "{}: no entry '{}' (its entries: {})", in.src.path, entry, entry_list(in.info));
}

void disassemble(SassInput& in, const std::string& nvdisasm, const std::string& arch, bool encodings = false) {
    const std::string what = fmt::format("{} for {}", in.src.path, arch);
    const std::string listing = run_nvdisasm(nvdisasm, in.res.cubin, what, encodings);
    in.functions = parse_nvdisasm(listing);
    for (auto& f : in.functions) f.entry |= in.info.find(f.name) != nullptr;  // should .other lines be missing
    if (in.functions.empty()) {
        std::string head = listing.substr(0, std::min<size_t>(listing.size(), 400));
        PTXLAB_THROW(Error, "{}'s listing of {} holds no function (no `.text.NAME` section); is it nvdisasm? "
                            "It begins:\n{}", nvdisasm, what, head);
    }
}

const SassFunction& function_of(const SassInput& in, const std::string& name) {
    for (const auto& f : in.functions)
        if (f.name == name) return f;
    std::string names;
    for (const auto& f : in.functions) names += (names.empty() ? "" : ", ") + f.name;
    PTXLAB_THROW(Error, "nvdisasm's listing of {} has no function '{}' (it has: {})", in.src.path, name, names);
}

const EntryResources* resources_of(const SassInput& in, const std::string& name) {
    for (const auto& r : in.res.entries)
        if (r.name == name) return &r;
    return nullptr;
}

// The listing and summary of every entry (or just `entry`), then any device function nvdisasm
// shows apart; `layout` non-null or `control`: with each instruction's control bits and the stall sums.
void print_listings(const SassInput& in, const std::string& entry, bool control, const std::string& arch) {
    const auto layout = control_layout_for(arch);
    auto listing = [&](const SassFunction& f) {
        return control ? format_control_listing(f, in.source, layout ? &*layout : nullptr, arch) : format_listing(f, in.source);
    };
    for (const auto& e : in.info.entries) {
        if (!entry.empty() && e.name != entry) continue;
        const SassFunction& f = function_of(in, e.name);
        fmt::print("\n{}\n{}", listing(f), format_summary(f, resources_of(in, e.name)));
    }
    if (!entry.empty()) return;
    for (const auto& f : in.functions)
        if (!in.info.find(f.name)) fmt::print("\n{}\n{}", listing(f), format_summary(f, resources_of(in, f.name)));
}

void print_diffs(const SassInput& a, const SassInput& b, const std::string& entry) {
    int shown = 0;
    for (const auto& e : a.info.entries) {
        if (!entry.empty() && e.name != entry) continue;
        if (!b.info.find(e.name)) {
            fmt::print("\n.entry {}: only in A ({})\n", e.name, a.src.path);
            continue;
        }
        const SassFunction &fa = function_of(a, e.name), &fb = function_of(b, e.name);
        fmt::print("\n{}", format_diff({&fa, &a.source, resources_of(a, e.name)}, {&fb, &b.source, resources_of(b, e.name)}));
        ++shown;
    }
    if (entry.empty())
        for (const auto& e : b.info.entries)
            if (!a.info.find(e.name)) fmt::print("\n.entry {}: only in B ({})\n", e.name, b.src.path);
    if (shown == 0) fmt::print("\nno entry in common\n");  // refused before nvdisasm ran (require_common_entry)
    // The device functions the kernels call (a .func that ptxas kept apart, its own listing):
    // an edit there changes no entry's SASS, so they are compared too, also with FILE:ENTRY.
    for (const auto& fa : a.functions) {
        if (a.info.find(fa.name)) continue;
        const auto fb = std::find_if(b.functions.begin(), b.functions.end(),
                                     [&](const SassFunction& f) { return f.name == fa.name && !b.info.find(f.name); });
        if (fb == b.functions.end()) {
            fmt::print("\n.func {}: only in A ({})\n", fa.name, a.src.path);
            continue;
        }
        fmt::print("\n{}", format_diff({&fa, &a.source, resources_of(a, fa.name)}, {&*fb, &b.source, resources_of(b, fa.name)}));
    }
    for (const auto& fb : b.functions)
        if (!b.info.find(fb.name) &&
            std::none_of(a.functions.begin(), a.functions.end(), [&](const SassFunction& f) { return f.name == fb.name; }))
            fmt::print("\n.func {}: only in B ({})\n", fb.name, b.src.path);
}

void require_common_entry(const SassInput& a, const SassInput& b) {
    for (const auto& e : a.info.entries)
        if (b.info.find(e.name)) return;
    PTXLAB_THROW(InputError, "{} and {} have no entry in common (A: {}; B: {}): --diff compares entries of the same name",
                 a.src.path, b.src.path, entry_list(a.info), entry_list(b.info));
}

int run_sass(const SassOptions& o) {
    require_supported_arch(o.arch);
    const auto [path, entry] = split_target(o.target);
    // Everything about the input is checked before nvdisasm is looked for: a PTX error is
    // reported (and can be fixed) on a machine without nvdisasm too.
    SassInput a = assemble_input(path, o.arch);
    require_entry(a, entry);
    SassInput b;
    if (!o.diff.empty()) {
        b = assemble_input(o.diff, o.arch);
        require_entry(b, entry);
        require_common_entry(a, b);
    }
    const std::string nvdisasm = find_nvdisasm(nvdisasm_search_from_environment());
    disassemble(a, nvdisasm, o.arch, o.control);
    if (o.diff.empty()) {
        fmt::print("ptxlab sass: {} for {} (nvdisasm: {})\n", path, o.arch, nvdisasm);
        print_listings(a, entry, o.control, o.arch);
        return kExitOk;
    }
    disassemble(b, nvdisasm, o.arch);
    fmt::print("ptxlab sass --diff: A = {}, B = {}, for {} (nvdisasm: {})\n", path, o.diff, o.arch, nvdisasm);
    print_diffs(a, b, entry);
    return kExitOk;
}

}  // namespace

void setup_sass(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<SassOptions>();
    auto* sub = app.add_subcommand(
        "sass",
        "Show the machine code (SASS) ptxas makes of a PTX file: assemble it in process (nvJitLink, with line info, "
        "no GPU needed), disassemble the cubin with the CUDA toolkit's nvdisasm, and print each entry's SASS under "
        "the PTX lines it came from (a PTX line comes back wherever ptxas moved its instructions), then a summary "
        "per entry: registers, barriers, stack, spills, shared and local "
        "memory, and instruction counts by class (FFMA, FADD, FMUL, HMMA, IMAD, LDG, STG, LDS, STS, LDL/STL, BAR, "
        "SHFL, MUFU, BRA, CALL, other, its opcodes listed by name; the class is the opcode before its first '.'; "
        "the closing self-branch and the NOP padding are not counted). --diff OTHER.ptx compares two "
        "versions instead: the counts side by side with the difference, with the registers and spills, then a "
        "unified listing of the opcodes "
        "(no registers or addresses; - only in FILE, + only in OTHER), each with its PTX line, for every entry and "
        "every device function (.func) "
        "ptxas kept apart (an edit inside a called .func shows there, not in its callers). nvdisasm is looked for in $PTXLAB_NVDISASM, else "
        "$CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, the toolkit ptxlab was built with, then $PATH; "
        "without it sass says where it looked and exits 1. The file is checked first: a missing file, an unknown "
        "ENTRY (the entries are listed) or a PTX error (the same file:line diagnostics as check) exits 2. This is the "
        "toolkit's offline compile; the driver JIT-compiles the PTX it loads itself and may schedule it differently "
        "(on an H100 with driver 580 fused_step's SASS differed): `ptxlab profile` lists the code the driver loaded.");
    sub->add_option("target", o->target, "FILE.ptx, or FILE.ptx:ENTRY for one entry point")->required();
    sub->add_option("--arch", o->arch, "target architecture (sm_NN; those this nvJitLink accepts)")->capture_default_str();
    sub->add_option("--diff", o->diff,
                    "OTHER.ptx: compare the SASS of FILE (A) with that of OTHER (B), entry by entry (or ENTRY only)")->check(kNonEmptyPath);
    sub->add_flag("--control", o->control,
                  "show each instruction's control bits, decoded from the encodings nvdisasm prints with -hex: S the "
                  "stall cycles ptxas set, Y the yield bit, W/R the scoreboard set on writing the result / reading the "
                  "operands, wait: the scoreboards it waits on, reuse: the operand slots kept in the reuse cache; then "
                  "the static sum of the stall cycles per PTX line and per entry (waits and loops not counted). The "
                  "layout is known for sm_70 .. sm_90 (checked on sm_80 and sm_90 cubins); for other architectures "
                  "the listing says it is not known and shows no bits. Not with --diff")
        ->excludes("--diff");
    sub->callback([o, &chosen] { chosen = [o] { return run_sass(*o); }; });
}

}  // namespace ptxlab::cli
