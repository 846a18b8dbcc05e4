// Warnings about PTX that ptxas accepts silently but that is almost surely a mistake.
#pragma once

#include "ptx_text.hpp"

#include <string_view>
#include <vector>

namespace ptxlab {

// `ld.param.u64 r, [p]` of a `.u32` parameter (reads past it), `ld.param.u32` of a `.u64`
// pointer (truncates it): a load whose width differs from the parameter's declared width.
// One warning per such load, at its line.
std::vector<Diagnostic> param_width_warnings(std::string_view text, const PtxInfo& info);

}  // namespace ptxlab
