#include "densewgk.hpp"

#include "dense.hpp"
#include "error.hpp"
#include "tensormap.hpp"

#include <algorithm>
#include <cmath>

namespace ptxlab {

namespace {

unsigned div_up(unsigned a, unsigned b) { return unsigned((size_t(a) + b - 1) / b); }

// gamma_n = n u / (1 - n u), u = 2^-24; infinite where n u >= 1 (no bound).
double gamma_n(double n) {
    const double nu = n * std::ldexp(1.0, -24);
    return nu < 1.0 ? nu / (1.0 - nu) : INFINITY;
}

// The current context's device: compute capability (major, minor).
std::pair<int, int> current_cc() {
    CUdevice dev = 0;
    CU(cuCtxGetDevice, &dev);
    int major = 0, minor = 0;
    CU(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    CU(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    return {major, minor};
}

}  // namespace

DenseWgkArgs densewgk_forward_args(unsigned B, unsigned I, unsigned O, CUdeviceptr X, CUdeviceptr W, CUdeviceptr b,
                                   CUdeviceptr Y, bool relu) {
    DenseWgkArgs a;
    a.C = Y, a.A = X, a.B = W, a.bias = b;
    a.M = B, a.N = O, a.K = I;
    a.relu = relu;
    return a;
}

DenseWgkArgs densewgk_deltas_args(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dZ, CUdeviceptr Wt,
                                  CUdeviceptr Yb) {
    DenseWgkArgs a;
    a.C = dX, a.A = dZ, a.B = Wt, a.mask = Yb;
    a.M = B, a.N = I, a.K = O;
    return a;
}

DenseWgkPlan densewgk_plan(unsigned M, unsigned N, unsigned K, unsigned sms, unsigned force_ranks) {
    DenseWgkPlan p;
    p.tiles_m = div_up(std::max(M, 1u), kDenseWgkTileM);
    p.tiles_n = div_up(std::max(N, 1u), kDenseWgkTileN);
    p.k_tiles = div_up(std::max(K, 1u), kDenseWgkKTile);
    const size_t tiles = size_t(p.tiles_m) * p.tiles_n;
    p.ranks = 1;
    if (force_ranks != 0) {
        p.ranks = force_ranks;
    } else {
        for (unsigned r : {8u, 4u, 2u})
            if (r <= p.k_tiles && tiles * r <= std::max(sms, 1u)) {
                p.ranks = r;
                break;
            }
    }
    p.per_rank = div_up(p.k_tiles, p.ranks);
    p.grid_x = p.ranks * p.tiles_n;
    p.grid_y = p.tiles_m;
    return p;
}

std::string densewgk_unfit(const DenseWgkArgs& a, int cc_major, int cc_minor) {
    if (cc_major != 9 || cc_minor != 0)
        return fmt::format("dense_wg_k is sm_90a code (wgmma, TMA): compute capability 9.0 only, not {}.{}", cc_major,
                           cc_minor);
    if (a.C == 0 || a.A == 0 || a.B == 0) return "dense_wg_k needs C, A and B";
    if (a.M == 0 || a.N == 0 || a.M > kDenseWgkMaxM || a.N > kDenseWgkMaxNK)
        return fmt::format("dense_wg_k takes M in 1 .. {} and N in 1 .. {}, got M={} N={}", kDenseWgkMaxM,
                           kDenseWgkMaxNK, a.M, a.N);
    if (a.K < 4 || a.K % 4 != 0 || a.K > kDenseWgkMaxNK)
        return fmt::format("dense_wg_k takes K >= 4, a multiple of 4 (TMA: rows of 4 K bytes, a multiple of 16) "
                           "up to {}, got K={}", kDenseWgkMaxNK, a.K);
    if (a.A % 16 != 0 || a.B % 16 != 0)
        return fmt::format("dense_wg_k: TMA reads A and B from 16-byte aligned addresses; A is {:#x}, B {:#x}", a.A,
                           a.B);
    return {};
}

void launch_dense_wg_k(const Kernel& k, const DenseWgkArgs& a, CUstream s, bool overlap, unsigned ranks) {
    const auto [major, minor] = current_cc();
    if (const std::string why = densewgk_unfit(a, major, minor); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    if (ranks != 0 && ranks != 1 && ranks != 2 && ranks != 4 && ranks != 8)
        PTXLAB_THROW(InputError, "dense_wg_k splits K over 1, 2, 4 or 8 blocks (0: its own choice), not {}", ranks);
    const DenseWgkPlan p = densewgk_plan(a.M, a.N, a.K, ranks ? 1u : dense_sm_count(), ranks);
    const CUtensorMap tmA = encode_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.A, a.M, a.K, uint64_t(a.K) * 4,
                                                 kDenseWgkTileM, kDenseWgkKTile, true);
    const CUtensorMap tmB = encode_tensor_map_2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a.B, a.N, a.K, uint64_t(a.K) * 4,
                                                 kDenseWgkTileN, kDenseWgkKTile, true);
    k.launch_cluster_2d(p.grid_x, p.grid_y, kDenseWgkBlock, p.ranks, kDenseWgkSmem, overlap, s, a.C, a.A, a.B, a.bias,
                        a.mask, tmA, tmB, a.M, a.N, a.K, p.ranks, a.flags());
}

void launch_transpose32(const Kernel& k, CUdeviceptr out, CUdeviceptr in, unsigned R, unsigned C, CUstream s) {
    const uint64_t blocks = uint64_t(div_up(R, kTransposeTile)) * div_up(C, kTransposeTile);
    if (blocks > 0x7fffffffu)
        PTXLAB_THROW(InputError, "transpose32 takes up to 2^31 - 1 tiles of 32 x 32, not {} ({} x {})", blocks, R, C);
    k.launch(static_cast<unsigned>(blocks), kTransposeBlock, s, out, in, R, C);
}

double densewgk_sum_bound(unsigned K, unsigned ranks) {
    const double product = std::ldexp(1.0, -9) + std::ldexp(1.0, -20);  // two truncations to TF32
    const double steps = 4.0 * div_up(std::max(K, 1u), kDenseWgkKTile);  // k8 steps of a rank's chain, at most
    const double g = gamma_n(32.0 * steps);
    if (std::isinf(g)) return g;
    const double e = product + g * (1.0 + product);
    return e + gamma_n(double(std::max(ranks, 1u) - 1)) * (1.0 + e);
}

double densewgk_bound(unsigned K, unsigned ranks, double S, double exact) {
    const double u = std::ldexp(1.0, -24), ec = densewgk_sum_bound(K, ranks) * S;
    return ec + u * (std::fabs(exact) + ec);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // C A B bias Y | tmA tmB | M N K ranks flags   (densewgk.hpp: a dense layer's forward product for
    // few rows on wgmma TF32 fed by TMA, K split over a cluster; sm_90a code: compute capability 9.0 only)
    {"dense_wg_k", "hopper/densewgk", {P, P, P, P, P, T, T, U, U, U, U, U}, 90},
    // out in | R C   (densewgk.hpp: W^T for dense_wg_k's deltas; sm_90 code, loaded beside
    // dense_wg_k alone, on the same devices)
    {"transpose32", "hopper/transpose", {P, P, U, U}, 90},
};
}  // namespace

}  // namespace ptxlab
