// A small seeded PRNG (SplitMix64) whose streams are the same on every platform:
// the standard library's distributions are implementation-defined, so ptxlab
// draws its own uniforms, normals and shuffles from raw 64-bit outputs.
#pragma once

#include <cstdint>
#include <vector>

namespace ptxlab {

class Rng {
public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next();
    double uniform();                        // [0, 1), 53 bits
    float uniform(float lo, float hi);       // [lo, hi)
    double normal();                         // N(0, 1), Box-Muller
    uint64_t below(uint64_t n);              // uniform in [0, n), unbiased
    void shuffle(std::vector<uint32_t>& v);  // Fisher-Yates
    uint64_t state() const { return state_; }  // Rng(state()) continues this stream exactly

private:
    uint64_t state_;
};

}  // namespace ptxlab
