// ptxlab profile's model: PC samples (sampler.hpp) under the SASS instructions they hit and,
// through the line table that `ptxlab sass` reads (sass.hpp), under the PTX lines those came
// from; per kernel the hottest lines and blocks (the PTX label a line falls under), and the
// totals by stall reason. Then the three views: text (the `sass` layout), JSON and one HTML page.
// No GPU here: the records and listings come in, numbers and text go out.
#pragma once

#include "sampler.hpp"
#include "sass.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ptxlab {

using StallCounts = std::map<std::string, uint64_t>;

// The reasons with the most samples, most first (ties by name), at most `n`.
std::vector<std::pair<std::string, uint64_t>> top_reasons(const StallCounts& c, size_t n);

struct InstructionProfile {
    unsigned address = 0;
    std::string text;  // "@P0 FFMA R4, R2, R3, R4"
    int line = 0;      // its PTX line (0: none, or another file)
    uint64_t samples = 0;
    StallCounts stalls;
    bool after_barrier = false;  // its top stall reason is a barrier's, and it follows a barrier (see LineProfile)
};

struct LineProfile {
    int line = 0;
    std::string text;   // the PTX line, trimmed
    std::string block;  // the label it falls under ("(entry)" before the first)
    uint64_t samples = 0;
    StallCounts stalls;
    std::vector<size_t> sass;  // indices into KernelProfile::code, by address
    // A warp waiting at a barrier (bar.sync, barrier.sync, ...) is sampled on the instruction
    // after it, as Nsight Compute shows it too. Set when the line's top stall reason is a barrier's
    // and one of its instructions with that top reason follows a barrier in the SASS: its samples
    // are the waits of that barrier (at PTX line barrier_line; 0: not on a line). The samples
    // stay where they were taken; the views mark the line (barrier_mark, kBarrierLegend).
    bool after_barrier = false;
    int barrier_line = 0;
};

struct BlockProfile {
    std::string label;
    int first_line = 0;
    uint64_t samples = 0;
    StallCounts stalls;
};

struct KernelProfile {
    std::string name;
    std::string source;  // the PTX file its lines are from ("" when unknown)
    std::string note;    // why it has no listing, when it has none
    uint64_t samples = 0;
    uint64_t unmapped = 0;   // samples at a PC with no SASS instruction, or no PTX line
    StallCounts stalls;
    std::vector<InstructionProfile> code;
    std::vector<LineProfile> lines;  // every line from the first to the last with SASS, in order
    std::vector<BlockProfile> blocks;  // in order of their first line
};

struct Profile {
    std::string what;  // "ptx/step.ptx:fused_step at its verify shapes (12 launches)"
    std::string device;
    unsigned period = 0;
    uint64_t samples = 0, dropped = 0, non_user = 0;
    uint64_t cupti_total = 0;  // CUPTI's count of every sample: kernels', dropped, driver's (SampleRun::total_samples)
    unsigned ranges = 0;       // sampled ranges, each read out at its end (SampleRun::ranges)
    bool hardware_buffer_full = false;
    StallCounts stalls;
    std::vector<KernelProfile> kernels;  // most samples first
    std::vector<std::string> notes;
};

// CUPTI's stall reason (short_stall_reason's name) of a warp waiting at a barrier: "barrier".
bool is_barrier_stall(const std::string& reason);
// A SASS instruction that makes its warp wait for others: BAR.SYNC, BAR.RED, BAR (not BAR.ARV,
// which does not wait), WARPSYNC, the cluster barrier's wait (UCGABAR_WAIT) and mbarrier's
// try-wait (SYNCS.PHASECHK); `text` as InstructionProfile::text, a guard ("@P0 ") allowed.
bool is_barrier_sass(const std::string& text);
// The same of a PTX statement: bar.sync, bar.red, bar.warp.sync, barrier{.cta}.sync/.red,
// barrier.cluster.wait, mbarrier.try_wait/test_wait (not the .arrive forms).
bool is_barrier_ptx(const std::string& statement);
// A line's marker in the views: "^ barrier, line 5" (after_barrier), else "".
std::string barrier_mark(const LineProfile& l);
// The legend of that marker.
inline constexpr const char* kBarrierLegend =
    "^ barrier stalls are sampled on the instruction after the barrier: a line marked ^ holds the waits of the "
    "barrier it names (the samples are left where they were taken)";

// The label a PTX line `line` (1-based) of `lines` falls under: the nearest `NAME:` line at or
// above it, stopping at the .entry/.func it is in; "(entry)" when none.
std::string block_of(const std::vector<std::string>& lines, int line);

// One kernel's samples (`records`, all of this function) placed on `f`'s instructions and
// `src`'s lines; `f` and `src` may be null (then only the totals, and `note` says why).
KernelProfile profile_kernel(const std::string& name, const std::vector<const PcRecord*>& records,
                             const SassFunction* f, const SassSource* src, const std::string& note = "");

// Sums the kernels into the profile's totals and orders them, most samples first.
void finish_profile(Profile& p);

std::string format_profile_text(const Profile& p, size_t top = 10);
std::string format_profile_json(const Profile& p);
std::string format_profile_html(const Profile& p, size_t top = 10);

}  // namespace ptxlab
