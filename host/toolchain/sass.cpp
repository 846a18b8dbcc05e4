#include "sass.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>

namespace ptxlab {

std::string SassInstruction::text() const {
    std::string s = predicate.empty() ? opcode : predicate + " " + opcode;
    if (!operands.empty()) s += " " + operands;
    return s;
}

// ---- parsing ----------------------------------------------------------------

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

// "/*0040*/   @P0 FFMA.FTZ R4, R2, R3, R4 ;  /* 0x... */" -> the instruction; false if the line is not one.
bool parse_instruction_line(std::string_view line, SassInstruction& ins) {
    static const std::regex addr_re(R"(^\s*/\*([0-9a-fA-F]+)\*/\s*(.*)$)");
    static const std::regex body_re(R"(^(@!?U?P(?:[0-9]+|T)\s+)?([A-Z][A-Z0-9_.]*)\s*(.*)$)");
    std::string l(line);
    std::smatch m;
    if (!std::regex_match(l, m, addr_re)) return false;
    ins.address = static_cast<unsigned>(std::stoul(m[1].str(), nullptr, 16));
    std::string body = m[2].str();
    if (auto c = body.find(";"); c != std::string::npos) {  // the encoding comment (-hex) follows ';'
        static const std::regex word_re(R"(/\*\s*0x([0-9a-fA-F]{1,16})\s*\*/)");
        const std::string rest = body.substr(c);
        if (std::smatch w; std::regex_search(rest, w, word_re)) {
            ins.encoding[0] = std::stoull(w[1].str(), nullptr, 16);
            ins.encoding_words = 1;
        }
        body.resize(c);
    }
    std::string_view b = trim(body);
    if (!b.empty() && b.front() == '{') b = trim(b.substr(1));  // dual-issue braces of old architectures
    if (!b.empty() && b.back() == '}') b = trim(b.substr(0, b.size() - 1));
    std::string bs(b);
    if (!std::regex_match(bs, m, body_re)) return false;
    ins.predicate = std::string(trim(m[1].str()));
    ins.opcode = m[2].str();
    ins.operands = std::string(trim(m[3].str()));
    return true;
}

// The closing `BRA` to itself and the NOPs after it: alignment padding, never executed.
void mark_padding(SassFunction& f) {
    size_t i = f.code.size();
    while (i > 0 && f.code[i - 1].opcode == "NOP") --i;
    if (i == 0) return;
    const SassInstruction& last = f.code[i - 1];
    if (last.opcode != "BRA" || !last.predicate.empty() || last.label.empty() ||
        last.operands.find("(" + last.label + ")") == std::string::npos)
        return;
    for (size_t k = i - 1; k < f.code.size(); ++k) f.code[k].padding = true;
}

}  // namespace

std::vector<SassFunction> parse_nvdisasm(std::string_view listing) {
    static const std::regex section_re(R"(^\s*\.section\s+\.text\.([^,\s]+))");
    static const std::regex text_label_re(R"(^\.text\.([^:\s]+):\s*$)");
    static const std::regex other_re(R"(^\s*\.other\s+([^,\s]+),\s*@"[^"]*STO_CUDA_ENTRY)");
    static const std::regex file_re(R"re(//##\s*File\s+"([^"]*)",\s*line\s+(\d+)(?:\s+inlined at\s+"([^"]*)",\s*line\s+(\d+))?)re");
    static const std::regex label_re(R"(^\s*(\.L[A-Za-z0-9_]*):\s*$)");
    static const std::regex word_re(R"(^\s*/\*\s*0x([0-9a-fA-F]{1,16})\s*\*/\s*$)");  // -hex: the high word
    std::vector<SassFunction> out;
    std::vector<SassFrame> current, pending;
    bool in_block = false;  // the last lines read were //## File lines (one location, several frames)
    std::string label;
    std::istringstream in{std::string(listing)};
    std::string line;
    std::smatch m;
    auto start = [&](const std::string& name) {
        if (!out.empty() && out.back().name == name) return;
        out.push_back({name, false, {}});
        current.clear();
        in_block = false;
        label.clear();
    };
    while (std::getline(in, line)) {
        if (std::regex_search(line, m, section_re) || std::regex_search(line, m, text_label_re)) {
            start(m[1].str());
        } else if (std::regex_search(line, m, other_re)) {
            for (auto& f : out)
                if (f.name == m[1].str()) f.entry = true;
        } else if (std::regex_search(line, m, file_re)) {
            if (!in_block) pending.clear();
            in_block = true;
            pending.push_back({m[1].str(), std::stoi(m[2].str())});
        } else if (std::regex_match(line, m, word_re)) {
            if (!out.empty() && !out.back().code.empty() && out.back().code.back().encoding_words == 1) {
                auto& last = out.back().code.back();
                last.encoding[1] = std::stoull(m[1].str(), nullptr, 16);
                last.encoding_words = 2;
            }
        } else if (std::regex_match(line, m, label_re)) {
            label = m[1].str();
        } else if (SassInstruction ins; !out.empty() && parse_instruction_line(line, ins)) {
            if (in_block) current = pending;
            in_block = false;
            ins.frames = current;
            ins.label = std::move(label);
            label.clear();
            out.back().code.push_back(std::move(ins));
        }
    }
    for (auto& f : out) mark_padding(f);
    return out;
}

// ---- counting ---------------------------------------------------------------

const std::vector<std::string>& opcode_class_names() {
    static const std::vector<std::string> names = {"FFMA", "FADD", "FMUL", "HMMA", "IMAD",    "LDG",  "STG", "LDS",
                                                   "STS",  "LDL/STL", "BAR", "SHFL", "MUFU", "BRA", "CALL", "other"};
    return names;
}

namespace {
std::string base_opcode(std::string_view opcode) {
    return std::string(opcode.substr(0, opcode.find('.')));
}
}  // namespace

std::string opcode_class(std::string_view opcode) {
    std::string base = base_opcode(opcode);
    if (base.size() > 3 && base.compare(base.size() - 3, 3, "32I") == 0) base.resize(base.size() - 3);
    if (base == "LDL" || base == "STL") return "LDL/STL";
    for (const auto& n : opcode_class_names())
        if (n == base && n != "other") return n;
    return "other";
}

ClassCounts count_classes(const SassFunction& f) {
    ClassCounts c;
    for (const auto& n : opcode_class_names()) c.by_class[n] = 0;
    for (const auto& ins : f.code) {
        if (ins.padding) {
            ++c.padding;
            continue;
        }
        const std::string cls = opcode_class(ins.opcode);
        ++c.by_class[cls];
        if (cls == "other") ++c.other[base_opcode(ins.opcode)];
        ++c.total;
    }
    return c;
}

// ---- source lines -----------------------------------------------------------

SassSource make_sass_source(const SourceFile& src, const AssemblyResult& res) {
    SassSource s;
    s.path = src.path;
    s.line_info_path = res.line_info_path;
    s.line_map = res.line_map;
    std::istringstream in(src.text);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        s.lines.push_back(std::move(line));
    }
    return s;
}

bool same_file(std::string_view a, std::string_view b) {
    if (a.empty() || b.empty()) return false;
    namespace fs = std::filesystem;
    const std::string na = fs::path(a).lexically_normal().string(), nb = fs::path(b).lexically_normal().string();
    if (na == nb) return true;
    const std::string& longer = na.size() > nb.size() ? na : nb;
    const std::string& shorter = na.size() > nb.size() ? nb : na;
    return shorter.front() != '/' && longer.size() > shorter.size() &&
           longer.compare(longer.size() - shorter.size(), shorter.size(), shorter) == 0 &&
           longer[longer.size() - shorter.size() - 1] == '/';
}

SourceRef resolve_line(const SassInstruction& ins, const SassSource& src) {
    const SassFrame* other = nullptr;
    for (const auto& f : ins.frames) {
        if (f.file == ".nv_debug_ptx_txt") {  // a line of the text the assembler saw
            if (f.line >= 1 && static_cast<size_t>(f.line) <= src.line_map.size())
                return {src.path, src.line_map[static_cast<size_t>(f.line - 1)], true};
            if (src.line_map.empty()) return {src.path, f.line, true};
            continue;
        }
        if (same_file(f.file, src.line_info_path) || same_file(f.file, src.path)) return {src.path, f.line, true};
        if (!other) other = &f;
    }
    if (other) return {other->file, other->line, false};
    return {};
}

// ---- output -----------------------------------------------------------------

std::string source_ref_text(const SourceRef& r) {
    if (r.line == 0) return "?";
    return r.in_source ? std::to_string(r.line) : fmt::format("{}:{}", r.file, r.line);
}

std::string source_line_text(const SourceRef& r, const SassSource& src) {
    if (r.line == 0) return "(no line info)";
    if (!r.in_source) return "(another file)";
    if (static_cast<size_t>(r.line) > src.lines.size()) return "(past the end of the file)";
    return std::string(trim(src.lines[static_cast<size_t>(r.line - 1)]));
}

namespace {
std::string kind_of(const SassFunction& f) { return f.entry ? ".entry" : ".func"; }

}  // namespace

std::string format_listing(const SassFunction& f, const SassSource& src, const std::string& preamble,
                           const std::function<std::string(const SassInstruction&)>& column) {
    std::string out = fmt::format("{} {}  ({})\n", kind_of(f), f.name, src.path) + preamble;
    size_t width = 4;
    std::vector<SourceRef> refs;
    for (const auto& ins : f.code) {
        refs.push_back(resolve_line(ins, src));
        width = std::max(width, source_ref_text(refs.back()).size());
    }
    bool first = true;
    SourceRef last;
    for (size_t i = 0; i < f.code.size(); ++i) {
        const auto& ins = f.code[i];
        if (ins.padding) continue;
        const SourceRef& r = refs[i];
        if (first || r.line != last.line || r.file != last.file)
            out += fmt::format("  {:>{}} | {}\n", source_ref_text(r), width, source_line_text(r, src));
        first = false;
        last = r;
        out += fmt::format("  {:>{}}     /*{:04x}*/  {}{}\n", "", width, ins.address, column ? column(ins) + "  " : "",
                           ins.text());
    }
    return out;
}

std::string format_summary(const SassFunction& f, const EntryResources* r) {
    const ClassCounts c = count_classes(f);
    std::string out = fmt::format("summary of {}: {} instructions", f.name, c.total);
    if (c.padding) out += fmt::format(" (and {} of padding after the code, not counted)", c.padding);
    out += "\n";
    if (r)
        out += fmt::format("  registers {}, barriers {}, stack {} B, spill stores {} B, spill loads {} B, shared {} B, "
                           "local {} B\n",
                           r->registers, r->barriers, r->stack, r->spill_stores, r->spill_loads, r->shared, r->local);
    else
        out += "  (no resource report from the assembler for this function)\n";
    const auto& names = opcode_class_names();
    std::string row;
    for (size_t i = 0; i < names.size(); ++i) {
        row += fmt::format(" {:>7} {:<5}", names[i], c.by_class.at(names[i]));
        if (i % 8 == 7 || i + 1 == names.size()) {
            while (!row.empty() && row.back() == ' ') row.pop_back();
            out += " " + row + "\n";
            row.clear();
        }
    }
    if (!c.other.empty()) {
        std::vector<std::pair<std::string, int>> others(c.other.begin(), c.other.end());
        std::stable_sort(others.begin(), others.end(), [](const auto& x, const auto& y) { return x.second > y.second; });
        std::string list;
        for (const auto& [op, n] : others) list += fmt::format("{}{} {}", list.empty() ? "" : ", ", op, n);
        out += "  other: " + list + "\n";
    }
    return out;
}

}  // namespace ptxlab
