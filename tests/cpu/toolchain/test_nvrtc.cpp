// NVRTC compiles the CUDA C twins without a GPU.
#include "compile.hpp"
#include "error.hpp"
#include "kernels.hpp"

#include <doctest/doctest.h>

using namespace ptxlab;

TEST_CASE("nvrtc: a small kernel compiles to PTX with the expected entry and parameters") {
    SourceFile src{"axpy.cu", "extern \"C\" __global__ void axpy(float* y, const float* x, float a, unsigned n) {\n"
                              "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                              "  if (i < n) y[i] = a * x[i] + y[i];\n}\n"};
    NvrtcOutput out = nvrtc_compile(src, "compute_90");
    PtxInfo info = parse_ptx(out.ptx);
    REQUIRE(info.find("axpy") != nullptr);
    CHECK(info.find("axpy")->signature() == "(.u64, .u64, .f32, .u32)");
    CHECK(out.ptx.find("fma.rn.f32") != std::string::npos);  // NVRTC contracts a*x+y
}

TEST_CASE("nvrtc: a compile error throws with the program log") {
    SourceFile src{"bad.cu", "extern \"C\" __global__ void k(float* y) { y[0] = undefined_name; }\n"};
    CHECK_THROWS_WITH_AS(nvrtc_compile(src, "compute_90"), doctest::Contains("undefined_name"), InputError);
}

TEST_CASE("nvrtc: every twin compiles and declares the entries the host launches") {
    KernelDirs dirs = KernelDirs::from_environment();
    for (const auto& pair : find_kernel_pairs(dirs)) {
        CAPTURE(pair.stem);
        REQUIRE_FALSE(pair.reference_path.empty());
        NvrtcOutput out = nvrtc_compile(read_source_file(pair.reference_path), "compute_90");
        CHECK(check_against_specs(parse_ptx(out.ptx), pair.reference_path, pair.stem).empty());
    }
}

TEST_CASE("nvrtc: architecture names are validated") {
    CHECK(virtual_arch_of("sm_90") == "compute_90");
    CHECK(virtual_arch_of("sm_90a") == "compute_90a");
    CHECK_THROWS_AS(virtual_arch_of("hopper"), InputError);
}
