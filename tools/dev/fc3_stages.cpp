// tools/dev/fc3_stages.cpp -- fc3_step's stages in block 0 (cluster 0, rank 0, thread 0) in the
// last step but one of a launch of S >= 2 steps, and its top-to-top period, from the %clock64 marks
// tools/dev/fc3_stages.py puts into a copy of ptx/fc3step.ptx (a dev tool, not built by CMake or CI;
// driver API only; the dynamic shared memory from the PTX's map, its "//   end   N" line).
// 784,256,128,10, batch 64, CE, Nesterov, random inputs; three timed launches after a warm-up.
//   python3 tools/dev/fc3_stages.py > /tmp/fc3_marked.ptx
//   g++ -O2 -std=c++17 tools/dev/fc3_stages.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs
//       -lcuda -o /tmp/fc3_stages && /tmp/fc3_stages /tmp/fc3_marked.ptx 128     (one command)
#include <cuda.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#define CK(x)                                                                   \
    do {                                                                        \
        CUresult r_ = (x);                                                      \
        if (r_ != CUDA_SUCCESS) {                                               \
            const char* s_ = nullptr;                                           \
            cuGetErrorString(r_, &s_);                                          \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); \
            std::exit(1);                                                       \
        }                                                                       \
    } while (0)

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "/tmp/fc3_marked.ptx";
    const unsigned S = argc > 2 ? unsigned(std::atoi(argv[2])) : 128;
    if (S < 2) {
        std::fprintf(stderr, "fc3_stages: S = %u steps a launch; the marks need at least 2\n", S);
        return 1;
    }
    const unsigned B = 64, I = 784, H1 = 256, H2 = 128, O = 10;
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string ptx = ss.str();
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    int clk_khz = 0;
    CK(cuDeviceGetAttribute(&clk_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev));
    CUmodule mod;
    char log[8192] = {0};
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* vals[] = {log, (void*)(uintptr_t)sizeof(log)};
    if (cuModuleLoadDataEx(&mod, ptx.c_str(), 2, opts, vals) != CUDA_SUCCESS) {
        std::fprintf(stderr, "JIT: %s\n", log);
        return 1;
    }
    CUfunction fn;
    CK(cuModuleGetFunction(&fn, mod, "fc3_step"));
    // The dynamic shared memory a block: the PTX's map ends with "//   end   N".
    const size_t at = ptx.find("//   end   ");
    if (at == std::string::npos) {
        std::fprintf(stderr, "%s: no '//   end   N' line (the shared-memory map) in the PTX\n", path);
        return 1;
    }
    const unsigned smem = unsigned(std::strtoul(ptx.c_str() + at + 11, nullptr, 10));
    CK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)));

    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u01(0.f, 1.f);
    const size_t nP = size_t(H1) * I + H1 + size_t(H2) * H1 + H2 + size_t(O) * H2 + O;
    std::vector<float> X(size_t(S) * B * I), T(size_t(S) * B * O, 0.f), P(nP), hyp(size_t(S) * 4, 0.f);
    for (auto& x : X) x = u01(rng);
    for (size_t r = 0; r < size_t(S) * B; ++r) T[r * O + rng() % O] = 1.f;
    for (auto& p : P) p = (u01(rng) - 0.5f) * 0.1f;
    for (unsigned j = 0; j < S; ++j) hyp[4 * j] = 0.01f;
    auto up = [](const std::vector<float>& v) {
        CUdeviceptr d;
        CK(cuMemAlloc(&d, v.size() * 4));
        CK(cuMemcpyHtoD(d, v.data(), v.size() * 4));
        return d;
    };
    CUdeviceptr dX = up(X), dT = up(T), dP = up(P), dH = up(hyp), dM = up(std::vector<float>(nP, 0.f));
    CUdeviceptr dY, dW;
    CK(cuMemAlloc(&dY, T.size() * 4));
    CK(cuMemAlloc(&dW, 655872));
    CK(cuMemsetD8(dW, 0, 655872));
    CUdeviceptr dV = 0;
    unsigned steps = S, loss = 1, optim = 2;
    float scale = 1.f / B, mom = 0.9f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, alpha = 0.99f, wd = 0.f;
    void* args[] = {&dX, &dT, &dP, &dM, &dV, &dY, &dH, &dW, (void*)&B, (void*)&I, (void*)&H1, (void*)&H2, (void*)&O,
                    &steps, &loss, &scale, &optim, &mom, &b1, &b2, &eps, &alpha, &wd};
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = 4;
    attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = 64, cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 256, cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CUevent e0, e1;
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    CK(cuLaunchKernelEx(&cfg, fn, args, nullptr));  // warm-up
    CK(cuCtxSynchronize());
    for (int rep = 0; rep < 3; ++rep) {
        CK(cuEventRecord(e0, 0));
        CK(cuLaunchKernelEx(&cfg, fn, args, nullptr));
        CK(cuEventRecord(e1, 0));
        CK(cuCtxSynchronize());
        float ms = 0;
        CK(cuEventElapsedTime(&ms, e0, e1));
        uint64_t t[23] = {};
        CK(cuMemcpyDtoH(t, dW + 8, sizeof(t)));
        std::printf("launch of %u steps: %.2f us a step (event); block 0, the last step but one, cycles (us at %.0f MHz):\n", S,
                    1e3 * ms / S, clk_khz / 1e3);
        const char* names[8] = {"S1 (wait X, fc1 product, join)", "grid barrier 1 (X copies inside)", "X copies after GB1 (old)",
                                "S2 (fc2 product, join, Yp)", "grid barrier 2", "S3 (loss, D2, gW2, D1p, updates)",
                                "grid barrier 3", "S4 (D1, gW1, updates)"};
        uint64_t tot = 0;
        for (int i = 0; i < 8; ++i) {
            const uint64_t d = t[i + 1] - t[i];
            tot += d;
            std::printf("  %-36s %7llu  %6.2f\n", names[i], (unsigned long long)d, d / (clk_khz / 1e3));
        }
        std::printf("  %-36s %7llu  %6.2f\n", "step top to S4's end", (unsigned long long)tot, tot / (clk_khz / 1e3));
        const uint64_t tail = t[20] - t[8], period = t[20] - t[0];
        std::printf("  %-36s %7llu  %6.2f\n", "S4's end to the next step's top", (unsigned long long)tail,
                    tail / (clk_khz / 1e3));
        std::printf("  %-36s %7llu  %6.2f\n", "a step, top to top", (unsigned long long)period,
                    period / (clk_khz / 1e3));
        {  // inside S3 and S4
            const int seq[] = {5, 9, 10, 11, 12, 13, 14, 15, 16, 6, 7, 17, 18, 19, 8};
            const char* nm[] = {"S3 (a) loads, Y, bar", "(b) D3, bar", "(c) D2, bar", "(d) gW2 mma", "(e) D1p, bar",
                                "(f) W2 update", "(g) W3 (rank 1: not thread 0)", "(h) b2 chain + update",
                                "to S3_DONE", "-", "S4 (a) D1 loads, bar", "(b) A fragments", "(b) 4 n tiles + W1 updates",
                                "(c) b1 .. S4_DONE"};
            for (int k = 0; k + 1 < 15; ++k) {
                if (seq[k] == 6) continue;
                const long long d = (long long)(t[seq[k + 1]] - t[seq[k]]);
                std::printf("    %-34s %7lld  %6.2f\n", nm[k], d, d / (clk_khz / 1e3));
            }
            if (t[21] && t[22]) {  // the finer marks of S4 (b), where the kernel has their anchors
                const long long a = (long long)(t[21] - t[18]), b = (long long)(t[22] - t[21]),
                                c = (long long)(t[19] - t[22]);
                std::printf("      %-32s %7lld  %6.2f\n", "n tiles into GS", a, a / (clk_khz / 1e3));
                std::printf("      %-32s %7lld  %6.2f\n", "bar", b, b / (clk_khz / 1e3));
                std::printf("      %-32s %7lld  %6.2f\n", "W1 updates", c, c / (clk_khz / 1e3));
            }
        }
    }
    return 0;
}
