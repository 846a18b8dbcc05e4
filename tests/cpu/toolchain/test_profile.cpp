// `ptxlab profile`'s model with no GPU: hand-made PC records on the sass fixture's listing
// (tests/fixtures/sass/scale.{ptx,sass}, the stand-in's canned nvdisasm output) give the sums
// per SASS instruction, PTX line, block and stall reason; the text, JSON and HTML views carry
// the same numbers; a barrier's waits, sampled on the instruction after it, are marked there; the
// CUPTI loader pointed at a missing library says so, a refusal to profile says how to allow it,
// and a full hardware buffer what to do; CUPTI's reads of a run drained range by range merge into
// one record a PC. The bad inputs of the command line are in tests/cli/bad_inputs.sh, the real
// sampling in tests/gpu/toolchain/test_profile.cpp.
#include "../../helpers.hpp"
#include "collect.hpp"
#include "cupti.hpp"
#include "profile.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

std::string canned_scale() {
    std::ifstream in(fixture("sass/scale.sass"));
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    const std::string ptx = fixture("sass/scale.ptx");
    for (size_t p; (p = s.find("@PTX@")) != std::string::npos;) s.replace(p, 5, ptx);
    return s;
}

PcRecord rec(uint64_t pc, StallCounts stalls) {
    PcRecord r;
    r.function = "scale";
    r.cubin_crc = 7;
    r.pc_offset = pc;
    r.stalls = std::move(stalls);
    return r;
}

// scale.sass: 0x0070 @P0 EXIT (line 23), 0x00d0 LDG (34), 0x00f0 FFMA (35), 0x0100 STG (36), 0x0110 EXIT (38, under EXIT:).
std::vector<PcRecord> records() {
    return {rec(0x00d0, {{"long_scoreboard", 30}}),
            rec(0x00f0, {{"long_scoreboard", 50}, {"wait", 5}}),
            rec(0x0100, {{"lg_throttle", 10}}),
            rec(0x0070, {{"selected", 3}}),
            rec(0x0110, {{"selected", 2}}),
            rec(0x9990, {{"wait", 4}})};  // past the code: counted, but on no line
}

struct Fixture {
    std::vector<SassFunction> functions = parse_nvdisasm(canned_scale());
    SassSource source = loaded_source(read_source_file(fixture("sass/scale.ptx")));
    std::vector<PcRecord> recs = records();
    Profile profile() {
        std::vector<const PcRecord*> ptrs;
        for (const auto& r : recs) ptrs.push_back(&r);
        Profile p;
        p.what = "scale.ptx:scale (test)";
        p.device = "no GPU";
        p.period = 8;
        p.kernels.push_back(profile_kernel("scale", ptrs, &functions.at(0), &source));
        finish_profile(p);
        return p;
    }
};

const LineProfile& line(const KernelProfile& k, int n) {
    for (const auto& l : k.lines)
        if (l.line == n) return l;
    FAIL("no line " << n);
    throw 0;
}

}  // namespace

TEST_CASE("profile: samples summed per SASS instruction, PTX line, block and stall reason") {
    Fixture f;
    const Profile p = f.profile();
    REQUIRE(p.kernels.size() == 1);
    const KernelProfile& k = p.kernels[0];
    CHECK(k.samples == 104);
    CHECK(p.samples == 104);
    CHECK(k.unmapped == 4);
    CHECK(k.lines.front().line == 17);  // the first line with SASS ... the last
    CHECK(k.lines.back().line == 38);
    CHECK(line(k, 35).samples == 55);
    CHECK(line(k, 35).text == "fma.rn.f32      v, a, v, 0f3F800000;");
    CHECK(line(k, 34).samples == 30);
    CHECK(line(k, 36).samples == 10);
    CHECK(line(k, 23).samples == 3);
    CHECK(line(k, 24).samples == 0);
    CHECK(line(k, 38).block == "EXIT");
    CHECK(line(k, 35).block == "(entry)");
    const auto top = top_reasons(line(k, 35).stalls, 3);
    REQUIRE(top.size() == 2);
    CHECK(top[0] == std::pair<std::string, uint64_t>{"long_scoreboard", 50});
    CHECK(top[1] == std::pair<std::string, uint64_t>{"wait", 5});
    CHECK(p.stalls.at("long_scoreboard") == 80);
    CHECK(p.stalls.at("wait") == 9);
    CHECK(p.stalls.at("selected") == 5);
    REQUIRE(k.blocks.size() == 2);
    CHECK(k.blocks[0].label == "(entry)");
    CHECK(k.blocks[0].samples == 98);
    CHECK(k.blocks[1].label == "EXIT");
    CHECK(k.blocks[1].first_line == 37);
    CHECK(k.blocks[1].samples == 2);
    // Line 35 is an LDC (no samples) and the FFMA, which carries the line's 55 samples.
    REQUIRE(line(k, 35).sass.size() == 2);
    CHECK(k.code[line(k, 35).sass[0]].samples == 0);
    const auto& ffma = k.code[line(k, 35).sass[1]];
    CHECK(ffma.address == 0x00f0);
    CHECK(ffma.samples == 55);
}

TEST_CASE("profile: the text view, hottest lines first") {
    Fixture f;
    const std::string t = format_profile_text(f.profile());
    CAPTURE(t);
    CHECK(t.find(".entry scale  (" + fixture("sass/scale.ptx") + "): 104 samples, 100.0 % of all; 4 not on a PTX line") !=
          std::string::npos);
    CHECK(t.find("      55   52.9     35 | fma.rn.f32      v, a, v, 0f3F800000;") != std::string::npos);
    CHECK(t.find("/*00f0*/  FFMA R7, R2, R7, 1") != std::string::npos);
    const size_t hot = t.find("hottest lines of scale");
    REQUIRE(hot != std::string::npos);
    const size_t l35 = t.find("      55   52.9     35  (entry)", hot), l34 = t.find("      30   28.8     34  (entry)", hot);
    CHECK(l35 != std::string::npos);
    CHECK(l34 != std::string::npos);
    CHECK(l35 < l34);
    CHECK(t.find("       2    1.9     37  EXIT") != std::string::npos);
    CHECK(t.find("      80   76.9 %  long_scoreboard") != std::string::npos);
}

TEST_CASE("profile: the JSON view's keys and numbers") {
    Fixture f;
    Profile p = f.profile();
    p.cupti_total = 131;
    p.ranges = 3;
    const auto j = nlohmann::json::parse(format_profile_json(p));
    for (const char* key : {"what", "device", "period", "samples", "dropped", "non_user", "cupti_total", "ranges",
                            "hardware_buffer_full", "stalls", "notes", "kernels"})
        CHECK_MESSAGE(j.contains(key), key);
    CHECK(j["samples"] == 104);
    CHECK(j["cupti_total"] == 131);
    CHECK(j["ranges"] == 3);
    const auto& k = j["kernels"][0];
    CHECK(k["name"] == "scale");
    CHECK(k["unmapped"] == 4);
    CHECK(k["hottest_lines"][0] == 35);
    CHECK(k["hottest_lines"][1] == 34);
    bool found = false;
    for (const auto& l : k["lines"]) {
        for (const char* key : {"line", "text", "block", "samples", "stalls", "sass"}) CHECK_MESSAGE(l.contains(key), key);
        if (l["line"] == 35) {
            found = true;
            CHECK(l["samples"] == 55);
            CHECK(l["stalls"]["long_scoreboard"] == 50);
            CHECK(l["sass"][0]["address"] == 0xb0);  // LDC R7, then the FFMA
            CHECK(l["sass"][1]["address"] == 0xf0);
            CHECK(l["sass"][1]["text"] == "FFMA R7, R2, R7, 1");
            CHECK(l["sass"][1]["samples"] == 55);
        }
    }
    CHECK(found);
    CHECK(k["blocks"][1]["label"] == "EXIT");
}

TEST_CASE("profile: the HTML page is one file with the PTX lines and the text's numbers") {
    Fixture f;
    const Profile p = f.profile();
    const std::string h = format_profile_html(p);
    CHECK(h.rfind("<!DOCTYPE html>", 0) == 0);
    CHECK(h.find("</html>") != std::string::npos);
    CHECK(h.find("<script src") == std::string::npos);  // self-contained: no external assets
    CHECK(h.find("<link") == std::string::npos);
    CHECK(h.find("fma.rn.f32      v, a, v, 0f3F800000;") != std::string::npos);
    CHECK(h.find("/*00f0*/  FFMA R7, R2, R7, 1") != std::string::npos);
    for (const auto& l : p.kernels[0].lines)
        CHECK(h.find(fmt::format("data-line=\"{}\" data-samples=\"{}\"", l.line, l.samples)) != std::string::npos);
    const std::string t = format_profile_text(p);
    for (const auto& l : p.kernels[0].lines)
        if (l.samples) CHECK(t.find(fmt::format("{:>8} {:>6.1f} {:>6} | ", l.samples, 100.0 * l.samples / 104, l.line)) != std::string::npos);
    // Markup in a PTX line is escaped.
    Profile q = p;
    q.kernels[0].lines[0].text = "<b>&";
    CHECK(format_profile_html(q).find("&lt;b&gt;&amp;") != std::string::npos);
}

TEST_CASE("profile: stall reason names and labels") {
    CHECK(short_stall_reason("smsp__pcsamp_warps_issue_stalled_long_scoreboard") == "long_scoreboard");
    CHECK(short_stall_reason("smsp__pcsamp_warps_issue_stalled_selected") == "selected");
    CHECK(short_stall_reason("other_name") == "other_name");
    CHECK(is_not_issued_reason("smsp__pcsamp_warps_issue_stalled_wait_not_issued"));
    CHECK_FALSE(is_not_issued_reason("smsp__pcsamp_warps_issue_stalled_wait"));
    const std::vector<std::string> lines = {".visible .entry k(", "{", "    mov.u32 a, 1;", "LOOP:", "    add.u32 a, a, 1;",
                                            "  DONE: // the end", "    ret;", "}"};
    CHECK(block_of(lines, 3) == "(entry)");
    CHECK(block_of(lines, 5) == "LOOP");
    CHECK(block_of(lines, 7) == "DONE");
}

TEST_CASE("profile: records of a cubin that was not seen loading have no listing, and say so") {
    SampleRun run;
    run.records = records();
    run.period = 8;
    const Profile p = build_profile(run, "/nonexistent/nvdisasm", {});
    REQUIRE(p.kernels.size() == 1);
    CHECK(p.kernels[0].samples == 104);
    CHECK(p.kernels[0].lines.empty());
    CHECK(p.kernels[0].note.find("was not seen loading") != std::string::npos);
    CHECK(format_profile_text(p).find("was not seen loading") != std::string::npos);
}

TEST_CASE("profile: a cubin not captured is made again offline, and a CRC that differs is said") {
    const SourceFile src = read_source_file(fixture("sass/scale.ptx"));
    for (const uint64_t offline_crc : {uint64_t(7), uint64_t(9)}) {
        SampleRun run;
        run.records = records();  // all of cubin 7, function scale
        std::vector<std::string> notes;
        add_offline_cubins(run, {src}, "sm_90", [&](const std::string&) { return offline_crc; }, notes);
        REQUIRE(run.cubins.count(7) == 1);
        CHECK(run.cubins.at(7).rfind("\x7f" "ELF", 0) == 0);
        if (offline_crc == 7) {
            CHECK(notes.empty());
        } else {
            REQUIRE(notes.size() == 1);
            CHECK(notes[0].find("was not captured; its listing is nvJitLink's assembly of") != std::string::npos);
        }
    }
    SampleRun other;
    other.records = records();
    for (auto& r : other.records) r.function = "not_in_the_file";
    std::vector<std::string> notes;
    add_offline_cubins(other, {src}, "sm_90", [](const std::string&) { return uint64_t(7); }, notes);
    CHECK(other.cubins.empty());
}

namespace {

// A loop that waits at a barrier, as fused_step's: the warps waiting at line 6's bar.sync are
// sampled on the @P0 BRA after it (line 7). SASS made by hand, with line info of the PTX file.
struct BarrierFixture {
    SassSource source;
    SassFunction function;
    std::vector<PcRecord> recs;
    BarrierFixture() {
        source.path = "loop.ptx";
        source.lines = {".visible .entry k()",      "{",           "LOOP:",
                        "    ld.shared.f32 a, [x];", "    add.f32 b, b, a;", "    bar.sync 0;",
                        "    @more bra LOOP;",       "    add.f32 c, c, b;", "    ret;", "}"};
        function.name = "k";
        function.entry = true;
        auto add = [&](unsigned address, const char* pred, const char* op, const char* operands, int line) {
            SassInstruction i;
            i.address = address;
            i.predicate = pred;
            i.opcode = op;
            i.operands = operands;
            i.frames = {{"loop.ptx", line}};
            function.code.push_back(i);
        };
        add(0x00, "", "LDS", "R0, [R1]", 4);
        add(0x10, "", "FADD", "R2, R2, R0", 5);
        add(0x20, "", "BAR.SYNC.DEFER_BLOCKING", "0x0", 6);
        add(0x30, "@P0", "BRA", "0x0", 7);
        add(0x40, "", "FADD", "R3, R3, R2", 8);
        add(0x50, "", "EXIT", "", 9);
        recs = {rec(0x00, {{"barrier", 40}}),                         // first: nothing before it
                rec(0x10, {{"short_scoreboard", 20}}),
                rec(0x30, {{"barrier", 90}, {"wait", 3}}),            // after BAR.SYNC: the barrier's waits
                rec(0x40, {{"long_scoreboard", 10}, {"barrier", 5}}),  // barrier not its top reason
                rec(0x50, {{"barrier", 7}})};                          // top reason barrier, after an FADD
        for (auto& r : recs) r.function = "k";
    }
    Profile profile() const {
        std::vector<const PcRecord*> ptrs;
        for (const auto& r : recs) ptrs.push_back(&r);
        Profile p;
        p.what = "loop.ptx:k (test)";
        p.device = "no GPU";
        p.period = 8;
        p.kernels.push_back(profile_kernel("k", ptrs, &function, &source));
        finish_profile(p);
        return p;
    }
};

}  // namespace

TEST_CASE("profile: barrier stalls on the instruction after a barrier are marked, their samples left in place") {
    const BarrierFixture f;
    const Profile p = f.profile();
    const KernelProfile& k = p.kernels.at(0);
    CHECK(line(k, 7).samples == 93);  // where they were sampled: nothing moved to line 6
    CHECK(line(k, 6).samples == 0);
    CHECK(k.samples == 175);
    CHECK(line(k, 7).after_barrier);
    CHECK(line(k, 7).barrier_line == 6);
    for (int n : {4, 5, 6, 8, 9}) {
        CAPTURE(n);
        CHECK_FALSE(line(k, n).after_barrier);
        CHECK(line(k, n).barrier_line == 0);
    }
    CHECK(k.code.at(3).after_barrier);  // the @P0 BRA
    CHECK_FALSE(k.code.at(0).after_barrier);
    CHECK_FALSE(k.code.at(4).after_barrier);
    CHECK_FALSE(k.code.at(5).after_barrier);

    const std::string t = format_profile_text(p);
    CAPTURE(t);
    CHECK(t.find("      93   53.1      7 | @more bra LOOP;                                  barrier 90, wait 3  "
                 "^ barrier, line 6\n") != std::string::npos);
    CHECK(t.find("/*0030*/  @P0 BRA 0x0                          barrier 90, wait 3  ^\n") != std::string::npos);
    CHECK(t.find("LOOP             @more bra LOOP;  [barrier 90, wait 3]  ^ barrier, line 6\n") != std::string::npos);
    CHECK(t.find("barrier stalls are sampled on the instruction after the barrier") != std::string::npos);
    for (const char* unmarked : {"ld.shared.f32 a, [x];", "add.f32 c, c, b;", "ret;"}) {
        const size_t at = t.find(unmarked);
        REQUIRE(at != std::string::npos);
        CHECK(t.substr(at, t.find('\n', at) - at).find('^') == std::string::npos);
    }

    const auto j = nlohmann::json::parse(format_profile_json(p));
    for (const auto& l : j["kernels"][0]["lines"]) {
        CAPTURE(l["line"]);
        CHECK(l["after_barrier"] == (l["line"] == 7));
        CHECK(l["barrier_line"] == (l["line"] == 7 ? 6 : 0));
        for (const auto& ins : l["sass"]) CHECK(ins["after_barrier"] == (ins["address"] == 0x30));
    }

    const std::string h = format_profile_html(p);
    CHECK(h.find("<span class=\"after-barrier\"") != std::string::npos);
    CHECK(h.find("^ barrier, line 6</span>") != std::string::npos);
    CHECK(h.find("barrier stalls are sampled on the instruction after the barrier") != std::string::npos);
}

TEST_CASE("profile: no barrier, no marker and no legend") {
    Fixture f;
    const Profile p = f.profile();
    for (const auto& l : p.kernels[0].lines) CHECK_FALSE(l.after_barrier);
    CHECK(format_profile_text(p).find("barrier stalls are sampled") == std::string::npos);
    CHECK(format_profile_html(p).find("after-barrier\"") == std::string::npos);
    // The same SASS with barrier stalls: the top reason decides, and an FFMA is no barrier.
    for (auto& r : f.recs) r.stalls = {{"barrier", 9}};
    const Profile q = f.profile();  // kept: a range-for over a temporary's member would dangle
    for (const auto& l : q.kernels[0].lines) CHECK_FALSE(l.after_barrier);
}

TEST_CASE("profile: which stall reasons, SASS instructions and PTX statements are barriers") {
    CHECK(is_barrier_stall("barrier"));
    for (const char* r : {"membar", "long_scoreboard", "wait", "sleeping", "branch_resolving"}) CHECK_FALSE(is_barrier_stall(r));
    for (const char* s : {"BAR.SYNC.DEFER_BLOCKING 0x0", "@P0 BAR.SYNC 0x1, R2", "BAR.RED.POPC.DEFER_BLOCKING R0, 0x0, P0",
                          "BAR 0x0", "WARPSYNC 0xffffffff", "WARPSYNC.ALL", "UCGABAR_WAIT",
                          "SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R2+URZ], R3"})
        CHECK_MESSAGE(is_barrier_sass(s), s);
    for (const char* s : {"BAR.ARV 0x1, 0x40", "BRA 0x0", "@!P0 BRA 0x30", "FADD R2, R2, R0", "MEMBAR.ALL.GPU", "BSYNC B0",
                          "UCGABAR_ARV", ""})
        CHECK_MESSAGE(!is_barrier_sass(s), s);
    for (const char* s : {"bar.sync 0;", "  @p bar.sync 1, 64;", "barrier.sync 0;", "barrier.cta.sync.aligned 0;",
                          "bar.red.popc.u32 r, 0, p;", "bar.warp.sync -1;", "barrier.cluster.wait;",
                          "mbarrier.try_wait.parity.shared::cta.b64 p, [m], 0;", "mbarrier.test_wait.shared.b64 p, [m], s;"})
        CHECK_MESSAGE(is_barrier_ptx(s), s);
    for (const char* s : {"bar.arrive 1, 64;", "barrier.cluster.arrive;", "mbarrier.arrive.shared.b64 s, [m];",
                          "membar.gl;", "@more bra LOOP;", "add.f32 a, a, b;", "// bar.sync 0;", ""})
        CHECK_MESSAGE(!is_barrier_ptx(s), s);
}

#if PTXLAB_HAVE_CUPTI_HEADERS
TEST_CASE("profile: CUPTI's refusal to profile says how to allow it, and other failures say what they mean") {
    const std::string m = cupti_failure_message(CUPTI_ERROR_INSUFFICIENT_PRIVILEGES, "cuptiPCSamplingEnable",
                                                "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35)");
    CHECK(m.find("PC sampling is not permitted for this user (cuptiPCSamplingEnable failed: "
                 "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35))") != std::string::npos);
    CHECK(m.find("NVreg_RestrictProfilingToAdminUsers=0") != std::string::npos);
    CHECK(m.find("Run ptxlab as root") != std::string::npos);
    CHECK(cupti_failure_message(CUPTI_ERROR_HARDWARE_BUSY, "cuptiPCSamplingStart", "busy").find("another profiling "
                                "session") != std::string::npos);
    CHECK(cupti_failure_message(CUPTI_ERROR_NOT_SUPPORTED, "cuptiPCSamplingEnable", "no").find("compute capability 7.0") !=
          std::string::npos);
    CHECK(cupti_failure_message(CUPTI_ERROR_UNKNOWN, "cuptiSubscribe", "CUPTI_ERROR_UNKNOWN (999)") ==
          "cuptiSubscribe failed: CUPTI_ERROR_UNKNOWN (999)");
    // cuptiPCSamplingGetData's OUT_OF_MEMORY is CUPTI's hardware buffer full (cupti_pcsampling.h):
    // samples were lost, and the way out is fewer of them.
    const std::string full = cupti_failure_message(CUPTI_ERROR_OUT_OF_MEMORY, "cuptiPCSamplingGetData",
                                                   "CUPTI_ERROR_OUT_OF_MEMORY (8)");
    CHECK(full.rfind("the GPU took PC samples faster than CUPTI could read them out: its hardware buffer filled and "
                     "samples were lost (cuptiPCSamplingGetData failed: CUPTI_ERROR_OUT_OF_MEMORY (8)).\n", 0) == 0);
    CHECK(full.find("raise --period") != std::string::npos);
    CHECK(full.find("fewer --max-steps with --train") != std::string::npos);
    CHECK(full.find("a smaller --repeat") != std::string::npos);
    CHECK(full.substr(full.find('\n') + 1) == sample_overflow_help());
    // Elsewhere OUT_OF_MEMORY is not that buffer: the plain message.
    CHECK(cupti_failure_message(CUPTI_ERROR_OUT_OF_MEMORY, "cuptiPCSamplingEnable", "CUPTI_ERROR_OUT_OF_MEMORY (8)") ==
          "cuptiPCSamplingEnable failed: CUPTI_ERROR_OUT_OF_MEMORY (8)");
    // A CuptiError is neither bad input (exit 2) nor a missing GPU (exit 3): main() answers 1.
    CHECK(std::is_base_of_v<Error, CuptiError>);
    CHECK_FALSE(std::is_base_of_v<InputError, CuptiError>);
    CHECK_FALSE(std::is_base_of_v<NoGpuError, CuptiError>);
}

namespace {
// One read of CUPTI's records as cuptiPCSamplingGetData fills it: a PC record for each of `given`
// (its PC offset, and its (stall reason index, count) pairs), all of function `fn` in cubin 7.
struct Read {
    std::vector<std::vector<CUpti_PCSamplingStallReason>> reasons;
    std::vector<CUpti_PCSamplingPCData> pcs;
    CUpti_PCSamplingData data{};
    Read(const char* fn, const std::vector<std::pair<uint64_t, std::vector<std::pair<uint32_t, uint32_t>>>>& given,
         uint64_t total, uint64_t dropped, uint64_t non_user) {
        for (const auto& [offset, counts] : given) {
            reasons.emplace_back();
            for (const auto& [index, n] : counts) reasons.back().push_back({index, n});
        }
        pcs.resize(given.size());
        for (size_t i = 0; i < given.size(); ++i) {
            pcs[i].size = sizeof(CUpti_PCSamplingPCData);
            pcs[i].cubinCrc = 7;
            pcs[i].pcOffset = given[i].first;
            pcs[i].functionName = const_cast<char*>(fn);
            pcs[i].stallReasonCount = reasons[i].size();
            pcs[i].stallReason = reasons[i].data();
        }
        data.size = sizeof(CUpti_PCSamplingData);
        data.collectNumPcs = pcs.size();
        data.totalNumPcs = pcs.size();
        data.pPcData = pcs.data();
        data.totalSamples = total;
        data.droppedSamples = dropped;
        data.nonUsrKernelsTotalSamples = non_user;
    }
};
}  // namespace

TEST_CASE("profile: the reads of a run drained range by range add up to one record a PC, every count once") {
    const std::map<uint32_t, std::string> names = {{1, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"},
                                                   {2, "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"},
                                                   {3, "smsp__pcsamp_warps_issue_stalled_selected"}};
    SampleRun run;
    PcRecordMap merged;
    // Range 1 (one chunk of train's steps): PCs 0x10 and 0x20 of scale.
    const Read a("scale", {{0x10, {{1, 5}, {2, 4}, {3, 2}}}, {0x20, {{3, 7}, {1, 0}}}}, 20, 1, 3);
    add_pc_data(a.data, names, run, merged);
    // Range 2: 0x10 again, a new PC, and a reason this table does not name.
    const Read b("scale", {{0x10, {{1, 6}}}, {0x30, {{9, 2}}}}, 12, 0, 4);
    add_pc_data(b.data, names, run, merged);
    REQUIRE(merged.size() == 3);
    const PcRecord& pc10 = merged.at({7, "scale", 0x10});
    CHECK(pc10.stalls == StallCounts{{"long_scoreboard", 11}, {"selected", 2}});  // 5 + 6; not_issued left out
    CHECK(pc10.samples() == 13);
    CHECK(merged.at({7, "scale", 0x20}).stalls == StallCounts{{"selected", 7}});  // the zero count left out
    CHECK(merged.at({7, "scale", 0x30}).stalls == StallCounts{{"reason_9", 2}});
    CHECK(merged.at({7, "scale", 0x30}).function == "scale");
    CHECK(merged.at({7, "scale", 0x30}).pc_offset == 0x30);
    CHECK(run.total_samples == 32);
    CHECK(run.dropped_samples == 1);
    CHECK(run.non_user_samples == 7);
    CHECK_FALSE(run.hardware_buffer_full);
    // A read says more PCs than its buffer holds: only those it holds are read; a full hardware
    // buffer is kept in the totals.
    Read c("scale", {{0x40, {{3, 1}}}, {0x50, {{3, 1}}}}, 2, 0, 0);
    c.data.collectNumPcs = 1;
    c.data.totalNumPcs = 5;
    c.data.hardwareBufferFull = 1;
    add_pc_data(c.data, names, run, merged);
    CHECK(merged.size() == 4);
    CHECK(merged.count({7, "scale", 0x40}) == 1);
    CHECK(run.hardware_buffer_full);
}

TEST_CASE("profile: CUPTI at a path that does not exist is named, with how to get it") {
    // cupti() loads once per process: this is the only test here that calls it.
    setenv("PTXLAB_CUPTI_LIB", "/nonexistent/libcupti.so.13", 1);
    try {
        cupti();
        FAIL("cupti() loaded a library that does not exist");
    } catch (const CuptiError& e) {
        const std::string m = e.what();
        CHECK(m.find("CUPTI not found") != std::string::npos);
        CHECK(m.find("/nonexistent/libcupti.so.13 ($PTXLAB_CUPTI_LIB)") != std::string::npos);
        CHECK(m.find("PTXLAB_CUPTI_LIB=/path/to/libcupti.so.13") != std::string::npos);
    }
    unsetenv("PTXLAB_CUPTI_LIB");
}
#endif
