#include "profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

namespace ptxlab {

namespace {

std::string trimmed(const std::string& s) {
    const size_t b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    const size_t e = s.find_last_not_of(" \t\r");
    return s.substr(b, e - b + 1);
}

void add(StallCounts& to, const StallCounts& from) {
    for (const auto& [r, n] : from) to[r] += n;
}

double pct(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / whole : 0.0; }

}  // namespace

std::vector<std::pair<std::string, uint64_t>> top_reasons(const StallCounts& c, size_t n) {
    std::vector<std::pair<std::string, uint64_t>> v(c.begin(), c.end());
    v.erase(std::remove_if(v.begin(), v.end(), [](const auto& x) { return x.second == 0; }), v.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (v.size() > n) v.resize(n);
    return v;
}

bool is_barrier_stall(const std::string& reason) { return reason == "barrier"; }

namespace {

// The first word of an instruction or statement, past a guard ("@P0 ", "@!p ") and blanks.
std::string first_word(const std::string& text) {
    size_t b = text.find_first_not_of(" \t");
    if (b != std::string::npos && text[b] == '@') b = text.find_first_not_of(" \t", text.find_first_of(" \t", b));
    if (b == std::string::npos) return "";
    const size_t e = text.find_first_of(" \t;", b);
    return text.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

bool is_barrier_sass(const std::string& text) {
    const std::string op = first_word(text);
    if (op == "BAR" || starts_with(op, "BAR.")) return !starts_with(op, "BAR.ARV");
    return op == "WARPSYNC" || starts_with(op, "WARPSYNC.") || starts_with(op, "UCGABAR_WAIT") ||
           starts_with(op, "SYNCS.PHASECHK");
}

bool is_barrier_ptx(const std::string& statement) {
    const std::string op = first_word(statement);
    if (starts_with(op, "mbarrier.")) return starts_with(op, "mbarrier.try_wait") || starts_with(op, "mbarrier.test_wait");
    if (!starts_with(op, "bar.") && !starts_with(op, "barrier.")) return false;
    return op.find(".arrive") == std::string::npos;
}

std::string barrier_mark(const LineProfile& l) {
    if (!l.after_barrier) return "";
    return l.barrier_line ? fmt::format("^ barrier, line {}", l.barrier_line) : "^ barrier";
}

std::string block_of(const std::vector<std::string>& lines, int line) {
    static const std::regex label_re(R"(^\s*([A-Za-z_$%][A-Za-z0-9_$]*)\s*:\s*(//.*)?$)");
    std::smatch m;
    for (int k = std::min<int>(line, static_cast<int>(lines.size())); k >= 1; --k) {
        const std::string& l = lines[static_cast<size_t>(k - 1)];
        if (std::regex_match(l, m, label_re)) return m[1].str();
        if (l.find(".entry") != std::string::npos || l.find(".func") != std::string::npos) break;
    }
    return "(entry)";
}

namespace {

// The SASS instructions of `f` (padding left out), and each record's samples on them.
void place_samples(KernelProfile& k, const std::vector<const PcRecord*>& records, const SassFunction* f,
                   const SassSource* src) {
    std::map<uint64_t, size_t> at;
    if (f)
        for (const auto& ins : f->code) {
            if (ins.padding) continue;
            const SourceRef r = src ? resolve_line(ins, *src) : SourceRef{};
            at[ins.address] = k.code.size();
            k.code.push_back({ins.address, ins.text(), r.in_source ? r.line : 0, 0, {}});
        }
    for (const PcRecord* rec : records) {
        const uint64_t n = rec->samples();
        k.samples += n;
        add(k.stalls, rec->stalls);
        const auto it = at.find(rec->pc_offset);
        if (it == at.end()) {
            k.unmapped += n;
            continue;
        }
        k.code[it->second].samples += n;
        add(k.code[it->second].stalls, rec->stalls);
    }
}

bool top_is_barrier(const StallCounts& c) {
    const auto top = top_reasons(c, 1);
    return !top.empty() && is_barrier_stall(top[0].first);
}

// Marks the instructions whose barrier stalls are the waits of the barrier just before them, and
// their lines (LineProfile::after_barrier). `lo`: the first line of k.lines.
void mark_barrier_waits(KernelProfile& k, int lo) {
    auto ptx_of = [&](int line) -> const LineProfile* {
        if (line < lo || static_cast<size_t>(line - lo) >= k.lines.size()) return nullptr;
        return &k.lines[static_cast<size_t>(line - lo)];
    };
    for (size_t i = 1; i < k.code.size(); ++i) {
        InstructionProfile& ins = k.code[i];
        const InstructionProfile& prev = k.code[i - 1];
        const LineProfile* prev_line = ptx_of(prev.line);
        if (!ins.samples || !top_is_barrier(ins.stalls)) continue;
        if (!is_barrier_sass(prev.text) && !(prev_line && is_barrier_ptx(prev_line->text))) continue;
        ins.after_barrier = true;
        const LineProfile* l = ptx_of(ins.line);
        if (!l || !top_is_barrier(l->stalls)) continue;
        LineProfile& line = k.lines[static_cast<size_t>(ins.line - lo)];
        if (!line.after_barrier) line.barrier_line = prev_line ? prev.line : 0;
        line.after_barrier = true;
    }
}

void place_lines(KernelProfile& k, const SassSource& src) {
    int lo = 0, hi = 0;
    for (const auto& ins : k.code)
        if (ins.line > 0 && static_cast<size_t>(ins.line) <= src.lines.size()) {
            lo = lo ? std::min(lo, ins.line) : ins.line;
            hi = std::max(hi, ins.line);
        }
    if (!lo) return;
    for (int l = lo; l <= hi; ++l)
        k.lines.push_back({l, trimmed(src.lines[static_cast<size_t>(l - 1)]), block_of(src.lines, l), 0, {}, {}});
    for (size_t i = 0; i < k.code.size(); ++i) {
        const auto& ins = k.code[i];
        if (ins.line < lo || ins.line > hi) {
            k.unmapped += ins.samples;
            continue;
        }
        LineProfile& lp = k.lines[static_cast<size_t>(ins.line - lo)];
        lp.sass.push_back(i);
        lp.samples += ins.samples;
        add(lp.stalls, ins.stalls);
    }
    for (const auto& lp : k.lines) {
        auto b = std::find_if(k.blocks.begin(), k.blocks.end(), [&](const BlockProfile& x) { return x.label == lp.block; });
        if (b == k.blocks.end()) {
            k.blocks.push_back({lp.block, lp.line, 0, {}});
            b = k.blocks.end() - 1;
        }
        b->samples += lp.samples;
        add(b->stalls, lp.stalls);
    }
    mark_barrier_waits(k, lo);
}

}  // namespace

KernelProfile profile_kernel(const std::string& name, const std::vector<const PcRecord*>& records,
                             const SassFunction* f, const SassSource* src, const std::string& note) {
    KernelProfile k;
    k.name = name;
    k.note = note;
    if (src) k.source = src->path;
    place_samples(k, records, f, src);
    if (f && src) place_lines(k, *src);
    return k;
}

void finish_profile(Profile& p) {
    p.samples = 0;
    p.stalls.clear();
    for (const auto& k : p.kernels) {
        p.samples += k.samples;
        add(p.stalls, k.stalls);
    }
    std::stable_sort(p.kernels.begin(), p.kernels.end(),
                     [](const KernelProfile& a, const KernelProfile& b) { return a.samples > b.samples; });
}

// ---- text -----------------------------------------------------------------------

namespace {

std::string reasons_text(const StallCounts& c, size_t n = 3) {
    std::string s;
    for (const auto& [r, v] : top_reasons(c, n)) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", r, v);
    return s;
}

std::vector<const LineProfile*> hottest_lines(const KernelProfile& k, size_t top) {
    std::vector<const LineProfile*> v;
    for (const auto& l : k.lines)
        if (l.samples) v.push_back(&l);
    std::stable_sort(v.begin(), v.end(), [](const auto* a, const auto* b) { return a->samples > b->samples; });
    if (v.size() > top) v.resize(top);
    return v;
}

// "  ^ barrier, line 5" after a line's reasons when it holds a barrier's waits, else "".
std::string mark_text(const LineProfile& l) { return l.after_barrier ? "  " + barrier_mark(l) : ""; }

bool has_barrier_marks(const KernelProfile& k) {
    return std::any_of(k.code.begin(), k.code.end(), [](const InstructionProfile& i) { return i.after_barrier; });
}

void text_listing(std::string& out, const KernelProfile& k) {
    out += fmt::format("  {:>8} {:>6} {:>6} | {:<48} {}\n", "samples", "%", "line", "PTX", "top stall reasons");
    for (const auto& l : k.lines) {
        const std::string n = l.samples ? std::to_string(l.samples) : "";
        const std::string pc = l.samples ? fmt::format("{:.1f}", pct(l.samples, k.samples)) : "";
        out += fmt::format("  {:>8} {:>6} {:>6} | {:<48} {}{}\n", n, pc, l.line, l.text, reasons_text(l.stalls),
                           mark_text(l));
        for (size_t i : l.sass) {
            const auto& ins = k.code[i];
            if (!ins.samples) continue;
            out += fmt::format("  {:>8} {:>6} {:>6}     /*{:04x}*/  {:<36} {}{}\n", ins.samples, "", "", ins.address,
                               ins.text, reasons_text(ins.stalls), ins.after_barrier ? "  ^" : "");
        }
    }
    if (has_barrier_marks(k)) out += fmt::format("  {}\n", kBarrierLegend);
}

void text_tables(std::string& out, const KernelProfile& k, size_t top) {
    out += fmt::format("\n  hottest lines of {}:\n  {:>8} {:>6} {:>6}  {:<16} {}\n", k.name, "samples", "%", "line",
                       "block", "PTX  [top stall reasons]");
    for (const auto* l : hottest_lines(k, top))
        out += fmt::format("  {:>8} {:>6.1f} {:>6}  {:<16} {}  [{}]{}\n", l->samples, pct(l->samples, k.samples),
                           l->line, l->block, l->text, reasons_text(l->stalls), mark_text(*l));
    std::vector<const BlockProfile*> blocks;
    for (const auto& b : k.blocks)
        if (b.samples) blocks.push_back(&b);
    std::stable_sort(blocks.begin(), blocks.end(), [](const auto* a, const auto* b) { return a->samples > b->samples; });
    out += fmt::format("\n  hottest blocks of {}:\n  {:>8} {:>6} {:>6}  {:<16} {}\n", k.name, "samples", "%", "line",
                       "label", "top stall reasons");
    for (size_t i = 0; i < blocks.size() && i < top; ++i)
        out += fmt::format("  {:>8} {:>6.1f} {:>6}  {:<16} {}\n", blocks[i]->samples, pct(blocks[i]->samples, k.samples),
                           blocks[i]->first_line, blocks[i]->label, reasons_text(blocks[i]->stalls));
}

void text_stalls(std::string& out, const std::string& title, const StallCounts& c, uint64_t total) {
    out += fmt::format("\n{}:\n", title);
    for (const auto& [r, n] : top_reasons(c, c.size()))
        out += fmt::format("  {:>8} {:>6.1f} %  {}\n", n, pct(n, total), r);
}

}  // namespace

std::string format_profile_text(const Profile& p, size_t top) {
    std::string out = fmt::format("ptxlab profile: {}\n  on {}; one sample every 2^{} cycles per SM; {} samples", p.what,
                                  p.device, p.period, p.samples);
    out += fmt::format(" (CUPTI: {} dropped, {} in the driver's own kernels{})\n", p.dropped, p.non_user,
                       p.hardware_buffer_full ? "; the hardware buffer filled: raise --period" : "");
    for (const auto& n : p.notes) out += "  note: " + n + "\n";
    for (const auto& k : p.kernels) {
        out += fmt::format("\n.entry {}  ({}): {} samples, {:.1f} % of all", k.name, k.source.empty() ? "?" : k.source,
                           k.samples, pct(k.samples, p.samples));
        if (k.unmapped) out += fmt::format("; {} not on a PTX line", k.unmapped);
        out += "\n";
        if (!k.note.empty()) out += "  " + k.note + "\n";
        if (k.lines.empty()) {
            text_stalls(out, fmt::format("stall reasons of {}", k.name), k.stalls, k.samples);
            continue;
        }
        text_listing(out, k);
        text_tables(out, k, top);
        text_stalls(out, fmt::format("  stall reasons of {}", k.name), k.stalls, k.samples);
    }
    text_stalls(out, "stall reasons, all kernels", p.stalls, p.samples);
    std::string trimmed_out;  // lines without a reason end in the column's padding
    for (size_t b = 0; b < out.size();) {
        size_t e = out.find('\n', b);
        if (e == std::string::npos) e = out.size();
        size_t end = e;
        while (end > b && out[end - 1] == ' ') --end;
        trimmed_out.append(out, b, end - b);
        if (e < out.size()) trimmed_out += '\n';
        b = e + 1;
    }
    return trimmed_out;
}

}  // namespace ptxlab
