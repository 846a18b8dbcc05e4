#include "densestep.hpp"

#include "error.hpp"

#include <algorithm>

namespace ptxlab {

namespace {
unsigned div_up(unsigned a, unsigned b) { return (a + b - 1) / b; }
constexpr unsigned kMaxSize = 1u << 24;  // a width or batch the phases take (offsets stay in 64 bits)
}  // namespace

DensePhase dense_phase(const DenseArgs& a) {
    DensePhase p;
    p.op = kDensePhaseGemm;
    p.M = a.M, p.N = a.N, p.K = a.K;
    p.a_sm = a.a_sm, p.a_sk = a.a_sk, p.b_sn = a.b_sn, p.b_sk = a.b_sk;
    p.relu = a.relu;
    p.scale = a.scale;
    p.C = a.C, p.db = a.db, p.A = a.A, p.Am = a.Am, p.Bo = a.Bo, p.bias = a.bias;
    return p;
}

unsigned densestep_tiles(const DensePhase& p) {
    return div_up(std::max(p.M, 1u), kDenseStepTile) * div_up(p.N + (p.db ? 1u : 0u), kDenseStepTile);
}
unsigned densestep_ktiles(const DensePhase& p) { return div_up(p.K, kDenseStepKTile); }

unsigned densestep_slots(const DensePhase& p, unsigned cluster) {
    if (p.op != kDensePhaseGemm) return 1;
    return div_up(densestep_tiles(p), cluster / std::max(p.ksplit, 1u));
}

unsigned densestep_ksplit(unsigned tiles, unsigned ktiles, unsigned clusters, unsigned cluster) {
    unsigned best = 1;
    size_t best_cost = ~size_t(0);
    for (unsigned ks = 1; ks <= 8 && ks <= cluster; ks *= 2) {
        if (cluster % ks != 0) continue;
        const size_t rounds = div_up(div_up(tiles, cluster / ks), std::max(clusters, 1u));
        const size_t cost = rounds * div_up(std::max(ktiles, 1u), ks);
        if (cost < best_cost) best = ks, best_cost = cost;  // a tie keeps the smaller ks
    }
    return best;
}

std::string dense_net_unfit(const DenseNet& n) {
    const size_t L = n.layers();
    if (L < 2) return fmt::format("dense_program's step takes 2 layers or more, got {}", L);
    if (n.B == 0 || n.B > kMaxSize) return fmt::format("dense_program's step takes a batch of 1 .. {}, got {}", kMaxSize, n.B);
    for (unsigned w : n.sizes)
        if (w == 0 || w > kMaxSize) return fmt::format("dense_program's step takes widths of 1 .. {}, got {}", kMaxSize, w);
    if (n.loss != kLossDiff && n.loss != kLossSoftmax)
        return fmt::format("dense_program's step takes the loss code 0 or 1, got {}", n.loss);
    if (n.W.size() != L || n.b.size() != L || n.gW.size() != L || n.gb.size() != L || n.act.size() != L - 1 ||
        n.delta.size() != L - 1)
        return fmt::format("dense_program's step needs W, b, gW, gb for each of its {} layers and act, delta for "
                           "each of its {} hidden ones",
                           L, L - 1);
    if (!n.X || !n.T || !n.Y || !n.D) return "dense_program's step needs X, T, Y and D";
    for (const auto* v : {&n.W, &n.b, &n.gW, &n.gb, &n.act, &n.delta})
        if (std::count(v->begin(), v->end(), CUdeviceptr(0)) != 0) return "dense_program's step: a buffer is missing";
    return {};
}

namespace {

// A GEMM phase with its ksplit, appended; `barrier` ends the stage.
void add_gemm(std::vector<DensePhase>& v, const DenseArgs& a, bool barrier, unsigned clusters, unsigned cluster) {
    DensePhase p = dense_phase(a);
    p.ksplit = densestep_ksplit(densestep_tiles(p), densestep_ktiles(p), clusters, cluster);
    p.barrier = barrier ? 1u : 0u;
    v.push_back(p);
}

}  // namespace

std::vector<DensePhase> densestep_phases(const DenseNet& n, unsigned clusters, unsigned cluster) {
    if (std::string why = dense_net_unfit(n); !why.empty()) PTXLAB_THROW(InputError, "{}", why);
    const size_t L = n.layers();
    const unsigned B = n.B;
    std::vector<DensePhase> v;
    // Forward: act[l] = ReLU(in W^T + b); the last layer's logits Y without ReLU.
    for (size_t l = 0; l < L; ++l) {
        const CUdeviceptr in = l == 0 ? n.X : n.act[l - 1], out = l + 1 == L ? n.Y : n.act[l];
        add_gemm(v, dense_forward_args(B, n.sizes[l], n.sizes[l + 1], in, n.W[l], n.b[l], out, l + 1 < L ? 1u : 0u),
                 true, clusters, cluster);
    }
    // The loss delta D from Y and T.
    DensePhase d;
    d.op = kDensePhaseDelta;
    d.M = B, d.N = n.sizes[L];
    d.A = n.Y, d.Bo = n.T, d.C = n.D;
    d.loss = n.loss;
    d.barrier = 1;
    v.push_back(d);
    // Backward, layer l = L-1 down to 0: G = D (the last layer) or delta[l] masked by act[l]; the
    // weight gradient, then (l > 0) the deltas of the layer below, in one stage.
    for (size_t l = L; l-- > 0;) {
        const unsigned I = n.sizes[l], O = n.sizes[l + 1];
        const CUdeviceptr dY = l + 1 == L ? n.D : n.delta[l], Y = l + 1 == L ? 0 : n.act[l];
        const CUdeviceptr in = l == 0 ? n.X : n.act[l - 1];
        const unsigned act = l + 1 == L ? 0u : 1u;
        add_gemm(v, dense_bwd_weights_args(B, I, O, n.gW[l], n.gb[l], in, dY, Y, act, n.scale), l == 0, clusters,
                 cluster);
        if (l > 0) add_gemm(v, dense_bwd_data_args(B, I, O, n.delta[l - 1], dY, Y, n.W[l], act), true, clusters, cluster);
    }
    v.back().barrier = 0;  // nothing after the last phase
    // rot: a stage's later phases start on the clusters its earlier phases leave idle.
    unsigned slots = 0;
    for (DensePhase& p : v) {
        p.rot = slots;
        slots = p.barrier ? 0u : slots + densestep_slots(p, cluster);
    }
    return v;
}

unsigned densestep_clusters_wanted(const std::vector<DensePhase>& phases, unsigned cluster) {
    unsigned most = 1, stage = 0;
    for (const DensePhase& p : phases) {
        stage += densestep_slots(p, cluster);
        most = std::max(most, stage);
        if (p.barrier) stage = 0;
    }
    return most;
}

std::string dense_phases_unfit(const std::vector<DensePhase>& phases, unsigned cluster) {
    if (phases.empty()) return "dense_program takes at least one phase";
    for (size_t i = 0; i < phases.size(); ++i) {
        const DensePhase& p = phases[i];
        if (p.op != kDensePhaseGemm && p.op != kDensePhaseDelta)
            return fmt::format("dense_program: phase {} has op {} (0 GEMM, 1 the loss delta)", i, p.op);
        if (p.M == 0 || p.N == 0 || (p.op == kDensePhaseGemm && p.K == 0))
            return fmt::format("dense_program: phase {} takes M, N, K >= 1, got M={} N={} K={}", i, p.M, p.N, p.K);
        if (!p.C || !p.A || !p.Bo) return fmt::format("dense_program: phase {} needs C, A and Bo", i);
        if (p.op == kDensePhaseGemm &&
            (p.ksplit == 0 || p.ksplit > 8 || (p.ksplit & (p.ksplit - 1)) != 0 || cluster % p.ksplit != 0))
            return fmt::format("dense_program: phase {} has ksplit {} (1, 2, 4 or 8, dividing the cluster of {})", i,
                               p.ksplit, cluster);
    }
    return {};
}

unsigned densestep_max_clusters(const Kernel& k) {
    return k.resident_clusters(kDenseStepCluster, kDenseStepBlock, 0, false);
}

DenseStepPlan densestep_plan(const DenseNet& n, unsigned nominal, unsigned max_clusters) {
    DenseStepPlan p;
    p.phases = densestep_phases(n, std::max(nominal, 1u));
    p.clusters = std::min(std::max(max_clusters, 1u), densestep_clusters_wanted(p.phases));
    return p;
}

unsigned densestep_nominal_clusters() { return std::max(dense_sm_count() / kDenseStepCluster, 1u); }

void launch_dense_program(const Kernel& k, CUdeviceptr phases, unsigned nphases, unsigned clusters, CUdeviceptr sync,
                          CUstream s) {
    if (!phases || nphases == 0 || !sync)
        PTXLAB_THROW(InputError, "dense_program needs a phase table of at least one phase and a barrier count");
    const unsigned most = densestep_max_clusters(k);
    if (clusters == 0 || clusters > most)
        PTXLAB_THROW(InputError,
                     "dense_program: {} clusters of {} blocks asked; {} can be resident at once on this GPU (its grid "
                     "barrier needs them all)",
                     clusters, kDenseStepCluster, most);
    k.launch_cluster(clusters * kDenseStepCluster, kDenseStepBlock, kDenseStepCluster, false, s, phases, nphases, sync);
}

// ----------------------------------------------------------------------------
// The entries this module launches, with the parameters it passes (kernels.hpp: KernelSpecs).

namespace {
using namespace kernel_params;
const KernelSpecs kSpecs{
    // phases | nphases | sync   (densestep.hpp: a list of GEMM phases and the loss delta, grid barriers)
    {"dense_program", "densestep", {P, U, P}},
};
}  // namespace

}  // namespace ptxlab
