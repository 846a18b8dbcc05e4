// ptxlab data [DIR]: validate a dataset and describe it.
#include "commands.hpp"
#include "flags.hpp"
#include "error.hpp"
#include "idx.hpp"

#include <fmt/format.h>

namespace ptxlab::cli {

namespace {

struct DataOptions {
    std::string dir;
};

void describe(const char* name, const Split& s) {
    std::vector<size_t> hist(kClasses, 0);
    for (auto l : s.labels) hist[l]++;
    double sum = 0;
    for (float p : s.images) sum += p;
    fmt::print("{:<5} {:>6} images of {}x{} ({} pixels), mean pixel {:.4f}\n", name, s.count, s.rows, s.cols, s.dim(),
               sum / double(s.images.size()));
    std::string line = "      labels:";
    for (unsigned k = 0; k < kClasses; ++k) line += fmt::format(" {}:{}", k, hist[k]);
    fmt::print("{}\n", line);
}

int run_data(const DataOptions& o) {
    const std::string dir = o.dir.empty() ? default_data_dir() : o.dir;
    Dataset d = load_dataset(dir);
    fmt::print("dataset {}: valid\n", dir);
    for (const auto& f : d.files) fmt::print("      read {}\n", f);
    describe("train", d.train);
    describe("test", d.test);
    return kExitOk;
}

}  // namespace

void setup_data(CLI::App& app, Command& chosen) {
    auto o = std::make_shared<DataOptions>();
    auto* sub = app.add_subcommand(
        "data", "Validate an MNIST-format dataset (four IDX files, raw or .gz; no GPU needed) and print the counts, "
                "image shape and label histogram.");
    sub->add_option("dir", o->dir, "dataset directory (default: $PTXLAB_DATA_DIR or data/mnist)")->check(kNonEmptyPath);
    sub->callback([o, &chosen] { chosen = [o] { return run_data(*o); }; });
}

}  // namespace ptxlab::cli
