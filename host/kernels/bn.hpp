// Launches of the batch-normalization kernels (ptx/bn.ptx: bn_fwd, bn_bwd; its header has the
// sums, the roundings and the launch shape): a cluster of kBnCluster blocks of kBnThreads
// threads a channel (sm_90).
#pragma once

#include "kernels.hpp"

#include <string>

namespace ptxlab {

inline constexpr unsigned kBnThreads = 256, kBnCluster = 8;
// The activation codes bn_fwd and bn_bwd take: recipe.hpp's kActRelu (0) and kActLeakyRelu (1),
// and none (a bn without the hidden activation, the verify cases').
inline constexpr unsigned kBnActNone = 5;

// The dynamic shared memory a launch gives the kernels' cache (ptx/bn.ptx: a thread's values
// copied in at once and kept between the passes instead of read again): bn_fwd in training 1 KB
// (x), bn_bwd 3 KB (dY, X, Y), for each of the ceil(B HW / 2048) values a thread takes; 0 (no
// cache: the passes read global memory, four values at a time) in evaluation or past kBnCacheMax.
inline constexpr unsigned kBnCacheMax = 200 * 1024;
unsigned bn_cache_bytes(unsigned B, unsigned HW, bool backward, bool train);

// Why the kernels cannot run X [B][C][HW] (empty when they can): sizes >= 1, B * C * HW < 2^31,
// an activation code they take; in training (train) at least 2 values a channel, as PyTorch
// ("Expected more than 1 value per channel when training").
std::string bn_unfit(unsigned B, unsigned C, unsigned HW, unsigned act, bool train);

// Y = act(gamma (X - mean) rstd + beta): train, the batch's mean and rstd into stats [2][C] and
// running [2][C] (mean, var) updated; else running's (stats not written, may be 0).
void launch_bn_fwd(const Kernel& k, unsigned B, unsigned C, unsigned HW, CUdeviceptr Y, CUdeviceptr stats,
                   CUdeviceptr running, CUdeviceptr X, CUdeviceptr gamma, CUdeviceptr beta, unsigned act, bool train,
                   CUstream s);
// dX from dY at the output Y = act(z) of bn_fwd (training), X and its stats; dgamma, dbeta =
// scale times the batch sums, written.
void launch_bn_bwd(const Kernel& k, unsigned B, unsigned C, unsigned HW, CUdeviceptr dX, CUdeviceptr dgamma,
                   CUdeviceptr dbeta, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr X, CUdeviceptr gamma,
                   CUdeviceptr stats, unsigned act, float scale, CUstream s);

}  // namespace ptxlab
