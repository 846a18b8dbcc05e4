// PC sampling with CUPTI: which instruction each running warp was at, and why it stalled.
//
// A PcSampler enables CUPTI's PC sampling on the current device's primary context and
// subscribes to module loads, keeping each cubin the driver loads (the JIT's output for a
// PTX module) so that a sample's (cubinCrc, function, pcOffset) can be found in nvdisasm's
// listing of the very code that ran. Make it after the Context and before loading the modules
// to profile: a module loaded earlier is not seen.
//
// Two ways to collect (CUpti_PCSamplingCollectionMode):
//   Serialized  kernels run one at a time; each sampled range is start() .. stop(), and the
//               records are drained after every stop (as CUPTI asks in that mode).
//   Continuous  kernels run as they would (a training run: graphs, overlapping launches). Needs
//               no module unload in between (train has none). A long run is cut into ranges:
//               drain() ends the range, reads every record and starts the next (profile --train
//               calls it after each chunk of train's steps, TrainConfig::between_chunks), so that
//               CUPTI's buffers hold one chunk's samples, not the whole run's.
// CUPTI's hardware buffer takes the samples as the GPU makes them; CUPTI's worker threads decode
// them into its scratch buffer (PC records), from which cuptiPCSamplingGetData hands them out.
// Samples the hardware buffer has no room for are lost, and cuptiPCSamplingGetData then fails
// with CUPTI_ERROR_OUT_OF_MEMORY (cupti_failure_message says what to do).
#pragma once

#include "cuda.hpp"
#include "cupti.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace ptxlab {

// One program counter's samples: the function, where in it, and the samples by stall reason
// (CUPTI's names with their "smsp__pcsamp_warps_issue_stalled_" prefix removed; the
// "_not_issued" reasons, a subset of the others, are left out).
struct PcRecord {
    std::string function;
    uint64_t cubin_crc = 0;
    uint64_t pc_offset = 0;
    std::map<std::string, uint64_t> stalls;
    uint64_t samples() const;
};

struct SampleRun {
    std::vector<PcRecord> records;
    std::map<uint64_t, std::string> cubins;  // by CRC (cuptiGetCubinCrc): the cubins loaded while sampling
    uint64_t total_samples = 0;              // as CUPTI counts them (all kernels)
    uint64_t dropped_samples = 0;            // lost: the hardware buffer overflowed
    uint64_t non_user_samples = 0;           // in the driver's own kernels
    bool hardware_buffer_full = false;
    unsigned period = 0;                     // log2 of the cycles between samples
    unsigned ranges = 0;                     // start() .. stop() ranges sampled, each drained at its end
};

// "smsp__pcsamp_warps_issue_stalled_long_scoreboard" -> "long_scoreboard"; "..._selected" -> "selected".
std::string short_stall_reason(const std::string& cupti_name);
bool is_not_issued_reason(const std::string& cupti_name);

// cuptiGetCubinCrc of `cubin`: the CRC PC records name their cubin by. Needs CUPTI.
uint64_t cubin_crc(const std::string& cubin);

enum class SamplingMode { Serialized, Continuous };

#if PTXLAB_HAVE_CUPTI_HEADERS
// The records read so far, by (cubin CRC, function, PC offset): a PC that two reads both return
// (two ranges of a run) is one record holding the sum of its counts.
using PcRecordMap = std::map<std::tuple<uint64_t, std::string, uint64_t>, PcRecord>;

// Adds one read of CUPTI's records (cuptiPCSamplingGetData's, or the configured buffer's) to
// `records`, and its totals (samples, dropped, non-user, hardware buffer full) to `run`: its
// first min(totalNumPcs, collectNumPcs) records, each stall reason named by `reason_names`
// (CUPTI's index -> name; "reason_N" when unknown), the "_not_issued" reasons and zero counts
// left out. Call it once per read: every count it is given is added.
void add_pc_data(const CUpti_PCSamplingData& d, const std::map<uint32_t, std::string>& reason_names, SampleRun& run,
                 PcRecordMap& records);
#endif

class PcSampler {
public:
    // Loads CUPTI (CuptiError when it is missing) and enables PC sampling on `ctx`'s device;
    // `period` in [5, 31]: one sample every 2^period cycles per SM.
    PcSampler(const Context& ctx, SamplingMode mode, unsigned period);
    ~PcSampler();
    PcSampler(const PcSampler&) = delete;
    PcSampler& operator=(const PcSampler&) = delete;

    void start();
    void stop();  // waits for the device, ends the range and drains the records
    // Between two parts of a sampled run: stop() and start() again, when a range is open (a no-op
    // otherwise). Every sample stays counted, once; CUPTI's buffers are emptied.
    void drain();
    SampleRun take();  // ends sampling (disables it) and returns every record and cubin

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace ptxlab
