// `ptxlab verify FILE.ptx` and `ptxlab bench FILE.ptx`: any kernel with a contract header
// (contract.hpp), run against its CUDA C twin on the same fresh random inputs.
//
// Every buffer lies between two guard bands (verify.hpp's kGuard); outputs are poisoned
// (kPoison) before each launch. Per output buffer: elements unwritten by either side, elements
// whose bits differ, the largest ULP distance (for integers: the largest difference), and
// whether that is within the contract's comparison (bitwise, ulp N, rel X); the first
// mismatches with their index and both values. Writes out of bounds and inputs the kernel
// changed are failures too.
#pragma once

#include "compile.hpp"
#include "contract.hpp"
#include "cuda.hpp"

#include <memory>
#include <string>
#include <vector>

namespace ptxlab {

// A .ptx file with a contract header and its twin, both loaded on the current device.
struct ContractKernels {
    SourceFile src;
    Contract contract;
    std::unique_ptr<Module> ptx_module, twin_module;
    CUfunction ptx = nullptr, twin = nullptr;
    std::string twin_origin;  // "reference/x.cu (NVRTC)"
};
// The CPU part: reads the file and its header, checks the header against the entry (InputError
// with file:line otherwise). Needs no GPU.
Contract read_contract_file(const std::string& path, SourceFile* src = nullptr);

// Everything `verify FILE.ptx` and `bench FILE.ptx` can find wrong without a GPU, called before
// they look for one: the header (read_contract_file), --shape (`shape_flag`, empty for the
// contract's shapes), every expression at every shape to run (check_contract_values), the PTX
// assembled offline by nvJitLink for `arch` (empty: the file's .target where this nvJitLink takes
// it, else sm_90), the twin (missing, a directory, a FIFO, not compiling with NVRTC, or a
// parameter list unlike the contract's). Throws InputError with file:line messages; returns the
// contract.
Contract preflight_contract_file(const std::string& path, const std::string& arch, const std::string& shape_flag);
// Reads and checks the header (InputError with file:line otherwise), JIT-loads the PTX and
// NVRTC-compiles the twin for `dev`.
ContractKernels load_contract_kernels(const std::string& path, const DeviceInfo& dev);

// The shapes to run: the contract's defaults, or the one --shape gives ("N=1000,M=3").
std::vector<ShapeVars> contract_shapes(const Contract& c, const std::string& shape_flag);

// One shape's buffers on the device, filled from a seed.
class ContractBuffers {
public:
    ContractBuffers(const Contract& c, const ShapeVars& shape, uint64_t seed);
    ~ContractBuffers();
    // Uploads the inputs again and poisons the outputs (and the guard bands).
    void reset();
    // Launches `fn` with this shape's launch size and arguments on `s` (not waiting).
    void launch(CUfunction fn, const std::string& origin, CUstream s) const;
    const LaunchShape& launch_shape() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

struct FileVerifyOptions {
    uint64_t seed = 1;
    std::string shape;          // --shape, empty for the contract's shapes
    size_t max_mismatches = 10; // per buffer
};

// Runs every shape and prints one line per output buffer; returns the number of failing shapes.
int verify_file(const std::string& path, const Context& ctx, const FileVerifyOptions& opt);

// One timing of `bench FILE.ptx`: a shape, a side ("ptx" or "twin"), the median time and the
// contract's bytes and flops at that shape (0 where it gives none).
struct FileBenchRow {
    ShapeVars shape;
    std::string side;
    double us = 0, bytes = 0, flops = 0;
};
struct FileBenchResult {
    std::string path, entry, device, arch;
    std::vector<FileBenchRow> rows;
};

// `ptxlab bench FILE.ptx`: times the PTX and the twin at each shape (median of device-event
// timings after warm-up) and prints GB/s and GFLOP/s when the contract gives bytes and flops.
FileBenchResult bench_file(const std::string& path, const Context& ctx, const std::string& shape, uint64_t seed);

// `bench FILE.ptx --json OUT`: the result as JSON (file, entry, device, arch, then a row per
// shape and side with us, bytes, flops, gbps and gflops; null where the contract gives none).
std::string file_bench_json(const FileBenchResult& r);

}  // namespace ptxlab
