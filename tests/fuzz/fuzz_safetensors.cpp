// libFuzzer target: the checkpoint readers (safetensors.hpp parse_checkpoint and
// parse_model_checkpoint) and the checks of a checkpoint against its own metadata that train
// --resume and eval run on what they read (train.hpp check_checkpoint_metadata).
//
// Every input must end in one of two ways: a checkpoint consistent with its bytes and with
// itself, or a ptxlab::InputError. Anything else (a crash, a sanitizer report, another
// exception type, an allocation past -rss_limit_mb, an invariant below failing) is a bug.
//
//   tests/fuzz/run.sh safetensors 60     (seeds: tests/fuzz/corpus/safetensors)
#include "error.hpp"
#include "model.hpp"
#include "safetensors.hpp"
#include "train.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

static void require(bool ok) {
    if (!ok) std::abort();  // libFuzzer reports the input that broke an invariant
}

// The optimizer.* tensors: named so, and no more floats than the file has bytes for.
static size_t extra_floats(const ptxlab::ExtraTensors& extra) {
    size_t n = 0;
    for (const auto& [name, v] : extra) {
        require(name.starts_with("optimizer."));
        n += v.size();
    }
    return n;
}

// A position check_checkpoint_metadata returned: inside the schedule and adding up.
static void require_position(const ptxlab::ResumeState& r, const std::map<std::string, std::string>& meta) {
    require(r.epoch >= 1 && r.epoch <= std::stoull(meta.at("train.epochs")));  // a whole number, checked
    require(r.step >= r.k && (r.epoch > 1 || r.step == r.k));
    require(!r.reached ? r.target_step == 0 : r.target_step <= r.step && r.train_ms_to_target <= r.train_ms);
    require(r.model.sizes.empty());
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::vector<uint8_t> bytes(data, data + size);
    const std::string path = "fuzz.safetensors";

    // The MLP reader: 2 or 3 chained layers whose tensors are what the sizes say.
    try {
        const ptxlab::Checkpoint ck = ptxlab::parse_checkpoint(path, bytes);
        const auto& n = ck.net;
        require(n.sizes.size() == 3 || n.sizes.size() == 4);
        require(n.W.size() == n.layers() && n.b.size() == n.layers());
        size_t floats = extra_floats(ck.extra);
        for (size_t l = 0; l < n.layers(); ++l) {
            require(n.sizes[l] >= 1 && n.sizes[l + 1] >= 1);
            require(n.W[l].size() == size_t(n.sizes[l + 1]) * n.sizes[l] && n.b[l].size() == n.sizes[l + 1]);
            floats += n.W[l].size() + n.b[l].size();
        }
        require(floats * 4 + 8 <= size);
        if (auto it = ck.metadata.find("layers"); it != ck.metadata.end())
            require(it->second == ptxlab::layers_text(n.sizes));
        require(!ck.metadata.count("model"));
        try {
            if (auto r = ptxlab::check_checkpoint_metadata(path, ck.metadata, ck.extra, ptxlab::layers_text(n.sizes),
                                                           floats - extra_floats(ck.extra)))
                require_position(*r, ck.metadata);
        } catch (const ptxlab::InputError&) {
        }
    } catch (const ptxlab::InputError&) {
    }

    // The reader of any --model: the parameters its spec asks for, all from the file.
    try {
        const ptxlab::ModelCheckpoint mc = ptxlab::parse_model_checkpoint(path, bytes);
        require(!mc.model.layers.empty());
        require(mc.params.size() == mc.model.param_count);
        require((mc.params.size() + extra_floats(mc.extra)) * 4 + 8 <= size);
        if (!mc.metadata.count("model")) require(ptxlab::uses_mlp_format(mc.model));  // an MLP file
        try {
            ptxlab::check_checkpoint_metadata(path, mc);
        } catch (const ptxlab::InputError&) {
        }
    } catch (const ptxlab::InputError&) {
    }
    return 0;
}
