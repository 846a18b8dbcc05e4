#include "idx.hpp"

#include "error.hpp"
#include "files.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <unistd.h>

#ifndef PTXLAB_SOURCE_DIR
#define PTXLAB_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;

namespace ptxlab {

namespace {

constexpr uint64_t kMaxIdxBytes = 4ull << 30;  // refuse (decompressed) files over 4 GiB

uint32_t be32(const uint8_t* p) {
    return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// How many bytes the IDX file whose first bytes are `head` can hold: its header and the data its
// dimensions describe, and one byte more (so that parse_idx sees, and names, data past the end).
// 0 once the header is known to be bad (parse_idx says why), and nothing while it is incomplete.
std::optional<uint64_t> idx_read_bound(const std::vector<uint8_t>& head) {
    if (head.size() < 4) return std::nullopt;
    const unsigned ndims = head[3];
    if (head[0] != 0 || head[1] != 0 || head[2] != 0x08 || ndims == 0 || ndims > 4) return 0;
    const size_t header = 4 + 4 * size_t(ndims);
    if (head.size() < header) return std::nullopt;
    uint64_t count = 1;
    for (unsigned i = 0; i < ndims; ++i) {
        count *= std::max<uint32_t>(be32(&head[4 + 4 * i]), 1);
        if (count > kMaxIdxBytes) return 0;
    }
    return header + count + 1;
}

// Reads a file, gzip or plain. A gzip file inflates no further than its IDX header promises:
// a small file that inflates to gigabytes (a "gzip bomb") is refused after reading what the
// header describes, in the time and memory the real data would take.
std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
    // Refuses directories, FIFOs, devices and unreadable files, saying which.
    int fd = open_input_file(path);
    gzFile f = gzdopen(fd, "rb");  // reads gzip and plain files alike; owns fd from here
    if (!f) {
        ::close(fd);
        PTXLAB_THROW(InputError, "{}: cannot open file", path);
    }
    std::vector<uint8_t> out;
    std::optional<uint64_t> bound;
    bool plain = false;  // not gzip: read whole (its size is what it is), so parse_idx can count extra bytes
    uint8_t buf[1 << 16];
    for (;;) {
        size_t want = sizeof buf;
        if (plain) {
            if (out.size() > kMaxIdxBytes) {
                gzclose(f);
                PTXLAB_THROW(InputError, "{}: more than {} GiB of data; refusing to read it", path, kMaxIdxBytes >> 30);
            }
        } else if (!bound) want = out.size() < 4 ? 4 - out.size() : 4 + 4 * size_t(out[3]) - out.size();
        else want = size_t(std::min<uint64_t>(want, *bound - out.size()));
        if (want == 0 && bound && *bound > 0) {
            gzclose(f);
            PTXLAB_THROW(InputError, "{}: more data than its header describes ({} bytes of header and data); "
                                     "refusing to read on", path, *bound - 1);
        }
        if (want == 0) break;  // a bad header: parse_idx says why
        int n = gzread(f, buf, static_cast<unsigned>(want));
        if (n < 0) {
            int code = 0;
            std::string msg = gzerror(f, &code);
            gzclose(f);
            PTXLAB_THROW(InputError, "{}: corrupt gzip data ({})", path, msg);
        }
        if (n == 0) break;
        out.insert(out.end(), buf, buf + n);
        plain = plain || gzdirect(f);
        if (!plain && !bound) {
            bound = idx_read_bound(out);
            if (bound && *bound < out.size()) break;  // a bad header: parse_idx says why
        }
    }
    // What stopped early is not at the end of its stream: only a stream read to its end is
    // checked by gzclose (a stream cut short reads as a clean end of file; gzclose reports it).
    const bool whole = gzeof(f);
    int close = gzclose(f);
    if (whole && close != Z_OK)
        PTXLAB_THROW(InputError, "{}: corrupt or truncated gzip data (zlib error {})", path, close);
    return out;
}

}  // namespace

IdxArray parse_idx(const std::string& path, const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) PTXLAB_THROW(InputError, "{}: file is empty", path);
    if (bytes.size() < 4)
        PTXLAB_THROW(InputError, "{}: truncated header ({} bytes; an IDX header is at least 4)", path, bytes.size());
    if (bytes[0] != 0 || bytes[1] != 0)
        PTXLAB_THROW(InputError, "{}: bad magic number 0x{:02x}{:02x}{:02x}{:02x} (an IDX file starts with 00 00)",
                     path, bytes[0], bytes[1], bytes[2], bytes[3]);
    if (bytes[2] != 0x08)
        PTXLAB_THROW(InputError, "{}: element type 0x{:02x} is not supported (ptxlab reads unsigned bytes, 0x08)", path,
                     bytes[2]);
    const unsigned ndims = bytes[3];
    if (ndims == 0 || ndims > 4)
        PTXLAB_THROW(InputError, "{}: {} dimensions in the magic number (expected 1 to 4)", path, ndims);
    const size_t header = 4 + 4 * size_t(ndims);
    if (bytes.size() < header)
        PTXLAB_THROW(InputError, "{}: truncated header ({} bytes; {} dimensions need {})", path, bytes.size(), ndims,
                     header);
    IdxArray a;
    a.path = path;
    uint64_t count = 1;
    for (unsigned i = 0; i < ndims; ++i) {
        uint32_t d = be32(&bytes[4 + 4 * i]);
        if (d == 0) PTXLAB_THROW(InputError, "{}: dimension {} is 0", path, i);
        a.dims.push_back(d);
        count *= d;
        if (count > kMaxIdxBytes) PTXLAB_THROW(InputError, "{}: dimensions give over {} GiB", path, kMaxIdxBytes >> 30);
    }
    const uint64_t have = bytes.size() - header;
    if (have < count)
        PTXLAB_THROW(InputError, "{}: truncated: dimensions need {} bytes of data, the file has {}", path, count, have);
    if (have > count)
        PTXLAB_THROW(InputError, "{}: {} unexpected bytes after the {} bytes of data the dimensions describe", path,
                     have - count, count);
    a.data.assign(bytes.begin() + static_cast<long>(header), bytes.end());
    return a;
}

IdxArray read_idx(const std::string& path) { return parse_idx(path, read_maybe_gzip(path)); }

Split make_split(const IdxArray& images, const IdxArray& labels) {
    if (images.dims.size() != 3)
        PTXLAB_THROW(InputError, "{}: image file has {} dimensions (expected 3: count x rows x cols)", images.path,
                     images.dims.size());
    if (labels.dims.size() != 1)
        PTXLAB_THROW(InputError, "{}: label file has {} dimensions (expected 1: count)", labels.path,
                     labels.dims.size());
    if (images.dims[0] != labels.dims[0])
        PTXLAB_THROW(InputError, "{} holds {} images but {} holds {} labels", images.path, images.dims[0],
                     labels.path, labels.dims[0]);
    for (size_t i = 0; i < labels.data.size(); ++i)
        if (labels.data[i] >= kClasses)
            PTXLAB_THROW(InputError, "{}: label {} at index {} is out of range (labels are 0..{})", labels.path,
                         labels.data[i], i, kClasses - 1);
    Split s;
    s.count = images.dims[0];
    s.rows = images.dims[1];
    s.cols = images.dims[2];
    s.labels = labels.data;
    s.images.resize(images.data.size());
    for (size_t i = 0; i < images.data.size(); ++i) s.images[i] = float(images.data[i]) / 255.0f;
    return s;
}

namespace {
// Reads DIR/BASE or DIR/BASE.gz. When both exist, both are read and must hold the same IDX data.
IdxArray read_one(const std::string& dir, const std::string& base, std::vector<std::string>& files) {
    std::error_code ec;
    const std::string raw = (fs::path(dir) / base).string(), gz = raw + ".gz";
    // symlink_status: a broken link or a FIFO still "exists" here and is refused with its reason when opened.
    const bool have_raw = fs::exists(fs::symlink_status(raw, ec)), have_gz = fs::exists(fs::symlink_status(gz, ec));
    if (!have_raw && !have_gz)
        PTXLAB_THROW(InputError,
                     "{}: no {} (or {}.gz) here. Fetch MNIST with `tools/fetch_mnist.sh` (it fills data/mnist), "
                     "or point --data at a directory holding the four IDX files",
                     dir, base, base);
    if (have_raw && have_gz) {
        IdxArray a = read_idx(raw), b = read_idx(gz);
        if (a.dims != b.dims || a.data != b.data) {
            size_t i = 0;
            while (i < a.data.size() && i < b.data.size() && a.data[i] == b.data[i]) ++i;
            PTXLAB_THROW(InputError,
                         "{} and {} both exist and hold different data ({} vs {} elements, first difference at "
                         "element {}); remove the stale one",
                         raw, gz, a.data.size(), b.data.size(), i);
        }
        files.push_back(raw + " (the same data as " + base + ".gz)");
        return a;
    }
    files.push_back(have_raw ? raw : gz);
    return read_idx(have_raw ? raw : gz);
}
}  // namespace

Dataset load_dataset(const std::string& dir) {
    std::error_code ec;
    if (!fs::exists(dir, ec))
        PTXLAB_THROW(InputError,
                     "data directory '{}' does not exist. Fetch MNIST with `tools/fetch_mnist.sh` (it fills "
                     "data/mnist), or pass --data DIR",
                     dir);
    require_directory(dir, "data directory");
    Dataset d;
    d.dir = dir;
    auto images = read_one(dir, "train-images-idx3-ubyte", d.files);
    auto labels = read_one(dir, "train-labels-idx1-ubyte", d.files);
    d.train = make_split(images, labels);
    images = read_one(dir, "t10k-images-idx3-ubyte", d.files);
    labels = read_one(dir, "t10k-labels-idx1-ubyte", d.files);
    d.test = make_split(images, labels);
    if (d.train.rows != d.test.rows || d.train.cols != d.test.cols)
        PTXLAB_THROW(InputError, "{}: training images are {}x{} but test images are {}x{}", dir, d.train.rows,
                     d.train.cols, d.test.rows, d.test.cols);
    return d;
}

std::string default_data_dir() {
    if (const char* e = std::getenv("PTXLAB_DATA_DIR"); e && *e) return e;
    return PTXLAB_SOURCE_DIR "/data/mnist";
}

}  // namespace ptxlab
