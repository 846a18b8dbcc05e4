// ptxlab profile FILE.ptx[:ENTRY] | --train [train's flags]: where the warps of a kernel wait.
// CUPTI's PC sampling (host/profile/sampler.hpp) takes the stall reason of running warps; each
// sample is placed on its SASS instruction and, through the line table `ptxlab sass` reads, on
// its PTX line; printed in the `sass` layout with the hottest lines, blocks and stall reasons
// (host/profile/profile.hpp), and optionally written as JSON and as one HTML page.
#include "commands.hpp"
#include "flags.hpp"
#include "collect.hpp"
#include "contract.hpp"
#include "cupti.hpp"
#include "files.hpp"
#include "kernels.hpp"
#include "nvdisasm.hpp"
#include "verify.hpp"
#include "verify_file.hpp"

#include <filesystem>
#include <map>

namespace fs = std::filesystem;

namespace ptxlab::cli {

namespace {

struct ProfileOptions {
    std::string target;
    bool train = false;
    std::string json, html;
    unsigned period = 8;
    unsigned repeat = 10;
    size_t top = 10;
    uint64_t seed = 1;
    int device = 0;
    double timeout = 120;
    std::map<std::string, std::string> train_values;  // train's flags that profile --train passes on
    std::map<std::string, bool> train_flags;
    CLI::App* sub = nullptr;
};

// What to run under the sampler, prepared before the GPU is touched.
struct Workload {
    std::string what;
    std::vector<SourceFile> sources;
    SamplingMode mode = SamplingMode::Serialized;
    std::function<void(const Context&, PcSampler&)> run;
};

Workload contract_workload(const ProfileOptions& o, const SourceFile& src, const std::string& entry) {
    const Contract c = preflight_contract_file(src.path, "", "");
    if (!entry.empty() && entry != c.entry)
        PTXLAB_THROW(InputError, "{}: its contract header describes '{}', not '{}'; profile {} or {}:{}", src.path,
                     c.entry, entry, src.path, src.path, c.entry);
    Workload w;
    w.what = fmt::format("{}:{} at its contract's {} shape{} ({} launches each)", src.path, c.entry, c.shapes.size(),
                         c.shapes.size() == 1 ? "" : "s", o.repeat);
    w.sources = {src};
    const std::string path = src.path;
    w.run = [path, o](const Context& ctx, PcSampler& sampler) {
        ContractKernels k = load_contract_kernels(path, ctx.info());
        Stream s;
        for (const auto& shape : contract_shapes(k.contract, "")) {
            ContractBuffers b(k.contract, shape, o.seed);
            for (unsigned r = 0; r < o.repeat; ++r) {
                b.reset();
                sampler.start();
                b.launch(k.ptx, path, s.get());
                s.synchronize();
                sampler.stop();
            }
        }
    };
    return w;
}

// The built-in kernels of `src` (or `entry`) at verify's shapes, loaded from the file's directory.
Workload builtin_workload(const ProfileOptions& o, const SourceFile& src, const PtxInfo& info, const std::string& entry) {
    const std::string stem = fs::path(src.path).stem().string();
    std::vector<std::string> entries;
    std::vector<VerifyCase> cases;
    for (const auto& e : info.entries) {
        if (!entry.empty() && e.name != entry) continue;
        const KernelSpec* spec = nullptr;
        for (const auto& k : kernel_specs())
            if (k.entry == e.name) spec = &k;
        if (!spec || spec->file != stem) continue;
        size_t n = 0;
        for (const auto& c : default_cases())
            if (c.entry == e.name) cases.push_back(c), ++n;
        if (n) entries.push_back(e.name);
    }
    if (entries.empty())
        PTXLAB_THROW(InputError, "{}{}: no contract header, and no ptxlab kernel of a file of this name (ptxlab's "
                     "kernels run at verify's shapes from a file named as theirs: fused_step from step.ptx); add "
                     "a contract header (`ptxlab new` writes one) to profile it", src.path, entry.empty() ? "" : ":" + entry);
    Workload w;
    std::string names;
    for (const auto& e : entries) names += (names.empty() ? "" : ", ") + e;
    w.what = fmt::format("{} ({}) at verify's {} shape{} ({} launches each)", src.path, names, cases.size(),
                         cases.size() == 1 ? "" : "s", o.repeat);
    w.sources = {src};
    const std::string dir = fs::path(src.path).parent_path().string();
    w.run = [dir, entries, cases, o](const Context& ctx, PcSampler& sampler) {
        KernelSet ks(KernelSource::Ptx, ctx.info(), KernelDirs::for_ptx_dir_flag(dir.empty() ? "." : dir), entries);
        Stream s;
        for (const auto& c : cases) {
            PreparedCase pc(c, o.seed);
            for (unsigned r = 0; r < o.repeat; ++r) {
                sampler.start();
                pc.launch(ks.get(c.entry), s.get());
                s.synchronize();
                sampler.stop();
            }
        }
    };
    return w;
}

Workload file_workload(const ProfileOptions& o) {
    const auto [path, entry] = split_target(o.target);
    SourceFile src = read_source_file(path);
    const PtxInfo info = parse_ptx(src.text);
    if (info.entries.empty())
        PTXLAB_THROW(InputError, "{}: no .entry in this file; `ptxlab profile` samples kernels", path);
    if (!entry.empty() && !info.find(entry))
        PTXLAB_THROW(InputError, "{}: no entry '{}' (its entries: {})", path, entry, entry_list(info));
    const ContractParse cp = parse_contract(src);
    if (cp.contract || !cp.problems.empty()) return contract_workload(o, src, entry);
    return builtin_workload(o, src, info, entry);
}

// The flags of `train` that a profiled run takes: every flag that changes what runs (the rest write
// files or resume one, which a short run under the profiler has no use for).
const std::vector<std::string>& train_value_flags() {
    static const std::vector<std::string> v = {
        "--layers", "--model", "--hidden", "--kernels", "--batch", "--max-steps", "--data", "--ptx-dir",
        "--epochs", "--lr", "--preset", "--init", "--loss", "--activation", "--optimizer", "--momentum",
        "--weight-decay", "--schedule", "--warmup", "--steps-per-launch", "--beta1", "--beta2", "--eps", "--alpha",
        "--step-every", "--gamma", "--target", "--evals-per-epoch", "--eval-every"};
    return v;
}
const std::vector<std::string>& train_switch_flags() {
    static const std::vector<std::string> v = {"--no-graphs", "--no-overlap", "--three-launches", "--dense-program",
                                               "--stop-at-target", "--no-progress"};
    return v;
}

// train's flags parsed as train parses them, and train's own checks made now (prepare_run in
// cmd_train.cpp: the flags, --data, the network against the data), before the GPU is touched;
// the run that is left touches it.
Workload train_workload(ProfileOptions& o) {
    if (o.sub->count("--repeat"))
        PTXLAB_THROW(InputError, "--repeat goes with FILE.ptx: a training run is sampled once (--max-steps sets "
                                 "its length)");
    std::vector<std::string> args;
    for (const auto& [flag, value] : o.train_values) args.insert(args.end(), {flag, value});
    for (const auto& [flag, on] : o.train_flags)
        if (on) args.push_back(flag);
    if (!o.train_values.count("--max-steps")) args.insert(args.end(), {"--max-steps", "200"});
    args.insert(args.end(), {"--device", std::to_string(o.device), "--timeout", fmt::format("{}", o.timeout)});
    if (o.sub->count("--seed")) args.insert(args.end(), {"--seed", std::to_string(o.seed)});
    auto app = std::make_shared<CLI::App>("ptxlab");
    auto chosen = std::make_shared<Command>();
    auto prepare = std::make_shared<PrepareCommand>();
    setup_train(*app, *chosen, prepare.get());
    std::vector<std::string> argv = {"train"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string line;
    for (const auto& a : argv) line += " " + a;
    std::reverse(argv.begin(), argv.end());  // CLI11 takes a vector last argument first
    try {
        app->parse(argv);
    } catch (const CLI::ParseError& e) {
        PTXLAB_THROW(InputError, "profile --train: train's flags{}: {}", line.substr(6), e.what());
    }
    if (!*prepare) PTXLAB_THROW(Error, "profile --train: train's flags were parsed, but no run was set up");
    const TrainRun run = (*prepare)();  // InputError here, as train gives it, before the GPU
    Workload w;
    w.what = fmt::format("ptxlab{}: every kernel of the run", line);
    w.mode = SamplingMode::Continuous;
    // One range a chunk of steps: CUPTI's buffers are read out after each chunk (train waits for
    // the GPU there anyway), so that a long run of many kernels does not fill them.
    w.run = [app, chosen, prepare, run](const Context&, PcSampler& sampler) {
        sampler.start();
        const int code = run([&sampler] { sampler.drain(); });
        sampler.stop();
        if (code != kExitOk) PTXLAB_THROW(Error, "the training run under the profiler ended with exit code {}", code);
    };
    return w;
}

// Both made before either is written; each written to a temporary file and renamed into place.
void write_outputs(const ProfileOptions& o, const Profile& p) {
    const std::string json = o.json.empty() ? "" : format_profile_json(p);
    const std::string html = o.html.empty() ? "" : format_profile_html(p, o.top);
    if (!o.json.empty()) write_file_atomically(o.json, json, "--json");
    if (!o.html.empty()) write_file_atomically(o.html, html, "--html");
}

int run_profile(ProfileOptions& o) {
    if (o.train && !o.target.empty())
        PTXLAB_THROW(InputError, "{} and --train together: profile a file's kernel, or a training run", o.target);
    if (!o.train && o.target.empty())
        PTXLAB_THROW(InputError, "profile what? Give FILE.ptx[:ENTRY], or --train [train's flags]");
    if (!o.train && (!o.train_values.empty() || !o.train_flags.empty()))
        PTXLAB_THROW(InputError, "{} is one of train's flags: it goes with --train (profile --train {} ...)",
                     o.train_values.empty() ? o.train_flags.begin()->first : o.train_values.begin()->first,
                     o.train_values.empty() ? o.train_flags.begin()->first : o.train_values.begin()->first);
    if (o.repeat == 0) PTXLAB_THROW(InputError, "--repeat 0: each shape needs at least one launch");
    if (o.period < 5 || o.period > 31)
        PTXLAB_THROW(InputError, "--period {}: CUPTI samples every 2^period cycles, period 5 .. 31", o.period);
    set_kernel_timeout(o.timeout);  // InputError when < 0
    require_outputs({{"--json", o.json, !o.json.empty()}, {"--html", o.html, !o.html.empty()}});
    Workload w = o.train ? train_workload(o) : file_workload(o);
#if PTXLAB_HAVE_CUPTI_HEADERS
    cupti();  // CuptiError (exit 1) when missing: said before the GPU is looked for
#else
    cupti_unavailable();
#endif
    const std::string nvdisasm = find_nvdisasm(nvdisasm_search_from_environment());
    Context ctx(o.device);
    SampleRun run;
    {
        PcSampler sampler(ctx, w.mode, o.period);
        w.run(ctx, sampler);
        run = sampler.take();
    }
    if (run.records.empty())
        PTXLAB_THROW(Error, "no PC samples were taken of {}: the kernels did not run, or ran too briefly for one "
                            "sample every 2^{} cycles (try --period 5, or more --repeat)", w.what, o.period);
    std::vector<std::string> notes;
    add_offline_cubins(run, w.sources, ctx.info().arch(), cubin_crc, notes);
    Profile p = build_profile(run, nvdisasm, w.sources);
    p.notes.insert(p.notes.end(), notes.begin(), notes.end());
    p.what = w.what;
    p.device = fmt::format("{} ({})", ctx.info().name, ctx.info().arch());
    fmt::print("{}", format_profile_text(p, o.top));
    write_outputs(o, p);
    return kExitOk;
}

}  // namespace

void setup_profile(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<ProfileOptions>();
    auto* sub = app.add_subcommand(
        "profile",
        "Where a kernel's warps wait: CUPTI's PC sampling takes the stall reason of running warps every 2^--period "
        "cycles, and each sample is placed on the SASS instruction it hit and, through the line table `ptxlab sass` "
        "reads (nvdisasm of the cubin the driver loaded), on its PTX line. `profile FILE.ptx[:ENTRY]` runs a kernel "
        "with a contract header at its contract's shapes, or ptxlab's own kernels (ptx/NAME.ptx) at verify's "
        "shapes, --repeat times each, one launch at a time; `profile --train [train's flags]` samples every kernel "
        "of a training run (the train flags listed below, as train takes them; --max-steps 200 unless given; the "
        "samples are read out after each chunk of steps). Printed: the PTX lines with their samples, share and top "
        "stall reasons, the sampled SASS under each (the `sass` layout), then per kernel "
        "the hottest lines and blocks (the PTX label a line falls under) and the samples by stall reason. A warp "
        "waiting at a barrier is sampled on the instruction after it (as in Nsight Compute): a line whose top "
        "stall reason is `barrier` and that follows a barrier is marked `^ barrier, line N` (N: the barrier's "
        "line), its samples left where they were taken (--json: after_barrier, barrier_line). --json "
        "and --html write the same numbers (the page: one self-contained file, the PTX with a heat column and its "
        "SASS folded under each line). Needs a GPU, nvdisasm (as sass) and CUPTI (libcupti.so.13 of the CUDA "
        "toolkit: $PTXLAB_CUPTI_LIB, else the loader's path, $CUDA_HOME, /usr/local/cuda, under extras/CUPTI/lib64, "
        "lib64 or lib); without CUPTI, or where the driver does not permit profiling to this user, it says so and "
        "how to enable it (exit 1), as it does when the GPU samples faster than CUPTI reads them out (raise "
        "--period, or profile less). A missing file, an unknown ENTRY, an output that cannot be written, or (with "
        "--train) anything train itself refuses before the GPU (its flags, --data, the network against the data) "
        "exits 2 before the GPU is touched; outputs are written whole or not at all.");
    o->sub = sub;
    // Not named "target": with --train, train's --target joins this subcommand, and CLI11 from 2.2 on
    // refuses a positional and an option of one name (OptionAlreadyAdded, at start-up).
    sub->add_option("kernel", o->target, "FILE.ptx or FILE.ptx:ENTRY");
    sub->add_flag("--train", o->train, "profile a training run instead; train's flags follow (e.g. --layers, --model, "
                                      "--kernels, --batch, --max-steps)");
    sub->add_option("--json", o->json, "write the profile as JSON to this file")->check(kNonEmptyPath);
    sub->add_option("--html", o->html, "write the profile as one self-contained HTML page to this file")
        ->check(kNonEmptyPath);
    sub->add_option("--period", o->period, "one sample every 2^N cycles per SM (5 .. 31)")->capture_default_str();
    sub->add_option("--repeat", o->repeat, "launches of each shape (FILE.ptx; not with --train)")->capture_default_str();
    sub->add_option("--top", o->top, "rows in the hottest-lines and -blocks tables")->capture_default_str();
    add_seed_option(sub, o->seed, "seed for the inputs (FILE.ptx)");
    sub->add_option("--timeout", o->timeout, "watchdog: fail (exit 4) when a kernel runs longer than this many "
                                             "seconds; 0: no limit")->capture_default_str();
    add_device_option(sub, o->device);
    for (const auto& f : train_value_flags())
        sub->add_option_function<std::string>(
            f, [o, f](const std::string& v) { o->train_values[f] = v; }, "with --train: as train " + f)
            ->group("train's flags (with --train)");
    for (const auto& f : train_switch_flags())
        sub->add_flag_function(
            f, [o, f](int64_t n) { o->train_flags[f] = n > 0; }, "with --train: as train " + f)
            ->group("train's flags (with --train)");
    sub->callback([o, &chosen] { chosen = [o] { return run_profile(*o); }; });
}

}  // namespace ptxlab::cli
