// tc_conv_bwd_weights' launch shape and float64 reference (see tcwgrad.hpp and the header of
// ptx/tcwgrad.ptx).
#include "tcwgrad.hpp"

#include "error.hpp"
#include "tc.hpp"

#include <algorithm>
#include <cmath>

namespace ptxlab {

namespace {
constexpr double kU = 0x1p-24;  // FP32's unit roundoff
size_t up(size_t a, size_t b) { return (a + b - 1) / b * b; }
double gamma_or_inf(double n) { return n * kU >= 1.0 ? INFINITY : n * kU / (1.0 - n * kU); }
}  // namespace

TcWgradPlan tcwgrad_plan(const ConvDims& d) {
    TcWgradPlan p;
    const size_t T = size_t(d.KS) * d.KS, CT = size_t(d.C) * T;
    p.mtiles = static_cast<unsigned>((d.K + kTcWgradRows - 1) / kTcWgradRows);
    p.cgroups = static_cast<unsigned>((CT + kTcWgradCols - 1) / kTcWgradCols);
    p.grid = p.mtiles * p.cgroups * 8;
    p.nch = static_cast<unsigned>(std::min<size_t>(d.C, 62 / T + 2));
    p.smem = tcwgrad_smem(d);
    p.buffers = p.smem == tcwgrad_smem(d, 2) ? 2 : 1;
    return p;
}

size_t tcwgrad_smem(const ConvDims& d, unsigned buffers) {
    const size_t T = size_t(d.KS) * d.KS, HW = size_t(d.H) * d.W, hwp = up(HW, 8), gp = up(hwp, 32) + 4;
    const size_t sw = d.W + d.KS - 1, sh = d.H + d.KS - 1;
    const size_t xp = up(sh * sw + (d.KS - 1) * (sw + 1) + 1, 4);
    const size_t nch = std::min<size_t>(d.C, 62 / T + 2);
    return up(4160 + 4 * hwp, 16) + std::max<size_t>(buffers * (128 * gp + 4 * nch * xp), 32768);
}

size_t tcwgrad_smem(const ConvDims& d) {
    const size_t two = tcwgrad_smem(d, 2);
    return two <= kTcWgradSmemMax ? two : tcwgrad_smem(d, 1);
}

std::string tcwgrad_unfit(const ConvDims& d) {
    if (!d.N || !d.C || !d.H || !d.W || !d.K) return "tc_conv_bwd_weights needs every size N, C, H, W, K >= 1";
    if (d.KS != 1 && d.KS != 3 && d.KS != 5)
        return fmt::format("tc_conv_bwd_weights takes kernel sizes 1, 3 and 5, got {}", d.KS);
    const double hw = double(d.H) * d.W;
    if (double(d.N) * d.C * hw >= 0x1p32 || double(d.N) * d.K * hw >= 0x1p32 ||
        double(d.K) * d.C * d.KS * d.KS >= 0x1p32 || double(d.H + 4) * (d.W + 4) >= 0x1p28)
        return fmt::format("tc_conv_bwd_weights indexes X, dY and dW with 32 bits: N={} C={} H={} W={} K={} is too big",
                           d.N, d.C, d.H, d.W, d.K);
    if (const size_t smem = tcwgrad_smem(d); smem > kTcWgradSmemMax)
        return fmt::format("tc_conv_bwd_weights stages whole images of 16 output channels and up to {} input "
                           "channels: {} bytes of shared memory (one staging buffer) for C={} {}x{} KS {}, more "
                           "than {}",
                           tcwgrad_plan(d).nch, smem, d.C, d.H, d.W, d.KS, kTcWgradSmemMax);
    if (double(tcwgrad_plan(d).grid) >= 0x1p31)
        return fmt::format("tc_conv_bwd_weights needs fewer than 2^31 blocks, got K={} C={} KS={}", d.K, d.C, d.KS);
    return {};
}

size_t tcwgrad_bias_depth(const ConvDims& d) {
    const size_t groups = (size_t(d.H) * d.W + 3) / 4;
    return 4 * size_t((d.N + 7) / 8) * ((groups + 15) / 16) + 4 + 7 + 1;
}

size_t tcwgrad_chain(const ConvDims& d) {
    const size_t steps = (size_t(d.H) * d.W + 7) / 8;
    return 8 * size_t((d.N + 7) / 8) * ((steps + 7) / 8);
}

void launch_tc_conv_bwd_weights(const Kernel& k, const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                                CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale, CUstream s) {
    if (std::string why = tcwgrad_unfit(d); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    // Clusters of 8 blocks, one per (16 output channels, 64 columns) tile of dW (tcwgrad_plan).
    const TcWgradPlan p = tcwgrad_plan(d);
    k.launch_smem(p.grid, kTcWgradBlock, static_cast<unsigned>(p.smem), s, dW, db, X, dY, Y, d.N, d.C, d.H, d.W, d.K,
                  d.KS, act, scale);
}

void ref_tc_conv_bwd_weights(const ConvDims& d, const std::vector<float>& X, const std::vector<float>& dY,
                             const std::vector<float>& Y, unsigned act, float scale, Bounded& dW, Bounded& db) {
    const size_t HW = size_t(d.H) * d.W, T = size_t(d.KS) * d.KS;
    const long p = d.pad();
    const double rel = tc_sum_bound(static_cast<unsigned>(std::min<size_t>(tcwgrad_chain(d), 0xffffffffu)));
    const double g14 = gamma_or_inf(14), rb = tc_bias_bound(static_cast<unsigned>(tcwgrad_bias_depth(d)));
    const double sc = double(scale), asc = std::fabs(sc);
    dW.resize(d.w_size());
    db.resize(d.K);
    std::vector<double> G(size_t(d.N) * HW);  // one output channel's G, [n][pixel]
    for (unsigned k = 0; k < d.K; ++k) {
        double bsum = 0, bmag = 0;
        for (unsigned n = 0; n < d.N; ++n)
            for (size_t q = 0; q < HW; ++q) {
                const size_t e = (size_t(n) * d.K + k) * HW + q;
                const double g = act == 1 && !(Y[e] > 0.0f) ? 0.0 : double(dY[e]);
                G[size_t(n) * HW + q] = g;
                bsum += g;
                bmag += std::fabs(g);
            }
        db.v[k] = sc * bsum;
        db.e[k] = std::isinf(rb) ? rb : asc * rb * bmag;
        for (unsigned c = 0; c < d.C; ++c)
            for (unsigned ky = 0; ky < d.KS; ++ky)
                for (unsigned kx = 0; kx < d.KS; ++kx) {
                    double sum = 0, mag = 0;
                    for (unsigned n = 0; n < d.N; ++n) {
                        const float* x = X.data() + (size_t(n) * d.C + c) * HW;
                        const double* g = G.data() + size_t(n) * HW;
                        for (unsigned y = 0; y < d.H; ++y) {
                            const long iy = long(y) + ky - p;
                            if (iy < 0 || iy >= long(d.H)) continue;
                            for (unsigned xx = 0; xx < d.W; ++xx) {
                                const long ix = long(xx) + kx - p;
                                if (ix < 0 || ix >= long(d.W)) continue;
                                const double t = g[size_t(y) * d.W + xx] * double(x[size_t(iy) * d.W + size_t(ix)]);
                                sum += t;  // exact product: two floats fit a double
                                mag += std::fabs(t);
                            }
                        }
                    }
                    const size_t o = (size_t(k) * d.C + c) * T + size_t(ky) * d.KS + kx;
                    dW.v[o] = sc * sum;
                    const double ec = std::isinf(rel) ? rel : rel * mag;
                    const double ea = g14 * (mag + ec);
                    dW.e[o] = std::isinf(ec) ? ec : asc * (ec + ea + kU * (std::fabs(sum) + ec + ea));
                }
    }
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // dW db X dY Y | N C H W K KS act | scale   (conv_bwd_weights' sums and signature, TF32 mma.sync)
    {"tc_conv_bwd_weights", "tcwgrad", {P, P, P, P, P, U, U, U, U, U, U, U, F}},
};
}  // namespace

}  // namespace ptxlab
