#include "contract.hpp"

#include "error.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
#include <sstream>

namespace fs = std::filesystem;

namespace ptxlab {

// ---- Expressions: exact rational arithmetic over int64 ----------------------------------

namespace {

// Every step is checked: a numerator or denominator past 2^63 is an error, never a wrapped value.
constexpr const char* kOverflow = "overflows 64-bit integers (a value past 2^63)";

Rational make_q(int64_t n, int64_t d) {
    if (d == 0) PTXLAB_THROW(InputError, "division by zero");
    if (n == INT64_MIN || d == INT64_MIN) PTXLAB_THROW(InputError, "{}", kOverflow);
    if (d < 0) n = -n, d = -d;
    const int64_t g = std::gcd(n < 0 ? -n : n, d);
    return {n / (g ? g : 1), d / (g ? g : 1)};
}

int64_t mul_checked(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) PTXLAB_THROW(InputError, "{}", kOverflow);
    return r;
}
int64_t add_checked(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) PTXLAB_THROW(InputError, "{}", kOverflow);
    return r;
}

Rational q_add(Rational a, Rational b, int sign) {
    // sign * x is checked too: x may be -2^63, whose negation does not fit.
    return make_q(add_checked(mul_checked(a.num, b.den), mul_checked(sign, mul_checked(b.num, a.den))),
                  mul_checked(a.den, b.den));
}
Rational q_mul(Rational a, Rational b) { return make_q(mul_checked(a.num, b.num), mul_checked(a.den, b.den)); }
Rational q_div(Rational a, Rational b) {
    if (b.num == 0) PTXLAB_THROW(InputError, "division by zero");
    return make_q(mul_checked(a.num, b.den), mul_checked(a.den, b.num));
}
int64_t q_floor(Rational a) { return a.num / a.den - (a.num % a.den != 0 && a.num < 0); }
bool q_less(Rational a, Rational b) { return q_add(a, b, -1).num < 0; }

// Recursive descent: sum := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
// unary := '-' unary | atom; atom := number | name | name '(' args ')' | '(' sum ')'.
class Parser {
public:
    Parser(const std::string& text, const ShapeVars* vars, std::vector<std::string>* names)
        : t_(text), vars_(vars), names_(names) {}

    Rational parse() {
        if (t_.find_first_not_of(" \t") == std::string::npos) fail("an empty expression");
        Rational v = sum();
        skip();
        if (p_ < t_.size()) fail(fmt::format("unexpected '{}'", t_[p_]));
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        PTXLAB_THROW(InputError, "{} in `{}` (column {})", what, t_, std::min(p_, t_.size()) + 1);
    }
    void skip() {
        while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t')) ++p_;
    }
    bool eat(char c) {
        skip();
        if (p_ < t_.size() && t_[p_] == c) return ++p_, true;
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail(p_ < t_.size() ? fmt::format("expected '{}' before '{}'", c, t_[p_])
                                         : fmt::format("expected '{}' at the end", c));
    }
    Rational sum() {
        Rational v = term();
        for (;;) {
            if (eat('+')) v = q_add(v, term(), 1);
            else if (eat('-')) v = q_add(v, term(), -1);
            else return v;
        }
    }
    Rational term() {
        Rational v = unary();
        for (;;) {
            if (eat('*')) v = q_mul(v, unary());
            else if (eat('/')) v = q_div(v, unary());
            else return v;
        }
    }
    Rational unary() {
        if (++depth_ > 100) fail("an expression nested too deeply");
        Rational v = eat('-') ? q_mul(make_q(-1, 1), unary()) : atom();
        --depth_;
        return v;
    }
    Rational number() {
        // digits [. digits] [e [+-] digits], converted exactly.
        int64_t mant = 0, den = 1;
        int digits = 0;
        auto take = [&](bool frac) {
            while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) {
                if (++digits > 18) fail("a number of more than 18 digits is too large");
                mant = mant * 10 + (t_[p_++] - '0');
                if (frac) den *= 10;
            }
        };
        take(false);
        if (p_ < t_.size() && t_[p_] == '.') ++p_, take(true);
        if (digits == 0) fail("a number without digits");
        Rational v = make_q(mant, den);
        if (p_ < t_.size() && (t_[p_] == 'e' || t_[p_] == 'E')) {
            ++p_;
            const bool neg = p_ < t_.size() && t_[p_] == '-';
            if (p_ < t_.size() && (t_[p_] == '-' || t_[p_] == '+')) ++p_;
            int e = 0, ed = 0;
            while (p_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[p_]))) {
                e = e * 10 + (t_[p_++] - '0');
                if (++ed > 2) fail("an exponent past 99");
            }
            if (ed == 0) fail("an exponent without digits");
            for (int k = 0; k < e; ++k) v = neg ? q_div(v, make_q(10, 1)) : q_mul(v, make_q(10, 1));
        }
        return v;
    }
    Rational atom() {
        skip();
        if (p_ >= t_.size()) fail("a missing operand");
        const char c = t_[p_];
        if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return number();
        if (eat('(')) {
            Rational v = sum();
            expect(')');
            return v;
        }
        if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_') fail(fmt::format("unexpected '{}'", c));
        const size_t start = p_;
        while (p_ < t_.size() && (std::isalnum(static_cast<unsigned char>(t_[p_])) || t_[p_] == '_')) ++p_;
        const std::string name = t_.substr(start, p_ - start);
        if (eat('(')) return call(name);
        if (names_) names_->push_back(name);
        if (!vars_) return make_q(1, 1);
        auto it = vars_->find(name);
        if (it == vars_->end()) {
            p_ = start;
            fail(fmt::format("unknown name '{}'", name));
        }
        return make_q(it->second, 1);
    }
    Rational call(const std::string& f) {
        std::vector<Rational> args{sum()};
        while (eat(',')) args.push_back(sum());
        expect(')');
        const size_t want = (f == "min" || f == "max") ? 2 : (f == "ceil" || f == "floor") ? 1 : 0;
        if (want == 0) fail(fmt::format("unknown function '{}' (ceil, floor, min, max)", f));
        if (args.size() != want) fail(fmt::format("{} takes {} argument{}", f, want, want == 1 ? "" : "s"));
        if (!vars_) return make_q(1, 1);  // only the names are wanted
        if (f == "floor") return make_q(q_floor(args[0]), 1);
        if (f == "ceil") return make_q(-q_floor(make_q(-args[0].num, args[0].den)), 1);
        const bool less = q_less(args[0], args[1]);
        return (f == "min") == less ? args[0] : args[1];
    }

    const std::string& t_;
    const ShapeVars* vars_;
    std::vector<std::string>* names_;
    size_t p_ = 0;
    int depth_ = 0;
};

}  // namespace

Rational eval_expr(const std::string& text, const ShapeVars& vars) { return Parser(text, &vars, nullptr).parse(); }

std::vector<std::string> expr_names(const std::string& text) {
    std::vector<std::string> names;
    Parser(text, nullptr, &names).parse();
    return names;
}

namespace {
// " at N=1000 M=3", or "" for an expression over no variables.
std::string at_shape(const ShapeVars& vars) { return vars.empty() ? "" : " at " + shape_text(vars); }
}  // namespace

int64_t eval_whole(const std::string& text, const ShapeVars& vars, const std::string& what, int64_t lo, int64_t hi,
                   const std::string& limit) {
    Rational v;
    try {
        v = eval_expr(text, vars);
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{} = `{}`: {}{}", what, text, e.what(), at_shape(vars));
    }
    if (v.den != 1)
        PTXLAB_THROW(InputError, "{} = `{}` is {}/{}, not a whole number{}; write ceil({}) or floor({})", what, text,
                     v.num, v.den, at_shape(vars), text, text);
    if (v.num < lo || v.num > hi)
        PTXLAB_THROW(InputError, "{} = `{}` is {}{}, outside [{}, {}]{}", what, text, v.num, at_shape(vars), lo, hi,
                     limit.empty() ? "" : " (" + limit + ")");
    return v.num;
}

// ---- The header ------------------------------------------------------------------------

std::string to_string(ElemType t) { return t == ElemType::F32 ? "f32" : t == ElemType::U32 ? "u32" : "s32"; }
std::string to_string(ParamRole r) {
    switch (r) {
        case ParamRole::In: return "in";
        case ParamRole::Out: return "out";
        case ParamRole::InOut: return "inout";
        case ParamRole::Scalar: return "scalar";
    }
    return "?";
}

std::string ContractParam::ptx_type() const { return buffer() ? ".u64" : "." + to_string(type); }

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
        } else if (k == "grid" || k == "block") {
            once(l);
            auto parts = split_top(l.rest);
            if (parts.size() > 3) fail(fmt::format("{} takes up to three sizes (x, y, z)", k));
            auto& dst = k == "grid" ? c.grid : c.block;
            for (size_t i = 0; i < parts.size(); ++i) dst[i] = expr(parts[i], k);
            (k == "grid" ? c.grid_line : c.block_line) = l.no;
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
            fail(fmt::format("unknown key '{}' (keys: entry vars shape param grid block shared twin compare why "
                             "bytes flops)",
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
        if (match_scalar(l.rest, name, type, value)) {
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
                             "TYPE = VALUE`",
                             l.rest));
        }
        c_->params.push_back(p);
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

// ---- Values at a shape ------------------------------------------------------------------

namespace {

const char* const kAxis[] = {"x", "y", "z"};

// The limits of a launch on every GPU ptxlab runs on (sm_80 and newer), as the CUDA
// programming guide lists them; a launch past them fails in the driver with a bare error code.
unsigned grid_dim(const Contract& c, int i, const ShapeVars& s) {
    return unsigned(eval_whole(c.grid[i], s, fmt::format("grid.{}", kAxis[i]), 1, i ? 65535 : 2147483647,
                               i ? "grid.y and grid.z take at most 65535" : "grid.x takes at most 2^31 - 1"));
}
unsigned block_dim(const Contract& c, int i, const ShapeVars& s) {
    return unsigned(eval_whole(c.block[i], s, fmt::format("block.{}", kAxis[i]), 1, i == 2 ? 64 : 1024,
                               i == 2 ? "block.z takes at most 64" : "a block has at most 1024 threads"));
}
void check_threads(const std::array<unsigned, 3>& b, const ShapeVars& s) {
    const uint64_t threads = uint64_t(b[0]) * b[1] * b[2];
    if (threads > 1024)
        PTXLAB_THROW(InputError, "block {}x{}x{} has {} threads{}; a block has at most 1024 threads", b[0], b[1], b[2],
                     threads, at_shape(s));
}
unsigned shared_bytes(const Contract& c, const ShapeVars& s) {
    return unsigned(eval_whole(c.shared, s, "shared", 0, kMaxContractShared,
                               "48 KiB: the dynamic shared memory a launch gets without opting in to more, as "
                               "verify and bench launch"));
}

}  // namespace

LaunchShape launch_shape(const Contract& c, const ShapeVars& s) {
    LaunchShape l;
    for (int i = 0; i < 3; ++i) l.grid[i] = grid_dim(c, i, s);
    for (int i = 0; i < 3; ++i) l.block[i] = block_dim(c, i, s);
    check_threads(l.block, s);
    l.shared = shared_bytes(c, s);
    return l;
}

size_t buffer_length(const Contract& c, const ContractParam& p, const ShapeVars& s) {
    (void)c;
    return size_t(eval_whole(p.length, s, fmt::format("the length of '{}'", p.name), 1, kMaxContractElements,
                             "overflows the 2^32 elements a buffer may have"));
}

uint32_t scalar_bits(const Contract& c, const ContractParam& p, const ShapeVars& s) {
    (void)c;
    const std::string what = fmt::format("parameter '{}'", p.name);
    if (p.type == ElemType::U32) return uint32_t(eval_whole(p.value, s, what, 0, UINT32_MAX, "out of u32 range"));
    if (p.type == ElemType::S32)
        return uint32_t(int32_t(eval_whole(p.value, s, what, INT32_MIN, INT32_MAX, "out of s32 range")));
    // An f32 needs no range check: a rational over 64-bit integers is below 2^63, far inside float's range.
    try {
        return std::bit_cast<uint32_t>(float(eval_expr(p.value, s).value()));
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{} = `{}`: {}{}", what, p.value, e.what(), at_shape(s));
    }
}

double contract_amount(const std::string& text, const std::string& what, const ShapeVars& s) {
    double v = 0;
    try {
        v = eval_expr(text, s).value();
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{} = `{}`: {}{}", what, text, e.what(), at_shape(s));
    }
    if (v < 0) PTXLAB_THROW(InputError, "{} = `{}` is {:g}{}: a count of bytes or operations is never negative", what, text, v, at_shape(s));
    return v;
}

std::vector<Diagnostic> check_contract_values(const Contract& c, const std::vector<ShapeVars>& shapes) {
    std::vector<Diagnostic> out;
    // One key at a time, at every shape; its first failure is reported at its line (the
    // @contract line for a key left at its default).
    auto key = [&](int line, auto&& eval) {
        for (const auto& s : shapes) {
            try {
                eval(s);
            } catch (const InputError& e) {
                out.push_back({line ? line : c.line, "error", e.what()});
                return;
            }
        }
    };
    key(c.grid_line, [&](const ShapeVars& s) {
        for (int i = 0; i < 3; ++i) grid_dim(c, i, s);
    });
    key(c.block_line, [&](const ShapeVars& s) {
        std::array<unsigned, 3> b{};
        for (int i = 0; i < 3; ++i) b[size_t(i)] = block_dim(c, i, s);
        check_threads(b, s);
    });
    key(c.shared_line, [&](const ShapeVars& s) { shared_bytes(c, s); });
    for (const auto& p : c.params)
        key(p.line, [&](const ShapeVars& s) {
            if (p.buffer()) buffer_length(c, p, s);
            else scalar_bits(c, p, s);
        });
    if (!c.bytes.empty()) key(c.bytes_line, [&](const ShapeVars& s) { contract_amount(c.bytes, "bytes", s); });
    if (!c.flops.empty()) key(c.flops_line, [&](const ShapeVars& s) { contract_amount(c.flops, "flops", s); });
    std::stable_sort(out.begin(), out.end(), [](const Diagnostic& a, const Diagnostic& b) { return a.line < b.line; });
    return out;
}

std::vector<Diagnostic> check_contract_values(const Contract& c) { return check_contract_values(c, c.shapes); }

void throw_if_problems(const SourceFile& src, const std::vector<Diagnostic>& problems) {
    if (problems.empty()) return;
    std::string msg;
    for (const auto& d : problems) msg += format_diagnostic(src, d, 0);
    msg.pop_back();
    throw InputError(msg);
}

}  // namespace ptxlab
