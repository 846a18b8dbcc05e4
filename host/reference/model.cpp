// The --model grammar and the parameter layout (see model.hpp).
#include "model.hpp"

#include "error.hpp"

#include <cctype>

namespace ptxlab {

namespace {

const char* kGrammar = "conv<N>[k<K>], pool, fc<N> or bn, e.g. conv32,pool,conv64,pool,fc128,fc10; or cnn";

size_t product(const std::vector<unsigned>& dims) {
    size_t n = dims.empty() ? 0 : 1;
    for (auto d : dims) n *= d;
    return n;
}

// A whole number of decimal digits at text[pos..), at least 1 and at most kMaxWidth; pos
// moves past it. `what` names it in the message.
unsigned parse_count(const std::string& spec, size_t index, const std::string& item, size_t& pos, const char* what) {
    size_t end = pos;
    while (end < item.size() && std::isdigit(static_cast<unsigned char>(item[end]))) ++end;
    if (end == pos)
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' needs {} after '{}' ({})", spec, index, item, what,
                     item.substr(0, pos), kGrammar);
    const std::string digits = item.substr(pos, end - pos);
    pos = end;
    if (digits.size() > 7 || std::stoul(digits) > kMaxWidth)
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}': {} {} is too large (at most {})", spec, index, item,
                     what, digits, kMaxWidth);
    const unsigned n = static_cast<unsigned>(std::stoul(digits));
    if (n == 0) PTXLAB_THROW(InputError, "--model '{}': layer {} '{}': {} must be at least 1", spec, index, item, what);
    return n;
}

// One item of the list, without its shapes.
LayerSpec parse_item(const std::string& spec, size_t index, const std::string& item) {
    LayerSpec l;
    if (item.empty())
        PTXLAB_THROW(InputError, "--model '{}': layer {} is empty (a comma too many at the {}?)", spec, index,
                     index == 1 ? "start" : "end or in the middle");
    size_t pos = 0;
    if (item == "pool" || item == "bn") {
        l.kind = item == "pool" ? LayerKind::Pool : LayerKind::Bn;
        return l;
    }
    if (item.rfind("conv", 0) == 0) {
        l.kind = LayerKind::Conv;
        pos = 4;
        l.width = parse_count(spec, index, item, pos, "a channel count");
        l.ksize = 3;
        if (pos < item.size() && item[pos] == 'k') {
            ++pos;
            l.ksize = parse_count(spec, index, item, pos, "a kernel size");
            if (l.ksize != 1 && l.ksize != 3 && l.ksize != 5)
                PTXLAB_THROW(InputError,
                             "--model '{}': layer {} '{}': kernel size {} is not taken (1, 3 or 5: odd, for same "
                             "padding, and at most 5, as the conv kernels take)",
                             spec, index, item, l.ksize);
        }
    } else if (item.rfind("fc", 0) == 0) {
        l.kind = LayerKind::Fc;
        pos = 2;
        l.width = parse_count(spec, index, item, pos, "a width");
    } else {
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' is not a layer ({})", spec, index, item, kGrammar);
    }
    if (pos != item.size())
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}': unexpected '{}' after '{}' ({})", spec, index, item,
                     item.substr(pos), item.substr(0, pos), kGrammar);
    return l;
}

// A bn (layer `index`) normalizes the conv or hidden fc before it: not first, not after a pool or
// a bn, and not last (after the logits).
void check_bn_place(const std::string& spec, size_t index, const Model& m, bool last) {
    std::string what;
    if (m.layers.empty()) what = "is the first layer";
    else if (m.layers.back().kind == LayerKind::Pool) what = "comes after a pool";
    else if (m.layers.back().is_bn()) what = "comes after a bn";
    else if (last) what = fmt::format("comes after the last layer '{}' (the logits)", m.layers.back().text());
    if (!what.empty())
        PTXLAB_THROW(InputError, "--model '{}': layer {} 'bn' {}: a bn normalizes the conv or hidden fc right before it",
                     spec, index, what);
}

// Fills in l's output shape and parameters from its input shape `in`.
void place(const std::string& spec, size_t index, LayerSpec& l, Shape3 in, size_t& offset) {
    l.in = in;
    switch (l.kind) {
    case LayerKind::Conv:
        l.out = {l.width, in.h, in.w};
        l.weight_dims = {l.width, in.c, l.ksize, l.ksize};
        l.bias_dims = {l.width};
        break;
    case LayerKind::Pool:
        if (in.h < 2 || in.w < 2 || in.h % 2 || in.w % 2)
            PTXLAB_THROW(InputError,
                         "--model '{}': layer {} 'pool' gets {}x{}x{}: a 2x2 pool with stride 2 needs an even height "
                         "and width of at least 2",
                         spec, index, in.c, in.h, in.w);
        l.out = {in.c, in.h / 2, in.w / 2};
        break;
    case LayerKind::Fc:
        if (in.size() > kMaxWidth)
            PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' flattens {}x{}x{} = {} inputs (at most {})", spec,
                         index, l.text(), in.c, in.h, in.w, in.size(), kMaxWidth);
        l.out = {l.width, 1, 1};
        l.weight_dims = {l.width, static_cast<unsigned>(in.size())};
        l.bias_dims = {l.width};
        break;
    case LayerKind::Bn:  // its channels (a conv's) or units (an fc's): one gamma and beta each
        l.width = in.c;
        l.out = in;
        l.weight_dims = {in.c};
        l.bias_dims = {in.c};
        break;
    }
    l.weight_offset = offset;
    offset += l.weight_count();
    l.bias_offset = offset;
    offset += l.bias_count();
}

}  // namespace

size_t LayerSpec::weight_count() const { return product(weight_dims); }
size_t LayerSpec::bias_count() const { return product(bias_dims); }

std::string LayerSpec::text() const {
    switch (kind) {
    case LayerKind::Conv: return fmt::format("conv{}{}", width, ksize == 3 ? "" : fmt::format("k{}", ksize));
    case LayerKind::Pool: return "pool";
    case LayerKind::Fc: return fmt::format("fc{}", width);
    case LayerKind::Bn: return "bn";
    }
    return "?";
}

std::vector<float> Model::initial_buffers() const {
    std::vector<float> b(buffer_count, 0.0f);
    for (const auto& l : layers)
        if (l.is_bn()) std::fill(b.begin() + long(l.buffer_offset + l.width), b.begin() + long(l.buffer_offset + 2 * l.width), 1.0f);
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
    for (const auto& l : layers) s += fmt::format(" -{}-> {}", l.text(), l.out.h == 1 && l.out.w == 1 && l.kind != LayerKind::Conv && l.kind != LayerKind::Pool ? std::to_string(l.out.c) : shape(l.out));
    return s;
}

Model parse_model(const std::string& spec_in, Shape3 input) {
    if (spec_in.empty())
        PTXLAB_THROW(InputError, "--model is empty: give a layer list ({})", kGrammar);
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
        LayerSpec l = parse_item(spec, index, item);
        if (seen_fc && l.kind != LayerKind::Fc && !l.is_bn())
            PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' comes after an fc layer: conv and pool layers come "
                                     "before the first fc (which flattens)",
                         spec, index, item);
        if (l.is_bn()) check_bn_place(spec, index, m, comma == std::string::npos);
        seen_fc = seen_fc || l.kind == LayerKind::Fc;
        place(spec, index, l, shape, offset);
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
    // Numbered names; the hidden activation on every conv, fc and bn but the last layer and a
    // layer under a bn (the bn carries it); each bn's running statistics in the buffer array.
    static const char* const kNames[4] = {"conv", "pool", "fc", "bn"};
    unsigned counts[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < m.layers.size(); ++i) {
        LayerSpec& l = m.layers[i];
        const unsigned n = ++counts[static_cast<int>(l.kind)];
        l.name = fmt::format("{}{}", kNames[static_cast<int>(l.kind)], n);
        const bool under_bn = i + 1 < m.layers.size() && m.layers[i + 1].is_bn();
        l.activation = l.kind != LayerKind::Pool && i + 1 < m.layers.size() && !under_bn;
        if (l.is_bn()) {
            l.buffer_offset = m.buffer_count;
            m.buffer_count += 2 * size_t(l.width);
        }
    }
    m.param_count = offset;
    return m;
}

}  // namespace ptxlab
