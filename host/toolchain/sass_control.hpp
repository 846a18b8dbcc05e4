// The control bits of each SASS instruction (`ptxlab sass --control`): the stall count, the
// yield bit, the scoreboards an instruction sets and waits on, and its register-reuse flags,
// decoded from the 128-bit encodings nvdisasm prints with -hex; and the static sum of the
// stall counts per PTX line and per entry. Text in, text out: no GPU, no nvdisasm.
//
// The layout (NVIDIA does not document it; public reverse engineering: Jia et al.,
// "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018, and the
// turingas/CuAssembler assemblers for Volta..Ampere), in bits of the 128-bit word, whose high
// 64 bits nvdisasm prints second:
//     105..108 stall cycles (4 bits)            109 yield bit
//     110..112 scoreboard set on write (7: none) 113..115 scoreboard set on read (7: none)
//     116..121 scoreboards waited on (mask)      122..125 reuse flags (operand slots a, b, c, d)
// What ptxlab checked, on cubins ptxas 13.0 made here for sm_90 and sm_80 (the encodings in
// tests/fixtures/sass/chain.hex.sass and tests/cpu/toolchain/test_sass_control.cpp):
//   - a dependent chain: LDG sets write scoreboard 2, and the FFMA reading its value waits on
//     mask 0b000100 (scoreboard 2); S2R and LDC set scoreboard 0, the IMAD reading both waits on
//     mask 0b000001; LDS sets 0, the FADD reading it waits on 0;
//   - EXIT: stall 5, yield bit set, no scoreboards; the closing self-BRA and the NOPs: stall 0;
//   - forward2 (ptx/forward.ptx): an LDG with read scoreboard 0 (its address registers), and two
//     IMAD.WIDE in a row reading R4 in slot a, the first with reuse bit 0 set.
// Other architectures (Maxwell/Pascal's separate control words, sm_100 and later) are not
// decoded: the output says the layout is not known there.
#pragma once

#include "sass.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ptxlab {

// Bit offsets of the fields in the 128-bit encoding (bit 0 = the lowest bit of the first word).
struct ControlLayout {
    int stall = 105;  // 4 bits
    int yield = 109;  // 1 bit
    int write = 110;  // 3 bits, 7 = none
    int read = 113;   // 3 bits, 7 = none
    int wait = 116;   // 6 bits, a mask of scoreboards 0..5
    int reuse = 122;  // 4 bits, operand slots a, b, c, d
};

// The layout for `arch` ("sm_90", "sm_90a"), or nullopt where ptxlab does not know it.
std::optional<ControlLayout> control_layout_for(std::string_view arch);
// "sm_70 .. sm_90": the architectures control_layout_for knows.
std::string known_control_archs();

struct ControlBits {
    int stall = 0;
    bool yield = false;
    int write = -1;  // scoreboard set when the result is written, -1 none
    int read = -1;   // scoreboard set when the operands have been read, -1 none
    unsigned wait = 0;   // bit k: waits on scoreboard k
    unsigned reuse = 0;  // bit k: operand slot k kept in the reuse cache
};

// The fields of an encoding (its two 64-bit words, as nvdisasm prints them: low, then high).
ControlBits decode_control(uint64_t lo, uint64_t hi, const ControlLayout& layout = {});

// "S05 Y W2 R- wait --2--- reuse a---": stall, yield bit (Y or -), the scoreboards set on
// write and read, those waited on (digit k where it waits on k), the reuse flags (slot letters).
std::string format_control(const ControlBits& c);

// The listing of format_listing with each instruction's control bits before it, then the stall
// cycles summed per PTX line and for the whole function. `layout` null: not decoded, and why.
std::string format_control_listing(const SassFunction& f, const SassSource& src, const ControlLayout* layout,
                                   std::string_view arch);

}  // namespace ptxlab
