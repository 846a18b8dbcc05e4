// ptxlab verify: every kernel pair on identical random inputs, element by element.
#include "commands.hpp"
#include "flags.hpp"
#include "files.hpp"
#include "sanitizer.hpp"
#include "train.hpp"
#include "verify.hpp"
#include "verify_file.hpp"

#include <filesystem>
#include <random>

namespace ptxlab::cli {

namespace {

struct VerifyCliOptions {
    std::vector<std::string> kernels;
    std::string shape;
    bool shape_given = false;
    uint64_t seed = 0;
    bool seed_given = false;
    std::string ptx_dir;
    int device = 0;
    bool list = false;
    bool quick = false;
    double timeout = 120;
    std::string file;  // verify FILE.ptx: a kernel with a contract header (verify_file.hpp)
    bool racecheck = false, synccheck = false;  // run it again under compute-sanitizer (sanitizer.hpp)
};

// The arguments of this same verify run, for compute-sanitizer to run again: the same file or
// kernels, shape, device, timeout and directory, and `seed` (the same inputs).
std::vector<std::string> rerun_args(const VerifyCliOptions& o, uint64_t seed) {
    std::vector<std::string> a = {"verify"};
    if (!o.file.empty()) a.push_back(o.file);
    for (const auto& k : o.kernels) a.insert(a.end(), {"--kernel", k});
    if (o.shape_given) a.insert(a.end(), {"--shape", o.shape});
    a.insert(a.end(), {"--seed", std::to_string(seed), "--timeout", fmt::format("{}", o.timeout), "--device",
                       std::to_string(o.device)});
    if (!o.ptx_dir.empty()) a.insert(a.end(), {"--ptx-dir", o.ptx_dir});
    if (o.quick) a.push_back("--quick");
    return a;
}

// --racecheck / --synccheck: the input was checked; compute-sanitizer runs this same verify (the
// seed fixed) under each tool asked for, its output shown; exit 1 when a tool reports a hazard or
// the verify run fails.
int run_under_sanitizer(const VerifyCliOptions& o, uint64_t seed) {
    std::vector<std::string> tools;
    if (o.racecheck) tools.push_back("racecheck");
    if (o.synccheck) tools.push_back("synccheck");
    const std::string flags = o.racecheck && o.synccheck ? "--racecheck --synccheck" : "--" + tools[0];
    const std::string sanitizer = find_compute_sanitizer(compute_sanitizer_search_from_environment(), flags);
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) PTXLAB_THROW(Error, "cannot find ptxlab's own program to run under compute-sanitizer: /proc/self/exe: {}",
                         ec.message());
    int failed = 0;
    for (const auto& tool : tools) {
        const auto args = sanitizer_args(tool, self, rerun_args(o, seed));
        std::string cmd = sanitizer;
        for (const auto& a : args) cmd += " " + a;
        fmt::print("verify --{}: {}\n", tool, cmd);
        std::fflush(stdout);
        const ProcessResult r = run_process(sanitizer, args);
        fmt::print("{}", r.out);
        std::fflush(stdout);
        fmt::print(stderr, "{}", r.err);
        const SanitizerVerdict v = judge_sanitizer_run(tool, r);
        fmt::print("verify --{}: {}\n", tool, v.ok ? "PASS: no hazard reported" : "FAIL: " + v.why);
        failed += !v.ok;
    }
    return failed ? kExitFailure : kExitOk;
}

// verify FILE.ptx: the header, --shape, the values at each shape, the PTX and the twin are checked
// before the GPU is looked for.
int run_verify_file_cmd(const VerifyCliOptions& o) {
    if (!o.kernels.empty()) PTXLAB_THROW(InputError, "--kernel and a FILE.ptx together: give one or the other");
    if (!o.ptx_dir.empty())
        PTXLAB_THROW(InputError, "--ptx-dir and a FILE.ptx together: --ptx-dir picks where the built-in kernels are "
                                 "read; {} names its own file (and its contract its twin)", o.file);
    if (o.quick)
        PTXLAB_THROW(InputError, "--quick picks a smaller set of the built-in kernels' cases; for {} give one "
                                 "shape with --shape instead", o.file);
    if (o.list) {  // the shapes it would run, from the header alone
        const Contract c = read_contract_file(o.file);
        for (const auto& s : contract_shapes(c, o.shape)) fmt::print("{:<13} {}\n", c.entry, shape_text(s));
        return kExitOk;
    }
    preflight_contract_file(o.file, "", o.shape);
    FileVerifyOptions f;
    f.seed = o.seed_given ? o.seed : std::random_device{}();
    if (o.racecheck || o.synccheck) return run_under_sanitizer(o, f.seed);
    f.shape = o.shape;
    set_kernel_timeout(o.timeout);
    Context ctx(o.device);
    return verify_file(o.file, ctx, f) ? kExitFailure : kExitOk;
}

// "--shape" numbers: 0 .. 2^31 (the optimizers' variant may be 0; each harness says which
// sizes must be at least 1).
int run_verify_cmd(const VerifyCliOptions& o) {
    if (o.shape_given && o.shape.find_first_not_of(" \t") == std::string::npos)
        PTXLAB_THROW(InputError, "--shape is empty: give the sizes, e.g. --shape 64,784,128,10 (or leave --shape out "
                                 "for the default set)");
    if (o.list && (o.racecheck || o.synccheck))
        PTXLAB_THROW(InputError, "--list only names the cases; --racecheck and --synccheck run them: give one or the other");
    if (!o.file.empty()) return run_verify_file_cmd(o);
    // --ptx-dir means the same as in check: where the .ptx files are read; the twins stay in the
    // reference directory ($PTXLAB_REFERENCE_DIR, else $PTXLAB_PTX_DIR/reference, else the tree's).
    if (!o.ptx_dir.empty()) require_directory(o.ptx_dir, "--ptx-dir");
    std::vector<VerifyCase> cases;
    if (o.shape.empty()) {
        for (const auto& c : o.quick ? quick_cases() : default_cases())
            if (o.kernels.empty() || std::find(o.kernels.begin(), o.kernels.end(), c.entry) != o.kernels.end())
                cases.push_back(c);
    } else {
        const auto shape = parse_sizes(o.shape, "--shape", 1ull << 31, 0);
        const std::vector<std::string> names =
            o.kernels.empty() ? [] {
                std::vector<std::string> all;
                for (const auto& k : kernel_specs()) all.push_back(k.entry);
                return all;
            }()
                              : o.kernels;
        for (const auto& k : names) {
            std::string sn = shape_names(k, shape.size());
            if (static_cast<size_t>(std::count(sn.begin(), sn.end(), ',')) + 1 != shape.size()) {
                if (!o.kernels.empty())
                    PTXLAB_THROW(InputError, "--shape {} does not fit kernel '{}', which takes {}", o.shape, k, sn);
                continue;
            }
            // A size of 0 or a variant the kernel lacks: an error for a named kernel, else skipped.
            try {
                validate_case({k, shape});
            } catch (const InputError&) {
                if (!o.kernels.empty()) throw;
                continue;
            }
            cases.push_back({k, shape});
        }
        if (cases.empty()) PTXLAB_THROW(InputError, "--shape {} fits no kernel", o.shape);
    }
    for (const auto& k : o.kernels) shape_names(k);  // unknown names are an error
    if (o.list) {
        for (const auto& c : cases) fmt::print("{:<13} {}\n", c.entry, shape_text(c));
        return kExitOk;
    }

    VerifyOptions opt;
    opt.seed = o.seed_given ? o.seed : std::random_device{}();
    if (o.racecheck || o.synccheck) return run_under_sanitizer(o, opt.seed);
    opt.reference_dirs = KernelDirs::from_environment();
    opt.ptx_dirs = o.ptx_dir.empty() ? opt.reference_dirs : KernelDirs::from_ptx_dir(o.ptx_dir);
    if (o.ptx_dir.empty()) opt.ptx_dirs.reference_dir = opt.reference_dirs.reference_dir;

    set_kernel_timeout(o.timeout);
    Context ctx(o.device);
    fmt::print("verify: {} ({}), seed {} (repeat with --seed {})\n", ctx.info().name, ctx.info().arch(), opt.seed,
               opt.seed);
    fmt::print("        PTX from {}, twins from {}\n", opt.ptx_dirs.ptx_dir, opt.reference_dirs.reference_dir);
    fmt::print("        PASS = same bits as the twin, every output written, both within the float64 bound\n");
    std::fflush(stdout);
    size_t passed = 0, failed = 0, skipped = 0;
    run_verify(ctx, cases, opt, [&](const CaseResult& r) {
        fmt::print("{}\n", format_result(r));
        std::fflush(stdout);
        (!r.skipped.empty() ? skipped : r.pass() ? passed : failed)++;
    });
    fmt::print("verify: {} case{} passed, {} failed{} (seed {})\n", passed, passed == 1 ? "" : "s", failed,
               skipped ? fmt::format(", {} skipped (code for another device)", skipped) : "", opt.seed);
    return failed ? kExitFailure : kExitOk;
}

}  // namespace

void setup_verify(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<VerifyCliOptions>();
    auto* sub = app.add_subcommand(
        "verify",
        "Run every hand-written PTX kernel and its NVRTC twin on identical fresh random inputs over a set of shapes "
        "(batch 1, 63, 64, 1000; widths 1, 100, 128, 300; odd sizes). Outputs are poisoned with NaN before each "
        "launch, and every tensor lies between guard bands of 4096 words (a write past a tensor's end is named with "
        "how far it went). Kernels that sum in another order than the float64 reference (the fused set) are held to a bound that "
        "grows with the sum length (gamma_n, n = terms + extra roundings). One line per kernel and shape: max abs difference, max ULP distance, unwritten elements, the "
        "float64 check, PASS/FAIL; the first 10 mismatches with their coordinates and both values; exit 1 on any FAIL. `verify FILE.ptx` runs any kernel with a contract header "
        "(// @contract ... // @end) against its twin instead. Needs a GPU.");
    sub->add_option("file", o->file,
                    "a .ptx file with a contract header (// @contract): run it and its twin on the contract's shapes "
                    "(or --shape N=1000,M=3) and compare as the contract says")->check(kNonEmptyPath);
    sub->add_option("--kernel", o->kernels,
                    "only these kernels: forward2 forward3 grad2 grad3 batch_mean optim_sgd optim_adam optim_rmsprop "
                    "gather fused_forward fused_output fused_grad outer fused_step conv_fwd conv_bwd_data conv_bwd_weights "
                    "fc_bwd_data pool_fwd pool_bwd tc_forward tc_grad_input tc_grad_weights tc_grad_weights_wide "
                    "tc_forward_bf16 tc_grad_input_bf16 tc_grad_weights_bf16 tc_step fc3_step tc_conv_fwd "
                    "tc_conv_bwd_data tc_conv_bwd_weights dense_wg_k transpose32 (these two on a device of compute "
                    "capability 9.0 only; skipped elsewhere)");
    auto* shape_opt = sub->add_option("--shape", o->shape,
                    "one shape instead of the default set: B,I,H,O,act (forward2), B,I,H,O,loss,act (grad2), "
                    "B,I,H1,H2,O,act (forward3), B,I,H1,H2,O,loss,act (grad3), N,B (batch_mean), N,variant "
                    "(optim_sgd: 0 plain, 1 momentum, 2 nesterov, 3 nesterov + weight decay, 4 plain + weight decay; "
                    "optim_adam: 0 adam, 1 adam + weight decay, 2 adamw, 3 nadam, 4 nadam + weight decay; optim_rmsprop: 0 plain, 1 + weight decay), "
                    "rows,cols,src_rows (gather), B,I,H,act (fused_forward), B,H,O,loss,act (fused_output), B,I,H,O "
                    "(fused_grad), B,I,H,O,loss,optim,act (fused_step; optim " + optim_code_list() +
                    "; nadam with weight decay for loss 1, without for loss 0), B,R,C (outer), N,C,H,W,K,KS,act,pool (conv_fwd, tc_conv_fwd; pool 1: with their 2x2 max-pool, "
                    "Y and idx the pool's), N,C,H,W,K,KS,act,pool (tc_conv_bwd_data; pool 1..8: the backward pass of the 2x2 max-pool below "
                    "in its epilogue, pool - 1 = 1 (input height odd) + 2 (width odd) + 4 (no ReLU mask)), N,C,H,W,K,KS,act (conv_fwd, conv_bwd_data, "
                    "conv_bwd_weights, tc_conv_bwd_weights: act 0 none, 1 ReLU), B,I,O,act (fc_bwd_data: act 0 none, 1 ReLU), N,C,H,W "
                    "(pool_fwd), N,C,H,W,mask (pool_bwd: mask 1 with the ReLU mask from pool_fwd's Y, 0 without), B,I,H,act (tc_forward, tc_forward_bf16: act 0 none, 1 ReLU), "
                    "B,I,O,act (tc_grad_input, tc_grad_weights and their _bf16 versions, tc_grad_weights_wide "
                    "with B <= 128: act 0 none, 1 ReLU), B,I,H,O,loss,optim (tc_step: ReLU; B <= 64, I <= 896, "
                    "H <= 128, O <= 16), B,I,H1,H2,O,loss,optim (fc3_step: 3 layers, ReLU; B <= 64, I <= 784, H1 <= 256, "
                    "H2 <= 128, O <= 16; plain SGD runs two steps, the first at lr 0), M,N,K,R,flags (dense_wg_k: K a multiple of 4, R 0 its own choice or 1, 2, 4, 8; "
                    "flags 1 ReLU + 2 bias + 4 the mask: +0 where a random Y <= 0), R,C (transpose32); loss is the output-delta "
                    "code: 0 = y - t, 1 = softmax(y) - t; act the hidden activation: 0 relu, 1 leaky-relu, 2 tanh, "
                    "3 sigmoid, 4 gelu (the default set runs every activation, loss code and optimizer; --quick relu, "
                    "tanh and gelu)");
    sub->add_option("--timeout", o->timeout,
                    "watchdog: fail (exit 4) naming the kernel when one runs longer than this many seconds; 0: no "
                    "limit")
        ->capture_default_str();
    add_seed_option(sub, o->seed, "seed for the random inputs (default: a fresh one, printed)", &o->seed_given);
    sub->add_option("--ptx-dir", o->ptx_dir, "read the PTX from this directory; the twins stay in the reference directory "
                    "($PTXLAB_REFERENCE_DIR, else $PTXLAB_PTX_DIR/reference, else the tree's), as in check")->check(kNonEmptyPath);
    add_device_option(sub, o->device);
    sub->add_flag("--quick", o->quick, "a small set of cases (for compute-sanitizer and other slow tools)");
    sub->add_flag("--list", o->list, "list the cases and exit");
    sub->add_flag("--racecheck", o->racecheck,
                  "run this same verify (same cases, shapes and seed; the seed is printed) under the CUDA toolkit's "
                  "compute-sanitizer --tool racecheck, which finds shared-memory data races (a missing bar.sync): "
                  "verify's own lines and the tool's report are shown, and verify fails (exit 1) when the cases fail "
                  "or the tool reports a hazard. compute-sanitizer is looked for in $PTXLAB_COMPUTE_SANITIZER, else "
                  "where nvdisasm is (sass --help) and in the toolkit's compute-sanitizer/ folder; without it verify "
                  "says where it looked and exits 1 (the input is checked first). Slow: give one --shape or --quick");
    sub->add_flag("--synccheck", o->synccheck,
                  "the same with compute-sanitizer --tool synccheck: barriers used wrongly (a bar.sync that not every "
                  "thread of the block reaches, a shfl with a wrong mask); with --racecheck, both run");
    sub->callback([o, shape_opt, &chosen] {
        o->shape_given = shape_opt->count() > 0;
        chosen = [o] { return run_verify_cmd(*o); };
    });
}

}  // namespace ptxlab::cli
