// The float64 reference of convolution and max-pool (see ref_conv.hpp).
#include "ref_conv.hpp"

#include "conv.hpp"
#include "parallel_rows.hpp"
#include "tc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ptxlab {

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24, float32's unit roundoff
constexpr double kInf = std::numeric_limits<double>::infinity();
double gamma_n(size_t n) { return (double(n) * kU) / (1.0 - double(n) * kU); }

// The TF32 kernels' relative bound of a sum over IC channels (ref_conv.hpp): a chain of
// ceil(IC/8) * KS*KS mma, I = 8 ceil(IC/8) KS*KS products.
double tc_conv_sum_bound(unsigned IC, unsigned KS) { return tc_sum_bound(8 * ((IC + 7) / 8) * KS * KS); }

template <class T> std::vector<double> widen(const std::vector<T>& v) { return {v.begin(), v.end()}; }

// X[n][c][y][x], 0 outside the image (y, x as signed offsets).
template <class T> double at(const std::vector<T>& X, const ConvDims& d, unsigned n, unsigned c, unsigned chans,
                             long y, long x) {
    if (y < 0 || x < 0 || y >= long(d.H) || x >= long(d.W)) return 0.0;
    return double(X[((size_t(n) * chans + c) * d.H + size_t(y)) * d.W + size_t(x)]);
}

// The three sums, each with the sum of the magnitudes of its terms alongside.
struct Sum {
    double v = 0, mag = 0;
    void add(double a, double b) {
        v += a * b;
        mag += std::fabs(a * b);
    }
};

Sum forward_sum(const ConvDims& d, const std::vector<double>& X, const std::vector<double>& Wt, unsigned n,
                unsigned k, unsigned y, unsigned x) {
    Sum s;
    const long p = d.pad();
    for (unsigned c = 0; c < d.C; ++c)
        for (unsigned ky = 0; ky < d.KS; ++ky)
            for (unsigned kx = 0; kx < d.KS; ++kx)
                s.add(at(X, d, n, c, d.C, long(y) + ky - p, long(x) + kx - p),
                      Wt[((size_t(k) * d.C + c) * d.KS + ky) * d.KS + kx]);
    return s;
}

Sum input_sum(const ConvDims& d, const std::vector<double>& G, const std::vector<double>& Wt, unsigned n, unsigned c,
              unsigned y, unsigned x) {
    Sum s;
    const long p = d.pad();
    for (unsigned k = 0; k < d.K; ++k)
        for (unsigned ky = 0; ky < d.KS; ++ky)
            for (unsigned kx = 0; kx < d.KS; ++kx)
                s.add(at(G, d, n, k, d.K, long(y) - ky + p, long(x) - kx + p),
                      Wt[((size_t(k) * d.C + c) * d.KS + ky) * d.KS + kx]);
    return s;
}

Sum weight_sum(const ConvDims& d, const std::vector<double>& X, const std::vector<double>& G, unsigned k, unsigned c,
               unsigned ky, unsigned kx) {
    Sum s;
    const long p = d.pad();
    for (unsigned n = 0; n < d.N; ++n)
        for (unsigned y = 0; y < d.H; ++y)
            for (unsigned x = 0; x < d.W; ++x)
                s.add(at(G, d, n, k, d.K, y, x), at(X, d, n, c, d.C, long(y) + ky - p, long(x) + kx - p));
    return s;
}

Sum bias_sum(const ConvDims& d, const std::vector<double>& G, unsigned k) {
    Sum s;
    for (unsigned n = 0; n < d.N; ++n)
        for (unsigned y = 0; y < d.H; ++y)
            for (unsigned x = 0; x < d.W; ++x) s.add(at(G, d, n, k, d.K, y, x), 1.0);
    return s;
}

// G = dY masked as the kernels mask it (act 1: where Y > 0).
std::vector<double> masked(const std::vector<float>& dY, const std::vector<float>& Y, unsigned act) {
    std::vector<double> G(dY.size());
    for (size_t i = 0; i < G.size(); ++i) G[i] = (act == 1 && !(Y[i] > 0.0f)) ? 0.0 : double(dY[i]);
    return G;
}

}  // namespace

std::vector<double> conv2d_forward(const ConvDims& d, const std::vector<double>& X, const std::vector<double>& Wt,
                                   const std::vector<double>& b, std::optional<Activation> act) {
    std::vector<double> Y(d.y_size());
    for (unsigned n = 0; n < d.N; ++n)
        for (unsigned k = 0; k < d.K; ++k)
            for (unsigned y = 0; y < d.H; ++y)
                for (unsigned x = 0; x < d.W; ++x) {
                    const double z = b[k] + forward_sum(d, X, Wt, n, k, y, x).v;
                    Y[((size_t(n) * d.K + k) * d.H + y) * d.W + x] = act ? activate(*act, z) : z;
                }
    return Y;
}

std::vector<double> conv2d_backward_input(const ConvDims& d, const std::vector<double>& G,
                                          const std::vector<double>& Wt) {
    std::vector<double> dX(d.x_size());
    for (unsigned n = 0; n < d.N; ++n)
        for (unsigned c = 0; c < d.C; ++c)
            for (unsigned y = 0; y < d.H; ++y)
                for (unsigned x = 0; x < d.W; ++x)
                    dX[((size_t(n) * d.C + c) * d.H + y) * d.W + x] = input_sum(d, G, Wt, n, c, y, x).v;
    return dX;
}

void conv2d_backward_weights(const ConvDims& d, const std::vector<double>& X, const std::vector<double>& G,
                             std::vector<double>& dW, std::vector<double>& db) {
    dW.assign(d.w_size(), 0.0);
    db.assign(d.K, 0.0);
    for (unsigned k = 0; k < d.K; ++k) {
        db[k] = bias_sum(d, G, k).v;
        for (unsigned c = 0; c < d.C; ++c)
            for (unsigned ky = 0; ky < d.KS; ++ky)
                for (unsigned kx = 0; kx < d.KS; ++kx)
                    dW[((size_t(k) * d.C + c) * d.KS + ky) * d.KS + kx] = weight_sum(d, X, G, k, c, ky, kx).v;
    }
}

PoolResult maxpool2_forward(unsigned P, unsigned H, unsigned W, const std::vector<double>& X) {
    const unsigned Ho = H / 2, Wo = W / 2;
    PoolResult r;
    r.Y.resize(size_t(P) * Ho * Wo);
    r.idx.resize(r.Y.size());
    for (unsigned q = 0; q < P; ++q)
        for (unsigned oy = 0; oy < Ho; ++oy)
            for (unsigned ox = 0; ox < Wo; ++ox) {
                uint32_t best = 2 * oy * W + 2 * ox;
                double m = X[size_t(q) * H * W + best];
                for (unsigned j = 1; j < 4; ++j) {  // (0,1), (1,0), (1,1): replace only when strictly greater
                    const uint32_t i = (2 * oy + j / 2) * W + 2 * ox + j % 2;
                    if (X[size_t(q) * H * W + i] > m) m = X[size_t(q) * H * W + i], best = i;
                }
                const size_t o = (size_t(q) * Ho + oy) * Wo + ox;
                r.Y[o] = m;
                r.idx[o] = best;
            }
    return r;
}

std::vector<double> maxpool2_backward(unsigned P, unsigned H, unsigned W, const std::vector<double>& dY,
                                      const std::vector<uint32_t>& idx, const std::vector<double>* Yp) {
    const unsigned Ho = H / 2, Wo = W / 2;
    std::vector<double> dX(size_t(P) * H * W, 0.0);
    for (unsigned q = 0; q < P; ++q)
        for (size_t o = 0; o < size_t(Ho) * Wo; ++o) {
            const size_t w = size_t(q) * Ho * Wo + o;
            if (!Yp || (*Yp)[w] > 0.0) dX[size_t(q) * H * W + idx[w]] = dY[w];
        }
    return dX;
}

Bounded ref_conv_fwd(const ConvDims& d, const std::vector<float>& Xf, const std::vector<float>& Wf,
                     const std::vector<float>& bf, unsigned act, ConvArith arith) {
    const auto X = widen(Xf), Wt = widen(Wf);
    Bounded r;
    r.resize(d.y_size());
    const double g = gamma_n(size_t(d.C) * d.KS * d.KS + 1), tc = tc_conv_sum_bound(d.C, d.KS);
    const double taps = double(d.KS) * d.KS;
    for_rows(d.N, double(d.K) * d.H * d.W * d.C * taps, [&](size_t n0, size_t n1) {  // images: independent
        for (unsigned n = unsigned(n0); n < n1; ++n)
            for (unsigned k = 0; k < d.K; ++k)
                for (unsigned y = 0; y < d.H; ++y)
                    for (unsigned x = 0; x < d.W; ++x) {
                        const Sum s = forward_sum(d, X, Wt, n, k, y, x);
                        const double z = double(bf[k]) + s.v;
                        const size_t o = ((size_t(n) * d.K + k) * d.H + y) * d.W + x;
                        if (arith == ConvArith::Tf32) {
                            const double ec = tc * s.mag, e = ec + kU * (std::fabs(z) + ec);
                            r.v[o] = act == 1 ? std::max(z, 0.0) : z;
                            r.e[o] = act == 1 && z + e < 0 ? 0.0 : e;
                            continue;
                        }
                        const double e = g * (std::fabs(double(bf[k])) + s.mag);
                        if (act == 1) {
                            r.v[o] = z > 0 ? z : 0.0;
                            r.e[o] = std::fabs(z) <= e ? kInf : (z > 0 ? e : 0.0);
                        } else {
                            r.v[o] = z;
                            r.e[o] = e;
                        }
                    }
    });
    return r;
}

Bounded ref_conv_bwd_data(const ConvDims& d, const std::vector<float>& dY, const std::vector<float>& Y,
                          const std::vector<float>& Wf, unsigned act, ConvArith arith) {
    const auto G = masked(dY, Y, act), Wt = widen(Wf);
    Bounded r;
    r.resize(d.x_size());
    const double g = arith == ConvArith::Tf32 ? tc_conv_sum_bound(d.K, d.KS) : gamma_n(size_t(d.K) * d.KS * d.KS);
    const double taps = double(d.KS) * d.KS;
    for_rows(d.N, double(d.C) * d.H * d.W * d.K * taps, [&](size_t n0, size_t n1) {  // images: independent
        for (unsigned n = unsigned(n0); n < n1; ++n)
            for (unsigned c = 0; c < d.C; ++c)
                for (unsigned y = 0; y < d.H; ++y)
                    for (unsigned x = 0; x < d.W; ++x) {
                        const Sum s = input_sum(d, G, Wt, n, c, y, x);
                        const size_t o = ((size_t(n) * d.C + c) * d.H + y) * d.W + x;
                        r.v[o] = s.v;
                        r.e[o] = g * s.mag;
                    }
    });
    return r;
}

void ref_conv_bwd_weights(const ConvDims& d, const std::vector<float>& Xf, const std::vector<float>& dY,
                          const std::vector<float>& Y, unsigned act, float scale, Bounded& dW, Bounded& db) {
    const auto G = masked(dY, Y, act), X = widen(Xf);
    // conv.ptx's order (conv_wgrad_depth): a thread's chain of ceil(H W / L) pixels of each
    // of its ceil(N / 8) images, the butterfly over min(L, 32) lanes, the adds over a
    // channel's warps (L > 32), 7 adds over the cluster's ranks and the scale.
    const double g = gamma_n(conv_wgrad_depth(d)), sc = double(scale);
    dW.resize(d.w_size());
    db.resize(d.K);
    const double taps = double(d.KS) * d.KS;
    for_rows(d.K, double(d.C) * taps * d.N * d.H * d.W, [&](size_t k0, size_t k1) {  // outputs: independent
        for (unsigned k = unsigned(k0); k < k1; ++k) {
            const Sum b = bias_sum(d, G, k);
            db.v[k] = sc * b.v;
            db.e[k] = std::fabs(sc) * g * b.mag;
            for (unsigned c = 0; c < d.C; ++c)
                for (unsigned ky = 0; ky < d.KS; ++ky)
                    for (unsigned kx = 0; kx < d.KS; ++kx) {
                        const Sum s = weight_sum(d, X, G, k, c, ky, kx);
                        const size_t o = ((size_t(k) * d.C + c) * d.KS + ky) * d.KS + kx;
                        dW.v[o] = sc * s.v;
                        dW.e[o] = std::fabs(sc) * g * s.mag;
                    }
        }
    });
}

}  // namespace ptxlab
