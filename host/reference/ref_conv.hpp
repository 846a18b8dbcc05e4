// The float64 reference of the convolution and max-pool layers (model.hpp's conv and pool),
// NCHW, for the CPU tests, `ptxlab verify` and the coming CNN trainer.
//
// Convolution, stride 1, same padding p = KS/2 (KS odd), N images of C channels H x W, K
// output channels, weights Wt[K][C][KS][KS] (nn.Conv2d's layout):
//   Z[n][k][y][x] = b[k] + sum_{c, ky, kx} X[n][c][y + ky - p][x + kx - p] Wt[k][c][ky][kx]
//   Y = act(Z)                          (X outside the image is 0)
// Backward, from G = dL/dZ (the activation's derivative already applied):
//   dX[n][c][y][x] = sum_{k, ky, kx} G[n][k][y - ky + p][x - kx + p] Wt[k][c][ky][kx]
//   dW[k][c][ky][kx] = sum_{n, y, x} G[n][k][y][x] X[n][c][y + ky - p][x + kx - p]
//   db[k] = sum_{n, y, x} G[n][k][y][x]
//
// Max-pool 2x2, stride 2, on P = N*C planes of H x W (output floor(H/2) x floor(W/2)):
//   Y[q][oy][ox] = max of X[q][2oy + dy][2ox + dx], dy, dx in {0, 1}
//   idx[q][oy][ox] = (2oy + dy) * W + (2ox + dx) of that maximum: its index in the input plane.
//   Ties go to the first in row-major order within the window, (0,0), (0,1), (1,0), (1,1):
//   a later element replaces the running maximum only when strictly greater. (A NaN is
//   never greater, so a NaN wins only in the first place; PyTorch propagates NaN: ptxlab's
//   inputs are finite.)
// Backward: dX[q][iy][ix] = dY[q][iy/2][ix/2] where idx there is iy * W + ix, else 0 (the
// rows and columns past 2*floor(H/2), 2*floor(W/2) get 0).
//
// The *_bounded functions take the float32 tensors the kernels take and give each output
// with an a-priori bound on a correct float32 computation's error (reference.hpp):
//   conv forward   the kernel's fma chain of n = C*KS*KS terms from +0, then + b:
//                  gamma_{n+1} (|b| + sum |x w|); with ReLU, an output whose bound reaches
//                  the kink (|Z| <= bound) is not compared (infinite bound)
//   conv dX        an fma chain of K*KS*KS terms: gamma_{K KS KS} sum |g w|
//   conv dW, db    each thread's fma chain of at most ceil(N/8) ceil(H W / L) terms (L =
//                  256 / CS lanes a channel, conv_wgrad_plan), log2(min(L, 32)) butterfly
//                  adds, L/32 - 1 adds over a channel's warps (L > 32), 7 adds over the
//                  cluster's 8 ranks and the scale: |scale| gamma_m sum |g x| with
//                  m = conv_wgrad_depth(d) (conv.ptx's order; conv.hpp)
//   pool           exact (bound 0)
#pragma once

#include "recipe.hpp"
#include "reference.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace ptxlab {

struct ConvDims {
    unsigned N = 1, C = 1, H = 1, W = 1, K = 1, KS = 3;
    unsigned pad() const { return KS / 2; }
    size_t x_size() const { return size_t(N) * C * H * W; }
    size_t y_size() const { return size_t(N) * K * H * W; }
    size_t w_size() const { return size_t(K) * C * KS * KS; }
};

// Forward: Y = act(conv(X, Wt) + b); no activation when act is empty.
std::vector<double> conv2d_forward(const ConvDims& d, const std::vector<double>& X, const std::vector<double>& Wt,
                                   const std::vector<double>& b, std::optional<Activation> act);
// Backward to the input, from G = dL/dZ.
std::vector<double> conv2d_backward_input(const ConvDims& d, const std::vector<double>& G,
                                          const std::vector<double>& Wt);
// Backward to the weights and the bias, from G = dL/dZ.
void conv2d_backward_weights(const ConvDims& d, const std::vector<double>& X, const std::vector<double>& G,
                             std::vector<double>& dW, std::vector<double>& db);

struct PoolResult {
    std::vector<double> Y;
    std::vector<uint32_t> idx;
};
// P planes of H x W.
PoolResult maxpool2_forward(unsigned P, unsigned H, unsigned W, const std::vector<double>& X);
// With Yp (maxpool2_forward's Y), a window whose maximum is <= 0 routes 0: the ReLU mask of the
// layer below, as pool_bwd applies it.
std::vector<double> maxpool2_backward(unsigned P, unsigned H, unsigned W, const std::vector<double>& dY,
                                      const std::vector<uint32_t>& idx, const std::vector<double>* Yp = nullptr);

// ---- With error bounds, on the kernels' float32 inputs (act: 0 none, 1 ReLU, the kernels'
// `act` code). G below is the kernels' dY masked as they mask it: with act 1, dY where the
// layer's output Y > 0, else 0. ----
//
// The tensor-core kernels (tcconv.hpp: tc_conv_fwd, tc_conv_bwd_data) compute the same sums on
// TF32 inputs, a chain of ceil(IC/8) * KS*KS mma.sync each (IC the channels summed over):
// ConvArith::Tf32 holds them to tc.hpp's bound instead, with I = 8 ceil(IC/8) KS*KS products:
//   forward   e_c = tc_sum_bound(I) sum |x w|, then the bias's add.rn: e_c + u (|z| + e_c);
//             ReLU is 1-Lipschitz: the same bound for max(z, 0), and an output whose z + bound
//             < 0 must be exactly 0 (no output is skipped)
//   dX        tc_sum_bound(I) sum |g w|
enum class ConvArith { Fp32, Tf32 };
Bounded ref_conv_fwd(const ConvDims& d, const std::vector<float>& X, const std::vector<float>& Wt,
                     const std::vector<float>& b, unsigned act, ConvArith arith = ConvArith::Fp32);
Bounded ref_conv_bwd_data(const ConvDims& d, const std::vector<float>& dY, const std::vector<float>& Y,
                          const std::vector<float>& Wt, unsigned act, ConvArith arith = ConvArith::Fp32);
void ref_conv_bwd_weights(const ConvDims& d, const std::vector<float>& X, const std::vector<float>& dY,
                          const std::vector<float>& Y, unsigned act, float scale, Bounded& dW, Bounded& db);

}  // namespace ptxlab
