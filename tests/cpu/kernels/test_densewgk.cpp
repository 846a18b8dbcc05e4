// dense_wg_k's host side (host/kernels/densewgk.hpp): the plan's rule for R, the arguments it
// refuses (the device, K % 4, TMA's alignment), the bound (with a CPU model of the kernel's sums
// that must stay within it, and the TF32 truncation that needs its 2^-9), verify's shape checks and
// reference, the registry's twin path, and where the tc set's trainer takes it.
#include "../../helpers.hpp"
#include "cnn_ops.hpp"
#include "densewgk.hpp"
#include "error.hpp"
#include "kernels.hpp"
#include "registry.hpp"
#include "rng.hpp"
#include "train_cnn.hpp"
#include "model.hpp"
#include "verify_harness.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace ptxlab;

TEST_CASE("densewgk: R is the largest of 8, 4, 2, 1 within the k tiles and one wave of blocks") {
    DenseWgkPlan p = densewgk_plan(64, 1024, 1024, 132);  // the header's 64 x 1024 x 1024: 8 clusters of 8
    CHECK(p.tiles_m == 1);
    CHECK(p.tiles_n == 8);
    CHECK(p.k_tiles == 32);
    CHECK(p.ranks == 8);
    CHECK(p.per_rank == 4);
    CHECK(p.grid_x == 64);
    CHECK(p.grid_y == 1);
    p = densewgk_plan(64, 1024, 784, 132);  // fc1 of 784-1024-1024-10: 25 k tiles, 4 a rank
    CHECK(p.ranks == 8);
    CHECK(p.per_rank == 4);
    CHECK(densewgk_plan(64, 256, 784, 132).ranks == 8);
    CHECK(densewgk_plan(500, 1024, 1024, 132).ranks == 2);   // 64 tiles: 128 blocks
    CHECK(densewgk_plan(1000, 1024, 1024, 132).ranks == 1);  // 128 tiles: a wave at R = 1
    CHECK(densewgk_plan(4096, 1024, 1024, 132).ranks == 1);  // more than a wave: still 1
    CHECK(densewgk_plan(64, 1024, 4, 132).ranks == 1);       // one k tile
    CHECK(densewgk_plan(64, 1024, 36, 132).ranks == 2);      // two k tiles
    CHECK(densewgk_plan(64, 1024, 100, 132).ranks == 4);     // four k tiles
    CHECK(densewgk_plan(64, 1024, 1024, 32).ranks == 4);     // a smaller GPU: 8 x 4 blocks
    p = densewgk_plan(129, 129, 36, 132, 8);                 // forced: ranks past the k tiles
    CHECK(p.ranks == 8);
    CHECK(p.per_rank == 1);
    CHECK(p.grid_x == 16);
    CHECK(p.grid_y == 3);
}

TEST_CASE("densewgk: the arguments it refuses say why, and 9.0 with aligned K-major rows fits") {
    DenseWgkArgs a = densewgk_forward_args(64, 784, 1024, 0x10000, 0x20000, 0x30000, 0x40000, true);
    CHECK(a.M == 64);
    CHECK(a.N == 1024);
    CHECK(a.K == 784);
    CHECK(a.flags() == 3);
    CHECK(densewgk_unfit(a, 9, 0).empty());
    CHECK(densewgk_unfit(a, 9, 0) == "");
    CHECK(densewgk_unfit(a, 10, 0).find("compute capability 9.0 only, not 10.0") != std::string::npos);
    CHECK(densewgk_unfit(a, 8, 9).find("sm_90a") != std::string::npos);
    CHECK(densewgk_unfit(a, 12, 0) != "");
    DenseWgkArgs b = a;
    b.K = 786;  // rows of 3144 bytes: not a multiple of 16
    CHECK(densewgk_unfit(b, 9, 0).find("multiple of 4") != std::string::npos);
    b.K = 0;
    CHECK(densewgk_unfit(b, 9, 0).find("K >= 4") != std::string::npos);
    b = a;
    b.A += 8;  // 8-byte aligned X (a parameter view after an odd-sized tensor)
    CHECK(densewgk_unfit(b, 9, 0).find("16-byte aligned") != std::string::npos);
    b = a;
    b.B += 4;
    CHECK(densewgk_unfit(b, 9, 0).find("16-byte aligned") != std::string::npos);
    b = a;
    b.C += 4, b.bias += 4;  // C and the bias: any float alignment (scalar stores, scalar loads)
    CHECK(densewgk_unfit(b, 9, 0).empty());
    b = a;
    b.M = 0;
    CHECK(densewgk_unfit(b, 9, 0).find("M in 1") != std::string::npos);
    b.M = kDenseWgkMaxM + 1;
    CHECK(densewgk_unfit(b, 9, 0) != "");
    b = a;
    b.B = 0;
    CHECK(densewgk_unfit(b, 9, 0) == "dense_wg_k needs C, A and B");
    b = a;
    b.bias = 0, b.relu = false;
    CHECK(b.flags() == 0);
    CHECK(densewgk_unfit(b, 9, 0).empty());
}

TEST_CASE("densewgk: the bound is TF32 truncation's 2^-9, the chains' gamma and the join's") {
    const double u = std::ldexp(1.0, -24), prod = std::ldexp(1.0, -9) + std::ldexp(1.0, -20);
    auto gamma = [&](double n) { return n * u / (1 - n * u); };
    // K = 1024: 32 k tiles, 128 k8 steps, 32 u a step; no join at R = 1.
    const double e1 = prod + gamma(32.0 * 128) * (1 + prod);
    CHECK(densewgk_sum_bound(1024, 1) == doctest::Approx(e1).epsilon(1e-12));
    CHECK(densewgk_sum_bound(1024, 8) == doctest::Approx(e1 + gamma(7) * (1 + e1)).epsilon(1e-12));
    CHECK(densewgk_sum_bound(1000, 1) == densewgk_sum_bound(1024, 1));  // the padding's k8 steps count
    CHECK(densewgk_sum_bound(4, 1) < densewgk_sum_bound(36, 1));
    CHECK(densewgk_sum_bound(4, 1) > prod);
    // The output: sum's error, then add.rn of the bias.
    CHECK(densewgk_bound(1024, 8, 10.0, -3.0) ==
          doctest::Approx(densewgk_sum_bound(1024, 8) * 10 + u * (3 + densewgk_sum_bound(1024, 8) * 10)).epsilon(1e-12));
    CHECK(densewgk_bound(64, 1, 0.0, 0.0) == 0.0);  // an all-zero row: exactly +0
    CHECK(std::isinf(densewgk_sum_bound(1u << 24, 1)));  // past gamma's reach: no bound
}

namespace {

float tf32(float x) { return std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffffe000u); }

// A CPU model of the kernel's order (the header): each rank's chain of k8 steps, each step 8 TF32
// products summed in FP32 and added to the accumulator; the ranks joined in order by FP32 adds,
// then the bias. Not the tensor core's rounding (PTX does not say it), but one order the bound's
// argument covers.
float model_output(const float* a, const float* b, unsigned K, unsigned R, float bias) {
    const unsigned nk = (K + 31) / 32, per = (nk + R - 1) / R;
    float s = 0.0f;
    for (unsigned r = 0; r < R; ++r) {
        float c = 0.0f;
        for (unsigned k0 = std::min(r * per, nk) * 32; k0 < std::min(r * per + per, nk) * 32; k0 += 8) {
            float step = 0.0f;
            for (unsigned k = k0; k < k0 + 8 && k < K; ++k) step += tf32(a[k]) * tf32(b[k]);
            c += step;
        }
        s = r == 0 ? c : s + c;
    }
    return s + bias;
}

}  // namespace

TEST_CASE("densewgk: a CPU model of the kernel's sums stays within the bound, which needs 2^-9 for truncation") {
    Rng rng(11);
    for (unsigned K : {4u, 36u, 784u, 1024u})
        for (unsigned R : {1u, 2u, 4u, 8u}) {
            CAPTURE(K);
            CAPTURE(R);
            for (unsigned t = 0; t < 20; ++t) {
                std::vector<float> a(K), b(K);
                for (auto& x : a) x = rng.uniform(-1.0f, 1.0f);
                for (auto& x : b) x = rng.uniform(-0.05f, 0.05f);
                const float bias = rng.uniform(-0.05f, 0.05f);
                double z = bias, S = 0;
                for (unsigned k = 0; k < K; ++k) z += double(a[k]) * b[k], S += std::fabs(double(a[k]) * b[k]);
                CHECK(std::fabs(model_output(a.data(), b.data(), K, R, bias) - z) <= densewgk_bound(K, R, S, z));
            }
        }
    // Inputs whose low 13 bits are all ones: truncation loses almost 2^-10 of each, so a product
    // almost 2^-9 of itself; tc.hpp's cvt.rna bound (2^-10) would not hold, densewgk's does.
    const float x = std::bit_cast<float>(0x3f801fffu);  // 1 + 2^-10 - 2^-23
    const std::vector<float> a(4, x), b(4, x);
    const double z = 4.0 * double(x) * x, S = z;
    const double err = std::fabs(double(model_output(a.data(), b.data(), 4, 1, 0.0f)) - z);
    CHECK(err > std::ldexp(1.0, -10) * S * 1.5);
    CHECK(err <= densewgk_bound(4, 1, S, z));
}

TEST_CASE("densewgk: verify's shapes, its float64 reference and its registry entry") {
    CHECK(shape_names("dense_wg_k") == "M,N,K,R,flags");
    CHECK_NOTHROW(validate_case({"dense_wg_k", {64, 1024, 784, 0, 3}}));
    CHECK_THROWS_WITH_AS(validate_case({"dense_wg_k", {64, 1024, 786, 0, 3}}), doctest::Contains("multiple of 4"),
                         InputError);
    CHECK_THROWS_WITH_AS(validate_case({"dense_wg_k", {64, 1024, 784, 3, 3}}), doctest::Contains("1, 2, 4 or 8"),
                         InputError);
    CHECK_NOTHROW(validate_case({"dense_wg_k", {64, 1024, 784, 0, 7}}));
    CHECK_THROWS_WITH_AS(validate_case({"dense_wg_k", {64, 1024, 784, 0, 8}}), doctest::Contains("flags"), InputError);
    CHECK_THROWS_AS(validate_case({"dense_wg_k", {0, 1024, 784, 0, 3}}), InputError);
    const KernelSpec& spec = kernel_spec("dense_wg_k");
    CHECK(spec.file == "hopper/densewgk");
    CHECK(spec.signature() == "(.u64, .u64, .u64, .u64, .u64, .b8[128], .b8[128], .u32, .u32, .u32, .u32, .u32)");
    CHECK(kernel_arch_unfit(spec, 9, 0).empty());
    CHECK(kernel_arch_unfit(spec, 10, 0).find("compute capability 9.0") != std::string::npos);
    CHECK(kernel_arch_unfit(kernel_spec("dense_tc"), 10, 0).empty());
    // Every edge the brief names is among the default cases.
    std::map<unsigned, int> Ms, Ns, Ks, Rs, Fs;
    for (const VerifyCase& c : default_cases())
        if (c.entry == "dense_wg_k") {
            CHECK_NOTHROW(validate_case(c));
            ++Ms[c.shape[0]], ++Ns[c.shape[1]], ++Ks[c.shape[2]], ++Rs[c.shape[3]], ++Fs[c.shape[4]];
        }
    for (unsigned m : {1u, 63u, 64u, 65u, 129u}) CHECK(Ms.count(m));
    for (unsigned n : {1u, 10u, 127u, 128u, 129u, 1024u}) CHECK(Ns.count(n));
    for (unsigned k : {4u, 36u, 784u, 1024u}) CHECK(Ks.count(k));
    for (unsigned r : {1u, 2u, 4u, 8u}) CHECK(Rs.count(r));
    for (unsigned f : {0u, 1u, 2u, 3u, 4u, 7u}) CHECK(Fs.count(f));
    // The reference: mask?(relu?(A B^T + bias)) by the flags.
    for (unsigned flags = 0; flags < 8; ++flags) {
        CAPTURE(flags);
        const unsigned M = 3, N = 5, K = 8;
        Rng rng(3 + flags);
        const verify_detail::Harness h = kernel_row("dense_wg_k").harness({"dense_wg_k", {M, N, K, 2, flags}}, rng);
        std::map<std::string, const std::vector<float>*> in;
        for (const auto& t : h.tensors) in[t.name] = &t.data;
        const auto &A = *in.at("A"), &B = *in.at("B"), &bias = *in.at("bias"), &Y = *in.at("Y");
        for (unsigned m = 0; m < M; ++m)
            for (unsigned n = 0; n < N; ++n) {
                double z = (flags & 2) ? bias[n] : 0.0;
                for (unsigned k = 0; k < K; ++k) z += double(A[m * K + k]) * B[n * K + k];
                if (flags & 1) z = std::max(z, 0.0);
                const bool cleared = (flags & 4) && !(Y[m * N + n] > 0.0f);
                if (cleared) z = 0.0;
                CHECK(h.expected.at("C").v[m * N + n] == doctest::Approx(z).epsilon(1e-12));
                CHECK((h.expected.at("C").e[m * N + n] > 0.0) == !cleared);
            }
    }
}

TEST_CASE("densewgk: the twin of a kernel in a subdirectory is found in the tree's layout") {
    const KernelDirs d = KernelDirs::from_environment();
    const std::string twin = kernel_twin_path(d, "hopper/densewgk");
    CHECK(std::filesystem::is_regular_file(twin));
    CHECK(twin.ends_with("hopper/reference/densewgk.cu"));
    CHECK(std::filesystem::is_regular_file(kernel_ptx_path(d, "hopper/densewgk")));
    CHECK(kernel_twin_path(d, "dense") == (std::filesystem::path(d.reference_dir) / "dense.cu").string());
    KernelDirs slash = d;
    slash.reference_dir += "/";  // $PTXLAB_REFERENCE_DIR=ptx/reference/
    CHECK(std::filesystem::equivalent(kernel_twin_path(slash, "hopper/densewgk"), twin));
}

TEST_CASE("densewgk: the tc set's hidden ReLU fc forward passes take it where it is loaded and fits, at any batch") {
    FusedArgs a{};
    a.B = 64, a.I = 784, a.H = 1024, a.O = 1024;
    a.X = 0x100000, a.W1 = 0x200000, a.b1 = 0x300000, a.A1 = 0x400000;
    a.act = kActRelu;
    CHECK(std::string(cnn_detail::fc_forward_kernel(a, true, true)) == "dense_wg_k");
    CHECK(std::string(cnn_detail::fc_forward_kernel(a, true, false)) != "dense_wg_k");  // not loaded
    CHECK(std::string(cnn_detail::fc_forward_kernel(a, false, true)) != "dense_wg_k");  // FP32 sets
    FusedArgs odd = a;
    odd.W1 += 8;  // W not 16-byte aligned: the fallback
    CHECK(std::string(cnn_detail::fc_forward_kernel(odd, true, true)) != "dense_wg_k");
    odd = a;
    odd.I = 30;  // K % 4 != 0
    CHECK(std::string(cnn_detail::fc_forward_kernel(odd, true, true)) != "dense_wg_k");
    FusedArgs big = a;
    big.B = 4096;  // dense_tc's size: dense_wg_k where it is loaded (55.6 against 85.4 us on an H100), else dense_tc
    CHECK(std::string(cnn_detail::fc_forward_kernel(big, true, true)) == "dense_wg_k");
    CHECK(std::string(cnn_detail::fc_forward_kernel(big, true, false)) == "dense_tc");
    big.I = 30;  // past dense_wg_k's K % 4: dense_tc's again
    CHECK(std::string(cnn_detail::fc_forward_kernel(big, true, true)) == "dense_tc");
    // The listing `train` prints on a 9.0 device: fc1 and fc2 forward on dense_wg_k.
    const Model m = parse_model("fc1024,fc1024,fc10");
    // The weight gradients at batch 64 on tc_grad_weights_wide (cnn_ops.hpp: B <= 128).
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, true) ==
          "transpose32, dense_wg_k x3, fused_output, tc_grad_weights_wide x3");
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, false) ==
          "dense_mm x3, fused_output, tc_grad_weights_wide x3");
    CHECK(cnn_step_kernels(m, ConvKernels::Fp32, 64, Activation::Relu, false, true) == "dense_mm x6, fused_output");
    const std::string table = cnn_layer_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, true);
    CHECK(table.find("fc1     dense_wg_k") != std::string::npos);
    CHECK(table.find("fc2     dense_wg_k") != std::string::npos);
    CHECK(table.find("transpose32, dense_wg_k") != std::string::npos);  // fc2's deltas from W^T
}

TEST_CASE("densewgk: an fc layer's deltas take it from W^T where dY is already dL/dZ") {
    FcDeltas d;
    d.B = 64, d.I = 1024, d.O = 1024, d.act = 1;
    d.dX = 0x100000, d.dY = 0x200000, d.Y = 0x300000, d.W = 0x400000, d.Wt = 0x500000, d.Yb = 0x600000;
    d.dy_masked = true;
    CHECK(std::string(cnn_detail::fc_deltas_kernel(d, true, true)) == "dense_wg_k");
    CHECK(std::string(cnn_detail::fc_deltas_kernel(d, true, false)) != "dense_wg_k");  // not loaded
    CHECK(std::string(cnn_detail::fc_deltas_kernel(d, false, true)) != "dense_wg_k");  // FP32 sets
    FcDeltas e = d;
    e.dy_masked = false;  // ReLU's mask not yet applied: dense_wg_k would not apply it
    CHECK(std::string(cnn_detail::fc_deltas_kernel(e, true, true)) != "dense_wg_k");
    e.act = 0;  // no activation (or dL/dZ from act_bwd): nothing to mask
    CHECK(std::string(cnn_detail::fc_deltas_kernel(e, true, true)) == "dense_wg_k");
    e = d;
    e.Wt = 0;  // no W^T kept
    CHECK(std::string(cnn_detail::fc_deltas_kernel(e, true, true)) != "dense_wg_k");
    e = d;
    e.O = 10;  // K = O % 4 != 0: TMA's rows
    CHECK(std::string(cnn_detail::fc_deltas_kernel(e, true, true)) != "dense_wg_k");
    e = d;
    e.B = 4096;  // dense_tc's size: dense_wg_k where it is loaded (92.2 against 124.8 us on an H100)
    CHECK(std::string(cnn_detail::fc_deltas_kernel(e, true, true)) == "dense_wg_k");
    CHECK(std::string(cnn_detail::fc_deltas_kernel(e, true, false)) == "dense_tc");
    // The args: C = dX, A = dY, B = W^T, the mask Yb; M = B, N = I, K = O.
    const DenseWgkArgs a = densewgk_deltas_args(64, 784, 256, 1, 2, 3, 4);
    CHECK((a.C == 1 && a.A == 2 && a.B == 3 && a.mask == 4 && a.bias == 0));
    CHECK((a.M == 64 && a.N == 784 && a.K == 256));
    CHECK(a.flags() == kDenseWgkFlagMask);
    const Model m = parse_model("fc256,fc128,fc10");
    CHECK(cnn_detail::keeps_transposed_weights(m, 1, true, true));
    CHECK_FALSE(cnn_detail::keeps_transposed_weights(m, 0, true, true));  // no deltas below fc1
    CHECK_FALSE(cnn_detail::keeps_transposed_weights(m, 1, true, false));
    CHECK_FALSE(cnn_detail::keeps_transposed_weights(m, 2, true, true));  // fc10: O % 4
    const Model cnn = parse_model("cnn");  // fc1 over pool2: fc_bwd_data (faster there)
    CHECK_FALSE(cnn_detail::keeps_transposed_weights(cnn, 4, true, true));
    CHECK(cnn_step_kernels(cnn, ConvKernels::Tc, 64, Activation::Relu, false, true).find("transpose32") == std::string::npos);
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, true) ==
          "transpose32, dense_wg_k x3, fused_output, fused_grad, tc_grad_weights");
    // At batch 4096 on a 9.0 device the 1024-wide products that took dense_tc (test_train_cnn.cpp)
    // run on dense_wg_k too; the weight gradients stay dense_mm's.
    CHECK(cnn_step_kernels(parse_model("fc1024,fc1024,fc10"), ConvKernels::Tc, 4096, Activation::Relu, false, true) ==
          "transpose32, dense_wg_k x3, fused_output, dense_mm x3");
    // K = 1022 and O = 1022 are past dense_wg_k's tensor maps: fc2's forward pass and deltas on dense_tc.
    CHECK(cnn_step_kernels(parse_model("fc1022,fc1022,fc10"), ConvKernels::Tc, 4096, Activation::Relu, false, true) ==
          "dense_wg_k, dense_tc x2, fused_output, dense_mm x3");
}

TEST_CASE("densewgk: train's listing names it where the set loads it: a 9.0 device and hopper/densewgk.ptx in the kernels") {
    DeviceInfo h100;
    h100.cc_major = 9, h100.cc_minor = 0;
    DeviceInfo b200 = h100;
    b200.cc_major = 10;
    CHECK(cnn_wgk_loaded(h100));  // the tree's ptx/ has ptx/hopper
    CHECK(cnn_wgk_loaded(h100, KernelSource::Reference));
    CHECK_FALSE(cnn_wgk_loaded(b200));  // sm_90a code
    // A --ptx-dir of copies of ptx/*.ptx alone: the set leaves dense_wg_k out (the step keeps its
    // other kernels), so the listing must not name it; with hopper/densewgk.ptx beside them it does.
    ptxlab::test::TempDir t;
    const std::filesystem::path src = std::filesystem::path(PTXLAB_SOURCE_DIR) / "ptx";
    for (const auto& e : std::filesystem::directory_iterator(src))
        if (e.path().extension() == ".ptx") std::filesystem::copy_file(e.path(), t.path / e.path().filename());
    const KernelDirs flat = KernelDirs::from_ptx_dir(t.path.string());
    CHECK_FALSE(cnn_wgk_loaded(h100, KernelSource::Ptx, flat));
    const Model m = parse_model("fc1024,fc1024,fc10");
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, cnn_wgk_loaded(h100, KernelSource::Ptx, flat)) ==
          "dense_mm x3, fused_output, tc_grad_weights_wide x3");
    std::filesystem::create_directory(t.path / "hopper");
    std::filesystem::copy_file(src / "hopper/densewgk.ptx", t.path / "hopper/densewgk.ptx");
    CHECK(cnn_wgk_loaded(h100, KernelSource::Ptx, flat));
    // hopper/densewgk.ptx without hopper/transpose.ptx: the trainer keeps no W^T, so the forward
    // passes run on dense_wg_k and fc2's deltas do not (no transpose32 in the listing either).
    CHECK_FALSE(cnn_transposes_loaded(h100, KernelSource::Ptx, flat));
    const bool wgk = cnn_wgk_loaded(h100, KernelSource::Ptx, flat), wt = cnn_transposes_loaded(h100, KernelSource::Ptx, flat);
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, wgk, wt) ==
          "dense_wg_k x2, fused_output, tc_grad_weights_wide x3, dense_mm");
    CHECK(cnn_layer_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, wgk, wt).find("transpose32") ==
          std::string::npos);
    std::filesystem::copy_file(src / "hopper/transpose.ptx", t.path / "hopper/transpose.ptx");
    CHECK(cnn_transposes_loaded(h100, KernelSource::Ptx, flat));
    CHECK(cnn_step_kernels(m, ConvKernels::Tc, 64, Activation::Relu, false, true,
                           cnn_transposes_loaded(h100, KernelSource::Ptx, flat)) ==
          "transpose32, dense_wg_k x3, fused_output, tc_grad_weights_wide x3");
}
