// From CUPTI's records to ptxlab profile's model: each sampled function found in nvdisasm's
// listing of the cubin it ran from (matched by CUPTI's cubin CRC), and its lines in the PTX
// file its line info names.
#pragma once

#include "profile.hpp"
#include "ptx_text.hpp"

#include <functional>
#include <string>
#include <vector>

namespace ptxlab {

// `sources`: the PTX files the kernels were loaded from (others named by the line info are read
// when they end in .ptx). `nvdisasm` as find_nvdisasm returns it.
Profile build_profile(const SampleRun& run, const std::string& nvdisasm, const std::vector<SourceFile>& sources);

// For records whose cubin the module-load callback did not capture: nvJitLink's assembly of
// the PTX that holds their function (`sources`, for `arch`, with line info), under their CRC.
// When its CRC (`crc`) equals theirs it is the very code that ran; otherwise a note in `notes`
// says the listing is a stand-in whose addresses may not match.
void add_offline_cubins(SampleRun& run, const std::vector<SourceFile>& sources, const std::string& arch,
                        const std::function<uint64_t(const std::string&)>& crc, std::vector<std::string>& notes);

// The line table's view of a PTX file as the driver JIT-loaded it (Module: `.loc` lines of the
// file itself, named by `src.path`).
SassSource loaded_source(const SourceFile& src);

}  // namespace ptxlab
