#include "fused.hpp"

namespace ptxlab {

void launch_fused_forward(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    ks.get("fused_forward").launch(fused_forward_grid(a.B, a.H), kFusedBlock, s, a.X, a.W1, a.b1, a.A1, a.B, a.I, a.H);
}

void launch_fused_output(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    ks.get("fused_output").launch(fused_output_grid(a.B), kFusedBlock, s, a.A1, a.W2, a.b2, a.T, a.Y, a.D2, a.D1, a.B,
                                  a.H, a.O);
}

void launch_fused_sgd(const KernelSet& ks, const FusedArgs& a, CUstream s) {
    ks.get("fused_sgd").launch(fused_sgd_grid(a.I, a.H, a.O), kFusedBlock, s, a.W1, a.b1, a.W2, a.b2, a.X, a.A1, a.D1,
                               a.D2, a.B, a.I, a.H, a.O, a.lr);
}

}  // namespace ptxlab
