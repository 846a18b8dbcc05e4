// The contract header of a .ptx file: reading it (`parse_contract`) and checking it against the entry and the twin.
#include "contract.hpp"

#include "error.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>
#include <string_view>
#include <sstream>

namespace fs = std::filesystem;

namespace ptxlab {

// ---- The header ------------------------------------------------------------------------

std::string to_string(ElemType t) { return t == ElemType::F32 ? "f32" : t == ElemType::U32 ? "u32" : "s32"; }
std::string to_string(ParamRole r) {
    switch (r) {
        case ParamRole::In: return "in";
        case ParamRole::Out: return "out";
        case ParamRole::InOut: return "inout";
        case ParamRole::Scalar: return "scalar";
        case ParamRole::TensorMap: return "tensormap";
    }
    return "?";
}

std::string ContractParam::ptx_type() const {
    if (role == ParamRole::TensorMap) return ".b8[128]";
    return buffer() ? ".u64" : "." + to_string(type);
}

std::string Contract::twin_path() const {
    fs::path t(twin);
    return t.is_absolute() ? t.string() : (fs::path(path).parent_path() / t).string();
}

std::string Contract::compare_text() const {
    if (compare == CompareKind::Ulp) return fmt::format("within {} ulp", tolerance);
    if (compare == CompareKind::Rel) return fmt::format("relative {:g}", tolerance);
    return "bitwise";
}

std::string shape_text(const ShapeVars& s) {
    std::string out;
    for (const auto& [k, v] : s) out += fmt::format("{}{}={}", out.empty() ? "" : " ", k, v);
    return out;
}

namespace {

// The header is read by plain scanning, not std::regex: libstdc++'s regex recurses once per
// character matched, and a 50 KB `why` line overflowed the stack.

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || c == '\n'; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A name: a letter or _, then letters, digits and _.
bool is_identifier(std::string_view s) {
    if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
    return std::all_of(s.begin() + 1, s.end(), is_word);
}

// Reads what `take` accepts from s[p...]; returns it and moves p past it.
template <class Pred> std::string_view take_while(std::string_view s, size_t& p, Pred take) {
    const size_t start = p;
    while (p < s.size() && take(s[p])) ++p;
    return s.substr(start, p - start);
}
std::string_view skip_spaces(std::string_view s, size_t& p) { return take_while(s, p, is_space); }

// A line of the file as a `//` comment: the text after the slashes, without the white space
// around it; nullopt when the line is not a comment.
std::optional<std::string_view> comment_body(std::string_view l) {
    size_t p = 0;
    skip_spaces(l, p);
    if (l.substr(p, 2) != "//") return std::nullopt;
    p += 2;
    skip_spaces(l, p);
    std::string_view body = l.substr(p);
    while (!body.empty() && is_space(body.back())) body.remove_suffix(1);
    return body;
}

bool parse_type(const std::string& s, ElemType& t) {
    if (s == "f32") t = ElemType::F32;
    else if (s == "u32") t = ElemType::U32;
    else if (s == "s32") t = ElemType::S32;
    else return false;
    return true;
}

// Splits at commas outside parentheses.
std::vector<std::string> split_top(const std::string& s) {
    std::vector<std::string> out{""};
    int depth = 0;
    for (char c : s) {
        depth += (c == '(') - (c == ')');
        if (c == ',' && depth == 0) out.emplace_back();
        else out.back() += c;
    }
    for (auto& x : out) {
        const auto b = x.find_first_not_of(" \t"), e = x.find_last_not_of(" \t");
        x = b == std::string::npos ? "" : x.substr(b, e - b + 1);
    }
    return out;
}

double parse_number(const std::string& s) {
    Rational q = eval_expr(s, {});
    return q.value();
}

// One line of the block, already split into its key and the rest.
struct Line {
    int no;
    std::string key, rest;
};

class HeaderReader {
public:
    HeaderReader(const SourceFile& src, ContractParse& out) : src_(src), out_(out) {}

    void read(const std::vector<Line>& lines, int begin_line) {
        Contract c;
        c.path = src_.path;
        c.line = begin_line;
        c_ = &c;
        // vars first, so that expressions on earlier lines can be checked against them.
        for (const auto& l : lines)
            if (l.key == "vars") guarded(l, [&] { read_vars(l); });
        for (const auto& l : lines)
            if (l.key != "vars") guarded(l, [&] { read_line(l); });
        require(!c.entry.empty(), begin_line, "the contract names no `entry`");
        require(!c.vars.empty() || !seen_vars_, begin_line, "`vars` lists no variables");
        require(!c.shapes.empty(), begin_line, "the contract gives no default `shape` (e.g. `shape N=1000`)");
        require(!c.twin.empty(), begin_line, "the contract names no `twin` (e.g. `twin reference/NAME.cu`)");
        require(seen_.count("grid") && seen_.count("block"), begin_line, "the contract needs `grid` and `block`");
        require(c.compare == CompareKind::Bitwise || !c.why.empty(), compare_line_,
                "a comparison other than bitwise needs a `why` line saying where the difference comes from");
        for (const auto& p : c.params) {
            if (p.role != ParamRole::TensorMap) continue;
            const auto of = std::find_if(c.params.begin(), c.params.end(),
                                         [&](const ContractParam& q) { return q.name == p.tmap_of; });
            require(of != c.params.end() && of->buffer(), p.line,
                    fmt::format("tensor map '{}' describes '{}', which is not a buffer parameter of this contract",
                                p.name, p.tmap_of));
        }
        if (out_.problems.empty()) out_.contract = std::move(c);
    }

private:
    template <class F> void guarded(const Line& l, F f) {
        try {
            f();
        } catch (const InputError& e) {
            add(l.no, e.what());
        }
    }
    void add(int line, const std::string& msg) { out_.problems.push_back({line, "error", msg}); }
    void require(bool ok, int line, const std::string& msg) {
        if (!ok) add(line, msg);
    }
    [[noreturn]] void fail(const std::string& msg) { throw InputError(msg); }

    void once(const Line& l) {
        if (!seen_.insert(l.key).second) fail(fmt::format("`{}` is given twice", l.key));
    }
    // An expression whose names are all declared variables.
    std::string expr(const std::string& text, const std::string& what) {
        if (text.empty()) fail(fmt::format("{}: an expression is missing", what));
        std::vector<std::string> names;
        try {
            names = expr_names(text);
        } catch (const InputError& e) {
            fail(fmt::format("{}: {}", what, e.what()));
        }
        for (const auto& n : names)
            if (std::find(c_->vars.begin(), c_->vars.end(), n) == c_->vars.end())
                fail(fmt::format("{} `{}` uses '{}', which is not a declared variable (vars: {})", what, text, n,
                                 c_->vars.empty() ? std::string("none") : fmt::format("{}", fmt::join(c_->vars, " "))));
        return text;
    }

    void read_vars(const Line& l) {
        once(l);
        seen_vars_ = true;
        std::istringstream in(l.rest);
        for (std::string v; in >> v;) {
            if (!is_identifier(v)) fail(fmt::format("variable '{}' is not a name (letters, digits, _)", v));
            if (v == "ceil" || v == "floor" || v == "min" || v == "max") fail(fmt::format("'{}' is a function", v));
            if (std::find(c_->vars.begin(), c_->vars.end(), v) != c_->vars.end())
                fail(fmt::format("variable '{}' is declared twice", v));
            c_->vars.push_back(v);
        }
    }

    void read_line(const Line& l) {
        Contract& c = *c_;
        const std::string& k = l.key;
        if (k == "entry") {
            once(l);
            if (!is_identifier(l.rest)) fail(fmt::format("entry '{}' is not a name", l.rest));
            c.entry = l.rest, c.entry_line = l.no;
        } else if (k == "shape") {
            c.shapes.push_back(parse_shape(l.rest, c, "shape"));
        } else if (k == "param") {
            read_param(l);
        } else if (k == "grid" || k == "block" || k == "cluster") {
            once(l);
            auto parts = split_top(l.rest);
            if (parts.size() > 3) fail(fmt::format("{} takes up to three sizes (x, y, z)", k));
            auto& dst = k == "grid" ? c.grid : k == "block" ? c.block : c.cluster;
            for (size_t i = 0; i < parts.size(); ++i) dst[i] = expr(parts[i], k);
            (k == "grid" ? c.grid_line : k == "block" ? c.block_line : c.cluster_line) = l.no;
        } else if (k == "shared") {
            once(l);
            c.shared = expr(l.rest, "shared");
            c.shared_line = l.no;
        } else if (k == "twin") {
            once(l);
            if (l.rest.empty()) fail("twin: the path is missing");
            if (fs::path(l.rest).extension() != ".cu") fail(fmt::format("twin '{}' is not a .cu file", l.rest));
            c.twin = l.rest, c.twin_line = l.no;
        } else if (k == "compare") {
            once(l);
            read_compare(l);
        } else if (k == "why") {
            c.why += (c.why.empty() ? "" : " ") + l.rest;
        } else if (k == "bytes" || k == "flops") {
            once(l);
            (k == "bytes" ? c.bytes : c.flops) = expr(l.rest, k);
            (k == "bytes" ? c.bytes_line : c.flops_line) = l.no;
        } else {
            fail(fmt::format("unknown key '{}' (keys: entry vars shape param grid block cluster shared twin "
                             "compare why bytes flops)",
                             k));
        }
    }

    void read_compare(const Line& l) {
        compare_line_ = l.no;
        std::istringstream in(l.rest);
        std::string kind, amount, extra;
        in >> kind >> amount >> extra;
        if (!extra.empty()) fail(fmt::format("compare: unexpected '{}' (put the reason on a `why` line)", extra));
        if (kind == "bitwise") {
            if (!amount.empty()) fail("compare bitwise takes no amount");
            c_->compare = CompareKind::Bitwise;
            return;
        }
        if (kind != "ulp" && kind != "rel") fail(fmt::format("compare '{}': use bitwise, ulp N or rel X", kind));
        if (amount.empty()) fail(fmt::format("compare {} needs an amount", kind));
        double v = parse_number(amount);
        c_->compare = kind == "ulp" ? CompareKind::Ulp : CompareKind::Rel;
        if (kind == "ulp" && (v != std::floor(v) || v < 1 || v > 1e6))
            fail(fmt::format("compare ulp {}: a whole number of ulps from 1 to 10^6", amount));
        if (kind == "rel" && !(v > 0 && v < 1)) fail(fmt::format("compare rel {}: a bound between 0 and 1", amount));
        c_->tolerance = v;
    }

    // `NAME TYPE = VALUE`: the name, white space, a word, `=` (white space around it optional),
    // a value of at least one character.
    static bool match_scalar(std::string_view r, std::string_view& name, std::string_view& type,
                             std::string_view& value) {
        size_t p = 0;
        name = take_while(r, p, is_word);
        if (!is_identifier(name) || skip_spaces(r, p).empty()) return false;
        type = take_while(r, p, is_word);
        skip_spaces(r, p);
        if (type.empty() || p >= r.size() || r[p] != '=') return false;
        ++p;
        skip_spaces(r, p);
        value = r.substr(p);
        return !value.empty();
    }
    // `NAME ROLE TYPE[LENGTH] REST`: the length runs to the last `]` of the line.
    static bool match_buffer(std::string_view r, std::string_view& name, std::string_view& role,
                             std::string_view& type, std::string_view& length, std::string_view& rest) {
        size_t p = 0;
        name = take_while(r, p, is_word);
        if (!is_identifier(name) || skip_spaces(r, p).empty()) return false;
        role = take_while(r, p, is_word);
        if (role.empty() || skip_spaces(r, p).empty()) return false;
        type = take_while(r, p, is_word);
        skip_spaces(r, p);
        const size_t close = r.rfind(']');
        if (type.empty() || p >= r.size() || r[p] != '[' || close == std::string_view::npos || close < p) return false;
        length = r.substr(p + 1, close - p - 1);
        p = close + 1;
        skip_spaces(r, p);
        rest = r.substr(p);
        return true;
    }

    void read_param(const Line& l) {
        std::string_view name, role, type, length, value, range;
        ContractParam p;
        p.line = l.no;
        const std::string first = l.rest.substr(0, l.rest.find_first_of(" \t"));
        for (const auto& q : c_->params)
            if (q.name == first) fail(fmt::format("parameter '{}' is listed twice (line {})", q.name, q.line));
        if (match_tensor_map(l.rest, name, value)) {
            p.name = name, p.role = ParamRole::TensorMap;
            read_tensor_map(p, std::string(value));
        } else if (match_scalar(l.rest, name, type, value)) {
            p.name = name, p.role = ParamRole::Scalar;
            if (!parse_type(std::string(type), p.type))
                fail(fmt::format("parameter '{}': scalar type '{}' (u32, s32 or f32)", p.name, type));
            p.value = expr(std::string(value), fmt::format("parameter '{}'", p.name));
        } else if (match_buffer(l.rest, name, role, type, length, range)) {
            p.name = name;
            if (role == "in") p.role = ParamRole::In;
            else if (role == "out") p.role = ParamRole::Out;
            else if (role == "inout") p.role = ParamRole::InOut;
            else fail(fmt::format("parameter '{}': role '{}' (in, out or inout)", p.name, role));
            if (!parse_type(std::string(type), p.type))
                fail(fmt::format("parameter '{}': element type '{}' (f32, u32 or s32)", p.name, type));
            p.length = expr(std::string(length), fmt::format("the length of '{}'", p.name));
            read_range(p, std::string(range));
        } else {
            fail(fmt::format("param `{}`: write `param NAME in|out|inout TYPE[LENGTH] [LO .. HI]` or `param NAME "
                             "TYPE = VALUE` or `param NAME tensormap(BUF, ROWS, COLS, BOX_ROWS, BOX_COLS[, swizzle128])`",
                             l.rest));
        }
        c_->params.push_back(p);
    }

    // `NAME tensormap(ARGS)`: the name, white space, `tensormap`, `(`, the arguments, a final `)`.
    static bool match_tensor_map(std::string_view r, std::string_view& name, std::string_view& args) {
        size_t p = 0;
        name = take_while(r, p, is_word);
        if (!is_identifier(name) || skip_spaces(r, p).empty()) return false;
        if (take_while(r, p, is_word) != "tensormap") return false;
        skip_spaces(r, p);
        if (p >= r.size() || r[p] != '(' || r.back() != ')') return false;
        args = r.substr(p + 1, r.size() - p - 2);
        return true;
    }
    void read_tensor_map(ContractParam& p, const std::string& args) {
        const auto parts = split_top(args);
        if (parts.size() != 5 && parts.size() != 6)
            fail(fmt::format("tensor map '{}': write tensormap(BUF, ROWS, COLS, BOX_ROWS, BOX_COLS[, swizzle128]), not "
                             "tensormap({})",
                             p.name, args));
        if (parts.size() == 6 && parts[5] != "swizzle128")
            fail(fmt::format("tensor map '{}': the sixth argument '{}' is not a swizzle mode (swizzle128 is the one "
                             "there is)",
                             p.name, parts[5]));
        p.tmap_swizzle128 = parts.size() == 6;
        if (!is_identifier(parts[0])) fail(fmt::format("tensor map '{}': '{}' is not a parameter name", p.name, parts[0]));
        p.tmap_of = parts[0];
        const char* what[] = {"rows", "columns", "box rows", "box columns"};
        for (size_t i = 0; i < 4; ++i) p.tmap[i] = expr(parts[i + 1], fmt::format("tensor map '{}' {}", p.name, what[i]));
    }

    void read_range(ContractParam& p, const std::string& range) {
        const bool wants = p.role != ParamRole::Out;
        const auto dots = range.find("..");
        if (!wants) {
            if (!range.empty()) fail(fmt::format("parameter '{}' is an output: it takes no range (it is poisoned)", p.name));
            return;
        }
        if (dots == std::string::npos)
            fail(fmt::format("parameter '{}' needs its random range, e.g. `-1 .. 1`", p.name));
        p.lo = parse_number(range.substr(0, dots));
        p.hi = parse_number(range.substr(dots + 2));
        if (!(p.lo < p.hi)) fail(fmt::format("parameter '{}': the range {} .. {} is empty", p.name, p.lo, p.hi));
        if (p.type != ElemType::F32 && (p.lo != std::floor(p.lo) || p.hi != std::floor(p.hi)))
            fail(fmt::format("parameter '{}': an integer buffer takes whole bounds", p.name));
        if (p.type == ElemType::U32 && (p.lo < 0 || p.hi > 4294967295.0))
            fail(fmt::format("parameter '{}': u32 values lie in 0 .. 4294967295", p.name));
        if (p.type == ElemType::S32 && (p.lo < -2147483648.0 || p.hi > 2147483647.0))
            fail(fmt::format("parameter '{}': s32 values lie in -2147483648 .. 2147483647", p.name));
    }

    const SourceFile& src_;
    ContractParse& out_;
    Contract* c_ = nullptr;
    std::set<std::string> seen_;
    bool seen_vars_ = false;
    int compare_line_ = 0;
};

}  // namespace

ShapeVars parse_shape(const std::string& text, const Contract& c, const std::string& what) {
    ShapeVars s;
    for (const auto& part : split_top(text)) {
        const auto eq = part.find('=');
        if (part.empty() || eq == std::string::npos)
            PTXLAB_THROW(InputError, "{} `{}`: write NAME=VALUE pairs separated by commas, e.g. N=1000", what, text);
        std::string name = part.substr(0, eq), value = part.substr(eq + 1);
        name.erase(name.find_last_not_of(" \t") + 1);
        value.erase(0, value.find_first_not_of(" \t"));
        if (std::find(c.vars.begin(), c.vars.end(), name) == c.vars.end())
            PTXLAB_THROW(InputError, "{}: '{}' is not a variable of this contract (vars: {})", what, name,
                         fmt::join(c.vars, " "));
        if (s.count(name)) PTXLAB_THROW(InputError, "{}: '{}' is given twice", what, name);
        if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
            PTXLAB_THROW(InputError, "{}: {}={} is not a whole number", what, name, value);
        // Digits only: past ten of them (leading zeros aside) the value is too large for stoll to be asked.
        const size_t lead = std::min(value.find_first_not_of('0'), value.size());
        const int64_t v = value.size() - lead > 10 ? INT64_MAX : std::stoll(value);
        if (v < 1 || v > (int64_t(1) << 31))
            PTXLAB_THROW(InputError, "{}: {}={} is {}, outside 1 .. 2^31", what, name,
                         value.size() <= 24 ? value : value.substr(0, 20) + fmt::format("... ({} digits)", value.size()),
                         v < 1 ? "too small" : "too large");
        s[name] = v;
    }
    for (const auto& v : c.vars)
        if (!s.count(v)) PTXLAB_THROW(InputError, "{} `{}` gives no value for '{}'", what, text, v);
    return s;
}

ContractParse parse_contract(const SourceFile& src) {
    ContractParse out;
    std::vector<Line> lines;
    int begin = 0, line_no = 0;
    bool ended = false;
    const std::string_view text = src.text;
    for (size_t pos = 0; pos <= text.size();) {
        const size_t nl = std::min(text.find('\n', pos), text.size());
        std::string_view l = text.substr(pos, nl - pos);
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        ++line_no;
        const std::optional<std::string_view> body = comment_body(l);
        if (body && *body == "@contract") {
            if (begin) out.problems.push_back({line_no, "error", fmt::format("a second @contract (the first is at line {})", begin)});
            else begin = line_no;
        } else if (begin && !ended) {
            if (!body) {
                out.problems.push_back({line_no, "error", fmt::format("the @contract block of line {} has no `// @end` "
                                                                      "before this line (every line in it is a // comment)",
                                                                      begin)});
                ended = true;
            } else if (*body == "@end") {
                ended = true;
            } else if (!body->empty()) {
                // `// KEY REST`: the key up to the first white space, the rest after it.
                size_t p = 0;
                const std::string_view key = take_while(*body, p, [](char c) { return !is_space(c); });
                skip_spaces(*body, p);
                if (key != "why" && l.size() > kMaxContractLineChars)
                    out.problems.push_back({line_no, "error",
                                            fmt::format("a `{}` line of {} characters; ptxlab takes contract lines of "
                                                        "at most {} (only `why` lines may be longer)",
                                                        key, l.size(), kMaxContractLineChars)});
                else
                    lines.push_back({line_no, std::string(key), std::string(body->substr(p))});
            }
        }
        if (nl == text.size()) break;
        pos = nl + 1;
    }
    if (!begin) return out;
    if (!ended) out.problems.push_back({begin, "error", "@contract has no `// @end`"});
    if (!out.problems.empty()) return out;
    HeaderReader(src, out).read(lines, begin);
    return out;
}

std::vector<Diagnostic> check_contract(const Contract& c, const PtxInfo& info) {
    std::vector<Diagnostic> out;
    const PtxEntry* e = info.find(c.entry);
    if (!e) {
        std::string names;
        for (const auto& x : info.entries) names += (names.empty() ? "" : ", ") + x.name;
        out.push_back({c.entry_line, "error", fmt::format("entry '{}' is not in this file (entries: {})", c.entry,
                                                          names.empty() ? "none" : names)});
        return out;
    }
    const size_t n = std::max(e->params.size(), c.params.size());
    for (size_t i = 0; i < n; ++i) {
        if (i >= c.params.size()) {
            out.push_back({e->params[i].line, "error",
                           fmt::format("parameter {} '{}' of entry '{}' is not in the contract (line {} lists {})", i + 1,
                                       e->params[i].name, c.entry, c.line, c.params.size())});
            continue;
        }
        const ContractParam& p = c.params[i];
        if (i >= e->params.size()) {
            out.push_back({p.line, "error", fmt::format("parameter '{}' is number {} but entry '{}' (line {}) takes {}",
                                                        p.name, i + 1, c.entry, e->line, e->params.size())});
            continue;
        }
        const PtxParam& q = e->params[i];
        if (q.name != p.name)
            out.push_back({p.line, "error", fmt::format("parameter {} is '{}' in the contract but '{}' in entry '{}' (line {})",
                                                        i + 1, p.name, q.name, c.entry, q.line)});
        else if (q.type != p.ptx_type())
            out.push_back({p.line, "error", fmt::format("parameter '{}' ({}{}) needs `.param {}` but entry '{}' declares {} (line {})",
                                                        p.name, to_string(p.role), p.buffer() ? ", a pointer" : "",
                                                        p.ptx_type(), c.entry, q.type, q.line)});
    }
    return out;
}

std::vector<Diagnostic> check_contract_twin(const Contract& c, const PtxInfo& twin, const std::string& twin_path) {
    std::vector<Diagnostic> out;
    const PtxEntry* e = twin.find(c.entry);
    std::string want = "(";
    for (size_t i = 0; i < c.params.size(); ++i) want += (i ? ", " : "") + c.params[i].ptx_type();
    want += ")";
    if (!e)
        out.push_back({c.twin_line, "error", fmt::format("the twin {} has no `extern \"C\" __global__` function '{}'",
                                                         twin_path, c.entry)});
    else if (e->signature() != want)
        out.push_back({c.twin_line, "error", fmt::format("the twin's '{}' takes {} but the contract lists {}", c.entry,
                                                         e->signature(), want)});
    return out;
}

void throw_if_problems(const SourceFile& src, const std::vector<Diagnostic>& problems) {
    if (problems.empty()) return;
    std::string msg;
    for (const auto& d : problems) msg += format_diagnostic(src, d, 0);
    msg.pop_back();
    throw InputError(msg);
}

}  // namespace ptxlab
