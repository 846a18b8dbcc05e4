// ptx/tcstep.ptx: tc_step, whole MLP training steps in one 16-block cluster on the tensor cores
// (TF32 mma.sync; tcstep.hpp). Shape: B,I,H,O,loss,optim (fused_step's codes, recipe.hpp
// optim_code; ReLU only, no act).
// Its harness is fused_step's (family_step.cpp) with TF32 bounds for its two products.
#include "recipe.hpp"
#include "registry.hpp"
#include "tcstep.hpp"

namespace ptxlab::verify_detail {

namespace {

void validate_tc_step(const VerifyCase& c) {
    validate_named_shape(c);
    if (std::string why = tc_step_unfit(c.shape[0], c.shape[1], c.shape[2], c.shape[3]); !why.empty())
        PTXLAB_THROW(InputError, "kernel 'tc_step': {}", why);
}

// The MNIST sizes with CE and Nesterov (the default recipe), Adam, and MSE with plain SGD; a
// batch of 1; odd sizes (I = 300: 24 columns a block, 13 blocks with columns; H = 72: 9 blocks
// with units; O = 7) with RMSprop; 5 x 13 x 9 x 3 (two blocks with columns, single-float copies,
// a part-empty unit block) with AdamW; the limits (I = 896, O = 16) with momentum; NAdam on the
// MNIST sizes with CE (with weight decay) and on 5 x 13 x 9 x 3 with MSE (without: random_optim).
std::vector<VerifyCase> tcstep_default_cases() {
    std::vector<VerifyCase> v;
    for (const std::vector<unsigned>& s : std::vector<std::vector<unsigned>>{
             {64, 784, 128, 10, 1, 2}, {64, 784, 128, 10, 1, 3}, {64, 784, 128, 10, 0, 0}, {1, 784, 128, 10, 1, 2},
             {37, 300, 72, 7, 1, 5}, {5, 13, 9, 3, 0, 4}, {64, 896, 128, 16, 1, 1}, {1, 1, 1, 1, 1, 2},
             {64, 784, 128, 10, 1, 6}, {5, 13, 9, 3, 0, 6}})
        v.push_back({"tc_step", s});
    return v;
}

std::vector<VerifyCase> tcstep_quick_cases() { return {{"tc_step", {37, 300, 72, 7, 1, 5}}}; }

// bench: the default recipe's step (cross-entropy, Nesterov) at batches up to 64 (one cluster).
BenchShape tcstep_bench_shape(unsigned B) {
    if (!tc_step_unfit(B, kBenchI, kBenchH, kBenchO).empty()) return std::nullopt;
    return std::vector<unsigned>{B, kBenchI, kBenchH, kBenchO, kLossSoftmax, optim_code(OptimKind::Nesterov)};
}

}  // namespace

const KernelFamily& tcstep_family() {
    static const KernelFamily f{
        "tcstep",
        {"tcstep"},
        {{.entry = "tc_step",
          .shape = "B,I,H,O,loss,optim",
          .validate = validate_tc_step,
          .harness = [](const VerifyCase& c, Rng& rng) { return make_step_harness(c, rng, true); },
          .bench_shape = tcstep_bench_shape,
          .work = step_work}},
        tcstep_default_cases,
        tcstep_quick_cases};
    return f;
}

namespace {
const FamilyRegistration kRegistered{tcstep_family, 100, 70};  // default set, quick set (registry.hpp)
}  // namespace

}  // namespace ptxlab::verify_detail
