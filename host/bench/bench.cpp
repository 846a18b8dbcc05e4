#include "bench.hpp"

#include "compile.hpp"
#include "recipe.hpp"
#include "model.hpp"
#include "optim.hpp"
#include "rng.hpp"
#include "tc.hpp"
#include "tcstep.hpp"
#include "train_cnn.hpp"
#include "train.hpp"
#include "verify.hpp"

#include <fmt/ostream.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>

namespace ptxlab {

namespace {

constexpr unsigned kI = 784, kH = 128, kO = 10;

}  // namespace

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

// The shape each entry is timed at, for a batch of B on the MNIST network.
VerifyCase bench_case(const std::string& entry, unsigned B) {
    if (entry == "batch_mean") return {entry, {kH * kI, B}};       // the W1 mean gradient of one step
    // The optimizers on every parameter at once (independent of the batch): Nesterov, Adam.
    if (entry == "optim_sgd") return {entry, {kH * kI + kH + kO * kH + kO, 2}};
    if (entry == "optim_adam") return {entry, {kH * kI + kH + kO * kH + kO, 0}};
    if (entry == "gather") return {entry, {B, kI, 60000}};         // one batch of images
    // The default recipe's loss (ce) and activation (relu).
    if (entry == "fused_forward") return {entry, {B, kI, kH, kActRelu}};
    if (entry == "fused_output") return {entry, {B, kH, kO, kLossSoftmax, kActRelu}};
    if (entry == "grad2") return {entry, {B, kI, kH, kO, kLossSoftmax, kActRelu}};
    if (entry == "forward2") return {entry, {B, kI, kH, kO, kActRelu}};
    if (entry == "outer") return {entry, {B, kH, kI}};               // gW1 of one step
    // The hidden layer's three products (B,I,H,act or B,I,O,act) as training runs them: A1 with
    // ReLU's epilogue; dX from D1 (the input's gradient, which a deeper network would need) and
    // GW1 from D1, which fused_output has masked already (act 0, as fused_grad reads it).
    const std::string_view base = tc_base_entry(entry);  // and their _bf16 versions
    if (base == "tc_forward") return {entry, {B, kI, kH, kTcActRelu}};
    if (base == "tc_grad_input" || base == "tc_grad_weights") return {entry, {B, kI, kH, kTcActNone}};
    // The default recipe's step: cross-entropy, Nesterov.
    if (entry == "fused_step") return {entry, {B, kI, kH, kO, kLossSoftmax, optim_code(OptimKind::Nesterov), kActRelu}};
    if (entry == "tc_step") return {entry, {B, kI, kH, kO, kLossSoftmax, optim_code(OptimKind::Nesterov)}};
    return {entry, {B, kI, kH, kO}};                                // fused_grad
}

// The least memory traffic (bytes) and the arithmetic (flops, an FMA = 2) an entry must do.
std::pair<double, double> kernel_work(const std::string& entry, double B) {
    const std::string e(tc_base_entry(entry));  // the _bf16 versions do the same work
    const double I = kI, H = kH, O = kO, params = H * I + H + O * H + O;
    if (e == "forward2") return {4 * (B * I + params + B * H + B * O), 2 * B * (I * H + H * O)};
    if (e == "grad2")  // forward, deltas, and the per-sample gradients written out
        return {4 * (B * I + B * O + params + B * (H + O) + B * params), 2 * B * (I * H + 2 * H * O) + B * params};
    if (e == "batch_mean") return {4 * (B * H * I + H * I), B * H * I + H * I};  // B adds and the scale
    // Nesterov: reads P, G, M, writes P, M; mul, add and two fmas an element.
    if (e == "optim_sgd") return {4 * 5 * params, 6 * params};
    // Adam: reads P, G, M, V, writes P, M, V; 3 fmas, 3 subs, 2 muls, add, sqrt, 2 divs (each 1 here).
    if (e == "optim_adam") return {4 * 7 * params, 15 * params};
    if (e == "gather") return {4 * (2 * B * I + B), 0};
    if (e == "fused_forward") return {4 * (B * I + H * I + H + B * H), 2 * B * I * H};
    if (e == "fused_output") return {4 * (2 * B * H + O * H + O + 3 * B * O), 4 * B * H * O};
    if (e == "outer") return {4 * (B * H + B * I + B * H * I), B * H * I};
    if (e == "fused_step" || e == "tc_step")  // reads X, T, the parameters and m, writes A, Y, the parameters and m (Nesterov)
        return {4 * (B * I + B * O + 4 * params + B * H + B * O),
                2 * B * (I * H + 2 * H * O) + 2 * B * ((I + 1) * H + (H + 1) * O) + 7 * params};
    if (e == "fused_grad")  // reads X, A, D1, D2 once, writes the gradients; one multiply by the scale each
        return {4 * (B * I + 2 * B * H + B * O + params), 2 * B * ((I + 1) * H + (H + 1) * O) + params};
    // The hidden layer's products at B,I,H: each reads its two matrices once and writes one.
    if (e == "tc_forward") return {4 * (B * I + H * I + H + B * H), 2 * B * I * H};
    if (e == "tc_grad_input") return {4 * (B * H + H * I + B * I), 2 * B * I * H};  // reads D1 (act 0: no Y), W
    if (e == "tc_grad_weights") return {4 * (B * H + B * I + H * I + H), 2 * B * I * H + B * H};
    return {0, 0};
}

std::vector<std::string> set_entries(const KernelChoice& k) {
    if (k.design == Design::Fused) return {"fused_step", "fused_forward", "fused_output", "fused_grad"};
    if (k.design == Design::Fast) return {"outer"};  // its other kernels are timed with the fused and seed sets
    if (k.design == Design::Tc && k.bf16) return {"tc_forward_bf16", "tc_grad_input_bf16", "tc_grad_weights_bf16"};
    if (k.design == Design::Tc) return {"tc_step", "tc_forward", "tc_grad_input", "tc_grad_weights"};
    return {"forward2", "grad2", "batch_mean", "gather", "optim_sgd", "optim_adam"};
}

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

struct CnnCase {
    const char* layer;
    VerifyCase c;
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
            {"conv2", {"tc_conv_bwd_weights", conv2b}}, {"fc1", {"tc_grad_input", {B, 3136, 128, 1}}}};
}

// Least traffic (bytes) and arithmetic (flops, an FMA = 2) of a conv or pool case; the
// backward passes with act 1 read the layer's output Y for the ReLU mask, pool_bwd with the
// mask the pooled maxima.
std::pair<double, double> cnn_work(const VerifyCase& c) {
    const auto& z = c.shape;
    if (c.entry == "fc_bwd_data" || c.entry == "tc_grad_input") {  // B,I,O: read dY, Y, W; write dX
        const double B = z[0], I = z[1], O = z[2];
        return {4 * (2 * B * O + O * I + B * I), 2 * B * I * O};
    }
    const double N = z[0], C = z[1], H = z[2], W = z[3];
    if (c.entry == "pool_fwd") return {4 * (N * C * H * W + 2 * N * C * (H / 2) * (W / 2)), 0};
    if (c.entry == "pool_bwd") return {4 * (N * C * H * W + (2 + z[4]) * N * C * (H / 2) * (W / 2)), 0};
    const double K = z[4], T = double(z[5]) * z[5], x = N * C * H * W, y = N * K * H * W, w = K * C * T;
    const double macs = 2 * N * K * C * H * W * T, ry = z[6] == 1 ? 2 : 1;  // dY, and Y for the mask
    if (z.size() == 8 && z[7] == 1) return {4 * (x + w + K + y / 2), macs + y};  // (tc_)conv_fwd: Y, idx pooled
    if (c.entry == "conv_fwd" || c.entry == "tc_conv_fwd") return {4 * (x + w + K + y), macs + y};
    if (c.entry == "conv_bwd_data" || c.entry == "tc_conv_bwd_data") return {4 * (ry * y + w + x), macs};
    return {4 * (x + ry * y + w + K), macs + y};  // (tc_)conv_bwd_weights: dW and db
}

// The model trainer's training step (`train --model SPEC`'s recipe: CE, Nesterov, batch kCnnBatch)
// as the trainer runs it: kCnnChunk steps a CUDA graph, replayed; GPU time a step, the median
// over replays. Random images in [0, 1) and labels; the FP32 conv kernels and the tensor cores.
constexpr unsigned kCnnChunk = 32;
void bench_model_steps(const Context& ctx, const BenchOptions& opt, BenchResult& r, std::ostream& out, CUstream s) {
    Rng rng(opt.seed);
    std::vector<float> X(size_t(kCnnBatch) * 784), T(size_t(kCnnBatch) * kClasses, 0.0f);
    for (auto& x : X) x = rng.uniform(0.0f, 1.0f);
    for (unsigned i = 0; i < kCnnBatch; ++i) T[size_t(i) * kClasses + rng.below(kClasses)] = 1.0f;
    for (const std::string& spec : opt.models) {
        const Model m = parse_model(spec);
        const std::string prefix = spec == "cnn" ? "cnn-step" : fmt::format("step[{}]", m.text());
        fmt::print(out, "model training step (--model {}, CE + Nesterov, batch {}; {} steps a CUDA graph)\n", m.text(),
                   kCnnBatch, kCnnChunk);
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
        for (const auto& [k, overlap, name] : {Variant{{Design::Seed, KernelSource::Ptx}, true, "ptx"},
                                                Variant{{Design::Tc, KernelSource::Ptx}, true, "tc"},
                                                Variant{{Design::Tc, KernelSource::Ptx}, false, "tc/serial"}}) {
            if (m.fc_only() && k.design != Design::Tc) continue;
            TrainConfig cfg;
            cfg.kernels = k;
            cfg.overlap = overlap;
            KernelSet ks(k.source, ctx.info(), opt.dirs, cnn_training_entries(cfg.optim, conv_kernels_of(k)));
            CnnParams p(m, init_model_params(m, Init::Torch, opt.seed), cfg.optim);
            CnnActs a(m, kCnnBatch);
            const std::vector<StepHyper> hyp(kCnnChunk, step_hyper(cfg.optim, 0.01, 1));
            DeviceBuffer dX(X.size() * 4, "images"), dT(T.size() * 4, "targets"), dY(T.size() * 4, "logits"),
                dH(hyp.size() * sizeof(StepHyper), "step table");
            dX.upload(X);
            dT.upload(T);
            dH.upload(hyp);
            Graph g(s, [&] {
                for (unsigned i = 0; i < kCnnChunk; ++i)
                    enqueue_cnn_step(ks, m, p, a, dX.ptr(), dT.ptr(), dY.ptr(), cfg, dH.ptr() + i * sizeof(StepHyper),
                                     s);
            });
            KernelTiming t{fmt::format("{}:{}", prefix, name), spec == "cnn" ? "cnn step" : "model step", kCnnBatch};
            t.us = 1e3 * time_launches([&](CUstream st) { g.launch(st); }, s) / kCnnChunk;
            fmt::print(out, "{:<32} {:>10.2f}\n", t.set, t.us);
            out.flush();
            r.kernels.push_back(t);
        }
        fmt::print(out, "\n");
    }
}

void bench_cnn_kernels(const Context& ctx, const BenchOptions& opt, BenchResult& r, std::ostream& out, CUstream s) {
    fmt::print(out, "CNN kernels (--model cnn's layers, batch {}; GFLOP/s against the FMA loop's {:.0f})\n",
               kCnnBatch, r.fma_gflops);
    fmt::print(out, "{:<16} {:<17} {:>6} {:>10} {:>9} {:>10} {:>9}\n", "set:layer", "kernel", "batch", "us", "GB/s",
               "GFLOP/s", "roofline");
    const std::vector<std::string> entries = {"conv_fwd", "conv_bwd_data", "conv_bwd_weights", "pool_fwd", "pool_bwd",
                                              "fc_bwd_data", "tc_conv_fwd", "tc_conv_bwd_data", "tc_conv_bwd_weights",
                                              "tc_grad_input"};
    for (const KernelSource src : {KernelSource::Ptx, KernelSource::Reference}) {
        KernelSet ks(src, ctx.info(), opt.dirs, entries);
        for (const auto& [layer, c] : cnn_cases(kCnnBatch)) {
            PreparedCase pc(c, opt.seed);
            const Kernel& kern = ks.get(c.entry);
            KernelTiming t{fmt::format("cnn-{}:{}", to_string(src), layer), c.entry, kCnnBatch};
            t.us = 1e3 * time_launches([&](CUstream st) { pc.launch(kern, st); }, s);
            std::tie(t.bytes, t.flops) = cnn_work(c);
            t.gbps = t.bytes / (t.us * 1e-6) / 1e9;
            t.gflops = t.flops / (t.us * 1e-6) / 1e9;
            const double attainable = std::min(r.fma_gflops, t.flops / t.bytes * r.copy_gbps);
            t.roofline_pct = t.flops > 0 ? 100.0 * t.gflops / attainable : 100.0 * t.gbps / r.copy_gbps;
            fmt::print(out, "{:<16} {:<17} {:>6} {:>10.2f} {:>9.1f} {:>10.1f} {:>8.2f}%\n", t.set, t.entry, t.batch,
                       t.us, t.gbps, t.gflops, t.roofline_pct);
            out.flush();
            r.kernels.push_back(t);
        }
    }
    fmt::print(out, "\n");
    bench_model_steps(ctx, opt, r, out, s);
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
    fmt::print(out, "ceilings: device-to-device copy {:.0f} GB/s, FMA loop {:.0f} GFLOP/s (fp32)\n\n", r.copy_gbps,
               r.fma_gflops);
    out.flush();

    if (opt.kernels) {
        fmt::print(out, "kernels (784-128-10; median per launch; roofline = achieved / min(FMA peak, intensity x copy "
                        "bandwidth))\n");
        fmt::print(out, "{:<16} {:<14} {:>6} {:>10} {:>9} {:>10} {:>9}\n", "set", "kernel", "batch", "us", "GB/s",
                   "GFLOP/s", "roofline");
        for (const auto& set : opt.sets) {
            const BenchSet bs = parse_bench_set(set);
            if (!bs.overlap || !bs.one_launch || bs.steps_per_launch || !bs.recipe.empty())
                continue;  // the same kernels as the plain set
            const KernelChoice k = bs.kernels;
            const auto entries = set_entries(k);
            KernelSet ks(k.source, ctx.info(), opt.dirs, entries);
            for (const auto& e : entries) {
                for (unsigned B : opt.kernel_batches) {
                    if (e == "tc_step" && !tc_step_unfit(B, kI, kH, kO).empty()) continue;  // one batch of <= 64
                    PreparedCase pc(bench_case(e, B), opt.seed);
                    const Kernel& kern = ks.get(e);
                    KernelTiming t{set, e, B};
                    t.us = 1e3 * time_launches([&](CUstream st) { pc.launch(kern, st); }, s);
                    std::tie(t.bytes, t.flops) = kernel_work(e, B);
                    t.gbps = t.bytes / (t.us * 1e-6) / 1e9;
                    t.gflops = t.flops / (t.us * 1e-6) / 1e9;
                    const double attainable = std::min(r.fma_gflops, t.flops / t.bytes * r.copy_gbps);
                    t.roofline_pct = t.flops > 0 ? 100.0 * t.gflops / attainable : 100.0 * t.gbps / r.copy_gbps;
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

    if (!opt.steps && !opt.to_target) return r;
    const std::string dir = opt.data_dir.empty() ? default_data_dir() : opt.data_dir;
    auto t0 = std::chrono::steady_clock::now();
    Dataset data = load_dataset(dir);
    const double data_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::ostringstream quiet;

    if (opt.steps) {
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

    if (opt.to_target) {
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
    return r;
}

namespace {

using OrderedJson = nlohmann::ordered_json;

// A number as the text tables show it, rounded to `decimals` places (0: a whole number); JSON
// has no NaN or infinity, so those are null.
OrderedJson rounded(double v, int decimals) {
    if (!std::isfinite(v)) return nullptr;
    if (decimals == 0 && std::fabs(v) < 9e18) return std::llround(v);
    return std::strtod(fmt::format("{:.{}f}", v, decimals).c_str(), nullptr);
}

}  // namespace

std::string bench_json(const BenchResult& r, const BenchOptions& opt) {
    // The keys in this order (ordered_json keeps it), as the text report lists them.
    OrderedJson j;
    j["device"] = r.device;
    j["copy_gbps"] = rounded(r.copy_gbps, 3);
    j["fma_gflops"] = rounded(r.fma_gflops, 3);
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
