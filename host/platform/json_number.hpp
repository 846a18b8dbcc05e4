// A number for the JSON that bench writes, as its text tables show it: rounded to `decimals`
// places (0: a whole number); JSON has no NaN or infinity, so those are null.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>

namespace ptxlab {

inline nlohmann::ordered_json rounded_json(double v, int decimals) {
    if (!std::isfinite(v)) return nullptr;
    if (decimals == 0 && std::fabs(v) < 9e18) return std::llround(v);
    return std::strtod(fmt::format("{:.{}f}", v, decimals).c_str(), nullptr);
}

}  // namespace ptxlab
