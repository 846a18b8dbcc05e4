// The kernel registry: one row per kernel entry, one table per kernel family, the tables in
// one list (kernel_families()). verify and bench find everything about an entry here, by
// name: its shape's fields, how a shape is checked, the harness verify runs it in (inputs,
// float64 reference, launch), its cases, and the case and work bench times it at.
//
// Each family's table lives in its own module, host/verify/family_NAME.cpp, beside its
// harnesses and cases, and registers itself there (FamilyRegistration): no list here or in
// registry.cpp names the families. A module holds one ptx/FILE.ptx family, or a few that share
// their harness and shapes (family_mlp: forward and grad; family_conv: conv, tcconv, pool,
// tcwgrad and fc; family_tc: tc and tcbf16). A new family: its module (CMake finds it) and its
// entries' parameter lists beside its launchers (host/kernels/FAMILY.cpp, kernels.hpp's
// KernelSpecs).
#pragma once

#include "verify.hpp"
#include "verify_harness.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptxlab {

// bench: the shape a kernel is timed at, or nothing.
using BenchShape = std::optional<std::vector<unsigned>>;

struct KernelRow {
    std::string entry;
    // The shape's fields, as shape_names() gives them ("B,I,H,O,loss,act"). `shape_alt`: another
    // form, taken for a shape of its count of numbers (conv_fwd with its pool: 8 numbers).
    std::string shape;
    std::string shape_alt = {};
    // Whether a field "act" is recipe.hpp's activation code, which shape_text names ("act=4
    // (gelu)"); false where it is 0 none, 1 ReLU (the CNN and tensor-core kernels).
    bool act_named = true;
    // The optimizer kernels' variants by number (optim_variant_text); empty elsewhere.
    std::vector<std::string> variants = {};
    void (*validate)(const VerifyCase&) = nullptr;  // throws InputError unless the shape fits
    // Fresh random inputs, the float64 reference of the outputs and the launch; validated first.
    verify_detail::Harness (*harness)(const VerifyCase&, Rng&) = nullptr;
    // bench: the shape timed at batch B on the MNIST network (784-128-10); nothing where the
    // kernel takes no such batch (tc_step above 64). Null for kernels bench times only as a CNN layer.
    BenchShape (*bench_shape)(unsigned B) = nullptr;
    // bench: the least memory traffic (bytes) and the arithmetic (flops, an FMA = 2) of a case.
    std::pair<double, double> (*work)(const VerifyCase&) = nullptr;
};

struct KernelFamily {
    std::string name;                 // its module: host/verify/family_<name>.cpp
    std::vector<std::string> files;   // the ptx/<file>.ptx families it holds
    std::vector<KernelRow> rows;
    std::vector<VerifyCase> (*default_cases)() = nullptr;  // its part of default_cases(), in order
    std::vector<VerifyCase> (*quick_cases)() = nullptr;    // its part of quick_cases()
};

// A family module registers its table before main, at namespace scope:
//   const FamilyRegistration kRegistered{bn_family, 160, 140};
// `order` places the family's cases in the default set (verify --list), `quick_order` in the
// quick set (ascending; each module takes numbers no other takes: its first use checks).
struct FamilyRegistration {
    FamilyRegistration(const KernelFamily& (*table)(), int order, int quick_order);
};

// Every family, in the order of the default set (verify --list).
const std::vector<const KernelFamily*>& kernel_families();
// The family of that name (KernelFamily::name: "bn"); throws InputError for an unknown name.
const KernelFamily& kernel_family(std::string_view name);
const KernelRow* find_kernel_row(std::string_view entry);  // nullptr for an unknown entry
// Throws InputError "no verify harness for kernel 'NAME'" for an unknown entry.
const KernelRow& kernel_row(std::string_view entry);

// The shape of the MNIST network bench times the kernels on.
inline constexpr unsigned kBenchI = 784, kBenchH = 128, kBenchO = 10;

namespace verify_detail {

// dense_tc's default cases on the cp.async path with operands along rows, and its fallbacks.
std::vector<VerifyCase> densetc_fast_cases();

// The checks of a shape given by its field names (the MLP-style kernels): the count, sizes
// >= 1, and the codes named loss, optim, act and variant within their ranges.
void validate_named_shape(const VerifyCase& c);
// Whether the entry's shape holds a loss code / an activation code.
bool takes_loss_code(const std::string& entry);
bool takes_act_code(const std::string& entry);
// The default set's cases of a kernel with an activation code, at shape `s` (without its
// codes): every activation up to `last_act`; a kernel that forms output deltas too runs ReLU
// with every loss code and each other activation with one loss code, alternating with
// `n_shape`, the shape's count among the family's shapes (so that every pair runs somewhere).
void add_with_acts(std::vector<VerifyCase>& v, unsigned n_shape, const std::string& entry, std::vector<unsigned> s,
                   unsigned last_act);
// The quick set's cases of a quick shape: as it is where it names every code, else with ReLU
// and each loss code, tanh and GELU (the ex2 and the polynomial sequences) with one each.
void add_quick(std::vector<VerifyCase>& out, VerifyCase c);

}  // namespace verify_detail

}  // namespace ptxlab
