// What the verify families of a dense layer's three products share (family_dense.cpp for dense_mm,
// family_densetc.cpp for dense_tc): the product codes of their shapes, the masked deltas in float64
// and the least traffic and arithmetic of a product (bench's rates).
#pragma once

#include "registry.hpp"

#include <cmath>
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

// The float64 dots of n <= 4 rows of x (kStride floats apart) with w over K terms, the rows'
// chains interleaved (so that they overlap in the pipeline), each still in index order:
// sum[k] += x[k][i] w[i] and mag[k] += |x[k][i] w[i]| for i = 0 .. K-1, from the values given.
inline void dots4(const float* x, size_t stride, size_t n, const float* w, unsigned K, double* sum, double* mag) {
    if (n != 4) {
        for (size_t k = 0; k < n; ++k)
            for (unsigned i = 0; i < K; ++i) {
                const double p = double(x[k * stride + i]) * w[i];
                sum[k] += p;
                mag[k] += std::fabs(p);
            }
        return;
    }
    const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
    double s0 = sum[0], s1 = sum[1], s2 = sum[2], s3 = sum[3], m0 = mag[0], m1 = mag[1], m2 = mag[2], m3 = mag[3];
    for (unsigned i = 0; i < K; ++i) {
        const double p0 = double(x0[i]) * w[i], p1 = double(x1[i]) * w[i];
        const double p2 = double(x2[i]) * w[i], p3 = double(x3[i]) * w[i];
        s0 += p0, s1 += p1, s2 += p2, s3 += p3;
        m0 += std::fabs(p0), m1 += std::fabs(p1), m2 += std::fabs(p2), m3 += std::fabs(p3);
    }
    sum[0] = s0, sum[1] = s1, sum[2] = s2, sum[3] = s3;
    mag[0] = m0, mag[1] = m1, mag[2] = m2, mag[3] = m3;
}

// Bytes (X, W, the output and the bias or the mask) and flops (2 B I O) of the product of shape
// op,B,I,O,...
inline std::pair<double, double> dense_product_work(const VerifyCase& c) {
    const double B = c.shape[1], I = c.shape[2], O = c.shape[3];
    return {4 * (B * I + O * I + B * O + (c.shape[0] == kOpForward ? O : B * O)), 2 * B * I * O};
}

}  // namespace ptxlab::verify_detail
