#include "sass_control.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ptxlab {

namespace {
// The number in "sm_90" / "sm_90a" / "compute_90", or 0.
int arch_number(std::string_view arch) {
    const size_t u = arch.find('_');
    if (u == std::string_view::npos) return 0;
    int n = 0;
    for (size_t i = u + 1; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) n = n * 10 + (arch[i] - '0');
    return n;
}

unsigned field(uint64_t lo, uint64_t hi, int bit, int width) {
    // A field never straddles the two words in this layout, but read it bit by bit to be safe.
    unsigned v = 0;
    for (int k = 0; k < width; ++k) {
        const int b = bit + k;
        const uint64_t word = b < 64 ? lo : hi;
        v |= static_cast<unsigned>((word >> (b % 64)) & 1u) << k;
    }
    return v;
}
}  // namespace

// Volta (sm_70) through Hopper (sm_90): one 128-bit word per instruction, the control bits in
// its top. Maxwell and Pascal kept them in a separate 64-bit word per three instructions, and
// for sm_100 and later ptxlab has checked nothing: those are not decoded.
std::optional<ControlLayout> control_layout_for(std::string_view arch) {
    const int n = arch_number(arch);
    if (n >= 70 && n <= 90) return ControlLayout{};
    return std::nullopt;
}

std::string known_control_archs() { return "sm_70 .. sm_90"; }

ControlBits decode_control(uint64_t lo, uint64_t hi, const ControlLayout& l) {
    ControlBits c;
    c.stall = static_cast<int>(field(lo, hi, l.stall, 4));
    c.yield = field(lo, hi, l.yield, 1) != 0;
    const unsigned w = field(lo, hi, l.write, 3), r = field(lo, hi, l.read, 3);
    c.write = w == 7 ? -1 : static_cast<int>(w);
    c.read = r == 7 ? -1 : static_cast<int>(r);
    c.wait = field(lo, hi, l.wait, 6);
    c.reuse = field(lo, hi, l.reuse, 4);
    return c;
}

std::string format_control(const ControlBits& c) {
    std::string wait, reuse;
    for (int k = 0; k < 6; ++k) wait += (c.wait >> k & 1u) ? static_cast<char>('0' + k) : '-';
    for (int k = 0; k < 4; ++k) reuse += (c.reuse >> k & 1u) ? static_cast<char>('a' + k) : '-';
    auto sb = [](int s) { return s < 0 ? std::string("-") : std::to_string(s); };
    return fmt::format("S{:02} {} W{} R{} wait {} reuse {}", c.stall, c.yield ? 'Y' : '-', sb(c.write), sb(c.read), wait,
                       reuse);
}

namespace {

struct LineSum {
    int instructions = 0;
    int stall = 0;
    SourceRef ref;
};

std::string legend(std::string_view arch) {
    return fmt::format(
        "  control bits ({}): S stall cycles before the next instruction issues; Y the yield bit; W/R the scoreboard "
        "set when the result is written / the operands are read (- none); wait: the scoreboards waited on before "
        "issuing; reuse: the operand slots (a b c d) kept in the reuse cache\n",
        arch);
}

// The sum of the stall counts of each PTX line's instructions, in line order, and the total.
std::string format_stall_sums(const SassFunction& f, const SassSource& src, const std::vector<SourceRef>& refs,
                              const std::vector<int>& stalls) {
    std::map<std::pair<std::string, int>, LineSum> by_line;  // ("" for the source, line)
    int total = 0, counted = 0, undecoded = 0;
    for (size_t i = 0; i < f.code.size(); ++i) {
        if (f.code[i].padding) continue;
        if (stalls[i] < 0) {
            ++undecoded;
            continue;
        }
        const SourceRef& r = refs[i];
        LineSum& s = by_line[{r.in_source ? "" : r.file, r.line}];
        s.ref = r;
        ++s.instructions;
        s.stall += stalls[i];
        total += stalls[i];
        ++counted;
    }
    std::string out = fmt::format(
        "stall cycles by PTX line of {} (static: the sum of the stall counts ptxas set on the instructions each line "
        "made; waits on scoreboards and the time a branch or loop repeats them are not counted)\n",
        f.name);
    out += fmt::format("  {:>8} {:>7} {:>6}  {}\n", "line", "instrs", "stall", "PTX");
    for (const auto& [key, s] : by_line)
        out += fmt::format("  {:>8} {:>7} {:>6}  {}\n", source_ref_text(s.ref), s.instructions, s.stall,
                           source_line_text(s.ref, src));
    out += fmt::format("  total of {}: {} stall cycles over {} instructions", f.name, total, counted);
    if (undecoded) out += fmt::format(" ({} without their encoding in the listing, not counted)", undecoded);
    return out + "\n";
}

}  // namespace

std::string format_control_listing(const SassFunction& f, const SassSource& src, const ControlLayout* layout,
                                   std::string_view arch) {
    if (!layout)
        return format_listing(f, src) +
               fmt::format("  control bits: their layout in the encoding is not known to ptxlab for {} (it decodes {}); "
                           "not shown\n",
                           arch, known_control_archs());
    std::vector<SourceRef> refs;
    std::vector<int> stalls;
    for (const auto& ins : f.code) {
        refs.push_back(resolve_line(ins, src));
        stalls.push_back(ins.encoding_words == 2 ? decode_control(ins.encoding[0], ins.encoding[1], *layout).stall : -1);
    }
    const std::string out = format_listing(f, src, legend(arch), [&](const SassInstruction& ins) {
        return ins.encoding_words == 2 ? format_control(decode_control(ins.encoding[0], ins.encoding[1], *layout))
                                       : fmt::format("{:<34}", "(no encoding in the listing)");
    });
    return out + format_stall_sums(f, src, refs, stalls);
}

}  // namespace ptxlab
