// Float32 .rn operations on values that carry an a-priori error bound (ref_optim.hpp describes
// the propagation rules): the arithmetic of the optimizers' rounding bounds (optimizers.cpp, one
// function a rule) and of the mean-gradient reference (ref_optim.cpp).
#pragma once

#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace ptxlab::bounded {

inline constexpr double kU = 0x1p-24;  // unit roundoff of float32 round-to-nearest
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline double gamma(size_t n) { return n == 0 ? 0.0 : (double(n) * kU) / (1.0 - double(n) * kU); }

// A value and the bound on how far the float32 computation may be from it.
struct BV {
    double v, e;
};

inline BV exact(float x) { return {double(x), 0.0}; }

// A product of magnitudes in an error term: an exact zero times an infinite bound (a value
// at the ReLU kink) is zero, not NaN.
inline double eprod(double a, double b) { return (a == 0.0 || b == 0.0) ? 0.0 : a * b; }

// One .rn rounding of a result whose operands carried the propagated error `prop`.
inline BV rounded(double x, double prop) { return {x, prop + kU * (std::fabs(x) + prop)}; }

// a * b + c, one rounding (fma.rn).
inline BV fma_rn(BV a, BV b, BV c) {
    return rounded(a.v * b.v + c.v, eprod(std::fabs(a.v), b.e) + eprod(std::fabs(b.v), a.e) + eprod(a.e, b.e) + c.e);
}
inline BV mul_rn(BV a, BV b) {
    return rounded(a.v * b.v, eprod(std::fabs(a.v), b.e) + eprod(std::fabs(b.v), a.e) + eprod(a.e, b.e));
}
inline BV add_rn(BV a, BV b) { return rounded(a.v + b.v, a.e + b.e); }
inline BV sub_rn(BV a, BV b) { return rounded(a.v - b.v, a.e + b.e); }
// a / b (div.rn, correctly rounded): infinite bound when b's error could reach zero.
inline BV div_rn(BV a, BV b) {
    const double x = a.v / b.v;
    if (!(b.e < std::fabs(b.v))) return {x, kInf};
    return rounded(x, (a.e + eprod(std::fabs(x), b.e)) / (std::fabs(b.v) - b.e));
}
// sqrt(a) (sqrt.rn, correctly rounded); a's computed value is never negative (a sum of
// non-negative roundings), so the error of sqrt is at most min(sqrt(ea), ea / sqrt(a)).
inline BV sqrt_rn(BV a) {
    const double x = std::sqrt(std::max(a.v, 0.0));
    double prop = std::sqrt(a.e);
    if (a.v > 0.0) prop = std::min(prop, a.e / x);
    return rounded(x, prop);
}
inline BV neg(BV a) { return {-a.v, a.e}; }

inline void put(Bounded& b, size_t i, BV x) {
    b.v[i] = x.v;
    b.e[i] = x.e;
}

}  // namespace ptxlab::bounded
