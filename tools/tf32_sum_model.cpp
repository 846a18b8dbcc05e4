// A model of how far a truncating tensor core's TF32 dot products lie from dense_wg's twin, behind
// the `why` of ptx/hopper/densewg.ptx's contract (compare ulp 1024). Not part of the build:
//   g++ -O2 -o /tmp/tf32_sum_model tools/tf32_sum_model.cpp && /tmp/tf32_sum_model 4096 200000 8 3
// arguments: K, sums, products a step, F [, 1 to round the step's sum to nearest instead].
// Inputs: uniform [0, 1), truncated to tf32 (the low 13 bits cleared, as wgmma reads raw FP32).
// The twin: fma.rn onto +0 in k order. The model: per step, D and the step's products (exact)
// truncated to F bits below the largest term's ulp, summed exactly, the sum truncated to FP32
// (round toward zero, as Fasi, Higham, Mikaitis and Pranesh 2021 found on V100 and A100).
// Prints the largest and mean ULP distance over the sums (negative mean: the model lies low).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

static float tf32(float x) { uint32_t u; std::memcpy(&u, &x, 4); u &= 0xffffe000u; std::memcpy(&x, &u, 4); return x; }
static int64_t bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static double trunc_to(double x, int e) { return std::ldexp(std::floor(std::ldexp(x, -e)), e); }  // x >= 0
static int expo(double x) { int e; std::frexp(x, &e); return e - 1; }                              // x in [2^e, 2^(e+1))

int main(int argc, char** argv) {
    if (argc < 5) { std::fprintf(stderr, "usage: %s K SUMS STEP F [RN]\n", argv[0]); return 2; }
    const int K = std::atoi(argv[1]), n = std::atoi(argv[2]), step = std::atoi(argv[3]), F = std::atoi(argv[4]);
    const bool rn = argc > 5 && std::atoi(argv[5]) != 0;
    std::mt19937_64 g(42);
    std::uniform_real_distribution<float> U(0.f, 1.f);
    std::vector<float> a(K), b(K);
    int64_t worst = 0;
    double sum_abs = 0, sum = 0;
    for (int t = 0; t < n; ++t) {
        for (int k = 0; k < K; ++k) { a[k] = tf32(U(g)); b[k] = tf32(U(g)); }
        float twin = 0.f;
        for (int k = 0; k < K; ++k) twin = std::fmaf(a[k], b[k], twin);
        double d = 0;
        for (int k0 = 0; k0 < K; k0 += step) {
            double p[64];
            int m = 0, emax = d > 0 ? expo(d) : -1000;
            for (int k = k0; k < std::min(k0 + step, K); ++k, ++m) {
                p[m] = double(a[k]) * b[k];  // exact: 11 x 11 significant bits
                if (p[m] > 0) emax = std::max(emax, expo(p[m]));
            }
            if (emax == -1000) continue;
            double acc = trunc_to(d, emax - 23 - F);
            for (int i = 0; i < m; ++i) acc += trunc_to(p[i], emax - 23 - F);
            if (acc > 0) d = rn ? double(float(acc)) : trunc_to(acc, expo(acc) - 23);
        }
        const int64_t diff = bits(float(d)) - bits(twin);
        worst = std::max(worst, (diff < 0 ? -diff : diff));
        sum_abs += double((diff < 0 ? -diff : diff));
        sum += double(diff);
    }
    std::printf("K=%d sums=%d step=%d F=%d %s: max %lld ulp, mean |d| %.1f, mean d %.1f\n", K, n, step, F,
                rn ? "RN" : "RZ", (long long)worst, sum_abs / n, sum / n);
}
