#include "bench.hpp"

#include "compile.hpp"
#include "headline.hpp"
#include "json_number.hpp"
#include "recipe.hpp"
#include "model.hpp"
#include "optim.hpp"
#include "registry.hpp"
#include "rng.hpp"
#include "train_cnn.hpp"
#include "train.hpp"
#include "verify.hpp"

#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace ptxlab {

BenchSet parse_bench_set(const std::string& full) {
    std::string name = full, recipe;
    if (const size_t colon = full.find(':'); colon != std::string::npos) {
        name = full.substr(0, colon);
        recipe = full.substr(colon + 1);
        if (recipe != "adam" && recipe != "classic")
            PTXLAB_THROW(InputError, "'{}': unknown recipe '{}' (adam or classic)", full, recipe);
    }
    for (const std::string suffix : {"/serial", "/split", "/single"}) {
        if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
        BenchSet s;
        s.kernels = parse_kernel_choice(name.substr(0, name.size() - suffix.size()));
        // The one-launch steps' variants: fused (fused_step) and tc (tc_step); /serial is the
        // fused set's alone (only its separate launches overlap).
        const bool one_launch_set = s.kernels.design == Design::Fused || s.kernels.design == Design::Tc;
        if (!one_launch_set || (suffix == "/serial" && s.kernels.design != Design::Fused))
            PTXLAB_THROW(InputError, "'{}': only the {} have a {} variant", full,
                         suffix == "/serial" ? "fused sets" : "fused and tc sets", suffix);
        if (suffix == "/serial") s.overlap = false, s.one_launch = false;  // overlap only concerns separate launches
        else if (suffix == "/split") s.one_launch = false;
        else s.steps_per_launch = 1;
        s.recipe = recipe;
        return s;
    }
    BenchSet s;
    s.kernels = parse_kernel_choice(name);
    s.recipe = recipe;
    return s;
}

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The case an entry is timed at, for a batch of B on the MNIST network (its row's bench
// shape, registry.hpp); nothing where it takes no such batch.
std::optional<VerifyCase> bench_case(const std::string& entry, unsigned B) {
    const KernelRow& row = kernel_row(entry);
    if (!row.bench_shape) PTXLAB_THROW(Error, "kernel '{}' has no bench shape (registry.hpp)", entry);
    std::optional<std::vector<unsigned>> shape = row.bench_shape(B);
    if (!shape) return std::nullopt;
    return VerifyCase{entry, std::move(*shape)};
}

// The least memory traffic (bytes) and the arithmetic (flops, an FMA = 2) a case must do.
std::pair<double, double> case_work(const VerifyCase& c) {
    const KernelRow& row = kernel_row(c.entry);
    if (!row.work) PTXLAB_THROW(Error, "kernel '{}' has no work formula (registry.hpp)", c.entry);
    return row.work(c);
}

}  // namespace

std::vector<std::string> bench_entries(const KernelChoice& k) {
    if (k.design == Design::Fused) return {"fused_step", "fused_forward", "fused_output", "fused_grad"};
    if (k.design == Design::Fast) return {"outer"};  // its other kernels are timed with the fused and seed sets
    if (k.design == Design::Tc && k.bf16) return {"tc_forward_bf16", "tc_grad_input_bf16", "tc_grad_weights_bf16"};
    if (k.design == Design::Tc) return {"tc_step", "fc3_step", "tc_forward", "tc_grad_input", "tc_grad_weights"};
    return {"forward2", "grad2", "batch_mean", "gather", "optim_sgd", "optim_adam"};
}

std::vector<std::string> bench_cnn_entries() {
    return {"conv_fwd",    "conv_bwd_data",    "conv_bwd_weights",    "pool_fwd",     "pool_bwd",
            "fc_bwd_data", "tc_conv_fwd",      "tc_conv_bwd_data",    "tc_conv_bwd_weights", "tc_grad_input",
            "dense_mm",    "dense_tc"};
}

namespace {

// `ptxlab train`'s defaults with the bench set's kernels and launch mode, quiet.
TrainConfig train_config(const std::string& set, const BenchOptions& opt) {
    const BenchSet bs = parse_bench_set(set);
    TrainConfig cfg;
    cfg.kernels = bs.kernels;
    cfg.overlap = bs.overlap;
    cfg.one_launch = bs.one_launch;
    cfg.steps_per_launch = bs.steps_per_launch;
    cfg.seed = opt.seed;
    cfg.progress = false;
    cfg.dirs = opt.dirs;
    if (bs.recipe == "adam") {
        cfg.optim.kind = OptimKind::Adam;
        cfg.lr = 1e-3f;
    } else if (bs.recipe == "classic") {  // as train --preset classic
        cfg.loss = Loss::Mse;
        cfg.optim.kind = OptimKind::Sgd;
        cfg.schedule.kind = ScheduleKind::Const;
        cfg.schedule.warmup = 0;
        cfg.lr = 0.2f;
    }
    return cfg;
}

// Median milliseconds per launch of `launch`, with device events around runs of back-to-back launches.
double time_launches(const std::function<void(CUstream)>& launch, CUstream s) {
    Event a, b;
    for (int i = 0; i < 3; ++i) launch(s);  // warm-up
    a.record(s);
    launch(s);
    b.record(s);
    wait_for_stream(s);
    const double one = b.since(a);
    const int per_rep = static_cast<int>(std::clamp(2.0 / std::max(one, 1e-4), 1.0, 200.0));  // about 2 ms a repetition
    std::vector<double> v;
    for (int rep = 0; rep < 15; ++rep) {
        a.record(s);
        for (int i = 0; i < per_rep; ++i) launch(s);
        b.record(s);
        wait_for_stream(s);
        v.push_back(b.since(a) / per_rep);
    }
    return median(v);
}

// Device-to-device copy bandwidth: bytes read + written per second, 256 MiB each way.
double measure_copy_gbps(CUstream s) {
    const size_t bytes = size_t(256) << 20;
    DeviceBuffer a(bytes, "copy ceiling source"), b(bytes, "copy ceiling destination");
    a.fill_u32(0x3f800000u);
    const double ms = time_launches([&](CUstream st) { CU(cuMemcpyDtoDAsync, b.ptr(), a.ptr(), bytes, st); }, s);
    return 2.0 * double(bytes) / (ms * 1e-3) / 1e9;
}

// FMA throughput: 8 independent fmaf chains a thread, enough blocks to fill every SM.
double measure_fma_gflops(const Context& ctx, CUstream s) {
    const SourceFile src{"fma_ceiling.cu", R"(
extern "C" __global__ void fma_ceiling(float* out, float a, float b, int iters) {
    float x0 = threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4, x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
    for (int i = 0; i < iters; ++i) {
        x0 = fmaf(x0, a, b); x1 = fmaf(x1, a, b); x2 = fmaf(x2, a, b); x3 = fmaf(x3, a, b);
        x4 = fmaf(x4, a, b); x5 = fmaf(x5, a, b); x6 = fmaf(x6, a, b); x7 = fmaf(x7, a, b);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
})"};
    NvrtcOutput ptx = nvrtc_compile(src, ctx.info().virtual_arch());
    Module m(SourceFile{"fma_ceiling.cu (NVRTC PTX)", ptx.ptx});
    CUfunction f = m.function("fma_ceiling");
    const unsigned block = 256, grid = unsigned(ctx.info().sm_count) * 8;
    DeviceBuffer out(size_t(grid) * block * 4, "FMA ceiling output");
    CUdeviceptr p = out.ptr();
    float a = 0.999f, b = 0.001f;
    int iters = 4096;
    void* args[] = {&p, &a, &b, &iters};
    const double ms = time_launches(
        [&](CUstream st) { CU(cuLaunchKernel, f, grid, 1, 1, block, 1, 1, 0, st, args, nullptr); }, s);
    return 2.0 * 8 * iters * double(grid) * block / (ms * 1e-3) / 1e9;
}

// ---- The CNN's layers (conv.ptx, pool.ptx) -----------------------------------------
// Each conv and pool kernel at the shapes of `--model cnn` (conv32,pool,conv64,pool,fc128,
// fc10) at batch kCnnBatch, PTX and twin. (verify's float64 reference is computed for each
// case when it is prepared, so larger batches would spend seconds on the CPU.)
constexpr unsigned kCnnBatch = 64;
constexpr unsigned kDenseTcBench = 4096;  // dense_tc's batch: the issue's 4096 x 1024 x 1024 products

struct CnnCase {
    const char* layer;
    VerifyCase c;
    unsigned batch = kCnnBatch;  // the batch it is timed at (the table's column)
};

std::vector<CnnCase> cnn_cases(unsigned B) {
    // As the step runs them: forward with ReLU (act 1); the convs' backward passes with act 0,
    // their ReLU mask applied by the pool above (pool_bwd mask 1).
    const std::vector<unsigned> conv1 = {B, 1, 28, 28, 32, 3, 1}, conv2 = {B, 32, 14, 14, 64, 3, 1};
    const std::vector<unsigned> conv1b = {B, 1, 28, 28, 32, 3, 0}, conv2b = {B, 32, 14, 14, 64, 3, 0};
    return {{"conv1", {"conv_fwd", conv1}},          {"conv1+pool1", {"conv_fwd", {B, 1, 28, 28, 32, 3, 1, 1}}},
            {"conv2", {"conv_fwd", conv2}},            {"conv2+pool2", {"tc_conv_fwd", {B, 32, 14, 14, 64, 3, 1, 1}}},
            {"conv2", {"conv_bwd_data", conv2b}},    {"conv1", {"conv_bwd_weights", conv1b}},
            {"conv2", {"conv_bwd_weights", conv2b}}, {"pool1", {"pool_fwd", {B, 32, 28, 28}}},
            {"pool2", {"pool_fwd", {B, 64, 14, 14}}}, {"pool1", {"pool_bwd", {B, 32, 28, 28, 1}}},
            {"pool2", {"pool_bwd", {B, 64, 14, 14, 1}}}, {"fc1", {"fc_bwd_data", {B, 3136, 128, 1}}},
            {"conv1", {"tc_conv_fwd", conv1}},       {"conv2", {"tc_conv_fwd", conv2}},
            {"conv2", {"tc_conv_bwd_data", conv2b}}, {"conv1", {"tc_conv_bwd_weights", conv1b}},
            {"conv2", {"tc_conv_bwd_weights", conv2b}}, {"fc1", {"tc_grad_input", {B, 3136, 128, 1}}},
            // dense_mm (op,B,I,O,act,cluster): fc1's three products, then a 1024 -> 1024 layer's
            // (the model trainer's fc1024,fc1024,fc10): forward (ReLU), deltas (masked), weights.
            {"fc1.fwd", {"dense_mm", {0, B, 3136, 128, 1, 0}}},   {"fc1.dX", {"dense_mm", {1, B, 3136, 128, 1, 0}}},
            {"fc1.dW", {"dense_mm", {2, B, 3136, 128, 1, 0}}},   {"fc1024.fwd", {"dense_mm", {0, B, 1024, 1024, 1, 0}}},
            {"fc1024.dX", {"dense_mm", {1, B, 1024, 1024, 1, 0}}}, {"fc1024.dW", {"dense_mm", {2, B, 1024, 1024, 1, 0}}},
            // dense_tc (op,B,I,O,act): the same layer at batch 4096, where the tc set takes it
            // (densetc.hpp): forward (ReLU) and weight gradient (masked), the issue's targets.
            {"fc1024.fwd", {"dense_tc", {0, kDenseTcBench, 1024, 1024, 1}}, kDenseTcBench},
            {"fc1024.dW", {"dense_tc", {2, kDenseTcBench, 1024, 1024, 1}}, kDenseTcBench}};
}

constexpr unsigned kCnnChunk = 32;
// An fc-only model's step as train runs it (train_cnn.hpp DenseStep): dense_program + the optimizer,
// kCnnChunk steps a CUDA graph, as bench_model_steps times the others ("PREFIX:dense_program").

// A model step's device inputs for the step timings: one batch of images and targets, the logits,
// and a table of kCnnChunk steps at lr 0.01 (the timing does not depend on the values).
struct StepInputs {
    DeviceBuffer X, T, Y, H;
    StepInputs(const std::vector<float>& x, const std::vector<float>& t, const OptimConfig& optim)
        : X(x.size() * 4, "images"), T(t.size() * 4, "targets"), Y(t.size() * 4, "logits"),
          H(size_t(kCnnChunk) * sizeof(StepHyper), "step table") {
        X.upload(x);
        T.upload(t);
        H.upload(std::vector<StepHyper>(kCnnChunk, step_hyper(optim, 0.01, 1)));
    }
};

void bench_dense_step(const Context& ctx, const BenchOptions& opt, const Model& m, const std::vector<float>& X,
                      const std::vector<float>& T, const std::string& prefix, BenchResult& r, std::ostream& out,
                      CUstream s) {
    TrainConfig cfg;
    cfg.kernels = {Design::Tc, KernelSource::Ptx};
    if (!dense_step_unfit(m, cfg.kernels, opt.model_batch, cfg.activation).empty()) return;
    std::vector<std::string> entries = cnn_training_entries(cfg.optim, conv_kernels_of(cfg.kernels));
    entries.push_back("dense_program");
    KernelSet ks(KernelSource::Ptx, ctx.info(), opt.dirs, entries);
    CnnParams p(m, init_model_params(m, Init::Torch, opt.seed), cfg.optim);
    CnnActs a(m, opt.model_batch);
    const StepInputs in(X, T, cfg.optim);
    DenseStep step(m, p, a, cfg);
    step.enqueue(ks, in.X.ptr(), in.T.ptr(), in.Y.ptr(), in.H.ptr(), s);  // uploads its table, outside the capture
    Graph g(s, [&] {
        for (unsigned i = 0; i < kCnnChunk; ++i)
            step.enqueue(ks, in.X.ptr(), in.T.ptr(), in.Y.ptr(), in.H.ptr() + i * sizeof(StepHyper), s);
    });
    KernelTiming t{fmt::format("{}:dense_program", prefix), "model step", opt.model_batch};
    t.us = 1e3 * time_launches([&](CUstream st) { g.launch(st); }, s) / kCnnChunk;
    fmt::print(out, "{:<32} {:>10.2f}\n", t.set, t.us);
    out.flush();
    r.kernels.push_back(t);
}

// fc3_step as train runs a 3-layer fc network on the tc set (cnn_fc3step.cpp): a chunk of
// kFc3Chunk steps on as many batches (the same images each) in ONE launch, replayed as a CUDA
// graph ("PREFIX:tc"; the layer-by-layer step beside it is "PREFIX:tc/layers"); else a line
// saying why fc3_step does not take the network. Returns whether it ran.
constexpr unsigned kFc3Chunk = 128;  // the model trainer's chunk when fc3_step runs (default_chunk)
bool bench_fc3_step(const Context& ctx, const BenchOptions& opt, const Model& m, const std::vector<float>& X,
                    const std::vector<float>& T, const std::string& prefix, BenchResult& r, std::ostream& out,
                    CUstream s) {
    TrainConfig cfg;
    cfg.kernels = {Design::Tc, KernelSource::Ptx};
    cfg.batch = opt.model_batch;
    if (const std::string why = fc3_step_unfit(m, cfg.kernels, cfg.batch, cfg.activation); !why.empty()) {
        if (m.fc_only() && m.layers.size() == 3) fmt::print(out, "  (no fc3_step: {})\n", why);
        return false;
    }
    std::vector<std::string> entries = cnn_training_entries(cfg.optim, conv_kernels_of(cfg.kernels));
    entries.push_back("fc3_step");
    KernelSet ks(KernelSource::Ptx, ctx.info(), opt.dirs, entries);
    CnnParams p(m, init_model_params(m, Init::Torch, opt.seed), cfg.optim);
    Fc3Step step(m, p, cfg);
    std::vector<float> xs, ts;
    for (unsigned i = 0; i < kFc3Chunk; ++i) {
        xs.insert(xs.end(), X.begin(), X.end());
        ts.insert(ts.end(), T.begin(), T.end());
    }
    DeviceBuffer dx(xs.size() * 4, "images"), dt(ts.size() * 4, "targets"), dy(ts.size() * 4, "logits"),
        dh(size_t(kFc3Chunk) * sizeof(StepHyper), "step table");
    dx.upload(xs);
    dt.upload(ts);
    dh.upload(std::vector<StepHyper>(kFc3Chunk, step_hyper(cfg.optim, 0.01, 1)));
    StepIO io;
    io.X = dx.ptr(), io.T = dt.ptr(), io.Y = dy.ptr(), io.hyp = dh.ptr();
    io.B = opt.model_batch, io.I = unsigned(X.size() / opt.model_batch);
    Graph g(s, [&] { step.enqueue_steps(ks, io, kFc3Chunk, s); });
    KernelTiming t{fmt::format("{}:tc", prefix), "model step", opt.model_batch};
    t.us = 1e3 * time_launches([&](CUstream st) { g.launch(st); }, s) / kFc3Chunk;
    fmt::print(out, "{:<32} {:>10.2f}\n", t.set, t.us);
    out.flush();
    r.kernels.push_back(t);
    return true;
}

// PyTorch's step for the same network and recipe on the same GPU, two rows beside ptxlab's:
// PREFIX:torch+graph (CUDA-graph replays) and PREFIX:torch (eager); else a line saying why not.
void bench_torch_step(const BenchOptions& opt, const std::string& spec, const std::string& prefix, BenchResult& r,
                      std::ostream& out) {
    static const std::string missing = torch_missing();
    std::string note = missing;
    TorchFigures f;
    if (note.empty()) f = run_torch(torch_model_step_args(spec, opt.model_batch), opt, note);
    const std::pair<const char*, std::optional<double>> rows[] = {{"torch+graph", f.step_graph_us},
                                                                  {"torch", f.step_eager_us}};
    for (const auto& [name, us] : rows) {
        if (!us) continue;
        KernelTiming t{fmt::format("{}:{}", prefix, name), "pytorch step", opt.model_batch};
        t.us = *us;
        fmt::print(out, "{:<32} {:>10.2f}\n", t.set, t.us);
        r.kernels.push_back(t);
    }
    if (!note.empty()) fmt::print(out, "  {}\n", note);
    else if (!f.step_graph_us) fmt::print(out, "  PyTorch: tools/torch_reference.py printed no step time\n");
    out.flush();
}

// The model trainer's training step (`train --model SPEC`'s recipe: CE, Nesterov, batch opt.model_batch)
// as the trainer runs it: kCnnChunk steps a CUDA graph, replayed; GPU time a step, the median
// over replays. Random images in [0, 1) and labels; the FP32 conv kernels and the tensor cores.
void bench_model_steps(const Context& ctx, const BenchOptions& opt, BenchResult& r, std::ostream& out, CUstream s) {
    Rng rng(opt.seed);
    std::vector<float> X(size_t(opt.model_batch) * 784), T(size_t(opt.model_batch) * kClasses, 0.0f);
    for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
    for (unsigned i = 0; i < opt.model_batch; ++i) T[size_t(i) * kClasses + rng.below(kClasses)] = 1.0f;
    for (const std::string& spec : opt.models) {
        const Model m = parse_model(spec);
        const std::string prefix = spec == "cnn" ? "cnn-step" : fmt::format("step[{}]", m.text());
        fmt::print(out, "model training step (--model {}, CE + Nesterov, batch {}; {} steps a CUDA graph)\n", m.text(),
                   opt.model_batch, kCnnChunk);
        fmt::print(out, "{:<32} {:>10}\n", "set", "us/step");
        // The FP32 and tensor-core steps as train runs them (the weight gradients on a second
        // stream, beside the deltas of the layers below), and the tensor-core step on one stream
        // (train --no-overlap). A network of fc layers only runs on tc (its FP32 set takes the
        // hidden layers' weight gradients as 1x1 convolutions: milliseconds a step).
        struct Variant {
            KernelChoice k;
            bool overlap;
            const char* name;
        };
        // A network fc3_step takes: its row is "tc" (what train runs), the layer-by-layer step's "tc/layers".
        const bool fc3 = bench_fc3_step(ctx, opt, m, X, T, prefix, r, out, s);
        for (const auto& [k, overlap, name] : {Variant{{Design::Seed, KernelSource::Ptx}, true, "ptx"},
                                                Variant{{Design::Tc, KernelSource::Ptx}, true, fc3 ? "tc/layers" : "tc"},
                                                Variant{{Design::Tc, KernelSource::Ptx}, false, "tc/serial"}}) {
            if (m.fc_only() && k.design != Design::Tc) continue;
            TrainConfig cfg;
            cfg.kernels = k;
            cfg.overlap = overlap;
            KernelSet ks(k.source, ctx.info(), opt.dirs, cnn_training_entries(cfg.optim, conv_kernels_of(k)));
            CnnParams p(m, init_model_params(m, Init::Torch, opt.seed), cfg.optim);
            CnnActs a(m, opt.model_batch);
            a.keep_transposes(m, ks, conv_kernels_of(k));  // as train's step: W^T for dense_wg_k's deltas
            const StepInputs in(X, T, cfg.optim);
            Graph g(s, [&] {
                for (unsigned i = 0; i < kCnnChunk; ++i)
                    enqueue_cnn_step(ks, m, p, a, in.X.ptr(), in.T.ptr(), in.Y.ptr(), cfg, in.H.ptr() + i * sizeof(StepHyper),
                                     s);
            });
            KernelTiming t{fmt::format("{}:{}", prefix, name), spec == "cnn" ? "cnn step" : "model step", opt.model_batch};
            t.us = 1e3 * time_launches([&](CUstream st) { g.launch(st); }, s) / kCnnChunk;
            fmt::print(out, "{:<32} {:>10.2f}\n", t.set, t.us);
            out.flush();
            r.kernels.push_back(t);
        }
        if (m.fc_only()) bench_dense_step(ctx, opt, m, X, T, prefix, r, out, s);
        if (opt.torch) bench_torch_step(opt, spec, prefix, r, out);
        fmt::print(out, "\n");
    }
}

// Times case `c` on `kern` (fresh inputs from `seed`): t's time, work, rates and roofline.
void time_case(KernelTiming& t, const VerifyCase& c, const Kernel& kern, uint64_t seed, const BenchResult& r,
               CUstream s) {
    PreparedCase pc(c, seed);
    t.us = 1e3 * time_launches([&](CUstream st) { pc.launch(kern, st); }, s);
    std::tie(t.bytes, t.flops) = case_work(c);
    t.gbps = t.bytes / (t.us * 1e-6) / 1e9;
    t.gflops = t.flops / (t.us * 1e-6) / 1e9;
    const double attainable = std::min(r.fma_gflops, t.flops / t.bytes * r.copy_gbps);
    t.roofline_pct = t.flops > 0 ? 100.0 * t.gflops / attainable : 100.0 * t.gbps / r.copy_gbps;
}

void bench_cnn_kernels(const Context& ctx, const BenchOptions& opt, BenchResult& r, std::ostream& out, CUstream s) {
    fmt::print(out, "CNN kernels (--model cnn's layers, batch {}; GFLOP/s against the FMA loop's {:.0f})\n",
               kCnnBatch, r.fma_gflops);
    fmt::print(out, "{:<16} {:<17} {:>6} {:>10} {:>9} {:>10} {:>9}\n", "set:layer", "kernel", "batch", "us", "GB/s",
               "GFLOP/s", "roofline");
    for (const KernelSource src : {KernelSource::Ptx, KernelSource::Reference}) {
        KernelSet ks(src, ctx.info(), opt.dirs, bench_cnn_entries());
        for (const CnnCase& cc : cnn_cases(kCnnBatch)) {
            const VerifyCase& c = cc.c;
            KernelTiming t{fmt::format("cnn-{}:{}", to_string(src), cc.layer), cc.c.entry, cc.batch};
            time_case(t, c, ks.get(c.entry), opt.seed, r, s);
            fmt::print(out, "{:<16} {:<17} {:>6} {:>10.2f} {:>9.1f} {:>10.1f} {:>8.2f}%\n", t.set, t.entry, t.batch,
                       t.us, t.gbps, t.gflops, t.roofline_pct);
            out.flush();
            r.kernels.push_back(t);
        }
    }
    fmt::print(out, "\n");
}

// Each plain set's kernels (bench_entries) at each batch on the MNIST sizes, then the CNN's.
void bench_kernels(const Context& ctx, const BenchOptions& opt, BenchResult& r, std::ostream& out, CUstream s) {
    fmt::print(out, "kernels (784-128-10, fc3_step 784-256-128-10; median per launch; roofline = achieved / min(FMA "
                    "peak, intensity x copy bandwidth))\n");
    fmt::print(out, "{:<16} {:<14} {:>6} {:>10} {:>9} {:>10} {:>9}\n", "set", "kernel", "batch", "us", "GB/s",
               "GFLOP/s", "roofline");
    for (const auto& set : opt.sets) {
        const BenchSet bs = parse_bench_set(set);
        if (!bs.overlap || !bs.one_launch || bs.steps_per_launch || !bs.recipe.empty())
            continue;  // the same kernels as the plain set
        const KernelChoice k = bs.kernels;
        const auto entries = bench_entries(k);
        KernelSet ks(k.source, ctx.info(), opt.dirs, entries);
        for (const auto& e : entries) {
            for (unsigned B : opt.kernel_batches) {
                const std::optional<VerifyCase> c = bench_case(e, B);
                if (!c) continue;  // tc_step, fc3_step: one batch of <= 64
                KernelTiming t{set, e, B};
                time_case(t, *c, ks.get(e), opt.seed, r, s);
                fmt::print(out, "{:<16} {:<14} {:>6} {:>10.2f} {:>9.1f} {:>10.1f} {:>8.2f}%\n", set, e, B, t.us,
                           t.gbps, t.gflops, t.roofline_pct);
                out.flush();
                r.kernels.push_back(t);
            }
        }
    }
    fmt::print(out, "\n");
    bench_cnn_kernels(ctx, opt, r, out, s);
}

// `ptxlab train`'s loop on each set at each batch: GPU time per step (the median over full
// chunks) and wall time per step.
void bench_steps(const Context& ctx, const BenchOptions& opt, const Dataset& data, BenchResult& r, std::ostream& out) {
    std::ostringstream quiet;
    fmt::print(out, "training steps (`ptxlab train`'s loop: chunks of steps replayed as CUDA graphs)\n");
    fmt::print(out, "{:<16} {:>6} {:>7} {:>14} {:>16}\n", "set", "batch", "steps", "GPU us/step", "wall us/step");
    for (const auto& set : opt.sets) {
        for (unsigned B : opt.step_batches) {
            TrainConfig cfg = train_config(set, opt);
            cfg.batch = B;
            cfg.target = 1.0;
            cfg.epochs = 1;
            cfg.evals_per_epoch = 1;
            if (cfg.kernels.design == Design::Seed) cfg.max_steps = opt.seed_steps;
            TrainResult tr = train(ctx, data, cfg, quiet);
            StepTiming st{set, B, tr.steps};
            std::vector<double> per;
            const unsigned full = *std::max_element(tr.chunk_steps.begin(), tr.chunk_steps.end());
            for (size_t i = 0; i < tr.chunk_gpu_ms.size(); ++i)
                if (tr.chunk_steps[i] == full) per.push_back(1e3 * tr.chunk_gpu_ms[i] / tr.chunk_steps[i]);
            st.us_per_step = median(per);
            double loop_ms = 0;
            for (double e : tr.epoch_ms) loop_ms += e;
            st.host_us_per_step = 1e3 * loop_ms / std::max(1u, tr.steps);
            fmt::print(out, "{:<16} {:>6} {:>7} {:>14.2f} {:>16.2f}\n", set, B, st.steps, st.us_per_step,
                       st.host_us_per_step);
            out.flush();
            r.steps.push_back(st);
        }
    }
    fmt::print(out, "\n");
}

// A full training run of each target set: the time until the first evaluation at the target.
void bench_to_target(const Context& ctx, const BenchOptions& opt, const Dataset& data, double data_ms, BenchResult& r,
                     std::ostream& out) {
    std::ostringstream quiet;
    fmt::print(out, "time to {:.2f} % test accuracy (`ptxlab train`'s default recipe over {} epochs; training "
                    "time until the first evaluation at the target, evaluation not counted; data loading and "
                    "JIT apart)\n",
               100.0 * opt.target, opt.epochs);
    fmt::print(out, "{:<16} {:>9} {:>14} {:>7} {:>10} {:>12} {:>9} {:>9}\n", "set", "reached", "train ms", "epochs",
               "accuracy", "ms/epoch", "JIT ms", "data ms");
    for (const auto& set : opt.target_sets) {
        TrainConfig cfg = train_config(set, opt);
        cfg.target = opt.target;
        cfg.epochs = opt.epochs;
        TrainResult tr = train(ctx, data, cfg, quiet);
        TargetTiming t{set, tr.reached, tr.reached ? tr.train_ms_to_target : tr.train_ms, tr.accuracy, tr.epochs,
                       tr.steps, median(tr.epoch_ms), tr.jit_ms, data_ms};
        fmt::print(out, "{:<16} {:>9} {:>14.1f} {:>7} {:>9.2f}% {:>12.2f} {:>9.1f} {:>9.1f}\n", set,
                   t.reached ? "yes" : "no", t.ms_to_target, t.epochs, 100.0 * t.accuracy, t.median_epoch_ms,
                   t.jit_ms, t.data_ms);
        out.flush();
        r.targets.push_back(t);
    }
}

}  // namespace

namespace {

void print_headline(BenchResult& r, std::vector<HeadlineRow> rows, uint64_t seed, std::ostream& out) {
    auto cell = [](const std::optional<double>& v) { return v && std::isfinite(*v) ? fmt::format("{:.2f}", *v) : "-"; };
    fmt::print(out, "headline (seed {}; PyTorch: tools/torch_reference.py, the same recipe, same GPU)\n", seed);
    fmt::print(out, "{:<40} {:>12} {:>14} {:>14} {:>8}\n", "figure", "ptxlab", "PyTorch eager", "PyTorch graph", "ratio");
    for (const auto& h : rows) {
        const std::optional<double> best = h.torch_graph ? h.torch_graph : h.torch_eager;
        const std::string ratio = best && std::isfinite(h.ptxlab) ? fmt::format("{:.1f}x", *best / h.ptxlab) : "-";
        fmt::print(out, "{:<40} {:>9.2f} {:<2} {:>14} {:>14} {:>8}\n", h.figure, h.ptxlab, h.unit, cell(h.torch_eager),
                   cell(h.torch_graph), ratio);
    }
    if (!r.torch_note.empty()) fmt::print(out, "{}\n", r.torch_note);
    fmt::print(out, "\n");
    r.headline = std::move(rows);
}

}  // namespace

BenchResult run_bench(const Context& ctx, const BenchOptions& opt, std::ostream& out) {
    BenchResult r;
    r.device = fmt::format("{} ({}, {} SMs, driver {})", ctx.info().name, ctx.info().arch(), ctx.info().sm_count,
                           ctx.info().driver_version);
    Stream stream;
    const CUstream s = stream.get();
    fmt::print(out, "bench: {}\n", r.device);

    r.copy_gbps = measure_copy_gbps(s);
    r.fma_gflops = measure_fma_gflops(ctx, s);
    fmt::print(out, "ceilings: device-to-device copy {:.0f} GB/s, FMA loop {:.0f} GFLOP/s (fp32)\n", r.copy_gbps,
               r.fma_gflops);
    // A --ptx-dir of the user's own kernels may hold no probes: the floors are then left out, said once.
    if (const std::string probes = floors_path(opt.dirs); std::filesystem::is_regular_file(probes)) {
        r.floors = measure_floors(ctx, opt.dirs, s);
        fmt::print(out, "floors ({}, one of each, nothing else running):\n", probes);
        for (const auto& f : r.floors) fmt::print(out, "  {:<30} {:>9.3f} us  {}\n", f.name, f.us, f.what);
    } else {
        fmt::print(out, "floors: left out ({} does not exist)\n", probes);
    }
    fmt::print(out, "\n");
    out.flush();

    if (opt.kernels) bench_kernels(ctx, opt, r, out, s);
    // The model trainer's steps are training steps: timed unless --no-steps, with or without the kernels.
    if (opt.steps) bench_model_steps(ctx, opt, r, out, s);

    if (!opt.steps && !opt.to_target) return r;
    const std::string dir = opt.data_dir.empty() ? default_data_dir() : opt.data_dir;
    auto t0 = std::chrono::steady_clock::now();
    Dataset data = load_dataset(dir);
    const double data_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (opt.steps) bench_steps(ctx, opt, data, r, out);
    if (opt.to_target) bench_to_target(ctx, opt, data, data_ms, r, out);
    if (opt.headline) print_headline(r, bench_headline(ctx, opt, data, r, r.torch_note, out), opt.seed, out);
    return r;
}

namespace {

using OrderedJson = nlohmann::ordered_json;

OrderedJson rounded(double v, int decimals) { return rounded_json(v, decimals); }

}  // namespace

std::string bench_json(const BenchResult& r, const BenchOptions& opt) {
    // The keys in this order (ordered_json keeps it), as the text report lists them.
    OrderedJson j;
    j["device"] = r.device;
    j["copy_gbps"] = rounded(r.copy_gbps, 3);
    j["fma_gflops"] = rounded(r.fma_gflops, 3);
    j["floors"] = OrderedJson::array();
    for (const auto& f : r.floors) j["floors"].push_back({{"name", f.name}, {"us", rounded(f.us, 4)}, {"what", f.what}});
    j["target"] = opt.target;
    j["kernels"] = OrderedJson::array();
    for (const auto& k : r.kernels)
        j["kernels"].push_back({{"set", k.set},
                                {"kernel", k.entry},
                                {"batch", k.batch},
                                {"us", rounded(k.us, 4)},
                                {"bytes", rounded(k.bytes, 0)},
                                {"flops", rounded(k.flops, 0)},
                                {"gbps", rounded(k.gbps, 3)},
                                {"gflops", rounded(k.gflops, 3)},
                                {"roofline_pct", rounded(k.roofline_pct, 3)}});
    j["steps"] = OrderedJson::array();
    for (const auto& s : r.steps)
        j["steps"].push_back({{"set", s.set},
                              {"batch", s.batch},
                              {"steps", s.steps},
                              {"gpu_us_per_step", rounded(s.us_per_step, 4)},
                              {"wall_us_per_step", rounded(s.host_us_per_step, 4)}});
    j["headline"] = OrderedJson::array();
    for (const auto& h : r.headline)
        j["headline"].push_back({{"figure", h.figure},
                                 {"unit", h.unit},
                                 {"ptxlab", rounded(h.ptxlab, 4)},
                                 {"torch_eager", h.torch_eager ? rounded(*h.torch_eager, 4) : OrderedJson(nullptr)},
                                 {"torch_graph", h.torch_graph ? rounded(*h.torch_graph, 4) : OrderedJson(nullptr)}});
    j["to_target"] = OrderedJson::array();
    for (const auto& t : r.targets)
        j["to_target"].push_back({{"set", t.set},
                                  {"reached", t.reached},
                                  {"train_ms", rounded(t.ms_to_target, 3)},
                                  {"epochs", t.epochs},
                                  {"steps", t.steps},
                                  {"accuracy", rounded(t.accuracy, 6)},
                                  {"median_epoch_ms", rounded(t.median_epoch_ms, 3)},
                                  {"jit_ms", rounded(t.jit_ms, 3)},
                                  {"data_ms", rounded(t.data_ms, 3)}});
    // A device name that is not UTF-8 is written with U+FFFD where its bad bytes were.
    return j.dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

}  // namespace ptxlab
