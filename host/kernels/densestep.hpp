// dense_program (ptx/densestep.ptx): a persistent kernel that runs a list of GEMM phases (dense_mm's
// product) and the output delta in one launch, a grid barrier between its stages. Here: the phase
// record as the kernel reads it, the phase table of an fc network's training step (forward through
// L layers with ReLU, the loss delta, the deltas and weight gradients down the layers) and the
// launch. The PTX header explains the tiles, the stages and the summation order.
#pragma once

#include "dense.hpp"
#include "kernels.hpp"
#include "reference.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ptxlab {

inline constexpr unsigned kDenseStepBlock = 256;   // threads a block (dense_mm's tile code)
inline constexpr unsigned kDenseStepCluster = 8;   // R: blocks a cluster, given at launch
inline constexpr unsigned kDenseStepTile = 64;     // outputs a tile side
inline constexpr unsigned kDenseStepKTile = 16;    // k a staged tile
inline constexpr unsigned kDensePhaseGemm = 0, kDensePhaseDelta = 1;  // DensePhase::op

// One phase, the record the kernel reads (densestep.ptx's header gives the same offsets; the twin
// ptx/reference/densestep.cu declares the same struct). 128 bytes, 8-byte aligned.
//   op 0 (GEMM): dense_mm's C = epilogue(sum_k A(m,k) Bop(n,k)) (dense.hpp DenseArgs' fields),
//     ksplit ranks of a cluster splitting K (1, 2, 4 or 8, dividing the cluster size);
//   op 1 (delta): C [M][N] = Y - T (loss 0) or softmax(Y) - T (loss 1), Y = A, T = Bo.
//   barrier: a grid barrier after the phase (none after the last); rot: the cluster that starts
//   the phase's tiles (the tile slots of the stage's earlier phases, taken modulo the clusters).
struct DensePhase {
    uint32_t op = kDensePhaseGemm, M = 0, N = 0, K = 0, a_sm = 0, a_sk = 0, b_sn = 0, b_sk = 0, relu = 0;
    float scale = 1.0f;
    uint32_t ksplit = 1, rot = 0, barrier = 0, loss = 0;
    uint64_t C = 0, db = 0, A = 0, Am = 0, Bo = 0, bias = 0;
    uint64_t reserved[3] = {0, 0, 0};
};
static_assert(sizeof(DensePhase) == 128, "densestep.ptx reads 128-byte records");
static_assert(alignof(DensePhase) == 8);
static_assert(offsetof(DensePhase, op) == 0 && offsetof(DensePhase, M) == 4 && offsetof(DensePhase, N) == 8 &&
              offsetof(DensePhase, K) == 12 && offsetof(DensePhase, a_sm) == 16 && offsetof(DensePhase, a_sk) == 20 &&
              offsetof(DensePhase, b_sn) == 24 && offsetof(DensePhase, b_sk) == 28 &&
              offsetof(DensePhase, relu) == 32 && offsetof(DensePhase, scale) == 36 &&
              offsetof(DensePhase, ksplit) == 40 && offsetof(DensePhase, rot) == 44 &&
              offsetof(DensePhase, barrier) == 48 && offsetof(DensePhase, loss) == 52);
static_assert(offsetof(DensePhase, C) == 56 && offsetof(DensePhase, db) == 64 && offsetof(DensePhase, A) == 72 &&
              offsetof(DensePhase, Am) == 80 && offsetof(DensePhase, Bo) == 88 && offsetof(DensePhase, bias) == 96);

// A GEMM phase from dense_mm's arguments (dense.hpp: dense_forward_args and the others).
DensePhase dense_phase(const DenseArgs& a);
// The 64 x 64 tiles of a GEMM phase (the ones column counts with db) and its k tiles of 16.
unsigned densestep_tiles(const DensePhase& p);
unsigned densestep_ktiles(const DensePhase& p);
// The tile slots of a phase: the cluster rounds its tiles take, ceil(tiles / (cluster / ksplit)).
unsigned densestep_slots(const DensePhase& p, unsigned cluster = kDenseStepCluster);
// ksplit for a GEMM of `tiles` tiles and `ktiles` k tiles on `clusters` clusters of `cluster`
// blocks: the ks in 1, 2, 4, 8 (<= cluster) that takes the fewest k tiles one after another,
// ceil(ceil(tiles / (cluster / ks)) / clusters) rounds of ceil(ktiles / ks) k tiles; on a tie
// the smaller (fewer adds and barriers).
unsigned densestep_ksplit(unsigned tiles, unsigned ktiles, unsigned clusters, unsigned cluster = kDenseStepCluster);

// An fc network's step at batch B: sizes {I, H1, ..., O} (L = sizes.size() - 1 layers, ReLU after
// every layer but the last), nn.Linear's W[out][in]; the loss code (reference.hpp kLossDiff,
// kLossSoftmax) and the gradient scale (recipe.hpp grad_scale).
struct DenseNet {
    unsigned B = 0;
    std::vector<unsigned> sizes;
    unsigned loss = kLossSoftmax;
    float scale = 1.0f;
    // The input X [B][I], the targets T [B][O], the logits Y [B][O], the output deltas D [B][O].
    CUdeviceptr X = 0, T = 0, Y = 0, D = 0;
    // Per layer l < L: W[l] [sizes[l+1]][sizes[l]], b[l]; their gradients gW[l], gb[l] (written).
    std::vector<CUdeviceptr> W, b, gW, gb;
    // Per hidden layer l < L-1: its output act[l] = ReLU(...) [B][sizes[l+1]] and delta[l], the
    // loss's derivative by that output (unmasked: the mask act[l] > 0 is applied where it is read).
    std::vector<CUdeviceptr> act, delta;
    size_t layers() const { return sizes.empty() ? 0 : sizes.size() - 1; }
};
// Why the step cannot run on dense_program (empty when it can): 2+ layers, sizes 1 .. 2^24 and
// B >= 1, a pointer for every buffer, the loss code 0 or 1.
std::string dense_net_unfit(const DenseNet& n);

// The step's phases on `clusters` clusters, in stages (each ends with a grid barrier):
//   0 .. L-1   forward: act[l] = ReLU(in W[l]^T + b[l]) (in = X, then act[l-1]); the last Y, no ReLU
//   L          the loss delta: D = Y - T or softmax(Y) - T
//   L+1 ..     backward, from the top layer l = L-1 down: one stage with layer l's weight gradient
//              (gW[l] = scale G^T in, gb[l] = scale sum_s G, G = D or delta[l] masked by act[l])
//              and, above the first layer, its deltas delta[l-1] = G W[l]; the first layer's
//              weight gradient alone last.
// 2L + 1 stages, 3L phases: 784-256-128-10 is 7 stages, 9 phases.
std::vector<DensePhase> densestep_phases(const DenseNet& n, unsigned clusters, unsigned cluster = kDenseStepCluster);
// The clusters a step's stages can keep busy at once: the largest stage's tile slots (>= 1).
unsigned densestep_clusters_wanted(const std::vector<DensePhase>& phases, unsigned cluster = kDenseStepCluster);

// The largest grid (in clusters of kDenseStepCluster) whose clusters are all resident at once
// (cuOccupancyMaxActiveClusters, asked once per function): throws Error if not even one fits.
unsigned densestep_max_clusters(const Kernel& k);
// The plan of a step: its phases, their ksplits chosen for `nominal` clusters (the device's SMs /
// kDenseStepCluster: densestep_nominal_clusters), so that the summation order is the same for
// the PTX and its twin whatever their occupancy; and the clusters of the grid, min(the largest
// stage's tile slots, max_clusters resident). The grid changes which cluster takes a tile, never
// a sum's order.
struct DenseStepPlan {
    std::vector<DensePhase> phases;
    unsigned clusters = 1;
};
DenseStepPlan densestep_plan(const DenseNet& n, unsigned nominal, unsigned max_clusters);
// The current device's SMs / kDenseStepCluster (at least 1).
unsigned densestep_nominal_clusters();
// The launch: `phases` (nphases records in device memory), the grid barrier's count `sync`
// (a multiple of the grid's blocks before the launch, so 0 to start; every launch leaves it one).
// Always a plain launch (its grid barrier needs every block resident).
void launch_dense_program(const Kernel& k, CUdeviceptr phases, unsigned nphases, unsigned clusters, CUdeviceptr sync,
                          CUstream s);
// Why the kernel cannot take a phase table (empty when it can): sizes >= 1, pointers given, ksplit
// 1, 2, 4 or 8 dividing the cluster, ops 0 and 1.
std::string dense_phases_unfit(const std::vector<DensePhase>& phases, unsigned cluster = kDenseStepCluster);

}  // namespace ptxlab
