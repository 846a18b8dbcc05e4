// The hidden activation as its own elementwise pass (ptx/act.ptx): the model trainer runs it
// for the layers whose kernels apply ReLU alone in their epilogue (conv_fwd, tc_conv_fwd and
// the dense and conv backward passes: act 0 none, 1 ReLU), for every activation but ReLU.
// `act` is recipe.hpp's code (act_code: 0 relu .. 4 gelu), not the conv kernels' 0/1.
#pragma once

#include "kernels.hpp"

namespace ptxlab {

inline constexpr unsigned kActBlock = 256;

// A = f(Z) over N floats: grid ceil(N / 256) of 256 threads, one an element.
void launch_act_fwd(const Kernel& k, unsigned N, CUdeviceptr A, CUdeviceptr Z, unsigned act, CUstream s);
// G = dA * f'(.) over N floats: from A for codes 0..3 (ReLU a select), from Z for GELU; the
// pointer a code does not read may be 0; G may be dA (in place).
void launch_act_bwd(const Kernel& k, unsigned N, CUdeviceptr G, CUdeviceptr dA, CUdeviceptr A, CUdeviceptr Z,
                    unsigned act, CUstream s);

}  // namespace ptxlab
