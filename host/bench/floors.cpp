// The hardware floors (floors.hpp): the probes of ptx/probes/floors.ptx, timed.
#include "floors.hpp"

#include "compile.hpp"
#include "error.hpp"
#include "ptx_text.hpp"

#include <algorithm>
#include <filesystem>
#include <functional>

namespace ptxlab {

namespace {

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// One launch of `fn` on `grid` blocks of `block` threads; cluster (blocks) and cooperative
// (every block resident at once) through launch attributes.
void launch_probe(CUfunction fn, unsigned grid, unsigned block, unsigned cluster, bool cooperative, CUstream s,
                  void** params) {
    CUlaunchAttribute attrs[2]{};
    unsigned n = 0;
    if (cluster != 0) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attrs[n].value.clusterDim.x = cluster;
        attrs[n].value.clusterDim.y = attrs[n].value.clusterDim.z = 1;
        ++n;
    }
    if (cooperative) {
        attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attrs[n++].value.cooperative = 1;
    }
    CUlaunchConfig cfg = launch_config_1d(grid, block, 0, s);
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    CU(cuLaunchKernelEx, &cfg, fn, params, nullptr);
}

// Milliseconds of one call of `run` (which enqueues work on s), between two events.
double time_once(const std::function<void(CUstream)>& run, CUstream s) {
    Event a, b;
    a.record(s);
    run(s);
    b.record(s);
    wait_for_stream(s);
    return b.since(a);
}

// Microseconds a round: `run(rounds)` timed at R and 2R rounds, (t(2R) - t(R)) / R, median of 5.
double per_round_us(const std::function<void(CUstream, unsigned)>& run, unsigned rounds, CUstream s) {
    run(s, rounds);  // warm-up
    wait_for_stream(s);
    std::vector<double> v;
    for (int rep = 0; rep < 5; ++rep) {
        const double t1 = time_once([&](CUstream st) { run(st, rounds); }, s);
        const double t2 = time_once([&](CUstream st) { run(st, 2 * rounds); }, s);
        v.push_back((t2 - t1) * 1e3 / rounds);
    }
    return median_of(v);
}

// Microseconds a launch of the empty kernel: `count` back-to-back launches from the stream, or
// the same launches captured as one CUDA graph and replayed; median of 5.
double launch_us(CUfunction empty, bool graph, CUstream s) {
    constexpr unsigned count = 200;
    auto enqueue = [&](CUstream st) {
        for (unsigned i = 0; i < count; ++i) launch_probe(empty, 1, 32, 0, false, st, nullptr);
    };
    std::vector<double> v;
    if (graph) {
        Graph g(s, [&] { enqueue(s); });
        g.upload(s);
        g.launch(s);
        wait_for_stream(s);
        for (int rep = 0; rep < 5; ++rep) v.push_back(time_once([&](CUstream st) { g.launch(st); }, s) * 1e3 / count);
    } else {
        enqueue(s);
        wait_for_stream(s);
        for (int rep = 0; rep < 5; ++rep) v.push_back(time_once(enqueue, s) * 1e3 / count);
    }
    return median_of(v);
}

}  // namespace

std::string floors_path(const KernelDirs& dirs) {
    return (std::filesystem::path(dirs.ptx_dir) / "probes" / "floors.ptx").string();
}

std::vector<Floor> measure_floors(const Context& ctx, const KernelDirs& dirs, CUstream s) {
    Module m(read_source_file(floors_path(dirs)));
    const unsigned sms = static_cast<unsigned>(ctx.info().sm_count);
    DeviceBuffer sync(8, "grid barrier counter"), out(4096, "probe output"), buf(256, "L2 chain cell");
    CUdeviceptr psync = sync.ptr(), pout = out.ptr(), pbuf = buf.ptr();
    std::vector<Floor> f;

    CUfunction empty = m.function("floor_empty");
    f.push_back({"launch (stream)", "an empty kernel, back-to-back launches into one stream", launch_us(empty, false, s)});
    f.push_back({"launch (graph)", "an empty kernel, a node of a CUDA graph of 200 launches", launch_us(empty, true, s)});

    // The timed probes, a row each: entry, grid, block, cluster, cooperative, the rounds timed,
    // the loads or mma a round, the name and the line that says what one of it is.
    struct Probe {
        const char* entry;
        unsigned grid, block, cluster;
        bool cooperative;
        unsigned rounds, per_round;
        std::string name, what;
        std::function<std::vector<void*>(unsigned&)> params;  // the kernel's arguments around `rounds`
    };
    unsigned peer = 1, self = 0, release = 0, shared_only = 1;
    DeviceBuffer stores(size_t(128) * 128 * 4, "barrier probe stores");
    CUdeviceptr pstores = stores.ptr();
    const std::vector<Probe> probes = {
        {"floor_grid_barrier", sms, 128, 0, true, 2000, 1, "grid barrier",
         fmt::format("a grid-wide barrier of {} blocks (one an SM) on a 64-bit counter", sms),
         [&](unsigned& r) { return std::vector<void*>{&psync, &r}; }},
        {"floor_cluster_barrier", 128, 128, 8, false, 20000, 1, "cluster barrier",
         "barrier.cluster arrive + wait, 16 clusters of 8 blocks", [&](unsigned& r) { return std::vector<void*>{&r}; }},
        {"floor_cluster_barrier_store", 128, 128, 8, false, 20000, 1, "cluster barrier after a store",
         "a global store, then barrier.cluster arrive.release + wait.acquire (waits for the store)",
         [&](unsigned& r) { return std::vector<void*>{&pstores, &r, &release}; }},
        {"floor_cluster_barrier_store", 128, 128, 8, false, 20000, 1, "cluster barrier after a store, shared-only",
         "a global store, then the sync_restrict::shared fences + arrive.relaxed + wait (fused.ptx's join)",
         [&](unsigned& r) { return std::vector<void*>{&pstores, &r, &shared_only}; }},
        {"floor_dsmem_chain", 2, 32, 2, false, 20000, 8, "DSMEM load",
         "a dependent ld.shared::cluster from the other block of a 2-block cluster",
         [&](unsigned& r) { return std::vector<void*>{&pout, &r, &peer}; }},
        {"floor_dsmem_chain", 2, 32, 2, false, 20000, 8, "shared load (cluster window)",
         "a dependent ld.shared::cluster into the block's own shared memory",
         [&](unsigned& r) { return std::vector<void*>{&pout, &r, &self}; }},
        {"floor_mma_chain", 1, 32, 0, false, 20000, 8, "mma chain",
         "one mma.sync.m16n8k8 TF32 whose C is the previous one's D (one warp)",
         [&](unsigned& r) { return std::vector<void*>{&pout, &r}; }},
        {"floor_l2_chain", 1, 32, 0, false, 20000, 8, "L2 load", "a dependent ld.global.cg that hits L2 (one thread)",
         [&](unsigned& r) { return std::vector<void*>{&pbuf, &pout, &r}; }},
    };
    for (const auto& pr : probes) {
        CUfunction fn = m.function(pr.entry);
        const bool barrier = pr.cooperative;  // the grid barrier's counter starts each launch at 0
        auto run = [&](CUstream st, unsigned r) {
            if (barrier) CU(cuMemsetD32Async, psync, 0, 2, st);
            std::vector<void*> args = pr.params(r);
            launch_probe(fn, pr.grid, pr.block, pr.cluster, pr.cooperative, st, args.data());
        };
        f.push_back({pr.name, pr.what, per_round_us(run, pr.rounds, s) / pr.per_round});
    }
    return f;
}

}  // namespace ptxlab
