// `verify FILE.ptx` on the GPU for ptx/hopper, the kernels outside the host's registry (dense_wg on
// wgmma, and transpose32, its companion for a dense layer's weight gradient): each passes against
// its twin at its contract's shapes, and a planted mistake in each fails, naming its output.
#include "../../helpers.hpp"
#include "../../planted.hpp"
#include "../common.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <regex>

using namespace ptxlab::test;

namespace {

std::string hopper_dir() { return std::string(PTXLAB_SOURCE_DIR) + "/ptx/hopper"; }

// plant() writes the patched file alone into a fresh directory, but a contract file finds its twin
// relative to itself (`twin reference/NAME.cu`): the live twins go beside it, as in the tree.
PlantedKernel plant_with_twins(const std::string& name) {
    PlantedKernel k = plant(name);
    const std::filesystem::path live = std::filesystem::path(PTXLAB_SOURCE_DIR) / read_planted(name).target;
    std::filesystem::copy(live.parent_path() / "reference", k.tmp.path / "reference",
                          std::filesystem::copy_options::recursive);
    return k;
}

// `verify` of a planted file: exit 1, and a FAIL line of `entry` for the output `buffer`.
void check_verify_fails(const PlantedKernel& k, const std::string& entry, const std::string& buffer) {
    RunResult r = run_command(ptxlab_cmd("verify " + k.path + " --seed 7"));
    CAPTURE(r.output);
    CHECK(r.code == 1);
    CHECK(std::regex_search(r.output, std::regex("\n" + entry + " +[^\n]* " + buffer + " +[0-9]+ elements[^\n]*FAIL\n")));
    CHECK(r.output.find(" 0 failed") == std::string::npos);
}

}  // namespace

TEST_CASE("hopper: every kernel in ptx/hopper passes verify FILE.ptx") {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(hopper_dir()))
        if (e.path().extension() == ".ptx") files.push_back(e.path().string());
    REQUIRE(files.size() >= 3);  // densewg.ptx, densewgk.ptx and transpose.ptx at least
    for (const auto& f : files) {
        CAPTURE(f);
        RunResult r = run_command(ptxlab_cmd("verify " + f + " --seed 7"));
        CAPTURE(r.output);
        CHECK(r.code == 0);
        CHECK(r.output.find(" 0 failed") != std::string::npos);
        CHECK(r.output.find("FAIL") == std::string::npos);
    }
}

TEST_CASE("hopper: verify catches a planted dense_wg mistake") {
    // The descriptors' stride byte offset 512 bytes instead of 1024: rows 8 .. of A and B wrong.
    check_verify_fails(plant_with_twins("densewg_wrong_sbo"), "dense_wg", "C");
}

TEST_CASE("hopper: verify catches a planted dense_wg_k mistake") {
    // The cluster's join never adds rank 1's partial: every shape with R >= 2 is wrong.
    check_verify_fails(plant_with_twins("densewgk_join_skips_rank"), "dense_wg_k", "C");
}

TEST_CASE("hopper: verify catches a planted transpose32 mistake") {
    // The write side reads the tile as written, not down its columns: the tiles' contents unturned.
    check_verify_fails(plant_with_twins("transpose_tile_not_transposed"), "transpose32", "out");
}
