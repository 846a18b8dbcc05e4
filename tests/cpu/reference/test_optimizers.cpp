// The optimizer table (host/reference/optimizers.hpp) against what the host did before it read
// one table: every constant below was recorded from the code at 7599e3f (before the refactor),
// so the table changes nothing the kernels receive or the references compute: the separate-launch
// kernel's entry and flags, step_hyper's records bit for bit, describe(), the float64 rule, its
// rounding bound, verify's variants and the harnesses' inputs and references.
#include "error.hpp"
#include "optim.hpp"
#include "optimizers.hpp"
#include "ref_optim.hpp"
#include "registry.hpp"
#include "rng.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <tuple>

using namespace ptxlab;

namespace {

constexpr OptimKind kKinds[] = {OptimKind::Sgd,   OptimKind::Momentum, OptimKind::Nesterov, OptimKind::Adam,
                                OptimKind::AdamW, OptimKind::RmsProp,  OptimKind::NAdam};

// step_hyper's record at (lr, t) for two configurations (0: the defaults with weight decay 0.01;
// 1: beta1 0.8, beta2 0.95, weight decay 0.125, momentum 0.5): the float fields' bits.
struct HyperCase {
    int config;
    unsigned code;
    double lr;
    uint64_t t;
    uint32_t lr_bits, step_bits, bc2_bits, decay_bits;
};
constexpr HyperCase kHyper[] = {
    {0, 0, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f7ffffcu, 0x3d0186acu, 0x3f7fbe77u},
    {0, 0, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e4447bau, 0x3dab1710u, 0x3f7fbe77u},
    {0, 0, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 0, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3c23d708u, 0x3d0186acu, 0x3f7fff58u},
    {0, 0, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3afb3d18u, 0x3dab1710u, 0x3f7fff58u},
    {0, 0, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f4b9072u, 0x3f7fff58u},
    {0, 1, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f7ffffcu, 0x3d0186acu, 0x3f7fbe77u},
    {0, 1, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e4447bau, 0x3dab1710u, 0x3f7fbe77u},
    {0, 1, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 1, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3c23d708u, 0x3d0186acu, 0x3f7fff58u},
    {0, 1, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3afb3d18u, 0x3dab1710u, 0x3f7fff58u},
    {0, 1, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f4b9072u, 0x3f7fff58u},
    {0, 2, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f7ffffcu, 0x3d0186acu, 0x3f7fbe77u},
    {0, 2, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e4447bau, 0x3dab1710u, 0x3f7fbe77u},
    {0, 2, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 2, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3c23d708u, 0x3d0186acu, 0x3f7fff58u},
    {0, 2, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3afb3d18u, 0x3dab1710u, 0x3f7fff58u},
    {0, 2, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f4b9072u, 0x3f7fff58u},
    {0, 3, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f7ffffcu, 0x3d0186acu, 0x3f7fbe77u},
    {0, 3, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e4447bau, 0x3dab1710u, 0x3f7fbe77u},
    {0, 3, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 3, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3c23d708u, 0x3d0186acu, 0x3f7fff58u},
    {0, 3, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3afb3d18u, 0x3dab1710u, 0x3f7fff58u},
    {0, 3, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f4b9072u, 0x3f7fff58u},
    {0, 4, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f7ffffcu, 0x3d0186acu, 0x3f7fbe77u},
    {0, 4, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e4447bau, 0x3dab1710u, 0x3f7fbe77u},
    {0, 4, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 4, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3c23d708u, 0x3d0186acu, 0x3f7fff58u},
    {0, 4, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3afb3d18u, 0x3dab1710u, 0x3f7fff58u},
    {0, 4, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f4b9072u, 0x3f7fff58u},
    {0, 5, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f7ffffcu, 0x3d0186acu, 0x3f7fbe77u},
    {0, 5, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e4447bau, 0x3dab1710u, 0x3f7fbe77u},
    {0, 5, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 5, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3c23d708u, 0x3d0186acu, 0x3f7fff58u},
    {0, 5, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3afb3d18u, 0x3dab1710u, 0x3f7fff58u},
    {0, 5, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f4b9072u, 0x3f7fff58u},
    {0, 6, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3d6739fau, 0x3d0186acu, 0x3f7fbe77u},
    {0, 6, 0x1.999999999999ap-4, 7, 0x3d61eae1u, 0x3d38df91u, 0x3dab1710u, 0x3f7fbe77u},
    {0, 6, 0x1.999999999999ap-4, 1000, 0x3d4582f6u, 0x3d541d2fu, 0x3f4b9072u, 0x3f7fbe77u},
    {0, 6, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3a13fc25u, 0x3d0186acu, 0x3f7fff58u},
    {0, 6, 0x1.0624dd2f1a9fcp-10, 7, 0x3a109653u, 0x39eca34au, 0x3dab1710u, 0x3f7fff58u},
    {0, 6, 0x1.0624dd2f1a9fcp-10, 1000, 0x39fcd097u, 0x3a07c0c2u, 0x3f4b9072u, 0x3f7fff58u},
    {1, 0, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f000001u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 0, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e0192d4u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 0, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f800000u, 0x3f7ccccdu},
    {1, 0, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3ba3d70bu, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 0, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3aa5daa9u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 0, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f800000u, 0x3f7ff7cfu},
    {1, 1, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f000001u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 1, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e0192d4u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 1, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f800000u, 0x3f7ccccdu},
    {1, 1, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3ba3d70bu, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 1, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3aa5daa9u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 1, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f800000u, 0x3f7ff7cfu},
    {1, 2, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f000001u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 2, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e0192d4u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 2, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f800000u, 0x3f7ccccdu},
    {1, 2, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3ba3d70bu, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 2, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3aa5daa9u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 2, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f800000u, 0x3f7ff7cfu},
    {1, 3, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f000001u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 3, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e0192d4u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 3, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f800000u, 0x3f7ccccdu},
    {1, 3, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3ba3d70bu, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 3, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3aa5daa9u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 3, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f800000u, 0x3f7ff7cfu},
    {1, 4, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f000001u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 4, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e0192d4u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 4, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f800000u, 0x3f7ccccdu},
    {1, 4, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3ba3d70bu, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 4, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3aa5daa9u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 4, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f800000u, 0x3f7ff7cfu},
    {1, 5, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3f000001u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 5, 0x1.999999999999ap-4, 7, 0x3dcccccdu, 0x3e0192d4u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 5, 0x1.999999999999ap-4, 1000, 0x3dcccccdu, 0x3dcccccdu, 0x3f800000u, 0x3f7ccccdu},
    {1, 5, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x3ba3d70bu, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 5, 0x1.0624dd2f1a9fcp-10, 7, 0x3a83126fu, 0x3aa5daa9u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 5, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a83126fu, 0x3a83126fu, 0x3f800000u, 0x3f7ff7cfu},
    {1, 6, 0x1.999999999999ap-4, 1, 0x3dcccccdu, 0x3d432128u, 0x3e64f930u, 0x3f7ccccdu},
    {1, 6, 0x1.999999999999ap-4, 7, 0x3d75fa4au, 0x3d242980u, 0x3f0c9ae2u, 0x3f7ccccdu},
    {1, 6, 0x1.999999999999ap-4, 1000, 0x3d5d13b2u, 0x3d3c8bb8u, 0x3f800000u, 0x3f7ccccdu},
    {1, 6, 0x1.0624dd2f1a9fcp-10, 1, 0x3a83126fu, 0x39f9c40au, 0x3e64f930u, 0x3f7ff7cfu},
    {1, 6, 0x1.0624dd2f1a9fcp-10, 7, 0x3a1d6cfcu, 0x39d220a4u, 0x3f0c9ae2u, 0x3f7ff7cfu},
    {1, 6, 0x1.0624dd2f1a9fcp-10, 1000, 0x3a0d7d3fu, 0x39f156afu, 0x3f800000u, 0x3f7ff7cfu},
};

OptimConfig hyper_config(int config, OptimKind k) {
    OptimConfig o;
    o.kind = k;
    if (config == 0) {
        o.weight_decay = 0.01f;
    } else {
        o.beta1 = 0.8f;
        o.beta2 = 0.95f;
        o.weight_decay = 0.125f;
        o.momentum = 0.5f;
    }
    return o;
}

// describe() with the defaults (0) and with weight decay 0.05, beta1 0.8, eps 1e-6, alpha 0.9,
// momentum 0.95 (1).
struct DescribeCase {
    unsigned code;
    int edited;
    const char* text;
};
constexpr DescribeCase kDescribe[] = {
    {0, 0, "sgd"},
    {1, 0, "momentum (momentum 0.9)"},
    {2, 0, "nesterov (momentum 0.9)"},
    {3, 0, "adam (betas 0.9, 0.999, eps 1e-08)"},
    {4, 0, "adamw (betas 0.9, 0.999, eps 1e-08)"},
    {5, 0, "rmsprop (alpha 0.99, eps 1e-08)"},
    {6, 0, "nadam (betas 0.9, 0.999, eps 1e-08, momentum decay 0.004)"},
    {0, 1, "sgd, weight decay 0.05"},
    {1, 1, "momentum (momentum 0.95), weight decay 0.05"},
    {2, 1, "nesterov (momentum 0.95), weight decay 0.05"},
    {3, 1, "adam (betas 0.8, 0.999, eps 1e-06), weight decay 0.05"},
    {4, 1, "adamw (betas 0.8, 0.999, eps 1e-06), decoupled weight decay 0.05"},
    {5, 1, "rmsprop (alpha 0.9, eps 1e-06), weight decay 0.05"},
    {6, 1, "nadam (betas 0.8, 0.999, eps 1e-06, momentum decay 0.004), weight decay 0.05"},
};

// optim_step: three steps of three parameters (weight decay 0.03, beta1 0.8, momentum 0.7, alpha
// 0.9, eps 1e-3, lr 0.05): p, m, v after them.
struct RuleCase {
    unsigned code;
    double p[3], m[3], v[3];
};
constexpr RuleCase kRule[] = {
    {0, {0x1.ca87b73d4eedfp-2, -0x1.df2205473c506p-3, 0x1.72aa55faedfb9p+0}, {0x0p+0, 0x0p+0, 0x0p+0}, {0x0p+0, 0x0p+0, 0x0p+0}},
    {1, {0x1.be0088e6a29eep-2, -0x1.a534d11709329p-3, 0x1.5f818237a887fp+0}, {0x1.e0c3d9332eee1p-1, -0x1.3d4f6faef2145p-4, 0x1.99c9fda66b92p-2}, {0x0p+0, 0x0p+0, 0x0p+0}},
    {2, {0x1.9c6385359c868p-2, -0x1.9fd696b024ac9p-3, 0x1.5bf82e530341ep+0}, {0x1.e0a0cab7783b2p-1, -0x1.3ac030b2dbe64p-4, 0x1.9781f8179f4f8p-2}, {0x0p+0, 0x0p+0, 0x0p+0}},
    {3, {0x1.a2320cd80dbffp-2, -0x1.7bd6da567a396p-3, 0x1.66c0e80f35f89p+0}, {0x1.8b8cd0cdffa84p-3, -0x1.d5bdf7b23631cp-6, 0x1.f5a23d3b38a18p-4}, {0x1.fb70e90b64491p-11, 0x1.573ae607664cdp-11, 0x1.5ae96c466f094p-8}},
    {4, {0x1.a3858398fb354p-2, -0x1.7c50c2f6c2335p-3, 0x1.66964cc9750eep+0}, {0x1.7dbf4718fc504p-3, -0x1.a36e2ee631f6dp-6, 0x1.9ed7c6a747d6cp-4}, {0x1.ecb586626bc18p-11, 0x1.542f762479366p-11, 0x1.552ebcb9d09a9p-8}},
    {5, {0x1.1e3e1ecfb9faep-2, -0x1.5f9f024f9d38ep-3, 0x1.44ca2189c0d81p+0}, {0x0p+0, 0x0p+0, 0x0p+0}, {0x1.837bd3efb61fbp-4, 0x1.c07fd4bc700fap-5, 0x1.f3f3bef3d69b4p-2}},
    {6, {0x1.a57afafa0601ap-2, -0x1.bc20219b6c29bp-3, 0x1.69c87ff23e39ap+0}, {0x1.8bd5405800c9p-3, -0x1.d801628b11eb2p-6, 0x1.f50545770fb8cp-4}, {0x1.fc3d6bbd97557p-11, 0x1.574b4f4cf93e2p-11, 0x1.5af66497e989cp-8}},
};

// ref_optim_bounded: one step of four parameters at t = 3 from a gradient with a bound; the
// values and bounds of P, M, V (value, bound, value, bound, ...; empty where not kept).
struct BoundCase {
    unsigned code;
    std::vector<double> P, M, V;
};
const BoundCase kBound[] = {
    {0, {0x1.efdf3b609ba5ep-2, 0x1.044b830bc3febp-25, -0x1.b78d4fcd6872bp-3, 0x1.0000002439582p-26, 0x1.7f4bc6a7f9db2p+0, 0x1.806df38112fc2p-24, 0x0p+0, 0x1.5798f12820dd7p-28, }, {}, {}},
    {1, {0x1.ec49ba59b22d1p-2, 0x1.0e26a5f8b7716p-25, -0x1.a9374bb1c28f6p-3, 0x1.2b645aa94bc6fp-26, 0x1.7f4bc6a7f9db2p+0, 0x1.81222cdaef874p-24, -0x1.58106326e978bp-7, 0x1.d89f182f57813p-28, }, {0x1.8a3d709b851ebp-2, 0x1.e023ad95327f4p-25, -0x1.b1eb851ab851ep-1, 0x1.b1eb85f3ae147p-24, 0x1.c28f5b9eb851fp-5, 0x1.25ffde6a0bb9cp-27, 0x1.ae147b851eb8p-3, 0x1.0c82260ee9c38p-23, }, {}},
    {2, {0x1.e212d7702339cp-2, 0x1.1d29f2117ec95p-25, -0x1.7acd9e74cbfb2p-3, 0x1.60f90a94d35b4p-26, 0x1.7ecd9e841999ap+0, 0x1.826b74666b416p-24, -0x1.e1b08a4673816p-8, 0x1.6044e018ca1cep-27, }, {0x1.8a3d709b851ebp-2, 0x1.e023ad95327f4p-25, -0x1.b1eb851ab851ep-1, 0x1.b1eb85f3ae147p-24, 0x1.c28f5b9eb851fp-5, 0x1.25ffde6a0bb9cp-27, 0x1.ae147b851eb8p-3, 0x1.0c82260ee9c38p-23, }, {}},
    {3, {0x1.f7d3cf25a3313p-2, 0x1.1de38c191db29p-25, -0x1.f84323b9c060dp-3, 0x1.1ba935df06cecp-26, 0x1.77320caa6cfbfp+0, 0x1.f78f51bd4cc6ap-24, -0x1.f346a4baa8cf8p-10, 0x1.34dbb38f6d534p-30, }, {0x1.24dd2ee9374bdp-3, 0x1.4d5e2507c4426p-26, -0x1.34bc6a3f6c8b5p-2, 0x1.4ac083ac6a7e9p-25, 0x1.6872ae49ba5eap-7, 0x1.9f6c70bf03208p-29, 0x1.eb85207ae148p-3, 0x1.641e65525a6c2p-25, }, {0x1.4a9a8ac2f9f2ap-7, 0x1.513662bb2e3ap-30, 0x1.9a372d750c3ffp-3, 0x1.9bc0d4434b47ap-26, 0x1.9600ddd9655d3p-19, 0x1.3bad054b6cf3ap-40, 0x1.ff7ceep-2, 0x1.ff7cef012f652p-25, }},
    {4, {0x1.f73a27c5d94ecp-2, 0x1.0d47a7c7b6c1bp-24, -0x1.f788555147488p-3, 0x1.0c73c2437ed2ep-25, 0x1.77aebc0d34c01p+0, 0x1.c288ffcb35f04p-23, -0x1.f346a4baa8cf8p-10, 0x1.34dbb363ccb4dp-30, }, {0x1.1eb851c28f5c3p-3, 0x1.03a3c633be2e6p-26, -0x1.333332f5c28f6p-2, 0x1.0000000a3d704p-25, 0x1.0624dc28f5c29p-9, 0x1.a082a669dfe2cp-31, 0x1.eb85207ae148p-3, 0x1.641e64a68df3bp-25, }, {0x1.4a4d287b00bcap-7, 0x1.4d6cd9ad80178p-30, 0x1.9a31a4a3bcd37p-3, 0x1.9ab2185d5baa6p-26, 0x1.ad7dbf487fcbap-24, 0x1.04abdbaeb62e3p-44, 0x1.ff7ceep-2, 0x1.ff7cef012f652p-25, }},
    {5, {0x1.8b9a1cc12ef03p-2, 0x1.5df3389b03f62p-24, -0x1.69449bcbe5158p-3, 0x1.54b9da76fa886p-25, 0x1.59b93d2033434p+0, 0x1.749ed56208586p-23, 0x0p+0, 0x1.ff714b1af8bb6p-28, }, {}, {0x1.3606b9b5ca6cap-6, 0x1.403bf23d93fc4p-28, 0x1.d727689ea5b93p-3, 0x1.38766310d585dp-25, 0x1.3d31bde892225p-12, 0x1.ed400028d3c02p-34, 0x1.ccccccp-2, 0x1.cccccd7683e8p-25, }},
    {6, {0x1.f8bb4523c1d9p-2, 0x1.0ad61dce038a6p-24, -0x1.f8c532e7f525cp-3, 0x1.09e1747e64904p-25, 0x1.7077a912031c2p+0, 0x1.cded2ee40a904p-23, -0x1.905ae1ac95f36p-12, 0x1.0445b8a99573dp-31, }, {0x1.24dd2ee9374bdp-3, 0x1.4d5e2507c4426p-26, -0x1.34bc6a3f6c8b5p-2, 0x1.4ac083ac6a7e9p-25, 0x1.6872ae49ba5eap-7, 0x1.9f6c70bf03208p-29, 0x1.eb85207ae148p-3, 0x1.641e65525a6c2p-25, }, {0x1.4a9a8ac2f9f2ap-7, 0x1.513662bb2e3ap-30, 0x1.9a372d750c3ffp-3, 0x1.9bc0d4434b47ap-26, 0x1.9600ddd9655d3p-19, 0x1.3bad054b6cf3ap-40, 0x1.ff7ceep-2, 0x1.ff7cef012f652p-25, }},
};

// A hash of a verify harness's tensors (names, dims, roles, data) and references (values, bounds).
uint64_t mix(uint64_t h, uint64_t x) { return (h ^ x) * 0x100000001b3ull; }
uint64_t hash_harness(const verify_detail::Harness& h) {
    uint64_t x = 0xcbf29ce484222325ull;
    for (const auto& t : h.tensors) {
        for (char c : t.name) x = mix(x, uint64_t(c));
        for (size_t d : t.dims) x = mix(x, d);
        x = mix(x, uint64_t(t.role));
        for (float f : t.data) x = mix(x, std::bit_cast<uint32_t>(f));
    }
    for (const auto& [name, b] : h.expected) {
        for (char c : name) x = mix(x, uint64_t(c));
        for (double v : b.v) x = mix(x, std::bit_cast<uint64_t>(v));
        for (double e : b.e) x = mix(x, std::bit_cast<uint64_t>(e));
    }
    return x;
}

// Every optimizer variant (seed 1234 + variant), and fused_step and tc_step with every optimizer
// code and both losses (seed 99 + code).
struct HarnessCase {
    const char* entry;
    std::vector<unsigned> shape;
    uint64_t hash;
};
const HarnessCase kHarness[] = {
    {"optim_sgd", {37, 0}, 0x6de63ec4fecca5aaull},
    {"optim_sgd", {37, 1}, 0xabd9ba3f10b60a1full},
    {"optim_sgd", {37, 2}, 0xb8a247be62d1ed6eull},
    {"optim_sgd", {37, 3}, 0x5b3e9fe3e40dae3dull},
    {"optim_sgd", {37, 4}, 0xa1fe896e125b57a4ull},
    {"optim_adam", {37, 0}, 0xaae2173f320ed733ull},
    {"optim_adam", {37, 1}, 0x0f7a0f311e100a4bull},
    {"optim_adam", {37, 2}, 0x023c89d2e745aefaull},
    {"optim_adam", {37, 3}, 0xf91e0465c03fe1faull},
    {"optim_adam", {37, 4}, 0xd7ff6cacd2d0e55eull},
    {"optim_rmsprop", {37, 0}, 0xc8ad41b401b7e174ull},
    {"optim_rmsprop", {37, 1}, 0x10c026320af5ae98ull},
    {"fused_step", {5, 13, 9, 3, 0, 0, 0}, 0xa9c287f929561af5ull},
    {"fused_step", {5, 13, 9, 3, 0, 1, 0}, 0x2f6c390da75b294cull},
    {"fused_step", {5, 13, 9, 3, 0, 2, 0}, 0xbfedcee11f3ef191ull},
    {"fused_step", {5, 13, 9, 3, 0, 3, 0}, 0xaf64e19544fc7a0aull},
    {"fused_step", {5, 13, 9, 3, 0, 4, 0}, 0xa8c2e04cc8323e90ull},
    {"fused_step", {5, 13, 9, 3, 0, 5, 0}, 0xec554920e6f02eabull},
    {"fused_step", {5, 13, 9, 3, 0, 6, 0}, 0x9d69a561f8c1e893ull},
    {"fused_step", {5, 13, 9, 3, 1, 0, 0}, 0x1e407a267757e880ull},
    {"fused_step", {5, 13, 9, 3, 1, 1, 0}, 0x88e26ac138e96f01ull},
    {"fused_step", {5, 13, 9, 3, 1, 2, 0}, 0xac9885f3d8b97acaull},
    {"fused_step", {5, 13, 9, 3, 1, 3, 0}, 0x9f5eb1542ea32b6eull},
    {"fused_step", {5, 13, 9, 3, 1, 4, 0}, 0x6b211d803517a82bull},
    {"fused_step", {5, 13, 9, 3, 1, 5, 0}, 0xacab7b060fb4b6faull},
    {"fused_step", {5, 13, 9, 3, 1, 6, 0}, 0xfee9fcd359f61dd0ull},
    {"tc_step", {5, 13, 9, 3, 0, 0}, 0x91694f083978a1fbull},
    {"tc_step", {5, 13, 9, 3, 0, 1}, 0xbaf9785d52ec0586ull},
    {"tc_step", {5, 13, 9, 3, 0, 2}, 0xece36ff424431ac4ull},
    {"tc_step", {5, 13, 9, 3, 0, 3}, 0x0ed60ebdc5571ac3ull},
    {"tc_step", {5, 13, 9, 3, 0, 4}, 0x29c96f58fd5909acull},
    {"tc_step", {5, 13, 9, 3, 0, 5}, 0xea49d4e90278e419ull},
    {"tc_step", {5, 13, 9, 3, 0, 6}, 0xf73c64d42b02638aull},
    {"tc_step", {5, 13, 9, 3, 1, 0}, 0xaafd8a5fe3f08671ull},
    {"tc_step", {5, 13, 9, 3, 1, 1}, 0x28d954274a8a5de1ull},
    {"tc_step", {5, 13, 9, 3, 1, 2}, 0x428590c64b96bc0full},
    {"tc_step", {5, 13, 9, 3, 1, 3}, 0x1a51107a07a63037ull},
    {"tc_step", {5, 13, 9, 3, 1, 4}, 0x44db0bd157cfe100ull},
    {"tc_step", {5, 13, 9, 3, 1, 5}, 0x80c233dd7454973eull},
    {"tc_step", {5, 13, 9, 3, 1, 6}, 0x01d5c7b3f26b9de1ull},
};

std::vector<double> flat(const Bounded& b) {
    std::vector<double> out;
    for (size_t i = 0; i < b.size(); ++i) {
        out.push_back(b.v[i]);
        out.push_back(b.e[i]);
    }
    return out;
}

// The constants the rule and bound values were recorded with (7599e3f), for optimizer `code`.
OptimConfig recorded_config(unsigned code) {
    OptimConfig o;
    o.kind = kKinds[code];
    o.weight_decay = 0.03f;
    o.beta1 = 0.8f;
    o.momentum = 0.7f;
    o.alpha = 0.9f;
    o.eps = 1e-3f;
    return o;
}
}  // namespace

TEST_CASE("optimizers: one row a code, in code order, with today's names and state") {
    // A new optimizer adds a row after these; the rows here keep their codes.
    REQUIRE(optimizer_rows().size() == optim_code_count());
    const char* names[] = {"sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop", "nadam"};
    const bool m[] = {false, true, true, true, true, false, true}, v[] = {false, false, false, true, true, true, true};
    REQUIRE(optimizer_rows().size() >= std::size(names));
    for (unsigned c = 0; c < std::size(names); ++c) {
        const OptimizerRow& r = optimizer_rows()[c];
        CAPTURE(c);
        CHECK(r.kind() == kKinds[c]);
        CHECK(optim_code(r.kind()) == c);
        CHECK(&optimizer_row(r.kind()) == &r);
        CHECK(std::string(r.name) == names[c]);
        CHECK(to_string(r.kind()) == names[c]);
        CHECK(parse_optimizer(names[c]) == r.kind());
        CHECK(optim_uses_m(r.kind()) == m[c]);
        CHECK(optim_uses_v(r.kind()) == v[c]);
    }
    if (optim_code_count() == 7)
        CHECK_THROWS_WITH_AS(parse_optimizer("lbfgs"),
                             "unknown optimizer 'lbfgs' (choose sgd, momentum, nesterov, adam, adamw, rmsprop or nadam)",
                             InputError);
    CHECK_THROWS_WITH_AS(parse_optimizer("lbfgs"), doctest::Contains("(choose sgd, momentum, nesterov, adam, adamw,"),
                         InputError);
}

TEST_CASE("optimizers: the separate-launch kernel gets today's entry, state, momentum and flag") {
    // Before the table (kernels/optim.cpp's switch): optim_sgd with momentum 0 and no M for sgd,
    // nesterov 0 for sgd and momentum, 1 for nesterov; optim_adam's rule 0 Adam, 1 AdamW, 2 NAdam;
    // optim_rmsprop with V alone (its launch takes no flag).
    struct Want {
        OptimKind kind;
        const char* entry;
        bool m, v, momentum;
        unsigned flag;
    };
    const Want want[] = {{OptimKind::Sgd, "optim_sgd", false, false, false, 0},
                         {OptimKind::Momentum, "optim_sgd", true, false, true, 0},
                         {OptimKind::Nesterov, "optim_sgd", true, false, true, 1},
                         {OptimKind::Adam, "optim_adam", true, true, false, 0},
                         {OptimKind::AdamW, "optim_adam", true, true, false, 1},
                         {OptimKind::RmsProp, "optim_rmsprop", false, true, false, 0},
                         {OptimKind::NAdam, "optim_adam", true, true, false, 2}};
    for (const Want& w : want) {
        OptimConfig o;
        o.kind = w.kind;
        o.momentum = 0.75f;
        CAPTURE(to_string(w.kind));
        const OptimKernelArgs a = optimizer_kernel_args(o);
        CHECK(std::string(a.entry) == w.entry);
        CHECK(std::string(optimizer_entry(w.kind)) == w.entry);
        CHECK(a.m == w.m);
        CHECK(a.v == w.v);
        CHECK(a.momentum == (w.momentum ? 0.75f : 0.0f));
        CHECK(a.flag == w.flag);
    }
    const std::vector<std::string> entries = optimizer_entries();
    REQUIRE(entries.size() >= 3);  // a new entry would come after these
    CHECK(std::vector<std::string>(entries.begin(), entries.begin() + 3) ==
          std::vector<std::string>{"optim_sgd", "optim_adam", "optim_rmsprop"});
    CHECK(optimizer_of_entry("optim_adam", 2).kind() == OptimKind::NAdam);
    CHECK(optimizer_of_entry("optim_adam", 1).kind() == OptimKind::AdamW);
    CHECK_THROWS_AS(optimizer_of_entry("optim_adam", 3), Error);
}

TEST_CASE("optimizers: step_hyper's records are today's, bit for bit") {
    for (const HyperCase& h : kHyper) {
        const StepHyper s = step_hyper(hyper_config(h.config, kKinds[h.code]), h.lr, h.t);
        CAPTURE(h.config);
        CAPTURE(to_string(kKinds[h.code]));
        CAPTURE(h.lr);
        CAPTURE(h.t);
        CHECK(std::bit_cast<uint32_t>(s.lr) == h.lr_bits);
        CHECK(std::bit_cast<uint32_t>(s.step_size) == h.step_bits);
        CHECK(std::bit_cast<uint32_t>(s.bc2_sqrt) == h.bc2_bits);
        CHECK(std::bit_cast<uint32_t>(s.decay) == h.decay_bits);
    }
    // NAdam's record, asked out of order (the product's cache starts again), is the same.
    const OptimConfig nadam = hyper_config(1, OptimKind::NAdam);
    const StepHyper late = step_hyper(nadam, 0.1, 1000), early = step_hyper(nadam, 0.1, 7);
    const StepHyper early2 = step_hyper(nadam, 0.1, 7), late2 = step_hyper(nadam, 0.1, 1000);
    CHECK(std::memcmp(&early, &early2, sizeof early) == 0);
    CHECK(std::memcmp(&late, &late2, sizeof late) == 0);
}

TEST_CASE("optimizers: describe() is today's text") {
    for (const DescribeCase& d : kDescribe) {
        OptimConfig o;
        o.kind = kKinds[d.code];
        if (d.edited) {
            o.weight_decay = 0.05f;
            o.beta1 = 0.8f;
            o.eps = 1e-6f;
            o.alpha = 0.9f;
            o.momentum = 0.95f;
        }
        CHECK(o.describe() == d.text);
    }
}

TEST_CASE("optimizers: the float64 rule is today's, bit for bit") {
    for (const RuleCase& r : kRule) {
        const OptimConfig o = recorded_config(r.code);
        double p[3] = {0.5, -0.25, 1.5}, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
        const double g[3][3] = {{0.3, -0.7, 0.01}, {-0.2, 0.4, 2.0}, {0.9, 0.0, -1.1}};
        for (uint64_t t = 1; t <= 3; ++t) optim_step(o, 0.05, t, p, g[t - 1], m, v, 3);
        CAPTURE(to_string(o.kind));
        for (int i = 0; i < 3; ++i) {
            CHECK(p[i] == r.p[i]);
            CHECK(m[i] == r.m[i]);
            CHECK(v[i] == r.v[i]);
        }
    }
}

TEST_CASE("optimizers: the rounding bound is today's, bit for bit") {
    for (const BoundCase& b : kBound) {
        const OptimConfig o = recorded_config(b.code);
        const StepHyper h = step_hyper(o, 0.05, 3);
        const std::vector<float> P = {0.5f, -0.25f, 1.5f, 0.0f}, M = {0.1f, -0.2f, 0.0f, 0.3f},
                                 V = {0.01f, 0.2f, 0.0f, 0.5f};
        Bounded G;
        G.v = {0.3, -0.7, 0.01, 0.0};
        G.e = {1e-8, 0, 2e-9, 1e-7};
        const bool um = optim_uses_m(o.kind), uv = optim_uses_v(o.kind);
        const RefOptim r = ref_optim_bounded(o, h, P, G, um ? M : std::vector<float>{}, uv ? V : std::vector<float>{});
        CAPTURE(to_string(o.kind));
        CHECK(flat(r.P) == b.P);
        CHECK(flat(r.M) == b.M);
        CHECK(flat(r.V) == b.V);
    }
}

TEST_CASE("optimizers: verify's variants of the separate-launch kernels are today's") {
    const std::pair<const char*, std::vector<std::string>> lists[] = {
        {"optim_sgd", {"plain", "momentum", "nesterov", "nesterov+wd", "plain+wd"}},
        {"optim_adam", {"adam", "adam+wd", "adamw", "nadam", "nadam+wd"}},
        {"optim_rmsprop", {"plain", "+wd"}}};
    // A new optimizer's variants come after these (their numbers are verify's shapes).
    for (const auto& [entry, names] : lists) {
        CAPTURE(entry);
        const std::vector<std::string> all = optimizer_variant_names(entry);
        REQUIRE(all.size() >= names.size());
        CHECK(std::vector<std::string>(all.begin(), all.begin() + long(names.size())) == names);
        REQUIRE(optim_variants(entry) == all.size());
        for (unsigned i = 0; i < names.size(); ++i) CHECK(optim_variant_text(entry, i) == names[i]);
    }
    // Each variant's optimizer and weight decay (family_optim.cpp's harness before the table).
    const std::tuple<const char*, unsigned, OptimKind, bool> variants[] = {
        {"optim_sgd", 0, OptimKind::Sgd, false},     {"optim_sgd", 1, OptimKind::Momentum, false},
        {"optim_sgd", 2, OptimKind::Nesterov, false}, {"optim_sgd", 3, OptimKind::Nesterov, true},
        {"optim_sgd", 4, OptimKind::Sgd, true},      {"optim_adam", 0, OptimKind::Adam, false},
        {"optim_adam", 1, OptimKind::Adam, true},    {"optim_adam", 2, OptimKind::AdamW, true},
        {"optim_adam", 3, OptimKind::NAdam, false},  {"optim_adam", 4, OptimKind::NAdam, true},
        {"optim_rmsprop", 0, OptimKind::RmsProp, false}, {"optim_rmsprop", 1, OptimKind::RmsProp, true}};
    for (const auto& [entry, index, kind, wd] : variants) {
        const OptimVariantOf v = optimizer_variant(entry, index);
        CAPTURE(entry);
        CAPTURE(index);
        CHECK(v.row->kind() == kind);
        CHECK(v.weight_decay == wd);
    }
    CHECK_THROWS_AS(optimizer_variant("optim_rmsprop", 99), Error);
}

TEST_CASE("optimizers: verify's harnesses build today's inputs and references, bit for bit") {
    // The optimizer kernels' harness (every variant) and fused_step's and tc_step's (every code,
    // both losses: random_optim's weight decay), before and after they read the table.
    for (const HarnessCase& c : kHarness) {
        const bool step = c.entry == std::string("fused_step") || c.entry == std::string("tc_step");
        Rng rng(step ? 99 + c.shape[5] : 1234 + c.shape[1]);
        const VerifyCase vc{c.entry, c.shape};
        CAPTURE(c.entry);
        std::string shape;
        for (unsigned x : c.shape) shape += std::to_string(x) + " ";
        CAPTURE(shape);
        CHECK(hash_harness(kernel_row(c.entry).harness(vc, rng)) == c.hash);
    }
}

TEST_CASE("optimizers: train's --help lines come from the rows") {
    // Today's rows; a new row extends each list that its flags name.
    auto starts = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };
    CHECK(starts(optimizer_help(),
                 "sgd, momentum, nesterov (torch.optim.SGD), adam (torch.optim.Adam), adamw (torch.optim.AdamW), "
                 "rmsprop (torch.optim.RMSprop), nadam (torch.optim.NAdam, momentum decay 0.004)"));
    CHECK(starts(optimizers_with(kFlagMomentum), "momentum, nesterov"));
    CHECK(starts(optimizers_with(kFlagBetas), "adam, adamw, nadam"));
    CHECK(starts(optimizers_with(kFlagEps), "adam, adamw, rmsprop, nadam"));
    CHECK(starts(optimizers_with(kFlagAlpha), "rmsprop"));
    CHECK(starts(optimizers_with(0, true), "adamw"));
    if (optim_code_count() == 7) {
        CHECK(optimizers_with(kFlagEps) == "adam, adamw, rmsprop, nadam");
        CHECK(optimizers_with(0, true) == "adamw");
    }
    // Every row's name is in --optimizer's line.
    for (const OptimizerRow& r : optimizer_rows()) CHECK(optimizer_help().find(r.name) != std::string::npos);
}

TEST_CASE("optimizers: a constant the optimizer does not read is named, with the ones that read it") {
    // Every flag against every optimizer: empty exactly where the row reads the flag.
    const struct {
        const char* flag;
        unsigned bit;
    } flags[] = {{"--momentum", kFlagMomentum}, {"--beta1", kFlagBetas}, {"--beta2", kFlagBetas},
                 {"--eps", kFlagEps},           {"--alpha", kFlagAlpha}};
    for (const OptimizerRow& r : optimizer_rows())
        for (const auto& f : flags) {
            CAPTURE(r.name);
            CAPTURE(f.flag);
            const std::string why = optimizer_flag_unused(r.kind(), f.flag);
            CHECK(why.empty() == ((r.flags & f.bit) != 0));
        }
    CHECK(optimizer_flag_unused(OptimKind::Sgd, "--beta1") ==
          "--beta1 does not apply to --optimizer sgd: it sets adam, adamw, nadam");
    CHECK(optimizer_flag_unused(OptimKind::Adam, "--momentum") ==
          "--momentum does not apply to --optimizer adam: it sets momentum, nesterov");
    CHECK(optimizer_flag_unused(OptimKind::Nesterov, "--alpha") ==
          "--alpha does not apply to --optimizer nesterov: it sets rmsprop");
    CHECK(optimizer_flag_unused(OptimKind::RmsProp, "--eps").empty());
    CHECK(optimizer_flag_unused(OptimKind::Sgd, "--weight-decay").empty());  // every optimizer reads it
}
