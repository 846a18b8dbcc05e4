// The kernels the host launches, and the two sets that provide them.
//
// Each kernel file is a pair: ptx/NAME.ptx (hand-written) and its CUDA C twin
// ptx/reference/NAME.cu (compiled by NVRTC). The host finds pairs by file name.
// kernel_specs() lists every entry the host launches with the parameter types it
// passes; a loaded module whose entry differs is refused before any launch. Each family's
// host module (host/kernels/FAMILY.cpp, beside its launchers) registers its entries with a
// KernelSpecs object; no list names them all.
#pragma once

#include "compile.hpp"
#include "cuda.hpp"

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ptxlab {

// TensorMap: a CUtensorMap passed by value (`.param .align 64 .b8 NAME[128]`: dense_wg_k's TMA maps).
enum class ParamKind { Ptr, U32, F32, TensorMap };
std::string ptx_type(ParamKind k);  // ".u64", ".u32", ".f32", ".b8[128]"

struct KernelSpec {
    std::string entry;  // entry point name
    std::string file;   // file stem: ptx/<file>.ptx and ptx/reference/<file>.cu (kernel_twin_path)
    std::vector<ParamKind> params;
    // The one compute capability whose code the file is (major * 10 + minor; 90: sm_90a, wgmma and
    // TMA), or 0: any the set loads on. A KernelSet on another device leaves the entry out.
    int only_cc = 0;
    std::string signature() const;  // "(.u64, .u32, ...)"
};

// A module's entries, registered before main: at namespace scope in host/kernels/FAMILY.cpp,
//   const KernelSpecs kSpecs{{"bn_fwd", "bn", {P, P, ..., U}}, ...};
// (P, U, F, T from kernel_params). kernel_specs() orders them by file, then as each module
// lists them; an entry registered twice is an internal error at its first use.
struct KernelSpecs {
    KernelSpecs(std::initializer_list<KernelSpec> specs);
};
namespace kernel_params {
inline constexpr ParamKind P = ParamKind::Ptr, U = ParamKind::U32, F = ParamKind::F32, T = ParamKind::TensorMap;
}

const std::vector<KernelSpec>& kernel_specs();  // every registered entry (after main has begun)
// kernel_specs()'s rule over a list of registrations: ordered by file (stable: each module's
// order kept); an entry named twice throws Error naming both files.
std::vector<KernelSpec> ordered_kernel_specs(std::vector<KernelSpec> registered);
const KernelSpec& kernel_spec(std::string_view entry);  // throws InputError for an unknown name
// Why `spec` cannot load on a device of compute capability cc_major.cc_minor (empty when it can).
std::string kernel_arch_unfit(const KernelSpec& spec, int cc_major, int cc_minor);

// Where the kernel files live. Defaults: $PTXLAB_PTX_DIR, else the source tree's ptx/;
// the twins in <ptx_dir>/reference unless $PTXLAB_REFERENCE_DIR says otherwise.
struct KernelDirs {
    std::string ptx_dir;
    std::string reference_dir;
    static KernelDirs from_environment();
    static KernelDirs from_ptx_dir(const std::string& ptx_dir);  // reference dir = <ptx_dir>/reference
    // A command's --ptx-dir (train, bench, eval; check and verify read it the same way): the
    // .ptx files from DIR, which must be a directory; the twins stay in the reference directory
    // of from_environment(). An empty DIR gives from_environment().
    static KernelDirs for_ptx_dir_flag(const std::string& dir);
};

// A kernel pair found on disk.
struct KernelPair {
    std::string stem;
    std::string ptx_path, reference_path;  // reference_path empty when the twin is missing
};
std::vector<KernelPair> find_kernel_pairs(const KernelDirs& dirs);
// A spec's files: <ptx_dir>/<file>.ptx; the twin <reference_dir>/<file>.cu, and for a file in a
// subdirectory (hopper/densewgk) where that is missing, the tree's layout: the twin beside its
// contract header's `twin reference/NAME.cu`, <reference_dir>/../hopper/reference/densewgk.cu.
std::string kernel_ptx_path(const KernelDirs& dirs, const std::string& file);
std::string kernel_twin_path(const KernelDirs& dirs, const std::string& file);

enum class KernelSource { Ptx, Reference };
KernelSource parse_kernel_source(const std::string& name);  // "ptx" | "reference"
std::string to_string(KernelSource s);

// How a training step is built: Seed is the notebook's design (per-sample gradients,
// forward/grad/update, one thread per sample); Fast the same per-sample-gradient design
// with many threads per sample (fused_forward, fused_output, outer, batch_mean); Fused
// computes the batch gradient directly (fused.ptx: three launches a step).
enum class Design { Seed, Fast, Fused, Tc };
// Fast, Fused and Tc run the forward pass with fused_output on the hidden layer's activations
// (2 layers only): Fast and Fused make them with fused_forward, Tc with tc_forward (TF32
// mma.sync).
inline bool uses_fused_forward(Design d) { return d != Design::Seed; }
// A --kernels choice: ptx, reference (Seed); fast, fast-reference (Fast); fused,
// fused-reference (Fused); tc, tc-reference (Tc).
struct KernelChoice {
    Design design = Design::Fused;
    KernelSource source = KernelSource::Ptx;
    // The tensor-core set on BF16 inputs (tc-bf16): the _bf16 entries of ptx/tcbf16.ptx stand in
    // for tc_forward, tc_grad_input and tc_grad_weights (with_precision, use_precision below).
    bool bf16 = false;
    bool operator==(const KernelChoice&) const = default;
};
KernelChoice parse_kernel_choice(const std::string& name);
std::string to_string(KernelChoice k);

// Compares the entries of a parsed module with kernel_specs(); returns one message per
// problem ("file:line: entry 'grad2' takes (...) but the host launches it with (...)").
std::vector<std::string> check_against_specs(const PtxInfo& info, const std::string& path, const std::string& stem);

// Maps a C++ argument type to the PTX parameter kind it becomes.
template <class T> constexpr ParamKind param_kind_of() {
    if constexpr (std::is_same_v<T, CUdeviceptr>) return ParamKind::Ptr;
    else if constexpr (std::is_same_v<T, unsigned>) return ParamKind::U32;
    else if constexpr (std::is_same_v<T, float>) return ParamKind::F32;
    else if constexpr (std::is_same_v<T, CUtensorMap>) return ParamKind::TensorMap;
    else static_assert(sizeof(T) == 0, "kernel arguments are CUdeviceptr, unsigned or float");
}

// Launches made by this thread while a ScopedLaunchPriority lives carry the launch attribute
// CU_LAUNCH_ATTRIBUTE_PRIORITY: among blocks waiting for an SM, those of a lower (greater)
// priority value go first, as with stream priorities; a captured graph keeps it per node
// (Graph instantiates with CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY). The CNN step gives
// its main chain the greatest priority, so the weight gradients on its side stream take what
// the chain leaves idle instead of delaying it.
class ScopedLaunchPriority {
public:
    explicit ScopedLaunchPriority(int priority);
    ~ScopedLaunchPriority();
    ScopedLaunchPriority(const ScopedLaunchPriority&) = delete;
    ScopedLaunchPriority& operator=(const ScopedLaunchPriority&) = delete;
    static int current();  // 0 (the default, the least priority) outside any guard
    static int greatest();  // the device's greatest priority (cuCtxGetStreamPriorityRange), e.g. -5

private:
    int saved_;
};

struct Kernel {
    CUfunction fn = nullptr;
    const KernelSpec* spec = nullptr;
    std::string origin;  // the file it came from, for messages
    mutable int max_clusters = 0;  // resident_clusters' answer, asked once (0: not yet)
    mutable unsigned smem_optin = 48 * 1024;  // dynamic shared memory the function may take (raised on demand)

    // How many clusters of `cluster` blocks of `block` threads with `smem` bytes of dynamic shared
    // memory can be resident at once (cuOccupancyMaxActiveClusters, the cluster size given as a
    // launch attribute unless the kernel `fixed` it with .reqnctapercluster), asked once and kept;
    // the opt-in for `smem` is raised first. A one-launch step's grid barrier needs every cluster
    // of its launch resident. Throws Error, with `hint` at the end, if not even one fits.
    unsigned resident_clusters(unsigned cluster, unsigned block, unsigned smem, bool fixed,
                               std::string_view hint = {}) const;

    // Launches on a 1-D grid; the argument types must match the spec exactly.
    template <class... A> void launch(unsigned grid, unsigned block, CUstream stream, A... args) const {
        launch_checked(false, grid, block, 0, stream, args...);
    }
    // The same with `smem` bytes of dynamic shared memory; above 48 KB the function's
    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES is raised first (conv_bwd_weights).
    template <class... A> void launch_smem(unsigned grid, unsigned block, unsigned smem, CUstream stream, A... args) const {
        launch_checked(false, grid, block, smem, stream, args...);
    }
    // The same as a programmatic dependent launch (below) where `overlapped` (fused_output).
    template <class... A>
    void launch_smem_overlapped(unsigned grid, unsigned block, unsigned smem, bool overlapped, CUstream stream,
                                A... args) const {
        launch_checked(overlapped, grid, block, smem, stream, args...);
    }
    // The same, as a programmatic dependent launch (sm_90): the kernel may be scheduled
    // while the previous kernel in the stream still runs, and must execute
    // `griddepcontrol.wait` before it touches memory that kernel reads or writes.
    template <class... A> void launch_overlapped(unsigned grid, unsigned block, CUstream stream, A... args) const {
        launch_checked(true, grid, block, 0, stream, args...);
    }
    // A launch in thread-block clusters of `cluster` blocks (sm_90; grid a multiple of it),
    // given by the launch attribute CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION for a kernel that
    // fixes none (dense_mm); `overlapped` as launch_overlapped.
    template <class... A>
    void launch_cluster(unsigned grid, unsigned block, unsigned cluster, bool overlapped, CUstream stream,
                        A... args) const {
        launch_cluster_smem(grid, block, cluster, 0, overlapped, stream, args...);
    }
    // The same with `smem` bytes of dynamic shared memory, the opt-in raised above 48 KB as in
    // launch_smem (dense_tc's three stages).
    template <class... A>
    void launch_cluster_smem(unsigned grid, unsigned block, unsigned cluster, unsigned smem, bool overlapped,
                             CUstream stream, A... args) const {
        static constexpr ParamKind kinds[] = {param_kind_of<A>()...};
        check_args(kinds, sizeof...(A));
        void* params[] = {static_cast<void*>(&args)...};
        launch_raw(grid, block, smem, stream, params, overlapped, cluster);
    }
    // The same on a 2-D grid (grid_x a multiple of `cluster`; dense_wg_k: ranks x column tiles, row
    // tiles); a CUtensorMap argument becomes the kernel's 128-byte parameter (the arguments are taken
    // by reference: an over-aligned struct is not passed by value).
    template <class... A>
    void launch_cluster_2d(unsigned grid_x, unsigned grid_y, unsigned block, unsigned cluster, unsigned smem,
                           bool overlapped, CUstream stream, const A&... args) const {
        static constexpr ParamKind kinds[] = {param_kind_of<A>()...};
        check_args(kinds, sizeof...(A));
        void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};
        launch_raw(grid_x, block, smem, stream, params, overlapped, cluster, grid_y);
    }

private:
    template <class... A>
    void launch_checked(bool overlapped, unsigned grid, unsigned block, unsigned smem, CUstream stream,
                        A... args) const {
        static constexpr ParamKind kinds[] = {param_kind_of<A>()...};
        check_args(kinds, sizeof...(A));
        void* params[] = {static_cast<void*>(&args)...};
        launch_raw(grid, block, smem, stream, params, overlapped);
    }
    void check_args(const ParamKind* kinds, size_t n) const;
    void launch_raw(unsigned grid, unsigned block, unsigned smem, CUstream stream, void** params,
                    bool overlapped, unsigned cluster = 0, unsigned grid_y = 1) const;
};

// Why a KernelSet of `source` from `dirs` on `dev` leaves `s` out (empty: it loads it): code for
// another compute capability (only_cc), or such a file missing from the directory.
std::string kernel_absent_reason(const KernelSpec& s, KernelSource source, const DeviceInfo& dev,
                                 const KernelDirs& dirs);

// One loaded set of kernels: the hand-written PTX or the NVRTC twins, JIT-loaded by the driver.
class KernelSet {
public:
    // Loads the files that provide `entries` (all known entries when empty); an entry whose spec
    // names another compute capability (only_cc) is left out: has() is false, get() says why.
    KernelSet(KernelSource source, const DeviceInfo& dev, const KernelDirs& dirs,
              const std::vector<std::string>& entries = {});
    const Kernel& get(std::string_view entry) const;
    bool has(std::string_view entry) const { return kernels_.find(entry) != kernels_.end(); }
    // Why an entry asked for was left out (empty where it was loaded or not asked for).
    std::string absent_reason(std::string_view entry) const {
        auto it = absent_.find(entry);
        return it == absent_.end() ? std::string() : it->second;
    }
    // From now on get(name) returns the loaded `entry` (tc-bf16: tc_forward -> tc_forward_bf16).
    void alias(std::string_view name, std::string_view entry);
    KernelSource source() const { return source_; }
    double load_ms() const { return load_ms_; }  // NVRTC + JIT time
    // The NVRTC program logs and JIT info logs, by file.
    const std::map<std::string, std::string>& logs() const { return logs_; }

private:
    KernelSource source_;
    std::vector<std::unique_ptr<Module>> modules_;
    std::map<std::string, Kernel, std::less<>> kernels_;
    std::map<std::string, std::string> logs_;
    std::map<std::string, std::string, std::less<>> absent_;  // entry -> why this device leaves it out
    double load_ms_ = 0;
};

// The entries a set needs under its precision: with k.bf16, tc_forward, tc_grad_input and
// tc_grad_weights become their _bf16 twins (ptx/tcbf16.ptx); other names stay.
std::vector<std::string> with_precision(std::vector<std::string> entries, const KernelChoice& k);
// After loading with_precision's entries: get("tc_forward") and the others return the _bf16
// kernels, so that the launch code is the same for both precisions. No-op without k.bf16.
void use_precision(KernelSet& ks, const KernelChoice& k);

// A 1-D launch of `grid` blocks of `block` threads with `smem` bytes of dynamic shared memory
// on `stream`, no attributes: for cuLaunchKernelEx and cuOccupancyMaxActiveClusters.
inline CUlaunchConfig launch_config_1d(unsigned grid, unsigned block, unsigned smem = 0, CUstream stream = nullptr) {
    CUlaunchConfig cfg{};
    cfg.gridDimX = grid;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = block;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = smem;
    cfg.hStream = stream;
    return cfg;
}

// Blocks of 256 threads covering n threads.
inline unsigned grid_for(size_t n, unsigned block = 256) {
    return static_cast<unsigned>((n + block - 1) / block);
}

}  // namespace ptxlab
