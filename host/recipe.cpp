#include "recipe.hpp"

#include "error.hpp"
#include "rng.hpp"

#include <cmath>

namespace ptxlab {

// ---- Initialisation -----------------------------------------------------------------

Init parse_init(const std::string& name) {
    if (name == "torch") return Init::Torch;
    if (name == "he-uniform") return Init::HeUniform;
    if (name == "he-normal") return Init::HeNormal;
    if (name == "xavier") return Init::Xavier;
    if (name == "notebook") return Init::Notebook;
    PTXLAB_THROW(InputError, "unknown init '{}' (choose torch, he-uniform, he-normal, xavier or notebook)", name);
}

std::string to_string(Init i) {
    switch (i) {
        case Init::Torch: return "torch";
        case Init::HeUniform: return "he-uniform";
        case Init::HeNormal: return "he-normal";
        case Init::Xavier: return "xavier";
        case Init::Notebook: return "notebook";
    }
    return "?";
}

std::string describe(Init i) {
    switch (i) {
        case Init::Torch: return "U(+-1/sqrt(fan_in)) weights and biases (nn.Linear's default)";
        case Init::HeUniform: return "He-uniform weights U(+-sqrt(6/fan_in)), zero biases";
        case Init::HeNormal: return "He-normal weights N(0, 2/fan_in), zero biases";
        case Init::Xavier: return "Xavier-uniform weights U(+-sqrt(6/(fan_in+fan_out))), zero biases";
        case Init::Notebook: return "N(0, 0.01^2) weights and biases (the notebook's)";
    }
    return "?";
}

NetParams init_params(const std::vector<unsigned>& sizes, Init init, uint64_t seed) {
    Rng rng(seed);
    NetParams net;
    net.sizes = sizes;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        const size_t rows = sizes[l + 1], cols = sizes[l];
        std::vector<float> W(rows * cols), b(rows, 0.0f);
        switch (init) {
            case Init::Torch: {
                const float bound = static_cast<float>(1.0 / std::sqrt(double(cols)));
                for (auto& w : W) w = rng.uniform(-bound, bound);
                for (auto& x : b) x = rng.uniform(-bound, bound);
                break;
            }
            case Init::HeUniform: {
                const float bound = std::sqrt(6.0f / float(cols));
                for (auto& w : W) w = rng.uniform(-bound, bound);
                break;
            }
            case Init::HeNormal: {
                const double sd = std::sqrt(2.0 / double(cols));
                for (auto& w : W) w = static_cast<float>(sd * rng.normal());
                break;
            }
            case Init::Xavier: {
                const float bound = static_cast<float>(std::sqrt(6.0 / double(cols + rows)));
                for (auto& w : W) w = rng.uniform(-bound, bound);
                break;
            }
            case Init::Notebook:
                for (auto& w : W) w = static_cast<float>(0.01 * rng.normal());
                for (auto& x : b) x = static_cast<float>(0.01 * rng.normal());
                break;
        }
        net.W.push_back(std::move(W));
        net.b.push_back(std::move(b));
    }
    return net;
}

// ---- Loss ----------------------------------------------------------------------------

Loss parse_loss(const std::string& name) {
    if (name == "ce") return Loss::Ce;
    if (name == "mse") return Loss::Mse;
    if (name == "half-sse") return Loss::HalfSse;
    PTXLAB_THROW(InputError, "unknown loss '{}' (choose ce, mse or half-sse)", name);
}

std::string to_string(Loss l) {
    switch (l) {
        case Loss::Ce: return "ce";
        case Loss::Mse: return "mse";
        case Loss::HalfSse: return "half-sse";
    }
    return "?";
}

unsigned loss_code(Loss l) { return l == Loss::Ce ? kLossSoftmax : kLossDiff; }

float grad_scale(Loss l, unsigned B, unsigned O) {
    return static_cast<float>(l == Loss::Mse ? 2.0 / (double(O) * double(B)) : 1.0 / double(B));
}

}  // namespace ptxlab
