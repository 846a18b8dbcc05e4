#include "optim.hpp"

#include "error.hpp"
#include "optimizers.hpp"

namespace ptxlab {

namespace {

// The buffers of one launch and its shape.
struct OptimLaunch {
    CUdeviceptr P, G, M, V, hyp;
    unsigned N, grid, block;
    CUstream s;
};

// One row an entry of ptx/optim.ptx: its parameter list. The optimizer's row (optimizers.cpp)
// gives the entry, which state it passes, optim_sgd's momentum and the entry's last flag
// (optimizer_kernel_args).
//   optim_sgd      P G M hyp | N | momentum weight_decay | nesterov
//   optim_adam     P G M V hyp | N | beta1 beta2 eps weight_decay | rule
//   optim_rmsprop  P G V hyp | N | alpha eps weight_decay
struct EntryLaunch {
    const char* entry;
    void (*launch)(const Kernel& k, const OptimConfig& o, const OptimKernelArgs& a, const OptimLaunch& l);
};
constexpr EntryLaunch kEntryLaunches[] = {
    {"optim_sgd",
     [](const Kernel& k, const OptimConfig& o, const OptimKernelArgs& a, const OptimLaunch& l) {
         // No momentum (plain SGD): M is never read, and momentum 0 would leave it untouched.
         k.launch(l.grid, l.block, l.s, l.P, l.G, a.m ? l.M : CUdeviceptr(0), l.hyp, l.N, a.momentum, o.weight_decay,
                  a.flag);
     }},
    {"optim_adam",
     [](const Kernel& k, const OptimConfig& o, const OptimKernelArgs& a, const OptimLaunch& l) {
         k.launch(l.grid, l.block, l.s, l.P, l.G, l.M, l.V, l.hyp, l.N, o.beta1, o.beta2, o.eps, o.weight_decay, a.flag);
     }},
    {"optim_rmsprop",
     [](const Kernel& k, const OptimConfig& o, const OptimKernelArgs&, const OptimLaunch& l) {
         k.launch(l.grid, l.block, l.s, l.P, l.G, l.V, l.hyp, l.N, o.alpha, o.eps, o.weight_decay);
     }},
};

const EntryLaunch& entry_launch(const char* entry) {
    for (const EntryLaunch& e : kEntryLaunches)
        if (std::string(e.entry) == entry) return e;
    PTXLAB_THROW(Error, "internal error: no launch for the optimizer entry '{}'", entry);
}

}  // namespace

const char* optimizer_entry(OptimKind k) { return optimizer_row(k).entry; }

void launch_optimizer_kernel(const Kernel& k, const OptimConfig& o, CUdeviceptr P, CUdeviceptr G, CUdeviceptr M,
                             CUdeviceptr V, CUdeviceptr hyp, unsigned N, CUstream s) {
    const OptimKernelArgs a = optimizer_kernel_args(o);
    auto need = [&](bool used, CUdeviceptr buf, const char* name) {
        if (used && buf == 0)
            PTXLAB_THROW(Error, "internal error: '{}' (optimizer kind {}) launched without its buffer {}", a.entry,
                         static_cast<int>(o.kind), name);
    };
    need(true, hyp, "hyp");
    need(a.m, M, "M");
    need(a.v, V, "V");
    entry_launch(a.entry).launch(k, o, a, {P, G, M, V, hyp, N, grid_for(N), 256, s});
}

void launch_optimizer(const KernelSet& ks, const OptimConfig& o, CUdeviceptr P, CUdeviceptr G, CUdeviceptr M,
                      CUdeviceptr V, CUdeviceptr hyp, unsigned N, CUstream s) {
    launch_optimizer_kernel(ks.get(optimizer_entry(o.kind)), o, P, G, M, V, hyp, N, s);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // P G M hyp | N | momentum weight_decay | nesterov
    {"optim_sgd", "optim", {P, P, P, P, U, F, F, U}},
    // P G M V hyp | N | beta1 beta2 eps weight_decay | decoupled
    {"optim_adam", "optim", {P, P, P, P, P, U, F, F, F, F, U}},
    // P G V hyp | N | alpha eps weight_decay
    {"optim_rmsprop", "optim", {P, P, P, P, U, F, F, F}},
};
}  // namespace

}  // namespace ptxlab
