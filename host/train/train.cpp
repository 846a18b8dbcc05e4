// The MLP trainer (`train --layers` with 2 or 3 layers, every kernel set): epochs of CUDA-graph
// chunks, evaluation, divergence diagnosis and the run's end state; the configuration's checks are in
// train_config.cpp, the checkpoints in checkpoint.cpp, the model trainer in train_cnn.cpp.
#include "train.hpp"

#include "fused.hpp"
#include "optim.hpp"
#include "rng.hpp"
#include "safetensors.hpp"
#include "tc.hpp"
#include "tcstep.hpp"

#include <fmt/ostream.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <sstream>
#include <tuple>

namespace ptxlab {

std::atomic<bool> g_stop_requested{false};

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// CUDA graphs of chunks kept at most (past that, chunks launch without one), and how many of
// them are captured before the clock starts.
constexpr size_t kMaxGraphs = 512, kPreparedGraphs = 64;

// The one-launch step training with `cfg` runs, or empty: fused_step for the fused set (any
// loss, optimizer and activation, B <= 64), tc_step for the tensor-core set (B <= 64 and
// tcstep.hpp's limits), unless --three-launches asks for the separate launches.
std::string one_launch_entry(const TrainConfig& cfg) {
    if (!cfg.one_launch || cfg.layers.size() != 3) return {};
    const unsigned B = cfg.batch, I = cfg.layers[0], H = cfg.layers[1], O = cfg.layers[2];
    if (cfg.kernels.design == Design::Fused && fused_step_preferred(B, I, O)) return "fused_step";
    // tc_step is TF32 only: tc-bf16 runs its kernels one launch each.
    if (cfg.kernels.design == Design::Tc && !cfg.kernels.bf16 && tc_step_unfit(B, I, H, O).empty()) return "tc_step";
    return {};
}
bool uses_one_launch(const TrainConfig& cfg) { return !one_launch_entry(cfg).empty(); }

// A one-launch step kernel (fused_step or tc_step) on the buffers and recipe of `a`.
void launch_step_kernel(const Kernel& k, const FusedArgs& a, CUstream s) {
    if (k.spec->entry == "tc_step") launch_tc_step(k, a, s);
    else launch_fused_step(k, a, s);
}

// Parameters and the per-step buffers of one network on the GPU.
//   params        every W and b back to back (W1, b1, W2, b2, ...); W[l], b[l] are views of it
//   grads         the mean gradient, same layout (GW[l], Gb[l] views); state1/state2 the
//                 optimizer's buffers (momentum or Adam's m; Adam's v), same layout
//   acts          A1 (A2) and Y for one batch
//   seed design:  gW, gb  per-sample gradients [B][...]; fast: gW only
//   fused/fast:   D1 [B][H], D2 [B][O]  the deltas
struct DeviceNet {
    std::vector<unsigned> sizes;
    size_t count = 0;  // floats in params
    DeviceBuffer params, grads, state1, state2;
    std::vector<DeviceBuffer> W, b, GW, Gb, gW, gb, acts;
    DeviceBuffer D1, D2;
    DeviceBuffer Yp, sync;  // fused_step's scratch: partial outputs, grid barrier words
    unsigned act = kActRelu;  // the hidden activation's code (act_code) the forward and delta kernels take

    DeviceNet(const NetParams& net, unsigned batch, std::optional<Design> design, unsigned state_buffers = 0,
              bool fused_step = false)
        : sizes(net.sizes) {
        for (size_t l = 0; l < net.layers(); ++l) count += net.W[l].size() + net.b[l].size();
        params = DeviceBuffer(count * 4, "parameters");
        if (design) grads = DeviceBuffer(count * 4, "gradients");
        if (state_buffers > 0) state1 = DeviceBuffer(count * 4, "optimizer state 1 (m; RMSprop's v)");
        if (state_buffers > 1) state2 = DeviceBuffer(count * 4, "optimizer state 2 (Adam's v)");
        for (auto* st : {&state1, &state2})
            if (st->bytes()) st->fill_u32(0);  // PyTorch starts the state at zero
        size_t off = 0;
        for (size_t l = 0; l < net.layers(); ++l) {
            const size_t wb = net.W[l].size() * 4, bb = net.b[l].size() * 4;
            W.push_back(DeviceBuffer::view(params, off, wb, fmt::format("W{}", l + 1)));
            b.push_back(DeviceBuffer::view(params, off + wb, bb, fmt::format("b{}", l + 1)));
            if (design) {
                GW.push_back(DeviceBuffer::view(grads, off, wb, fmt::format("grad W{}", l + 1)));
                Gb.push_back(DeviceBuffer::view(grads, off + wb, bb, fmt::format("grad b{}", l + 1)));
            }
            W.back().upload(net.W[l]);
            b.back().upload(net.b[l]);
            off += wb + bb;
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
        if (fused_step) {
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
    // The buffers a step changes and the NaN hunt restores: parameters and optimizer state.
    std::vector<const DeviceBuffer*> state() const {
        std::vector<const DeviceBuffer*> v = {&params};
        for (auto* st : {&state1, &state2})
            if (st->bytes()) v.push_back(st);
        return v;
    }
};

void launch_forward(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, unsigned B, CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("forward2").launch(grid, 64, s, X, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                                  n.acts[0].ptr(), n.acts[1].ptr(), B, z[0], z[1], z[2], n.act);
    else
        ks.get("forward3").launch(grid, 64, s, X, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                                  n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), n.acts[2].ptr(), B,
                                  z[0], z[1], z[2], z[3], n.act);
}

void launch_grad(const KernelSet& ks, const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, unsigned B,
                 unsigned loss, CUstream s) {
    const auto& z = n.sizes;
    const unsigned grid = grid_for(B, 64);
    if (z.size() == 3)
        ks.get("grad2").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.acts[0].ptr(), Y, n.gW[0].ptr(), n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), B, z[0],
                               z[1], z[2], loss, n.act);
    else
        ks.get("grad3").launch(grid, 64, s, X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(),
                               n.W[2].ptr(), n.b[2].ptr(), n.acts[0].ptr(), n.acts[1].ptr(), Y, n.gW[0].ptr(),
                               n.gb[0].ptr(), n.gW[1].ptr(), n.gb[1].ptr(), n.gW[2].ptr(), n.gb[2].ptr(), B, z[0], z[1],
                               z[2], z[3], loss, n.act);
}

// The seed design's mean gradient: batch_mean over the per-sample gradients of every tensor.
void launch_seed_means(const KernelSet& ks, const DeviceNet& n, unsigned B, float scale, CUstream s) {
    const Kernel& k = ks.get("batch_mean");
    for (size_t l = 0; l < n.W.size(); ++l) {
        const unsigned nw = static_cast<unsigned>(n.W[l].bytes() / 4), nb = static_cast<unsigned>(n.b[l].bytes() / 4);
        k.launch(grid_for(nw), 256, s, n.GW[l].ptr(), n.gW[l].ptr(), nw, B, scale);
        k.launch(grid_for(nb), 256, s, n.Gb[l].ptr(), n.gb[l].ptr(), nb, B, scale);
    }
}

// The buffers of a fused pass on batch X, T (outputs to Y); with a training config, also its
// recipe (loss code, gradient scale, optimizer) and fused_step's flat parameters and state.
FusedArgs fused_args(const DeviceNet& n, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, unsigned B,
                     const TrainConfig* cfg = nullptr) {
    FusedArgs a{X, T, n.W[0].ptr(), n.b[0].ptr(), n.W[1].ptr(), n.b[1].ptr(), n.acts[0].ptr(), Y, n.D2.ptr(), n.D1.ptr(),
                B, n.sizes[0], n.sizes[1], n.sizes[2]};
    a.Yp = n.Yp.ptr();
    a.sync = n.sync.ptr();
    a.P = n.params.ptr();
    if (cfg) {
        a.loss = loss_code(cfg->loss);
        a.scale = grad_scale(cfg->loss, B, n.sizes[2]);
        a.optim = cfg->optim;
        a.M = n.state1.ptr();
        a.V = n.state2.ptr();
        if (cfg->optim.kind == OptimKind::RmsProp) std::swap(a.M, a.V);  // its one buffer is its v
    }
    a.act = n.act;
    if (!n.GW.empty()) {
        a.GW1 = n.GW[0].ptr();
        a.Gb1 = n.Gb[0].ptr();
        a.GW2 = n.GW[1].ptr();
        a.Gb2 = n.Gb[1].ptr();
    }
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

// The mean loss over the rows of Y (loss_value of recipe.hpp), and the argmax predictions.
double batch_loss(Loss kind, const float* Y, const std::vector<uint8_t>& labels, size_t first, size_t B,
                  std::vector<uint8_t>* predictions = nullptr) {
    double loss = 0, y[kClasses], t[kClasses];
    for (size_t s = 0; s < B; ++s) {
        size_t best = 0;
        for (size_t o = 0; o < kClasses; ++o) {
            y[o] = Y[s * kClasses + o];
            t[o] = labels[first + s] == o ? 1.0 : 0.0;
            if (Y[s * kClasses + o] > Y[s * kClasses + best]) best = o;
        }
        loss += loss_value(kind, y, t, kClasses);
        if (predictions) predictions->push_back(static_cast<uint8_t>(best));
    }
    return loss / double(B);
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

    void enqueue(const KernelSet& ks, DeviceNet& net, CUstream s, Loss loss) {
        const unsigned n = static_cast<unsigned>(test_.count);
        if (uses_fused_forward(design_)) {
            FusedArgs a = fused_args(net, X_.ptr(), T_.ptr(), acts_.back().ptr(), n);
            a.A1 = acts_[0].ptr();
            a.D1 = D1_.ptr();
            a.D2 = D2_.ptr();
            a.loss = loss_code(loss);
            launch_hidden_forward(ks, a, design_, s);
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
            if (!graph_) graph_.emplace(s, [&] { enqueue(ks, net, s, loss); });
            graph_->launch(s);
        } else {
            enqueue(ks, net, s, loss);
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

// The first non-finite value one launch wrote (in data-flow order, so the first hit is where
// it started), and the largest finite magnitude seen.
std::string first_bad_write(const StepKernel& sk, const DeviceBuffer& Ylog, unsigned B, unsigned O, double& big) {
    std::string hit;
    for (size_t i = 0; i <= sk.writes.size() && hit.empty(); ++i) {
        if (i == sk.y_after && sk.y_offset)
            hit = first_non_finite("Y", Ylog, O, sk.y_offset - 1, size_t(B) * O, &big);
        if (hit.empty() && i < sk.writes.size())
            hit = first_non_finite(sk.writes[i].name, *sk.writes[i].buf, sk.writes[i].row_len, 0, 0, &big);
    }
    return hit;
}

// One training run: the data, the network and the kernels on the GPU, and the loop.
class Trainer {
public:
    Trainer(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;
    TrainResult run();

private:
    // An epoch's shuffle and step table, made on the host from the shuffle RNG's state. The
    // loop makes the next epoch's while the GPU runs the current epoch's last chunk.
    struct EpochPlan {
        unsigned epoch = 0;  // 0: none made
        uint64_t rng_before = 0, rng_after = 0;
        std::vector<uint32_t> order;
        std::vector<uint8_t> labels;
        std::vector<float> lr;
        std::vector<StepHyper> hyp;
    };
    // The device side of an epoch: its shuffle order, the images and targets in that order
    // (gathered on the GPU) and its per-step optimizer records. Two of them: while the GPU runs
    // epoch e from sets_[e % 2], the next epoch's is uploaded and gathered into the other on a
    // second stream, on the SMs the one-launch step leaves idle (it runs 8 clusters of 8 blocks).
    struct EpochSet {
        DeviceBuffer Xs, Ts, perm, hyp;
    };
    EpochPlan plan_epoch(unsigned epoch, uint64_t rng_state) const;
    void fill_set(EpochSet& set, const EpochPlan& p, CUstream s);
    void prepare_next_epoch(unsigned epoch);
    void start_epoch(unsigned epoch);
    const EpochSet& set() const { return sets_[cur_]; }
    std::vector<StepKernel> step_kernels(const KernelSet& ks, unsigned k);
    void enqueue_steps(unsigned a, unsigned b);
    void run_steps(unsigned a, unsigned b);
    const Graph& chunk_graph(unsigned a, unsigned b);  // of the current set
    void prepare_graphs(unsigned epoch, unsigned k);
    bool take_losses(unsigned k, unsigned end, unsigned epoch);
    void save_state(DeviceBuffer& to);
    void restore_state(const DeviceBuffer& from);
    struct BadWrite {
        std::string kernel, message;  // empty: every write stayed finite
        unsigned step = 0;            // epoch-local
    };
    BadWrite replay_until_non_finite(const KernelSet& ks, unsigned a, unsigned b);
    std::string diagnose_non_finite(unsigned a, unsigned b);
    void evaluate(unsigned epoch);
    void open_logs();
    void resume_from(const ResumeState& r);
    void record_end(unsigned epoch, unsigned k);
    unsigned next_stop(unsigned k) const;
    bool eval_point(unsigned end) const;

    const Context& ctx_;
    const Dataset& data_;
    const TrainConfig& cfg_;
    std::ostream& out_;
    const std::vector<unsigned>& sizes_;
    const Design design_;
    const unsigned B_, O_ = kClasses;
    const size_t N_, I_;
    const unsigned K_;      // steps per epoch; the last partial batch is dropped
    const unsigned chunk_;
    const bool one_launch_;
    const std::string step_entry_;  // one_launch_'s kernel: fused_step or tc_step
    const uint64_t total_steps_;
    KernelSet ks_;
    DeviceBuffer X_, T_, Ylog_;
    std::array<EpochSet, 2> sets_;
    unsigned cur_ = 0;       // the set the steps read: the epoch's number % 2
    unsigned prepped_ = 0;   // the epoch whose set the second stream is filling (0: none)
    Stream prep_stream_;     // uploads and gathers the next epoch's set
    Event ev_prepped_;       // recorded on prep_stream_ after them
    Evaluator evaluator_;
    DeviceNet net_;
    DeviceBuffer saved_;    // parameters and optimizer state at the start of the current chunk
    Stream stream_;
    CUstream s_;
    Rng shuffle_rng_;
    uint64_t epoch_rng_ = 0;  // shuffle_rng_'s state before the current epoch's shuffle
    ScheduleConfig schedule_;
    std::vector<uint32_t> order_;
    std::vector<uint8_t> labels_shuffled_;
    std::vector<float> Yhost_, lr_epoch_;
    std::vector<StepHyper> hyp_host_;  // the source of the epoch's hyp upload, kept until the next epoch
    EpochPlan next_;                   // the next epoch's plan, when made ahead
    std::future<EpochPlan> planning_;  // the next epoch's plan being made on a host thread
    std::map<std::tuple<unsigned, unsigned, unsigned>, Graph> graphs_;  // by (set, first step, end)
    Event ev_start_, ev_end_;  // around each chunk's steps
    std::ofstream csv_, steps_csv_;
    Progress bar_;
    TrainResult res_;
    double loss_sum_ = 0;
    unsigned loss_n_ = 0, step_ = 0;
    bool stop_ = false;
};

Trainer::Trainer(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out)
    : ctx_(ctx), data_(data), cfg_(cfg), out_(out), sizes_(cfg.layers), design_(cfg.kernels.design), B_(cfg.batch),
      N_(data.train.count), I_(data.train.dim()), K_(static_cast<unsigned>(N_ / B_)),
      chunk_(cfg.chunk ? cfg.chunk : (design_ == Design::Seed ? 8u : 128u)), one_launch_(uses_one_launch(cfg)),
      step_entry_(one_launch_entry(cfg)),
      total_steps_(uint64_t(cfg.epochs) * K_),
      ks_(cfg.kernels.source, ctx.info(), cfg.dirs, training_entries(cfg)),
      X_(N_ * I_ * 4, "training images"), T_(N_ * O_ * 4, "training targets"),
      Ylog_(size_t(K_) * B_ * O_ * 4, "outputs of every step of an epoch"),
      evaluator_(data.test, cfg.layers, design_),
      net_(init_params(cfg.layers, cfg.init, cfg.seed), cfg.batch, design_, cfg.optim.state_buffers(),
           one_launch_ && design_ == Design::Fused),
      s_(stream_.get()), shuffle_rng_(cfg.seed ^ 0x5eed5eed5eed5eedull), schedule_(cfg.schedule_for(K_)),
      order_(N_), labels_shuffled_(N_), Yhost_(size_t(chunk_) * B_ * O_), lr_epoch_(K_), bar_(cfg.progress) {
    static_assert(sizeof(StepHyper) == 16, "ptx/optim.ptx reads four floats a step");
    use_precision(ks_, cfg.kernels);  // tc-bf16: tc_forward and tc_grad_weights are the _bf16 twins
    res_.jit_ms = ks_.load_ms();
    for (const auto& [file, log] : ks_.logs())
        if (log.find("warning") != std::string::npos) fmt::print(stderr, "{}: {}\n", file, log);
    net_.act = act_code(cfg.activation);
    for (auto& st : sets_) {
        st.Xs = DeviceBuffer(N_ * I_ * 4, "shuffled training images");
        st.Ts = DeviceBuffer(N_ * O_ * 4, "shuffled training targets");
        st.perm = DeviceBuffer(N_ * 4, "shuffle order");
        st.hyp = DeviceBuffer(size_t(K_) * sizeof(StepHyper), "per-step learning rates and bias corrections of an epoch");
    }
    saved_ = DeviceBuffer(net_.count * 4 * net_.state().size(), "saved parameters and optimizer state");
    X_.upload(data.train.images);
    T_.upload(one_hot(data.train.labels));
    open_logs();
    if (cfg.resume) resume_from(*cfg.resume);
}

// The second stream may still be filling the next epoch's set (a run that stopped early):
// its buffers must outlive that work.
// So may the planning thread, which reads this Trainer.
Trainer::~Trainer() {
    if (planning_.valid()) planning_.wait();
    if (prepped_ && !device_hung()) driver().cuStreamSynchronize(prep_stream_.get());
}

// Continue a run: its parameters, optimizer state, step count, shuffle stream and bookkeeping.
// The network, the optimizer state's sizes and the position were checked against this run
// before the GPU was touched (TrainConfig::validate, which train() calls).
void Trainer::resume_from(const ResumeState& r) {
    const DeviceBuffer* st[2] = {&net_.state1, &net_.state2};
    const std::vector<float>* from[2] = {&r.state1, &r.state2};
    for (size_t l = 0; l < net_.W.size(); ++l) {
        net_.W[l].upload(r.model.W[l]);
        net_.b[l].upload(r.model.b[l]);
    }
    for (int i = 0; i < 2; ++i)
        if (!from[i]->empty()) const_cast<DeviceBuffer*>(st[i])->upload(*from[i]);
    step_ = static_cast<unsigned>(r.step);
    shuffle_rng_ = Rng(r.epoch_rng);
    res_.steps = step_;
    res_.reached = r.reached;
    res_.target_step = r.target_step;
    res_.train_ms = r.train_ms;
    res_.train_ms_to_target = r.train_ms_to_target;
}

// Where the run stands after step k of `epoch` (res_.end, for a checkpoint to resume from).
void Trainer::record_end(unsigned epoch, unsigned k) {
    ResumeState& e = res_.end;
    e.model = res_.model;
    if (net_.state1.bytes()) e.state1 = net_.state1.download_vector<float>();
    if (net_.state2.bytes()) e.state2 = net_.state2.download_vector<float>();
    e.step = step_;
    e.epoch = epoch;
    e.k = k;
    e.epoch_rng = epoch_rng_;
    e.reached = res_.reached;
    e.target_step = res_.target_step;
    e.train_ms = res_.train_ms;
    e.train_ms_to_target = res_.train_ms_to_target;
}

void Trainer::open_logs() {
    if (!cfg_.log_csv.empty()) {
        csv_.open(cfg_.log_csv);
        if (!csv_) PTXLAB_THROW(InputError, "--log: cannot write '{}'", cfg_.log_csv);
        csv_ << "step,epoch,train_loss,test_loss,test_accuracy,train_s,elapsed_s,lr\n";
    }
    if (!cfg_.log_steps_csv.empty()) {
        steps_csv_.open(cfg_.log_steps_csv);
        if (!steps_csv_) PTXLAB_THROW(InputError, "--log-steps: cannot write '{}'", cfg_.log_steps_csv);
        steps_csv_ << "step,epoch,loss,lr\n";
    }
}

// A new order for this epoch, applied on the GPU by the gather kernel, and the epoch's table
// of per-step optimizer values (recipe.hpp StepHyper) for the optimizer kernel.
Trainer::EpochPlan Trainer::plan_epoch(unsigned epoch, uint64_t rng_state) const {
    EpochPlan p;
    p.epoch = epoch;
    p.rng_before = rng_state;
    Rng rng(rng_state);
    p.order.resize(N_);
    for (uint32_t i = 0; i < N_; ++i) p.order[i] = i;
    rng.shuffle(p.order);
    p.rng_after = rng.state();
    p.labels.resize(N_);
    for (size_t i = 0; i < N_; ++i) p.labels[i] = data_.train.labels[p.order[i]];
    p.lr.resize(K_);
    p.hyp.resize(K_);
    for (unsigned k = 0; k < K_; ++k) {
        const uint64_t s = uint64_t(epoch - 1) * K_ + k;
        p.lr[k] = static_cast<float>(schedule_lr(schedule_, cfg_.lr, s, total_steps_));
        p.hyp[k] = step_hyper(cfg_.optim, p.lr[k], s + 1);
    }
    return p;
}

// The set's order and step records uploaded from the plan (whose vectors must live until the
// copies are done), then the gathers of the images and targets in that order, on stream s.
void Trainer::fill_set(EpochSet& st, const EpochPlan& p, CUstream s) {
    CU(cuMemcpyHtoDAsync, st.perm.ptr(), p.order.data(), N_ * 4, s);
    CU(cuMemcpyHtoDAsync, st.hyp.ptr(), p.hyp.data(), K_ * sizeof(StepHyper), s);
    const Kernel& gather = ks_.get("gather");
    gather.launch(grid_for(N_ * I_), 256, s, st.Xs.ptr(), X_.ptr(), st.perm.ptr(), unsigned(N_), unsigned(I_));
    gather.launch(grid_for(N_ * O_), 256, s, st.Ts.ptr(), T_.ptr(), st.perm.ptr(), unsigned(N_), O_);
}

// Called after each chunk's launch, while the GPU runs it: the next epoch's plan is made on
// a host thread (a shuffle of 60 000 takes about as long as a chunk of steps, so it must not hold
// up the loop), and once it is there its set is filled on the second stream (the other set: the
// current epoch's chunks read this one).
void Trainer::prepare_next_epoch(unsigned epoch) {
    if (epoch >= cfg_.epochs || prepped_ == epoch + 1) return;
    if (!planning_.valid()) {
        planning_ = std::async(std::launch::async,
                               [this, e = epoch + 1, st = shuffle_rng_.state()] { return plan_epoch(e, st); });
        return;
    }
    if (planning_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
    next_ = planning_.get();
    fill_set(sets_[(epoch + 1) % 2], next_, prep_stream_.get());
    ev_prepped_.record(prep_stream_.get());
    prepped_ = epoch + 1;
}

// The epoch's shuffle: the plan and set made ahead when they are this epoch's from this RNG
// state (the steps wait for the second stream's event), else the plan (waited for, or made now)
// filled on the training stream. No host wait: the copies' sources end up in members that
// outlive them (a vector keeps its buffer when it is moved or swapped).
void Trainer::start_epoch(unsigned epoch) {
    if (planning_.valid()) next_ = planning_.get();  // made, but its set not filled yet
    const bool planned = next_.epoch == epoch && next_.rng_before == shuffle_rng_.state();
    const bool filled = planned && prepped_ == epoch;
    EpochPlan p = planned ? std::move(next_) : plan_epoch(epoch, shuffle_rng_.state());
    next_ = EpochPlan{};
    prepped_ = 0;
    cur_ = epoch % 2;
    if (filled) CU(cuStreamWaitEvent, s_, ev_prepped_.get(), 0);
    else fill_set(sets_[cur_], p, s_);
    epoch_rng_ = p.rng_before;
    shuffle_rng_ = Rng(p.rng_after);
    order_.swap(p.order);
    labels_shuffled_.swap(p.labels);
    lr_epoch_.swap(p.lr);
    hyp_host_.swap(p.hyp);
}

// The launches of epoch-local step k with the kernels of `ks`, in order.
std::vector<StepKernel> Trainer::step_kernels(const KernelSet& ks, unsigned k) {
    const size_t first = size_t(k) * B_;
    const CUdeviceptr Xb = set().Xs.ptr() + first * I_ * 4, Tb = set().Ts.ptr() + first * O_ * 4;
    const size_t y_off = first * O_ * 4;
    const CUdeviceptr Yk = Ylog_.ptr() + y_off;
    DeviceNet& n = net_;
    std::vector<StepKernel::Write> params;
    for (size_t l = 0; l < n.W.size(); ++l) {
        params.push_back({n.W[l].name(), &n.W[l], sizes_[l]});
        params.push_back({n.b[l].name(), &n.b[l], 0});
    }
    std::vector<StepKernel> v;
    if (one_launch_) {  // the whole step in one launch
        FusedArgs a = fused_args(n, Xb, Tb, Yk, B_, &cfg_);
        a.hyp = set().hyp.ptr() + size_t(k) * sizeof(StepHyper);
        const Kernel& fs = ks.get(step_entry_);
        std::vector<StepKernel::Write> w = {{"A1", &n.acts[0], sizes_[1]}};
        w.insert(w.end(), params.begin(), params.end());
        v.push_back({step_entry_, [&fs, a](CUstream st) { launch_step_kernel(fs, a, st); }, w, y_off + 1, 1});
        return v;
    }
    const float scale = grad_scale(cfg_.loss, B_, O_);
    std::vector<StepKernel::Write> grads;
    for (size_t l = 0; l < n.GW.size(); ++l) {
        grads.push_back({n.GW[l].name(), &n.GW[l], sizes_[l]});
        grads.push_back({n.Gb[l].name(), &n.Gb[l], 0});
    }
    if (uses_fused_forward(design_)) {
        FusedArgs a = fused_args(n, Xb, Tb, Yk, B_, &cfg_);
        // Both 2-layer designs start with the same forward pass and deltas. Only the fused
        // set's kernels all wait with griddepcontrol, so only it may overlap its launches.
        a.overlap = design_ == Design::Fused && cfg_.overlap;
        const bool tc = design_ == Design::Tc;
        v.push_back({tc ? "tc_forward" : "fused_forward",
                     [&ks, a, d = design_](CUstream st) { launch_hidden_forward(ks, a, d, st); },
                     {{"A1", &n.acts[0], sizes_[1]}}, 0});
        v.push_back({"fused_output", [&ks, a](CUstream st) { launch_fused_output(ks, a, st); },
                     {{"D2", &n.D2, O_}, {"D1", &n.D1, sizes_[1]}}, y_off + 1});
        if (design_ == Design::Fused || tc) {
            v.push_back({tc ? "tc_grad_weights" : "fused_grad",
                         [&ks, a, tc](CUstream st) { tc ? launch_tc_grads(ks, a, st) : launch_fused_grad(ks, a, st); },
                         grads, 0});
        } else {
            // Fast: per-sample weight gradients by `outer`, then batch_mean over the batch (the
            // bias gradients are the deltas D1, D2).
            const CUdeviceptr gW1 = n.gW[0].ptr(), gW2 = n.gW[1].ptr();
            v.push_back({"outer", [&ks, a, gW1, gW2](CUstream st) { launch_fast_outer(ks, a, gW1, gW2, st); },
                         {{"gW1", &n.gW[0], sizes_[0]}, {"gW2", &n.gW[1], sizes_[1]}}, 0});
            v.push_back({"batch_mean", [&ks, a, gW1, gW2](CUstream st) { launch_fast_mean(ks, a, gW1, gW2, st); },
                         grads, 0});
        }
    } else {
        const unsigned code = loss_code(cfg_.loss);
        StepKernel g{sizes_.size() == 4 ? "grad3" : "grad2",
                     [&ks, &n, Xb, Tb, Yk, B = B_, code](CUstream st) { launch_grad(ks, n, Xb, Tb, Yk, B, code, st); },
                     {}, y_off + 1};
        for (size_t l = 0; l + 1 < n.acts.size(); ++l)
            g.writes.push_back({fmt::format("A{}", l + 1), &n.acts[l], sizes_[l + 1]});
        for (size_t l = 0; l < n.W.size(); ++l) {
            g.writes.push_back({fmt::format("gW{}", l + 1), &n.gW[l], sizes_[l]});
            g.writes.push_back({fmt::format("gb{}", l + 1), &n.gb[l], sizes_[l + 1]});
        }
        v.push_back(std::move(g));
        v.push_back({"batch_mean", [&ks, &n, B = B_, scale](CUstream st) { launch_seed_means(ks, n, B, scale, st); },
                     grads, 0});
    }
    const OptimConfig& o = cfg_.optim;
    const CUdeviceptr hyp = set().hyp.ptr() + size_t(k) * sizeof(StepHyper);
    // The state buffers in order: m (momentum, Adam), v (Adam); RMSprop's only buffer is its v.
    CUdeviceptr M = n.state1.ptr(), V = n.state2.ptr();
    if (o.kind == OptimKind::RmsProp) std::swap(M, V);
    v.push_back({optimizer_entry(o.kind),
                 [&ks, &n, o, hyp, M, V](CUstream st) {
                     launch_optimizer(ks, o, n.params.ptr(), n.grads.ptr(), M, V, hyp, static_cast<unsigned>(n.count),
                                      st);
                 },
                 params, 0});
    return v;
}

void Trainer::enqueue_steps(unsigned a, unsigned b) {
    if (one_launch_) {  // steps_per_launch steps a launch (0: all of them)
        const unsigned per = cfg_.steps_per_launch ? cfg_.steps_per_launch : b - a;
        const Kernel& fs = ks_.get(step_entry_);
        for (unsigned k = a; k < b; k += per) {
            const size_t first = size_t(k) * B_;
            FusedArgs fa = fused_args(net_, set().Xs.ptr() + first * I_ * 4, set().Ts.ptr() + first * O_ * 4,
                                      Ylog_.ptr() + first * O_ * 4, B_, &cfg_);
            fa.hyp = set().hyp.ptr() + size_t(k) * sizeof(StepHyper);
            fa.steps = std::min(per, b - k);
            launch_step_kernel(fs, fa, s_);
        }
        return;
    }
    for (unsigned k = a; k < b; ++k)
        for (const auto& sk : step_kernels(ks_, k)) sk.launch(s_);
}

void Trainer::save_state(DeviceBuffer& to) {
    size_t off = 0;
    for (const DeviceBuffer* b : net_.state()) {
        CU(cuMemcpyDtoDAsync, to.ptr() + off, b->ptr(), b->bytes(), s_);
        off += b->bytes();
    }
}

void Trainer::restore_state(const DeviceBuffer& from) {
    size_t off = 0;
    for (const DeviceBuffer* b : net_.state()) {
        CU(cuMemcpyDtoDAsync, b->ptr(), from.ptr() + off, b->bytes(), s_);
        off += b->bytes();
    }
}

// Steps [a, b) of the epoch, after a copy of the state they start from (for the NaN hunt),
// as a CUDA graph captured on first use and replayed after. In a graph, the copy is part of
// it (one submission, no host round trips between copy and steps) and so of the chunk's GPU time.
void Trainer::run_steps(unsigned a, unsigned b) {
    if (!cfg_.graphs || (graphs_.size() >= kMaxGraphs && !graphs_.count({cur_, a, b}))) {
        save_state(saved_);
        ev_start_.record(s_);
        enqueue_steps(a, b);
        ev_end_.record(s_);
        return;
    }
    const Graph& g = chunk_graph(a, b);
    ev_start_.record(s_);
    g.launch(s_);
    ev_end_.record(s_);
}

// The graph of steps [a, b): the state copy and the steps, captured on first use.
const Graph& Trainer::chunk_graph(unsigned a, unsigned b) {
    auto it = graphs_.find({cur_, a, b});
    if (it == graphs_.end()) {
        const auto enqueue = [&] {
            save_state(saved_);
            enqueue_steps(a, b);
        };
        it = graphs_.emplace(std::tuple{cur_, a, b}, Graph(s_, enqueue)).first;
    }
    return it->second;
}

// Before the clock starts, as the JIT does: capture and upload the graphs of the chunks the run
// will launch (from epoch-local step k of `epoch`, up to kPreparedGraphs of them), walking the
// same chunk boundaries as the loop. A graph captured inside the loop would count its capture
// (tens of microseconds a graph) as training time, once per distinct chunk.
void Trainer::prepare_graphs(unsigned epoch, unsigned k) {
    if (!cfg_.graphs) return;
    const auto t0 = Clock::now();
    const unsigned at = step_;
    for (; epoch <= cfg_.epochs && graphs_.size() < kPreparedGraphs; ++epoch, k = 0) {
        cur_ = epoch % 2;
        while (k < K_ && graphs_.size() < kPreparedGraphs && !(cfg_.max_steps && step_ >= cfg_.max_steps)) {
            const unsigned end = next_stop(k);
            if (!graphs_.count({cur_, k, end})) chunk_graph(k, end).upload(s_);
            step_ += end - k;
            k = end;
        }
        if (cfg_.max_steps && step_ >= cfg_.max_steps) break;
    }
    step_ = at;
    cur_ = 0;
    wait_for_stream(s_);
    res_.graph_ms = ms_since(t0);
}

// Replays steps [a, b) from the saved state one kernel at a time with `ks`, up to the first
// kernel that writes a non-finite value.
Trainer::BadWrite Trainer::replay_until_non_finite(const KernelSet& ks, unsigned a, unsigned b) {
    restore_state(saved_);
    for (unsigned k = a; k < b; ++k) {
        for (const auto& sk : step_kernels(ks, k)) {
            sk.launch(s_);
            wait_for_stream(s_);
            double big = 0;
            const std::string hit = first_bad_write(sk, Ylog_, B_, O_, big);
            if (hit.empty()) continue;
            return {sk.name,
                    fmt::format("kernel '{}' ({}) wrote a non-finite value in step {} of the epoch: {}{}", sk.name,
                                ks.get(sk.name).origin, k + 1, hit,
                                big > 0 ? fmt::format(" (finite values up to {:.3g})", big) : ""),
                    k};
        }
    }
    return {};
}

// After a non-finite loss in steps [a, b): replay them with the PTX kernels to find the first
// kernel that wrote a non-finite value, then the same steps from the same state with the NVRTC
// twins. Both non-finite: the recipe diverged; only the PTX: the kernel is at fault.
std::string Trainer::diagnose_non_finite(unsigned a, unsigned b) {
    const BadWrite ptx = replay_until_non_finite(ks_, a, b);
    if (ptx.kernel.empty())
        return "the loss became non-finite, but replaying the steps one kernel at a time did not reproduce it";
    const std::string advice = fmt::format("training diverged: try a lower --lr (now {}){}", cfg_.lr,
                                           cfg_.schedule.warmup > 0 ? "" : " or a warm-up (--warmup 0.1)");
    if (cfg_.kernels.source == KernelSource::Reference)
        return fmt::format("{}. These are the NVRTC twins, so {}", ptx.message, advice);
    DeviceBuffer after(saved_.bytes(), "state after the failing step");
    save_state(after);
    KernelSet twins(KernelSource::Reference, ctx_.info(), cfg_.dirs, training_entries(cfg_));
    use_precision(twins, cfg_.kernels);
    const BadWrite twin = replay_until_non_finite(twins, a, ptx.step + 1);
    restore_state(after);
    wait_for_stream(s_);
    if (!twin.kernel.empty())
        return fmt::format("{}. The NVRTC twins go non-finite too from the same state ({}), so the kernels are not "
                           "at fault: {}",
                           ptx.message, twin.message, advice);
    return fmt::format("{}. The NVRTC twins stay finite from the same state, so the PTX kernel is wrong: check it "
                       "with `ptxlab verify --kernel {}`",
                       ptx.message, ptx.kernel);
}

// The losses of steps [k, end), from the outputs they logged; false once training must stop.
bool Trainer::take_losses(unsigned k, unsigned end, unsigned epoch) {
    Ylog_.download(Yhost_.data(), size_t(end - k) * B_ * O_ * 4, size_t(k) * B_ * O_ * 4);
    for (unsigned j = k; j < end; ++j) {
        ++step_;
        const double loss = batch_loss(cfg_.loss, Yhost_.data() + size_t(j - k) * B_ * O_, labels_shuffled_,
                                       size_t(j) * B_, B_);
        res_.step_losses.push_back(loss);
        res_.steps = step_;
        if (steps_csv_) steps_csv_ << fmt::format("{},{},{:.9g},{:.9g}\n", step_, epoch, loss, lr_epoch_[j]);
        if (!std::isfinite(loss)) {
            bar_.clear();
            res_.diverged = true;
            res_.fault = diagnose_non_finite(k, j + 1);
            res_.stop_reason = fmt::format("the loss is {} at step {} (epoch {}): {}", loss, step_, epoch, res_.fault);
            return false;
        }
        loss_sum_ += loss;
        ++loss_n_;
    }
    return true;
}

void Trainer::evaluate(unsigned epoch) {
    bar_.clear();
    auto t0 = Clock::now();
    EvalResult e = evaluator_.run(ks_, net_, s_, cfg_.loss, cfg_.graphs);
    res_.eval_ms += ms_since(t0);
    const double lr = step_ ? lr_epoch_[(step_ - 1) % K_] : 0.0;
    EvalPoint p{step_, epoch, loss_n_ ? loss_sum_ / loss_n_ : 0.0, e.loss, e.accuracy, res_.train_ms / 1e3,
                (res_.train_ms + res_.eval_ms) / 1e3, lr};
    res_.curve.push_back(p);
    res_.accuracy = e.accuracy;
    fmt::print(out_, "epoch {:>2}  step {:>6}  train loss {:.5f}  test loss {:.5f}  test accuracy {:.2f} %\n", epoch,
               step_, p.train_loss, p.test_loss, 100.0 * e.accuracy);
    out_.flush();
    if (csv_) {
        csv_ << fmt::format("{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6g}\n", p.step, p.epoch, p.train_loss,
                            p.test_loss, p.accuracy, p.train_s, p.elapsed_s, p.lr);
        csv_.flush();
    }
    loss_sum_ = 0;
    loss_n_ = 0;
    if (e.accuracy >= cfg_.target && !res_.reached) {
        res_.reached = true;
        res_.target_step = step_;
        res_.train_ms_to_target = res_.train_ms;
        if (cfg_.stop_at_target) {
            stop_ = true;
            res_.stop_reason = fmt::format("reached the target {:.2f} % (--stop-at-target)", 100.0 * cfg_.target);
        }
    }
}

// Where the chunk that starts at epoch-local step k ends: a chunk boundary, an evaluation,
// the end of the epoch or --max-steps. Evaluations sit at the same steps every epoch, so the
// chunks' graphs are replayed, not captured again.
unsigned Trainer::next_stop(unsigned k) const {
    unsigned end = std::min(K_, (k / chunk_ + 1) * chunk_);
    if (cfg_.eval_every) {
        end = std::min(end, k + (cfg_.eval_every - step_ % cfg_.eval_every));
    } else {
        const unsigned E = std::min(cfg_.evals_per_epoch, K_);
        for (unsigned i = 1; i <= E; ++i) {
            const unsigned at = static_cast<unsigned>((uint64_t(K_) * i) / E);
            if (at > k) {
                end = std::min(end, at);
                break;
            }
        }
    }
    if (cfg_.max_steps) end = std::min(end, k + (cfg_.max_steps - step_));
    return end;
}

// Whether a chunk that ends at epoch-local step `end` ends at an evaluation: every
// --eval-every steps, or at the --evals-per-epoch evenly spaced steps (the last one ends the epoch).
bool Trainer::eval_point(unsigned end) const {
    if (cfg_.eval_every) return step_ % cfg_.eval_every == 0;
    const unsigned E = std::min(cfg_.evals_per_epoch, K_);
    for (unsigned i = 1; i <= E; ++i)
        if (static_cast<unsigned>((uint64_t(K_) * i) / E) == end) return true;
    return false;
}

TrainResult Trainer::run() {
    const unsigned first_epoch = cfg_.resume ? cfg_.resume->epoch : 1;
    unsigned epoch = first_epoch, k = cfg_.resume ? cfg_.resume->k : 0;
    prepare_graphs(epoch, k);
    for (; epoch <= cfg_.epochs && !stop_; ++epoch, k = 0) {
        auto t_epoch = Clock::now();
        start_epoch(epoch);
        double epoch_ms = ms_since(t_epoch);
        res_.train_ms += epoch_ms;
        res_.epochs = epoch;
        while (k < K_ && !stop_) {
            const unsigned end = next_stop(k);
            auto t0 = Clock::now();
            try {
                run_steps(k, end);
                prepare_next_epoch(epoch);  // while the GPU works
                wait_for_stream(s_);
            } catch (const TimeoutError&) {
                throw;
            } catch (const CudaError& e) {
                PTXLAB_THROW(Error, "training steps {}..{} failed on the GPU ({} kernels): {}", step_ + 1,
                             step_ + end - k, to_string(cfg_.kernels), e.what());
            }
            const double chunk_ms = ms_since(t0);
            res_.train_ms += chunk_ms;
            epoch_ms += chunk_ms;
            res_.chunk_gpu_ms.push_back(ev_end_.since(ev_start_));
            res_.chunk_steps.push_back(end - k);
            if (!take_losses(k, end, epoch)) {
                // The position after the failing step, where step_ stands: a checkpoint of a
                // diverged run holds a position that adds up (check_checkpoint_metadata).
                k = static_cast<unsigned>(step_ - uint64_t(epoch - 1) * K_);
                stop_ = true;
                break;
            }
            bar_.update(epoch, end, K_, loss_n_ ? loss_sum_ / loss_n_ : 0.0,
                        double(step_) * B_ / std::max(1e-9, res_.train_ms / 1e3));
            k = end;
            if (eval_point(end)) evaluate(epoch);
            if (g_stop_requested && !stop_) {
                stop_ = true;
                res_.interrupted = true;
                res_.stop_reason = fmt::format("interrupted after step {}", step_);
            }
            if (cfg_.max_steps && step_ >= cfg_.max_steps && !stop_) {
                stop_ = true;
                res_.stop_reason = fmt::format("stopped after {} steps (--max-steps)", step_);
            }
        }
        res_.epoch_ms.push_back(epoch_ms);
        if (stop_) break;
    }
    bar_.clear();
    // The final model is always evaluated (a run stopped between evaluations included).
    if (!res_.diverged && step_ > 0 && (res_.curve.empty() || res_.curve.back().step != step_)) evaluate(res_.epochs);
    if (res_.stop_reason.empty())
        res_.stop_reason = fmt::format("ran the whole schedule ({} epoch{})", cfg_.epochs, cfg_.epochs == 1 ? "" : "s");
    res_.model = net_.download();
    if (epoch > cfg_.epochs) record_end(cfg_.epochs, K_);  // the whole schedule ran
    else record_end(epoch, k);
    return res_;
}

}  // namespace

std::vector<std::string> training_entries(const TrainConfig& cfg) {
    const auto& sizes = cfg.layers;
    const bool three = sizes.size() == 4;
    std::vector<std::string> v;
    switch (cfg.kernels.design) {
        case Design::Fused:
            v = {"fused_forward", "fused_output", "fused_grad"};
            if (uses_one_launch(cfg)) v = {"fused_forward", "fused_output", "fused_step"};
            break;
        case Design::Fast: v = {"fused_forward", "fused_output", "outer", "batch_mean"}; break;
        case Design::Tc:
            v = {"tc_forward", "fused_output", "tc_grad_weights"};
            if (uses_one_launch(cfg)) v = {"tc_forward", "fused_output", "tc_step"};
            break;
        case Design::Seed: v = {three ? "forward3" : "forward2", three ? "grad3" : "grad2", "batch_mean"}; break;
    }
    if (!uses_one_launch(cfg)) v.push_back(optimizer_entry(cfg.optim.kind));
    v.push_back("gather");
    return with_precision(v, cfg.kernels);
}

std::vector<std::string> forward_entries(Design d, const std::vector<unsigned>& sizes) {
    if (d == Design::Tc) return {"tc_forward", "fused_output"};
    if (uses_fused_forward(d)) return {"fused_forward", "fused_output"};
    return {sizes.size() == 4 ? "forward3" : "forward2"};
}

EvalResult evaluate(const KernelSet& kernels, const NetParams& net, const Split& test, Loss loss, Activation act) {
    if (net.sizes.front() != test.dim())
        PTXLAB_THROW(InputError, "the model takes {} inputs but the images have {}x{} = {} pixels", net.sizes.front(),
                     test.rows, test.cols, test.dim());
    if (net.sizes.back() != kClasses)
        PTXLAB_THROW(InputError, "the model has {} outputs but the labels have {} classes", net.sizes.back(), kClasses);
    const auto loaded = [&kernels](const char* entry) {
        try {
            kernels.get(entry);
            return true;
        } catch (const Error&) {
            return false;
        }
    };
    // The set's forward kernels (forward_entries): Fast evaluates as Fused.
    Design d = Design::Seed;
    if (net.sizes.size() == 3 && loaded("tc_forward")) d = Design::Tc;
    else if (net.sizes.size() == 3 && loaded("fused_forward")) d = Design::Fused;
    if (d == Design::Tc && act != Activation::Relu)
        PTXLAB_THROW(InputError, "the tensor-core forward (tc_forward) runs ReLU hidden layers; this model's is {}",
                     to_string(act));
    DeviceNet dnet(net, 1, std::nullopt);
    dnet.act = act_code(act);
    Evaluator ev(test, net.sizes, d);
    Stream stream;
    return ev.run(kernels, dnet, stream.get(), loss, false);
}

TrainResult train(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out) {
    cfg.validate(data.train);
    Trainer t(ctx, data, cfg, out);
    return t.run();
}

}  // namespace ptxlab
