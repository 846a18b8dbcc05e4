#include "optim.hpp"

#include "error.hpp"

namespace ptxlab {

const char* optimizer_entry(OptimKind k) {
    switch (k) {
        case OptimKind::Sgd:
        case OptimKind::Momentum:
        case OptimKind::Nesterov: return "optim_sgd";
        case OptimKind::Adam:
        case OptimKind::AdamW:
        case OptimKind::NAdam: return "optim_adam";
        case OptimKind::RmsProp: return "optim_rmsprop";
    }
    PTXLAB_THROW(Error, "internal error: unknown optimizer kind {}", static_cast<int>(k));
}

void launch_optimizer(const KernelSet& ks, const OptimConfig& o, CUdeviceptr P, CUdeviceptr G, CUdeviceptr M,
                      CUdeviceptr V, CUdeviceptr hyp, unsigned N, CUstream s) {
    const Kernel& k = ks.get(optimizer_entry(o.kind));
    const unsigned grid = grid_for(N), block = 256;
    auto need = [&](CUdeviceptr buf, const char* name) {
        if (buf == 0)
            PTXLAB_THROW(Error, "internal error: '{}' (optimizer kind {}) launched without its buffer {}",
                         optimizer_entry(o.kind), static_cast<int>(o.kind), name);
    };
    need(hyp, "hyp");
    switch (o.kind) {
        case OptimKind::Sgd:  // no momentum: M is never read (momentum 0)
            k.launch(grid, block, s, P, G, CUdeviceptr(0), hyp, N, 0.0f, o.weight_decay, 0u);
            break;
        case OptimKind::Momentum:
        case OptimKind::Nesterov:
            need(M, "M");
            // A momentum of 0 would leave M untouched: the same as plain SGD.
            k.launch(grid, block, s, P, G, M, hyp, N, o.momentum, o.weight_decay,
                     o.kind == OptimKind::Nesterov ? 1u : 0u);
            break;
        case OptimKind::Adam:
        case OptimKind::AdamW:
        case OptimKind::NAdam:
            need(M, "M");
            need(V, "V");
            // optim_adam's rule: 0 Adam, 1 AdamW, 2 NAdam.
            k.launch(grid, block, s, P, G, M, V, hyp, N, o.beta1, o.beta2, o.eps, o.weight_decay,
                     o.kind == OptimKind::AdamW ? 1u : o.kind == OptimKind::NAdam ? 2u : 0u);
            break;
        case OptimKind::RmsProp:
            need(V, "V");
            k.launch(grid, block, s, P, G, V, hyp, N, o.alpha, o.eps, o.weight_decay);
            break;
    }
}

}  // namespace ptxlab
