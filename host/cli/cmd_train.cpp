// ptxlab train: train the MLP on MNIST with the hand-written PTX kernels.
#include "commands.hpp"
#include "safetensors.hpp"
#include "train.hpp"

#include <chrono>
#include <csignal>
#include <iostream>

namespace ptxlab::cli {

namespace {

struct TrainOptions {
    std::string data;
    std::string layers = "784,128,10";
    unsigned hidden = 0;
    unsigned batch = 64;
    float lr = 0.2f;
    unsigned epochs = 20;
    double target = 0.97;
    unsigned eval_every = 0;
    uint64_t seed = 1;
    std::string preset;
    std::string loss = "mse";
    std::string kernels = "auto";
    bool no_graphs = false, no_overlap = false, three_launches = false;
    unsigned steps_per_launch = 0;
    double timeout = 120;
    std::string ptx_dir;
    std::string log, save;
    unsigned max_steps = 0;
    bool no_progress = false;
    int device = 0;
    CLI::App* sub = nullptr;
    bool given(const char* flag) const { return sub->count(flag) > 0; }
};

void on_sigint(int) {
    if (g_stop_requested.exchange(true)) std::_Exit(kExitInterrupted);  // a second Ctrl-C stops at once
}

int run_train(const TrainOptions& o) {
    TrainConfig cfg;
    cfg.layers = parse_layers(o.layers);
    if (o.given("--hidden")) {
        if (cfg.layers.size() != 3) PTXLAB_THROW(InputError, "--hidden sets the width of a 2-layer network; with "
                                                             "--layers of 3 layers, give the widths there");
        if (o.hidden == 0) PTXLAB_THROW(InputError, "--hidden must be at least 1");
        cfg.layers[1] = o.hidden;
    }
    cfg.batch = o.batch;
    cfg.lr = o.lr;
    cfg.max_epochs = o.epochs;
    cfg.target = o.target;
    cfg.eval_every = o.eval_every;
    cfg.seed = o.seed;
    cfg.kernels = o.kernels == "auto" ? KernelChoice{cfg.layers.size() == 3 ? Design::Fused : Design::Seed,
                                                     KernelSource::Ptx}
                                      : parse_kernel_choice(o.kernels);
    cfg.graphs = !o.no_graphs;
    cfg.overlap = !o.no_overlap;
    cfg.one_launch = !o.three_launches;
    cfg.steps_per_launch = o.steps_per_launch;
    set_kernel_timeout(o.timeout);
    cfg.loss = parse_loss(o.loss);
    cfg.dirs = o.ptx_dir.empty() ? KernelDirs::from_environment() : KernelDirs::from_ptx_dir(o.ptx_dir);
    cfg.max_steps = o.max_steps;
    cfg.progress = !o.no_progress;
    cfg.log_csv = o.log;
    if (o.preset == "notebook") {
        // The notebook's run: lr 0.001, batch 64, N(0, 0.01) weights and biases, eval every 100 batches, stop at 60 %.
        if (!o.given("--lr")) cfg.lr = 0.001f;
        if (!o.given("--eval-every")) cfg.eval_every = 100;
        if (!o.given("--target")) cfg.target = 0.60;
        if (!o.given("--loss")) cfg.loss = Loss::HalfSse;
        cfg.init = Init::Notebook;
    } else if (!o.preset.empty()) {
        PTXLAB_THROW(InputError, "unknown preset '{}' (known: notebook)", o.preset);
    }

    cfg.validate_flags();
    driver();  // no GPU: fail before anything slow
    const std::string dir = o.data.empty() ? default_data_dir() : o.data;
    auto t0 = std::chrono::steady_clock::now();
    Dataset data = load_dataset(dir);
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    cfg.validate(data.train);

    Context ctx(o.device);
    fmt::print("ptxlab train: {} MLP, {} kernels, on {} ({})\n", layers_text(cfg.layers), to_string(cfg.kernels),
               ctx.info().name, ctx.info().arch());
    fmt::print("  data {} ({} train / {} test), loss {}, batch {}, lr {}, init {}, seed {}, target {:.2f} %, at most {} "
               "epochs, evaluation every {}\n",
               dir, data.train.count, data.test.count, to_string(cfg.loss), cfg.batch, cfg.lr,
               describe(cfg.init),
               cfg.seed, 100.0 * cfg.target, cfg.max_epochs,
               cfg.eval_every ? fmt::format("{} batches", cfg.eval_every) : std::string("epoch"));
    std::cout.flush();

    g_stop_requested = false;
    auto old = std::signal(SIGINT, on_sigint);
    TrainResult r;
    try {
        r = train(ctx, data, cfg, std::cout);
    } catch (...) {
        std::signal(SIGINT, old);
        throw;
    }
    std::signal(SIGINT, old);

    fmt::print("summary: {}\n", r.stop_reason);
    fmt::print("  test accuracy {:.2f} % after {} step{} in {} epoch{}{}\n", 100.0 * r.accuracy, r.steps,
               r.steps == 1 ? "" : "s", r.epochs, r.epochs == 1 ? "" : "s",
               r.reached ? fmt::format("; training time to target {:.2f} s", r.train_ms_to_target / 1e3) : "");
    fmt::print("  time: data loading {:.2f} s, JIT {:.2f} s, training {:.2f} s, evaluation {:.2f} s\n", load_ms / 1e3,
               r.jit_ms / 1e3, r.train_ms / 1e3, r.eval_ms / 1e3);
    if (!o.save.empty()) {
        save_safetensors(o.save, r.model,
                         {{"kernels", to_string(cfg.kernels)},
                          {"seed", std::to_string(cfg.seed)},
                          {"steps", std::to_string(r.steps)},
                          {"test_accuracy", fmt::format("{:.6f}", r.accuracy)}});
        fmt::print("  saved {} (safetensors: fc1.weight, fc1.bias, ...)\n", o.save);
    }
    if (r.diverged) {
        fmt::print(stderr, "ptxlab: error: {}\n", r.stop_reason);
        if (!o.save.empty()) fmt::print(stderr, "        (the checkpoint holds the parameters after the failing step)\n");
        return kExitFailure;
    }
    if (r.interrupted) return kExitInterrupted;
    return kExitOk;
}

}  // namespace

void setup_train(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<TrainOptions>();
    auto* sub = app.add_subcommand(
        "train",
        "Train the MLP on MNIST with the hand-written PTX kernels until the test accuracy reaches the target. "
        "Defaults: 784-128-10, ReLU, MSE on one-hot targets (as PyTorch's "
        "nn.MSELoss: the mean of (y-t)^2 over samples and outputs), SGD with batch 64 and lr 0.2, He-uniform weights (bound sqrt(6/fan_in)) and zero "
        "biases, evaluation once per epoch, target 97 %, at most 20 epochs, the fused kernels. Steps run in chunks replayed as CUDA "
        "graphs; Ctrl-C stops after the current chunk (at most 128 fused or 8 seed steps), saves with --save and prints "
        "the summary.");
    o->sub = sub;
    sub->add_option("--data", o->data, "dataset directory (default: $PTXLAB_DATA_DIR or data/mnist)");
    sub->add_option("--layers", o->layers, "layer sizes: I,H,O or I,H1,H2,O")->capture_default_str();
    sub->add_option("--hidden", o->hidden, "hidden width of the 2-layer network (shorthand for --layers 784,N,10)");
    sub->add_option("--batch", o->batch, "batch size")->capture_default_str();
    sub->add_option("--lr", o->lr, "learning rate")->capture_default_str();
    sub->add_option("--epochs", o->epochs, "at most this many epochs")->capture_default_str();
    sub->add_option("--target", o->target, "stop at this test accuracy (a fraction in (0, 1])")->capture_default_str();
    sub->add_option("--eval-every", o->eval_every, "evaluate every N batches instead of once per epoch");
    sub->add_option("--seed", o->seed, "seed for initialisation and shuffling")->capture_default_str();
    sub->add_option("--preset", o->preset,
                    "notebook: the notebook's run (loss half-sse, lr 0.001, N(0, 0.01) init, eval every 100 batches, target 60 %); "
                    "explicit flags override it");
    sub->add_option("--loss", o->loss,
                    "mse: mean of (y-t)^2 over samples and outputs, as PyTorch's nn.MSELoss (gradient 2(y-t)/O); "
                    "half-sse: the notebook's 0.5|y-t|^2 per sample, averaged over the batch (gradient y-t)")
        ->capture_default_str();
    sub->add_option("--kernels", o->kernels,
                    "kernel set: fused (batch gradients computed directly; for batches up to 64 the whole step in "
                    "one launch, ptx/step.ptx, else the 3 launches of ptx/fused.ptx; 2-layer networks, sm_90), fast (per-sample gradients with many threads per sample: "
                    "fused_forward, fused_output, outer.ptx, update.ptx; 2-layer networks, sm_90), ptx (the "
                    "notebook's design: one thread per sample, ptx/grad.ptx + update.ptx), or their NVRTC twins "
                    "fused-reference, fast-reference and reference; auto = fused for 2 layers, ptx for 3")
        ->capture_default_str();
    sub->add_flag("--no-graphs", o->no_graphs, "launch every kernel from the host instead of replaying CUDA graphs");
    sub->add_flag("--no-overlap", o->no_overlap,
                  "fused set: start each kernel only when the previous one has finished, instead of programmatic "
                  "dependent launches that schedule it while the previous one drains (same results, bit for bit)");
    sub->add_flag("--three-launches", o->three_launches,
                  "fused set: run the step as fused_forward, fused_output and fused_sgd (ptx/fused.ptx) instead of "
                  "the one-launch fused_step (ptx/step.ptx); the same step, summed in another order");
    sub->add_option("--steps-per-launch", o->steps_per_launch,
                    "fused set, one-launch step: steps that one launch of fused_step runs back to back, with no "
                    "launch between them (0: every step of a chunk of 128; 1: a launch a step); the same results "
                    "bit for bit")
        ->capture_default_str();
    sub->add_option("--timeout", o->timeout,
                    "watchdog: fail (exit 4) naming the kernel when the GPU has not finished a chunk of work within "
                    "this many seconds; 0: no limit")
        ->capture_default_str();
    sub->add_option("--ptx-dir", o->ptx_dir, "kernel directory (default: $PTXLAB_PTX_DIR or the source tree's ptx/)");
    sub->add_option("--log", o->log, "write one CSV row per evaluation (step, epoch, loss, accuracy, elapsed)");
    sub->add_option("--save", o->save, "save the trained weights as a .safetensors file");
    sub->add_option("--max-steps", o->max_steps, "stop after this many steps (0: no limit)");
    sub->add_flag("--no-progress", o->no_progress, "no progress bar");
    sub->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
    sub->callback([o, &chosen] { chosen = [o] { return run_train(*o); }; });
}

}  // namespace ptxlab::cli
