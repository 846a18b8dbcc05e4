#include "ptx_lint.hpp"

#include <fmt/format.h>

#include <map>
#include <regex>
#include <string>

namespace ptxlab {

namespace {

// Width in bytes of a scalar PTX type (".u32" -> 4); 0 for arrays and unknown types.
int type_bytes(const std::string& t) {
    static const std::regex scalar(R"(\.[usbf](8|16|32|64))");
    std::smatch m;
    if (!std::regex_match(t, m, scalar)) return 0;
    return std::stoi(m[1]) / 8;
}

}  // namespace

std::vector<Diagnostic> param_width_warnings(std::string_view text, const PtxInfo& info) {
    std::vector<Diagnostic> out;
    // Parameters by name, in the entry whose body the load is in (the last entry that starts before it).
    const std::string clean = strip_comments(text);
    static const std::regex load(R"(ld\.param((?:\.[a-z]+)*)\.([usbf](?:8|16|32|64))\s+[^,;]+,\s*\[\s*([A-Za-z_$%][\w$]*)\s*(\+\s*\d+\s*)?\])");
    int line = 1;
    size_t counted = 0;
    for (auto it = std::sregex_iterator(clean.begin(), clean.end(), load); it != std::sregex_iterator(); ++it) {
        const auto& m = *it;
        const size_t pos = static_cast<size_t>(m.position(0));
        for (; counted < pos; ++counted) line += clean[counted] == '\n';
        if (m[4].matched || m[1].str().find(".v") != std::string::npos) continue;  // offsets and vectors: not judged
        const PtxEntry* owner = nullptr;
        for (const auto& e : info.entries)
            if (e.line <= line) owner = &e;
        if (!owner) continue;
        for (const auto& p : owner->params) {
            if (p.name != m[3].str()) continue;
            const int declared = type_bytes(p.type), read = std::stoi(m[2].str().substr(1)) / 8;
            if (declared == 0 || declared == read) break;
            out.push_back({line, "warning",
                           fmt::format("ld.param.{} reads {} bytes of parameter '{}', which is declared {} ({} bytes): "
                                       "ptxas accepts this silently; {}",
                                       m[2].str(), read, p.name, p.type, declared,
                                       read > declared ? "the load reads past the parameter"
                                                       : "the load keeps only part of it (a pointer truncated?)")});
            break;
        }
    }
    return out;
}

}  // namespace ptxlab
