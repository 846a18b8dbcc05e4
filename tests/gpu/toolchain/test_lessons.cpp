// `verify FILE.ptx` on the GPU: every lesson in ptx/lessons and the contract-header 3-layer
// forward kernel pass against their twins; the planted lesson bugs fail (verify catches them).
#include "../../helpers.hpp"
#include "../common.hpp"

#include <doctest/doctest.h>

#include <filesystem>

using namespace ptxlab::test;

namespace {
std::string lessons_dir() { return std::string(PTXLAB_FIXTURES) + "/../../ptx/lessons"; }
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
