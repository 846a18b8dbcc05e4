// IDX files (the MNIST format), raw or gzip-compressed, and MNIST-format datasets.
//
// Every file is validated: magic number, element type, dimensions, exact
// length, label range. Errors name the file and the problem.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptxlab {

struct IdxArray {
    std::string path;
    std::vector<uint32_t> dims;  // e.g. {60000, 28, 28}
    std::vector<uint8_t> data;   // unsigned bytes, row-major
};

// Reads an IDX file of unsigned bytes (type 0x08). Gzip is detected from the content.
IdxArray read_idx(const std::string& path);
// Parses IDX bytes already in memory (used by read_idx and the fuzzer).
IdxArray parse_idx(const std::string& path, const std::vector<uint8_t>& bytes);

// One split of a dataset: images scaled to [0, 1], labels 0..9.
struct Split {
    size_t count = 0;
    uint32_t rows = 0, cols = 0;
    std::vector<float> images;    // [count][rows * cols]
    std::vector<uint8_t> labels;  // [count]
    size_t dim() const { return size_t(rows) * cols; }
};

inline constexpr unsigned kClasses = 10;

// Checks that an image file and a label file belong together and builds a Split.
Split make_split(const IdxArray& images, const IdxArray& labels);

struct Dataset {
    std::string dir;
    Split train, test;
    std::vector<std::string> files;  // the files read, in order (for the report of `ptxlab data`)
};

// The four files in `dir`: train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each optionally with .gz.
Dataset load_dataset(const std::string& dir);

// The default data directory: $PTXLAB_DATA_DIR, else <source tree>/data/mnist.
std::string default_data_dir();

}  // namespace ptxlab
