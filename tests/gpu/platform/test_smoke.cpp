// Smoke tests: load a PTX kernel through the driver JIT, run it, compare; JIT errors name file and line.
#include "../../helpers.hpp"
#include "../common.hpp"
#include "compile.hpp"
#include "rng.hpp"
#include "verify.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <random>

using namespace ptxlab;
using namespace ptxlab::test;

TEST_CASE("smoke: a hand-written PTX kernel loads, runs and gives y = fma(a, x, 1) exactly") {
    Module m(read_source_file(fixture("ptx/scale.ptx")));
    CUfunction f = m.function("scale");
    CHECK(m.info_log().find("registers") != std::string::npos);  // the JIT's info log is kept

    const unsigned n = 1000;
    Rng rng(std::random_device{}());
    std::vector<float> x(n);
    for (auto& v : x) v = rng.uniform(-10.0f, 10.0f);
    const float a = rng.uniform(0.5f, 2.0f);
    DeviceBuffer dx(n * 4, "x"), dy(n * 4, "y");
    dx.upload(x);
    dy.fill_u32(kPoison);
    CUdeviceptr py = dy.ptr(), px = dx.ptr();
    float aa = a;
    unsigned nn = n;
    void* args[] = {&py, &px, &aa, &nn};
    CU(cuLaunchKernel, f, grid_for(n, 128), 1, 1, 128, 1, 1, 0, nullptr, args, nullptr);
    gpu().synchronize();
    auto y = dy.download_vector<float>();
    for (unsigned i = 0; i < n; ++i) {
        REQUIRE(std::bit_cast<uint32_t>(y[i]) != kPoison);
        REQUIRE(std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(std::fma(a, x[i], 1.0f)));
    }
}

TEST_CASE("smoke: the driver JIT's errors name the file and the line and quote the source") {
    for (const char* f : {"ptx/syntax_error.ptx", "ptx/undeclared_register.ptx", "ptx/wrong_operand_type.ptx"}) {
        CAPTURE(f);
        std::string msg;
        try {
            Module m(read_source_file(fixture(f)));
        } catch (const PtxError& e) {
            msg = e.what();
        }
        CAPTURE(msg);
        CHECK(msg.find(fixture(f) + ":33:") != std::string::npos);
        CHECK(msg.find(">    33 |") != std::string::npos);
        CHECK(msg.find("JIT error log") != std::string::npos);
        CHECK(msg.find("CUDA_ERROR_INVALID_PTX") != std::string::npos);
    }
}

TEST_CASE("smoke: an unsupported .version and a missing entry point are reported clearly") {
    TempDir t;
    std::string src = read_source_file(fixture("ptx/scale.ptx")).text;
    std::string v = src;
    v.replace(v.find(".version 8.0"), 12, ".version 9.9");
    write_text(t.file("new.ptx"), v);
    CHECK_THROWS_WITH_AS(Module(read_source_file(t.file("new.ptx"))), doctest::Contains("new.ptx:3: note: .version 9.9"),
                         PtxError);
    Module m(read_source_file(fixture("ptx/scale.ptx")));
    CHECK_THROWS_WITH_AS(m.function("scal"), doctest::Contains("no entry point 'scal'"), PtxError);
}

TEST_CASE("smoke: a .target above the GPU's architecture is reported with its line") {
    TempDir t;
    std::string src = read_source_file(fixture("ptx/scale.ptx")).text;
    src.replace(src.find(".target sm_80"), 13, ".target sm_120");
    write_text(t.file("future.ptx"), src);
    CHECK_THROWS_WITH_AS(Module(read_source_file(t.file("future.ptx"))),
                         doctest::Contains("future.ptx:4: note: .target sm_120 is newer than this GPU (sm_"), PtxError);
}
