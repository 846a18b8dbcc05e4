// The optimizer step on the GPU: one launch of an entry of ptx/optim.ptx updates every
// parameter of the network (one flat array of N floats; the mean gradient G and the
// state M, V have the same layout). The rules are PyTorch's (recipe.hpp, OptimKind).
#pragma once

#include "kernels.hpp"
#include "recipe.hpp"

namespace ptxlab {

// The entry that runs an optimizer (its row of the optimizer table, optimizers.hpp):
// "optim_sgd" (Sgd, Momentum, Nesterov), "optim_adam" (Adam, AdamW, NAdam) or "optim_rmsprop" (RmsProp).
const char* optimizer_entry(OptimKind k);

// One optimizer step on P[N] with the mean gradient G[N]: M and V are the state buffers
// (o.state_buffers() of them: Momentum and Nesterov use M, Adam and AdamW M and V, RmsProp
// V; the others may be 0), hyp the device address of this step's StepHyper record.
// Blocks of 256 threads, one thread per element.
void launch_optimizer(const KernelSet& ks, const OptimConfig& o, CUdeviceptr P, CUdeviceptr G, CUdeviceptr M,
                      CUdeviceptr V, CUdeviceptr hyp, unsigned N, CUstream s);
// The same launch of k, optimizer_entry(o.kind)'s kernel (verify's harness, family_optim.cpp):
// the arguments the table gives (optimizer_kernel_args) in that entry's parameter list.
void launch_optimizer_kernel(const Kernel& k, const OptimConfig& o, CUdeviceptr P, CUdeviceptr G, CUdeviceptr M,
                             CUdeviceptr V, CUdeviceptr hyp, unsigned N, CUstream s);

}  // namespace ptxlab
