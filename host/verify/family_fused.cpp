// ptx/fused.ptx: the fused set's three launches a step (fused_forward: the hidden layer;
// fused_output: the output layer, its loss deltas and the hidden deltas; fused_grad: the batch
// gradients of both layers). Shapes: B,I,H,act; B,H,O,loss,act; B,I,H,O.
#include "fused.hpp"
#include "recipe.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

// As train runs it: the Z output (pre-activations) only for GELU, else a null Z.
Harness make_fused_forward(const VerifyCase& c, Rng& rng) {
    Harness h;
    const auto& z = c.shape;
    const unsigned B = z[0], I = z[1], H = z[2], act = z[3];
    const bool with_z = act == kActGelu;
    const float w = std::sqrt(6.0f / float(I));
    std::vector<float> X = random_vector(rng, size_t(B) * I, 0.0f, 1.0f);
    std::vector<float> W = random_vector(rng, size_t(H) * I, -w, w);
    std::vector<float> b = random_vector(rng, H, -0.1f, 0.1f);
    Bounded Zr;
    h.expected["A"] = ref_fused_forward(X, W, b, B, I, H, act, with_z ? &Zr : nullptr);
    h.tensors = {{"X", {B, I}, Role::In, X}, {"W", {H, I}, Role::In, W}, {"b", {H}, Role::In, b},
                 {"A", {B, H}, Role::Out, {}}};
    if (with_z) {
        h.expected["Z"] = std::move(Zr);
        h.tensors.push_back({"Z", {B, H}, Role::Out, {}});
    }
    h.launch = [B, I, H, act, with_z](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(fused_forward_grid(B, H), kFusedBlock, s, ptr(m, "X"), ptr(m, "W"), ptr(m, "b"), ptr(m, "A"),
                 with_z ? ptr(m, "Z") : CUdeviceptr(0), B, I, H, act);
    };
    return h;
}

Harness make_fused_output(const VerifyCase& c, Rng& rng) {
    Harness h;
    const auto& z = c.shape;
    const unsigned B = z[0], H = z[1], O = z[2], loss = z[3], act = z[4];
    const float w = std::sqrt(6.0f / float(H));
    // ReLU: activations with about half exact zeros. Other codes: pre-activations Z in
    // [-4, 4] and A = f(Z) rounded to float, as fused_forward leaves them; for GELU, D1
    // holds Z on entry (fused_forward's Z output, as train passes it).
    std::vector<float> Zin, A = relu_outputs(rng, size_t(B) * H);
    if (act != kActRelu) {
        Zin = random_vector(rng, size_t(B) * H, -4.0f, 4.0f);
        for (size_t i = 0; i < A.size(); ++i) A[i] = float(activate(activation_of_code(act), Zin[i]));
    }
    std::vector<float> W = random_vector(rng, size_t(O) * H, -w, w);
    std::vector<float> b = random_vector(rng, O, -0.1f, 0.1f);
    std::vector<float> T = random_targets(rng, B, O);
    if (loss == kLossSoftmax) {
        // Large logits for the odd samples: column 0 of W is 64 for every output, and A[s][0]
        // is 0 for even samples (small logits, as in training) and in [1.5, 2) for odd ones,
        // which lifts all their logits by 96 to 128. Softmax does not change, but 2^(y log2 e)
        // overflows float from y = 88.7 on: a kernel that forgets to subtract the max gives
        // inf / inf = NaN there, and misses the float64 reference.
        for (unsigned o = 0; o < O; ++o) W[size_t(o) * H] = 64.0f;
        for (unsigned s = 0; s < B; ++s) A[size_t(s) * H] = s % 2 ? rng.uniform(1.5f, 2.0f) : 0.0f;
    }
    RefFusedOutput r = ref_fused_output(A, W, b, T, B, H, O, loss, act, act == kActGelu ? &Zin : nullptr);
    h.expected = {{"Y", std::move(r.Y)}, {"D2", std::move(r.D2)}, {"D1", std::move(r.D1)}};
    h.tensors = {{"A", {B, H}, Role::In, A},      {"W", {O, H}, Role::In, W},   {"b", {O}, Role::In, b},
                 {"T", {B, O}, Role::In, T},      {"Y", {B, O}, Role::Out, {}}, {"D2", {B, O}, Role::Out, {}},
                 {"D1", {B, H}, act == kActGelu ? Role::InOut : Role::Out, act == kActGelu ? Zin : std::vector<float>{}}};
    h.launch = [B, H, O, loss, act](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        FusedArgs a{};
        a.A1 = ptr(m, "A"), a.W2 = ptr(m, "W"), a.b2 = ptr(m, "b"), a.T = ptr(m, "T");
        a.Y = ptr(m, "Y"), a.D2 = ptr(m, "D2"), a.D1 = ptr(m, "D1");
        a.B = B, a.H = H, a.O = O, a.loss = loss, a.act = act;
        launch_fused_output(k, a, s);
    };
    return h;
}

// Random deltas and activations, a random scale around 1/B (the mean).
Harness make_fused_grad(const VerifyCase& c, Rng& rng) {
    Harness h;
    const auto& z = c.shape;
    const unsigned B = z[0], I = z[1], H = z[2], O = z[3];
    const float scale = rng.uniform(0.5f, 2.0f) / float(B);
    std::vector<float> X = random_vector(rng, size_t(B) * I, 0.0f, 1.0f);
    std::vector<float> A = relu_outputs(rng, size_t(B) * H);
    std::vector<float> D1 = random_vector(rng, size_t(B) * H, -1.0f, 1.0f);
    std::vector<float> D2 = random_vector(rng, size_t(B) * O, -1.0f, 1.0f);
    ref_fused_grad(h.expected["GW1"], h.expected["Gb1"], D1, X, B, H, I, scale);
    ref_fused_grad(h.expected["GW2"], h.expected["Gb2"], D2, A, B, O, H, scale);
    h.tensors = {{"GW1", {H, I}, Role::Out, {}}, {"Gb1", {H}, Role::Out, {}},   {"GW2", {O, H}, Role::Out, {}},
                 {"Gb2", {O}, Role::Out, {}},    {"X", {B, I}, Role::In, X},   {"A", {B, H}, Role::In, A},
                 {"D1", {B, H}, Role::In, D1},   {"D2", {B, O}, Role::In, D2}};
    h.launch = [B, I, H, O, scale](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(fused_grad_grid(I, H, O), kFusedBlock, s, ptr(m, "GW1"), ptr(m, "Gb1"), ptr(m, "GW2"),
                 ptr(m, "Gb2"), ptr(m, "X"), ptr(m, "A"), ptr(m, "D1"), ptr(m, "D2"), B, I, H, O, scale);
    };
    return h;
}

// The MNIST sizes, batches that leave partial tiles (63, 1000), column counts that are not a
// multiple of 4 (257, 2001: single-float copies), that leave cluster ranks without columns (13,
// 1), that need two 128-column chunks per rank (2000, 2001), more outputs than warps (17) and
// than a warp's lanes (33, 64, 100), more hidden units than threads (300, 600), and fused_output's
// widths (1024: one 32-wide step a lane; 1000: 32-wide for lanes 0..7 only; 2100: two, then the
// narrower ones). With every activation, fused_output with the loss codes besides
// (add_with_acts; the shapes counted on from fused_forward's).
std::vector<VerifyCase> fused_default_cases() {
    std::vector<VerifyCase> v;
    unsigned n_shape = 0;
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 784, 128}, {63, 784, 128}, {64, 784, 128},
                                                            {1000, 784, 128}, {64, 784, 300}, {9, 257, 33},
                                                            {64, 2000, 128}, {5, 2001, 40}, {7, 13, 5}, {1, 1, 1}})
        add_with_acts(v, ++n_shape, "fused_forward", s, kActGelu);
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 128, 10}, {64, 128, 10}, {1000, 128, 10},
                                                            {63, 300, 10}, {64, 33, 17}, {2, 600, 9}, {7, 5, 3},
                                                            {1, 1, 1}, {9, 40, 33}, {2, 40, 64}, {3, 50, 100},
                                                            {64, 1024, 10}, {5, 1000, 20}, {2, 2100, 40}})
        add_with_acts(v, ++n_shape, "fused_output", s, kActGelu);
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 784, 128, 10}, {63, 784, 128, 10},
                                                            {64, 784, 128, 10}, {1000, 784, 128, 10},
                                                            {65, 13, 5, 3}, {64, 100, 300, 17}, {1, 1, 1, 1}})
        v.push_back({"fused_grad", s});
    return v;
}

std::vector<VerifyCase> fused_quick_cases() {
    std::vector<VerifyCase> out;
    for (auto& c : std::vector<VerifyCase>{{"fused_forward", {63, 784, 128}}, {"fused_forward", {9, 257, 33}},
                                           {"fused_output", {63, 300, 10}},   {"fused_output", {64, 33, 17}},
                                           {"fused_output", {5, 1000, 20}},
                                           {"fused_grad", {65, 13, 5, 3}},    {"fused_grad", {64, 784, 128, 10}}})
        add_quick(out, std::move(c));
    return out;
}

// bench: the default recipe's loss (ce) and activation (relu) at batch B on 784-128-10.
std::pair<double, double> fused_forward_work(const VerifyCase& c) {
    const double B = c.shape[0], I = kBenchI, H = kBenchH;
    return {4 * (B * I + H * I + H + B * H), 2 * B * I * H};
}

std::pair<double, double> fused_output_work(const VerifyCase& c) {
    const double B = c.shape[0], H = kBenchH, O = kBenchO;
    return {4 * (2 * B * H + O * H + O + 3 * B * O), 4 * B * H * O};
}

// Reads X, A, D1, D2 once, writes the gradients; one multiply by the scale each.
std::pair<double, double> fused_grad_work(const VerifyCase& c) {
    const double B = c.shape[0];
    const double I = kBenchI, H = kBenchH, O = kBenchO, params = H * I + H + O * H + O;
    return {4 * (B * I + 2 * B * H + B * O + params), 2 * B * ((I + 1) * H + (H + 1) * O) + params};
}

}  // namespace

const KernelFamily& fused_family() {
    static const KernelFamily f{
        "fused",
        {"fused"},
        {{.entry = "fused_forward",
          .shape = "B,I,H,act",
          .validate = validate_named_shape,
          .harness = make_fused_forward,
          .bench_shape = [](unsigned B) -> BenchShape {
              return std::vector<unsigned>{B, kBenchI, kBenchH, kActRelu};
          },
          .work = fused_forward_work},
         {.entry = "fused_output",
          .shape = "B,H,O,loss,act",
          .validate = validate_named_shape,
          .harness = make_fused_output,
          .bench_shape = [](unsigned B) -> BenchShape {
              return std::vector<unsigned>{B, kBenchH, kBenchO, kLossSoftmax, kActRelu};
          },
          .work = fused_output_work},
         {.entry = "fused_grad",
          .shape = "B,I,H,O",
          .validate = validate_named_shape,
          .harness = make_fused_grad,
          .bench_shape = [](unsigned B) -> BenchShape {
              return std::vector<unsigned>{B, kBenchI, kBenchH, kBenchO};
          },
          .work = fused_grad_work}},
        fused_default_cases,
        fused_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{fused_family, 50, 40};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
