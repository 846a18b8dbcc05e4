// train --save's checkpoints and train --resume's reading of them: the model, the optimizer's
// state and the position, with the flags a resumed run must share (train.hpp).
#include "train.hpp"

#include "optim.hpp"
#include "safetensors.hpp"

#include <charconv>
#include <cmath>
#include <map>

namespace ptxlab {

namespace {

// The flags a resumed run must share with the run that wrote the checkpoint.
// A --model's network as its checkpoint names it: the --layers sizes of fc-only models (whose
// checkpoints are the MLP's), else the layer list.
std::string network_text(const TrainConfig& cfg) {
    if (!cfg.model) return layers_text(cfg.layers);
    return uses_mlp_format(*cfg.model) ? layers_text(cfg.model->fc_sizes()) : cfg.model->text();
}

std::map<std::string, std::string> resume_fingerprint(const TrainConfig& cfg) {
    return {{"layers", network_text(cfg)},
            {"batch", std::to_string(cfg.batch)},
            {"lr", fmt::format("{}", cfg.lr)},
            {"epochs", std::to_string(cfg.epochs)},
            {"seed", std::to_string(cfg.seed)},
            {"init", to_string(cfg.init)},
            {"loss", to_string(cfg.loss)},
            {"activation", to_string(cfg.activation)},
            {"optimizer", cfg.optim.describe() + fmt::format(", weight decay {}", cfg.optim.weight_decay)},
            {"schedule", cfg.schedule_for(1).describe() + fmt::format(", step every {} epochs", cfg.step_every_epochs)}};
}

}  // namespace

void save_training_checkpoint(const std::string& path, const TrainConfig& cfg, const TrainResult& r,
                              const std::map<std::string, std::string>& metadata) {
    std::map<std::string, std::string> meta = metadata;
    for (const auto& [k, v] : resume_fingerprint(cfg)) meta["train." + k] = v;
    const ResumeState& e = r.end;
    meta["resume.step"] = std::to_string(e.step);
    meta["resume.epoch"] = std::to_string(e.epoch);
    meta["resume.k"] = std::to_string(e.k);
    meta["resume.epoch_rng"] = std::to_string(e.epoch_rng);
    meta["resume.reached"] = e.reached ? "1" : "0";
    meta["resume.target_step"] = std::to_string(e.target_step);
    meta["resume.train_ms"] = fmt::format("{:.17g}", e.train_ms);
    meta["resume.train_ms_to_target"] = fmt::format("{:.17g}", e.train_ms_to_target);
    ExtraTensors extra;
    if (!e.state1.empty()) extra["optimizer.state1"] = e.state1;
    if (!e.state2.empty()) extra["optimizer.state2"] = e.state2;
    // A bn layer's num_batches_tracked: the training steps taken (every step's forward pass counts one).
    if (cfg.model) save_model_safetensors(path, *cfg.model, r.params, meta, extra, e.buffers, int64_t(e.step));
    else save_safetensors(path, r.model, meta, extra);
}

namespace {

// The resume.* entries train --save writes (save_training_checkpoint).
constexpr const char* kResumeKeys[] = {"resume.step",         "resume.epoch",       "resume.k",
                                       "resume.epoch_rng",    "resume.reached",     "resume.target_step",
                                       "resume.train_ms",     "resume.train_ms_to_target"};

// The optimizer a "train.optimizer" entry names: its first word ("nesterov (momentum 0.9), ...").
OptimKind optimizer_named(const std::string& path, const std::string& text) {
    const std::string word = text.substr(0, text.find_first_of(" ,("));
    try {
        return parse_optimizer(word);
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{}: its metadata 'train.optimizer' is '{}', which names no optimizer ({})", path,
                     text, e.what());
    }
}

// The optimizer's state against the optimizer a checkpoint's "train.optimizer" names.
void check_optimizer_state(const std::string& path, const std::string& optimizer, const ExtraTensors& extra,
                           size_t param_count) {
    // The optimizer's state: optimizer.state1 (m, or RMSprop's v) and optimizer.state2 (Adam's v),
    // each in the parameters' flat layout; nothing else named optimizer.*.
    const OptimKind kind = optimizer_named(path, optimizer);
    const unsigned buffers = unsigned(optim_uses_m(kind)) + unsigned(optim_uses_v(kind));
    for (unsigned i = 1; i <= buffers; ++i) {
        const std::string name = fmt::format("optimizer.state{}", i);
        auto it = extra.find(name);
        if (it == extra.end())
            PTXLAB_THROW(InputError, "{}: its optimizer {} keeps {} state buffer{} of {} floats, but it has no "
                                     "tensor '{}'",
                         path, to_string(kind), buffers, buffers == 1 ? "" : "s", param_count, name);
        if (it->second.size() != param_count)
            PTXLAB_THROW(InputError, "{}: tensor '{}' holds {} floats; its optimizer {} keeps one per parameter, {}",
                         path, name, it->second.size(), to_string(kind), param_count);
    }
    for (const auto& [name, v] : extra) {
        const bool kept = (name == "optimizer.state1" && buffers >= 1) || (name == "optimizer.state2" && buffers >= 2);
        if (!kept)
            PTXLAB_THROW(InputError, "{}: tensor '{}' is not a state buffer of its optimizer {} (which keeps {})",
                         path, name, to_string(kind), buffers);
    }
}

}  // namespace

std::optional<ResumeState> check_checkpoint_metadata(const std::string& path,
                                                     const std::map<std::string, std::string>& metadata,
                                                     const ExtraTensors& extra, const std::string& network,
                                                     size_t param_count) {
    auto find = [&](const std::string& key) -> const std::string* {
        auto it = metadata.find(key);
        return it == metadata.end() ? nullptr : &it->second;
    };
    if (const std::string* layers = find("train.layers"); layers && *layers != network)
        PTXLAB_THROW(InputError, "{}: its metadata 'train.layers' is '{}' but its tensors hold the network {}", path,
                     *layers, network);

    if (const std::string* optimizer = find("train.optimizer")) check_optimizer_state(path, *optimizer, extra, param_count);
    bool any = false;
    for (const char* key : kResumeKeys) any = any || find(key);
    if (!any) return std::nullopt;
    for (const char* key : kResumeKeys)
        if (!find(key))
            PTXLAB_THROW(InputError, "{}: its metadata has no '{}' (a train --save checkpoint has every resume.* entry)",
                         path, key);
    for (const char* key : {"train.optimizer", "train.epochs"})
        if (!find(key))
            PTXLAB_THROW(InputError, "{}: its metadata has resume.* entries but no '{}'", path, key);
    // A whole number in [0, max], or a time in ms (finite, >= 0).
    auto number = [&](const std::string& key, uint64_t max) {
        const std::string& t = *find(key);
        uint64_t v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (t.empty() || p != t.data() + t.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
            PTXLAB_THROW(InputError, "{}: its metadata '{}' is '{}', not a whole number", path, key, t);
        if (ec != std::errc() || v > max) PTXLAB_THROW(InputError, "{}: its metadata '{}' is {}, past {}", path, key, t, max);
        return v;
    };
    auto time_ms = [&](const std::string& key) {
        const std::string& t = *find(key);
        double v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || p != t.data() + t.size() || !std::isfinite(v) || v < 0)
            PTXLAB_THROW(InputError, "{}: its metadata '{}' is '{}', not a time in ms (a finite number >= 0)", path, key,
                         t);
        return v;
    };
    ResumeState r;
    // Step counts are unsigned in the trainer.
    r.step = number("resume.step", UINT32_MAX);
    r.epoch = static_cast<unsigned>(number("resume.epoch", UINT32_MAX));
    r.k = static_cast<unsigned>(number("resume.k", UINT32_MAX));
    r.epoch_rng = number("resume.epoch_rng", UINT64_MAX);
    r.reached = number("resume.reached", 1) != 0;
    r.target_step = static_cast<unsigned>(number("resume.target_step", UINT32_MAX));
    r.train_ms = time_ms("resume.train_ms");
    r.train_ms_to_target = time_ms("resume.train_ms_to_target");

    const uint64_t epochs = number("train.epochs", UINT32_MAX);
    if (r.epoch < 1 || r.epoch > epochs)
        PTXLAB_THROW(InputError, "{}: its metadata 'resume.epoch' is {}, outside the {} epoch{} of its schedule "
                                 "('train.epochs')",
                     path, r.epoch, epochs, epochs == 1 ? "" : "s");
    // After k steps of epoch e a run has done (e - 1) * K + k steps, K >= k the steps an epoch.
    const bool adds_up = r.epoch == 1 ? r.step == r.k
                                      : r.step > r.k && (r.step - r.k) % (r.epoch - 1) == 0 &&
                                            (r.step - r.k) / (r.epoch - 1) >= r.k;
    if (!adds_up)
        PTXLAB_THROW(InputError, "{}: its position does not add up: {} steps done ('resume.step') at step {} of epoch {} "
                                 "('resume.k', 'resume.epoch'); a run has then done (epoch - 1) x (its steps an epoch, "
                                 "at least k) + k",
                     path, r.step, r.k, r.epoch);
    if (r.reached ? r.target_step > r.step || r.train_ms_to_target > r.train_ms
                  : r.target_step != 0 || r.train_ms_to_target != 0)
        PTXLAB_THROW(InputError, "{}: its target entries do not add up: reached {}, at step {} after {} ms of training "
                                 "('resume.reached', 'resume.target_step', 'resume.train_ms_to_target'), {} steps and "
                                 "{} ms done",
                     path, r.reached ? 1 : 0, r.target_step, r.train_ms_to_target, r.step, r.train_ms);
    return r;
}

std::optional<ResumeState> check_checkpoint_metadata(const std::string& path, const ModelCheckpoint& ck) {
    return check_checkpoint_metadata(path, ck.metadata, ck.extra,
                              uses_mlp_format(ck.model) ? layers_text(ck.model.fc_sizes()) : ck.model.text(),
                              ck.params.size());
}

ResumeState load_training_checkpoint(const std::string& path, const TrainConfig& cfg) {
    // A --model run's checkpoint holds its flat parameters (model.hpp's layout), an MLP run's its W and b.
    Checkpoint ck;
    ModelCheckpoint mck;
    std::optional<ResumeState> position;
    // First the file against itself, then against this run.
    if (cfg.model) {
        mck = load_model_checkpoint(path);
        position = check_checkpoint_metadata(path, mck);
        ck.metadata = std::move(mck.metadata);
        ck.extra = std::move(mck.extra);
    } else {
        ck = load_checkpoint(path);
        size_t params = 0;
        for (size_t l = 0; l < ck.net.layers(); ++l) params += ck.net.W[l].size() + ck.net.b[l].size();
        position = check_checkpoint_metadata(path, ck.metadata, ck.extra, layers_text(ck.net.sizes), params);
    }
    auto get = [&](const std::string& key) -> const std::string& {
        auto it = ck.metadata.find(key);
        if (it == ck.metadata.end())
            PTXLAB_THROW(InputError, "--resume: {} has no '{}' entry: it was not written by ptxlab train --save", path,
                         key);
        return it->second;
    };
    for (const auto& [k, v] : resume_fingerprint(cfg)) {
        // Checkpoints from before --activation have no entry: they were trained with ReLU.
        const bool old = k == "activation" && !ck.metadata.count("train.activation");
        const std::string& was = old ? to_string(Activation::Relu) : get("train." + k);
        if (was != v)
            PTXLAB_THROW(InputError, "--resume: {} was trained with {} {}, this run asks for {} {} (give the same "
                                     "flags as the run that wrote it)",
                         path, k, was, k, v);
    }
    if (!position)
        PTXLAB_THROW(InputError, "--resume: {} has no 'resume.step' entry: it was not written by ptxlab train --save",
                     path);
    ResumeState r = std::move(*position);
    r.model = std::move(ck.net);
    r.params = std::move(mck.params);
    if (cfg.model && cfg.model->has_buffers() && mck.batches_tracked != int64_t(r.step))
        PTXLAB_THROW(InputError, "--resume: {} counts {} steps in its bn layers' num_batches_tracked but {} in "
                                 "'resume.step'; a train --save checkpoint has them equal",
                     path, mck.batches_tracked, r.step);
    r.buffers = std::move(mck.buffers);
    if (auto it = ck.extra.find("optimizer.state1"); it != ck.extra.end()) r.state1 = std::move(it->second);
    if (auto it = ck.extra.find("optimizer.state2"); it != ck.extra.end()) r.state2 = std::move(it->second);
    return r;
}

}  // namespace ptxlab
