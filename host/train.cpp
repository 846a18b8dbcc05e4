#include "train.hpp"

#include "rng.hpp"

#include <fmt/ostream.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
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

Loss parse_loss(const std::string& name) {
    if (name == "mse") return Loss::Mse;
    if (name == "half-sse") return Loss::HalfSse;
    PTXLAB_THROW(InputError, "unknown loss '{}' (choose mse or half-sse)", name);
}

std::string to_string(Loss l) { return l == Loss::Mse ? "mse" : "half-sse"; }

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

NetParams init_params(const std::vector<unsigned>& sizes, Init init, float init_std, uint64_t seed) {
    Rng rng(seed);
    NetParams net;
    net.sizes = sizes;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        const size_t rows = sizes[l + 1], cols = sizes[l];
        std::vector<float> W(rows * cols), b(rows, 0.0f);
        if (init == Init::HeUniform) {
            const float bound = std::sqrt(6.0f / float(cols));
            for (auto& w : W) w = rng.uniform(-bound, bound);
        } else {
            for (auto& w : W) w = static_cast<float>(init_std * rng.normal());
            for (auto& x : b) x = static_cast<float>(init_std * rng.normal());
        }
        net.W.push_back(std::move(W));
        net.b.push_back(std::move(b));
    }
    return net;
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Parameters and per-sample gradient buffers of one network on the GPU.
struct DeviceNet {
    std::vector<unsigned> sizes;
    std::vector<DeviceBuffer> W, b, gW, gb, acts;  // acts: A1 (A2) and Y for one batch

    DeviceNet(const NetParams& net, unsigned batch, bool with_grads) : sizes(net.sizes) {
        for (size_t l = 0; l < net.layers(); ++l) {
            W.emplace_back(net.W[l].size() * 4, fmt::format("W{}", l + 1));
            b.emplace_back(net.b[l].size() * 4, fmt::format("b{}", l + 1));
            W.back().upload(net.W[l]);
            b.back().upload(net.b[l]);
            const bool last = l + 1 == net.layers();
            acts.emplace_back(size_t(batch) * sizes[l + 1] * 4, last ? "Y" : fmt::format("A{}", l + 1));
            if (with_grads) {
                gW.emplace_back(size_t(batch) * net.W[l].size() * 4, fmt::format("gW{} (per-sample)", l + 1));
                gb.emplace_back(size_t(batch) * net.b[l].size() * 4, fmt::format("gb{} (per-sample)", l + 1));
            }
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

void launch_grad(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, unsigned B, CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("grad2").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.acts[0].ptr(), n.acts[1].ptr(), n.gW[0].ptr(), n.gb[0].ptr(), n.gW[1].ptr(),
                               n.gb[1].ptr(), B, z[0], z[1], z[2]);
    else
        ks.get("grad3").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), n.acts[2].ptr(),
                               n.gW[0].ptr(), n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), n.gW[2].ptr(),
                               n.gb[2].ptr(), B, z[0], z[1], z[2], z[3]);
}

void launch_updates(const KernelSet& ks, DeviceNet& n, unsigned B, float lr, CUstream s) {
    const Kernel& upd = ks.get("update");
    for (size_t l = 0; l < n.W.size(); ++l) {
        const unsigned nw = static_cast<unsigned>(n.W[l].bytes() / 4), nb = static_cast<unsigned>(n.b[l].bytes() / 4);
        upd.launch(grid_for(nw), 256, s, n.W[l].ptr(), n.gW[l].ptr(), nw, B, lr);
        upd.launch(grid_for(nb), 256, s, n.b[l].ptr(), n.gb[l].ptr(), nb, B, lr);
    }
}

std::vector<float> one_hot(const std::vector<uint8_t>& labels) {
    std::vector<float> t(labels.size() * kClasses, 0.0f);
    for (size_t i = 0; i < labels.size(); ++i) t[i * kClasses + labels[i]] = 1.0f;
    return t;
}

// The loss over the rows of Y (see Loss), and the argmax predictions.
double batch_loss(Loss kind, const std::vector<float>& Y, const std::vector<uint8_t>& labels, size_t first, size_t B,
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

// Test-set evaluation with device-resident data.
class Evaluator {
public:
    Evaluator(const Split& test, const std::vector<unsigned>& sizes)
        : test_(test), X_(test.images.size() * 4, "test images") {
        X_.upload(test.images);
        for (size_t l = 0; l + 1 < sizes.size(); ++l) {
            acts_.emplace_back(test.count * sizes[l + 1] * 4,
                               l + 2 == sizes.size() ? "test Y" : fmt::format("test A{}", l + 1));
        }
    }

    EvalResult run(const KernelSet& ks, DeviceNet& net, CUstream s, Loss loss) {
        // Point the network's activation buffers at the test-sized ones for this launch.
        std::swap(net.acts, acts_);
        try {
            launch_forward(ks, net, X_.ptr(), static_cast<unsigned>(test_.count), s);
            CU(cuStreamSynchronize, s);
        } catch (...) {
            std::swap(net.acts, acts_);
            throw;
        }
        std::swap(net.acts, acts_);
        std::vector<float> Y = acts_.back().download_vector<float>();
        EvalResult r;
        r.count = test_.count;
        std::vector<uint8_t> pred;
        r.loss = batch_loss(loss, Y, test_.labels, 0, test_.count, &pred);
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
    DeviceBuffer X_;
    std::vector<DeviceBuffer> acts_;
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

}  // namespace

EvalResult evaluate(const KernelSet& kernels, const NetParams& net, const Split& test, Loss loss) {
    if (net.sizes.front() != test.dim())
        PTXLAB_THROW(InputError, "the model takes {} inputs but the images have {}x{} = {} pixels", net.sizes.front(),
                     test.rows, test.cols, test.dim());
    if (net.sizes.back() != kClasses)
        PTXLAB_THROW(InputError, "the model has {} outputs but the labels have {} classes", net.sizes.back(), kClasses);
    DeviceNet dnet(net, 1, false);
    Evaluator ev(test, net.sizes);
    Stream stream;
    return ev.run(kernels, dnet, stream.get(), loss);
}

TrainResult train(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out) {
    cfg.validate(data.train);
    TrainResult res;
    const auto& sizes = cfg.layers;
    const unsigned B = cfg.batch;
    const size_t N = data.train.count, I = data.train.dim();
    const unsigned steps_per_epoch = static_cast<unsigned>(N / B);  // the last partial batch is dropped

    // Kernels: the forward, gradient, update and gather entries this network needs.
    const bool three = sizes.size() == 4;
    KernelSet ks(cfg.kernels, ctx.info(), cfg.dirs,
                 {three ? "forward3" : "forward2", three ? "grad3" : "grad2", "update", "gather"});
    res.jit_ms = ks.load_ms();
    for (const auto& [file, log] : ks.logs())
        if (log.find("warning") != std::string::npos) fmt::print(stderr, "{}: {}\n", file, log);

    // Data on the GPU: the training set, a shuffled copy of it, and the test set.
    DeviceBuffer X(N * I * 4, "training images"), T(N * kClasses * 4, "training targets");
    DeviceBuffer Xs(N * I * 4, "shuffled training images"), Ts(N * kClasses * 4, "shuffled training targets");
    DeviceBuffer perm(N * 4, "shuffle order");
    X.upload(data.train.images);
    T.upload(one_hot(data.train.labels));
    Evaluator evaluator(data.test, sizes);

    NetParams init = init_params(sizes, cfg.init, cfg.init_std, cfg.seed);
    DeviceNet net(init, B, true);
    Stream stream;
    const CUstream s = stream.get();
    Rng shuffle_rng(cfg.seed ^ 0x5eed5eed5eed5eedull);
    std::vector<uint32_t> order(N);
    std::vector<uint8_t> labels_shuffled(N);
    std::vector<float> Yb(size_t(B) * kClasses);

    std::ofstream csv;
    if (!cfg.log_csv.empty()) {
        csv.open(cfg.log_csv);
        if (!csv) PTXLAB_THROW(InputError, "--log: cannot write '{}'", cfg.log_csv);
        csv << "step,epoch,train_loss,test_accuracy,elapsed_s\n";
    }

    // The step size the update kernel applies to the mean per-sample gradient (see Loss).
    const float step_lr = cfg.loss == Loss::Mse ? cfg.lr * (2.0f / float(sizes.back())) : cfg.lr;
    Progress bar(cfg.progress);
    double loss_sum = 0;
    unsigned loss_n = 0, step = 0;
    bool stop = false;
    auto do_eval = [&](unsigned epoch) {
        bar.clear();
        auto t0 = Clock::now();
        EvalResult e = evaluator.run(ks, net, s, cfg.loss);
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
        perm.upload(order);
        const Kernel& gather = ks.get("gather");
        gather.launch(grid_for(N * I), 256, s, Xs.ptr(), X.ptr(), perm.ptr(), unsigned(N), unsigned(I));
        gather.launch(grid_for(N * kClasses), 256, s, Ts.ptr(), T.ptr(), perm.ptr(), unsigned(N), kClasses);
        res.train_ms += ms_since(t_epoch);
        res.epochs = epoch;

        for (unsigned k = 0; k < steps_per_epoch && !stop; ++k) {
            auto t0 = Clock::now();
            const size_t first = size_t(k) * B;
            launch_grad(ks, net, Xs.ptr() + first * I * 4, Ts.ptr() + first * kClasses * 4, B, s);
            launch_updates(ks, net, B, step_lr, s);
            CU(cuMemcpyDtoHAsync, Yb.data(), net.acts.back().ptr(), Yb.size() * 4, s);
            try {
                CU(cuStreamSynchronize, s);
            } catch (const CudaError& e) {
                PTXLAB_THROW(Error, "training step {} failed on the GPU ({} kernels): {}", step + 1,
                             to_string(cfg.kernels), e.what());
            }
            res.train_ms += ms_since(t0);
            ++step;
            const double loss = batch_loss(cfg.loss, Yb, labels_shuffled, first, B);
            res.step_losses.push_back(loss);
            res.steps = step;
            if (!std::isfinite(loss)) {
                bar.clear();
                res.diverged = true;
                res.stop_reason = fmt::format(
                    "training diverged at step {} (epoch {}): the loss is {}. Try a lower learning rate (--lr, now {})",
                    step, epoch, loss, cfg.lr);
                stop = true;
                break;
            }
            loss_sum += loss;
            ++loss_n;
            bar.update(epoch, k + 1, steps_per_epoch, loss_sum / loss_n,
                       double(step) * B / std::max(1e-9, res.train_ms / 1e3));
            if (cfg.eval_every && step % cfg.eval_every == 0) do_eval(epoch);
            if (g_stop_requested) {
                stop = true;
                res.interrupted = true;
                res.stop_reason = fmt::format("interrupted after step {}", step);
            }
            if (cfg.max_steps && step >= cfg.max_steps && !stop) {
                stop = true;
                res.stop_reason = fmt::format("stopped after {} steps (--max-steps)", step);
            }
        }
        if (!cfg.eval_every && !res.diverged && !res.interrupted) do_eval(epoch);
    }
    bar.clear();
    if (!stop && res.stop_reason.empty())
        res.stop_reason = fmt::format("did not reach {:.2f} % within {} epochs", 100.0 * cfg.target, cfg.max_epochs);
    res.model = net.download();
    return res;
}

}  // namespace ptxlab
