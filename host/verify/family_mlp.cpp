// The seed design's kernels (ptx/forward.ptx: forward2, forward3; ptx/grad.ptx: grad2, grad3,
// the per-sample gradients): one thread per sample through a whole network of 2 or 3 layers.
// Shapes: B,I,H,O (2 layers) or B,I,H1,H2,O (3), grad's loss code, then the activation code.
#include "recipe.hpp"
#include "registry.hpp"

namespace ptxlab::verify_detail {

namespace {

// The network and its reference; grad: with targets, the deltas and the per-sample gradients.
Harness make_mlp_harness(const VerifyCase& c, Rng& rng, bool grad) {
    const unsigned B = c.shape[0];
    // The last number is the activation code; grad2/grad3's one before it the loss code.
    const unsigned act = c.shape.back();
    const unsigned loss = grad ? c.shape[c.shape.size() - 2] : kLossDiff;
    std::vector<unsigned> sizes(c.shape.begin() + 1, c.shape.end() - (grad ? 2 : 1));
    const size_t L = sizes.size() - 1;
    const bool three = L == 3;
    NetParams net = random_net(rng, sizes);
    Harness h;
    std::vector<float> X = random_vector(rng, size_t(B) * sizes[0], 0.0f, 1.0f);
    std::vector<float> T = grad ? random_targets(rng, B, sizes[L]) : std::vector<float>{};
    h.tensors.push_back({"X", {B, sizes[0]}, Role::In, X});
    if (grad) h.tensors.push_back({"T", {B, sizes[L]}, Role::In, T});
    for (size_t l = 0; l < L; ++l) {
        h.tensors.push_back({fmt::format("W{}", l + 1), {sizes[l + 1], sizes[l]}, Role::In, net.W[l]});
        h.tensors.push_back({fmt::format("b{}", l + 1), {sizes[l + 1]}, Role::In, net.b[l]});
    }
    for (size_t l = 0; l < L; ++l)
        h.tensors.push_back({l + 1 < L ? fmt::format("A{}", l + 1) : "Y", {B, sizes[l + 1]}, Role::Out, {}});
    if (grad) {
        for (size_t l = 0; l < L; ++l) {
            h.tensors.push_back({fmt::format("gW{}", l + 1), {B, sizes[l + 1], sizes[l]}, Role::Out, {}});
            h.tensors.push_back({fmt::format("gb{}", l + 1), {B, sizes[l + 1]}, Role::Out, {}});
        }
        RefGrad r = ref_grad(net, X, T, B, loss, act);
        for (size_t l = 0; l < L; ++l) {
            h.expected[l + 1 < L ? fmt::format("A{}", l + 1) : "Y"] = std::move(r.fwd.acts[l]);
            h.expected[fmt::format("gW{}", l + 1)] = std::move(r.gW[l]);
            h.expected[fmt::format("gb{}", l + 1)] = std::move(r.gb[l]);
        }
    } else {
        RefForward r = ref_forward(net, X, B, act);
        for (size_t l = 0; l < L; ++l) h.expected[l + 1 < L ? fmt::format("A{}", l + 1) : "Y"] = std::move(r.acts[l]);
    }
    const std::vector<unsigned> sz = sizes;
    h.launch = [three, grad, B, sz, loss, act](const Kernel& k, const std::map<std::string, CUdeviceptr>& m,
                                               CUstream s) {
        const unsigned block = 32;  // small blocks, so that batches of 63 and 1000 span several
        const unsigned grid = grid_for(B, block);
        if (!three && !grad)
            k.launch(grid, block, s, ptr(m, "X"), ptr(m, "W1"), ptr(m, "b1"), ptr(m, "W2"), ptr(m, "b2"),
                     ptr(m, "A1"), ptr(m, "Y"), B, sz[0], sz[1], sz[2], act);
        else if (three && !grad)
            k.launch(grid, block, s, ptr(m, "X"), ptr(m, "W1"), ptr(m, "b1"), ptr(m, "W2"), ptr(m, "b2"),
                     ptr(m, "W3"), ptr(m, "b3"), ptr(m, "A1"), ptr(m, "A2"), ptr(m, "Y"), B, sz[0], sz[1], sz[2],
                     sz[3], act);
        else if (!three)
            k.launch(grid, block, s, ptr(m, "X"), ptr(m, "T"), ptr(m, "W1"), ptr(m, "b1"), ptr(m, "W2"),
                     ptr(m, "b2"), ptr(m, "A1"), ptr(m, "Y"), ptr(m, "gW1"), ptr(m, "gb1"), ptr(m, "gW2"),
                     ptr(m, "gb2"), B, sz[0], sz[1], sz[2], loss, act);
        else
            k.launch(grid, block, s, ptr(m, "X"), ptr(m, "T"), ptr(m, "W1"), ptr(m, "b1"), ptr(m, "W2"),
                     ptr(m, "b2"), ptr(m, "W3"), ptr(m, "b3"), ptr(m, "A1"), ptr(m, "A2"), ptr(m, "Y"),
                     ptr(m, "gW1"), ptr(m, "gb1"), ptr(m, "gW2"), ptr(m, "gb2"), ptr(m, "gW3"), ptr(m, "gb3"), B,
                     sz[0], sz[1], sz[2], sz[3], loss, act);
    };
    return h;
}

// Every shape with every activation; grad with the loss codes besides (add_with_acts). The
// per-sample gradients at batch 1000 run ReLU only: gW alone is [B][H][I] (235 M floats at
// H = 300, in each set and in float64 with its bound), and the activations take the same path
// at the smaller batches.
std::vector<VerifyCase> mlp_default_cases() {
    const std::vector<std::vector<unsigned>> two = {{1, 784, 128, 10},  {63, 784, 128, 10},  {64, 784, 128, 10},
                                                    {1000, 784, 128, 10}, {64, 784, 1, 10},  {63, 784, 100, 10},
                                                    {64, 784, 300, 10},  {1000, 784, 300, 10}, {7, 13, 5, 3},
                                                    {1, 1, 1, 1}};
    const std::vector<std::vector<unsigned>> three = {{1, 784, 128, 64, 10},   {63, 784, 128, 64, 10},
                                                      {64, 784, 128, 64, 10},  {1000, 784, 128, 64, 10},
                                                      {63, 300, 129, 33, 7},   {64, 100, 1, 300, 10},
                                                      {2, 1, 1, 1, 1}};
    std::vector<VerifyCase> v;
    unsigned n_shape = 0;
    auto with_acts = [&v, &n_shape](const char* e, const std::vector<unsigned>& s, bool per_sample_grad) {
        add_with_acts(v, ++n_shape, e, s, per_sample_grad && s[0] >= 1000 ? kActRelu : kActGelu);
    };
    for (const auto& s : two) with_acts("forward2", s, false);
    for (const auto& s : two) with_acts("grad2", s, true);
    for (const auto& s : three) with_acts("forward3", s, false);
    for (const auto& s : three) with_acts("grad3", s, true);
    return v;
}

std::vector<VerifyCase> mlp_quick_cases() {
    std::vector<VerifyCase> out;
    for (auto& c : std::vector<VerifyCase>{{"forward2", {1, 784, 128, 10}},    {"forward2", {63, 100, 37, 10}},
                                           {"grad2", {1, 784, 128, 10}},       {"grad2", {63, 100, 37, 10}},
                                           {"grad2", {64, 13, 5, 3}},          {"forward3", {63, 300, 129, 33, 7}},
                                           {"forward3", {2, 1, 1, 1, 1}},      {"grad3", {63, 300, 129, 33, 7}},
                                           {"grad3", {2, 1, 1, 1, 1}}})
        add_quick(out, std::move(c));
    return out;
}

// bench: the default recipe's loss (ce) and activation (relu) at batch B on 784-128-10.
std::pair<double, double> forward2_work(const VerifyCase& c) {
    const double B = c.shape[0];
    const double I = kBenchI, H = kBenchH, O = kBenchO, params = H * I + H + O * H + O;
    return {4 * (B * I + params + B * H + B * O), 2 * B * (I * H + H * O)};
}

// Forward, deltas, and the per-sample gradients written out.
std::pair<double, double> grad2_work(const VerifyCase& c) {
    const double B = c.shape[0];
    const double I = kBenchI, H = kBenchH, O = kBenchO, params = H * I + H + O * H + O;
    return {4 * (B * I + B * O + params + B * (H + O) + B * params), 2 * B * (I * H + 2 * H * O) + B * params};
}

Harness forward_harness(const VerifyCase& c, Rng& rng) { return make_mlp_harness(c, rng, false); }
Harness grad_harness(const VerifyCase& c, Rng& rng) { return make_mlp_harness(c, rng, true); }

}  // namespace

const KernelFamily& mlp_family() {
    static const KernelFamily f{
        "mlp",
        {"forward", "grad"},
        {{.entry = "forward2",
          .shape = "B,I,H,O,act",
          .validate = validate_named_shape,
          .harness = forward_harness,
          .bench_shape = [](unsigned B) -> BenchShape {
              return std::vector<unsigned>{B, kBenchI, kBenchH, kBenchO, kActRelu};
          },
          .work = forward2_work},
         {.entry = "grad2",
          .shape = "B,I,H,O,loss,act",
          .validate = validate_named_shape,
          .harness = grad_harness,
          .bench_shape = [](unsigned B) -> BenchShape {
              return std::vector<unsigned>{B, kBenchI, kBenchH, kBenchO, kLossSoftmax, kActRelu};
          },
          .work = grad2_work},
         {.entry = "forward3",
          .shape = "B,I,H1,H2,O,act",
          .validate = validate_named_shape,
          .harness = forward_harness},
         {.entry = "grad3",
          .shape = "B,I,H1,H2,O,loss,act",
          .validate = validate_named_shape,
          .harness = grad_harness}},
        mlp_default_cases,
        mlp_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{mlp_family, 10, 10};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
