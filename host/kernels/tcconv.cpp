// Launch shapes of the tensor-core convolution kernels (see tcconv.hpp and ptx/tcconv.ptx).
#include "tcconv.hpp"

#include "error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace ptxlab {

namespace {
unsigned div_up(size_t a, size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// Blocks of (image, group of 32 output channels, strip) for a pass writing OC channels.
unsigned tcconv_grid(const ConvDims& d, unsigned OC, bool pooled = false) {
    return d.N * div_up(OC, kTcConvChannels) * tcconv_strips(d, OC, pooled).strips;
}

void require_fit(const ConvDims& d) {
    if (std::string why = tcconv_unfit(d); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
}
}  // namespace

ConvStrips tcconv_strips(const ConvDims& d, unsigned OC, bool pooled) {
    ConvStrips s = conv_strips(d.H, d.W, pooled);
    const size_t blocks = size_t(d.N) * div_up(OC, kTcConvChannels);
    // Finer strips while the grid is below kTcConvFill blocks, taking only counts whose strips
    // all start inside the image (ceil(H / ceil(H / strips)) == strips; pooled, with the rows
    // rounded up to even as the kernel rounds them).
    for (unsigned k = s.strips + 1; k <= d.H && blocks * s.strips < kTcConvFill; ++k) {
        const unsigned rows = pooled ? (div_up(d.H, k) + 1) & ~1u : div_up(d.H, k);
        if (pooled ? size_t(k - 1) * rows < d.H : div_up(d.H, rows) == k) s = {k, rows};
    }
    return s;
}

unsigned tcconv_smem(const ConvDims& d, unsigned OC, bool pooled) {
    const ConvStrips s = tcconv_strips(d, OC, pooled);
    const size_t T = size_t(d.KS) * d.KS;
    const size_t xb = (8 * size_t(s.rows + d.KS - 1) * (d.W + d.KS - 1) * 4 + 15) / 16 * 16;
    const size_t buf = 2 * xb + size_t(kTcConvChannels) * (8 * T + 4) * 4;
    const size_t plane = size_t(s.rows + d.KS - 1) * (d.W + d.KS - 1);
    const size_t staged = 2 * buf + 8 * T * 4 + plane * 4 + 8 * T * 4;  // koff, poff, wk
    const size_t tile = size_t(kTcConvChannels) * kTcConvPitch * 4;
    return static_cast<unsigned>(std::max(staged, tile));
}

std::string tcconv_unfit(const ConvDims& d) { return conv_unfit(d); }

void launch_tc_conv_fwd(const Kernel& k, const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b,
                        CUdeviceptr Y, unsigned act, CUstream s, CUdeviceptr idx) {
    if (std::string why = idx ? conv_pool_unfit(d) : tcconv_unfit(d); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    const bool pooled = idx != 0;
    k.launch_smem(tcconv_grid(d, d.K, pooled), kTcConvThreads, tcconv_smem(d, d.K, pooled), s, X, Wt, b, Y, idx, d.N,
                  d.C, d.H, d.W, d.K, d.KS, act);
}

std::string pool_below_unfit(const ConvDims& d, const PoolBelow& p) {
    if (p.PH / 2 != d.H || p.PW / 2 != d.W)
        return fmt::format("a 2x2 pool of {}x{} inputs gives {}x{}, not the conv's {}x{}", p.PH, p.PW, p.PH / 2,
                           p.PW / 2, d.H, d.W);
    return {};
}

void launch_tc_conv_bwd_data(const Kernel& k, const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                             CUdeviceptr Wt, unsigned act, CUstream s, const PoolBelow& pool) {
    require_fit(d);
    if (pool.idx)
        if (std::string why = pool_below_unfit(d, pool); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    k.launch_smem(tcconv_grid(d, d.C), kTcConvThreads, tcconv_smem(d, d.C), s, dX, dY, Y, Wt, pool.idx, pool.Yp, d.N,
                  d.C, d.H, d.W, d.K, d.KS, act, pool.PH, pool.PW);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // The convolutions on the tensor cores (tcconv.hpp): conv_fwd's and conv_bwd_data's signatures.
    {"tc_conv_fwd", "tcconv", {P, P, P, P, P, U, U, U, U, U, U, U}},
    {"tc_conv_bwd_data", "tcconv", {P, P, P, P, P, P, U, U, U, U, U, U, U, U, U}},  // + the pool below
};
}  // namespace

}  // namespace ptxlab
