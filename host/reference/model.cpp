// A model's layers and parameter layout (see model.hpp); the grammar, parse_model, is the layer
// table's (layers.cpp).
#include "model.hpp"

#include "error.hpp"

namespace ptxlab {

namespace {

size_t product(const std::vector<unsigned>& dims) {
    size_t n = dims.empty() ? 0 : 1;
    for (auto d : dims) n *= d;
    return n;
}

}  // namespace

size_t LayerSpec::weight_count() const { return product(weight_dims); }
size_t LayerSpec::bias_count() const { return product(bias_dims); }

bool Model::fc_only() const {
    for (const auto& l : layers)
        if (l.kind != LayerKind::Fc) return false;
    return true;
}

std::vector<unsigned> Model::fc_sizes() const {
    std::vector<unsigned> sizes = {static_cast<unsigned>(layers.empty() ? kMnistInput.size() : layers.front().in.size())};
    for (const auto& l : layers) sizes.push_back(l.width);
    return sizes;
}

std::string Model::text() const {
    std::string s;
    for (const auto& l : layers) s += (s.empty() ? "" : ",") + l.text();
    return s;
}

}  // namespace ptxlab
