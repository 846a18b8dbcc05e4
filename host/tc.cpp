// Launch shapes of the tensor-core kernels and their float64 reference (see tc.hpp and the
// header of ptx/tc.ptx).
#include "tc.hpp"

#include "error.hpp"

#include <cmath>

namespace ptxlab {

namespace {
constexpr double kU = 0x1p-24;                     // FP32's unit roundoff
constexpr double kTf32Product = 0x1p-10 + 0x1p-22;  // a product of two cvt.rna.tf32 inputs, relative
constexpr unsigned kTcUnitsPerMma = 32;             // 16 truncations of 2u each (tc.hpp, item 2)
}  // namespace

size_t tc_forward_tiles(unsigned B, unsigned H) {
    return ((size_t(B) + kTcRows - 1) / kTcRows) * ((size_t(H) + kTcCols - 1) / kTcCols);
}

std::string tc_unfit(unsigned B, unsigned I, unsigned H) {
    if (B == 0 || I == 0 || H == 0) return fmt::format("tc_forward needs B, I, H >= 1, got B={} I={} H={}", B, I, H);
    if (B > kTcMaxSize || I > kTcMaxSize || H > kTcMaxSize)
        return fmt::format("tc_forward takes B, I, H up to {} (its 32-bit indices), got B={} I={} H={}", kTcMaxSize, B,
                           I, H);
    return {};
}

void launch_tc_forward(const Kernel& k, unsigned B, unsigned I, unsigned H, CUdeviceptr X, CUdeviceptr W,
                       CUdeviceptr b, CUdeviceptr A, unsigned act, CUstream s) {
    if (std::string why = tc_unfit(B, I, H); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    // One warp a 16 x 8 tile of A, 4 warps a block (ptx/tc.ptx). With B, H <= 2^31 there are
    // fewer than 2^32 tiles: the PTX's warp index and tile count fit its 32-bit registers.
    const size_t warps_a_block = kTcBlock / 32;
    const size_t blocks = (tc_forward_tiles(B, H) + warps_a_block - 1) / warps_a_block;
    k.launch(static_cast<unsigned>(blocks), kTcBlock, s, X, W, b, A, B, I, H, act);
}

double tc_sum_bound(unsigned I) {
    const double n = kTcUnitsPerMma * std::ceil(double(I) / kTcCols);  // roundings of u in the mma chain
    if (n * kU >= 1.0) return INFINITY;                                  // I past 2^22: no bound
    const double g = n * kU / (1.0 - n * kU);                             // gamma_n
    return kTf32Product + g * (1.0 + kTf32Product);
}

Bounded ref_tc_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                       unsigned B, unsigned I, unsigned H, unsigned act) {
    const double rel = tc_sum_bound(I);
    Bounded r;
    r.resize(size_t(B) * H);
    for (unsigned s = 0; s < B; ++s) {
        const float* x = X.data() + size_t(s) * I;
        for (unsigned h = 0; h < H; ++h) {
            const float* w = W.data() + size_t(h) * I;
            double sum = 0, mag = 0;
            for (unsigned k = 0; k < I; ++k) {
                const double p = double(x[k]) * double(w[k]);  // exact: two floats' product fits a double
                sum += p;
                mag += std::fabs(p);
            }
            const double z = double(b[h]) + sum, ec = std::isinf(rel) ? rel : rel * mag;
            const double e = ec + kU * (std::fabs(z) + ec);
            const size_t o = size_t(s) * H + h;
            if (act == 1) {
                r.v[o] = z > 0 ? z : 0.0;
                r.e[o] = z + e < 0 ? 0.0 : e;  // surely negative: the kernel's max gives exactly 0
            } else {
                r.v[o] = z;
                r.e[o] = e;
            }
        }
    }
    return r;
}

}  // namespace ptxlab
