// ptxlab train: train a network (the MLP of --layers, or a --model) on MNIST with the hand-written PTX kernels.
#include "commands.hpp"
#include "flags.hpp"
#include "files.hpp"
#include "layers.hpp"
#include "model.hpp"
#include "optim.hpp"
#include "optimizers.hpp"
#include "safetensors.hpp"
#include "train.hpp"
#include "train_cnn.hpp"

#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>

namespace ptxlab::cli {

namespace {

struct TrainOptions {
    std::string data;
    std::string layers = "784,128,10";
    std::string model;  // --model: a layer list (model.hpp); fc-only lists train as --layers
    unsigned hidden = 0;
    unsigned batch = 64;
    float lr = 0.1f;
    unsigned epochs = 5;
    double target = 0.98;
    bool stop_at_target = false;
    unsigned eval_every = 0, evals_per_epoch = 20;
    uint64_t seed = 1;
    std::string preset;
    std::string init = "torch", loss = "ce", optimizer = "nesterov", schedule = "onecycle";
    std::string activation = "relu";
    float momentum = 0.9f, weight_decay = 0.0f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, alpha = 0.99f;
    double warmup = 0.2, step_every = 0, gamma = 0.1;
    std::string kernels = "auto";
    bool no_graphs = false, no_overlap = false, three_launches = false, dense_program = false;
    unsigned steps_per_launch = 0;
    double timeout = 120;
    std::string ptx_dir;
    std::string log, log_steps, save, save_init, resume;
    unsigned max_steps = 0;
    bool no_progress = false;
    int device = 0;
    CLI::App* sub = nullptr;
    bool given(const char* flag) const { return sub->count(flag) > 0; }
};

void on_sigint(int) {
    if (g_stop_requested.exchange(true)) std::_Exit(kExitInterrupted);  // a second Ctrl-C stops at once
}

// While it lives, Ctrl-C asks the trainer to stop after the current chunk (on_sigint).
class SigintScope {
public:
    SigintScope() {
        g_stop_requested = false;
        old_ = std::signal(SIGINT, on_sigint);
    }
    ~SigintScope() { std::signal(SIGINT, old_); }
    SigintScope(const SigintScope&) = delete;
    SigintScope& operator=(const SigintScope&) = delete;

private:
    void (*old_)(int) = nullptr;
};

// The files train writes, for require_outputs: checkpoints are renamed into place (a regular
// file), the CSV logs are written as they go (/dev/null will do).
std::vector<OutputFlag> output_flags(const TrainOptions& o) {
    return {{"--save", o.save, o.given("--save")},
            {"--save-init", o.save_init, o.given("--save-init")},
            {"--log", o.log, o.given("--log"), true},
            {"--log-steps", o.log_steps, o.given("--log-steps"), true}};
}

// The recipe flags, then a preset's values for the flags that were not given.
void apply_recipe(const TrainOptions& o, TrainConfig& cfg) {
    cfg.lr = o.lr;
    cfg.epochs = o.epochs;
    cfg.target = o.target;
    cfg.stop_at_target = o.stop_at_target;
    cfg.eval_every = o.eval_every;
    cfg.evals_per_epoch = o.evals_per_epoch;
    cfg.init = parse_init(o.init);
    cfg.loss = parse_loss(o.loss);
    cfg.activation = parse_activation(o.activation);
    cfg.optim.kind = parse_optimizer(o.optimizer);
    cfg.optim.momentum = o.momentum;
    cfg.optim.weight_decay = o.weight_decay;
    cfg.optim.beta1 = o.beta1;
    cfg.optim.beta2 = o.beta2;
    cfg.optim.eps = o.eps;
    cfg.optim.alpha = o.alpha;
    cfg.schedule.kind = parse_schedule(o.schedule);
    cfg.schedule.warmup = o.warmup;
    cfg.schedule.gamma = o.gamma;
    cfg.step_every_epochs = o.step_every;
    auto unless = [&](const char* flag, auto& field, auto value) {
        if (!o.given(flag)) field = value;
    };
    if (o.preset == "classic") {
        // The old default: MSE, plain SGD at lr 0.2, constant lr, torch init, stop at 97 %.
        unless("--loss", cfg.loss, Loss::Mse);
        unless("--optimizer", cfg.optim.kind, OptimKind::Sgd);
        unless("--schedule", cfg.schedule.kind, ScheduleKind::Const);
        unless("--warmup", cfg.schedule.warmup, 0.0);
        unless("--lr", cfg.lr, 0.2f);
        unless("--epochs", cfg.epochs, 20u);
        unless("--target", cfg.target, 0.97);
        if (!o.given("--evals-per-epoch")) cfg.evals_per_epoch = 1;
        cfg.stop_at_target = true;
    } else if (o.preset == "notebook") {
        // The notebook's run: half-SSE, SGD lr 0.001, batch 64, N(0, 0.01) weights and biases,
        // an evaluation every 100 batches, stop at 60 %.
        unless("--loss", cfg.loss, Loss::HalfSse);
        unless("--optimizer", cfg.optim.kind, OptimKind::Sgd);
        unless("--schedule", cfg.schedule.kind, ScheduleKind::Const);
        unless("--warmup", cfg.schedule.warmup, 0.0);
        unless("--init", cfg.init, Init::Notebook);
        unless("--lr", cfg.lr, 0.001f);
        unless("--epochs", cfg.epochs, 20u);
        unless("--eval-every", cfg.eval_every, 100u);
        unless("--target", cfg.target, 0.60);
        cfg.stop_at_target = true;
    } else if (!o.preset.empty()) {
        PTXLAB_THROW(InputError, "unknown preset '{}' (known: classic, notebook)", o.preset);
    }
    // A constant the chosen optimizer does not read is refused rather than silently ignored.
    for (const char* flag : {"--momentum", "--beta1", "--beta2", "--eps", "--alpha"})
        if (o.given(flag))
            if (const std::string why = optimizer_flag_unused(cfg.optim.kind, flag); !why.empty())
                PTXLAB_THROW(InputError, "{}{}", why,
                             o.given("--optimizer") ? "" : fmt::format(" (the optimizer of {}; --optimizer picks another)",
                                                                       o.preset.empty() ? "the default recipe"
                                                                                        : "--preset " + o.preset));
}

std::string recipe_text(const TrainConfig& cfg, unsigned steps_per_epoch) {
    return fmt::format("loss {}, activation {}, optimizer {}, lr {} ({}), batch {}, {} epoch{}, init {}",
                       to_string(cfg.loss), to_string(cfg.activation), cfg.optim.describe(), cfg.lr,
                       cfg.schedule_for(steps_per_epoch).describe(), cfg.batch, cfg.epochs,
                       cfg.epochs == 1 ? "" : "s", describe(cfg.init));
}

void print_summary(const TrainConfig& cfg, const TrainResult& r, double load_ms) {
    fmt::print("summary: {}\n", r.stop_reason);
    fmt::print("  final test accuracy {:.2f} % after {} step{} in {} epoch{}\n", 100.0 * r.accuracy, r.steps,
               r.steps == 1 ? "" : "s", r.epochs, r.epochs == 1 ? "" : "s");
    if (r.reached)
        fmt::print("  target {:.2f} % first reached at step {}, after {} of training\n", 100.0 * cfg.target,
                   r.target_step, format_ms(r.train_ms_to_target));
    else
        fmt::print("  target {:.2f} % not reached\n", 100.0 * cfg.target);
    fmt::print("  time: training {}, evaluation {} ({} evaluations), CUDA graph capture {}, JIT {}, data loading {}\n",
               format_ms(r.train_ms), format_ms(r.eval_ms), r.curve.size(), format_ms(r.graph_ms), format_ms(r.jit_ms),
               format_ms(load_ms));
}

// The kernel sets the model trainer takes: tc (the conv passes and the hidden fc layers' weight
// gradients on the tensor cores), fused and ptx (all FP32), and their NVRTC twins.
bool model_trainer_set(const std::string& k) {
    for (const char* s : {"auto", "tc", "tc-reference", "fused", "fused-reference", "ptx", "reference"})
        if (k == s) return true;
    return false;
}

// Why a network of 3 fc layers or more does not run on the model trainer's dense kernels with
// these flags (the notebook's one-thread-per-sample kernels take it instead: 3 layers only), or "".
std::string model_trainer_unfit(const TrainOptions& o) {
    if (o.kernels == "ptx" || o.kernels == "reference")
        return fmt::format("--kernels {} asks for the notebook's kernels", o.kernels);
    if (!model_trainer_set(o.kernels))
        return fmt::format("--kernels {} is not one of its kernel sets (tc, fused and their -reference twins)",
                           o.kernels);
    for (const char* flag : {"--three-launches", "--steps-per-launch"})
        if (o.given(flag)) return fmt::format("{} is a flag of the 2-layer one-launch steps", flag);
    return "";
}

// The network the flags name, into cfg: a --model with conv layers, or fc layers (--layers,
// --hidden, or an fc-only --model). Networks of 2 fc layers run on the MLP's kernel sets, larger
// ones and every --model with conv layers on the model trainer's step (cfg.model), except that a
// 3-layer network with a flag that trainer does not take runs on the notebook's kernels: then the
// returned note says why; so does a 2-layer network with --kernels tc and an activation other than
// ReLU, which tc_forward's epilogue lacks: it runs on the model trainer (fused_forward and the rest).
std::string set_network(const TrainOptions& o, TrainConfig& cfg) {
    if (o.given("--model") && (o.given("--layers") || o.given("--hidden")))
        PTXLAB_THROW(InputError, "--model and --{} both set the network: give one of them",
                     o.given("--layers") ? "layers" : "hidden");
    if (o.given("--model")) {
        const Model m = parse_model(o.model);
        cfg.layers = m.fc_only() ? m.fc_sizes() : std::vector<unsigned>{};
        if (!m.fc_only()) cfg.model = m;
    } else {
        cfg.layers = parse_layers(o.layers);
    }
    if (o.given("--hidden")) {
        if (o.given("--layers"))
            PTXLAB_THROW(InputError, "--hidden {} and --layers {} both set the network: give one of them", o.hidden,
                         o.layers);
        if (cfg.layers.size() != 3) PTXLAB_THROW(InputError, "--hidden sets the width of a 2-layer network; with "
                                                             "--layers of 3 layers, give the widths there");
        if (o.hidden == 0) PTXLAB_THROW(InputError, "--hidden must be at least 1");
        cfg.layers[1] = o.hidden;
    }
    if (!cfg.model && cfg.layers.size() < 3)
        PTXLAB_THROW(InputError, "--model {} has 1 fc layer; a network takes 2 fc layers or more (e.g. fc128,fc10 or "
                                 "fc256,fc128,fc10; the input 784 is implied), or conv layers (e.g. cnn)",
                     o.model);
    std::string note;
    if (!cfg.model && cfg.layers.size() == 3 && (o.kernels == "tc" || o.kernels == "tc-reference") &&
        o.activation != "relu" && !o.given("--three-launches") && !o.given("--steps-per-launch") &&
        cfg.layers.front() == kMnistInput.size()) {
        cfg.model = parse_model(fmt::format("fc{},fc{}", cfg.layers[1], cfg.layers[2]));
        return fmt::format("the 2 layers run on the model trainer's kernels (fused_forward, fused_output, fused_grad, "
                           "FP32): tc_forward's epilogue has ReLU alone, not --activation {}",
                           o.activation);
    }
    if (!cfg.model && cfg.layers.size() >= 4) {
        note = model_trainer_unfit(o);
        if (note.empty() || cfg.layers.size() > 4) {
            if (!note.empty())
                PTXLAB_THROW(InputError, "{}: networks of {} fc layers train on the model trainer's dense kernels "
                                         "only (the notebook's kernels take 2 or 3 layers), and {}",
                             o.given("--model") ? "--model " + o.model : "--layers " + o.layers, cfg.layers.size() - 1,
                             note);
            if (cfg.layers.front() != kMnistInput.size())
                PTXLAB_THROW(InputError, "--layers {}: the model trainer takes MNIST's {}x{} images, {} inputs, not {}",
                             o.layers, kMnistInput.h, kMnistInput.w, kMnistInput.size(), cfg.layers.front());
            std::string spec;
            for (size_t i = 1; i < cfg.layers.size(); ++i) spec += fmt::format("{}fc{}", i > 1 ? "," : "", cfg.layers[i]);
            cfg.model = parse_model(spec);
        }
        if (!note.empty())
            note = fmt::format("{} layers run on the notebook's one-thread-per-sample kernels (milliseconds a step), "
                               "not the model trainer's dense kernels: {}",
                               cfg.layers.size() - 1, note);
    }
    if (cfg.model) {
        for (const char* flag : {"--three-launches", "--steps-per-launch"})
            if (o.given(flag))
                PTXLAB_THROW(InputError, "--model {}: {} is a flag of the one-launch steps of 2 fc layers (fused_step, "
                                         "tc_step)",
                             cfg.model->text(), flag);
        if (!model_trainer_set(o.kernels))
            PTXLAB_THROW(InputError, "--model {}: --kernels {}: the model trainer runs on the conv, pool and dense "
                                     "kernels: tc (the default: the conv layers' three passes and the hidden fc "
                                     "layers' weight gradients on the tensor cores, ptx/tcconv.ptx, ptx/tcwgrad.ptx "
                                     "and ptx/tc.ptx), fused or ptx (all FP32), or tc-reference, fused-reference and "
                                     "reference (their NVRTC twins)",
                         cfg.model->text(), o.kernels);
    }
    return note;
}

// The header of a run: the network, the kernels and the device, the data, the recipe.
void print_header(const TrainConfig& cfg, const Context& ctx, const Dataset& data, const std::string& dir,
                  const std::string& note) {
    if (const Model* m = cfg.model ? &*cfg.model : nullptr) {
        fmt::print("ptxlab train: --model {} ({} parameters), {} kernels{}, on {} ({})\n  {}\n", m->text(),
                   m->param_count, to_string(cfg.kernels.source),
                   conv_kernels_of(cfg.kernels) == ConvKernels::Tc ? " (tensor cores, TF32, where named tc_)" : "",
                   ctx.info().name, ctx.info().arch(), m->shapes_text());
        // fc3_step, dense_program or the layer-by-layer step, and the kernels of each layer.
        fmt::print("{}", model_step_listing(cfg, cnn_wgk_loaded(ctx.info(), cfg.kernels.source, cfg.dirs),
                                            cnn_transposes_loaded(ctx.info(), cfg.kernels.source, cfg.dirs)));
    } else {
        fmt::print("ptxlab train: {} MLP, {} kernels, on {} ({})\n  a step: {}\n", layers_text(cfg.layers),
                   to_string(cfg.kernels), ctx.info().name, ctx.info().arch(), mlp_step_kernels(cfg));
    }
    if (!note.empty()) fmt::print("  note: {}\n", note);
    fmt::print("  data {} ({} train / {} test), seed {}, target {:.2f} %{}, evaluation {}\n", dir, data.train.count,
               data.test.count, cfg.seed, 100.0 * cfg.target, cfg.stop_at_target ? " (stop there)" : "",
               cfg.eval_every ? fmt::format("every {} steps", cfg.eval_every)
                              : fmt::format("{} times an epoch", cfg.evals_per_epoch));
    fmt::print("  {}\n", recipe_text(cfg, static_cast<unsigned>(data.train.count / cfg.batch)));
}

// The run's configuration from the flags (the network by set_network, whose note it returns).
TrainConfig configure(const TrainOptions& o, std::string& note) {
    TrainConfig cfg;
    note = set_network(o, cfg);
    const bool conv = cfg.model && !cfg.model->fc_only();
    cfg.batch = o.batch;
    cfg.seed = o.seed;
    apply_recipe(o, cfg);
    // A model with conv layers: the CNN's recipe where the flag is not given (train_cnn.hpp: peak
    // lr 0.05, 4 epochs, target 99 %); fc networks keep the MLP's (lr 0.1, 5 epochs, 98 %).
    if (conv && !o.given("--lr") && o.preset.empty()) cfg.lr = kCnnDefaultLr;
    if (conv && !o.given("--epochs") && o.preset.empty()) cfg.epochs = kCnnDefaultEpochs;
    if (conv && !o.given("--target") && o.preset.empty()) cfg.target = 0.99;
    // auto: 2 fc layers on the fused set; a --model on tc (the conv layers on the tensor cores,
    // TF32 products as cuDNN takes them by default in PyTorch); the notebook's 3 layers on ptx.
    if (o.kernels != "auto") cfg.kernels = parse_kernel_choice(o.kernels);
    else if (cfg.model) cfg.kernels = {Design::Tc, KernelSource::Ptx};
    else cfg.kernels = {cfg.layers.size() == 3 ? Design::Fused : Design::Seed, KernelSource::Ptx};
    cfg.graphs = !o.no_graphs;
    cfg.overlap = !o.no_overlap;
    cfg.one_launch = !o.three_launches;
    cfg.dense_program = o.dense_program;
    cfg.steps_per_launch = o.steps_per_launch;
    set_kernel_timeout(o.timeout);
    cfg.dirs = KernelDirs::for_ptx_dir_flag(o.ptx_dir);
    cfg.max_steps = o.max_steps;
    cfg.progress = !o.no_progress;
    cfg.log_csv = o.log;
    cfg.log_steps_csv = o.log_steps;
    return cfg;
}

// The checkpoints of a run that stopped: --save's, or interrupted.safetensors after Ctrl-C; the
// exit code.
int finish(const TrainOptions& o, const TrainConfig& cfg, const TrainResult& r, unsigned steps_per_epoch) {
    const std::map<std::string, std::string> meta = {{"kernels", to_string(cfg.kernels)},
                                                     {"recipe", recipe_text(cfg, steps_per_epoch)},
                                                     {"steps", std::to_string(r.steps)},
                                                     {"test_accuracy", fmt::format("{:.6f}", r.accuracy)}};
    if (!o.save.empty()) {
        save_training_checkpoint(o.save, cfg, r, meta);
        fmt::print("  saved {} (safetensors, nn.Sequential's names: {}.weight, ..., and the optimizer's state for "
                   "--resume)\n",
                   o.save, cfg.model ? cfg.model->layers.front().name : "fc1");
    }
    if (r.interrupted) {
        const std::string path = o.save.empty() ? "interrupted.safetensors" : o.save;
        if (o.save.empty()) save_training_checkpoint(path, cfg, r, meta);
        fmt::print(stderr,
                   "ptxlab: interrupted after step {}. {} holds the weights, the optimizer's state and the position: "
                   "continue with the same flags and --resume {}\n",
                   r.steps, path, path);
    }
    if (r.diverged) {
        fmt::print(stderr, "ptxlab: error: {}\n", r.stop_reason);
        if (!o.save.empty()) fmt::print(stderr, "        (the checkpoint holds the parameters after the failing step)\n");
        return kExitFailure;
    }
    if (r.interrupted) return kExitInterrupted;
    return kExitOk;
}

// What a run needs before the GPU is touched: its configuration, checked; the data, checked
// against it; the checkpoint it resumes. Made by prepare_run, kept in one place (cfg.resume points
// into it).
struct PreparedRun {
    TrainConfig cfg;
    std::string note, dir;
    ResumeState resume;
    Dataset data;
    double load_ms = 0;
};

// Everything train checks before the GPU: the flags, the output paths, then the checkpoint to
// resume and the data (InputError). profile --train calls it too, before its own GPU work.
std::shared_ptr<PreparedRun> prepare_run(const TrainOptions& o) {
    auto p = std::make_shared<PreparedRun>();
    TrainConfig& cfg = p->cfg;
    cfg = configure(o, p->note);
    cfg.validate_flags();
    if (cfg.dense_program)  // asked for by name: a network it cannot run is refused, not run otherwise
        if (const std::string why = dense_step_unfit(cfg); !why.empty()) PTXLAB_THROW(InputError, "--dense-program: {}", why);
    require_outputs(output_flags(o));
    if (!o.resume.empty()) {
        p->resume = load_training_checkpoint(o.resume, cfg);
        cfg.resume = &p->resume;
    }
    p->dir = o.data.empty() ? default_data_dir() : o.data;
    auto t0 = std::chrono::steady_clock::now();
    p->data = load_dataset(p->dir);
    p->load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    cfg.validate(p->data.train);
    return p;
}

// The run itself, on the GPU; `between_chunks`: TrainConfig::between_chunks.
int run_prepared(const TrainOptions& o, PreparedRun& p, const std::function<void()>& between_chunks = {}) {
    p.cfg.between_chunks = between_chunks;
    const TrainConfig& cfg = p.cfg;
    Context ctx(o.device);
    print_header(cfg, ctx, p.data, p.dir, p.note);
    const unsigned steps_per_epoch = static_cast<unsigned>(p.data.train.count / cfg.batch);
    std::cout.flush();
    if (!o.save_init.empty()) {
        const std::map<std::string, std::string> meta = {{"init", to_string(cfg.init)}, {"seed", std::to_string(cfg.seed)}};
        if (cfg.model) save_model_safetensors(o.save_init, *cfg.model, init_model_params(*cfg.model, cfg.init, cfg.seed), meta);
        else save_safetensors(o.save_init, init_params(cfg.layers, cfg.init, cfg.seed), meta);
        fmt::print("  saved the initial parameters to {}\n", o.save_init);
    }

    TrainResult r;
    {
        SigintScope ctrl_c;
        r = train(ctx, p.data, cfg, std::cout);
    }

    if (!o.resume.empty())
        fmt::print("  resumed from {} at step {} (epoch {}, step {} of it)\n", o.resume, p.resume.step, p.resume.epoch,
                   p.resume.k);
    print_summary(cfg, r, p.load_ms);
    return finish(o, cfg, r, steps_per_epoch);
}

int run_train(const TrainOptions& o) {
    const auto p = prepare_run(o);
    return run_prepared(o, *p);
}

// The recipe's flags (train's help lists them in this order).
void add_recipe_flags(CLI::App* sub, TrainOptions& opts) {
    TrainOptions* o = &opts;
    sub->add_option("--preset", o->preset,
                    "classic: the old recipe (mse, sgd at lr 0.2, constant lr, torch init, at most 20 epochs, stop "
                    "at 97 %); notebook: the notebook's run (half-sse, sgd at lr 0.001, N(0, 0.01) init, an "
                    "evaluation every 100 steps, stop at 60 %); explicit flags override a preset");
    sub->add_option("--init", o->init,
                    "torch: nn.Linear's default, weights and biases U(+-1/sqrt(fan_in)); he-uniform; he-normal; "
                    "xavier (uniform); notebook: N(0, 0.01^2) weights and biases")->capture_default_str();
    sub->add_option("--loss", o->loss,
                    "ce: softmax cross-entropy on the logits, mean over the batch (F.cross_entropy); mse: mean of "
                    "(y-t)^2 over samples and outputs on one-hot targets (nn.MSELoss); half-sse: the notebook's "
                    "0.5|y-t|^2 per sample, averaged over the batch")->capture_default_str();
    sub->add_option("--activation", o->activation,
                    "the hidden layers' activation: relu, leaky-relu (slope 0.01), tanh, sigmoid, gelu (the exact "
                    "erf form, nn.GELU()) on every network: the 2-layer kernel sets (fused, fast, ptx: fused_step "
                    "takes every one; tc-bf16 ReLU only; tc runs another on the model trainer's kernels), the "
                    "notebook's 3-layer kernels and the model trainer (--model, 3 fc layers or more: ReLU in the "
                    "kernels' epilogues, any other as its own pass, ptx/act.ptx, conv -> act -> pool). A checkpoint "
                    "records it and eval uses it")->capture_default_str();
    // The optimizers' lines come from the optimizer table (optimizers.hpp).
    sub->add_option("--optimizer", o->optimizer,
                    optimizer_help() + ": PyTorch's update rules; the state buffers start at zero. Every one runs "
                    "in the one-launch steps (fused_step, tc_step) and as the optimizer kernel's launch")->capture_default_str();
    sub->add_option("--momentum", o->momentum, optimizers_with(kFlagMomentum) + ": the momentum")->capture_default_str();
    sub->add_option("--weight-decay", o->weight_decay,
                    fmt::format("L2 weight decay ({}: decoupled)", optimizers_with(0, true)))->capture_default_str();
    sub->add_option("--beta1", o->beta1, optimizers_with(kFlagBetas))->capture_default_str();
    sub->add_option("--beta2", o->beta2, optimizers_with(kFlagBetas))->capture_default_str();
    sub->add_option("--eps", o->eps, optimizers_with(kFlagEps))->capture_default_str();
    sub->add_option("--alpha", o->alpha, optimizers_with(kFlagAlpha) + ": the smoothing constant")->capture_default_str();
    sub->add_option("--schedule", o->schedule,
                    "the learning rate of each step: const; cosine (to 0 at the end); onecycle (linear warm-up "
                    "from 0 to --lr, then linear decay to 0); step (times --gamma every --step-every epochs)")
        ->capture_default_str();
    sub->add_option("--warmup", o->warmup,
                    "the fraction of the steps spent in a linear warm-up from 0 (every schedule; onecycle's rise)")
        ->capture_default_str();
    sub->add_option("--step-every", o->step_every, "step schedule: epochs between decays (default: a third of --epochs)");
    sub->add_option("--gamma", o->gamma, "step schedule: the decay factor")->capture_default_str();
}

}  // namespace

// The flags of the kernels a run launches and how.
void add_kernel_flags(CLI::App* sub, TrainOptions& opts) {
    sub->add_option("--kernels", opts.kernels,
                    "kernel set: fused (batch gradients computed directly: fused_forward, fused_output, fused_grad, "
                    "then the optimizer kernel; for batches up to 64 the whole step, any loss and optimizer, in one "
                    "launch, ptx/step.ptx; 2-layer networks, sm_90), fast (per-sample gradients with many threads "
                    "per sample: fused_forward, fused_output, outer, batch_mean, optimizer; 2-layer networks, "
                    "sm_90), tc (tensor cores, TF32 mma.sync with FP32 sums: for batches up to 64 the whole step "
                    "in one launch of one 16-block cluster, tc_step, ptx/tcstep.ptx; otherwise tc_forward for "
                    "the hidden layer, fused_output, tc_grad_weights for both layers' gradients, optimizer, "
                    "ptx/tc.ptx; 2-layer ReLU networks, sm_90), tc-bf16 (tc's kernels on BF16 inputs, "
                    "m16n8k16 mma.sync with FP32 sums and FP32 weights: tc_forward_bf16, fused_output, "
                    "tc_grad_weights_bf16, optimizer, one launch each at any batch, ptx/tcbf16.ptx), ptx (the "
                    "notebook's design: one thread per sample, ptx/grad.ptx, batch_mean, optimizer), or their NVRTC "
                    "twins fused-reference, fast-reference, tc-reference, tc-bf16-reference and reference; auto = fused "
                    "for 2 layers, tc (the model trainer) for 3 or more. The model trainer (--model, 3 fc layers or "
                    "more) takes tc, fused, ptx and their twins: tc (auto) runs the hidden fc layers' weight gradients "
                    "on tc_grad_weights and the conv layers' forward passes and both gradients on the tensor cores (ptx/tcconv.ptx, ptx/tcwgrad.ptx: TF32 "
                    "products, FP32 sums, as cuDNN does by default in PyTorch; passes over fewer than 8 channels "
                    "and the fc layers in FP32), fused and ptx run everything in FP32 (ptx/conv.ptx); "
                    "tc-reference, fused-reference and reference are the twins")
        ->capture_default_str();
    sub->add_flag("--no-graphs", opts.no_graphs, "launch every kernel from the host instead of replaying CUDA graphs");
    sub->add_flag("--no-overlap", opts.no_overlap,
                  "fused set: each kernel starts when the previous one has finished (no programmatic dependent "
                  "launches); --model: the weight gradients on the main stream, not on side streams (same bits)");
    sub->add_flag("--dense-program", opts.dense_program,
                  "an fc network of 3 layers or more with ReLU (fused or tc set): run its forward pass, loss and "
                  "gradients as one persistent launch of dense_program (ptx/densestep.ptx: GEMM phases with a "
                  "grid-wide barrier between them), then the optimizer; off by default, since it is slower than the "
                  "layer-by-layer kernels at MNIST's sizes (H100: 49.8 against 28.8 us a step for 784-256-128-10)");
    sub->add_flag("--three-launches", opts.three_launches,
                  "fused and tc sets: run the step as separate launches (fused_forward or tc_forward, "
                  "fused_output, fused_grad or tc_grad_weights, the optimizer kernel) instead of the one-launch "
                  "fused_step (ptx/step.ptx) or tc_step (ptx/tcstep.ptx)");
    sub->add_option("--steps-per-launch", opts.steps_per_launch,
                    "fused and tc sets, one-launch step: steps that one launch of fused_step or tc_step runs back "
                    "to back, with no "
                    "launch between them (0: every step of a chunk of 128; 1: a launch a step); the same results "
                    "bit for bit")
        ->capture_default_str();
    sub->add_option("--timeout", opts.timeout,
                    "watchdog: fail (exit 4) naming the kernel when the GPU has not finished a chunk of work within "
                    "this many seconds; 0: no limit")
        ->capture_default_str();
    sub->add_option("--ptx-dir", opts.ptx_dir,
                    "read the PTX from this directory (default: $PTXLAB_PTX_DIR or the source tree's ptx/); the twins "
                    "stay in the reference directory, as in check and verify")->check(kNonEmptyPath);
}

// The files a run writes and reads back, and its stopping flags.
void add_output_flags(CLI::App* sub, TrainOptions& opts) {
    sub->add_option("--log", opts.log,
                    "write one CSV row per evaluation: step, epoch, train_loss, test_loss, test_accuracy, train_s, "
                    "elapsed_s, lr (tools/plot_curves.py draws it)")->check(kNonEmptyPath);
    sub->add_option("--log-steps", opts.log_steps, "write one CSV row per step: step, epoch, loss, lr")->check(kNonEmptyPath);
    sub->add_option("--save", opts.save,
                    "save the trained weights as a .safetensors file in nn.Sequential's names (fc1.weight [H][I], "
                    "fc1.bias, ...; conv1.weight [K][C][k][k] for a --model), the optimizer's state "
                    "(optimizer.state1, optimizer.state2) and, in its metadata, the recipe, the step, the schedule "
                    "position and the shuffle state, so that --resume can continue; eval --load reads it")->check(kNonEmptyPath);
    sub->add_option("--resume", opts.resume,
                    "continue the run a --save checkpoint (or Ctrl-C's interrupted.safetensors) stopped: weights, "
                    "optimizer state, step, schedule position and shuffle order, for the MLP and any --model; give "
                    "the same network and recipe flags (a difference is refused, naming the flag). A checkpoint "
                    "that disagrees with itself or the data is refused before the GPU is looked for. The result is "
                    "the same, bit for bit, as a run that was not interrupted")->check(kNonEmptyPath);
    sub->add_option("--save-init", opts.save_init,
                    "save the initial weights as a .safetensors file (tools/torch_reference.py --init-from)")->check(kNonEmptyPath);
    sub->add_option("--max-steps", opts.max_steps, "stop after this many steps (0: no limit)");
    sub->add_flag("--no-progress", opts.no_progress, "no progress bar");
}

void setup_train(CLI::App& app, Command& chosen, PrepareCommand* prepare) {
    auto o = std::make_shared<TrainOptions>();
    auto* sub = app.add_subcommand(
        "train",
        "Train a network on MNIST with the hand-written PTX kernels: the MLP of --layers, or any --model. "
        "One loop runs every network: 2 fc layers on the MLP's kernel sets (--kernels), 3 fc layers or more and "
        "every --model with conv layers on the model trainer's step: 3 fc layers with ReLU at batch <= 64 (I <= 784, "
        "H1 <= 256, H2 <= 128) as whole steps in one launch of fc3_step on the tc set (the default there), the "
        "others layer by layer (it prints the kernels a step launches, and why not fc3_step). The default recipe is the one PyTorch users "
        "run: softmax cross-entropy, SGD with Nesterov momentum 0.9, a one-cycle schedule (linear warm-up from 0 "
        "over the first 20 % of the steps to the peak lr 0.1, then linear decay to 0), nn.Linear's init, ReLU, "
        "784-128-10, batch 64, 5 epochs, the fused kernels. The run goes through its whole schedule, evaluating "
        "20 times an epoch, and reports the step and training time at which the test accuracy first reached the "
        "target (98 %) and the final accuracy. Steps run in chunks replayed as CUDA graphs; Ctrl-C stops after the "
        "current chunk (128 steps for 2 fc layers and fc3_step, 32 for a --model's layer-by-layer step; chunks end at the evaluations; the graphs are "
        "captured before the clock starts and their capture time is reported apart), writes a checkpoint (--save, "
        "else interrupted.safetensors) that --resume continues, and exits with 130. A non-finite loss is "
        "replayed one kernel at a time with the PTX and then with the NVRTC twins from the same state, to tell a "
        "diverging recipe from a wrong kernel, naming the kernel and the first non-finite element.");
    o->sub = sub;
    sub->add_option("--data", o->data, "dataset directory (default: $PTXLAB_DATA_DIR or data/mnist)")->check(kNonEmptyPath);
    sub->add_option("--layers", o->layers,
                    "layer sizes: the input, the hidden widths, the output (784,128,10; 784,256,128,10; up to 16 "
                    "layers). 2 layers run on --kernels' set; 3 or more on the model trainer's dense kernels "
                    "(as --model fc256,fc128,fc10), except that 3 layers with --kernels ptx or reference, "
                    "--three-launches or --steps-per-launch run on the notebook's "
                    "one-thread-per-sample kernels (train says why)")->capture_default_str();
    sub->add_option("--model", o->model,
                    "the network as a layer list: " + model_grammar_help() +
                    "; the last is fc10, without activation; cnn = conv32,pool,conv64,pool,fc128,fc10. An fc list trains as --layers "
                    "(fc128,fc10 is --layers 784,128,10); a list with conv layers trains on the conv and pool "
                    "kernels (any --activation; defaults lr 0.05, 4 epochs, target 99 %, the conv layers on the tensor "
                    "cores: see --kernels)");
    sub->add_option("--hidden", o->hidden, "hidden width of the 2-layer network (shorthand for --layers 784,N,10)");
    sub->add_option("--batch", o->batch, "batch size")->capture_default_str();
    sub->add_option("--lr", o->lr, "the learning rate; the peak of the schedule")->capture_default_str();
    sub->add_option("--epochs", o->epochs, "epochs: the length of the schedule")->capture_default_str();
    sub->add_option("--target", o->target, "the test accuracy to reach (a fraction in (0, 1]); its first step and "
                                           "training time are reported")->capture_default_str();
    sub->add_flag("--stop-at-target", o->stop_at_target, "stop at the first evaluation that reaches --target");
    sub->add_option("--evals-per-epoch", o->evals_per_epoch,
                    "evaluations of the test set an epoch, at evenly spaced steps (the time to target is measured "
                    "at these points; evaluation time is reported apart)")->capture_default_str();
    sub->add_option("--eval-every", o->eval_every, "evaluate every N steps instead (overrides --evals-per-epoch)");
    add_seed_option(sub, o->seed, "seed for initialisation and shuffling");
    add_recipe_flags(sub, *o);
    add_kernel_flags(sub, *o);
    add_output_flags(sub, *o);
    add_device_option(sub, o->device);
    sub->callback([o, &chosen, prepare] {
        chosen = [o] { return run_train(*o); };
        if (prepare)
            *prepare = [o] {
                std::shared_ptr<PreparedRun> p = prepare_run(*o);
                return TrainRun([o, p](const std::function<void()>& between_chunks) {
                    return run_prepared(*o, *p, between_chunks);
                });
            };
    });
}

}  // namespace ptxlab::cli
