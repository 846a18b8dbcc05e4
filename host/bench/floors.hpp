// The hardware floors under the step times (issue 35): what one launch, one grid-wide or
// cluster barrier, one distributed-shared-memory load, one dependent mma and one L2 load
// cost on this GPU, from the probes of ptx/probes/floors.ptx. `bench` prints them beside
// its ceilings (copy bandwidth, FMA rate), so a step time can be read as a count of floors.
#pragma once

#include "cuda.hpp"
#include "kernels.hpp"

#include <string>
#include <vector>

namespace ptxlab {

struct Floor {
    std::string name;   // e.g. "grid barrier"
    std::string what;   // one line: what was timed
    double us = 0;      // microseconds for one of it
};

// The probes' file under a kernel directory: <ptx_dir>/probes/floors.ptx.
std::string floors_path(const KernelDirs& dirs);
// Each probe timed with device events at R and 2R rounds, (t(2R) - t(R)) / R, the median of
// five; the launch rows time back-to-back launches instead (from a stream, and as the nodes of
// one CUDA graph). Throws when the probe file does not load.
std::vector<Floor> measure_floors(const Context& ctx, const KernelDirs& dirs, CUstream s);

}  // namespace ptxlab
