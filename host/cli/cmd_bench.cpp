// ptxlab bench: kernel and training-step timings on the GPU, with the device's ceilings.
#include "bench.hpp"
#include "commands.hpp"
#include "model.hpp"
#include "files.hpp"
#include "flags.hpp"
#include "train.hpp"
#include "verify_file.hpp"

#include <fstream>
#include <iostream>

namespace ptxlab::cli {

namespace {

struct BenchCliOptions {
    std::string batches = "64,1024", step_batches = "64,256";
    std::vector<std::string> sets, target_sets, models;
    double target = 0.98;
    unsigned epochs = 5, model_batch = 64;
    uint64_t seed = 1;
    std::string data, ptx_dir, json;
    bool no_kernels = false, no_steps = false, no_target = false, no_torch = false, headline = false;
    double timeout = 120;
    int device = 0;
    std::string file, shape;  // bench FILE.ptx [--shape N=...]: a kernel with a contract header
    bool json_given = false;
    CLI::App* sub = nullptr;
};

int run_bench_cmd(const BenchCliOptions& o) {
    require_outputs({{"--json", o.json, o.json_given}});
    if (!o.file.empty()) {
        // What times the built-in kernels has no meaning for a FILE.ptx: say so instead of ignoring it.
        for (const char* flag : {"--batches", "--step-batches", "--sets", "--models", "--model-batch", "--target-sets",
                                 "--target", "--epochs", "--data", "--ptx-dir", "--no-kernels", "--no-steps", "--no-target", "--no-torch"})
            if (o.sub->count(flag))
                PTXLAB_THROW(InputError, "{} does not go with a FILE.ptx: bench {} times that kernel and its twin at "
                                         "its contract's shapes (--shape, --seed, --timeout, --device and --json apply)",
                             flag, o.file);
        preflight_contract_file(o.file, "", o.shape);  // header, --shape, values, PTX and twin before the GPU
        set_kernel_timeout(o.timeout);
        Context ctx(o.device);
        const FileBenchResult r = bench_file(o.file, ctx, o.shape, o.seed);
        if (!o.json.empty()) {  // written whole (a temporary file renamed into place) once every shape ran
            write_file_atomically(o.json, file_bench_json(r), "--json");
            fmt::print("wrote {}\n", o.json);
        }
        return kExitOk;
    }
    if (!o.shape.empty()) PTXLAB_THROW(InputError, "--shape goes with a FILE.ptx (bench FILE.ptx --shape N=1000)");
    if (o.headline)  // the four figures have their own recipes: what would change them is refused, not ignored
        for (const char* flag : {"--batches", "--step-batches", "--sets", "--models", "--model-batch", "--target-sets",
                                 "--target", "--epochs", "--no-kernels", "--no-steps", "--no-target", "--no-torch"})
            if (o.sub->count(flag))
                PTXLAB_THROW(InputError, "{} does not go with --headline: it times the README's four figures on "
                                         "their own recipes (the MLP's and the CNN's step and time to target)", flag);
    BenchOptions opt;
    opt.kernel_batches = parse_sizes(o.batches, "--batches", 1u << 20);
    opt.step_batches = parse_sizes(o.step_batches, "--step-batches", 60000);
    if (!o.sets.empty()) opt.sets = o.sets;
    if (!o.target_sets.empty()) opt.target_sets = o.target_sets;
    for (const auto& s : opt.sets) parse_bench_set(s);  // unknown names are an error
    for (const auto& s : opt.target_sets) parse_bench_set(s);
    if (!o.models.empty()) opt.models = o.models;
    if (o.no_steps && o.sub->count("--model-batch"))
        PTXLAB_THROW(InputError, "--model-batch is the batch of the model trainer's step timings, which --no-steps skips");
    if (o.model_batch < 1 || o.model_batch > 16384)
        PTXLAB_THROW(InputError, "--model-batch must be 1 to 16384, got {}", o.model_batch);
    opt.model_batch = o.model_batch;
    if (o.no_steps && o.sub->count("--models"))
        PTXLAB_THROW(InputError, "--models names model trainer steps to time, and --no-steps skips the step timings: "
                                 "give one of them");
    for (const auto& m : opt.models)  // a bad layer list is named before the GPU
        if (parse_model(m).layers.size() < 2)
            PTXLAB_THROW(InputError, "--models {}: the model trainer's step takes 2 layers or more", m);
    if (!(o.target > 0.0 && o.target <= 1.0)) PTXLAB_THROW(InputError, "--target must be in (0, 1], got {}", o.target);
    if (o.epochs == 0) PTXLAB_THROW(InputError, "--epochs must be at least 1");
    set_kernel_timeout(o.timeout);
    opt.target = o.target;
    opt.epochs = o.epochs;
    opt.seed = o.seed;
    opt.data_dir = o.data;
    opt.json = o.json;
    opt.dirs = KernelDirs::for_ptx_dir_flag(o.ptx_dir);
    opt.kernels = !o.no_kernels;
    opt.steps = !o.no_steps;
    opt.to_target = !o.no_target;
    opt.torch = !o.no_torch;
    if (o.headline) {
        opt.headline = true;
        opt.torch = false;  // the headline runs PyTorch with its own recipes
        opt.kernels = opt.to_target = false;
        opt.sets = {"fused"};
        opt.step_batches = {64};
        opt.models = {"cnn"};
    }

    Context ctx(o.device);
    BenchResult r = run_bench(ctx, opt, std::cout);
    if (!opt.json.empty()) {
        write_file_atomically(opt.json, bench_json(r, opt), "--json");
        fmt::print("wrote {}\n", opt.json);
    }
    return kExitOk;
}

}  // namespace

void setup_bench(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<BenchCliOptions>();
    auto* sub = app.add_subcommand(
        "bench",
        "Time every kernel (PTX and NVRTC twin side by side, 784-128-10, median of device-event timings after "
        "warm-up), with achieved GB/s and GFLOP/s against a device-to-device copy and an FMA loop measured in the "
        "same run; then the GPU time per training step of `ptxlab train`'s graph-replayed loop, and the training "
        "time to the target accuracy (data loading and JIT reported apart). `bench FILE.ptx` times a kernel with a contract header and its twin "
        "instead. Needs a GPU.");
    sub->add_option("file", o->file,
                    "time this .ptx (with a contract header) and its twin instead, at the contract's shapes; GB/s and "
                    "GFLOP/s when the header gives bytes and flops")->check(kNonEmptyPath);
    sub->add_option("--shape", o->shape, "with FILE.ptx: one shape instead of the contract's, e.g. N=1000000");
    sub->add_option("--batches", o->batches, "batches for the kernel timings")->capture_default_str();
    sub->add_option("--step-batches", o->step_batches, "batches for the step timings")->capture_default_str();
    sub->add_option("--sets", o->sets, "kernel sets to time (default: ptx reference fast fast-reference fused fused-reference "
                    "fused:adam fused/single fused/split fused/split:adam fused/serial fused:classic; any kernel set "
                    "train takes may be named, tc, tc/split and tc-bf16 (the BF16 kernels) among them; "
                    "NAME/single: one launch of fused_step (tc_step for tc) a step, as train --steps-per-launch 1; "
                    "NAME/split: the fused or tc set's separate launches, as train --three-launches; NAME/serial: those separate launches "
                    "without programmatic dependent launches, as train --three-launches --no-overlap; :adam: Adam at "
                    "lr 1e-3; :classic: train --preset classic (MSE, plain SGD, constant lr); no recipe: train's "
                    "default, cross-entropy and Nesterov)");
    sub->add_option("--models", o->models,
                    "model trainer steps to time, as train --model lists (default: cnn; e.g. --models cnn "
                    "fc256,fc128,fc10 fc1024,fc1024,fc10, the networks `train --layers 784,256,128,10` and "
                    "784,1024,1024,10 run): each on tc, tc on one stream (/serial), and the FP32 set for models "
                    "with conv layers");
    sub->add_option("--model-batch", o->model_batch,
                    "the batch the --models steps are timed at, PyTorch's beside them too (1 to 16384)")
        ->capture_default_str();
    sub->add_option("--target-sets", o->target_sets, "kernel sets to train to the target (default: fused fused-reference fast)");
    sub->add_option("--target", o->target, "test accuracy for the time-to-target run")->capture_default_str();
    sub->add_option("--epochs", o->epochs, "epochs of the time-to-target run (the schedule's length)")->capture_default_str();
    add_seed_option(sub, o->seed, "seed for inputs, initialisation and shuffling");
    sub->add_option("--data", o->data, "dataset directory (default: $PTXLAB_DATA_DIR or data/mnist)")->check(kNonEmptyPath);
    sub->add_option("--ptx-dir", o->ptx_dir,
                    "read the PTX from this directory; the twins stay in the reference directory, as in check and verify")->check(kNonEmptyPath);
    sub->add_option("--json", o->json, "also write the results to this file as JSON, whole or not at all (a temporary file renamed into place); "
                    "with FILE.ptx: the file, entry, device and a row per shape and side (us, bytes, flops, gbps, gflops)")->check(kNonEmptyPath);
    sub->add_flag("--no-kernels", o->no_kernels, "skip the per-kernel timings");
    sub->add_flag("--no-steps", o->no_steps, "skip the training-step timings (the sets' and the --models')");
    sub->add_flag("--no-target", o->no_target, "skip the time-to-target runs");
    sub->add_flag("--no-torch", o->no_torch,
                  "skip PyTorch's rows beside each --models step: without it, when python3 imports torch with CUDA, "
                  "tools/torch_reference.py --model SPEC trains 20 steps of the same recipe on the same GPU and times "
                  "1000 more eager and as CUDA-graph replays (SPEC:torch, SPEC:torch+graph); else a line says why not");
    sub->add_flag("--headline", o->headline,
                  "only the four headline figures, each beside PyTorch's from the same GPU: the MLP's step (fused, "
                  "batch 64) and training time to 98 %, the CNN's step (tc) and time to 99 % (seed --seed); PyTorch runs "
                  "tools/torch_reference.py with the same recipes when python3 imports torch, else its columns are "
                  "empty and a line says why. With the ceilings and floors");
    sub->add_option("--timeout", o->timeout, "watchdog seconds (0: no limit)")->capture_default_str();
    add_device_option(sub, o->device);
    o->sub = sub;
    sub->callback([o, &chosen] {
        o->json_given = o->sub->count("--json") > 0;
        chosen = [o] { return run_bench_cmd(*o); };
    });
}

}  // namespace ptxlab::cli
