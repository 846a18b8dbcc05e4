// From CUPTI's records to ptxlab profile's model: each sampled function found in nvdisasm's
// listing of the cubin it ran from (matched by CUPTI's cubin CRC), and its lines in the PTX
// file its line info names.
#pragma once

#include "profile.hpp"
#include "ptx_text.hpp"

#include <string>
#include <vector>

namespace ptxlab {

// `sources`: the PTX files the kernels were loaded from (others named by the line info are read
// when they end in .ptx). `nvdisasm` as find_nvdisasm returns it.
Profile build_profile(const SampleRun& run, const std::string& nvdisasm, const std::vector<SourceFile>& sources);

// The line table's view of a PTX file as the driver JIT-loaded it (Module: `.loc` lines of the
// file itself, named by `src.path`).
SassSource loaded_source(const SourceFile& src);

}  // namespace ptxlab
