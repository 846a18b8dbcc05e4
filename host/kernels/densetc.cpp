#include "densetc.hpp"

#include "error.hpp"
#include "tc.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ptxlab {

namespace {
unsigned div_up(unsigned a, unsigned b) { return unsigned((size_t(a) + b - 1) / b); }
}  // namespace

DenseTcPlan densetc_plan(unsigned M, unsigned N, unsigned K, bool ones, unsigned sms, unsigned force_split) {
    DenseTcPlan p;
    p.tiles_m = div_up(std::max(M, 1u), kDenseTcTile);
    p.tiles_n = div_up(std::max(N + (ones ? 1u : 0u), 1u), kDenseTcTile);
    p.chunks = div_up(std::max(K, 1u), kDenseTcKTile);
    const size_t tiles = size_t(p.tiles_m) * p.tiles_n, wave = size_t(std::max(sms, 1u)) * kDenseTcBlocksPerSm;
    if (force_split != 0) {
        p.split = force_split;
    } else {
        size_t best = SIZE_MAX;
        for (unsigned s = 1; s <= std::min(kDenseTcMaxSplit, p.chunks); ++s) {
            const size_t cost = (tiles * s + wave - 1) / wave * div_up(p.chunks, s);
            if (cost < best) best = cost, p.split = s;
        }
    }
    p.per_rank = div_up(p.chunks, p.split);
    p.grid = unsigned(tiles * p.split);
    return p;
}

DenseTcRange densetc_rank_range(const DenseTcPlan& p, unsigned rank) {
    const unsigned first = rank * p.per_rank;
    return {first, std::max(first, std::min(first + p.per_rank, p.chunks))};
}

bool densetc_cp_async(const DenseArgs& a) {
    const auto units = [](unsigned sr, unsigned sk) { return sk == 1 ? sr % 4 == 0 : sr == 1 && sk % 4 == 0; };
    const bool aligned = a.A % 16 == 0 && a.Am % 16 == 0 && a.Bo % 16 == 0;
    return aligned && units(a.a_sm, a.a_sk) && units(a.b_sn, a.b_sk);
}

std::string densetc_unfit(const DenseArgs& a) {
    if (a.M == 0 || a.N == 0 || a.K == 0)
        return fmt::format("dense_tc takes M, N, K >= 1, got M={} N={} K={}", a.M, a.N, a.K);
    if (a.M > kDenseTcMaxSize || a.N >= kDenseTcMaxSize || a.K > kDenseTcMaxSize)
        return fmt::format("dense_tc takes M, N, K below 2^31 (N + 1 with db), got M={} N={} K={}", a.M, a.N, a.K);
    if (a.C == 0 || a.A == 0 || a.Bo == 0) return "dense_tc needs C, A and Bop";
    const size_t tiles = size_t(div_up(a.M, kDenseTcTile)) * div_up(a.N + (a.db ? 1 : 0), kDenseTcTile);
    if (tiles * kDenseTcMaxSplit > 0x7fffffffu)
        return fmt::format("dense_tc: {} x {} outputs are more 128 x 128 tiles than a grid holds", a.M, a.N);
    return {};
}

void launch_dense_tc(const Kernel& k, const DenseArgs& a, CUstream s, bool overlap, unsigned split) {
    const std::string why = densetc_unfit(a);
    if (!why.empty()) PTXLAB_THROW(InputError, "{}", why);
    if (split > kDenseTcMaxSplit)
        PTXLAB_THROW(InputError, "dense_tc splits K over 1 .. {} blocks (0: its own choice), not {}", kDenseTcMaxSplit,
                     split);
    const DenseTcPlan p = densetc_plan(a.M, a.N, a.K, a.db != 0, split ? 1u : dense_sm_count(), split);
    k.launch_cluster_smem(p.grid, kDenseTcBlock, p.split, kDenseTcSmem, overlap, s, a.C, a.db, a.A, a.Am, a.Bo,
                          a.bias, a.M, a.N, a.K, a.a_sm, a.a_sk, a.b_sn, a.b_sk, a.relu, a.scale);
}

double densetc_sum_bound(unsigned K, unsigned split) {
    const double e = tc_sum_bound(div_up(std::max(K, 1u), kDenseTcKTile) * kDenseTcKTile);
    const double n = double(std::max(split, 1u) - 1), u = std::ldexp(1.0, -24);
    return e + n * u / (1.0 - n * u) * (1.0 + e);
}

double densetc_bound(unsigned K, unsigned split, double S, float scale, double scaled, double exact) {
    const double u = std::ldexp(1.0, -24), sc = std::fabs(double(scale));
    const double ec = sc * densetc_sum_bound(K, split) * S;
    const double ev = ec + u * (std::fabs(scaled) + ec);
    return ev + u * (std::fabs(exact) + ev);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // C db A Am Bo bias | M N K a_sm a_sk b_sn b_sk relu | scale   (densetc.hpp: dense_mm's GEMM, TF32 mma.sync)
    {"dense_tc", "densetc", {P, P, P, P, P, P, U, U, U, U, U, U, U, U, F}},
};
}  // namespace

}  // namespace ptxlab
