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
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = block;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s;
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

    CUfunction gb = m.function("floor_grid_barrier");
    f.push_back({"grid barrier", fmt::format("a grid-wide barrier of {} blocks (one an SM) on a 64-bit counter", sms),
                 per_round_us(
                     [&](CUstream st, unsigned r) {
                         CU(cuMemsetD32Async, psync, 0, 2, st);
                         void* p[] = {&psync, &r};
                         launch_probe(gb, sms, 128, 0, true, st, p);
                     },
                     2000, s)});

    CUfunction cb = m.function("floor_cluster_barrier");
    f.push_back({"cluster barrier", "barrier.cluster arrive + wait, 16 clusters of 8 blocks",
                 per_round_us(
                     [&](CUstream st, unsigned r) {
                         void* p[] = {&r};
                         launch_probe(cb, 128, 128, 8, false, st, p);
                     },
                     20000, s)});

    CUfunction ds = m.function("floor_dsmem_chain");
    for (unsigned peer : {1u, 0u})
        f.push_back({peer ? "DSMEM load" : "shared load (cluster window)",
                     peer ? "a dependent ld.shared::cluster from the other block of a 2-block cluster"
                          : "a dependent ld.shared::cluster into the block's own shared memory",
                     per_round_us(
                         [&](CUstream st, unsigned r) {
                             void* p[] = {&pout, &r, &peer};
                             launch_probe(ds, 2, 32, 2, false, st, p);
                         },
                         20000, s) / 8});

    CUfunction mma = m.function("floor_mma_chain");
    f.push_back({"mma chain", "one mma.sync.m16n8k8 TF32 whose C is the previous one's D (one warp)",
                 per_round_us(
                     [&](CUstream st, unsigned r) {
                         void* p[] = {&pout, &r};
                         launch_probe(mma, 1, 32, 0, false, st, p);
                     },
                     20000, s) / 8});

    CUfunction l2 = m.function("floor_l2_chain");
    f.push_back({"L2 load", "a dependent ld.global.cg that hits L2 (one thread)",
                 per_round_us(
                     [&](CUstream st, unsigned r) {
                         void* p[] = {&pbuf, &pout, &r};
                         launch_probe(l2, 1, 32, 0, false, st, p);
                     },
                     20000, s) / 8});
    return f;
}

}  // namespace ptxlab
