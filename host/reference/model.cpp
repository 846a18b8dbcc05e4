// The --model grammar and the parameter layout (see model.hpp).
#include "model.hpp"

#include "error.hpp"
#include "layers.hpp"

#include <string_view>

namespace ptxlab {

namespace {

size_t product(const std::vector<unsigned>& dims) {
    size_t n = dims.empty() ? 0 : 1;
    for (auto d : dims) n *= d;
    return n;
}

// One item of the list, without its shapes: its row's kind, and its width and kernel size.
LayerSpec parse_item(const LayerItem& it) {
    LayerSpec l;
    if (it.item.empty())
        PTXLAB_THROW(InputError, "--model '{}': layer {} is empty (a comma too many at the {}?)", it.spec, it.index,
                     it.index == 1 ? "start" : "end or in the middle");
    const LayerRow* row = layer_row_of(it.item);
    if (!row || (!row->parse && it.item != row->token))
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' is not a layer ({})", it.spec, it.index, it.item,
                     model_grammar());
    l.kind = row->kind();
    if (row->parse) row->parse(it, std::string_view(row->token).size(), l);
    return l;
}

}  // namespace

size_t LayerSpec::weight_count() const { return product(weight_dims); }
size_t LayerSpec::bias_count() const { return product(bias_dims); }

std::string LayerSpec::text() const { return layer_row(kind).text(*this); }

std::vector<float> Model::initial_buffers() const {
    std::vector<float> b(buffer_count, 0.0f);
    for (const auto& l : layers)
        if (const LayerRow& row = layer_row(l.kind); row.init_buffers) row.init_buffers(l, b.data() + l.buffer_offset);
    return b;
}

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

std::string Model::shapes_text() const {
    auto shape = [](Shape3 s) { return fmt::format("{}x{}x{}", s.c, s.h, s.w); };
    std::string s = layers.empty() ? "" : shape(layers.front().in);
    for (const auto& l : layers) s += fmt::format(" -{}-> {}", l.text(), l.out.h == 1 && l.out.w == 1 && !layer_row(l.kind).spatial ? std::to_string(l.out.c) : shape(l.out));
    return s;
}

Model parse_model(const std::string& spec_in, Shape3 input) {
    if (spec_in.empty())
        PTXLAB_THROW(InputError, "--model is empty: give a layer list ({})", model_grammar());
    const std::string spec = spec_in == "cnn" ? "conv32,pool,conv64,pool,fc128,fc10" : spec_in;
    Model m;
    size_t start = 0, offset = 0;
    Shape3 shape = input;
    bool seen_fc = false;
    for (size_t index = 1;; ++index) {
        const size_t comma = spec.find(',', start);
        const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (item == "cnn")
            PTXLAB_THROW(InputError, "--model '{}': layer {} 'cnn' names a whole model: give it alone (--model cnn)",
                         spec, index);
        const LayerItem it{spec, index, item};
        LayerSpec l = parse_item(it);
        const LayerRow& row = layer_row(l.kind);
        if (seen_fc && !row.after_fc)
            PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' comes after an fc layer: conv and pool layers come "
                                     "before the first fc (which flattens)",
                         spec, index, item);
        if (row.check_place) row.check_place(it, m, comma == std::string::npos);
        seen_fc = seen_fc || l.kind == LayerKind::Fc;
        l.in = shape;
        row.place(it, l);
        l.weight_offset = offset;
        offset += l.weight_count();
        l.bias_offset = offset;
        offset += l.bias_count();
        shape = l.out;
        m.layers.push_back(std::move(l));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    const LayerSpec& last = m.layers.back();
    if (last.kind != LayerKind::Fc || last.width != kMnistClasses)
        PTXLAB_THROW(InputError, "--model '{}': the last layer is '{}' (layer {}); it must be fc{}, the {} classes of "
                                 "MNIST",
                     spec, last.text(), m.layers.size(), kMnistClasses, kMnistClasses);
    // Numbered names (per kind, from 1); the hidden activation on every layer whose row carries
    // it but the last layer and a layer under one that takes it over (a bn); the running statistics
    // of the layers that keep them in the buffer array.
    std::vector<unsigned> counts(layer_rows().size(), 0);
    for (size_t i = 0; i < m.layers.size(); ++i) {
        LayerSpec& l = m.layers[i];
        const LayerRow& row = layer_row(l.kind);
        l.name = fmt::format("{}{}", row.token, ++counts[static_cast<size_t>(l.kind)]);
        const bool last = i + 1 == m.layers.size();
        const bool under_bn = !last && layer_row(m.layers[i + 1].kind).takes_activation;
        l.activation = row.activated && !last && !under_bn;
        if (row.buffers) {
            l.buffer_offset = m.buffer_count;
            m.buffer_count += size_t(row.buffers) * l.width;
        }
    }
    m.param_count = offset;
    return m;
}

}  // namespace ptxlab
