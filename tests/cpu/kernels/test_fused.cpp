// The fused set's launch shapes (host/kernels/fused.hpp) against the PTX that takes them.
#include "fused.hpp"
#include "ptx_text.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace ptxlab;

TEST_CASE("fused_output_block: a warp an output and a thread a hidden unit, 8 to 16 warps, within the PTX's .maxntid") {
    CHECK(fused_output_block(128, 10) == 320);   // the MLP's and the CNN's output layer: one pass each way
    CHECK(fused_output_block(1024, 10) == 512);  // 784,1024,1024,10: 16 warps, two hidden units a thread
    CHECK(fused_output_block(1, 1) == 256);      // at least 8 warps
    CHECK(fused_output_block(200, 3) == 256);
    CHECK(fused_output_block(300, 17) == 512);   // more outputs than warps: warp w also takes w + 16
    CHECK(fused_output_smem(10) == 40);          // the sample's outputs, one float each
    // The entry's .maxntid bounds every block the host asks for (a larger one fails to launch).
    const std::string ptx = read_source_file(std::string(PTXLAB_SOURCE_DIR) + "/ptx/fused.ptx").text;
    const size_t at = ptx.find(".visible .entry fused_output("), body = ptx.find('{', at);
    const size_t cap = ptx.find(".maxntid", at);
    REQUIRE(at != std::string::npos);
    REQUIRE(cap < body);
    const unsigned maxntid = static_cast<unsigned>(std::stoul(ptx.substr(cap + 8)));
    CHECK(maxntid == 32 * kFusedOutputMaxWarps);
    for (unsigned H : {1u, 31u, 32u, 33u, 256u, 511u, 512u, 513u, 4096u})
        for (unsigned O : {1u, 8u, 9u, 16u, 17u, 100u}) {
            const unsigned b = fused_output_block(H, O);
            CHECK(b % 32 == 0);
            CHECK(b >= 256);
            CHECK(b <= maxntid);
        }
}
