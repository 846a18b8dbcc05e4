// TrainConfig: the flags' ranges (validate_flags), the run against its data (validate,
// validate_resume), the schedule of an epoch, and the size lists --layers and --shape take.
#include "train.hpp"

#include "fused.hpp"
#include "tc.hpp"
#include "tcstep.hpp"

#include <cmath>

namespace ptxlab {

std::vector<unsigned> parse_sizes(const std::string& text, const std::string& flag, unsigned long long max,
                                  unsigned long long min) {
    std::vector<unsigned> v;
    size_t start = 0;
    while (true) {  // every item, an empty one before, between or after the commas included
        const size_t comma = text.find(',', start);
        const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        size_t used = 0;
        long long n = -1;
        try {
            n = std::stoll(item, &used);
        } catch (...) {
            used = 0;
        }
        if (used == 0 || used != item.size())
            PTXLAB_THROW(InputError, "{}: '{}' is not a whole number (in '{}')", flag, item, text);
        if (n < 0 || static_cast<unsigned long long>(n) < min || static_cast<unsigned long long>(n) > max)
            PTXLAB_THROW(InputError, "{}: {} is out of range ({} .. {})", flag, n, min, max);
        v.push_back(static_cast<unsigned>(n));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return v;
}

std::vector<unsigned> parse_layers(const std::string& text) {
    std::vector<unsigned> v = parse_sizes(text, "--layers", 1u << 20);
    if (v.size() < 3 || v.size() > kMaxLayers + 1)
        PTXLAB_THROW(InputError, "--layers: '{}' has {} sizes; give 3 to {}: the input, the hidden widths, the output "
                                 "(784,128,10 or 784,256,128,10)",
                     text, v.size(), kMaxLayers + 1);
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
        PTXLAB_THROW(InputError, "--target must be in (0, 1] (a fraction: 0.98 is 98 %), got {}", target);
    if (epochs == 0) PTXLAB_THROW(InputError, "--epochs must be at least 1");
    if (evals_per_epoch == 0) PTXLAB_THROW(InputError, "--evals-per-epoch must be at least 1");
    if (!(step_every_epochs >= 0) || !std::isfinite(step_every_epochs))
        PTXLAB_THROW(InputError, "--step-every must be a number of epochs >= 0, got {}", step_every_epochs);
    optim.validate();
    schedule_for(1).validate();
    if (model) return validate_model_flags();
    if (layers.size() != 3 && layers.size() != 4)
        PTXLAB_THROW(InputError, "the network needs 3 or 4 layer sizes, got {}", layers.size());
    for (auto w : layers)
        if (w == 0) PTXLAB_THROW(InputError, "layer widths must be at least 1 (--layers {})", layers_text(layers));
    if (uses_fused_forward(kernels.design) && layers.size() != 3)
        PTXLAB_THROW(InputError, "--kernels {} runs 2-layer networks (I,H,O); for --layers {} use --kernels tc or fused "
                                 "(the model trainer's dense kernels; tc the default) or ptx (the notebook's)",
                     to_string(kernels), layers_text(layers));
    if (kernels.design == Design::Tc) {
        if (activation != Activation::Relu)
            PTXLAB_THROW(InputError,
                         "--kernels {} runs ReLU hidden layers (tc_forward's epilogue); for --activation {} use "
                         "--kernels fused (or tc, which runs it on the model trainer's kernels)",
                         to_string(kernels), to_string(activation));
        for (const std::string& why : {tc_unfit(batch, layers[0], layers[1]),
                                       tc_grad_unfit("tc_grad_weights", batch, layers[0], layers[1])})
            if (!why.empty()) PTXLAB_THROW(InputError, "--kernels {}: {}", to_string(kernels), why);
    }
}

void TrainConfig::validate(const Split& train) const {
    validate_flags();
    if (batch > train.count)
        PTXLAB_THROW(InputError, "--batch {} is larger than the training set ({} samples)", batch, train.count);
    if (model) {
        if (model->layers.front().in.size() != train.dim())
            PTXLAB_THROW(InputError, "--model {} takes {} inputs but the images have {}x{} = {} pixels", model->text(),
                         model->layers.front().in.size(), train.rows, train.cols, train.dim());
        if (resume) validate_resume(train);
        return;
    }
    if (layers.front() != train.dim())
        PTXLAB_THROW(InputError, "the network takes {} inputs but the images have {}x{} = {} pixels (--layers {})",
                     layers.front(), train.rows, train.cols, train.dim(), layers_text(layers));
    if (layers.back() != kClasses)
        PTXLAB_THROW(InputError, "the network has {} outputs but the labels have {} classes (--layers {})",
                     layers.back(), kClasses, layers_text(layers));
    if (resume) validate_resume(train);
}

void TrainConfig::validate_resume(const Split& train) const {
    const ResumeState& r = *resume;
    size_t params = 0;
    if (model) {
        params = model->param_count;
        if (r.params.size() != params)
            PTXLAB_THROW(InputError, "--resume: the checkpoint holds {} parameters; --model {} has {}", r.params.size(),
                         model->text(), params);
    } else {
        if (r.model.sizes != layers)
            PTXLAB_THROW(InputError, "--resume: the checkpoint's network is {}, this run's {}",
                         layers_text(r.model.sizes), layers_text(layers));
        for (size_t l = 0; l + 1 < layers.size(); ++l) params += size_t(layers[l + 1]) * layers[l] + layers[l + 1];
    }
    const std::vector<float>* state[2] = {&r.state1, &r.state2};
    for (unsigned i = 0; i < 2; ++i) {
        const size_t need = i < optim.state_buffers() ? params : 0;
        if (state[i]->size() != need)
            PTXLAB_THROW(InputError, "--resume: the checkpoint holds {} floats of optimizer state {}; {} needs {}",
                         state[i]->size(), i + 1, optim.describe(), need);
    }
    // The position: k steps of epoch `epoch` done, K = N / B steps an epoch (the whole schedule
    // done is epoch `epochs`, step K of K).
    const unsigned K = static_cast<unsigned>(train.count / batch);
    if (r.epoch < 1 || r.epoch > epochs || r.k > K || r.step != uint64_t(r.epoch - 1) * K + r.k)
        PTXLAB_THROW(InputError, "--resume: the checkpoint's position (epoch {}, step {} of {}, {} steps done) does "
                                 "not fit {} epochs of {} steps ({} training samples in batches of {})",
                     r.epoch, r.k, K, r.step, epochs, K, train.count, batch);
}

ScheduleConfig TrainConfig::schedule_for(unsigned steps_per_epoch) const {
    ScheduleConfig c = schedule;
    if (c.kind == ScheduleKind::Step && c.step_every == 0) {
        const double e = step_every_epochs > 0 ? step_every_epochs : std::max(1.0, epochs / 3.0);
        c.step_every = std::max<uint64_t>(1, uint64_t(std::llround(e * steps_per_epoch)));
    }
    return c;
}

std::string format_ms(double ms) {
    if (!(ms >= 0) || !std::isfinite(ms)) return fmt::format("{} ms", ms);
    const char* f = ms >= 100 ? "{:.0f} ms" : ms >= 10 ? "{:.1f} ms" : ms >= 1 ? "{:.2f} ms" : "{:.3f} ms";
    return fmt::format(fmt::runtime(f), ms);
}

}  // namespace ptxlab
