// `verify FILE.ptx` on the GPU: every lesson in ptx/lessons and the contract-header 3-layer
// forward kernel pass against their twins; the planted lesson bugs fail (verify catches them).
#include "../../helpers.hpp"
#include "../common.hpp"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

using namespace ptxlab::test;

namespace {
std::string lessons_dir() { return std::string(PTXLAB_FIXTURES) + "/../../ptx/lessons"; }
std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace

TEST_CASE("lessons: every lesson and the contract forward3 pass verify FILE.ptx") {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(lessons_dir()))
        if (e.path().extension() == ".ptx") files.push_back(e.path().string());
    CHECK(files.size() >= 16);
    files.push_back(fixture("contract/forward3.ptx"));
    for (const auto& f : files) {
        CAPTURE(f);
        RunResult r = run_command(ptxlab_cmd("verify " + f + " --seed 7"));
        CAPTURE(r.output);
        CHECK(r.code == 0);
        CHECK(r.output.find(" 0 failed") != std::string::npos);
    }
}

TEST_CASE("lessons: verify catches the planted mistakes") {
    struct Planted {
        const char* file;
        const char* buffer;  // the output named in a FAIL line
    };
    // 12 is a race (rank 0 reads the peers' sums before the cluster barrier): with 1000
    // clusters some read early; the others are wrong every time.
    for (Planted p : {Planted{"lessons/05_wrong_clamp.ptx", "sums"}, Planted{"lessons/06_lost_update.ptx", "hist"},
                      Planted{"lessons/07_no_max.ptx", "y"}, Planted{"lessons/11_swapped_pairs.ptx", "D"},
                      Planted{"lessons/12_no_cluster_barrier.ptx", "y"}, Planted{"lessons/13_read_before_wait.ptx", "y"},
                      Planted{"lessons/14_wrong_row.ptx", "Y"}, Planted{"lessons/15_swapped_coords.ptx", "Y"},
                      Planted{"lessons/16_wrong_sbo.ptx", "D"}}) {
        CAPTURE(p.file);
        RunResult r = run_command(ptxlab_cmd(std::string("verify ") + fixture(p.file) + " --seed 7"));
        CAPTURE(r.output);
        CHECK(r.code == 1);
        CHECK(r.output.find(std::string(" ") + p.buffer + " ") != std::string::npos);
        CHECK(r.output.find("FAIL") != std::string::npos);
    }
}

TEST_CASE("lessons: verify --racecheck fails lesson 04's planted mistake (no bar.sync) and passes lesson 04") {
    // NEEDS compute-sanitizer (the device's CUDA toolkit), besides the GPU.
    RunResult bad = run_command(ptxlab_cmd("verify " + fixture("lessons/04_no_barrier.ptx") + " --racecheck --seed 7 --shape B=4"));
    CAPTURE(bad.output);
    REQUIRE_MESSAGE(bad.output.find("compute-sanitizer not found") == std::string::npos,
                    "verify --racecheck needs compute-sanitizer (the device's CUDA toolkit)");
    CHECK(bad.code == 1);
    CHECK(bad.output.find("verify --racecheck: FAIL: compute-sanitizer --tool racecheck reported") != std::string::npos);
    RunResult good = run_command(ptxlab_cmd("verify " + lessons_dir() + "/04_shared_barrier.ptx --racecheck --synccheck --seed 7 --shape B=4"));
    CAPTURE(good.output);
    CHECK(good.code == 0);
    CHECK(good.output.find("verify --racecheck: PASS") != std::string::npos);
    CHECK(good.output.find("verify --synccheck: PASS") != std::string::npos);
}

TEST_CASE("lessons: a mismatch is named by its coordinates from the contract's shapes") {
    // 07_no_max's y is f32[R * C]: its mismatches read y[r][c].
    RunResult r = run_command(ptxlab_cmd("verify " + fixture("lessons/07_no_max.ptx") + " --seed 7"));
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(std::regex_search(r.output, std::regex(R"(\n    y\[\d+\]\[\d+\]: ptx )")));
}

TEST_CASE("contract: 64 KiB of dynamic shared memory (opted in) passes verify, and bench --json writes its rows") {
    const std::string f = fixture("contract/big_shared.ptx");
    RunResult v = run_command(ptxlab_cmd("verify " + f + " --seed 7"));
    CAPTURE(v.output);
    CHECK(v.code == 0);
    CHECK(v.output.find(" 0 failed") != std::string::npos);
    TempDir t;
    const std::string json = t.file("b.json");
    RunResult b = run_command(ptxlab_cmd("bench " + f + " --shape B=8 --json " + json));
    CAPTURE(b.output);
    CHECK(b.code == 0);
    const nlohmann::json j = nlohmann::json::parse(read_text(json));
    CHECK(j["entry"] == "reverse16k");
    REQUIRE(j["rows"].size() == 2);
    CHECK(j["rows"][0]["shape"]["B"] == 8);
    CHECK(j["rows"][0]["side"] == "ptx");
    CHECK(j["rows"][0]["us"].get<double>() > 0);
    CHECK(j["rows"][1]["side"] == "twin");
}
