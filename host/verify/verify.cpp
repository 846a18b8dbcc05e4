#include "verify.hpp"

#include "fused.hpp"
#include "recipe.hpp"
#include "ref_optim.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "tcstep.hpp"
#include "verify_harness.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>

namespace ptxlab {

uint64_t ulp_distance(float a, float b) {
    if (std::isnan(a) || std::isnan(b))
        return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ? 0 : UINT64_MAX;
    auto ordered = [](float f) {
        int64_t i = std::bit_cast<int32_t>(f);
        return i < 0 ? int64_t(INT32_MIN) - i : i;  // monotonic in f, with -0 == +0
    };
    int64_t d = ordered(a) - ordered(b);
    return static_cast<uint64_t>(d < 0 ? -d : d);
}

using namespace verify_detail;

std::string shape_names(const std::string& entry, size_t count) {
    if (is_conv_entry(entry)) return conv_shape_names(entry, count);
    if (is_tc_entry(entry)) return tc_shape_names(entry);
    // The kernels with a loss-code parameter take it after the sizes: 0 (kLossDiff,
    // d = y - t) or 1 (kLossSoftmax, d = softmax(y) - t); those with an activation code take
    // it as the last number (recipe.hpp act_code: 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid, 4 gelu).
    if (entry == "grad2") return "B,I,H,O,loss,act";
    if (entry == "grad3") return "B,I,H1,H2,O,loss,act";
    if (entry == "fused_output") return "B,H,O,loss,act";
    if (entry == "forward2") return "B,I,H,O,act";
    if (entry == "forward3") return "B,I,H1,H2,O,act";
    if (entry == "batch_mean") return "N,B";
    if (entry == "optim_sgd" || entry == "optim_adam" || entry == "optim_rmsprop") return "N,variant";
    if (entry == "gather") return "rows,cols,src_rows";
    if (entry == "fused_forward") return "B,I,H,act";
    if (entry == "fused_grad") return "B,I,H,O";
    if (entry == "outer") return "B,R,C";
    // fused_step: the loss code, then the optimizer code (recipe.hpp optim_code: 0 sgd,
    // 1 momentum, 2 nesterov, 3 adam, 4 adamw, 5 rmsprop).
    if (entry == "fused_step") return "B,I,H,O,loss,optim,act";
    // tc_step: the same codes; ReLU only (no act).
    if (entry == "tc_step") return "B,I,H,O,loss,optim";
    PTXLAB_THROW(InputError, "no verify harness for kernel '{}'", entry);
}

// The position of a named field ("loss", "act") in the kernel's shape, or -1.
static int shape_field(const std::string& entry, const std::string& field) {
    const std::string names = "," + shape_names(entry) + ",";
    const size_t at = names.find("," + field + ",");
    if (at == std::string::npos) return -1;
    return static_cast<int>(std::count(names.begin(), names.begin() + long(at), ','));
}

// Whether the kernel's shape holds a loss code (grad2, grad3, fused_output) and an
// activation code (forward2/3, grad2/3, fused_forward, fused_output; always the last number).
static bool takes_loss_code(const std::string& entry) { return shape_field(entry, "loss") >= 0; }
static bool takes_act_code(const std::string& entry) { return shape_field(entry, "act") >= 0; }

unsigned optim_variants(const std::string& entry) {
    if (entry == "optim_sgd") return 5;
    if (entry == "optim_adam") return 3;
    if (entry == "optim_rmsprop") return 2;
    return 0;
}

std::string optim_variant_text(const std::string& entry, unsigned variant) {
    static const std::map<std::string, std::vector<std::string>> names = {
        {"optim_sgd", {"plain", "momentum", "nesterov", "nesterov+wd", "plain+wd"}},
        {"optim_adam", {"adam", "adam+wd", "adamw"}},
        {"optim_rmsprop", {"plain", "+wd"}}};
    auto it = names.find(entry);
    if (it == names.end() || variant >= it->second.size()) return "?";
    return it->second[variant];
}

std::string optim_variant_list(const std::string& entry) {
    std::string out;
    for (unsigned v = 0; v < optim_variants(entry); ++v)
        out += fmt::format("{}{} {}", v ? ", " : "", v, optim_variant_text(entry, v));
    return out;
}

void validate_case(const VerifyCase& c) {
    if (is_conv_entry(c.entry)) return validate_conv_case(c);
    if (is_tc_entry(c.entry)) return validate_tc_case(c);
    const std::string names = shape_names(c.entry);
    const size_t want = static_cast<size_t>(std::count(names.begin(), names.end(), ',')) + 1;
    if (c.shape.size() != want)
        PTXLAB_THROW(InputError, "kernel '{}' takes a shape {} ({} numbers), got {}", c.entry, names, want,
                     c.shape.size());
    const unsigned variants = optim_variants(c.entry);
    size_t start = 0;
    for (size_t k = 0; k < c.shape.size(); ++k) {
        const size_t comma = names.find(',', start);
        const std::string name = names.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        start = comma + 1;
        const unsigned x = c.shape[k];
        if (name == "loss") {  // a loss code, not a size
            if (x != kLossDiff && x != kLossSoftmax)
                PTXLAB_THROW(InputError, "kernel '{}': the loss code must be {} (y - t) or {} (softmax(y) - t), got {}",
                             c.entry, kLossDiff, kLossSoftmax, x);
        } else if (name == "optim") {
            if (x > optim_code(OptimKind::RmsProp))
                PTXLAB_THROW(InputError, "kernel '{}': the optimizer code must be 0 (sgd), 1 (momentum), 2 (nesterov), "
                                         "3 (adam), 4 (adamw) or 5 (rmsprop), got {}",
                             c.entry, x);
        } else if (name == "act") {
            if (x > kActGelu)
                PTXLAB_THROW(InputError,
                             "kernel '{}': the activation code must be 0 relu, 1 leaky-relu, 2 tanh, 3 sigmoid or 4 "
                             "gelu, got {}",
                             c.entry, x);
        } else if (name == "variant") {
            if (x >= variants)
                PTXLAB_THROW(InputError, "kernel '{}' has variants 0..{} ({}), got {}", c.entry, variants - 1,
                             optim_variant_list(c.entry), x);
        } else if (x == 0) {
            PTXLAB_THROW(InputError, "kernel '{}': shape sizes must be >= 1", c.entry);
        }
    }
    if (c.entry == "tc_step")
        if (std::string why = tc_step_unfit(c.shape[0], c.shape[1], c.shape[2], c.shape[3]); !why.empty())
            PTXLAB_THROW(InputError, "kernel 'tc_step': {}", why);
}

std::string shape_text(const VerifyCase& c) {
    std::string names = shape_names(c.entry, c.shape.size()), out;
    size_t k = 0, start = 0;
    while (k < c.shape.size()) {
        size_t comma = names.find(',', start);
        std::string n = names.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        out += fmt::format("{}{}={}", out.empty() ? "" : " ", n, c.shape[k]);
        if (n == "variant") out += fmt::format(" ({})", optim_variant_text(c.entry, c.shape[k]));
        if (n == "optim") out += fmt::format(" ({})", to_string(static_cast<OptimKind>(c.shape[k])));
        if (n == "act" && !is_conv_entry(c.entry) && !is_tc_entry(c.entry) && c.shape[k] <= kActGelu) out += fmt::format(" ({})", to_string(activation_of_code(c.shape[k])));
        ++k;
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

std::vector<VerifyCase> default_cases() {
    std::vector<VerifyCase> v;
    const std::vector<std::vector<unsigned>> two = {{1, 784, 128, 10},  {63, 784, 128, 10},  {64, 784, 128, 10},
                                                    {1000, 784, 128, 10}, {64, 784, 1, 10},  {63, 784, 100, 10},
                                                    {64, 784, 300, 10},  {1000, 784, 300, 10}, {7, 13, 5, 3},
                                                    {1, 1, 1, 1}};
    const std::vector<std::vector<unsigned>> three = {{1, 784, 128, 64, 10},   {63, 784, 128, 64, 10},
                                                      {64, 784, 128, 64, 10},  {1000, 784, 128, 64, 10},
                                                      {63, 300, 129, 33, 7},   {64, 100, 1, 300, 10},
                                                      {2, 1, 1, 1, 1}};
    // The kernels with an activation code run every shape with every activation; those that
    // form output deltas too run ReLU with every loss code and each other activation with one
    // loss code, alternating over the shapes (so every pair is run somewhere). The seed
    // design's per-sample gradients (grad2, grad3) at batch 1000 run ReLU only: gW alone is
    // [B][H][I] (235 M floats at H = 300, in each set and in float64 with its bound), and the
    // activations take the same path at the smaller batches.
    unsigned n_shape = 0;
    auto with_acts = [&v, &n_shape](const char* e, std::vector<unsigned> s) {
        ++n_shape;
        const bool loss = takes_loss_code(e);
        const bool per_sample_grad = std::string_view(e).starts_with("grad");
        const unsigned last_act = per_sample_grad && s[0] >= 1000 ? kActRelu : kActGelu;
        for (unsigned act = kActRelu; act <= last_act; ++act) {
            std::vector<unsigned> z = s;
            if (!loss) {
                z.push_back(act);
                v.push_back({e, z});
                continue;
            }
            for (unsigned code : {kLossDiff, kLossSoftmax}) {
                if (act != kActRelu && code != (act + n_shape) % 2) continue;
                std::vector<unsigned> w = z;
                w.push_back(code);
                w.push_back(act);
                v.push_back({e, w});
            }
        }
    };
    for (const auto& s : two) with_acts("forward2", s);
    for (const auto& s : two) with_acts("grad2", s);
    for (const auto& s : three) with_acts("forward3", s);
    for (const auto& s : three) with_acts("grad3", s);
    // The fast set's mean gradients: one element, odd batches (the eight-row groups and the
    // rest), W1 of the MNIST net (100352 = 128 x 784) at batch 64, a batch of 1000.
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 1}, {10, 63}, {100, 64}, {100352, 64}, {1280, 1000}})
        v.push_back({"batch_mean", s});
    // The optimizers, every variant (optim_variants), at one element, 1000, and the 784-128-10
    // network's parameter count (101770: W1, b1, W2, b2 in one flat array).
    for (const char* e : {"optim_sgd", "optim_adam", "optim_rmsprop"})
        for (unsigned variant = 0; variant < optim_variants(e); ++variant)
            for (unsigned n : {1u, 1000u, 101770u}) v.push_back({e, {n, variant}});
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 1, 1}, {63, 784, 100}, {1000, 784, 2000}, {64, 10, 60000}})
        v.push_back({"gather", s});
    // The fused set: the MNIST sizes, batches that leave partial tiles (63, 1000), column
    // counts that are not a multiple of 4 (257, 2001: single-float copies), that leave
    // cluster ranks without columns (13, 1), that need two 128-column chunks per rank (2000,
    // 2001), more outputs than warps (17) and more hidden units than threads (300, 600).
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 784, 128}, {63, 784, 128}, {64, 784, 128},
                                                            {1000, 784, 128}, {64, 784, 300}, {9, 257, 33},
                                                            {64, 2000, 128}, {5, 2001, 40}, {7, 13, 5}, {1, 1, 1}})
        with_acts("fused_forward", s);
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 128, 10}, {64, 128, 10}, {1000, 128, 10},
                                                            {63, 300, 10}, {64, 33, 17}, {2, 600, 9}, {7, 5, 3},
                                                            {1, 1, 1}})
        with_acts("fused_output", s);
    for (const auto& s : std::vector<std::vector<unsigned>>{{1, 784, 128, 10}, {63, 784, 128, 10},
                                                            {64, 784, 128, 10}, {1000, 784, 128, 10},
                                                            {65, 13, 5, 3}, {64, 100, 300, 17}, {1, 1, 1, 1}})
        v.push_back({"fused_grad", s});
    // The one-launch step: the MNIST sizes; batches of 1 and 63 (partial chunk) and 1000
    // (16 chunks: X restaged in phase 2); 300 hidden units (19 tiles, partial last tile) and
    // 2000 (125 tiles: more tiles than resident clusters, so clusters loop); I = 13 and 257
    // (single-float copies, ranks with few or no columns), I = 800 (the widest it takes),
    // O = 32 (the most), 1 x 1 x 1 x 1. The first three shapes with every loss and optimizer
    // code (ReLU), and every other activation with CE and Nesterov; the others with one
    // pair and one activation each, in turn, so that every pair runs on some shape.
    const std::vector<std::vector<unsigned>> step_shapes = {
        {64, 784, 128, 10}, {65, 13, 5, 3},     {1, 1, 1, 1},      {1, 784, 128, 10}, {63, 784, 128, 10},
        {1000, 784, 128, 10}, {64, 784, 300, 10}, {64, 100, 2000, 10}, {9, 257, 33, 17}, {64, 800, 16, 32}};
    const unsigned optim_codes = optim_code(OptimKind::RmsProp) + 1;
    for (size_t i = 0; i < step_shapes.size(); ++i) {
        auto with = [&](unsigned loss, unsigned optim, unsigned act) {
            std::vector<unsigned> s = step_shapes[i];
            s.push_back(loss);
            s.push_back(optim);
            s.push_back(act);
            v.push_back({"fused_step", s});
        };
        if (i < 3) {
            for (unsigned loss : {kLossDiff, kLossSoftmax})
                for (unsigned o = 0; o < optim_codes; ++o) with(loss, o, kActRelu);
            for (unsigned act = kActRelu + 1; act <= kActGelu; ++act)
                with(kLossSoftmax, optim_code(OptimKind::Nesterov), act);
        } else {
            const unsigned pair = unsigned(i - 3) * 5;  // walks the 12 pairs
            with(pair % 2, (pair / 2) % optim_codes, unsigned(i) % (kActGelu + 1));
        }
    }
    // The fast set's outer products: gW1 and gW2 of a batch of 64 (16-byte path), odd row
    // lengths (single floats), one element.
    for (const auto& s : std::vector<std::vector<unsigned>>{{64, 128, 784}, {64, 10, 128}, {63, 37, 13}, {5, 3, 2001}, {1, 1, 1}})
        v.push_back({"outer", s});
    for (auto& c : conv_default_cases()) v.push_back(std::move(c));
    for (auto& c : tc_default_cases()) v.push_back(std::move(c));
    // The tensor-core step: the MNIST sizes with CE and Nesterov (the default recipe), Adam,
    // and MSE with plain SGD; a batch of 1; odd sizes (I = 300: 24 columns a block, 13 blocks
    // with columns; H = 72: 9 blocks with units; O = 7) with RMSprop; 5 x 13 x 9 x 3 (two
    // blocks with columns, single-float copies, a part-empty unit block) with AdamW; the
    // limits (I = 896, O = 16) with momentum.
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 128, 10, 1, 2}, {64, 784, 128, 10, 1, 3}, {64, 784, 128, 10, 0, 0}, {1, 784, 128, 10, 1, 2},
             {37, 300, 72, 7, 1, 5}, {5, 13, 9, 3, 0, 4}, {64, 896, 128, 16, 1, 1}, {1, 1, 1, 1, 1, 2}})
        v.push_back({"tc_step", s});
    return v;
}

// The quick shapes; quick_cases() adds the loss codes.
static std::vector<VerifyCase> quick_shapes() {
    return {{"forward2", {1, 784, 128, 10}},      {"forward2", {63, 100, 37, 10}},    {"grad2", {1, 784, 128, 10}},
            {"grad2", {63, 100, 37, 10}},         {"grad2", {64, 13, 5, 3}},          {"forward3", {63, 300, 129, 33, 7}},
            {"forward3", {2, 1, 1, 1, 1}},        {"grad3", {63, 300, 129, 33, 7}},   {"grad3", {2, 1, 1, 1, 1}},
            {"batch_mean", {10, 63}},             {"batch_mean", {1000, 64}},             {"gather", {63, 784, 100}},
            {"fused_forward", {63, 784, 128}},    {"fused_forward", {9, 257, 33}},    {"fused_output", {63, 300, 10}},
            {"fused_output", {64, 33, 17}},       {"fused_grad", {65, 13, 5, 3}},     {"fused_grad", {64, 784, 128, 10}},
            {"outer", {63, 128, 784}},            {"outer", {9, 7, 13}},              {"fused_step", {63, 784, 128, 10, 1, 2, 0}},
            {"fused_step", {65, 13, 5, 3, 0, 4, 4}},       {"tc_step", {37, 300, 72, 7, 1, 5}},
            {"optim_sgd", {1000, 3}},           {"optim_adam", {1000, 1}},
            {"optim_adam", {1000, 2}},            {"optim_rmsprop", {1000, 1}}};
}

std::vector<VerifyCase> quick_cases() {
    // The kernels that form output deltas (a shape with "loss"): each quick shape with every
    // loss code. The kernels with an activation code: ReLU, and tanh and GELU (the ex2 and the
    // polynomial sequences) with one loss code each.
    std::vector<VerifyCase> out;
    for (auto& c : quick_shapes()) {
        const std::string names = shape_names(c.entry, c.shape.size());
        const bool complete = c.shape.size() == size_t(std::count(names.begin(), names.end(), ',')) + 1;
        if (!takes_act_code(c.entry) || complete) {  // fused_step's quick shapes name every code
            out.push_back(std::move(c));
            continue;
        }
        const bool loss = takes_loss_code(c.entry);
        for (unsigned code : {kLossDiff, kLossSoftmax}) {
            if (!loss && code != kLossDiff) continue;
            for (unsigned act : {kActRelu, kActTanh, kActGelu}) {
                if (loss && act == kActTanh && code != kLossDiff) continue;
                if (loss && act == kActGelu && code != kLossSoftmax) continue;
                out.push_back(c);
                if (loss) out.back().shape.push_back(code);
                out.back().shape.push_back(act);
            }
        }
    }
    for (auto& c : conv_quick_cases()) out.push_back(std::move(c));
    for (auto& c : tc_quick_cases()) out.push_back(std::move(c));
    return out;
}

namespace {

// A random network of the given sizes: He-uniform weights, small random biases.
NetParams random_net(Rng& rng, const std::vector<unsigned>& sizes) {
    NetParams net;
    net.sizes = sizes;
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        const float w = std::sqrt(6.0f / float(sizes[l]));
        net.W.push_back(random_vector(rng, size_t(sizes[l + 1]) * sizes[l], -w, w));
        net.b.push_back(random_vector(rng, sizes[l + 1], -0.1f, 0.1f));
    }
    return net;
}

// Random one-hot targets [B][O].
std::vector<float> random_targets(Rng& rng, unsigned B, unsigned O) {
    std::vector<float> t(size_t(B) * O, 0.0f);
    for (unsigned s = 0; s < B; ++s) t[size_t(s) * O + rng.below(O)] = 1.0f;
    return t;
}

CUdeviceptr ptr(const std::map<std::string, CUdeviceptr>& m, const char* name) { return m.at(name); }

Harness make_mlp_harness(const VerifyCase& c, Rng& rng) {
    const bool three = c.entry.back() == '3';
    const bool grad = c.entry.rfind("grad", 0) == 0;
    const unsigned B = c.shape[0];
    // The last number is the activation code; grad2/grad3's one before it the loss code.
    const unsigned act = c.shape.back();
    const unsigned loss = grad ? c.shape[c.shape.size() - 2] : kLossDiff;
    std::vector<unsigned> sizes(c.shape.begin() + 1, c.shape.end() - (grad ? 2 : 1));
    const size_t L = sizes.size() - 1;
    NetParams net = random_net(rng, sizes);
    Harness h;
    std::vector<float> X = random_vector(rng, size_t(B) * sizes[0], 0.0f, 1.0f);
    std::vector<float> T = grad ? random_targets(rng, B, sizes[L]) : std::vector<float>{};
    const std::string n1 = "W1", n2 = "W2", n3 = "W3";
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

Harness make_mean_harness(const VerifyCase& c, Rng& rng) {
    const unsigned N = c.shape[0], B = c.shape[1];
    const float scale = rng.uniform(0.5f, 2.0f) / float(B);  // about 1/B, as the losses' grad_scale
    Harness h;
    std::vector<float> Gs = random_vector(rng, size_t(B) * N, -1.0f, 1.0f);
    h.expected["G"] = ref_batch_mean(Gs, N, B, scale);
    h.tensors.push_back({"G", {N}, Role::Out, {}});
    h.tensors.push_back({"Gs", {B, N}, Role::In, std::move(Gs)});
    h.launch = [N, B, scale](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(grid_for(N), 256, s, ptr(m, "G"), ptr(m, "Gs"), N, B, scale);
    };
    return h;
}

// The optimizer kernels. Fresh parameters, gradients and state (M in [-0.5, 0.5], V in
// [0, 0.5]), random constants, and this step's record {lr, step_size, bc2_sqrt, decay} as
// recipe.hpp's step_hyper makes it: lr in [0.01, 0.5] at a random step t in 1..1000.
// The variant picks the flags (optim_variant_text).
Harness make_optim_harness(const VerifyCase& c, Rng& rng) {
    const unsigned N = c.shape[0], variant = c.shape[1];
    const std::string& e = c.entry;
    const bool sgd = e == "optim_sgd", adam = e == "optim_adam";
    const bool momentum = sgd && variant >= 1 && variant <= 3, nesterov = sgd && (variant == 2 || variant == 3);
    const bool decoupled = adam && variant == 2;
    const bool wd_on = sgd ? (variant == 3 || variant == 4) : variant >= 1;
    const float mu = momentum ? rng.uniform(0.5f, 0.99f) : 0.0f;
    const float wd = wd_on ? rng.uniform(1e-4f, 0.1f) : 0.0f;
    const float beta1 = rng.uniform(0.8f, 0.95f), beta2 = rng.uniform(0.9f, 0.9999f);
    const float eps = rng.uniform(1e-8f, 1e-6f), alpha = rng.uniform(0.9f, 0.999f);
    const float lr = rng.uniform(0.01f, 0.5f);
    const uint64_t t = 1 + rng.below(1000);
    StepHyper hy;
    hy.lr = lr;
    hy.step_size = static_cast<float>(double(lr) / (1.0 - std::pow(double(beta1), double(t))));
    hy.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(double(beta2), double(t))));
    hy.decay = static_cast<float>(1.0 - double(lr) * double(wd));

    std::vector<float> P = random_vector(rng, N, -1.0f, 1.0f), G = random_vector(rng, N, -1.0f, 1.0f);
    std::vector<float> M = random_vector(rng, N, -0.5f, 0.5f), V = random_vector(rng, N, 0.0f, 0.5f);
    RefOptim r = sgd    ? ref_optim_sgd(P, G, momentum ? M : std::vector<float>{}, hy, mu, wd, nesterov)
                 : adam ? ref_optim_adam(P, G, M, V, hy, beta1, beta2, eps, wd, decoupled)
                        : ref_optim_rmsprop(P, G, V, hy, alpha, eps, wd);
    const bool use_m = momentum || adam, use_v = !sgd;
    Harness h;
    h.expected["P"] = std::move(r.P);
    h.tensors.push_back({"P", {N}, Role::InOut, std::move(P)});
    h.tensors.push_back({"G", {N}, Role::In, std::move(G)});
    if (use_m) {
        h.expected["M"] = std::move(r.M);
        h.tensors.push_back({"M", {N}, Role::InOut, std::move(M)});
    }
    if (use_v) {
        h.expected["V"] = std::move(r.V);
        h.tensors.push_back({"V", {N}, Role::InOut, std::move(V)});
    }
    h.tensors.push_back({"hyp", {4}, Role::In, {hy.lr, hy.step_size, hy.bc2_sqrt, hy.decay}});
    h.launch = [=](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        const CUdeviceptr dM = use_m ? ptr(m, "M") : 0, dV = use_v ? ptr(m, "V") : 0;
        if (sgd)
            k.launch(grid_for(N), 256, s, ptr(m, "P"), ptr(m, "G"), dM, ptr(m, "hyp"), N, mu, wd, nesterov ? 1u : 0u);
        else if (adam)
            k.launch(grid_for(N), 256, s, ptr(m, "P"), ptr(m, "G"), dM, dV, ptr(m, "hyp"), N, beta1, beta2, eps, wd,
                     decoupled ? 1u : 0u);
        else
            k.launch(grid_for(N), 256, s, ptr(m, "P"), ptr(m, "G"), dV, ptr(m, "hyp"), N, alpha, eps, wd);
    };
    return h;
}

Harness make_outer_harness(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], R = c.shape[1], C = c.shape[2];
    Harness h;
    std::vector<float> D = random_vector(rng, size_t(B) * R, -1.0f, 1.0f);
    std::vector<float> V = random_vector(rng, size_t(B) * C, -1.0f, 1.0f);
    h.expected["G"] = ref_outer(D, V, B, R, C);
    h.tensors.push_back({"D", {B, R}, Role::In, std::move(D)});
    h.tensors.push_back({"V", {B, C}, Role::In, std::move(V)});
    h.tensors.push_back({"G", {B, R, C}, Role::Out, {}});
    h.launch = [B, R, C](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(outer_grid(B, R, C), kFusedBlock, s, ptr(m, "G"), ptr(m, "D"), ptr(m, "V"), B, R, C);
    };
    return h;
}

Harness make_gather_harness(const VerifyCase& c, Rng& rng) {
    const unsigned rows = c.shape[0], cols = c.shape[1], src_rows = c.shape[2];
    if (src_rows == 0) PTXLAB_THROW(InputError, "gather needs src_rows >= 1");
    Harness h;
    std::vector<float> src = random_vector(rng, size_t(src_rows) * cols, -1.0f, 1.0f);
    std::vector<uint32_t> idx(rows);
    for (auto& i : idx) i = static_cast<uint32_t>(rng.below(src_rows));
    h.expected["dst"] = ref_gather(src, idx, cols);
    std::vector<float> idx_bits(rows);
    for (unsigned r = 0; r < rows; ++r) idx_bits[r] = std::bit_cast<float>(idx[r]);
    h.tensors.push_back({"src", {src_rows, cols}, Role::In, std::move(src)});
    h.tensors.push_back({"idx", {rows}, Role::In, std::move(idx_bits)});
    h.tensors.push_back({"dst", {rows, cols}, Role::Out, {}});
    h.launch = [rows, cols](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        k.launch(grid_for(size_t(rows) * cols), 256, s, ptr(m, "dst"), ptr(m, "src"), ptr(m, "idx"), rows, cols);
    };
    return h;
}

Harness make_fused_harness(const VerifyCase& c, Rng& rng) {
    Harness h;
    const auto& z = c.shape;
    if (c.entry == "fused_forward") {
        // As train runs it: the Z output (pre-activations) only for GELU, else a null Z.
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
    } else if (c.entry == "fused_output") {
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
            k.launch(fused_output_grid(B), kFusedBlock, s, ptr(m, "A"), ptr(m, "W"), ptr(m, "b"), ptr(m, "T"),
                     ptr(m, "Y"), ptr(m, "D2"), ptr(m, "D1"), B, H, O, loss, act);
        };
    } else {
        // fused_grad: random deltas and activations, a random scale around 1/B (the mean).
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
    }
    return h;
}

// fused_step: a random network, batch, optimizer state and step record; the parameters and
// the state each in one flat array (W1, b1, W2, b2: the layout the kernel takes). Yp
// (scratch) starts as poison, the grid barrier's 64-bit count as 0 (as train sets it). The
// optimizer's constants are random in their ranges, with weight decay for momentum, adam,
// adamw and rmsprop (sgd and nesterov run without).
// tc_step (tcstep.hpp) takes the same harness with ReLU, TF32 bounds for its two products,
// and neither Yp, sync nor Z.
Harness make_step_harness(const VerifyCase& c, Rng& rng) {
    const unsigned B = c.shape[0], I = c.shape[1], H = c.shape[2], O = c.shape[3], loss = c.shape[4];
    const bool tc = c.entry == "tc_step";
    const unsigned act = tc ? kActRelu : c.shape[6];
    if (!tc && !fused_step_fits(I, O))
        PTXLAB_THROW(InputError, "fused_step takes I <= 800 and O <= 32, got I = {}, O = {}", I, O);
    OptimConfig o;
    o.kind = static_cast<OptimKind>(c.shape[5]);
    o.momentum = rng.uniform(0.5f, 0.99f);
    o.beta1 = rng.uniform(0.8f, 0.95f);
    o.beta2 = rng.uniform(0.9f, 0.9999f);
    o.eps = rng.uniform(1e-8f, 1e-6f);
    o.alpha = rng.uniform(0.9f, 0.999f);
    const bool wd_on = o.kind != OptimKind::Sgd && o.kind != OptimKind::Nesterov;
    o.weight_decay = wd_on ? rng.uniform(1e-4f, 0.1f) : 0.0f;
    const StepHyper hy = step_hyper(o, rng.uniform(0.01f, 0.5f), 1 + rng.below(1000));
    const float scale = grad_scale(loss == kLossSoftmax ? Loss::Ce : Loss::Mse, B, O);
    NetParams net = random_net(rng, {I, H, O});
    std::vector<float> X = random_vector(rng, size_t(B) * I, 0.0f, 1.0f);
    std::vector<float> T = random_targets(rng, B, O);
    const TcProducts products = tc_step_products(B, I);
    RefFusedStep r = ref_fused_step(net, X, T, B, loss, scale, act, tc ? &products : nullptr);

    // The flat arrays: parameters, their gradient (the reference's), the state.
    std::vector<float> P;
    Bounded G;
    std::vector<Tensor::Part> parts;
    const Bounded* grads[] = {&r.GW1, &r.Gb1, &r.GW2, &r.Gb2};
    const std::vector<float>* params[] = {&net.W[0], &net.b[0], &net.W[1], &net.b[1]};
    const std::vector<std::vector<size_t>> dims = {{H, I}, {H}, {O, H}, {O}};
    for (int t = 0; t < 4; ++t) {
        parts.push_back({t % 2 ? fmt::format("b{}", t / 2 + 1) : fmt::format("W{}", t / 2 + 1), P.size(), dims[t]});
        P.insert(P.end(), params[t]->begin(), params[t]->end());
        G.v.insert(G.v.end(), grads[t]->v.begin(), grads[t]->v.end());
        G.e.insert(G.e.end(), grads[t]->e.begin(), grads[t]->e.end());
    }
    const size_t N = P.size();
    const bool use_m = o.state_buffers() == 2 || o.kind == OptimKind::Momentum || o.kind == OptimKind::Nesterov;
    const bool use_v = o.state_buffers() == 2 || o.kind == OptimKind::RmsProp;
    std::vector<float> M = use_m ? random_vector(rng, N, -0.5f, 0.5f) : std::vector<float>{};
    std::vector<float> V = use_v ? random_vector(rng, N, 0.0f, 0.5f) : std::vector<float>{};
    RefOptim after = ref_optim_bounded(o, hy, P, G, M, V);

    Harness h;
    h.expected = {{"A", std::move(r.A)}, {"Y", std::move(r.Y)}, {"P", std::move(after.P)}};
    auto state_parts = [&parts](const char* name) {
        std::vector<Tensor::Part> v = parts;
        for (auto& p : v) p.name = fmt::format("{}({})", name, p.name);
        return v;
    };
    const std::vector<float> sync = {0.0f, 0.0f};
    // The outputs in data-flow order (verify lists mismatches in this order): A, Y, then the
    // updated parameters and state.
    h.tensors = {{"X", {B, I}, Role::In, X},
                 {"T", {B, O}, Role::In, T},
                 {"A", {B, H}, Role::Out, {}},
                 {"Y", {B, O}, Role::Out, {}},
                 {"P", {N}, Role::InOut, std::move(P)},
                 {"Yp", {fused_step_partials(B, H, O)}, Role::In,
                  std::vector<float>(fused_step_partials(B, H, O), std::bit_cast<float>(kPoison))},
                 {"sync", {2}, Role::In, sync},
                 {"hyp", {4}, Role::In, {hy.lr, hy.step_size, hy.bc2_sqrt, hy.decay}},
                 // Z: scratch for the pre-activations (written and read when act is not ReLU).
                 {"Z", {B, H}, Role::In, std::vector<float>(size_t(B) * H, std::bit_cast<float>(kPoison))}};
    if (tc) h.tensors.erase(h.tensors.begin() + 5, h.tensors.begin() + 7);  // no Yp, no sync
    if (tc) h.tensors.pop_back();                                           // no Z
    h.tensors[4].parts = parts;  // P
    if (use_m) {
        h.expected["M"] = std::move(after.M);
        h.tensors.push_back({"M", {N}, Role::InOut, std::move(M)});
        h.tensors.back().parts = state_parts("M");
    }
    if (use_v) {
        h.expected["V"] = std::move(after.V);
        h.tensors.push_back({"V", {N}, Role::InOut, std::move(V)});
        h.tensors.back().parts = state_parts("V");
    }
    h.launch = [=](const Kernel& k, const std::map<std::string, CUdeviceptr>& m, CUstream s) {
        const CUdeviceptr dP = ptr(m, "P");
        FusedArgs a{ptr(m, "X"), ptr(m, "T"), dP, dP + size_t(H) * I * 4, dP + (size_t(H) * I + H) * 4,
                    dP + (size_t(H) * I + H + size_t(O) * H) * 4, ptr(m, "A"), ptr(m, "Y"), 0, 0, B, I, H, O};
        a.P = dP;
        a.M = use_m ? ptr(m, "M") : 0;
        a.V = use_v ? ptr(m, "V") : 0;
        a.hyp = ptr(m, "hyp");
        a.loss = loss;
        a.scale = scale;
        a.optim = o;
        a.act = act;
        if (tc) return launch_tc_step(k, a, s);
        a.Yp = ptr(m, "Yp");
        a.sync = ptr(m, "sync");
        a.D1 = ptr(m, "Z");
        launch_fused_step(k, a, s);
    };
    return h;
}

Harness make_harness(const VerifyCase& c, Rng& rng) {
    validate_case(c);
    const unsigned variants = optim_variants(c.entry);
    if (is_conv_entry(c.entry)) return make_conv_harness(c, rng);
    if (is_tc_entry(c.entry)) return make_tc_harness(c, rng);
    if (c.entry == "batch_mean") return make_mean_harness(c, rng);
    if (variants) return make_optim_harness(c, rng);
    if (c.entry == "gather") return make_gather_harness(c, rng);
    if (c.entry == "outer") return make_outer_harness(c, rng);
    if (c.entry == "fused_step" || c.entry == "tc_step") return make_step_harness(c, rng);
    if (c.entry.rfind("fused_", 0) == 0) return make_fused_harness(c, rng);
    return make_mlp_harness(c, rng);
}

// A harness's tensors on the GPU: inputs uploaded, outputs poisoned, each between two
// guard bands (kGuardFloats words of kGuard before and after).
struct DeviceTensors {
    std::vector<DeviceBuffer> bufs;
    std::map<std::string, CUdeviceptr> ptrs;
    explicit DeviceTensors(const Harness& h) {
        for (const auto& t : h.tensors) {
            std::vector<float> words(t.count() + 2 * kGuardFloats, std::bit_cast<float>(kGuard));
            if (t.role == Role::Out) std::fill_n(words.begin() + kGuardFloats, t.count(), std::bit_cast<float>(kPoison));
            else std::copy(t.data.begin(), t.data.end(), words.begin() + kGuardFloats);
            bufs.emplace_back(words.size() * sizeof(float), t.name);
            bufs.back().upload(words);
            ptrs[t.name] = bufs.back().ptr() + kGuardFloats * sizeof(float);
        }
    }
};

// What one run of a kernel left: its outputs by name, and the out-of-bounds writes found
// in the guard bands (one line per tensor).
struct RunOutput {
    std::map<std::string, std::vector<float>> out;
    size_t overrun = 0;
    std::vector<std::string> overruns;
};

// Runs one kernel on the harness's inputs.
RunOutput run_once(const Kernel& k, const Harness& h, const Stream& stream) {
    DeviceTensors d(h);
    h.launch(k, d.ptrs, stream.get());
    try {
        stream.synchronize();
    } catch (const CudaError& e) {
        PTXLAB_THROW(Error, "kernel '{}' ({}) failed while running: {}", k.spec->entry, k.origin, e.what());
    }
    RunOutput r;
    for (size_t i = 0; i < h.tensors.size(); ++i) {
        const Tensor& t = h.tensors[i];
        auto words = d.bufs[i].download_vector<float>();
        size_t before = 0, after = 0, last = 0;
        for (size_t g = 0; g < kGuardFloats; ++g) {
            before += std::bit_cast<uint32_t>(words[g]) != kGuard;
            if (std::bit_cast<uint32_t>(words[kGuardFloats + t.count() + g]) != kGuard) ++after, last = g + 1;
        }
        if (before || after) {
            r.overrun += before + after;
            r.overruns.push_back(fmt::format("{}: {} wrote out of bounds: {} word{} in the {} words before it, {} in "
                                             "the {} after it (the last {} past its end)",
                                             t.name, k.origin, before, before == 1 ? "" : "s", kGuardFloats, after,
                                             kGuardFloats, last));
        }
        if (t.role != Role::In)
            r.out[t.name].assign(words.begin() + long(kGuardFloats), words.begin() + long(kGuardFloats + t.count()));
    }
    return r;
}

std::string index_text(const std::string& name, const std::vector<size_t>& dims, size_t flat) {
    std::vector<size_t> idx(dims.size());
    for (size_t d = dims.size(); d-- > 0;) {
        idx[d] = flat % dims[d];
        flat /= dims[d];
    }
    std::string s = name;
    for (auto i : idx) s += fmt::format("[{}]", i);
    return s;
}

std::string coords(const Tensor& t, size_t flat) {
    for (auto p = t.parts.rbegin(); p != t.parts.rend(); ++p)
        if (flat >= p->offset) return index_text(p->name, p->dims, flat - p->offset);
    return index_text(t.name, t.dims, flat);
}

std::string show(float f) { return fmt::format("{:.9g} (0x{:08x})", f, std::bit_cast<uint32_t>(f)); }

}  // namespace

struct PreparedCase::Impl {
    Harness h;
    std::optional<DeviceTensors> d;
};

PreparedCase::PreparedCase(const VerifyCase& c, uint64_t seed) : impl_(std::make_unique<Impl>()) {
    Rng rng(seed);
    impl_->h = make_harness(c, rng);
    impl_->d.emplace(impl_->h);
}

PreparedCase::~PreparedCase() = default;

void PreparedCase::launch(const Kernel& k, CUstream s) const { impl_->h.launch(k, impl_->d->ptrs, s); }

std::vector<CaseResult> run_verify(const Context& ctx, const std::vector<VerifyCase>& cases, const VerifyOptions& opt,
                                   const std::function<void(const CaseResult&)>& on_result) {
    std::set<std::string> entries;
    for (const auto& c : cases) entries.insert(c.entry);
    std::vector<std::string> list(entries.begin(), entries.end());
    KernelSet ptx(KernelSource::Ptx, ctx.info(), opt.ptx_dirs, list);
    KernelSet ref(KernelSource::Reference, ctx.info(), opt.reference_dirs, list);
    Stream stream;

    std::vector<CaseResult> results;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const VerifyCase& c = cases[ci];
        Rng rng(opt.seed * 0x9e3779b97f4a7c15ull + ci);  // fresh inputs per case, reproducible from the seed
        Harness h = make_harness(c, rng);
        const RunOutput run_ptx = run_once(ptx.get(c.entry), h, stream);
        const RunOutput run_ref = run_once(ref.get(c.entry), h, stream);
        const auto& got_ptx = run_ptx.out;
        const auto& got_ref = run_ref.out;

        CaseResult r;
        r.c = c;
        r.overrun_ptx = run_ptx.overrun;
        r.overrun_ref = run_ref.overrun;
        for (const auto* run : {&run_ptx, &run_ref})
            for (const auto& m : run->overruns) r.mismatches.push_back(m);
        for (const auto& t : h.tensors) {
            if (t.role == Role::In) continue;
            const auto& a = got_ptx.at(t.name);
            const auto& b = got_ref.at(t.name);
            const Bounded& e = h.expected.at(t.name);
            for (size_t i = 0; i < a.size(); ++i) {
                ++r.elements;
                const uint32_t ab = std::bit_cast<uint32_t>(a[i]), bb = std::bit_cast<uint32_t>(b[i]);
                const bool un_a = t.role == Role::Out && ab == kPoison;
                const bool un_b = t.role == Role::Out && bb == kPoison;
                r.unwritten_ptx += un_a;
                r.unwritten_ref += un_b;
                std::string problem;
                if (un_a || un_b) {
                    problem = fmt::format("{}: unwritten by {}", coords(t, i),
                                          un_a && un_b ? "both" : (un_a ? "ptx" : "reference"));
                } else if (ab != bb) {
                    ++r.differing;
                    const uint64_t u = ulp_distance(a[i], b[i]);
                    r.max_ulp = std::max(r.max_ulp, u);
                    r.max_abs = std::max(r.max_abs, double(std::fabs(a[i] - b[i])));
                    problem = fmt::format("{}: ptx {} reference {} ({} ulp)", coords(t, i), show(a[i]), show(b[i]),
                                          u == UINT64_MAX ? std::string("NaN") : std::to_string(u));
                }
                if (std::isinf(e.e[i])) {
                    ++r.kink_skipped;
                } else if (!un_a && !un_b) {
                    // An integer tensor (bits) must equal its reference exactly.
                    const bool ok_a = t.bits ? ab == uint32_t(e.v[i]) : within_bound(a[i], e.v[i], e.e[i]);
                    const bool ok_b = t.bits ? bb == uint32_t(e.v[i]) : within_bound(b[i], e.v[i], e.e[i]);
                    r.f64_fail_ptx += !ok_a;
                    r.f64_fail_ref += !ok_b;
                    for (float g : {a[i], b[i]}) {
                        if (t.bits) break;  // integers: compared exactly above
                        double err = std::fabs(double(g) - e.v[i]);
                        if (e.e[i] > 0) r.worst_of_bound = std::max(r.worst_of_bound, err / e.e[i]);
                        else if (err > 0) r.worst_of_bound = INFINITY;
                    }
                    if (problem.empty() && (!ok_a || !ok_b))
                        problem = fmt::format("{}: ptx {} reference {} float64 {:.9g} (bound {:.3g})", coords(t, i),
                                              show(a[i]), show(b[i]), e.v[i], e.e[i]);
                }
                if (!problem.empty() && r.mismatches.size() < opt.max_mismatches) r.mismatches.push_back(problem);
            }
        }
        if (on_result) on_result(r);
        results.push_back(std::move(r));
    }
    return results;
}

std::string format_result(const CaseResult& r) {
    std::string f64 = r.f64_fail_ptx || r.f64_fail_ref
                          ? fmt::format("f64 FAIL (ptx {}, reference {})", r.f64_fail_ptx, r.f64_fail_ref)
                          : fmt::format("f64 ok (worst {:.2f} of bound)", r.worst_of_bound);
    if (r.kink_skipped)
        f64 += fmt::format(", {} the reference cannot tell skipped (a ReLU kink, a pool's near-tie)", r.kink_skipped);
    const std::string ulp = r.max_ulp == UINT64_MAX ? std::string("NaN") : std::to_string(r.max_ulp);
    std::string line = fmt::format("{:<13} {:<32} max|diff| {:<9.3g} max ULP {:<4} unwritten {}/{}  {}  {}", r.c.entry,
                                   shape_text(r.c), r.max_abs, ulp, r.unwritten_ptx, r.unwritten_ref, f64,
                                   r.pass() ? "PASS" : "FAIL");
    for (const auto& m : r.mismatches) line += "\n    " + m;
    return line;
}

}  // namespace ptxlab
