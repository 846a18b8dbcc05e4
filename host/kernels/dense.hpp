// Launch shape of dense_mm (ptx/dense.ptx), the GEMM of a dense layer's three products:
// shared by verify, bench and the model trainer. The PTX header explains the tiling and the
// summation order.
#pragma once

#include "fused.hpp"
#include "kernels.hpp"

#include <algorithm>
#include <string>

namespace ptxlab {

inline constexpr unsigned kDenseBlock = 256;  // threads a block: 16 x 16 threads of 4 x 4 outputs
inline constexpr unsigned kDenseTile = 64;    // outputs a tile side
inline constexpr unsigned kDenseKTile = 16;   // k a staged tile
inline constexpr unsigned kDenseMaxCluster = 8;

// The grid of a dense_mm launch: tiles of 64 x 64 outputs over M x (N + [db]), each computed by
// a cluster of `cluster` blocks that split the ktiles = ceil(K/16) tiles of k.
struct DensePlan {
    unsigned tiles_m = 1, tiles_n = 1, ktiles = 1;
    unsigned cluster = 1;  // R: 1, 2, 4 or 8
    unsigned grid = 1;     // tiles_m * tiles_n * cluster blocks
};
// cluster: the least power of two R <= 8 with tiles * R >= sms (about a block an SM), doubled
// only while every rank keeps at least one k tile (2R <= ktiles); `ones` adds the ones column
// (db). `force_cluster` (not 0) takes that R instead (verify runs every R).
DensePlan dense_plan(unsigned M, unsigned N, unsigned K, bool ones, unsigned sms, unsigned force_cluster = 0);
// The k tiles of rank r under the plan: [first, end) (possibly empty), as the kernel takes them.
struct DenseRange {
    unsigned first = 0, end = 0;
};
DenseRange dense_rank_range(const DensePlan& p, unsigned rank);
// The longest chain of roundings behind one output: at most K fma (a rank's tiles, the padding
// adds +0 exactly), R - 1 adds over the ranks, the scale and the bias.
inline size_t dense_depth(unsigned K, unsigned cluster) { return size_t(K) + cluster + 1; }

// Every argument of dense_mm (dense.ptx's header): C[M][N] = epilogue(sum_k A(m,k) Bop(n,k)).
struct DenseArgs {
    CUdeviceptr C = 0, db = 0, A = 0, Am = 0, Bo = 0, bias = 0;
    unsigned M = 0, N = 0, K = 0, a_sm = 0, a_sk = 0, b_sn = 0, b_sk = 0, relu = 0;
    float scale = 1.0f;
};
// Why dense_mm cannot take these arguments (empty when it can): sizes >= 1, C and the operands
// given, the grid within the launch limit.
std::string dense_unfit(const DenseArgs& a);
// The multiprocessors of the current context's device (asked once per device).
unsigned dense_sm_count();
// The launch (throws InputError for dense_unfit's cases); cluster 0: dense_plan's choice.
void launch_dense_mm(const Kernel& k, const DenseArgs& a, CUstream s, unsigned cluster = 0, bool overlap = false);

// A dense layer W[O][I] (nn.Linear's [out][in]) at batch B, as the three products:
// forward: Y[B][O] = X W^T + b, ReLU'd when relu (act 1).
DenseArgs dense_forward_args(unsigned B, unsigned I, unsigned O, CUdeviceptr X, CUdeviceptr W, CUdeviceptr b,
                             CUdeviceptr Y, unsigned relu);
// deltas: dX[B][I] = G W, G = dY masked where Y <= 0 (act 1, ReLU) or dY (act 0): fc_bwd_data's semantics.
DenseArgs dense_bwd_data_args(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                              CUdeviceptr W, unsigned act);
// weights: dW[O][I] = scale G^T X, db[O] = scale sum_s G (db 0: none); G as above.
DenseArgs dense_bwd_weights_args(unsigned B, unsigned I, unsigned O, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X,
                                 CUdeviceptr dY, CUdeviceptr Y, unsigned act, float scale);

// The model trainer's fc layers (train_cnn.cpp) on dense_mm, where the layer has at least
// kDenseMin weights: a hidden layer's forward pass (ReLU), its deltas (fc_bwd_data's place) and
// its weight gradient; the last two layers' gradients as two dense_mm launches (fused_grad's
// place) once the larger of them has that many. Below it the older kernels are faster at batch
// 64 (H200, bench --models: 784-256-128-10 took 33.1 us a step all on dense_mm against 28.4 on
// fused_forward, fc_bwd_data, tc_grad_weights and fused_grad; 784-1024-1024-10 74.4 us on
// dense_mm): dense_mm's 64 x 64 tiles leave a 784->256 layer 4 tiles, 32 blocks. An FP32 weight
// gradient (--kernels fused/ptx) takes dense_mm at any size: a 1x1 conv_bwd_weights keeps one
// thread a block busy (milliseconds a step). 512K, not 256K: the CNN's fc1 (3136 x 128, 401K
// weights) took 131.77 us a step (tc) on dense_mm against 116.05 on the older kernels (H100,
// bench --sets tc --models cnn, 2026-11-27).
inline constexpr size_t kDenseMin = 512 * 1024;
inline bool dense_layer(unsigned I, unsigned O) { return size_t(I) * O >= kDenseMin; }
inline bool dense_replaces_fused_grad(unsigned I, unsigned H, unsigned O) {
    return std::max(size_t(H) * (I + 1), size_t(O) * (H + 1)) >= kDenseMin;
}
// The kernel the trainer launches for a hidden fc layer's forward pass (CnnOps::fused_forward):
// dense_mm for a large ReLU layer, else fused_forward; for its deltas (CnnOps::fc_bwd_data):
// dense_mm or fc_bwd_data; for the last two layers' gradients (CnnOps::fused_grad): dense_mm
// (two launches) or fused_grad.
inline const char* fc_forward_kernel(const FusedArgs& a) {
    return a.act == kActRelu && dense_layer(a.I, a.H) ? "dense_mm" : "fused_forward";
}
inline const char* fc_bwd_data_kernel(unsigned I, unsigned O) { return dense_layer(I, O) ? "dense_mm" : "fc_bwd_data"; }
inline const char* fused_grad_kernel(const FusedArgs& a) {
    return dense_replaces_fused_grad(a.I, a.H, a.O) ? "dense_mm" : "fused_grad";
}
// fused_grad's outputs with two dense_mm launches: GW1, Gb1 from D1 and X; GW2, Gb2 from D2 and
// A1 (the deltas are masked already: act 0), each scaled by a.scale.
void launch_dense_grads(const Kernel& k, const FusedArgs& a, CUstream s);

}  // namespace ptxlab
