#include "safetensors.hpp"

#include "files.hpp"

#include "error.hpp"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace fs = std::filesystem;

namespace ptxlab {

namespace {

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (static_cast<unsigned char>(c) < 0x20) o += fmt::format("\\u{:04x}", c);
        else o += c;
    }
    return o;
}

// A minimal JSON reader for safetensors headers: objects, arrays, strings,
// non-negative integers. Anything else is an error with its offset.
struct Json {
    enum Kind { Object, Array, String, Number } kind = Number;
    std::vector<std::string> keys;  // an object's member names; items[i] is the value of keys[i]
    std::vector<Json> items;        // an array's items, or an object's values
    std::string str;
    uint64_t num = 0;
    const Json* get(const std::string& key) const;
};

const Json* Json::get(const std::string& key) const {
    for (size_t i = 0; i < keys.size(); ++i)
        if (keys[i] == key) return &items[i];
    return nullptr;
}

class JsonParser {
public:
    JsonParser(const std::string& path, std::string_view text) : path_(path), t_(text) {}
    Json parse_document() {
        Json j = value(0);
        skip_ws();
        if (i_ != t_.size()) fail("unexpected text after the header object");
        return j;
    }

private:
    [[noreturn]] void fail(const std::string& what) {
        PTXLAB_THROW(InputError, "{}: bad safetensors header at byte {}: {}", path_, i_ + 8, what);
    }
    void skip_ws() {
        while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t')) ++i_;
    }
    void expect(char c) {
        skip_ws();
        if (i_ >= t_.size() || t_[i_] != c) fail(fmt::format("expected '{}'", c));
        ++i_;
    }
    Json value(int depth) {
        if (depth > 8) fail("nested too deeply");
        skip_ws();
        if (i_ >= t_.size()) fail("unexpected end");
        Json j;
        char c = t_[i_];
        if (c == '{') {
            j.kind = Json::Object;
            ++i_;
            skip_ws();
            if (i_ < t_.size() && t_[i_] == '}') {
                ++i_;
                return j;
            }
            for (;;) {
                std::string k = string();
                expect(':');
                j.keys.push_back(k);
                j.items.push_back(value(depth + 1));
                skip_ws();
                if (i_ < t_.size() && t_[i_] == ',') {
                    ++i_;
                    continue;
                }
                expect('}');
                return j;
            }
        }
        if (c == '[') {
            j.kind = Json::Array;
            ++i_;
            skip_ws();
            if (i_ < t_.size() && t_[i_] == ']') {
                ++i_;
                return j;
            }
            for (;;) {
                j.items.push_back(value(depth + 1));
                skip_ws();
                if (i_ < t_.size() && t_[i_] == ',') {
                    ++i_;
                    continue;
                }
                expect(']');
                return j;
            }
        }
        if (c == '"') {
            j.kind = Json::String;
            j.str = string();
            return j;
        }
        if (c >= '0' && c <= '9') {
            j.kind = Json::Number;
            while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
                if (j.num > (UINT64_MAX - 9) / 10) fail("number too large");
                j.num = j.num * 10 + uint64_t(t_[i_++] - '0');
            }
            return j;
        }
        fail(fmt::format("unexpected character '{}'", c));
    }
    std::string string() {
        skip_ws();
        if (i_ >= t_.size() || t_[i_] != '"') fail("expected a string");
        ++i_;
        std::string s;
        while (i_ < t_.size() && t_[i_] != '"') {
            char c = t_[i_++];
            if (c == '\\') {
                if (i_ >= t_.size()) break;
                char e = t_[i_++];
                if (e == 'u') {
                    if (i_ + 4 > t_.size()) fail("short \\u escape");
                    s += '?';  // names in our files are ASCII; keep a placeholder for others
                    i_ += 4;
                } else {
                    s += e == 'n' ? '\n' : e == 't' ? '\t' : e;
                }
            } else {
                s += c;
            }
        }
        if (i_ >= t_.size()) fail("unterminated string");
        ++i_;
        return s;
    }
    std::string path_;
    std::string_view t_;
    size_t i_ = 0;
};

}  // namespace

void save_safetensors(const std::string& path, const NetParams& net, const std::map<std::string, std::string>& metadata,
                      const ExtraTensors& extra) {
    // Header: metadata, then the tensors in order fc1.weight, fc1.bias, fc2.weight, ...
    std::string header = "{\"__metadata__\":{";
    std::map<std::string, std::string> meta = metadata;
    meta["format"] = "pt";
    std::string layers;
    for (auto n : net.sizes) layers += (layers.empty() ? "" : ",") + std::to_string(n);
    meta["layers"] = layers;
    bool first = true;
    for (const auto& [k, v] : meta) {
        header += fmt::format("{}\"{}\":\"{}\"", first ? "" : ",", json_escape(k), json_escape(v));
        first = false;
    }
    header += "}";
    uint64_t offset = 0;
    for (size_t l = 0; l < net.layers(); ++l) {
        const uint64_t wb = net.W[l].size() * 4, bb = net.b[l].size() * 4;
        header += fmt::format(",\"fc{}.weight\":{{\"dtype\":\"F32\",\"shape\":[{},{}],\"data_offsets\":[{},{}]}}", l + 1,
                              net.sizes[l + 1], net.sizes[l], offset, offset + wb);
        offset += wb;
        header += fmt::format(",\"fc{}.bias\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", l + 1,
                              net.sizes[l + 1], offset, offset + bb);
        offset += bb;
    }
    for (const auto& [name, v] : extra) {
        if (!name.starts_with("optimizer."))
            PTXLAB_THROW(Error, "internal error: extra checkpoint tensor '{}' is not named optimizer.*", name);
        header += fmt::format(",\"{}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                              json_escape(name), v.size(), offset, offset + v.size() * 4);
        offset += v.size() * 4;
    }
    header += "}";
    while (header.size() % 8) header += ' ';  // the data starts 8-byte aligned

    const std::string tmp = fmt::format("{}.tmp-{}", path, getpid());
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) PTXLAB_THROW(InputError, "--save: cannot write '{}'", tmp);
        uint8_t len[8];
        for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
        f.write(reinterpret_cast<const char*>(len), 8);
        f.write(header.data(), static_cast<std::streamsize>(header.size()));
        static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
        for (size_t l = 0; l < net.layers(); ++l) {
            f.write(reinterpret_cast<const char*>(net.W[l].data()), static_cast<std::streamsize>(net.W[l].size() * 4));
            f.write(reinterpret_cast<const char*>(net.b[l].data()), static_cast<std::streamsize>(net.b[l].size() * 4));
        }
        for (const auto& [name, v] : extra)
            f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
        f.flush();
        if (!f) {
            std::remove(tmp.c_str());
            PTXLAB_THROW(Error, "--save: writing '{}' failed (disk full?)", tmp);
        }
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) {
        std::remove(tmp.c_str());
        PTXLAB_THROW(Error, "--save: cannot rename '{}' to '{}': {}", tmp, path, ec.message());
    }
}

namespace {

// A tensor's shape and its bytes [begin, end) in the data section.
struct TensorSpan {
    std::vector<uint64_t> shape;
    uint64_t begin, end;
};

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

Checkpoint parse_checkpoint(const std::string& path, const std::vector<uint8_t>& bytes) {
    if (bytes.size() < 8)
        PTXLAB_THROW(InputError, "{}: {} bytes is too short for a safetensors file (8-byte header length)", path,
                     bytes.size());
    uint64_t hlen = 0;
    for (int i = 0; i < 8; ++i) hlen |= uint64_t(bytes[size_t(i)]) << (8 * i);
    if (hlen < 2 || hlen > 100'000'000 || hlen > bytes.size() - 8)
        PTXLAB_THROW(InputError, "{}: header length {} does not fit in the file ({} bytes); not a safetensors file?",
                     path, hlen, bytes.size());
    std::string_view htext(reinterpret_cast<const char*>(bytes.data() + 8), size_t(hlen));
    Json root = JsonParser(path, htext).parse_document();
    if (root.kind != Json::Object) PTXLAB_THROW(InputError, "{}: the header is not a JSON object", path);
    const uint64_t data_size = bytes.size() - 8 - hlen;
    const uint8_t* data = bytes.data() + 8 + hlen;

    std::map<std::string, TensorSpan> tensors;
    Checkpoint ck;
    for (size_t m = 0; m < root.keys.size(); ++m) {
        const std::string& name = root.keys[m];
        const Json& t = root.items[m];
        if (name == "__metadata__") {
            if (t.kind != Json::Object) PTXLAB_THROW(InputError, "{}: __metadata__ is not an object", path);
            for (size_t i = 0; i < t.keys.size(); ++i)
                if (t.items[i].kind == Json::String) ck.metadata[t.keys[i]] = t.items[i].str;
            continue;
        }
        auto bad = [&](const std::string& what) {
            PTXLAB_THROW(InputError, "{}: tensor '{}': {}", path, name, what);
        };
        if (t.kind != Json::Object) bad("entry is not an object");
        const Json* dtype = t.get("dtype");
        const Json* shape = t.get("shape");
        const Json* offs = t.get("data_offsets");
        if (!dtype || dtype->kind != Json::String) bad("no dtype");
        if (dtype->str != "F32") bad(fmt::format("dtype {} is not supported (ptxlab checkpoints are F32)", dtype->str));
        if (!shape || shape->kind != Json::Array) bad("no shape");
        if (!offs || offs->kind != Json::Array || offs->items.size() != 2) bad("data_offsets must be [begin, end]");
        TensorSpan f;
        uint64_t count = 1;
        for (const auto& d : shape->items) {
            if (d.kind != Json::Number) bad("shape holds a non-number");
            f.shape.push_back(d.num);
            if (d.num > (1u << 30)) bad("dimension too large");
            count *= d.num;
        }
        if (offs->items[0].kind != Json::Number || offs->items[1].kind != Json::Number) bad("bad data_offsets");
        f.begin = offs->items[0].num;
        f.end = offs->items[1].num;
        if (f.begin > f.end || f.end > data_size)
            bad(fmt::format("data_offsets [{}, {}] lie outside the {} data bytes (truncated file?)", f.begin, f.end,
                            data_size));
        if (f.end - f.begin != count * 4)
            bad(fmt::format("holds {} bytes but its shape needs {}", f.end - f.begin, count * 4));
        if (tensors.count(name)) bad("appears twice in the header");
        tensors[name] = f;
    }
    check_coverage(path, tensors, data_size);

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
        auto read = [&](const TensorSpan& f) {
            std::vector<float> v((f.end - f.begin) / 4);
            std::memcpy(v.data(), data + f.begin, f.end - f.begin);
            return v;
        };
        net.W.push_back(read(w->second));
        net.b.push_back(read(b->second));
    }
    if (net.layers() < 2 || net.layers() > 3)
        PTXLAB_THROW(InputError, "{}: found {} layers (fc1.weight, fc1.bias, ...); ptxlab models have 2 or 3", path,
                     net.layers());
    size_t others = 0;
    for (const auto& [name, f] : tensors) {
        if (!name.starts_with("optimizer.")) continue;
        std::vector<float> v((f.end - f.begin) / 4);
        std::memcpy(v.data(), data + f.begin, f.end - f.begin);
        ck.extra[name] = std::move(v);
        ++others;
    }
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

}  // namespace ptxlab
