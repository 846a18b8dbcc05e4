// The optimizer table: everything the host knows about an optimizer, one row each
// (optimizers.cpp, kOptimizers), in the order of the optimizer codes (OptimKind, recipe.hpp: the
// kernels take those numbers). Its name and --help line, the state it keeps, the flags that apply,
// the separate-launch kernel (ptx/optim.ptx) and the flag or rule that kernel takes, verify's
// variants of that kernel, how weight decay enters, the per-step constants (step_hyper), the
// float64 rule and its rounding bound: recipe.hpp's optimizer functions, the launch
// (kernels/optim.cpp), verify (family_optim.cpp, family_step.cpp) and train's --help read it.
//
// A new optimizer on the host: its row, its float64 rule and rounding bound (two functions next to
// the table), a describe() note or a step_hyper function where it needs one. On the device: its
// rule in ptx/optim.ptx (or a new entry, with its launch in kernels/optim.cpp and its verify row in
// family_optim.cpp) and in that file's optimizer_update and optimizer_state, which step.ptx and
// tcstep.ptx link (no edit there); its twin in ptx/reference/recipe.cuh.
#pragma once

#include "bounded_ops.hpp"
#include "recipe.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ptxlab {

// The optimizer flags besides --lr and --weight-decay that an optimizer reads (a bit set).
enum OptimFlag : unsigned { kFlagMomentum = 1, kFlagBetas = 2, kFlagEps = 4, kFlagAlpha = 8 };

// A variant of a separate-launch kernel in verify (--kernel optim_adam --shape N,VARIANT): its
// number in the entry's list, its name, and whether it runs with weight decay.
struct OptimVariant {
    unsigned index = 0;
    const char* name = nullptr;  // null: no variant
    bool weight_decay = false;
};

// Which of the one-launch steps' verify cases (family_step.cpp random_optim) run with weight
// decay: none, all, or those with the CE loss (loss code 1; the default cases run every optimizer
// with both losses, so such an optimizer is checked both ways).
enum class StepCaseDecay { Off, On, CeOnly };

// What one float64 step reads (optim_step): the constants as doubles, the 1-based step t, and
// Adam's bias corrections 1 - b1^t and sqrt(1 - b2^t).
struct OptimStep64 {
    double lr;
    uint64_t t;
    double mu, wd, b1, b2, eps, alpha, bc1, bc2_sqrt;
};

// What one element's rounding bound reads (ref_optim_bounded): the constants and this step's
// record, exact float32 values.
struct OptimBoundConsts {
    bounded::BV one, mu, eps, b1, b2, alpha, lr, step, bc2;
};
// One element in and out of a rule's bound: the parameter and gradient (weight decay already
// applied: coupled into g, decoupled into p) and the state it keeps.
struct OptimBoundState {
    bounded::BV p, g, m, v;
};

struct OptimizerRow {
    OptimKind kind() const;      // its code: the row's index in the table (an internal error for a copy)
    const char* name;            // --optimizer NAME, and describe()'s first word
    const char* torch;           // --help: the torch.optim class (and notes); rows in a row with the same text share it
    bool m, v;                   // the state kept: m (first moment or momentum), v (second moment)
    unsigned flags;              // OptimFlag: the flags that apply
    bool decoupled;              // weight decay p *= 1 - lr wd first (AdamW), not g += wd p
    const char* note;            // describe(): appended inside its parentheses, or ""
    const char* entry;           // its entry of ptx/optim.ptx
    unsigned entry_flag;         // the last parameter of that entry: optim_sgd's nesterov, optim_adam's rule
    OptimVariant plain, decayed;  // verify's variants of the entry without and with weight decay
    StepCaseDecay step_decay;    // family_step.cpp random_optim
    // step_hyper's record where it is not the default {lr, lr/(1-b1^t), sqrt(1-b2^t), 1-lr wd}
    // (null: the default): it overwrites the fields that differ.
    void (*hyper)(const OptimConfig& o, double lr, uint64_t t, StepHyper& h);
    // The float64 rule (optim_step) on n parameters; m, v non-null where the row keeps them.
    void (*rule)(const OptimStep64& s, double* p, const double* g, double* m, double* v, size_t n);
    // The kernel's instruction sequence for one element, as bounded operations (ref_optim_bounded).
    void (*bound)(const OptimBoundConsts& c, OptimBoundState& s);
};

// Every row, in code order (rows()[c].kind() == OptimKind(c)).
std::span<const OptimizerRow> optimizer_rows();
const OptimizerRow& optimizer_row(OptimKind k);

// The arguments of the separate-launch kernel besides the buffers and the constants of
// OptimConfig: what kernels/optim.cpp passes.
struct OptimKernelArgs {
    const char* entry;
    bool m, v;        // M and V passed (0 otherwise)
    float momentum;   // optim_sgd's mu: o.momentum where the row reads --momentum, else 0
    unsigned flag;    // optim_sgd's nesterov, optim_adam's rule (optim_rmsprop takes none)
};
OptimKernelArgs optimizer_kernel_args(const OptimConfig& o);

// The entries of the separate-launch kernels, in table order ("optim_sgd", "optim_adam", ...).
std::vector<std::string> optimizer_entries();
// An entry's verify variants by number (their names), and the row and weight decay of one.
std::vector<std::string> optimizer_variant_names(const std::string& entry);
struct OptimVariantOf {
    const OptimizerRow* row;
    bool weight_decay;
};
OptimVariantOf optimizer_variant(const std::string& entry, unsigned index);  // throws Error when none
// The first row of an entry's flag or rule (optim_adam's rule 2: nadam); throws Error when none.
const OptimizerRow& optimizer_of_entry(const std::string& entry, unsigned flag);

// --help: "sgd, momentum, nesterov (torch.optim.SGD), adam (torch.optim.Adam), ...".
std::string optimizer_help();
// The names of the optimizers that read a flag (OptimFlag), "adam, adamw, nadam"; with decoupled
// weight decay when flag is 0 and decoupled is true.
std::string optimizers_with(unsigned flag, bool decoupled = false);
// Why `flag` (--momentum, --beta1, --beta2, --eps, --alpha), given on the command line, does not
// apply to optimizer k ("--beta1 does not apply to --optimizer sgd: it sets adam, adamw, nadam");
// empty when it applies or is not one of these flags.
std::string optimizer_flag_unused(OptimKind k, const std::string& flag);

}  // namespace ptxlab
