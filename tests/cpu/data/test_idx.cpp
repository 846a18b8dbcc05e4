// IDX reader: good files (raw and gzip) and each kind of bad file.
#include "../../helpers.hpp"
#include "error.hpp"
#include "idx.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

std::vector<uint8_t> idx_bytes(uint8_t type, std::vector<uint32_t> dims, const std::vector<uint8_t>& data) {
    std::vector<uint8_t> b = {0, 0, type, uint8_t(dims.size())};
    for (uint32_t d : dims) {
        b.push_back(uint8_t(d >> 24));
        b.push_back(uint8_t(d >> 16));
        b.push_back(uint8_t(d >> 8));
        b.push_back(uint8_t(d));
    }
    b.insert(b.end(), data.begin(), data.end());
    return b;
}

std::vector<uint8_t> random_bytes(Rng& rng, size_t n, unsigned mod = 256) {
    std::vector<uint8_t> v(n);
    for (auto& x : v) x = uint8_t(rng.below(mod));
    return v;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
}

// Writes a small MNIST-format dataset (n train, m test images of r x c) to dir.
void write_dataset(const std::string& dir, Rng& rng, uint32_t n, uint32_t m, uint32_t r, uint32_t c, bool gz) {
    auto put = [&](const std::string& name, const std::vector<uint8_t>& b) {
        if (gz) write_gz(dir + "/" + name + ".gz", b);
        else write_bytes(dir + "/" + name, b);
    };
    put("train-images-idx3-ubyte", idx_bytes(8, {n, r, c}, random_bytes(rng, size_t(n) * r * c)));
    put("train-labels-idx1-ubyte", idx_bytes(8, {n}, random_bytes(rng, n, 10)));
    put("t10k-images-idx3-ubyte", idx_bytes(8, {m, r, c}, random_bytes(rng, size_t(m) * r * c)));
    put("t10k-labels-idx1-ubyte", idx_bytes(8, {m}, random_bytes(rng, m, 10)));
}

std::string error_of(const std::string& path) {
    try {
        read_idx(path);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("idx: a raw file and its gzip twin read back the same bytes and dimensions") {
    TempDir t;
    Rng rng(11);
    auto data = random_bytes(rng, 5 * 3 * 4);
    auto bytes = idx_bytes(8, {5, 3, 4}, data);
    write_bytes(t.file("a"), bytes);
    write_gz(t.file("a.gz"), bytes);
    for (const char* name : {"a", "a.gz"}) {
        IdxArray a = read_idx(t.file(name));
        CHECK(a.dims == std::vector<uint32_t>{5, 3, 4});
        CHECK(a.data == data);
    }
}

TEST_CASE("idx: a dataset directory loads, scaled to [0, 1], raw or gzip") {
    for (bool gz : {false, true}) {
        TempDir t;
        Rng rng(gz ? 5 : 6);
        write_dataset(t.path.string(), rng, 17, 9, 3, 5, gz);
        Dataset d = load_dataset(t.path.string());
        CHECK(d.train.count == 17);
        CHECK(d.test.count == 9);
        CHECK(d.train.dim() == 15);
        REQUIRE(d.train.images.size() == 17 * 15);
        IdxArray raw = read_idx(t.file(gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte"));
        for (size_t i = 0; i < raw.data.size(); ++i) REQUIRE(d.train.images[i] == float(raw.data[i]) / 255.0f);
    }
}

TEST_CASE("idx: bad files are refused with the file and the problem named") {
    TempDir t;
    Rng rng(3);
    auto good = idx_bytes(8, {4, 2, 2}, random_bytes(rng, 16));

    write_bytes(t.file("empty"), {});
    CHECK(error_of(t.file("empty")).find("empty") != std::string::npos);

    auto truncated = good;
    truncated.resize(truncated.size() - 3);
    write_bytes(t.file("truncated"), truncated);
    CHECK(error_of(t.file("truncated")).find("truncated: dimensions need 16 bytes of data, the file has 13") !=
          std::string::npos);

    auto magic = good;
    magic[0] = 0x1f;
    magic[1] = 0x9d;
    write_bytes(t.file("magic"), magic);
    CHECK(error_of(t.file("magic")).find("bad magic number") != std::string::npos);

    auto type = good;
    type[2] = 0x0D;  // float32 elements
    write_bytes(t.file("type"), type);
    CHECK(error_of(t.file("type")).find("element type 0x0d") != std::string::npos);

    write_bytes(t.file("zero_dim"), idx_bytes(8, {4, 0, 2}, {}));
    CHECK(error_of(t.file("zero_dim")).find("dimension 1 is 0") != std::string::npos);

    auto extra = good;
    extra.push_back(7);
    write_bytes(t.file("extra"), extra);
    CHECK(error_of(t.file("extra")).find("1 unexpected bytes") != std::string::npos);

    CHECK(error_of(t.file("missing")).find("does not exist") != std::string::npos);
    // Paths that are not regular files are named for what they are, and a FIFO does not hang.
    std::filesystem::create_directory(t.file("dir"));
    CHECK(error_of(t.file("dir")).find("dir: is a directory") != std::string::npos);
    REQUIRE(mkfifo(t.file("fifo").c_str(), 0600) == 0);
    CHECK(error_of(t.file("fifo")).find("fifo: is a FIFO, not a regular file") != std::string::npos);
    CHECK(error_of("/dev/null").find("/dev/null: is a character device, not a regular file") != std::string::npos);
    if (geteuid() != 0) {  // root reads anything
        write_bytes(t.file("secret"), good);
        std::filesystem::permissions(t.file("secret"), std::filesystem::perms::none);
        CHECK(error_of(t.file("secret")).find("secret: permission denied") != std::string::npos);
    }
    CHECK(error_of(t.file("missing")).find(t.file("missing")) != std::string::npos);

    // A gzip stream cut in half.
    write_gz(t.file("cut.gz"), good);
    std::ifstream in(t.file("cut.gz"), std::ios::binary);
    std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    gz.resize(gz.size() / 2);
    write_bytes(t.file("cut.gz"), gz);
    CHECK(error_of(t.file("cut.gz")).find("gzip") != std::string::npos);
}

TEST_CASE("idx: datasets with mismatched parts are refused") {
    Rng rng(9);
    auto expect_error = [&](auto mutate, const std::string& needle) {
        TempDir t;
        write_dataset(t.path.string(), rng, 6, 4, 2, 3, false);
        mutate(t);
        std::string msg;
        try {
            load_dataset(t.path.string());
        } catch (const InputError& e) {
            msg = e.what();
        }
        CAPTURE(msg);
        CHECK(msg.find(needle) != std::string::npos);
    };
    // Count mismatch between images and labels.
    expect_error([&](TempDir& t) { write_bytes(t.file("train-labels-idx1-ubyte"), idx_bytes(8, {5}, random_bytes(rng, 5, 10))); },
                 "holds 6 images but");
    // A label out of range.
    expect_error([&](TempDir& t) { write_bytes(t.file("t10k-labels-idx1-ubyte"), idx_bytes(8, {4}, {1, 2, 10, 3})); },
                 "label 10 at index 2 is out of range");
    // Wrong dimensions: images given as a 2-D array.
    expect_error([&](TempDir& t) { write_bytes(t.file("train-images-idx3-ubyte"), idx_bytes(8, {6, 6}, random_bytes(rng, 36))); },
                 "image file has 2 dimensions");
    // Labels given as 2-D.
    expect_error([&](TempDir& t) { write_bytes(t.file("train-labels-idx1-ubyte"), idx_bytes(8, {6, 1}, random_bytes(rng, 6, 10))); },
                 "label file has 2 dimensions");
    // Test images of another size than the training images.
    expect_error([&](TempDir& t) { write_bytes(t.file("t10k-images-idx3-ubyte"), idx_bytes(8, {4, 3, 3}, random_bytes(rng, 36))); },
                 "training images are 2x3 but test images are 3x3");
    // A raw file and its .gz that disagree: which one is meant is unknown.
    expect_error([&](TempDir& t) { write_gz(t.file("train-labels-idx1-ubyte.gz"), idx_bytes(8, {6}, {0, 1, 2, 3, 4, 5})); },
                 "train-labels-idx1-ubyte.gz both exist and hold different data");
    // A missing file says how to fetch the data.
    expect_error([&](TempDir& t) { std::filesystem::remove(t.file("t10k-labels-idx1-ubyte")); }, "tools/fetch_mnist.sh");
}

TEST_CASE("idx: a raw file and an identical .gz are both read, and the files read are named") {
    Rng rng(4);
    TempDir t;
    write_dataset(t.path.string(), rng, 6, 4, 2, 3, false);
    std::ifstream in(t.file("t10k-images-idx3-ubyte"), std::ios::binary);
    std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write_gz(t.file("t10k-images-idx3-ubyte.gz"), raw);
    Dataset d = load_dataset(t.path.string());
    REQUIRE(d.files.size() == 4);
    CHECK(d.files[0] == t.file("train-images-idx3-ubyte"));
    CHECK(d.files[2] == t.file("t10k-images-idx3-ubyte") + " (the same data as t10k-images-idx3-ubyte.gz)");
}

TEST_CASE("idx: a non-MNIST dataset of the right format is accepted") {
    TempDir t;
    Rng rng(21);
    write_dataset(t.path.string(), rng, 12, 5, 8, 8, true);  // 8x8 images
    Dataset d = load_dataset(t.path.string());
    CHECK(d.train.rows == 8);
    CHECK(d.train.cols == 8);
    CHECK(d.test.count == 5);
}

TEST_CASE("rng: below() keeps the draws of plain rejection sampling, and shuffle is a permutation") {
    // The plain form: limit computed for every draw. below() skips that division below 2^64 - n.
    auto plain = [](ptxlab::Rng& r, uint64_t n) {
        const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
        uint64_t x;
        do x = r.next();
        while (x >= limit);
        return x % n;
    };
    for (uint64_t seed : {1ull, 77ull, 0x5eed5eed5eed5eedull}) {
        ptxlab::Rng a(seed), b(seed);
        for (uint64_t n : std::vector<uint64_t>{1, 2, 3, 10, 60000, 1ull << 32, (1ull << 63) + 12345, UINT64_MAX - 1, UINT64_MAX})
            for (int k = 0; k < 2000; ++k) {
                const uint64_t u = a.below(n), v = plain(b, n);
                REQUIRE(u == v);
                REQUIRE(u < n);
            }
        CHECK(a.state() == b.state());  // the same number of draws
    }
    // Where rejections are common (n just over 2^63: nearly half the draws fall in the top range).
    ptxlab::Rng a(5), b(5);
    int rejected = 0;
    for (int k = 0; k < 4000; ++k) {
        const uint64_t before = b.state();
        REQUIRE(a.below((1ull << 63) + 1) == plain(b, (1ull << 63) + 1));
        ptxlab::Rng c(before);
        c.next();
        rejected += c.state() != b.state();
    }
    CHECK(rejected > 1000);
    std::vector<uint32_t> v(60000);
    for (uint32_t i = 0; i < v.size(); ++i) v[i] = i;
    ptxlab::Rng r(9);
    r.shuffle(v);
    std::vector<uint32_t> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t i = 0; i < sorted.size(); ++i) REQUIRE(sorted[i] == i);
    CHECK(v[0] != 0);
}
