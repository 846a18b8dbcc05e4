// `ptxlab profile` on the device: CUPTI's PC sampling of fused_step (ptx/step.ptx) at verify's
// shapes. NEEDS CUPTI (the CUDA toolkit's libcupti.so.13), nvdisasm, and a driver that lets
// this user profile (RmProfilingAdminOnly: 0). The samples must land on fused_step's PTX lines,
// and the JSON and HTML must carry the same numbers as each other.
#include "../../helpers.hpp"
#include "../common.hpp"
#include "profile.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

using namespace ptxlab::test;

namespace {
// ctest runs GPU tests side by side, and the GPU's PC-sampling hardware takes one profiling session
// at a time: the profile tests take turns through a lock file (two sessions at once made CUPTI's
// cuptiPCSamplingStart fail with CUPTI_ERROR_UNKNOWN on the H100, not only HARDWARE_BUSY), and a
// run that finds the hardware held by another process waits and tries again.
struct ProfileTurn {
    int fd = ::open("/tmp/ptxlab-profile-tests.lock", O_CREAT | O_RDWR, 0666);
    ProfileTurn() { REQUIRE_MESSAGE((fd >= 0 && ::flock(fd, LOCK_EX) == 0), "the profile tests' lock file"); }
    ~ProfileTurn() { if (fd >= 0) ::close(fd); }
    ProfileTurn(const ProfileTurn&) = delete;
    ProfileTurn& operator=(const ProfileTurn&) = delete;
};

RunResult profile_run(const std::string& args) {
    ProfileTurn turn;
    RunResult r;
    for (int attempt = 0; attempt < 20; ++attempt) {
        r = run_command(ptxlab_cmd("profile " + args));
        if (r.output.find("CUPTI_ERROR_HARDWARE_BUSY") == std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::seconds(3));
    }
    return r;
}

// profile --train with `args`, its JSON written to p.json in `t`; nullopt (with a message) where
// this machine has no MNIST. The run must succeed.
std::optional<nlohmann::json> train_profile(const TempDir& t, const std::string& args) {
    RunResult r = profile_run("--train " + args + " --json " + t.file("p.json"));
    CAPTURE(r.output);
    if (r.output.find("Fetch MNIST with") != std::string::npos) {
        MESSAGE("no MNIST here: " << r.output);
        return std::nullopt;
    }
    REQUIRE(r.code == 0);
    std::ifstream jf(t.file("p.json"));
    return nlohmann::json::parse(jf);
}
}  // namespace

TEST_CASE("profile: fused_step's samples land on its PTX lines, in the text, the JSON and the HTML") {
    TempDir t;
    const std::string step = std::string(PTXLAB_SOURCE_DIR) + "/ptx/step.ptx";
    RunResult r = profile_run(step + ":fused_step --repeat 3 --json " + t.file("p.json") + " --html " + t.file("p.html"));
    CAPTURE(r.output);
    REQUIRE_MESSAGE(r.code == 0, "profile needs CUPTI, nvdisasm and a driver that permits profiling");
    CHECK(r.output.find(".entry fused_step") != std::string::npos);
    CHECK(r.output.find("hottest lines of fused_step") != std::string::npos);

    std::ifstream jf(t.file("p.json"));
    const auto j = nlohmann::json::parse(jf);
    REQUIRE(j["kernels"].size() >= 1);
    const auto& k = j["kernels"][0];
    CHECK(k["name"] == "fused_step");
    CHECK(k["samples"].get<uint64_t>() > 0);
    uint64_t on_lines = 0;
    size_t hot_lines = 0;
    for (const auto& l : k["lines"]) {
        on_lines += l["samples"].get<uint64_t>();
        if (l["samples"].get<uint64_t>() > 0) {
            ++hot_lines;
            CHECK(!l["text"].get<std::string>().empty());
            CHECK(!l["stalls"].empty());
        }
    }
    CHECK(hot_lines >= 3);
    // A line marked as holding a barrier's waits names that barrier's line, a bar.sync of fused_step.
    std::map<int, std::string> text_of;
    for (const auto& l : k["lines"]) text_of[l["line"].get<int>()] = l["text"].get<std::string>();
    for (const auto& l : k["lines"]) {
        CHECK(l.contains("after_barrier"));
        if (l["after_barrier"].get<bool>() && l["barrier_line"].get<int>() > 0)
            CHECK(ptxlab::is_barrier_ptx(text_of[l["barrier_line"].get<int>()]));
    }
    // Nearly every sample finds its PTX line (the JIT's cubin carries the line table).
    CHECK(on_lines + k["unmapped"].get<uint64_t>() == k["samples"].get<uint64_t>());
    CHECK(on_lines * 10 >= k["samples"].get<uint64_t>() * 9);
    CHECK(!j["stalls"].empty());

    std::ifstream hf(t.file("p.html"));
    std::stringstream hs;
    hs << hf.rdbuf();
    const std::string html = hs.str();
    CHECK(html.find("</html>") != std::string::npos);
    for (const auto& l : k["lines"])
        if (l["samples"].get<uint64_t>() > 0)
            CHECK(html.find("data-line=\"" + std::to_string(l["line"].get<int>()) + "\" data-samples=\"" +
                            std::to_string(l["samples"].get<uint64_t>()) + "\"") != std::string::npos);
}

TEST_CASE("profile --train: a short run's kernels are sampled") {
    TempDir t;
    const auto run = train_profile(t, "--max-steps 64");
    if (!run) return;
    const auto& j = *run;
    CHECK(j["samples"].get<uint64_t>() > 0);
    bool step = false;
    for (const auto& k : j["kernels"]) step |= k["name"] == "fused_step" && k["samples"].get<uint64_t>() > 0;
    CHECK(step);
}

TEST_CASE("profile --train: a long run of the CNN is read out chunk by chunk, every sample counted once") {
    // 300 steps of the CNN, about 12 kernels a step: read out only at the end, CUPTI's hardware
    // buffer filled and cuptiPCSamplingGetData failed with CUPTI_ERROR_OUT_OF_MEMORY (H100).
    TempDir t;
    const auto run = train_profile(t, "--model cnn --max-steps 300 --top 20 --no-progress");
    if (!run) return;
    const auto& j = *run;
    const auto samples = j["samples"].get<uint64_t>(), dropped = j["dropped"].get<uint64_t>();
    const auto non_user = j["non_user"].get<uint64_t>(), total = j["cupti_total"].get<uint64_t>();
    MESSAGE("samples " << samples << ", dropped " << dropped << ", non-user " << non_user << ", CUPTI's total "
                       << total << ", ranges " << j["ranges"].get<unsigned>());
    CHECK(samples > 0);
    // One range a chunk of train's steps (32 for a --model, cut at the evaluations), and the last.
    CHECK(j["ranges"].get<unsigned>() >= 300 / 32 + 1);
    // No record read twice: the samples on PCs never exceed what CUPTI counted.
    CHECK(samples + dropped + non_user <= total);
    CHECK(j["kernels"].size() >= 5);
}

TEST_CASE("profile: a run that takes no sample says so (exit 1) and writes no file") {
    // One sample every 2^31 cycles per SM (over a second) of a kernel that runs microseconds:
    // no sample at all, which profile must report rather than print an empty listing.
    TempDir t;
    const std::string k = std::string(PTXLAB_FIXTURES) + "/contract/big_shared.ptx";
    RunResult r = profile_run(k + " --period 31 --repeat 1 --json " + t.file("p.json"));
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(r.output.find("no PC samples were taken") != std::string::npos);
    CHECK_FALSE(std::ifstream(t.file("p.json")).good());
}
