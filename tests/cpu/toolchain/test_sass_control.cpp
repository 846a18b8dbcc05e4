// `ptxlab sass --control`: the control-bit decoder on encodings taken from real cubins, its
// layout checked field by field (a wrong bit offset fails here), the -hex listing's parser, and
// the command end to end with the stand-in nvdisasm on tests/fixtures/sass/chain.hex.sass.
//
// Where the encodings come from: `ptxas -arch=sm_90 -lineinfo` of CUDA 13.0 on
// tests/fixtures/sass/chain.ptx and on ptx/forward.ptx (forward2), the 16 bytes of each
// instruction read from the cubin's .text section (little-endian: low word, then high word, as
// nvdisasm -hex prints them). The values below were decoded by hand and checked for sense: the
// instruction that reads a load's result waits on the scoreboard that load set.
#include "../../helpers.hpp"
#include "sass.hpp"
#include "sass_control.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {

struct Vector {
    const char* what;
    uint64_t lo, hi;
    ControlBits want;
};

// {stall, yield, write, read, wait mask, reuse}
const Vector kVectors[] = {
    // chain.ptx, sm_90
    {"chain+0x0010 S2R R9, SR_TID.X", 0x0000000000097919, 0x000e2e0000002100, {7, true, 0, -1, 0, 0}},
    {"chain+0x0040 IMAD.WIDE.U32 (reads S2R's and LDC's results)", 0x0000000409027825, 0x001fcc00078e0002,
     {6, false, -1, -1, 0b000001, 0}},
    {"chain+0x0050 LDG.E R2", 0x0000000602027981, 0x000ea2000c1e1900, {1, true, 2, -1, 0, 0}},
    {"chain+0x00b0 FFMA R0, R2, R2, 1 (reads the LDG's R2)", 0x3f80000002007423, 0x004fe40000000002,
     {2, true, -1, -1, 0b000100, 0}},
    {"chain+0x0110 LDS R7", 0x0000000004077984, 0x000e240000000800, {2, true, 0, -1, 0, 0}},
    {"chain+0x0120 FADD R7, R0, R7 (reads the LDS's R7)", 0x0000000700077221, 0x001fca0000000000,
     {5, false, -1, -1, 0b000001, 0}},
    {"chain+0x0140 EXIT", 0x000000000000794d, 0x000fea0003800000, {5, true, -1, -1, 0, 0}},
    {"chain+0x0150 BRA to itself", 0xfffffffc00fc7947, 0x000fc0000383ffff, {0, false, -1, -1, 0, 0}},
    // forward.ptx forward2, sm_90
    {"forward2+0x0e80 LDG (read scoreboard 0 on its address)", 0x0000000402007981, 0x000162000c1e1900,
     {1, true, 5, 0, 0, 0}},
    {"forward2+0x00b0 IMAD.WIDE, R4 in slot a reused", 0x00000006040a7c25, 0x040fe2000f8e00ff,
     {1, true, -1, -1, 0, 0b0001}},
    {"forward2+0x0700 FFMA, slots a b c reused", 0x0000001903167223, 0x1c0fe20000008018, {1, true, -1, -1, 0, 0b0111}},
};

bool same(const ControlBits& a, const ControlBits& b) {
    return a.stall == b.stall && a.yield == b.yield && a.write == b.write && a.read == b.read && a.wait == b.wait &&
           a.reuse == b.reuse;
}

int mismatches(const ControlLayout& layout) {
    int n = 0;
    for (const auto& v : kVectors) n += !same(decode_control(v.lo, v.hi, layout), v.want);
    return n;
}

std::string read_all(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string fake() { return fixture("sass/fake_nvdisasm.sh"); }

}  // namespace

TEST_CASE("sass --control: the decoder reads the hand-checked fields of real sm_90 encodings") {
    for (const auto& v : kVectors) {
        CAPTURE(v.what);
        const ControlBits c = decode_control(v.lo, v.hi);
        CHECK(c.stall == v.want.stall);
        CHECK(c.yield == v.want.yield);
        CHECK(c.write == v.want.write);
        CHECK(c.read == v.want.read);
        CHECK(c.wait == v.want.wait);
        CHECK(c.reuse == v.want.reuse);
    }
    CHECK(format_control(decode_control(0x0000000602027981, 0x000ea2000c1e1900)) == "S01 Y W2 R- wait ------ reuse ----");
    CHECK(format_control(decode_control(0x3f80000002007423, 0x004fe40000000002)) == "S02 Y W- R- wait --2--- reuse ----");
    CHECK(format_control(decode_control(0x0000001903167223, 0x1c0fe20000008018)) == "S01 Y W- R- wait ------ reuse abc-");
}

TEST_CASE("sass --control: a wrong bit offset for any field fails the vectors") {
    CHECK(mismatches(ControlLayout{}) == 0);
    int ControlLayout::*fields[] = {&ControlLayout::stall, &ControlLayout::yield, &ControlLayout::write,
                                    &ControlLayout::read,  &ControlLayout::wait,  &ControlLayout::reuse};
    for (auto f : fields)
        for (int shift : {-1, 1}) {
            ControlLayout planted;
            planted.*f += shift;
            CAPTURE(planted.*f);
            CHECK(mismatches(planted) > 0);
        }
}

TEST_CASE("sass --control: the layout is known for sm_70 .. sm_90 only") {
    CHECK(control_layout_for("sm_90"));
    CHECK(control_layout_for("sm_90a"));
    CHECK(control_layout_for("sm_70"));
    CHECK(control_layout_for("sm_86"));
    CHECK_FALSE(control_layout_for("sm_100"));
    CHECK_FALSE(control_layout_for("sm_120"));
    CHECK_FALSE(control_layout_for("sm_61"));
    CHECK_FALSE(control_layout_for("garbage"));
}

TEST_CASE("sass --control: the -hex listing's two words reach each instruction") {
    std::string listing = read_all(fixture("sass/chain.hex.sass"));
    REQUIRE(!listing.empty());
    const auto fns = parse_nvdisasm(listing);
    REQUIRE(fns.size() == 1);
    const auto& c = fns[0].code;
    REQUIRE(c.size() == 24);
    CHECK(c[5].opcode == "LDG.E");
    CHECK(c[5].encoding_words == 2);
    CHECK(c[5].encoding[0] == 0x0000000602027981);
    CHECK(c[5].encoding[1] == 0x000ea2000c1e1900);
    CHECK(c[5].operands == "R2, desc[UR6][R2.64]");
    CHECK(c[21].opcode == "BRA");
    CHECK(c[21].padding);
    for (const auto& ins : c) CHECK(ins.encoding_words == 2);
}

TEST_CASE("sass --control: a listing without encodings, and an unknown layout, say so") {
    const std::string listing =
        "\t.section\t.text.k,\"ax\",@progbits\n"
        ".text.k:\n"
        "        /*0000*/                   EXIT ;\n";
    const auto fns = parse_nvdisasm(listing);
    REQUIRE(fns.size() == 1);
    SassSource src;
    src.path = "k.ptx";
    const ControlLayout layout;
    const std::string out = format_control_listing(fns[0], src, &layout, "sm_90");
    CHECK(out.find("(no encoding in the listing)") != std::string::npos);
    CHECK(out.find("1 without their encoding in the listing, not counted") != std::string::npos);
    const std::string unknown = format_control_listing(fns[0], src, nullptr, "sm_100");
    CHECK(unknown.find("not known to ptxlab for sm_100 (it decodes sm_70 .. sm_90)") != std::string::npos);
}

TEST_CASE("sass --control: the command shows the bits, the stall sums per PTX line and the entry's total") {
    RunResult r = run_command("PTXLAB_NVDISASM=" + fake() + " " + ptxlab_cmd("sass --control " + fixture("sass/chain.ptx")));
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("control bits (sm_90)") != std::string::npos);
    CHECK(r.output.find("    26 | ld.global.f32   v, [x];\n           /*0050*/  S01 Y W2 R- wait ------ reuse ----  "
                        "LDG.E R2, desc[UR6][R2.64]\n") != std::string::npos);
    CHECK(r.output.find("/*00b0*/  S02 Y W- R- wait --2--- reuse ----  FFMA R0, R2, R2, 1") != std::string::npos);
    // Line 25 made two instructions (LDC S02 at 0x00c0, IMAD.WIDE S05 at 0x0100): 7 cycles.
    CHECK(r.output.find("\n        25       2      7  add.u64         y, y, off;\n") != std::string::npos);
    CHECK(r.output.find("\n        18       2      8  mov.u32         tid, %tid.x;\n") != std::string::npos);
    CHECK(r.output.find("total of chain: 60 stall cycles over 21 instructions\n") != std::string::npos);
    CHECK(r.output.find("/*0150*/") == std::string::npos);  // the padding is not listed
    // --control with --diff is refused by the command line; --arch without a known layout says so.
    RunResult d = run_command("PTXLAB_NVDISASM=" + fake() + " " +
                              ptxlab_cmd("sass --control " + fixture("sass/chain.ptx") + " --diff " + fixture("sass/chain.ptx")));
    CHECK(d.code != 0);
    CHECK(d.output.find("excludes") != std::string::npos);
}
