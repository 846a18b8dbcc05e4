// Launch shapes of the tensor-core kernels and their float64 reference (see tc.hpp and the
// header of ptx/tc.ptx).
#include "tc.hpp"

#include "error.hpp"

#include <cmath>

namespace ptxlab {

namespace {
constexpr double kU = 0x1p-24;                     // FP32's unit roundoff
constexpr double kTf32Product = 0x1p-10 + 0x1p-22;  // a product of two cvt.rna.tf32 inputs, relative
constexpr double kBf16Product = 0x1p-7 + 0x1p-16;   // a product of two cvt.rn.bf16 inputs, relative
constexpr unsigned kTcUnitsPerMma = 32;             // m16n8k8: 16 truncations of 2u each (tc.hpp, item 2)
constexpr unsigned kTcUnitsPerMmaK16 = 64;          // m16n8k16: 32 truncations of 2u each
// G[s][o] of the backward kernels as a double: dY masked by ReLU (act 1) where Y > 0 fails.
double g_at(const std::vector<float>& dY, const std::vector<float>& Y, size_t e, unsigned act) {
    return act == 1 && !(Y[e] > 0.0f) ? 0.0 : double(dY[e]);
}

// Four warps (four tiles) a block: ceil(T / 4) blocks (T < 2^32, so it fits an unsigned).
unsigned tc_blocks(size_t tiles) {
    const size_t warps_a_block = kTcBlock / 32;
    return static_cast<unsigned>((tiles + warps_a_block - 1) / warps_a_block);
}

// 16 x 8 warp tiles over a rows x cols output.
size_t tiles_of(unsigned rows, unsigned cols) {
    return ((size_t(rows) + kTcRows - 1) / kTcRows) * ((size_t(cols) + kTcCols - 1) / kTcCols);
}

// Why `entry` cannot take sizes B, I and N (N named `n`: H or O) with `tiles` warp tiles.
std::string unfit(const std::string& entry, const char* n, unsigned B, unsigned I, unsigned N, size_t tiles) {
    if (B == 0 || I == 0 || N == 0)
        return fmt::format("{} needs B, I, {} >= 1, got B={} I={} {}={}", entry, n, B, I, n, N);
    if (B > kTcMaxSize || I > kTcMaxSize || N > kTcMaxSize)
        return fmt::format("{} takes B, I, {} up to {} (its 32-bit indices), got B={} I={} {}={}", entry, n, kTcMaxSize,
                           B, I, n, N);
    if (tiles > 0xffffffffu)
        return fmt::format("{} takes fewer than 2^32 warp tiles (its 32-bit warp index), got {} for B={} I={} {}={}",
                           entry, tiles, B, I, n, N);
    return {};
}

// gamma_n = n u / (1 - n u); infinite (no bound) once n u reaches 1.
double gamma_or_inf(double n) { return n * kU >= 1.0 ? INFINITY : n * kU / (1.0 - n * kU); }
}  // namespace

TcPrecision tc_precision_of(std::string_view entry) {
    return entry.ends_with("_bf16") ? TcPrecision::Bf16 : TcPrecision::Tf32;
}

std::string_view tc_base_entry(std::string_view entry) {
    return entry.ends_with("_bf16") ? entry.substr(0, entry.size() - 5) : entry;
}

size_t tc_forward_tiles(unsigned B, unsigned H) { return tiles_of(B, H); }

size_t tc_forward_blocks(unsigned B, unsigned H) { return ((size_t(B) + 31) / 32) * ((size_t(H) + 31) / 32); }

std::string tc_unfit(unsigned B, unsigned I, unsigned H) {
    return unfit("tc_forward", "H", B, I, H, B && H ? tc_forward_tiles(B, H) : 0);
}

void launch_tc_forward(const Kernel& k, unsigned B, unsigned I, unsigned H, CUdeviceptr X, CUdeviceptr W,
                       CUdeviceptr b, CUdeviceptr A, unsigned act, CUstream s) {
    if (std::string why = tc_unfit(B, I, H); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    // One block a 32 x 32 tile of A, four k groups of 4 warps (ptx/tc.ptx); the twin's warps
    // walk the 16 x 8 tiles with a grid stride. tc_unfit keeps the tiles below 2^32, so the
    // blocks (an eighth of them) and the twin's tile and warp indices fit 32 bits.
    const bool bf16 = tc_precision_of(k.spec->entry) == TcPrecision::Bf16;
    k.launch_smem(static_cast<unsigned>(tc_forward_blocks(B, H)), kTcGroupBlock, bf16 ? kTcForwardBf16Smem : kTcGroupSmem,
                  s, X, W, b, A, B, I, H, act);
}

double tc_sum_bound(unsigned I, TcPrecision p) {
    // gamma_n over the roundings of u in the mma chain (I past 2^22: no bound)
    const bool bf16 = p == TcPrecision::Bf16;
    const double product = bf16 ? kBf16Product : kTf32Product;
    const double g = bf16 ? gamma_or_inf(kTcUnitsPerMmaK16 * std::ceil(double(I) / 16))
                          : gamma_or_inf(kTcUnitsPerMma * std::ceil(double(I) / kTcCols));
    return std::isinf(g) ? g : product + g * (1.0 + product);
}

Bounded ref_tc_forward(const std::vector<float>& X, const std::vector<float>& W, const std::vector<float>& b,
                       unsigned B, unsigned I, unsigned H, unsigned act, TcPrecision p) {
    const double rel = tc_sum_bound(I, p);
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

size_t tc_grad_input_tiles(unsigned B, unsigned I) { return tiles_of(B, I); }

size_t tc_grad_weights_tiles(unsigned I, unsigned O) { return tiles_of(O, I); }

size_t tc_grad_weights_blocks(unsigned I, unsigned O) { return ((size_t(O) + 31) / 32) * ((size_t(I) + 31) / 32); }

std::string tc_grad_unfit(const std::string& entry, unsigned B, unsigned I, unsigned O) {
    const size_t tiles =
        tc_base_entry(entry) == "tc_grad_weights" ? tc_grad_weights_tiles(I, O) : tc_grad_input_tiles(B, I);
    return unfit(entry, "O", B, I, O, tiles);
}

void launch_tc_grad_input(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY,
                          CUdeviceptr Y, CUdeviceptr W, unsigned act, CUstream s) {
    if (std::string why = tc_grad_unfit("tc_grad_input", B, I, O); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    // One warp a 16 x 8 tile of dX, 4 warps a block (ptx/tc.ptx); fewer than 2^32 tiles, so the
    // PTX's warp index 4 * block + 3 of the last block fits 32 bits too.
    k.launch(tc_blocks(tc_grad_input_tiles(B, I)), kTcBlock, s, dX, dY, Y, W, B, I, O, act);
}

void launch_tc_grad_weights(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dW, CUdeviceptr db,
                            CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr X, unsigned act, float scale, CUstream s) {
    if (std::string why = tc_grad_unfit("tc_grad_weights", B, I, O); !why.empty())
        PTXLAB_THROW(InputError, "{}", why);
    // One block a 32 x 32 tile of dW, four k groups of 4 warps (ptx/tc.ptx); the twin's warps
    // walk the 16 x 8 tiles with a grid stride; db by the warps of tile column 0.
    const bool bf16 = tc_precision_of(k.spec->entry) == TcPrecision::Bf16;
    k.launch_smem(static_cast<unsigned>(tc_grad_weights_blocks(I, O)), kTcGroupBlock,
                  bf16 ? kTcGradWeightsBf16Smem : kTcGroupSmem, s, dW, db, dY, Y, X, B, I, O, act, scale);
}

size_t tc_grad_weights_wide_blocks(unsigned I, unsigned O) {
    return ((size_t(O) + 63) / 64) * ((size_t(I) + 63) / 64);
}

unsigned tc_grad_weights_wide_smem(unsigned B) {
    const unsigned rows = (B + 7) / 8 * 8;  // k tiles of 8 samples, the last padded with +0
    return 3 * rows * 72 * sizeof(float);   // B <= 128: 110,592 bytes at most
}

std::string tc_grad_wide_unfit(unsigned B, unsigned I, unsigned O) {
    const std::string entry = "tc_grad_weights_wide";
    // Fewer than 2^32 warp tiles (the twin's 32-bit tile index) also keeps the PTX's grid below
    // 2^31 blocks: ceil(O/64) ceil(I/64) >= 2^31 with I, O <= 2^31 needs both factors >= 64, and
    // then the tiles ceil(O/16) ceil(I/8) > 32 (ceil(O/64) - 1) (ceil(I/64) - 1) > 30 * 2^31.
    if (std::string why = unfit(entry, "O", B, I, O, tc_grad_weights_tiles(I, O)); !why.empty()) return why;
    if (B > kTcWideMaxBatch)
        return fmt::format("{} stages the whole batch in shared memory: it takes B up to {}, got B={} "
                           "(tc_grad_weights takes any batch)",
                           entry, kTcWideMaxBatch, B);
    return {};
}

void launch_tc_grad_weights_wide(const Kernel& k, unsigned B, unsigned I, unsigned O, CUdeviceptr dW, CUdeviceptr db,
                                 CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr X, unsigned act, float scale, CUstream s) {
    if (std::string why = tc_grad_wide_unfit(B, I, O); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    // One block a 64 x 64 tile of dW, 8 warps, the batch staged once (ptx/tc.ptx; launch_smem
    // raises the opt-in past 48 KB); the twin's warps walk the 16 x 8 tiles with a grid stride,
    // db by the warps of tile column 0.
    k.launch_smem(static_cast<unsigned>(tc_grad_weights_wide_blocks(I, O)), kTcWideBlock,
                  tc_grad_weights_wide_smem(B), s, dW, db, dY, Y, X, B, I, O, act, scale);
}

double tc_bias_bound(unsigned B) { return gamma_or_inf(double(B)); }

Bounded ref_tc_grad_input(const std::vector<float>& dY, const std::vector<float>& Y, const std::vector<float>& W,
                          unsigned B, unsigned I, unsigned O, unsigned act, TcPrecision p) {
    const double rel = tc_sum_bound(O, p);  // K = O products a sum
    Bounded r;
    r.resize(size_t(B) * I);
    for (unsigned s = 0; s < B; ++s)
        for (unsigned i = 0; i < I; ++i) {
            double sum = 0, mag = 0;
            for (unsigned o = 0; o < O; ++o) {
                const double p = g_at(dY, Y, size_t(s) * O + o, act) * double(W[size_t(o) * I + i]);  // exact
                sum += p;
                mag += std::fabs(p);
            }
            const size_t e = size_t(s) * I + i;
            r.v[e] = sum;
            r.e[e] = std::isinf(rel) ? rel : rel * mag;  // dX = c: no rounding after the mma chain
        }
    return r;
}

void ref_tc_grad_weights(const std::vector<float>& dY, const std::vector<float>& Y, const std::vector<float>& X,
                         unsigned B, unsigned I, unsigned O, unsigned act, float scale, Bounded& dW, Bounded& db,
                         TcPrecision p) {
    const double rel = tc_sum_bound(B, p), rb = tc_bias_bound(B), sc = double(scale), asc = std::fabs(sc);
    dW.resize(size_t(O) * I);
    db.resize(O);
    std::vector<double> g(B);
    for (unsigned o = 0; o < O; ++o) {
        double bsum = 0, bmag = 0;
        for (unsigned s = 0; s < B; ++s) {
            g[s] = g_at(dY, Y, size_t(s) * O + o, act);
            bsum += g[s];
            bmag += std::fabs(g[s]);
        }
        db.v[o] = sc * bsum;
        db.e[o] = std::isinf(rb) ? rb : asc * rb * bmag;
        for (unsigned i = 0; i < I; ++i) {
            double sum = 0, mag = 0;
            for (unsigned s = 0; s < B; ++s) {
                const double p = g[s] * double(X[size_t(s) * I + i]);  // exact: two floats' product
                sum += p;
                mag += std::fabs(p);
            }
            const double ec = std::isinf(rel) ? rel : rel * mag;
            const size_t e = size_t(o) * I + i;
            dW.v[e] = sc * sum;
            // Then mul.rn(c, scale): one rounding of |scale c| <= |scale| (|sum| + ec).
            dW.e[e] = std::isinf(ec) ? ec : asc * (ec + kU * (std::fabs(sum) + ec));
        }
    }
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // The tensor-core kernels (tc.hpp). X W b A | B I H act   (a dense layer's forward pass, TF32 mma.sync)
    {"tc_forward", "tc", {P, P, P, P, U, U, U, U}},
    // dX dY Y W | B I O act   (dX = G W, G = dY masked by ReLU: fc_bwd_data's signature)
    {"tc_grad_input", "tc", {P, P, P, P, U, U, U, U}},
    // dW db dY Y X | B I O act | scale   (dW = scale G^T X, db = scale sum_s G)
    {"tc_grad_weights", "tc", {P, P, P, P, P, U, U, U, U, F}},
    // the same sums for batches up to 128 and wide layers, one mma chain a tile (tc_grad_wide_unfit)
    {"tc_grad_weights_wide", "tc", {P, P, P, P, P, U, U, U, U, F}},
    // The same three on BF16 inputs (m16n8k16), the same signatures (ptx/tcbf16.ptx).
    {"tc_forward_bf16", "tcbf16", {P, P, P, P, U, U, U, U}},
    {"tc_grad_input_bf16", "tcbf16", {P, P, P, P, U, U, U, U}},
    {"tc_grad_weights_bf16", "tcbf16", {P, P, P, P, P, U, U, U, U, F}},
};
}  // namespace

}  // namespace ptxlab
