// Contract expressions: exact rational arithmetic over int64 and the parser of `eval_expr` and `expr_names`.
#include "contract.hpp"

#include "error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <numeric>

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

}  // namespace ptxlab
