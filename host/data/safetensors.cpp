#include "safetensors.hpp"

#include "files.hpp"

#include "error.hpp"
#include "layers.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>


namespace ptxlab {

namespace {

// Headers are read and written with nlohmann-json: read into a json (the order of the keys
// does not matter), written from an ordered_json, which keeps the order they are set in (the
// metadata first, then the tensors in the order of their bytes).
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// The deepest nesting a header may have: the root object is level 0, a tensor's entry 1, its
// shape 2; anything past 8 levels is refused before it is built.
constexpr int kMaxHeaderDepth = 8;

[[noreturn]] void bad_header(const std::string& path, const std::string& what) {
    PTXLAB_THROW(InputError, "{}: bad safetensors header: {}", path, what);
}

// The JSON of a safetensors header (`text`, which starts at byte 8 of the file), parsed with
// the format's rules on top of JSON's: no key twice in one object (nlohmann would keep the
// last one silently), at most kMaxHeaderDepth levels, and no values but objects, arrays,
// strings and whole numbers >= 0 (true, false, null, negative and fractional numbers have no
// place in a header). Errors name the byte of the file or the key path where they are.
Json parse_header(const std::string& path, std::string_view text) {
    // One open object or array: the keys seen so far in an object, and the latest one.
    struct Level {
        bool object;
        std::set<std::string> keys;
        std::string key;
    };
    std::vector<Level> open;
    // Where the parser is, as the keys of the first `levels` open objects: 'fc1.weight/shape'.
    auto where = [&](size_t levels) {
        std::string w;
        for (size_t i = 0; i < levels && i < open.size(); ++i)
            if (open[i].object && !open[i].key.empty()) w += (w.empty() ? "" : "/") + open[i].key;
        return w.empty() ? std::string("the top level") : "'" + w + "'";
    };
    const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
        using E = Json::parse_event_t;
        if ((event == E::object_start || event == E::array_start || event == E::value) && depth > kMaxHeaderDepth)
            bad_header(path, fmt::format("nested too deeply at {} (at most {} levels)", where(open.size()),
                                         kMaxHeaderDepth));
        switch (event) {
        case E::object_start: open.push_back({true, {}, {}}); break;
        case E::array_start: open.push_back({false, {}, {}}); break;
        case E::object_end:
        case E::array_end: open.pop_back(); break;
        case E::key: {
            Level& l = open.back();
            const std::string& k = parsed.get_ref<const std::string&>();
            if (!l.keys.insert(k).second) {
                if (open.size() == 1 && k != "__metadata__") bad_header(path, fmt::format("tensor '{}' appears twice", k));
                bad_header(path, fmt::format("the key '{}' appears twice in {}", k, where(open.size() - 1)));
            }
            l.key = k;
            break;
        }
        case E::value:
            if (parsed.is_string() || parsed.is_number_unsigned()) break;
            bad_header(path, fmt::format("{} at {} is not taken (a header holds objects, arrays, strings and whole "
                                         "numbers >= 0)",
                                         parsed.dump(), where(open.size())));
        }
        return true;
    };
    try {
        return Json::parse(text.begin(), text.end(), check);
    } catch (const Json::parse_error& e) {
        // e.byte counts the bytes read, the failing one included; the header starts at byte 8.
        std::string what = e.what();
        if (auto p = what.find("parse error"); p != std::string::npos)
            if (auto colon = what.find(": ", p); colon != std::string::npos) what = what.substr(colon + 2);
        PTXLAB_THROW(InputError, "{}: bad safetensors header at byte {}: {}", path, e.byte + 7, what);
    } catch (const Json::exception& e) {  // a number past a double's range (out_of_range 406)
        bad_header(path, e.what());
    }
}

}  // namespace

namespace {

// One tensor to write: its name, shape and data (float32; or int64, a bn's num_batches_tracked).
struct TensorOut {
    std::string name;
    std::vector<uint64_t> shape;
    const void* data;
    size_t count;
    const char* dtype = "F32";
    unsigned width = 4;  // bytes an element
};

// The safetensors bytes of `tensors` (in this order) with the metadata, written to a temporary
// file beside `path` and renamed into place (removed if a signal ends the process first).
void write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors,
                       const std::map<std::string, std::string>& meta) {
    OrderedJson h;
    h["__metadata__"] = OrderedJson::object();
    for (const auto& [k, v] : meta) h["__metadata__"][k] = v;
    uint64_t offset = 0;
    for (const TensorOut& t : tensors) {
        const uint64_t bytes = uint64_t(t.count) * t.width;
        if (h.contains(t.name)) PTXLAB_THROW(Error, "internal error: checkpoint tensor '{}' written twice", t.name);
        h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", OrderedJson::array({offset, offset + bytes})}};
        offset += bytes;
    }
    // Compact, as the safetensors package writes it: {"__metadata__":{...},"fc1.weight":{"dtype":"F32",...}}.
    std::string header;
    try {
        header = h.dump();
    } catch (const OrderedJson::exception& e) {  // a metadata string that is not UTF-8
        PTXLAB_THROW(Error, "internal error: the checkpoint header for '{}' cannot be written: {}", path, e.what());
    }
    while (header.size() % 8) header += ' ';  // the data starts 8-byte aligned

    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char(uint8_t(uint64_t(header.size()) >> (8 * i)));
    bytes += header;
    static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
    for (const TensorOut& t : tensors) bytes.append(reinterpret_cast<const char*>(t.data), t.count * t.width);
    write_file_atomically(path, bytes, "--save");  // files.hpp: a temporary file renamed into place
}

void add_extra(std::vector<TensorOut>& out, const ExtraTensors& extra) {
    for (const auto& [name, v] : extra) {
        if (!name.starts_with("optimizer."))
            PTXLAB_THROW(Error, "internal error: extra checkpoint tensor '{}' is not named optimizer.*", name);
        out.push_back({name, {v.size()}, v.data(), v.size()});
    }
}

}  // namespace

void save_safetensors(const std::string& path, const NetParams& net, const std::map<std::string, std::string>& metadata,
                      const ExtraTensors& extra) {
    // Header: metadata, then the tensors in order fc1.weight, fc1.bias, fc2.weight, ...
    std::map<std::string, std::string> meta = metadata;
    meta["format"] = "pt";
    std::string layers;
    for (auto n : net.sizes) layers += (layers.empty() ? "" : ",") + std::to_string(n);
    meta["layers"] = layers;
    std::vector<TensorOut> out;
    for (size_t l = 0; l < net.layers(); ++l) {
        out.push_back({fmt::format("fc{}.weight", l + 1), {net.sizes[l + 1], net.sizes[l]}, net.W[l].data(), net.W[l].size()});
        out.push_back({fmt::format("fc{}.bias", l + 1), {net.sizes[l + 1]}, net.b[l].data(), net.b[l].size()});
    }
    add_extra(out, extra);
    write_safetensors(path, out, meta);
}

namespace {

// A tensor's shape and its bytes [begin, end) in the data section.
struct TensorSpan {
    std::vector<uint64_t> shape;
    uint64_t begin, end;
    unsigned width = 4;  // bytes an element: F32, or I64 (a bn's num_batches_tracked)
};

// A bn layer's step counter, the one tensor that is not F32 (PyTorch's int64 buffer).
bool is_batch_counter(const std::string& name) { return name.ends_with(".num_batches_tracked"); }

// Each data byte belongs to one tensor: no two tensors may share bytes, and (as the safetensors
// format requires) the tensors cover the data section without a gap.
void check_coverage(const std::string& path, const std::map<std::string, TensorSpan>& tensors, uint64_t data_size) {
    std::vector<std::pair<const std::string*, const TensorSpan*>> order;
    for (const auto& [name, f] : tensors) order.push_back({&name, &f});
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
        return a.second->begin != b.second->begin ? a.second->begin < b.second->begin
                                                  : a.second->end < b.second->end;
    });
    uint64_t covered = 0;
    for (size_t i = 0; i < order.size(); ++i) {
        const TensorSpan& f = *order[i].second;
        if (i > 0 && f.begin < order[i - 1].second->end)
            PTXLAB_THROW(InputError,
                         "{}: tensors '{}' (data_offsets [{}, {}]) and '{}' ([{}, {}]) overlap; each tensor needs "
                         "its own bytes",
                         path, *order[i - 1].first, order[i - 1].second->begin, order[i - 1].second->end,
                         *order[i].first, f.begin, f.end);
        if (f.begin != covered)
            PTXLAB_THROW(InputError, "{}: data bytes [{}, {}) belong to no tensor (before '{}'); the data_offsets "
                                     "must cover the data without gaps",
                         path, covered, f.begin, *order[i].first);
        covered = f.end;
    }
    if (covered != data_size)
        PTXLAB_THROW(InputError, "{}: the last {} data bytes (from {}) belong to no tensor; the file holds {} data "
                                 "bytes but its tensors end at {}",
                     path, data_size - covered, covered, data_size, covered);
}

}  // namespace

namespace {

// A checkpoint's header read and checked: every tensor's shape and bytes, the metadata, and
// where the data section starts.
struct TensorTable {
    std::map<std::string, TensorSpan> tensors;
    std::map<std::string, std::string> metadata;
    const uint8_t* data = nullptr;
};

TensorTable read_tensor_table(const std::string& path, const std::vector<uint8_t>& bytes) {
    if (bytes.size() < 8)
        PTXLAB_THROW(InputError, "{}: {} bytes is too short for a safetensors file (8-byte header length)", path,
                     bytes.size());
    uint64_t hlen = 0;
    for (int i = 0; i < 8; ++i) hlen |= uint64_t(bytes[size_t(i)]) << (8 * i);
    if (hlen < 2 || hlen > 100'000'000 || hlen > bytes.size() - 8)
        PTXLAB_THROW(InputError, "{}: header length {} does not fit in the file ({} bytes); not a safetensors file?",
                     path, hlen, bytes.size());
    std::string_view htext(reinterpret_cast<const char*>(bytes.data() + 8), size_t(hlen));
    const Json root = parse_header(path, htext);
    if (!root.is_object()) PTXLAB_THROW(InputError, "{}: the header is not a JSON object", path);
    const uint64_t data_size = bytes.size() - 8 - hlen;
    TensorTable tt;
    tt.data = bytes.data() + 8 + hlen;
    std::map<std::string, TensorSpan>& tensors = tt.tensors;
    for (const auto& item : root.items()) {
        const std::string& name = item.key();  // not a structured binding: `bad` captures it
        const Json& t = item.value();
        if (name == "__metadata__") {
            // String to string, as the safetensors package has it.
            if (!t.is_object()) PTXLAB_THROW(InputError, "{}: __metadata__ is not an object", path);
            for (const auto& [k, v] : t.items()) {
                if (!v.is_string())
                    PTXLAB_THROW(InputError, "{}: __metadata__ '{}' is {}, not a string", path, k, v.dump());
                tt.metadata[k] = v.get<std::string>();
            }
            continue;
        }
        auto bad = [&](const std::string& what) {
            PTXLAB_THROW(InputError, "{}: tensor '{}': {}", path, name, what);
        };
        if (!t.is_object()) bad("entry is not an object");
        for (const auto& [field, v] : t.items())
            if (field != "dtype" && field != "shape" && field != "data_offsets")
                bad(fmt::format("unknown field '{}' (an entry holds dtype, shape and data_offsets)", field));
        const auto dtype = t.find("dtype"), shape = t.find("shape"), offs = t.find("data_offsets");
        if (dtype == t.end() || !dtype->is_string()) bad("no dtype");
        const bool counter = is_batch_counter(name);
        if (*dtype != (counter ? "I64" : "F32"))
            bad(fmt::format("dtype {} is not supported (ptxlab checkpoints are F32; a bn's num_batches_tracked I64)",
                            dtype->get<std::string>()));
        if (shape == t.end() || !shape->is_array()) bad("no shape");
        if (offs == t.end() || !offs->is_array() || offs->size() != 2) bad("data_offsets must be [begin, end]");
        // The header holds no number but whole ones >= 0 (parse_header), each a uint64_t here.
        TensorSpan f;
        f.width = counter ? 8 : 4;
        for (const auto& d : *shape) {
            if (!d.is_number_unsigned()) bad("shape holds a non-number");
            f.shape.push_back(d.get<uint64_t>());
            if (f.shape.back() > (1u << 30)) bad("dimension too large");
        }
        // Every product checked: [2^30, 2^30, 4] has 2^62 elements, whose 2^64 bytes would wrap to 0.
        uint64_t count = 0, need = 0;
        bool too_many = false;
        if (std::find(f.shape.begin(), f.shape.end(), 0) == f.shape.end()) {  // else no elements
            count = 1;
            for (uint64_t d : f.shape) too_many = too_many || __builtin_mul_overflow(count, d, &count);
        }
        if (too_many || __builtin_mul_overflow(count, uint64_t(f.width), &need))
            bad(fmt::format("shape [{}] has too many elements", fmt::join(f.shape, ", ")));
        if (!(*offs)[0].is_number_unsigned() || !(*offs)[1].is_number_unsigned()) bad("bad data_offsets");
        f.begin = (*offs)[0].get<uint64_t>();
        f.end = (*offs)[1].get<uint64_t>();
        if (f.begin > f.end || f.end > data_size)
            bad(fmt::format("data_offsets [{}, {}] lie outside the {} data bytes (truncated file?)", f.begin, f.end,
                            data_size));
        if (f.end - f.begin != need) bad(fmt::format("holds {} bytes but its shape needs {}", f.end - f.begin, need));
        tensors[name] = f;
    }
    check_coverage(path, tensors, data_size);
    return tt;
}

std::vector<float> read_floats(const TensorTable& tt, const TensorSpan& f) {
    std::vector<float> v((f.end - f.begin) / 4);
    if (!v.empty()) std::memcpy(v.data(), tt.data + f.begin, v.size() * 4);  // an empty vector's data() may be null
    return v;
}

// The "optimizer.*" tensors; returns how many there are.
size_t read_extra(const TensorTable& tt, ExtraTensors& extra) {
    size_t n = 0;
    for (const auto& [name, f] : tt.tensors)
        if (name.starts_with("optimizer.")) {
            extra[name] = read_floats(tt, f);
            ++n;
        }
    return n;
}

}  // namespace

Checkpoint parse_checkpoint(const std::string& path, const std::vector<uint8_t>& bytes) {
    TensorTable tt = read_tensor_table(path, bytes);
    const auto& tensors = tt.tensors;
    Checkpoint ck;
    ck.metadata = tt.metadata;
    if (auto it = ck.metadata.find("model"); it != ck.metadata.end())
        PTXLAB_THROW(InputError, "{}: holds the model '{}' (a --model checkpoint), not a 2- or 3-layer MLP: the "
                                 "MLP's kernels cannot run it",
                     path, it->second);

    NetParams& net = ck.net;
    for (size_t l = 1;; ++l) {
        auto w = tensors.find(fmt::format("fc{}.weight", l));
        auto b = tensors.find(fmt::format("fc{}.bias", l));
        if (w == tensors.end() && b == tensors.end()) break;
        if (w == tensors.end() || b == tensors.end())
            PTXLAB_THROW(InputError, "{}: fc{}.weight and fc{}.bias must both be present", path, l, l);
        if (w->second.shape.size() != 2 || b->second.shape.size() != 1 || w->second.shape[0] != b->second.shape[0])
            PTXLAB_THROW(InputError, "{}: fc{}.weight must be [out][in] and fc{}.bias [out]", path, l, l);
        const unsigned out = unsigned(w->second.shape[0]), in = unsigned(w->second.shape[1]);
        if (out == 0 || in == 0) PTXLAB_THROW(InputError, "{}: fc{} has a zero dimension", path, l);
        if (net.sizes.empty()) net.sizes.push_back(in);
        else if (net.sizes.back() != in)
            PTXLAB_THROW(InputError, "{}: fc{}.weight takes {} inputs but fc{} gives {}", path, l, in, l - 1,
                         net.sizes.back());
        net.sizes.push_back(out);
        net.W.push_back(read_floats(tt, w->second));
        net.b.push_back(read_floats(tt, b->second));
    }
    if (net.sizes.empty()) {
        std::vector<std::string> names;
        for (const auto& [name, f] : tensors) names.push_back(name);
        if (names.size() > 8) {
            names.resize(8);
            names.push_back(fmt::format("... ({} tensors in all)", tensors.size()));
        }
        PTXLAB_THROW(InputError, "{}: no fc1.weight / fc1.bias tensors: not a ptxlab checkpoint? it holds: {}", path,
                     names.empty() ? std::string("no tensors") : fmt::format("{}", fmt::join(names, ", ")));
    }
    if (net.layers() < 2 || net.layers() > 3)
        PTXLAB_THROW(InputError, "{}: found {} layer{} (fc1.weight, fc1.bias, ...); ptxlab models have 2 or 3", path,
                     net.layers(), net.layers() == 1 ? "" : "s");
    // The metadata's "layers" (save_safetensors writes it) names the network the tensors hold.
    const std::string sizes = fmt::format("{}", fmt::join(net.sizes, ","));
    if (auto it = ck.metadata.find("layers"); it != ck.metadata.end() && it->second != sizes)
        PTXLAB_THROW(InputError, "{}: its metadata 'layers' is '{}' but its tensors hold the network {} (fc1.weight [{}, {}], ...)",
                     path, it->second, sizes, net.sizes[1], net.sizes[0]);
    const size_t others = read_extra(tt, ck.extra);
    if (tensors.size() != 2 * net.layers() + others)
        PTXLAB_THROW(InputError, "{}: holds tensors other than fc1..fc{} weights and biases (and optimizer.*)", path,
                     net.layers());
    return ck;
}

NetParams parse_safetensors(const std::string& path, const std::vector<uint8_t>& bytes) {
    return parse_checkpoint(path, bytes).net;
}

Checkpoint load_checkpoint(const std::string& path) {
    // Refuses directories, FIFOs, devices and unreadable files with the reason.
    std::vector<uint8_t> bytes = read_input_file(path, size_t(4) << 30, "checkpoint");
    return parse_checkpoint(path, bytes);
}

NetParams load_safetensors(const std::string& path) { return load_checkpoint(path).net; }

// ---- Checkpoints of any --model --------------------------------------------------------

bool uses_mlp_format(const Model& m) { return m.fc_only() && (m.layers.size() == 2 || m.layers.size() == 3); }

void save_model_safetensors(const std::string& path, const Model& m, const std::vector<float>& params,
                            const std::map<std::string, std::string>& metadata, const ExtraTensors& extra,
                            const std::vector<float>& buffers, int64_t batches_tracked) {
    if (params.size() != m.param_count)
        PTXLAB_THROW(Error, "internal error: {} parameters for the model {} of {}", params.size(), m.text(),
                     m.param_count);
    const std::vector<float> initial = m.initial_buffers();
    const std::vector<float>& bufs = buffers.empty() ? initial : buffers;
    if (bufs.size() != m.buffer_count)
        PTXLAB_THROW(Error, "internal error: {} running statistics for the model {} of {}", bufs.size(), m.text(),
                     m.buffer_count);
    if (uses_mlp_format(m)) {
        NetParams net;
        net.sizes = m.fc_sizes();
        for (const LayerSpec& l : m.layers) {
            net.W.emplace_back(params.begin() + long(l.weight_offset), params.begin() + long(l.bias_offset));
            net.b.emplace_back(params.begin() + long(l.bias_offset), params.begin() + long(l.bias_offset + l.bias_count()));
        }
        save_safetensors(path, net, metadata, extra);
        return;
    }
    std::map<std::string, std::string> meta = metadata;
    meta["format"] = "pt";
    meta["model"] = m.text();
    const Shape3 in = m.layers.front().in;
    meta["input"] = fmt::format("{}x{}x{}", in.c, in.h, in.w);
    std::vector<TensorOut> out;
    for (const LayerSpec& l : m.layers) {
        if (!l.weight_count()) continue;  // a layer without parameters (pool)
        out.push_back({l.name + ".weight", {l.weight_dims.begin(), l.weight_dims.end()}, params.data() + l.weight_offset,
                       l.weight_count()});
        out.push_back({l.name + ".bias", {l.bias_dims.begin(), l.bias_dims.end()}, params.data() + l.bias_offset,
                       l.bias_count()});
    }
    // The bn layers' buffers after the parameters (PyTorch's state_dict has them after each
    // layer's parameters; a reader goes by name).
    for (const LayerSpec& l : m.layers) {
        const LayerRow& row = layer_row(l.kind);
        for (unsigned j = 0; j < row.buffers; ++j)
            out.push_back({l.name + "." + row.buffer_names[j], {l.width}, bufs.data() + l.buffer_offset + j * l.width,
                           l.width});
        if (row.tracks_steps) out.push_back({l.name + ".num_batches_tracked", {}, &batches_tracked, 1, "I64", 8});
    }
    add_extra(out, extra);
    write_safetensors(path, out, meta);
}

namespace {

// "1x28x28" -> {1, 28, 28}: three whole numbers >= 1, the image at most kMaxWidth values (the
// most an fc layer takes), so that no layer's shape or parameter count can overflow.
Shape3 parse_input_shape(const std::string& path, const std::string& text) {
    unsigned v[3] = {0, 0, 0};
    const char *p = text.data(), *end = text.data() + text.size();
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
        if (i > 0) {
            ok = p < end && *p == 'x';
            if (!ok) break;
            ++p;
        }
        auto [next, ec] = std::from_chars(p, end, v[i]);
        ok = ec == std::errc() && v[i] > 0;
        p = next;
    }
    if (!ok || p != end)
        PTXLAB_THROW(InputError, "{}: its metadata 'input' is '{}', not CxHxW (e.g. 1x28x28)", path, text);
    const uint64_t values = uint64_t(v[0]) * v[1] * v[2];
    if (values > kMaxWidth)
        PTXLAB_THROW(InputError, "{}: its metadata 'input' is '{}': {} values an image, at most {}", path, text, values,
                     kMaxWidth);
    return {v[0], v[1], v[2]};
}

// The flat parameters of `m` (and its bn buffers) from the tensors named after its layers, each
// of the exact shape, into ck.
void read_model_tensors(const std::string& path, const TensorTable& tt, const Model& m, ModelCheckpoint& ck) {
    // Every tensor is checked before the parameters are allocated: a spec's parameter count is
    // only as large as the file's tensors once their shapes match.
    struct Take {
        const TensorSpan* span;
        size_t offset;
        bool buffer;  // into the running statistics, not the parameters
    };
    std::vector<Take> takes;
    std::set<std::string> names;
    auto take = [&](const std::string& name, const std::vector<unsigned>& dims, size_t offset, bool buffer = false) {
        auto it = tt.tensors.find(name);
        const std::vector<uint64_t> want(dims.begin(), dims.end());
        if (it == tt.tensors.end())
            PTXLAB_THROW(InputError, "{}: the model '{}' needs the tensor '{}' [{}], which the file lacks", path,
                         m.text(), name, fmt::join(want, ", "));
        if (it->second.shape != want)
            PTXLAB_THROW(InputError, "{}: tensor '{}' has the shape [{}]; the model '{}' needs [{}]", path, name,
                         fmt::join(it->second.shape, ", "), m.text(), fmt::join(want, ", "));
        takes.push_back({&it->second, offset, buffer});
        names.insert(name);
    };
    std::vector<const TensorSpan*> counters;
    for (const LayerSpec& l : m.layers) {
        if (l.weight_count()) {  // a layer with parameters (not a pool)
            take(l.name + ".weight", l.weight_dims, l.weight_offset);
            take(l.name + ".bias", l.bias_dims, l.bias_offset);
        }
        const LayerRow& row = layer_row(l.kind);
        for (unsigned j = 0; j < row.buffers; ++j)
            take(l.name + "." + row.buffer_names[j], {l.width}, l.buffer_offset + j * size_t(l.width), true);
        if (!row.tracks_steps) continue;
        take(l.name + ".num_batches_tracked", {}, 0, true);
        counters.push_back(takes.back().span);
        takes.pop_back();
    }
    for (const auto& [name, f] : tt.tensors)
        if (!name.starts_with("optimizer.") && !names.count(name))
            PTXLAB_THROW(InputError, "{}: tensor '{}' is not a parameter of the model '{}'", path, name, m.text());
    ck.params.assign(m.param_count, 0.0f);
    ck.buffers.assign(m.buffer_count, 0.0f);
    for (const Take& t : takes) {
        const std::vector<float> v = read_floats(tt, *t.span);
        std::copy(v.begin(), v.end(), (t.buffer ? ck.buffers : ck.params).begin() + long(t.offset));
    }
    // Every bn layer counts the same training steps.
    for (size_t i = 0; i < counters.size(); ++i) {
        int64_t n = 0;
        std::memcpy(&n, tt.data + counters[i]->begin, 8);
        if (n < 0 || (i > 0 && n != ck.batches_tracked))
            PTXLAB_THROW(InputError, "{}: the bn layers' num_batches_tracked disagree or are negative ({} and {}); "
                                     "each counts the run's training steps",
                         path, ck.batches_tracked, n);
        ck.batches_tracked = n;
    }
}

}  // namespace

ModelCheckpoint parse_model_checkpoint(const std::string& path, const std::vector<uint8_t>& bytes) {
    TensorTable tt = read_tensor_table(path, bytes);
    ModelCheckpoint ck;
    ck.metadata = tt.metadata;
    auto spec = tt.metadata.find("model");
    if (spec == tt.metadata.end()) {
        // An MLP checkpoint (fc1, fc2, ...; metadata "layers"): the fc-only model of its sizes.
        Checkpoint mlp = parse_checkpoint(path, bytes);
        std::string text;
        for (size_t l = 1; l < mlp.net.sizes.size(); ++l) text += fmt::format("{}fc{}", l > 1 ? "," : "", mlp.net.sizes[l]);
        const Shape3 in = mlp.net.sizes[0] == kMnistInput.size() ? kMnistInput : Shape3{1, 1, mlp.net.sizes[0]};
        try {
            ck.model = parse_model(text, in);
        } catch (const InputError& e) {
            PTXLAB_THROW(InputError, "{}: its tensors are not a model ptxlab takes: {}", path, e.what());
        }
        for (size_t l = 0; l < mlp.net.layers(); ++l) {
            ck.params.insert(ck.params.end(), mlp.net.W[l].begin(), mlp.net.W[l].end());
            ck.params.insert(ck.params.end(), mlp.net.b[l].begin(), mlp.net.b[l].end());
        }
        ck.extra = std::move(mlp.extra);
        return ck;
    }
    if (auto it = tt.metadata.find("layers"); it != tt.metadata.end())
        PTXLAB_THROW(InputError, "{}: its metadata names both the model '{}' and the layers '{}'; a checkpoint holds "
                                 "one network",
                     path, spec->second, it->second);
    Shape3 in = kMnistInput;
    if (auto it = tt.metadata.find("input"); it != tt.metadata.end()) in = parse_input_shape(path, it->second);
    try {
        ck.model = parse_model(spec->second, in);
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{}: its metadata 'model' is not a model: {}", path, e.what());
    }
    read_model_tensors(path, tt, ck.model, ck);
    read_extra(tt, ck.extra);
    return ck;
}

ModelCheckpoint load_model_checkpoint(const std::string& path) {
    std::vector<uint8_t> bytes = read_input_file(path, size_t(4) << 30, "checkpoint");
    return parse_model_checkpoint(path, bytes);
}

}  // namespace ptxlab
