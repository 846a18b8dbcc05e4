// ptxlab verify: every kernel pair (hand-written PTX vs its NVRTC twin) run on
// identical fresh random inputs, outputs poisoned before each launch, compared
// element by element with each other (bits, ULPs) and with the float64
// reference (within its error bound, see reference.hpp).
#pragma once

#include "cuda.hpp"
#include "kernels.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ptxlab {

// The NaN bit pattern written into every output before a launch; an element
// still holding it afterwards was never written.
inline constexpr uint32_t kPoison = 0xFFBADBADu;
// Every tensor sits between two guard bands of kGuardFloats words set to kGuard; a kernel
// that writes into one wrote out of bounds (before the start or past the end).
inline constexpr uint32_t kGuard = 0xFFC0FFEEu;
inline constexpr size_t kGuardFloats = 4096;

// Distance in units in the last place between two floats (0 for +0 vs -0);
// UINT64_MAX when either is NaN and they differ.
uint64_t ulp_distance(float a, float b);

struct VerifyCase {
    std::string entry;
    std::vector<unsigned> shape;  // as shape_names() names it, e.g. forward2: B,I,H,O; grad2: B,I,H,O,loss;
                                  // batch_mean: N,B; optim_*: N,variant
};

// The shape arguments each kernel takes, e.g. "B,I,H,O"; with `count` the form of that many
// numbers where a kernel takes two (conv_fwd: N,C,H,W,K,KS,act or, with its pool, 8 numbers).
std::string shape_names(const std::string& entry, size_t count = 0);
// The optimizer kernels take "N,variant": the variant picks the flags. optim_sgd: 0 plain
// (no momentum, M null), 1 momentum, 2 nesterov, 3 nesterov + weight decay, 4 plain +
// weight decay; optim_adam: 0 adam, 1 adam + weight decay, 2 adamw; optim_rmsprop: 0 plain,
// 1 + weight decay. optim_variants is their count (0 for other kernels).
unsigned optim_variants(const std::string& entry);
std::string optim_variant_text(const std::string& entry, unsigned variant);  // "nesterov+wd"
std::string optim_variant_list(const std::string& entry);  // "0 plain, 1 momentum, ..."
// Throws InputError unless the case's shape fits its kernel (count, sizes >= 1, the variant).
void validate_case(const VerifyCase& c);
std::string shape_text(const VerifyCase& c);  // "B=64 I=784 H=128 O=10"
// The default set of cases: batch 1, 63, 64, 1000; widths 1, 100, 128, 300; odd sizes.
std::vector<VerifyCase> default_cases();
// A small set covering every kernel with batches 1, 63, 64 and odd widths; for slow tools
// such as compute-sanitizer.
std::vector<VerifyCase> quick_cases();

struct VerifyOptions {
    uint64_t seed = 1;
    KernelDirs ptx_dirs, reference_dirs;  // where the PTX and the twins are read from
    size_t max_mismatches = 10;
};

struct CaseResult {
    VerifyCase c;
    size_t elements = 0;          // output elements compared
    size_t unwritten_ptx = 0, unwritten_ref = 0;
    size_t differing = 0;         // elements whose bits differ between PTX and twin
    uint64_t max_ulp = 0;
    double max_abs = 0;
    size_t f64_fail_ptx = 0, f64_fail_ref = 0;
    size_t kink_skipped = 0;      // elements not compared with f64 (ReLU mask within rounding, a pool index
                                  // among window values within each other's bounds)
    size_t overrun_ptx = 0, overrun_ref = 0;  // guard words changed: writes out of bounds
    double worst_of_bound = 0;    // max |got - f64| / bound over both sets
    std::vector<std::string> mismatches;  // first few, with coordinates and both values
    // Why the case did not run (its kernel is code for another device: dense_wg_k off a 9.0 GPU);
    // such a case neither passes nor fails.
    std::string skipped;
    bool pass() const {
        return skipped.empty() && unwritten_ptx == 0 && unwritten_ref == 0 && differing == 0 && f64_fail_ptx == 0 && f64_fail_ref == 0 &&
               overrun_ptx == 0 && overrun_ref == 0;
    }
};

// Runs the cases; `on_result` sees each result as soon as it is known.
std::vector<CaseResult> run_verify(const Context& ctx, const std::vector<VerifyCase>& cases, const VerifyOptions& opt,
                                   const std::function<void(const CaseResult&)>& on_result = {});

// A case's inputs on the GPU (fresh random values, as verify makes them), ready to be
// launched again and again: what `ptxlab bench` times.
class PreparedCase {
public:
    PreparedCase(const VerifyCase& c, uint64_t seed);
    ~PreparedCase();
    void launch(const Kernel& k, CUstream s) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// One line per case: kernel, shape, max abs error, max ULP, unwritten, f64, PASS/FAIL.
std::string format_result(const CaseResult& r);

}  // namespace ptxlab
