// What the verify families of a dense layer's three products share (family_dense.cpp for dense_mm,
// family_densetc.cpp for dense_tc): the product codes of their shapes, the masked deltas in float64
// and the least traffic and arithmetic of a product (bench's rates).
#pragma once

#include "registry.hpp"

#include <utility>
#include <vector>

namespace ptxlab::verify_detail {

// Field 0 of the shape: which product.
enum DenseOp : unsigned { kOpForward = 0, kOpDeltas = 1, kOpWeights = 2 };

// G = dY masked where Y <= 0 (act 1) or dY, in float64.
inline std::vector<double> masked_g(const std::vector<float>& dY, const std::vector<float>& Y, unsigned act) {
    std::vector<double> g(dY.size());
    for (size_t i = 0; i < g.size(); ++i) g[i] = act == 1 && !(Y[i] > 0.0f) ? 0.0 : double(dY[i]);
    return g;
}

// Bytes (X, W, the output and the bias or the mask) and flops (2 B I O) of the product of shape
// op,B,I,O,...
inline std::pair<double, double> dense_product_work(const VerifyCase& c) {
    const double B = c.shape[1], I = c.shape[2], O = c.shape[3];
    return {4 * (B * I + O * I + B * O + (c.shape[0] == kOpForward ? O : B * O)), 2 * B * I * O};
}

}  // namespace ptxlab::verify_detail
