#include "train.hpp"

#include "fused.hpp"
#include "rng.hpp"

#include <fmt/ostream.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace ptxlab {

std::atomic<bool> g_stop_requested{false};

std::vector<unsigned> parse_sizes(const std::string& text, const std::string& flag, unsigned long long max) {
    std::vector<unsigned> v;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        size_t used = 0;
        long long n = -1;
        try {
            n = std::stoll(item, &used);
        } catch (...) {
            used = 0;
        }
        if (used == 0 || used != item.size())
            PTXLAB_THROW(InputError, "{}: '{}' is not a whole number (in '{}')", flag, item, text);
        if (n < 1 || static_cast<unsigned long long>(n) > max)
            PTXLAB_THROW(InputError, "{}: {} is out of range (1 .. {})", flag, n, max);
        v.push_back(static_cast<unsigned>(n));
    }
    return v;
}

std::vector<unsigned> parse_layers(const std::string& text) {
    std::vector<unsigned> v = parse_sizes(text, "--layers", 1u << 20);
    if (v.size() != 3 && v.size() != 4)
        PTXLAB_THROW(InputError, "--layers: '{}' has {} sizes; give 3 (I,H,O) or 4 (I,H1,H2,O)", text, v.size());
    return v;
}


std::string layers_text(const std::vector<unsigned>& sizes) {
    std::string s;
    for (auto n : sizes) s += (s.empty() ? "" : ",") + std::to_string(n);
    return s;
}

void TrainConfig::validate_flags() const {
    if (batch == 0) PTXLAB_THROW(InputError, "--batch must be at least 1");
    if (!(lr > 0.0f) || !std::isfinite(lr)) PTXLAB_THROW(InputError, "--lr must be a positive finite number, got {}", lr);
    if (!(target > 0.0 && target <= 1.0))
        PTXLAB_THROW(InputError, "--target must be in (0, 1] (a fraction: 0.97 is 97 %), got {}", target);
    if (max_epochs == 0) PTXLAB_THROW(InputError, "--epochs must be at least 1");
    if (layers.size() != 3 && layers.size() != 4)
        PTXLAB_THROW(InputError, "the network needs 3 or 4 layer sizes, got {}", layers.size());
    for (auto w : layers)
        if (w == 0) PTXLAB_THROW(InputError, "layer widths must be at least 1 (--layers {})", layers_text(layers));
    if (uses_fused_forward(kernels.design) && layers.size() != 3)
        PTXLAB_THROW(InputError, "--kernels {} runs 2-layer networks (I,H,O); for --layers {} use --kernels ptx",
                     to_string(kernels), layers_text(layers));
}

void TrainConfig::validate(const Split& train) const {
    validate_flags();
    if (batch > train.count)
        PTXLAB_THROW(InputError, "--batch {} is larger than the training set ({} samples)", batch, train.count);
    if (layers.front() != train.dim())
        PTXLAB_THROW(InputError, "the network takes {} inputs but the images have {}x{} = {} pixels (--layers {})",
                     layers.front(), train.rows, train.cols, train.dim(), layers_text(layers));
    if (layers.back() != kClasses)
        PTXLAB_THROW(InputError, "the network has {} outputs but the labels have {} classes (--layers {})",
                     layers.back(), kClasses, layers_text(layers));
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Parameters and the per-step buffers of one network on the GPU.
//   acts  A1 (A2) and Y for one batch
//   seed design:  gW, gb  per-sample gradients [B][...]
//   fused design: D1 [B][H], D2 [B][O]  the deltas
struct DeviceNet {
    std::vector<unsigned> sizes;
    std::vector<DeviceBuffer> W, b, gW, gb, acts;
    DeviceBuffer D1, D2;
    DeviceBuffer Yp, sync;  // fused_step's scratch: partial outputs, grid barrier words

    DeviceNet(const NetParams& net, unsigned batch, std::optional<Design> design) : sizes(net.sizes) {
        for (size_t l = 0; l < net.layers(); ++l) {
            W.emplace_back(net.W[l].size() * 4, fmt::format("W{}", l + 1));
            b.emplace_back(net.b[l].size() * 4, fmt::format("b{}", l + 1));
            W.back().upload(net.W[l]);
            b.back().upload(net.b[l]);
            const bool last = l + 1 == net.layers();
            acts.emplace_back(size_t(batch) * sizes[l + 1] * 4, last ? "Y" : fmt::format("A{}", l + 1));
            if (design == Design::Seed || design == Design::Fast)
                gW.emplace_back(size_t(batch) * net.W[l].size() * 4, fmt::format("gW{} (per-sample)", l + 1));
            if (design == Design::Seed)
                gb.emplace_back(size_t(batch) * net.b[l].size() * 4, fmt::format("gb{} (per-sample)", l + 1));
        }
        if (design && uses_fused_forward(*design)) {  // Fast's bias gradients are these deltas
            D1 = DeviceBuffer(size_t(batch) * sizes[1] * 4, "D1 (hidden deltas)");
            D2 = DeviceBuffer(size_t(batch) * sizes.back() * 4, "D2 (output deltas)");
        }
        if (design == Design::Fused && fused_step_preferred(batch, sizes[0], sizes.back())) {
            Yp = DeviceBuffer(fused_step_partials(batch, sizes[1], sizes.back()) * 4, "Yp (fused_step partial outputs)");
            Yp.fill_u32(0);  // the padding past the last tile is loaded (and ignored): keep it defined
            sync = DeviceBuffer(8, "fused_step grid barrier");
            sync.fill_u32(0);
        }
    }

    NetParams download() const {
        NetParams n;
        n.sizes = sizes;
        for (size_t l = 0; l + 1 < sizes.size(); ++l) {
            n.W.push_back(W[l].download_vector<float>());
            n.b.push_back(b[l].download_vector<float>());
        }
        return n;
    }
};

void launch_forward(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, unsigned B, CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("forward2").launch(grid, 64, s, X, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                                  n.acts[0].ptr(), n.acts[1].ptr(), B, z[0], z[1], z[2]);
    else
        ks.get("forward3").launch(grid, 64, s, X, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                                  n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), n.acts[2].ptr(), B,
                                  z[0], z[1], z[2], z[3]);
}

void launch_grad(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, unsigned B,
                 CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("grad2").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.acts[0].ptr(), Y, n.gW[0].ptr(), n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), B, z[0],
                               z[1], z[2], 0u);
    else
        ks.get("grad3").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), Y, n.gW[0].ptr(),
                               n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), n.gW[2].ptr(), n.gb[2].ptr(), B, z[0], z[1],
                               z[2], z[3], 0u);
}

void launch_updates(const KernelSet& ks, DeviceNet& n, unsigned B, float lr, CUstream s) {
    const Kernel& upd = ks.get("update");
    for (size_t l = 0; l < n.W.size(); ++l) {
        const unsigned nw = static_cast<unsigned>(n.W[l].bytes() / 4), nb = static_cast<unsigned>(n.b[l].bytes() / 4);
        upd.launch(grid_for(nw), 256, s, n.W[l].ptr(), n.gW[l].ptr(), nw, B, lr);
        upd.launch(grid_for(nb), 256, s, n.b[l].ptr(), n.gb[l].ptr(), nb, B, lr);
    }
}

FusedArgs fused_args(const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, unsigned B, float lr) {
    FusedArgs a{X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(), n.acts[0].ptr(), Y, n.D2.ptr(), n.D1.ptr(),
                B, n.sizes[0], n.sizes[1], n.sizes[2], lr};
    a.Yp = n.Yp.ptr();
    a.sync = n.sync.ptr();
    return a;
}

// One kernel launch of a step, with the buffers it writes (for the NaN hunt).
struct StepKernel {
    std::string name;
    std::function<void(CUstream)> launch;
    struct Write {
        std::string name;
        const DeviceBuffer* buf;
        size_t row_len;  // for coordinates in messages; 0: a vector
    };
    std::vector<Write> writes;
    size_t y_offset = 0;  // 1 + the byte offset into the Y log this launch writes at; 0: it writes no Y
    size_t y_after = 0;   // how many of `writes` come before Y in the data flow (checked first)
};

std::vector<float> one_hot(const std::vector<uint8_t>& labels) {
    std::vector<float> t(labels.size() * kClasses, 0.0f);
    for (size_t i = 0; i < labels.size(); ++i) t[i * kClasses + labels[i]] = 1.0f;
    return t;
}

// The loss over the rows of Y (see Loss), and the argmax predictions.
double batch_loss(Loss kind, const float* Y, const std::vector<uint8_t>& labels, size_t first, size_t B,
                  std::vector<uint8_t>* predictions = nullptr) {
    double loss = 0;
    for (size_t s = 0; s < B; ++s) {
        const float* y = &Y[s * kClasses];
        size_t best = 0;
        for (size_t o = 0; o < kClasses; ++o) {
            double d = double(y[o]) - (labels[first + s] == o ? 1.0 : 0.0);
            loss += d * d;
            if (y[o] > y[best]) best = o;
        }
        if (predictions) predictions->push_back(static_cast<uint8_t>(best));
    }
    return kind == Loss::Mse ? loss / double(B * kClasses) : 0.5 * loss / double(B);
}

// Test-set evaluation with device-resident data, captured once into a graph.
class Evaluator {
public:
    Evaluator(const Split& test, const std::vector<unsigned>& sizes, Design design)
        : test_(test), design_(design), X_(test.images.size() * 4, "test images") {
        X_.upload(test.images);
        for (size_t l = 0; l + 1 < sizes.size(); ++l) {
            acts_.emplace_back(test.count * sizes[l + 1] * 4,
                               l + 2 == sizes.size() ? "test Y" : fmt::format("test A{}", l + 1));
        }
        if (uses_fused_forward(design)) {
            T_ = DeviceBuffer(test.count * kClasses * 4, "test targets");
            T_.upload(one_hot(test.labels));
            D1_ = DeviceBuffer(test.count * sizes[1] * 4, "test D1 (scratch)");
            D2_ = DeviceBuffer(test.count * kClasses * 4, "test D2 (scratch)");
        }
    }

    void enqueue(const KernelSet& ks, DeviceNet& net, CUstream s) {
        const unsigned n = static_cast<unsigned>(test_.count);
        if (uses_fused_forward(design_)) {
            FusedArgs a = fused_args(net, X_.ptr(), T_.ptr(), acts_.back().ptr(), n, 0.0f);
            a.A1 = acts_[0].ptr();
            a.D1 = D1_.ptr();
            a.D2 = D2_.ptr();
            launch_fused_forward(ks, a, s);
            launch_fused_output(ks, a, s);
            return;
        }
        // Point the network's activation buffers at the test-sized ones for this launch.
        std::swap(net.acts, acts_);
        try {
            launch_forward(ks, net, X_.ptr(), n, s);
        } catch (...) {
            std::swap(net.acts, acts_);
            throw;
        }
        std::swap(net.acts, acts_);
    }

    EvalResult run(const KernelSet& ks, DeviceNet& net, CUstream s, Loss loss, bool use_graph) {
        if (use_graph) {
            if (!graph_) graph_.emplace(s, [&] { enqueue(ks, net, s); });
            graph_->launch(s);
        } else {
            enqueue(ks, net, s);
        }
        wait_for_stream(s);
        std::vector<float> Y = acts_.back().download_vector<float>();
        EvalResult r;
        r.count = test_.count;
        std::vector<uint8_t> pred;
        r.loss = batch_loss(loss, Y.data(), test_.labels, 0, test_.count, &pred);
        r.confusion.assign(kClasses * kClasses, 0);
        size_t right = 0;
        for (size_t i = 0; i < test_.count; ++i) {
            r.confusion[test_.labels[i] * kClasses + pred[i]]++;
            right += pred[i] == test_.labels[i];
        }
        r.accuracy = double(right) / double(test_.count);
        return r;
    }

private:
    const Split& test_;
    Design design_;
    DeviceBuffer X_, T_, D1_, D2_;
    std::vector<DeviceBuffer> acts_;
    std::optional<Graph> graph_;
};

class Progress {
public:
    explicit Progress(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}
    void update(unsigned epoch, unsigned done, unsigned total, double loss, double samples_per_s) {
        if (!enabled_) return;
        auto now = Clock::now();
        if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
        last_ = now;
        const int width = 30;
        int filled = static_cast<int>(double(width) * done / std::max(1u, total));
        fmt::print(stderr, "\repoch {:>2} [{}{}] {:>5}/{} loss {:.4f} {:>9.0f} samples/s", epoch,
                   std::string(size_t(filled), '#'), std::string(size_t(width - filled), '.'), done, total, loss,
                   samples_per_s);
        dirty_ = true;
    }
    void clear() {
        if (enabled_ && dirty_) fmt::print(stderr, "\r{:<100}\r", "");
        dirty_ = false;
    }

private:
    bool enabled_, dirty_ = false;
    Clock::time_point last_{};
};

// The first non-finite value of a buffer: "A1[3][17] = nan", or empty.
std::string first_non_finite(const std::string& name, const DeviceBuffer& buf, size_t row_len, size_t offset = 0,
                             size_t count = 0, double* max_abs = nullptr) {
    std::vector<float> v(count ? count : (buf.bytes() - offset) / 4);
    buf.download(v.data(), v.size() * 4, offset);
    std::string hit;
    for (size_t i = 0; i < v.size(); ++i) {
        if (!std::isfinite(v[i])) {
            if (hit.empty())
                hit = row_len ? fmt::format("{}[{}][{}] = {}", name, i / row_len, i % row_len, v[i])
                              : fmt::format("{}[{}] = {}", name, i, v[i]);
        } else if (max_abs) {
            *max_abs = std::max(*max_abs, double(std::fabs(v[i])));
        }
    }
    return hit;
}

}  // namespace

std::vector<std::string> training_entries(Design d, const std::vector<unsigned>& sizes) {
    const bool three = sizes.size() == 4;
    if (d == Design::Fused) {
        std::vector<std::string> v = {"fused_forward", "fused_output", "fused_grad", "gather"};
        if (sizes.size() == 3 && fused_step_fits(sizes[0], sizes[2])) v.push_back("fused_step");
        return v;
    }
    if (d == Design::Fast) return {"fused_forward", "fused_output", "outer", "update", "gather"};
    return {three ? "forward3" : "forward2", three ? "grad3" : "grad2", "update", "gather"};
}

EvalResult evaluate(const KernelSet& kernels, const NetParams& net, const Split& test, Loss loss) {
    if (net.sizes.front() != test.dim())
        PTXLAB_THROW(InputError, "the model takes {} inputs but the images have {}x{} = {} pixels", net.sizes.front(),
                     test.rows, test.cols, test.dim());
    if (net.sizes.back() != kClasses)
        PTXLAB_THROW(InputError, "the model has {} outputs but the labels have {} classes", net.sizes.back(), kClasses);
    bool fused = true;
    try {
        kernels.get("fused_forward");
    } catch (const Error&) {
        fused = false;
    }
    const Design d = fused && net.sizes.size() == 3 ? Design::Fused : Design::Seed;  // Fast evaluates as Fused
    DeviceNet dnet(net, 1, std::nullopt);
    Evaluator ev(test, net.sizes, d);
    Stream stream;
    return ev.run(kernels, dnet, stream.get(), loss, false);
}

TrainResult train(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out) {
    cfg.validate(data.train);
    TrainResult res;
    const auto& sizes = cfg.layers;
    const Design design = cfg.kernels.design;
    const unsigned B = cfg.batch, O = kClasses;
    const size_t N = data.train.count, I = data.train.dim();
    const unsigned K = static_cast<unsigned>(N / B);  // steps per epoch; the last partial batch is dropped
    const unsigned chunk = cfg.chunk ? cfg.chunk : (design == Design::Seed ? 8u : 128u);

    KernelSet ks(cfg.kernels.source, ctx.info(), cfg.dirs, training_entries(design, sizes));
    res.jit_ms = ks.load_ms();
    for (const auto& [file, log] : ks.logs())
        if (log.find("warning") != std::string::npos) fmt::print(stderr, "{}: {}\n", file, log);

    // Data on the GPU: the training set, a shuffled copy of it, the test set, and a log of
    // every step's outputs Y over one epoch.
    DeviceBuffer X(N * I * 4, "training images"), T(N * O * 4, "training targets");
    DeviceBuffer Xs(N * I * 4, "shuffled training images"), Ts(N * O * 4, "shuffled training targets");
    DeviceBuffer perm(N * 4, "shuffle order");
    DeviceBuffer Ylog(size_t(K) * B * O * 4, "outputs of every step of an epoch");
    X.upload(data.train.images);
    T.upload(one_hot(data.train.labels));
    Evaluator evaluator(data.test, sizes, design);

    NetParams init = init_params(sizes, cfg.init, cfg.seed);
    DeviceNet net(init, B, design);
    // The parameters as they were at the start of the current chunk (for the NaN hunt).
    std::vector<DeviceBuffer> saved;
    for (size_t l = 0; l < net.W.size(); ++l) {
        saved.emplace_back(net.W[l].bytes(), fmt::format("saved W{}", l + 1));
        saved.emplace_back(net.b[l].bytes(), fmt::format("saved b{}", l + 1));
    }
    Stream stream;
    const CUstream s = stream.get();
    Rng shuffle_rng(cfg.seed ^ 0x5eed5eed5eed5eedull);
    std::vector<uint32_t> order(N);
    std::vector<uint8_t> labels_shuffled(N);
    std::vector<float> Yhost(size_t(chunk) * B * O);

    std::ofstream csv;
    if (!cfg.log_csv.empty()) {
        csv.open(cfg.log_csv);
        if (!csv) PTXLAB_THROW(InputError, "--log: cannot write '{}'", cfg.log_csv);
        csv << "step,epoch,train_loss,test_accuracy,elapsed_s\n";
    }

    // The step size the update applies to the mean per-sample gradient (see Loss).
    const float step_lr = cfg.loss == Loss::Mse ? cfg.lr * (2.0f / float(sizes.back())) : cfg.lr;

    // The fused design's arguments for `steps` steps from epoch-local step k.
    auto step_args = [&](unsigned k, unsigned steps) {
        const size_t first = size_t(k) * B;
        FusedArgs a = fused_args(net, Xs.ptr() + first * I * 4, Ts.ptr() + first * O * 4,
                                 Ylog.ptr() + first * O * 4, B, step_lr);
        // Both 2-layer designs start with the same forward pass and deltas. Only the fused
        // set's kernels all wait with griddepcontrol, so only it may overlap its launches.
        a.overlap = design == Design::Fused && cfg.overlap;
        a.steps = steps;
        return a;
    };
    // The one-launch step (fused_step), which can also run many steps in one launch.
    const bool one_launch = design == Design::Fused && cfg.one_launch && net.Yp.ptr() != 0;

    // The launches of epoch-local step k, in order.
    auto step_kernels = [&](unsigned k) {
        const size_t first = size_t(k) * B;
        const CUdeviceptr Xb = Xs.ptr() + first * I * 4, Tb = Ts.ptr() + first * O * 4;
        const size_t y_off = first * O * 4;
        const CUdeviceptr Yk = Ylog.ptr() + y_off;
        std::vector<StepKernel> v;
        if (uses_fused_forward(design)) {
            const FusedArgs a = step_args(k, 1);
            if (one_launch) {
                const Kernel& k = ks.get("fused_step");
                v.push_back({"fused_step", [&k, a](CUstream st) { launch_fused_step(k, a, st); },
                             {{"A1", &net.acts[0], sizes[1]},
                              {"W1", &net.W[0], sizes[0]},
                              {"b1", &net.b[0], 0},
                              {"W2", &net.W[1], sizes[1]},
                              {"b2", &net.b[1], 0}},
                             y_off + 1, 1});  // A1, then Y, then the parameters
                return v;
            }
            v.push_back({"fused_forward", [&ks, a](CUstream st) { launch_fused_forward(ks, a, st); },
                         {{"A1", &net.acts[0], sizes[1]}}, 0});
            v.push_back({"fused_output", [&ks, a](CUstream st) { launch_fused_output(ks, a, st); },
                         {{"D2", &net.D2, O}, {"D1", &net.D1, sizes[1]}}, y_off + 1});
            const std::vector<StepKernel::Write> params = {
                {"W1", &net.W[0], sizes[0]}, {"b1", &net.b[0], 0}, {"W2", &net.W[1], sizes[1]}, {"b2", &net.b[1], 0}};
            if (design == Design::Fused) {
                v.push_back({"fused_grad", [&ks, a](CUstream st) { launch_fused_grad(ks, a, st); }, params, 0});
            } else {
                // Fast: per-sample weight gradients by `outer`, then `update` averages them over the
                // batch (the bias gradients are the deltas D1, D2).
                const CUdeviceptr gW1 = net.gW[0].ptr(), gW2 = net.gW[1].ptr();
                v.push_back({"outer", [&ks, a, gW1, gW2](CUstream st) { launch_fast_outer(ks, a, gW1, gW2, st); },
                             {{"gW1", &net.gW[0], sizes[0]}, {"gW2", &net.gW[1], sizes[1]}}, 0});
                v.push_back({"update", [&ks, a, gW1, gW2](CUstream st) { launch_fast_mean(ks, a, gW1, gW2, st); },
                             params, 0});
            }
        } else {
            StepKernel g{sizes.size() == 4 ? "grad3" : "grad2",
                         [&, Xb, Tb, Yk](CUstream st) { launch_grad(ks, net, Xb, Tb, Yk, B, st); }, {}, y_off + 1};
            for (size_t l = 0; l + 1 < net.acts.size(); ++l)
                g.writes.push_back({fmt::format("A{}", l + 1), &net.acts[l], sizes[l + 1]});
            for (size_t l = 0; l < net.W.size(); ++l) {
                g.writes.push_back({fmt::format("gW{}", l + 1), &net.gW[l], sizes[l]});
                g.writes.push_back({fmt::format("gb{}", l + 1), &net.gb[l], sizes[l + 1]});
            }
            v.push_back(std::move(g));
            StepKernel u{"update", [&](CUstream st) { launch_updates(ks, net, B, step_lr, st); }, {}, 0};
            for (size_t l = 0; l < net.W.size(); ++l) {
                u.writes.push_back({fmt::format("W{}", l + 1), &net.W[l], sizes[l]});
                u.writes.push_back({fmt::format("b{}", l + 1), &net.b[l], 0});
            }
            v.push_back(std::move(u));
        }
        return v;
    };
    auto enqueue_steps = [&](unsigned a, unsigned b) {
        if (one_launch) {  // steps_per_launch steps a launch (0: all of them)
            const unsigned per = cfg.steps_per_launch ? cfg.steps_per_launch : b - a;
            for (unsigned k = a; k < b; k += per)
                launch_fused_step(ks.get("fused_step"), step_args(k, std::min(per, b - k)), s);
            return;
        }
        for (unsigned k = a; k < b; ++k)
            for (const auto& sk : step_kernels(k)) sk.launch(s);
    };
    // Graphs of step ranges [a, b) of an epoch, captured on first use and replayed after.
    std::map<std::pair<unsigned, unsigned>, Graph> graphs;
    Event ev_start, ev_end;  // around each chunk's steps
    auto run_steps = [&](unsigned a, unsigned b) {
        for (size_t i = 0; i < saved.size(); ++i) {
            const DeviceBuffer& p = i % 2 ? net.b[i / 2] : net.W[i / 2];
            CU(cuMemcpyDtoDAsync, saved[i].ptr(), p.ptr(), p.bytes(), s);
        }
        if (!cfg.graphs || graphs.size() >= 512) {
            ev_start.record(s);
            enqueue_steps(a, b);
            ev_end.record(s);
            return;
        }
        auto it = graphs.find({a, b});
        if (it == graphs.end()) it = graphs.emplace(std::pair{a, b}, Graph(s, [&] { enqueue_steps(a, b); })).first;
        ev_start.record(s);
        it->second.launch(s);
        ev_end.record(s);
    };

    // After a non-finite loss in steps [a, b): restore the parameters saved at a, replay the
    // steps one kernel at a time, and name the first kernel that wrote a non-finite value.
    auto hunt_non_finite = [&](unsigned a, unsigned b) -> std::string {
        for (size_t i = 0; i < saved.size(); ++i) {
            const DeviceBuffer& p = i % 2 ? net.b[i / 2] : net.W[i / 2];
            CU(cuMemcpyDtoDAsync, p.ptr(), saved[i].ptr(), p.bytes(), s);
        }
        for (unsigned k = a; k < b; ++k) {
            for (const auto& sk : step_kernels(k)) {
                sk.launch(s);
                wait_for_stream(s);
                double big = 0;
                std::string hit;
                // In data-flow order, so the first hit is where the non-finite value started.
                for (size_t i = 0; i <= sk.writes.size() && hit.empty(); ++i) {
                    if (i == sk.y_after && sk.y_offset)
                        hit = first_non_finite("Y", Ylog, O, sk.y_offset - 1, size_t(B) * O, &big);
                    if (hit.empty() && i < sk.writes.size())
                        hit = first_non_finite(sk.writes[i].name, *sk.writes[i].buf, sk.writes[i].row_len, 0, 0, &big);
                }
                if (hit.empty()) continue;
                const std::string origin = ks.get(sk.name).origin;
                return fmt::format(
                    "kernel '{}' ({}) wrote a non-finite value in step {} of the epoch: {}. Its inputs were finite{}",
                    sk.name, origin, k + 1, hit,
                    big > 1e18 ? fmt::format(" but huge (|x| up to {:.3g}): training diverged, lower --lr", big)
                               : fmt::format(" (|x| <= {:.3g}): check the kernel with `ptxlab verify --kernel {}`",
                                             big, sk.name));
            }
        }
        return "the loss became non-finite, but replaying the steps one kernel at a time did not reproduce it";
    };

    Progress bar(cfg.progress);
    double loss_sum = 0;
    unsigned loss_n = 0, step = 0;
    bool stop = false;
    auto do_eval = [&](unsigned epoch) {
        bar.clear();
        auto t0 = Clock::now();
        EvalResult e = evaluator.run(ks, net, s, cfg.loss, cfg.graphs);
        res.eval_ms += ms_since(t0);
        EvalPoint p{step, epoch, loss_n ? loss_sum / loss_n : 0.0, e.accuracy, (res.train_ms + res.eval_ms) / 1e3};
        res.curve.push_back(p);
        res.accuracy = e.accuracy;
        fmt::print(out, "epoch {:>2}  step {:>6}  train loss {:.5f}  test accuracy {:.2f} %\n", epoch, step,
                   p.train_loss, 100.0 * e.accuracy);
        out.flush();
        if (csv) {
            csv << fmt::format("{},{},{:.6f},{:.6f},{:.3f}\n", p.step, p.epoch, p.train_loss, p.accuracy, p.elapsed_s);
            csv.flush();
        }
        loss_sum = 0;
        loss_n = 0;
        if (e.accuracy >= cfg.target && !res.reached) {
            res.reached = true;
            res.train_ms_to_target = res.train_ms;
            stop = true;
            res.stop_reason = fmt::format("reached the target {:.2f} %", 100.0 * cfg.target);
        }
    };

    for (unsigned epoch = 1; epoch <= cfg.max_epochs && !stop; ++epoch) {
        // A new order for this epoch, applied on the GPU by the gather kernel.
        for (uint32_t i = 0; i < N; ++i) order[i] = i;
        shuffle_rng.shuffle(order);
        for (size_t i = 0; i < N; ++i) labels_shuffled[i] = data.train.labels[order[i]];
        auto t_epoch = Clock::now();
        CU(cuMemcpyHtoDAsync, perm.ptr(), order.data(), N * 4, s);
        const Kernel& gather = ks.get("gather");
        gather.launch(grid_for(N * I), 256, s, Xs.ptr(), X.ptr(), perm.ptr(), unsigned(N), unsigned(I));
        gather.launch(grid_for(N * O), 256, s, Ts.ptr(), T.ptr(), perm.ptr(), unsigned(N), O);
        double epoch_ms = ms_since(t_epoch);
        res.train_ms += epoch_ms;
        res.epochs = epoch;

        for (unsigned k = 0; k < K && !stop;) {
            // The next chunk ends at a chunk boundary, an evaluation or --max-steps.
            unsigned end = std::min(K, (k / chunk + 1) * chunk);
            if (cfg.eval_every) end = std::min(end, k + (cfg.eval_every - step % cfg.eval_every));
            if (cfg.max_steps) end = std::min(end, k + (cfg.max_steps - step));
            auto t0 = Clock::now();
            try {
                run_steps(k, end);
                wait_for_stream(s);
            } catch (const TimeoutError&) {
                throw;
            } catch (const CudaError& e) {
                PTXLAB_THROW(Error, "training steps {}..{} failed on the GPU ({} kernels): {}", step + 1,
                             step + end - k, to_string(cfg.kernels), e.what());
            }
            const double chunk_ms = ms_since(t0);
            res.train_ms += chunk_ms;
            epoch_ms += chunk_ms;
            res.chunk_gpu_ms.push_back(ev_end.since(ev_start));
            res.chunk_steps.push_back(end - k);

            // The step losses, from the outputs the steps logged.
            Ylog.download(Yhost.data(), size_t(end - k) * B * O * 4, size_t(k) * B * O * 4);
            for (unsigned j = k; j < end && !stop; ++j) {
                ++step;
                const double loss = batch_loss(cfg.loss, Yhost.data() + size_t(j - k) * B * O, labels_shuffled,
                                               size_t(j) * B, B);
                res.step_losses.push_back(loss);
                res.steps = step;
                if (!std::isfinite(loss)) {
                    bar.clear();
                    res.diverged = true;
                    res.fault = hunt_non_finite(k, j + 1);
                    res.stop_reason = fmt::format("the loss is {} at step {} (epoch {}): {}", loss, step, epoch,
                                                  res.fault);
                    stop = true;
                    break;
                }
                loss_sum += loss;
                ++loss_n;
            }
            if (stop) break;
            bar.update(epoch, end, K, loss_n ? loss_sum / loss_n : 0.0,
                       double(step) * B / std::max(1e-9, res.train_ms / 1e3));
            k = end;
            if (cfg.eval_every && step % cfg.eval_every == 0) do_eval(epoch);
            if (g_stop_requested && !stop) {
                stop = true;
                res.interrupted = true;
                res.stop_reason = fmt::format("interrupted after step {}", step);
            }
            if (cfg.max_steps && step >= cfg.max_steps && !stop) {
                stop = true;
                res.stop_reason = fmt::format("stopped after {} steps (--max-steps)", step);
            }
        }
        res.epoch_ms.push_back(epoch_ms);
        if (!cfg.eval_every && !res.diverged && !res.interrupted) do_eval(epoch);
    }
    bar.clear();
    if (!stop && res.stop_reason.empty())
        res.stop_reason = fmt::format("did not reach {:.2f} % within {} epochs", 100.0 * cfg.target, cfg.max_epochs);
    res.model = net.download();
    return res;
}

}  // namespace ptxlab
