// The tensor-core kernels (ptx/tc.ptx, and their BF16 versions in ptx/tcbf16.ptx: one module,
// as they share their harnesses and shapes): fresh random inputs, the float64 reference with
// its TF32 (BF16) bound and the launch (tc.hpp). Shapes: tc_forward[_bf16] takes B,I,H,act,
// tc_grad_input[_bf16], tc_grad_weights[_bf16] and tc_grad_weights_wide (TF32 only, B <= 128:
// tc_grad_weights' inputs and reference) B,I,O,act (act 0 none, 1 ReLU).
#include "registry.hpp"
#include "tc.hpp"

#include <algorithm>
#include <cmath>

namespace ptxlab::verify_detail {

namespace {

// tc_forward (B,I,H,act): X in [-1, 1], W and b within nn.Linear's init bound 1/sqrt(I).
Harness make_tc_forward(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], I = c.shape[1], H = c.shape[2], act = c.shape[3];
    const float w = 1.0f / std::sqrt(float(I));
    Harness h;
    std::vector<float> X = random_vector(rng, size_t(B) * I, -1.0f, 1.0f);
    std::vector<float> W = random_vector(rng, size_t(H) * I, -w, w);
    std::vector<float> b = random_vector(rng, H, -w, w);
    h.expected["A"] = ref_tc_forward(X, W, b, B, I, H, act, tc_precision_of(c.entry));
    h.tensors = {{"X", {B, I}, Role::In, X}, {"W", {H, I}, Role::In, W}, {"b", {H}, Role::In, b},
                 {"A", {B, H}, Role::Out, {}}};
    h.launch = [B, I, H, act](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_tc_forward(k, B, I, H, m.at("X"), m.at("W"), m.at("b"), m.at("A"), act, s);
    };
    return h;
}

// tc_grad_input (B,I,O,act): dY in [-1, 1], Y a ReLU layer's output, W within 1/sqrt(I).
Harness make_tc_grad_input(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], I = c.shape[1], O = c.shape[2], act = c.shape[3];
    const float w = 1.0f / std::sqrt(float(I));
    Harness h;
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    std::vector<float> W = random_vector(rng, size_t(O) * I, -w, w);
    h.expected["dX"] = ref_tc_grad_input(dY, Y, W, B, I, O, act, tc_precision_of(c.entry));
    h.tensors = {{"dX", {B, I}, Role::Out, {}}, {"dY", {B, O}, Role::In, dY}, {"Y", {B, O}, Role::In, Y},
                 {"W", {O, I}, Role::In, W}};
    h.launch = [B, I, O, act](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch_tc_grad_input(k, B, I, O, m.at("dX"), m.at("dY"), m.at("Y"), m.at("W"), act, s);
    };
    return h;
}

// tc_grad_weights' launch and tc_grad_weights_wide's: the same arguments.
using GradWeightsLaunch = void (*)(const Kernel&, unsigned, unsigned, unsigned, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                                   CUdeviceptr, CUdeviceptr, unsigned, float, CUstream);

// tc_grad_weights (B,I,O,act): X a ReLU layer's output, dY in [-1, 1], Y as above, scale about
// 1/B (the batch mean), drawn afresh so that its rounding is exercised; `launch` runs it
// (tc_grad_weights_wide computes the same sums, so the same reference holds it).
Harness grad_weights_harness(const VerifyCase& c, Rng& rng, GradWeightsLaunch launch) {
    const unsigned B = c.shape[0], I = c.shape[1], O = c.shape[2], act = c.shape[3];
    const float scale = rng.uniform(0.5f, 2.0f) / float(B);
    Harness h;
    std::vector<float> X = relu_outputs(rng, size_t(B) * I);
    std::vector<float> dY = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    std::vector<float> Y = relu_outputs(rng, size_t(B) * O);
    ref_tc_grad_weights(dY, Y, X, B, I, O, act, scale, h.expected["dW"], h.expected["db"], tc_precision_of(c.entry));
    h.tensors = {{"dW", {O, I}, Role::Out, {}}, {"db", {O}, Role::Out, {}}, {"dY", {B, O}, Role::In, dY},
                 {"Y", {B, O}, Role::In, Y},     {"X", {B, I}, Role::In, X}};
    h.launch = [B, I, O, act, scale, launch](const Kernel& k, const DevicePtrs& m, CUstream s) {
        launch(k, B, I, O, m.at("dW"), m.at("db"), m.at("dY"), m.at("Y"), m.at("X"), act, scale, s);
    };
    return h;
}
Harness make_tc_grad_weights(const VerifyCase& c, Rng& rng) {
    return grad_weights_harness(c, rng, launch_tc_grad_weights);
}
Harness make_tc_grad_weights_wide(const VerifyCase& c, Rng& rng) {
    return grad_weights_harness(c, rng, launch_tc_grad_weights_wide);
}

void validate_tc(const VerifyCase& c) {
    const std::string names = shape_names(c.entry);
    if (c.shape.size() != 4)
        PTXLAB_THROW(InputError, "kernel '{}' takes a shape {} (4 numbers), got {}", c.entry, names, c.shape.size());
    for (size_t k = 0; k < 3; ++k)
        if (c.shape[k] == 0) PTXLAB_THROW(InputError, "kernel '{}': shape sizes must be >= 1", c.entry);
    if (c.shape[3] > 1)
        PTXLAB_THROW(InputError, "kernel '{}': act must be 0 (none) or 1 (ReLU), got {}", c.entry, c.shape[3]);
}

void validate_tc_forward(const VerifyCase& c) {
    validate_tc(c);
    const std::string why = tc_unfit(c.shape[0], c.shape[1], c.shape[2]);
    if (!why.empty()) PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

void validate_tc_grad(const VerifyCase& c) {
    validate_tc(c);
    const std::string why = tc_grad_unfit(c.entry, c.shape[0], c.shape[1], c.shape[2]);
    if (!why.empty()) PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

void validate_tc_grad_wide(const VerifyCase& c) {
    validate_tc(c);
    const std::string why = tc_grad_wide_unfit(c.shape[0], c.shape[1], c.shape[2]);
    if (!why.empty()) PTXLAB_THROW(InputError, "kernel '{}': {}", c.entry, why);
}

// The MNIST net's first layer (784 -> 128) at batch 64, both act codes, and at batch 1000;
// 1x1x1; sizes that leave a tile of 16 samples, 8 units and a k tile of 8 columns part-empty
// (17, 9, 5; 65, 257, 130; 3, 33); I = 800, a hundred full k tiles.
std::vector<VerifyCase> tc_default_cases() {
    std::vector<VerifyCase> v;
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 128, 1}, {64, 784, 128, 0}, {1, 1, 1, 0}, {17, 9, 5, 1}, {1000, 784, 128, 1},
             {3, 800, 33, 0}, {65, 257, 130, 1}})
        v.push_back({"tc_forward", s});
    // tc_grad_input: the MNIST net's two layers back to their inputs (G 64 x 128 to 784 columns,
    // G 64 x 10 to 128), both act codes; 1x1x1; 17, 9, 5 and 65, 257, 130 leave a tile of 16
    // samples, 8 columns and a k tile of 8 outputs part-empty; O = 1024, 128 k tiles.
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 128, 1}, {64, 784, 128, 0}, {64, 128, 10, 1}, {1, 1, 1, 0}, {17, 9, 5, 1},
             {65, 257, 130, 0}, {7, 300, 1024, 1}})
        v.push_back({"tc_grad_input", s});
    // tc_grad_weights: the same two layers' dW and db at batch 64 and 1000 (125 k tiles of
    // samples, db a chain of 1000 adds), both act codes; 1x1x1; 17, 9, 5 and 1003, 33, 17 leave
    // a tile of 16 outputs, 8 inputs and a k tile of 8 samples part-empty.
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 128, 1}, {64, 784, 128, 0}, {64, 128, 10, 1}, {1000, 784, 128, 1}, {1, 1, 1, 0},
             {17, 9, 5, 1}, {1003, 33, 17, 0}, {65, 257, 130, 1}})
        v.push_back({"tc_grad_weights", s});
    // The BF16 versions on the same shapes: k tiles of 16 (17, 9, 5 and 3, 33 leave one
    // part-empty; 1003 samples end in a tile of 11).
    const size_t n = v.size();
    for (size_t i = 0; i < n; ++i) v.push_back({v[i].entry + "_bf16", v[i].shape});
    // tc_grad_weights_wide (TF32 only, B <= 128): the trainer's 1024-wide layers at batch 64
    // (784 -> 1024 with the mask, 1024 -> 1024, 1024 -> 10); 1x1x1; 17, 9, 5 and 100, 257, 63
    // leave a tile of 16 outputs, 8 inputs, a k tile of 8 samples and a 64 x 64 block part-empty;
    // 128, 65, 130 the most samples it stages; 7, 64, 64 one full block, one part-empty k tile.
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 1024, 1}, {64, 1024, 1024, 0}, {64, 1024, 10, 0}, {1, 1, 1, 0}, {17, 9, 5, 1},
             {128, 65, 130, 1}, {100, 257, 63, 0}, {7, 64, 64, 1}})
        v.push_back({"tc_grad_weights_wide", s});
    return v;
}

std::vector<VerifyCase> tc_quick_cases() {
    return {{"tc_forward", {17, 9, 5, 1}},      {"tc_grad_input", {17, 9, 5, 1}},      {"tc_grad_weights", {17, 9, 5, 1}},
            {"tc_forward_bf16", {17, 9, 5, 1}}, {"tc_grad_input_bf16", {17, 9, 5, 1}}, {"tc_grad_weights_bf16", {17, 9, 5, 1}},
            {"tc_grad_weights_wide", {17, 9, 5, 1}}};
}

// bench: the hidden layer's three products (B,I,H,act or B,I,O,act) as training runs them: A1
// with ReLU's epilogue; dX from D1 (the input's gradient, which a deeper network would need) and
// GW1 from D1, which fused_output has masked already (act 0, as fused_grad reads it). Each reads
// its two matrices once and writes one; the _bf16 versions do the same work.
BenchShape forward_bench_shape(unsigned B) {
    return std::vector<unsigned>{B, kBenchI, kBenchH, kTcActRelu};
}
BenchShape grad_bench_shape(unsigned B) {
    return std::vector<unsigned>{B, kBenchI, kBenchH, kTcActNone};
}
// tc_grad_weights_wide the same, at the batches it stages (up to 128).
BenchShape grad_wide_bench_shape(unsigned B) {
    if (!tc_grad_wide_unfit(B, kBenchI, kBenchH).empty()) return std::nullopt;
    return grad_bench_shape(B);
}

std::pair<double, double> forward_work(const VerifyCase& c) {
    const double B = c.shape[0], I = c.shape[1], H = c.shape[2];
    return {4 * (B * I + H * I + H + B * H), 2 * B * I * H};
}

// B,I,O: reads dY (act 0: D1 alone; act 1: dY and Y for the mask) and W, writes dX. bench times
// it on the MNIST net's hidden layer (act 0) and as the CNN's fc1 (act 1).
std::pair<double, double> grad_input_work(const VerifyCase& c) {
    const double B = c.shape[0], I = c.shape[1], O = c.shape[2], ry = c.shape[3] == 1 ? 2 : 1;
    return {4 * (ry * B * O + O * I + B * I), 2 * B * I * O};
}

std::pair<double, double> grad_weights_work(const VerifyCase& c) {
    const double B = c.shape[0], I = c.shape[1], H = c.shape[2];
    return {4 * (B * H + B * I + H * I + H), 2 * B * I * H + B * H};
}

std::vector<KernelRow> tc_rows() {
    std::vector<KernelRow> rows;
    for (const std::string suffix : {"", "_bf16"}) {
        rows.push_back({.entry = "tc_forward" + suffix, .shape = "B,I,H,act", .act_named = false,
                        .validate = validate_tc_forward, .harness = make_tc_forward,
                        .bench_shape = forward_bench_shape, .work = forward_work});
        rows.push_back({.entry = "tc_grad_input" + suffix, .shape = "B,I,O,act", .act_named = false,
                        .validate = validate_tc_grad, .harness = make_tc_grad_input,
                        .bench_shape = grad_bench_shape, .work = grad_input_work});
        rows.push_back({.entry = "tc_grad_weights" + suffix, .shape = "B,I,O,act", .act_named = false,
                        .validate = validate_tc_grad, .harness = make_tc_grad_weights,
                        .bench_shape = grad_bench_shape, .work = grad_weights_work});
    }
    rows.push_back({.entry = "tc_grad_weights_wide", .shape = "B,I,O,act", .act_named = false,
                    .validate = validate_tc_grad_wide, .harness = make_tc_grad_weights_wide,
                    .bench_shape = grad_wide_bench_shape, .work = grad_weights_work});
    return rows;
}

}  // namespace

const KernelFamily& tc_family() {
    static const KernelFamily f{"tc", {"tc", "tcbf16"}, tc_rows(), tc_default_cases, tc_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{tc_family, 90, 100};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
