// The layer table (see layers.hpp): one section a layer kind, its functions then its row.
#include "layers.hpp"

#include "error.hpp"
#include "ref_conv.hpp"
#include "rng.hpp"

#include <cctype>
#include <cmath>
#include <iterator>
#include <string_view>

namespace ptxlab {

namespace {

// ---- Shared pieces ----------------------------------------------------------------------

// A whole number of decimal digits at item[pos..), at least 1 and at most kMaxWidth; pos moves
// past it. `what` names it in the message.
unsigned parse_count(const LayerItem& it, size_t& pos, const char* what) {
    const std::string& item = it.item;
    size_t end = pos;
    while (end < item.size() && std::isdigit(static_cast<unsigned char>(item[end]))) ++end;
    if (end == pos)
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' needs {} after '{}' ({})", it.spec, it.index, item, what,
                     item.substr(0, pos), model_grammar());
    const std::string digits = item.substr(pos, end - pos);
    pos = end;
    if (digits.size() > 7 || std::stoul(digits) > kMaxWidth)
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}': {} {} is too large (at most {})", it.spec, it.index,
                     item, what, digits, kMaxWidth);
    const unsigned n = static_cast<unsigned>(std::stoul(digits));
    if (n == 0)
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}': {} must be at least 1", it.spec, it.index, item, what);
    return n;
}

// The rest of the item after a parse: nothing may be left.
void require_end(const LayerItem& it, size_t pos) {
    if (pos != it.item.size())
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}': unexpected '{}' after '{}' ({})", it.spec, it.index,
                     it.item, it.item.substr(pos), it.item.substr(0, pos), model_grammar());
}

std::vector<double> slice(const std::vector<double>& v, size_t offset, size_t count) {
    return {v.begin() + long(offset), v.begin() + long(offset + count)};
}

// out = act(z) elementwise where the layer carries the activation (else a copy).
void activate_into(const LayerSpec& l, const LayerPass64& p) {
    p.out = p.z;
    if (l.activation)
        for (auto& x : p.out) x = activate(p.act, x);
}

// A weight and bias drawn as nn.Linear and nn.Conv2d draw them (fan_in and fan_out: in and out
// times the kernel's area).
void init_drawn(const LayerSpec& l, Init init, Rng& rng, float* flat) {
    const double k2 = l.ksize ? double(l.ksize) * l.ksize : 1.0;
    const double fan_in = double(l.weight_dims[1]) * k2, fan_out = double(l.weight_dims[0]) * k2;
    init_layer_params(rng, init, fan_in, fan_out, flat + l.weight_offset, l.weight_count(), flat + l.bias_offset,
                      l.bias_count());
}

// ---- conv<N>[k<K>]: KxK convolution, stride 1, same padding, bias ------------------------

ConvDims conv_dims(const LayerSpec& l, unsigned B) { return {B, l.in.c, l.in.h, l.in.w, l.width, l.ksize}; }

void conv_parse(const LayerItem& it, size_t pos, LayerSpec& l) {
    l.width = parse_count(it, pos, "a channel count");
    l.ksize = 3;
    if (pos < it.item.size() && it.item[pos] == 'k') {
        ++pos;
        l.ksize = parse_count(it, pos, "a kernel size");
        if (l.ksize != 1 && l.ksize != 3 && l.ksize != 5)
            PTXLAB_THROW(InputError,
                         "--model '{}': layer {} '{}': kernel size {} is not taken (1, 3 or 5: odd, for same "
                         "padding, and at most 5, as the conv kernels take)",
                         it.spec, it.index, it.item, l.ksize);
    }
    require_end(it, pos);
}

void conv_place(const LayerItem&, LayerSpec& l) {
    l.out = {l.width, l.in.h, l.in.w};
    l.weight_dims = {l.width, l.in.c, l.ksize, l.ksize};
    l.bias_dims = {l.width};
}

std::string conv_text(const LayerSpec& l) {
    return fmt::format("conv{}{}", l.width, l.ksize == 3 ? "" : fmt::format("k{}", l.ksize));
}

void conv_forward64(const LayerSpec& l, const LayerPass64& p) {
    p.z = conv2d_forward(conv_dims(l, p.B), p.in, slice(p.P, l.weight_offset, l.weight_count()),
                         slice(p.P, l.bias_offset, l.bias_count()), std::nullopt);
    activate_into(l, p);
}

std::vector<double> conv_backward64(const LayerSpec& l, const LayerPass64& p, std::vector<double> d,
                                    std::vector<double>& grad, bool below) {
    const ConvDims cd = conv_dims(l, p.B);
    std::vector<double> dW, db;
    conv2d_backward_weights(cd, p.in, d, dW, db);
    std::copy(dW.begin(), dW.end(), grad.begin() + long(l.weight_offset));
    std::copy(db.begin(), db.end(), grad.begin() + long(l.bias_offset));
    if (!below) return {};
    return conv2d_backward_input(cd, d, slice(p.P, l.weight_offset, l.weight_count()));
}

// ---- pool: 2x2 max-pool, stride 2 (ties to the first in row-major order) ----------------

void pool_place(const LayerItem& it, LayerSpec& l) {
    const Shape3 in = l.in;
    if (in.h < 2 || in.w < 2 || in.h % 2 || in.w % 2)
        PTXLAB_THROW(InputError,
                     "--model '{}': layer {} 'pool' gets {}x{}x{}: a 2x2 pool with stride 2 needs an even height "
                     "and width of at least 2",
                     it.spec, it.index, in.c, in.h, in.w);
    l.out = {in.c, in.h / 2, in.w / 2};
}

std::string pool_text(const LayerSpec&) { return "pool"; }

void pool_forward64(const LayerSpec& l, const LayerPass64& p) {
    PoolResult r = maxpool2_forward(p.B * l.in.c, l.in.h, l.in.w, p.in);
    p.out = std::move(r.Y);
    p.idx = std::move(r.idx);
}

std::vector<double> pool_backward64(const LayerSpec& l, const LayerPass64& p, std::vector<double> d,
                                    std::vector<double>&, bool) {
    return maxpool2_backward(p.B * l.in.c, l.in.h, l.in.w, d, p.idx);
}

// ---- fc<N>: dense layer (nn.Linear); the first flattens its NCHW input ------------------

void fc_parse(const LayerItem& it, size_t pos, LayerSpec& l) {
    l.width = parse_count(it, pos, "a width");
    require_end(it, pos);
}

void fc_place(const LayerItem& it, LayerSpec& l) {
    const Shape3 in = l.in;
    if (in.size() > kMaxWidth)
        PTXLAB_THROW(InputError, "--model '{}': layer {} '{}' flattens {}x{}x{} = {} inputs (at most {})", it.spec,
                     it.index, l.text(), in.c, in.h, in.w, in.size(), kMaxWidth);
    l.out = {l.width, 1, 1};
    l.weight_dims = {l.width, static_cast<unsigned>(in.size())};
    l.bias_dims = {l.width};
}

std::string fc_text(const LayerSpec& l) { return fmt::format("fc{}", l.width); }

// z[n][o] = b[o] + sum_i W[o][i] a[n][i], i over the flattened input in order.
void fc_forward64(const LayerSpec& l, const LayerPass64& p) {
    const size_t rows = l.width, cols = l.in.size();
    const double* W = p.P.data() + l.weight_offset;
    const double* b = p.P.data() + l.bias_offset;
    p.z.assign(size_t(p.B) * rows, 0.0);
    for (unsigned n = 0; n < p.B; ++n)
        for (size_t row = 0; row < rows; ++row) {
            double acc = b[row];
            for (size_t c = 0; c < cols; ++c) acc += W[row * cols + c] * p.in[n * cols + c];
            p.z[n * rows + row] = acc;
        }
    activate_into(l, p);
}

std::vector<double> fc_backward64(const LayerSpec& l, const LayerPass64& p, std::vector<double> d,
                                  std::vector<double>& grad, bool below) {
    const size_t rows = l.width, cols = l.in.size();
    const unsigned B = p.B;
    const double* W = p.P.data() + l.weight_offset;
    double* gW = grad.data() + l.weight_offset;
    double* gb = grad.data() + l.bias_offset;
    // Sample by sample, as cpu_recipe_step sums them.
    for (unsigned n = 0; n < B; ++n)
        for (size_t row = 0; row < rows; ++row) {
            gb[row] += d[n * rows + row];
            for (size_t c = 0; c < cols; ++c) gW[row * cols + c] += d[n * rows + row] * p.in[n * cols + c];
        }
    if (!below) return {};
    std::vector<double> dIn(size_t(B) * cols, 0.0);
    for (unsigned n = 0; n < B; ++n)
        for (size_t c = 0; c < cols; ++c) {
            double sum = 0.0;
            for (size_t row = 0; row < rows; ++row) sum += W[row * cols + c] * d[n * rows + row];
            dIn[n * cols + c] = sum;
        }
    return dIn;
}

// ---- bn: batch normalization of the conv or hidden fc before it -------------------------

// Not first, not after a pool or a bn, and not last (after the logits).
void bn_check_place(const LayerItem& it, const Model& m, bool last) {
    std::string what;
    if (m.layers.empty()) what = "is the first layer";
    else if (m.layers.back().kind == LayerKind::Pool) what = "comes after a pool";
    else if (m.layers.back().is_bn()) what = "comes after a bn";
    else if (last) what = fmt::format("comes after the last layer '{}' (the logits)", m.layers.back().text());
    if (!what.empty())
        PTXLAB_THROW(InputError, "--model '{}': layer {} 'bn' {}: a bn normalizes the conv or hidden fc right before it",
                     it.spec, it.index, what);
}

// Its channels (a conv's) or units (an fc's): one gamma and beta each.
void bn_place(const LayerItem&, LayerSpec& l) {
    l.width = l.in.c;
    l.out = l.in;
    l.weight_dims = {l.in.c};
    l.bias_dims = {l.in.c};
}

std::string bn_text(const LayerSpec&) { return "bn"; }

constexpr const char* kBnBuffers[] = {"running_mean", "running_var"};

// running_mean 0, running_var 1 (nn.BatchNorm's).
void bn_init_buffers(const LayerSpec& l, float* b) { std::fill(b + l.width, b + 2 * size_t(l.width), 1.0f); }

// gamma 1, beta 0 (nn.BatchNorm's; no draw from the generator).
void bn_init(const LayerSpec& l, Init, Rng&, float* flat) {
    std::fill(flat + l.weight_offset, flat + l.weight_offset + l.width, 1.0f);
}

void bn_forward_layer64(const LayerSpec& l, const LayerPass64& p) {
    const unsigned C = l.width, HW = l.in.h * l.in.w;
    double* rm = p.running ? p.running->data() + l.buffer_offset : nullptr;
    p.z.assign(p.in.size(), 0.0);
    p.stats.assign(2 * size_t(C), 0.0);
    bn_forward64(p.in.data(), p.B, C, HW, p.P.data() + l.weight_offset, p.P.data() + l.bias_offset, p.train, rm,
                 rm ? rm + C : nullptr, p.z.data(), p.stats.data(), p.stats.data() + C);
    activate_into(l, p);
}

std::vector<double> bn_backward_layer64(const LayerSpec& l, const LayerPass64& p, std::vector<double> d,
                                        std::vector<double>& grad, bool) {
    const unsigned C = l.width;
    std::vector<double> dx(d.size());
    bn_backward64(p.in.data(), d.data(), p.B, C, l.in.h * l.in.w, p.P.data() + l.weight_offset, p.stats.data(),
                  p.stats.data() + C, grad.data() + l.weight_offset, grad.data() + l.bias_offset, dx.data());
    return dx;
}

// ---- The table, in LayerKind order -------------------------------------------------------

constexpr LayerRow kLayers[] = {
    {.token = "conv",
     .grammar = "conv<N>[k<K>]",
     .help = "conv<N> (3x3, same padding, bias, activation), conv<N>k<K> (KxK, K = 1, 3, 5)",
     .parse = conv_parse,
     .activated = true,
     .spatial = true,
     .place = conv_place,
     .text = conv_text,
     .init = init_drawn,
     .forward64 = conv_forward64,
     .backward64 = conv_backward64},
    {.token = "pool",
     .grammar = "pool",
     .help = "pool (2x2 max, stride 2)",
     .spatial = true,
     .place = pool_place,
     .text = pool_text,
     .forward64 = pool_forward64,
     .backward64 = pool_backward64},
    {.token = "fc",
     .grammar = "fc<N>",
     .help = "fc<N> (dense; the first flattens)",
     .parse = fc_parse,
     .after_fc = true,
     .activated = true,
     .place = fc_place,
     .text = fc_text,
     .init = init_drawn,
     .forward64 = fc_forward64,
     .backward64 = fc_backward64},
    {.token = "bn",
     .grammar = "bn",
     .help = "bn (BatchNorm2d after a conv, BatchNorm1d after a hidden fc; the activation after it)",
     .after_fc = true,
     .activated = true,
     .takes_activation = true,
     .check_place = bn_check_place,
     .place = bn_place,
     .text = bn_text,
     .buffers = 2,
     .buffer_names = kBnBuffers,
     .tracks_steps = true,
     .init_buffers = bn_init_buffers,
     .init = bn_init,
     .forward64 = bn_forward_layer64,
     .backward64 = bn_backward_layer64},
};

}  // namespace

std::span<const LayerRow> layer_rows() { return kLayers; }

LayerKind LayerRow::kind() const {
    for (size_t k = 0; k < std::size(kLayers); ++k)
        if (&kLayers[k] == this) return static_cast<LayerKind>(k);
    PTXLAB_THROW(Error, "internal error: layer row '{}' is not in the layer table", token);
}

const LayerRow& layer_row(LayerKind k) {
    const auto i = static_cast<size_t>(k);
    if (i >= std::size(kLayers)) PTXLAB_THROW(Error, "internal error: layer kind {} has no row", i);
    return kLayers[i];
}

std::string model_grammar() {
    std::string s;
    for (size_t k = 0; k < std::size(kLayers); ++k)
        s += std::string(k == 0 ? "" : k + 1 == std::size(kLayers) ? " or " : ", ") + kLayers[k].grammar;
    return s + ", e.g. conv32,pool,conv64,pool,fc128,fc10; or cnn";
}

std::string model_grammar_help() {
    std::string s;
    for (const LayerRow& r : kLayers) s += std::string(s.empty() ? "" : ", ") + r.help;
    return s;
}

const LayerRow* layer_row_of(const std::string& item) {
    const LayerRow* best = nullptr;
    for (const LayerRow& r : kLayers) {
        const std::string_view token(r.token);
        if (item.rfind(token, 0) == 0 && (!best || token.size() > std::string_view(best->token).size())) best = &r;
    }
    return best;
}

void bn_forward64(const double* x, unsigned B, unsigned C, unsigned HW, const double* gamma, const double* beta,
                  bool train, double* run_mean, double* run_var, double* z, double* mean, double* rstd) {
    const size_t n = size_t(B) * HW;
    if (train && n < 2)
        PTXLAB_THROW(InputError, "bn: expected more than 1 value per channel when training (batch {} of {}x1 planes)",
                     B, C);
    auto at = [&](unsigned b, unsigned c, size_t i) { return (size_t(b) * C + c) * HW + i; };
    for (unsigned c = 0; c < C; ++c) {
        double mu = 0.0, var = 0.0;
        if (train) {
            for (unsigned b = 0; b < B; ++b)
                for (size_t i = 0; i < HW; ++i) mu += x[at(b, c, i)];
            mu /= double(n);
            for (unsigned b = 0; b < B; ++b)
                for (size_t i = 0; i < HW; ++i) var += (x[at(b, c, i)] - mu) * (x[at(b, c, i)] - mu);
            if (run_mean) {
                run_mean[c] = (1.0 - kBnMomentum) * run_mean[c] + kBnMomentum * mu;
                run_var[c] = (1.0 - kBnMomentum) * run_var[c] + kBnMomentum * var / double(n - 1);
            }
            var /= double(n);
        } else {
            mu = run_mean[c];
            var = run_var[c];
        }
        mean[c] = mu;
        rstd[c] = 1.0 / std::sqrt(var + kBnEps);
        for (unsigned b = 0; b < B; ++b)
            for (size_t i = 0; i < HW; ++i) z[at(b, c, i)] = gamma[c] * (x[at(b, c, i)] - mu) * rstd[c] + beta[c];
    }
}

void bn_backward64(const double* x, const double* dz, unsigned B, unsigned C, unsigned HW, const double* gamma,
                   const double* mean, const double* rstd, double* dgamma, double* dbeta, double* dx) {
    const double n = double(B) * HW;
    auto at = [&](unsigned b, unsigned c, size_t i) { return (size_t(b) * C + c) * HW + i; };
    for (unsigned c = 0; c < C; ++c) {
        double s1 = 0.0, s2 = 0.0;
        for (unsigned b = 0; b < B; ++b)
            for (size_t i = 0; i < HW; ++i) {
                s1 += dz[at(b, c, i)];
                s2 += dz[at(b, c, i)] * (x[at(b, c, i)] - mean[c]) * rstd[c];
            }
        dgamma[c] = s2;
        dbeta[c] = s1;
        for (unsigned b = 0; b < B; ++b)
            for (size_t i = 0; i < HW; ++i) {
                const size_t k = at(b, c, i);
                const double xhat = (x[k] - mean[c]) * rstd[c];
                dx[k] = gamma[c] * rstd[c] * (dz[k] - s1 / n - xhat * s2 / n);
            }
    }
}

// ---- What reads the rows: the model's methods, the grammar (model.hpp), the initial values ----

namespace {

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

std::string LayerSpec::text() const { return layer_row(kind).text(*this); }

std::vector<float> Model::initial_buffers() const {
    std::vector<float> b(buffer_count, 0.0f);
    for (const auto& l : layers)
        if (const LayerRow& row = layer_row(l.kind); row.init_buffers) row.init_buffers(l, b.data() + l.buffer_offset);
    return b;
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

std::vector<float> init_model_params(const Model& m, Init init, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> flat(m.param_count, 0.0f);
    for (const LayerSpec& l : m.layers)  // in layer order: each row that draws takes its values in turn
        if (const LayerRow& row = layer_row(l.kind); row.init) row.init(l, init, rng, flat.data());
    return flat;
}

}  // namespace ptxlab
