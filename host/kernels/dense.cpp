#include "dense.hpp"

#include "error.hpp"

#include <algorithm>
#include <map>
#include <mutex>

namespace ptxlab {

namespace {
unsigned div_up(unsigned a, unsigned b) { return (a + b - 1) / b; }
}  // namespace

DensePlan dense_plan(unsigned M, unsigned N, unsigned K, bool ones, unsigned sms, unsigned force_cluster) {
    DensePlan p;
    p.tiles_m = div_up(std::max(M, 1u), kDenseTile);
    p.tiles_n = div_up(N + (ones ? 1u : 0u), kDenseTile);
    p.ktiles = div_up(K, kDenseKTile);
    const unsigned tiles = p.tiles_m * p.tiles_n;
    if (force_cluster != 0) {
        p.cluster = force_cluster;
    } else {
        p.cluster = 1;
        while (p.cluster < kDenseMaxCluster && size_t(tiles) * p.cluster < sms && 2 * p.cluster <= p.ktiles)
            p.cluster *= 2;
    }
    p.grid = tiles * p.cluster;
    return p;
}

DenseRange dense_rank_range(const DensePlan& p, unsigned rank) {
    const unsigned tpr = div_up(p.ktiles, p.cluster);
    const unsigned first = rank * tpr;
    return {first, std::max(first, std::min(first + tpr, p.ktiles))};
}

std::string dense_unfit(const DenseArgs& a) {
    if (a.M == 0 || a.N == 0 || a.K == 0)
        return fmt::format("dense_mm takes M, N, K >= 1, got M={} N={} K={}", a.M, a.N, a.K);
    if (a.C == 0 || a.A == 0 || a.Bo == 0) return "dense_mm needs C, A and Bop";
    const size_t tiles = size_t(div_up(a.M, kDenseTile)) * div_up(a.N + (a.db ? 1 : 0), kDenseTile);
    if (tiles * kDenseMaxCluster > 0x7fffffffu)
        return fmt::format("dense_mm: {} x {} outputs are more tiles than a grid holds", a.M, a.N);
    return {};
}

unsigned dense_sm_count() {
    static std::mutex mu;
    static std::map<CUdevice, int> counts;
    CUdevice dev = 0;
    CU(cuCtxGetDevice, &dev);
    std::lock_guard<std::mutex> lock(mu);
    auto it = counts.find(dev);
    if (it == counts.end()) {
        int n = 0;
        CU(cuDeviceGetAttribute, &n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
        it = counts.emplace(dev, std::max(n, 1)).first;
    }
    return unsigned(it->second);
}

void launch_dense_mm(const Kernel& k, const DenseArgs& a, CUstream s, unsigned cluster, bool overlap) {
    const std::string why = dense_unfit(a);
    if (!why.empty()) PTXLAB_THROW(InputError, "{}", why);
    if (cluster != 0 && cluster != 1 && cluster != 2 && cluster != 4 && cluster != 8)
        PTXLAB_THROW(InputError, "dense_mm runs in clusters of 1, 2, 4 or 8 blocks, not {}", cluster);
    const DensePlan p = dense_plan(a.M, a.N, a.K, a.db != 0, cluster ? 0 : dense_sm_count(), cluster);
    k.launch_cluster(p.grid, kDenseBlock, p.cluster, overlap, s, a.C, a.db, a.A, a.Am, a.Bo, a.bias, a.M, a.N, a.K,
                     a.a_sm, a.a_sk, a.b_sn, a.b_sk, a.relu, a.scale);
}

DenseArgs dense_forward_args(unsigned B, unsigned I, unsigned O, CUdeviceptr X, CUdeviceptr W, CUdeviceptr b,
                             CUdeviceptr Y, unsigned relu) {
    DenseArgs a;
    a.C = Y, a.A = X, a.Bo = W, a.bias = b;
    a.M = B, a.N = O, a.K = I;
    a.a_sm = I, a.a_sk = 1, a.b_sn = I, a.b_sk = 1;
    a.relu = relu;
    return a;
}

DenseArgs dense_bwd_data_args(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                              CUdeviceptr W, unsigned act) {
    DenseArgs a;
    a.C = dX, a.A = dY, a.Am = act == 1 ? Y : 0, a.Bo = W;
    a.M = B, a.N = I, a.K = O;
    a.a_sm = O, a.a_sk = 1, a.b_sn = 1, a.b_sk = I;
    return a;
}

DenseArgs dense_bwd_weights_args(unsigned B, unsigned I, unsigned O, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                                 CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale) {
    DenseArgs a;
    a.C = dW, a.db = db, a.A = dY, a.Am = act == 1 ? Y : 0, a.Bo = X;
    a.M = O, a.N = I, a.K = B;
    a.a_sm = 1, a.a_sk = O, a.b_sn = 1, a.b_sk = I;
    a.scale = scale;
    return a;
}

void launch_dense_grads(const Kernel& k, const FusedArgs& a, CUstream s) {
    launch_dense_mm(k, dense_bwd_weights_args(a.B, a.I, a.H, a.GW1, a.Gb1, a.X, a.D1, 0, 0, a.scale), s);
    launch_dense_mm(k, dense_bwd_weights_args(a.B, a.H, a.O, a.GW2, a.Gb2, a.A1, a.D2, 0, 0, a.scale), s);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // C db A Am Bo bias | M N K a_sm a_sk b_sn b_sk relu | scale   (dense.hpp: a dense layer's three GEMMs)
    {"dense_mm", "dense", {P, P, P, P, P, P, U, U, U, U, U, U, U, U, F}},
};
}  // namespace

}  // namespace ptxlab
