// Small helpers shared by the tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace ptxlab::test {

// A fresh temporary directory, removed at the end of the test.
struct TempDir {
    std::filesystem::path path;
    TempDir() {
        char tmpl[] = "/tmp/ptxlab-test-XXXXXX";
        path = mkdtemp(tmpl);
    }
    TempDir(TempDir&& o) noexcept : path(std::move(o.path)) { o.path.clear(); }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
    std::string file(const std::string& name) const { return (path / name).string(); }
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
}

inline void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A tiny dataset in MNIST's format (28x28 images, labels 0..9, `count` of each split) in `dir`:
// enough for a command to get past its data checks on a machine without MNIST.
inline void write_tiny_mnist(const std::string& dir, uint32_t count = 64) {
    auto header = [](uint8_t dims, std::vector<uint32_t> sizes) {
        std::vector<uint8_t> h = {0, 0, 0x08, dims};
        for (uint32_t d : sizes)
            for (int s = 24; s >= 0; s -= 8) h.push_back(uint8_t(d >> s));
        return h;
    };
    for (const char* split : {"train", "t10k"}) {
        std::vector<uint8_t> images = header(3, {count, 28, 28}), labels = header(1, {count});
        for (uint32_t i = 0; i < count * 28 * 28; ++i) images.push_back(uint8_t(i * 2654435761u >> 24));
        for (uint32_t i = 0; i < count; ++i) labels.push_back(uint8_t(i % 10));
        write_bytes(dir + "/" + split + "-images-idx3-ubyte", images);
        write_bytes(dir + "/" + split + "-labels-idx1-ubyte", labels);
    }
}

// A safetensors file from its header's JSON text and `data_bytes` zero bytes of data: the
// 8-byte little-endian header length, the header, the data.
inline std::vector<uint8_t> safetensors_bytes(const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
    for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
    std::copy(header.begin(), header.end(), b.begin() + 8);
    return b;
}

// `text` with the first `from` replaced by `to` (which must be there).
inline std::string edited(std::string text, const std::string& from, const std::string& to) {
    const size_t pos = text.find(from);
    if (pos == std::string::npos) throw std::logic_error("edited: '" + from + "' is not in the text");
    return text.replace(pos, from.size(), to);
}

struct RunResult {
    int code = -1;
    std::string output;  // stdout and stderr together
};

// Runs a shell command line and captures its output and exit code.
inline RunResult run_command(const std::string& cmd) {
    RunResult r;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    int status = pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

inline std::string ptxlab_cmd(const std::string& args) { return std::string(PTXLAB_BINARY) + " " + args; }
inline std::string fixture(const std::string& rel) { return std::string(PTXLAB_FIXTURES) + "/" + rel; }

}  // namespace ptxlab::test
