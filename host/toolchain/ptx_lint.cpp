#include "ptx_lint.hpp"

#include <fmt/format.h>

#include <cctype>
#include <string>

namespace ptxlab {

namespace {

// Plain scanning, not std::regex: the text is the user's, and libstdc++'s regex recurses once per
// character matched (an `ld.param` operand followed by 200 000 spaces overflowed the stack).

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The width in bytes of "8", "16", "32" or "64" bits; 0 for anything else.
int width_bytes(std::string_view bits) {
    return bits == "8" ? 1 : bits == "16" ? 2 : bits == "32" ? 4 : bits == "64" ? 8 : 0;
}

// Width in bytes of a scalar PTX type (".u32" -> 4); 0 for arrays and unknown types.
int type_bytes(std::string_view t) {
    if (t.size() < 3 || t[0] != '.' || std::string_view("usbf").find(t[1]) == std::string_view::npos) return 0;
    return width_bytes(t.substr(2));
}

// One `ld.param[.MODIFIER...].TYPE DEST, [NAME]` (or `[NAME + OFFSET]`).
struct ParamLoad {
    std::string modifiers;  // ".global" ..., "" when none (letters only: `.v2` makes it no match)
    std::string type;       // "u32": [usbf] and 8, 16, 32 or 64
    std::string name;
    bool offset = false;    // `[NAME + N]`
    size_t end = 0;         // just past the ']'
};

// Reads a load at `at` (where "ld.param" starts); false when the text there is not one.
bool read_param_load(std::string_view t, size_t at, ParamLoad& ld) {
    size_t p = at + 8;  // after "ld.param"
    // .MODIFIER (letters) repeated, then .TYPE followed by white space.
    for (;;) {
        if (p >= t.size() || t[p] != '.') return false;
        size_t q = p + 1;
        while (q < t.size() && is_lower(t[q])) ++q;
        if (q == p + 1) return false;
        if (q == p + 2 && std::string_view("usbf").find(t[p + 1]) != std::string_view::npos) {
            size_t d = q;
            while (d < t.size() && is_digit(t[d])) ++d;
            if (d > q && width_bytes(t.substr(q, d - q)) && d < t.size() && is_space(t[d])) {
                ld.type = std::string(t.substr(p + 1, d - p - 1));
                p = d;
                break;
            }
        }
        if (q >= t.size() || t[q] != '.') return false;
        ld.modifiers += t.substr(p, q - p);
        p = q;
    }
    // White space, the destination (anything up to the first ',' or ';', at least one character
    // after the first white space), the comma.
    const size_t stop = t.find_first_of(",;", p);
    if (stop == std::string_view::npos || stop - p < 2 || t[stop] != ',') return false;
    p = stop + 1;
    auto skip = [&] {
        while (p < t.size() && is_space(t[p])) ++p;
    };
    skip();
    if (p >= t.size() || t[p] != '[') return false;
    ++p;
    skip();
    // NAME: [A-Za-z_$%] then [A-Za-z0-9_$]*.
    const size_t name = p;
    if (p >= t.size() || !(std::isalpha(static_cast<unsigned char>(t[p])) || t[p] == '_' || t[p] == '$' || t[p] == '%'))
        return false;
    for (++p; p < t.size() && (std::isalnum(static_cast<unsigned char>(t[p])) || t[p] == '_' || t[p] == '$');) ++p;
    ld.name = std::string(t.substr(name, p - name));
    skip();
    if (p < t.size() && t[p] == '+') {  // + digits
        ++p;
        skip();
        const size_t digits = p;
        while (p < t.size() && is_digit(t[p])) ++p;
        if (p == digits) return false;
        skip();
        ld.offset = true;
    }
    if (p >= t.size() || t[p] != ']') return false;
    ld.end = p + 1;
    return true;
}

}  // namespace

std::vector<Diagnostic> param_width_warnings(std::string_view text, const PtxInfo& info) {
    std::vector<Diagnostic> out;
    // Parameters by name, in the entry whose body the load is in (the last entry that starts before it).
    const std::string clean = strip_comments(text);
    const std::string_view t = clean;
    int line = 1;
    size_t counted = 0;
    for (size_t at = t.find("ld.param"); at != std::string_view::npos; at = t.find("ld.param", at)) {
        ParamLoad m;
        if (!read_param_load(t, at, m)) {
            ++at;
            continue;
        }
        for (; counted < at; ++counted) line += clean[counted] == '\n';
        at = m.end;
        if (m.offset || m.modifiers.find(".v") != std::string::npos) continue;  // offsets and vectors: not judged
        const PtxEntry* owner = nullptr;
        for (const auto& e : info.entries)
            if (e.line <= line) owner = &e;
        if (!owner) continue;
        for (const auto& p : owner->params) {
            if (p.name != m.name) continue;
            const int declared = type_bytes(p.type), read = width_bytes(std::string_view(m.type).substr(1));
            if (declared == 0 || declared == read) break;
            out.push_back({line, "warning",
                           fmt::format("ld.param.{} reads {} bytes of parameter '{}', which is declared {} ({} bytes): "
                                       "ptxas accepts this silently; {}",
                                       m.type, read, p.name, p.type, declared,
                                       read > declared ? "the load reads past the parameter"
                                                       : "the load keeps only part of it (a pointer truncated?)")});
            break;
        }
    }
    return out;
}

}  // namespace ptxlab
