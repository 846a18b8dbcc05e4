// The one training loop (every network, every kernel set): epochs of CUDA-graph chunks over a
// step program (step_program.hpp: the MLP's kernel sets, mlp_program.cpp, or a --model's
// layer-by-layer step, train_cnn.cpp), evaluation, logs, interrupt and resume, divergence
// diagnosis and the run's end state; the configuration's checks are in train_config.cpp, the
// checkpoints in checkpoint.cpp.
#include "train.hpp"

#include "optim.hpp"
#include "rng.hpp"
#include "progress.hpp"
#include "step_program.hpp"

#include <fmt/ostream.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <tuple>

namespace ptxlab {

std::atomic<bool> g_stop_requested{false};

std::vector<float> one_hot(const std::vector<uint8_t>& labels) {
    std::vector<float> t(labels.size() * kClasses, 0.0f);
    for (size_t i = 0; i < labels.size(); ++i) t[i * kClasses + labels[i]] = 1.0f;
    return t;
}

// The mean loss over the rows of Y (loss_value of recipe.hpp), and the argmax predictions.
double batch_loss(Loss kind, const float* Y, const std::vector<uint8_t>& labels, size_t first, size_t B,
                  std::vector<uint8_t>* predictions) {
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

StepIO StepIO::next(unsigned steps) const {
    StepIO n = *this;
    const size_t rows = size_t(steps) * B;
    n.X += rows * I * 4;
    n.T += rows * kClasses * 4;
    n.Y += rows * kClasses * 4;
    n.y_offset += rows * kClasses * 4;
    n.hyp += size_t(steps) * sizeof(StepHyper);
    return n;
}

void StepProgram::enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) {
    for (unsigned j = 0; j < steps; ++j)
        for (const StepKernel& sk : step_kernels(ks, first.next(j))) sk.launch(s);
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// CUDA graphs of chunks kept at most (past that, chunks launch without one), and how many of
// them are captured before the clock starts.
constexpr size_t kMaxGraphs = 512, kPreparedGraphs = 256;

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
    StepIO io(unsigned k) const;
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
    std::string first_non_finite_parameter() const;
    bool parameters_finite(unsigned a, unsigned b, unsigned epoch);
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
    const unsigned B_, O_ = kClasses;
    const size_t N_, I_;
    const unsigned K_;      // steps per epoch; the last partial batch is dropped
    const uint64_t total_steps_;
    KernelSet ks_;
    std::unique_ptr<StepProgram> prog_;  // the network on the GPU and its steps
    const unsigned chunk_;
    DeviceBuffer X_, T_, Ylog_;
    std::array<EpochSet, 2> sets_;
    unsigned cur_ = 0;       // the set the steps read: the epoch's number % 2
    unsigned prepped_ = 0;   // the epoch whose set the second stream is filling (0: none)
    Stream prep_stream_;     // uploads and gathers the next epoch's set
    Event ev_prepped_;       // recorded on prep_stream_ after them
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
    : ctx_(ctx), data_(data), cfg_(cfg), out_(out), B_(cfg.batch), N_(data.train.count), I_(data.train.dim()),
      K_(static_cast<unsigned>(N_ / B_)), total_steps_(uint64_t(cfg.epochs) * K_),
      ks_(cfg.kernels.source, ctx.info(), cfg.dirs, training_entries(cfg)),
      prog_(cfg.model ? make_model_program(cfg, data.test) : make_mlp_program(cfg, data.test)),
      chunk_(cfg.chunk ? cfg.chunk : prog_->default_chunk()), X_(N_ * I_ * 4, "training images"),
      T_(N_ * O_ * 4, "training targets"), Ylog_(size_t(K_) * B_ * O_ * 4, "outputs of every step of an epoch"),
      s_(stream_.get()), shuffle_rng_(cfg.seed ^ 0x5eed5eed5eed5eedull), schedule_(cfg.schedule_for(K_)),
      order_(N_), labels_shuffled_(N_), Yhost_(size_t(chunk_) * B_ * O_), lr_epoch_(K_), bar_(cfg.progress) {
    static_assert(sizeof(StepHyper) == 16, "ptx/optim.ptx reads four floats a step");
    use_precision(ks_, cfg.kernels);  // tc-bf16: tc_forward and tc_grad_weights are the _bf16 twins
    res_.jit_ms = ks_.load_ms();
    for (const auto& [file, log] : ks_.logs())
        if (log.find("warning") != std::string::npos) fmt::print(stderr, "{}: {}\n", file, log);
    for (auto& st : sets_) {
        st.Xs = DeviceBuffer(N_ * I_ * 4, "shuffled training images");
        st.Ts = DeviceBuffer(N_ * O_ * 4, "shuffled training targets");
        st.perm = DeviceBuffer(N_ * 4, "shuffle order");
        st.hyp = DeviceBuffer(size_t(K_) * sizeof(StepHyper), "per-step learning rates and bias corrections of an epoch");
    }
    size_t state_bytes = 0;
    for (const DeviceBuffer* b : prog_->state()) state_bytes += b->bytes();
    saved_ = DeviceBuffer(state_bytes, "saved parameters and optimizer state");
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
    prog_->load(r);
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
    prog_->store(e);
    res_.model = e.model;
    res_.params = e.params;
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
        const double lr = schedule_lr(schedule_, cfg_.lr, s, total_steps_);
        p.lr[k] = static_cast<float>(lr);
        p.hyp[k] = step_hyper(cfg_.optim, prog_->float_lr() ? double(p.lr[k]) : lr, s + 1);
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

// Where epoch-local step k reads and writes (in the current epoch's set and the Y log).
StepIO Trainer::io(unsigned k) const {
    const size_t first = size_t(k) * B_;
    return {set().Xs.ptr() + first * I_ * 4, set().Ts.ptr() + first * O_ * 4, Ylog_.ptr() + first * O_ * 4,
            set().hyp.ptr() + size_t(k) * sizeof(StepHyper), first * O_ * 4, B_, unsigned(I_)};
}

void Trainer::enqueue_steps(unsigned a, unsigned b) { prog_->enqueue_steps(ks_, io(a), b - a, s_); }

void Trainer::save_state(DeviceBuffer& to) {
    size_t off = 0;
    for (const DeviceBuffer* b : prog_->state()) {
        CU(cuMemcpyDtoDAsync, to.ptr() + off, b->ptr(), b->bytes(), s_);
        off += b->bytes();
    }
}

void Trainer::restore_state(const DeviceBuffer& from) {
    size_t off = 0;
    for (const DeviceBuffer* b : prog_->state()) {
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
        prog_->prepare_steps(ks_, io(a), b - a);  // uploads, outside the capture
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
        for (const auto& sk : prog_->step_kernels(ks, io(k))) {
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
    // The twins' entries as a run on them would load them (a twin file missing leaves its entry
    // out, fc3_step_absent, and the program then replays those steps on its other kernels).
    TrainConfig twin_cfg = cfg_;
    twin_cfg.kernels.source = KernelSource::Reference;
    KernelSet twins(KernelSource::Reference, ctx_.info(), cfg_.dirs, training_entries(twin_cfg));
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

// The first non-finite parameter ("fc1.weight[3][17] = nan"), or empty.
std::string Trainer::first_non_finite_parameter() const {
    for (const StepKernel::Write& w : prog_->parameters())
        if (std::string hit = first_non_finite(w.name, *w.buf, w.row_len); !hit.empty()) return hit;
    return {};
}

// Before an evaluation: the parameters may hold a NaN although every loss stayed finite, when a
// ReLU (max.f32, which returns its other operand for a NaN) kept it from the layers above. Then
// the run stops as diverged, and steps [a, b) are replayed as for a non-finite loss when the
// parameters were finite at a; false when training must stop.
bool Trainer::parameters_finite(unsigned a, unsigned b, unsigned epoch) {
    const std::string hit = first_non_finite_parameter();
    if (hit.empty()) return true;
    bar_.clear();
    res_.diverged = true;
    stop_ = true;
    DeviceBuffer after(saved_.bytes(), "state after the chunk");
    save_state(after);
    restore_state(saved_);
    wait_for_stream(s_);
    const std::string before = first_non_finite_parameter();
    restore_state(after);
    wait_for_stream(s_);
    res_.fault = before.empty() ? diagnose_non_finite(a, b)
                                : fmt::format("it was there before step {} of the epoch already ({}): evaluate more "
                                              "often (--eval-every 1) to find the step",
                                              a + 1, before);
    res_.stop_reason = fmt::format("a parameter is non-finite after step {} (epoch {}), though every loss was finite "
                                   "(a ReLU turns NaN into 0): {}: {}",
                                   step_, epoch, hit, res_.fault);
    return false;
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
    EvalResult e = prog_->evaluate(ks_, s_, cfg_.loss, cfg_.graphs);
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
            if (cfg_.between_chunks) cfg_.between_chunks();
            if (!take_losses(k, end, epoch)) {
                // The position after the failing step, where step_ stands: a checkpoint of a
                // diverged run holds a position that adds up (check_checkpoint_metadata).
                k = static_cast<unsigned>(step_ - uint64_t(epoch - 1) * K_);
                stop_ = true;
                break;
            }
            bar_.update(epoch, end, K_, loss_n_ ? loss_sum_ / loss_n_ : 0.0,
                        double(step_) * B_ / std::max(1e-9, res_.train_ms / 1e3));
            const unsigned k0 = k;
            k = end;
            if (eval_point(end) && !parameters_finite(k0, end, epoch)) break;
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
    if (epoch > cfg_.epochs) record_end(cfg_.epochs, K_);  // the whole schedule ran
    else record_end(epoch, k);
    return res_;
}

}  // namespace

TrainResult train(const Context& ctx, const Dataset& data, const TrainConfig& cfg, std::ostream& out) {
    cfg.validate(data.train);
    Trainer t(ctx, data, cfg, out);
    return t.run();
}

}  // namespace ptxlab
