// libFuzzer target: the IDX reader (raw and gzip) and the image/label pairing.
//
// Every input must end in one of two ways: a parsed array whose size matches its
// dimensions, or a ptxlab::InputError that names the file. Anything else (a crash, a
// sanitizer report, another exception type, an allocation past -rss_limit_mb) is a bug.
//
//   tests/fuzz/run.sh idx 60        (builds with clang, runs 60 s on tests/fuzz/corpus/idx)
#include "error.hpp"
#include "idx.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

static void require(bool ok) {
    if (!ok) std::abort();  // libFuzzer reports the input that broke an invariant
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<uint8_t> bytes(data, data + size);
    ptxlab::IdxArray a;
    try {
        a = ptxlab::parse_idx("fuzz.idx", bytes);
    } catch (const ptxlab::InputError&) {
        return 0;  // rejected with a message: fine
    }
    size_t n = a.dims.empty() ? 0 : 1;
    for (uint32_t d : a.dims) n *= d;
    require(a.data.size() == n);

    // Pair the array with itself and with a label file cut from it: either a Split
    // consistent with the inputs or an InputError.
    ptxlab::IdxArray labels{"fuzz-labels.idx", {a.dims.empty() ? 0u : a.dims[0]}, {}};
    labels.data.resize(labels.dims[0]);
    for (size_t i = 0; i < labels.data.size(); ++i) labels.data[i] = a.data.empty() ? 0 : a.data[i % a.data.size()];
    for (const auto* l : {&a, &labels}) {
        try {
            ptxlab::Split s = ptxlab::make_split(a, *l);
            require(s.images.size() == s.count * s.dim());
            require(s.labels.size() == s.count);
            for (float v : s.images) require(v >= 0.0f && v <= 1.0f);
            for (uint8_t y : s.labels) require(y < ptxlab::kClasses);
        } catch (const ptxlab::InputError&) {
        }
    }
    return 0;
}
