#include "kernels.hpp"

#include "files.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#ifndef PTXLAB_SOURCE_DIR
#define PTXLAB_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;

namespace ptxlab {

std::string ptx_type(ParamKind k) {
    switch (k) {
        case ParamKind::Ptr: return ".u64";
        case ParamKind::U32: return ".u32";
        case ParamKind::F32: return ".f32";
        case ParamKind::TensorMap: return ".b8[128]";
    }
    return "?";
}

std::string KernelSpec::signature() const {
    std::string s = "(";
    for (size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + ptx_type(params[i]);
    return s + ")";
}

namespace {
// The entries registered so far (KernelSpecs), in registration order.
std::vector<KernelSpec>& registered_specs() {
    static std::vector<KernelSpec> specs;
    return specs;
}
}  // namespace

KernelSpecs::KernelSpecs(std::initializer_list<KernelSpec> specs) {
    for (const KernelSpec& s : specs) registered_specs().push_back(s);
}

std::vector<KernelSpec> ordered_kernel_specs(std::vector<KernelSpec> v) {
    std::stable_sort(v.begin(), v.end(), [](const KernelSpec& a, const KernelSpec& b) { return a.file < b.file; });
    for (size_t i = 1; i < v.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (v[i].entry == v[j].entry)
                PTXLAB_THROW(Error, "internal error: kernel '{}' is registered twice ({}.ptx and {}.ptx)", v[i].entry,
                             v[j].file, v[i].file);
    return v;
}

const std::vector<KernelSpec>& kernel_specs() {
    static const std::vector<KernelSpec> specs = ordered_kernel_specs(registered_specs());
    return specs;
}

const KernelSpec& kernel_spec(std::string_view entry) {
    for (const auto& s : kernel_specs())
        if (s.entry == entry) return s;
    std::string known;
    for (const auto& s : kernel_specs()) known += (known.empty() ? "" : ", ") + s.entry;
    PTXLAB_THROW(InputError, "unknown kernel '{}' (known: {})", entry, known);
}

std::string kernel_arch_unfit(const KernelSpec& spec, int cc_major, int cc_minor) {
    if (spec.only_cc == 0 || spec.only_cc == cc_major * 10 + cc_minor) return {};
    return fmt::format("'{}' ({}.ptx) is sm_{}a code or used only beside it: it runs only on a device of compute "
                       "capability {}.{}, not {}.{}",
                       spec.entry, spec.file, spec.only_cc, spec.only_cc / 10, spec.only_cc % 10, cc_major, cc_minor);
}

std::string kernel_ptx_path(const KernelDirs& dirs, const std::string& file) {
    return (fs::path(dirs.ptx_dir) / (file + ".ptx")).string();
}

std::string kernel_twin_path(const KernelDirs& dirs, const std::string& file) {
    const fs::path flat = fs::path(dirs.reference_dir) / (file + ".cu");
    const fs::path f(file);
    std::error_code ec;
    if (!f.has_parent_path() || fs::is_regular_file(flat, ec)) return flat.string();
    fs::path ref(dirs.reference_dir);
    if (!ref.has_filename()) ref = ref.parent_path();  // "ptx/reference/": its parent is still ptx/reference
    return (ref.parent_path() / f.parent_path() / "reference" / (f.filename().string() + ".cu")).string();
}

KernelDirs KernelDirs::from_ptx_dir(const std::string& ptx_dir) {
    return {ptx_dir, (fs::path(ptx_dir) / "reference").string()};
}

KernelDirs KernelDirs::for_ptx_dir_flag(const std::string& dir) {
    KernelDirs d = from_environment();
    if (dir.empty()) return d;
    require_directory(dir, "--ptx-dir");
    d.ptx_dir = dir;
    // A .ptx there that the driver's JIT would crash on (ptx_limit_problems) is refused now, before
    // the GPU is looked for; what it merely rejects is reported when a kernel set loads the file.
    for (const auto& p : find_kernel_pairs(d)) {
        SourceFile src;
        try {
            src = read_source_file(p.ptx_path);
        } catch (const InputError&) {
            continue;  // unreadable, empty, binary: named when (if) a kernel set needs it
        }
        if (auto limits = ptx_limit_problems(src.text); !limits.empty())
            PTXLAB_THROW(InputError, "{}", format_limit_problems(src, limits));
    }
    return d;
}

KernelDirs KernelDirs::from_environment() {
    // A variable that is set must name a directory: refused here, before any command goes on
    // to look for a GPU, with the variable's name (an empty one counts as unset).
    const char* p = std::getenv("PTXLAB_PTX_DIR");
    if (p && *p) require_directory(p, "PTXLAB_PTX_DIR");
    KernelDirs d = from_ptx_dir((p && *p) ? p : PTXLAB_SOURCE_DIR "/ptx");
    if (const char* r = std::getenv("PTXLAB_REFERENCE_DIR"); r && *r) {
        require_directory(r, "PTXLAB_REFERENCE_DIR");
        d.reference_dir = r;
    }
    return d;
}

std::vector<KernelPair> find_kernel_pairs(const KernelDirs& dirs) {
    std::error_code ec;
    if (!fs::is_directory(dirs.ptx_dir, ec))
        PTXLAB_THROW(InputError, "kernel directory '{}' does not exist (set --ptx-dir or PTXLAB_PTX_DIR)",
                     dirs.ptx_dir);
    std::vector<KernelPair> pairs;
    for (const auto& e : fs::directory_iterator(dirs.ptx_dir)) {
        if (!e.is_regular_file() || e.path().extension() != ".ptx") continue;
        KernelPair p;
        p.stem = e.path().stem().string();
        p.ptx_path = e.path().string();
        fs::path twin = fs::path(dirs.reference_dir) / (p.stem + ".cu");
        if (fs::is_regular_file(twin, ec)) p.reference_path = twin.string();
        pairs.push_back(p);
    }
    std::sort(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) { return a.stem < b.stem; });
    return pairs;
}

KernelSource parse_kernel_source(const std::string& name) {
    if (name == "ptx") return KernelSource::Ptx;
    if (name == "reference") return KernelSource::Reference;
    PTXLAB_THROW(InputError, "unknown kernel set '{}' (choose ptx or reference)", name);
}

std::string to_string(KernelSource s) { return s == KernelSource::Ptx ? "ptx" : "reference"; }

KernelChoice parse_kernel_choice(const std::string& name) {
    if (name == "ptx") return {Design::Seed, KernelSource::Ptx};
    if (name == "reference") return {Design::Seed, KernelSource::Reference};
    if (name == "fused") return {Design::Fused, KernelSource::Ptx};
    if (name == "fused-reference") return {Design::Fused, KernelSource::Reference};
    if (name == "fast") return {Design::Fast, KernelSource::Ptx};
    if (name == "fast-reference") return {Design::Fast, KernelSource::Reference};
    if (name == "tc") return {Design::Tc, KernelSource::Ptx};
    if (name == "tc-reference") return {Design::Tc, KernelSource::Reference};
    if (name == "tc-bf16") return {Design::Tc, KernelSource::Ptx, true};
    if (name == "tc-bf16-reference") return {Design::Tc, KernelSource::Reference, true};
    PTXLAB_THROW(InputError,
                 "unknown kernel set '{}' (choose fused, fast, tc, tc-bf16, ptx, fused-reference, fast-reference, "
                 "tc-reference, tc-bf16-reference or reference)",
                 name);
}

std::string to_string(KernelChoice k) {
    const bool ptx = k.source == KernelSource::Ptx;
    switch (k.design) {
    case Design::Fused: return ptx ? "fused" : "fused-reference";
    case Design::Fast: return ptx ? "fast" : "fast-reference";
    case Design::Tc: return k.bf16 ? (ptx ? "tc-bf16" : "tc-bf16-reference") : (ptx ? "tc" : "tc-reference");
    case Design::Seed: break;
    }
    return to_string(k.source);
}

std::vector<std::string> check_against_specs(const PtxInfo& info, const std::string& path, const std::string& stem) {
    std::vector<std::string> problems;
    for (const auto& spec : kernel_specs()) {
        // A file in a subdirectory (hopper/densewgk) is also known by its own name (check FILE).
        if (spec.file != stem && fs::path(spec.file).filename().string() != stem) continue;
        const PtxEntry* e = info.find(spec.entry);
        if (!e) {
            problems.push_back(fmt::format("{}: missing entry point '{}': the host launches `.visible .entry {}{}`",
                                           path, spec.entry, spec.entry, spec.signature()));
            continue;
        }
        std::string got = e->signature();
        if (got != spec.signature())
            problems.push_back(fmt::format("{}:{}: entry '{}' takes {} parameters {} but the host launches it with {} {}",
                                           path, e->line, spec.entry, e->params.size(), got, spec.params.size(),
                                           spec.signature()));
    }
    return problems;
}

void Kernel::check_args(const ParamKind* kinds, size_t n) const {
    bool same = n == spec->params.size() && std::equal(kinds, kinds + n, spec->params.begin());
    if (!same) {
        std::string got = "(";
        for (size_t i = 0; i < n; ++i) got += (i ? ", " : "") + ptx_type(kinds[i]);
        PTXLAB_THROW(Error, "internal error: kernel '{}' launched with {} but declared {}", spec->entry, got + ")",
                     spec->signature());
    }
}

namespace {
thread_local int t_launch_priority = 0;
}

ScopedLaunchPriority::ScopedLaunchPriority(int priority) : saved_(t_launch_priority) { t_launch_priority = priority; }
ScopedLaunchPriority::~ScopedLaunchPriority() { t_launch_priority = saved_; }
int ScopedLaunchPriority::current() { return t_launch_priority; }
int ScopedLaunchPriority::greatest() {
    int least = 0, greatest = 0;
    CU(cuCtxGetStreamPriorityRange, &least, &greatest);
    return greatest;
}

unsigned Kernel::resident_clusters(unsigned cluster, unsigned block, unsigned smem, bool fixed,
                                   std::string_view hint) const {
    if (max_clusters != 0) return unsigned(max_clusters);
    if (smem > smem_optin) {
        CU(cuFuncSetAttribute, fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem));
        smem_optin = smem;
    }
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = cluster;
    attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg = launch_config_1d(cluster, block, smem);
    if (!fixed) {
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    int n = 0;
    CU(cuOccupancyMaxActiveClusters, &n, fn, &cfg);
    if (n < 1)
        PTXLAB_THROW(Error, "kernel '{}' ({}): not even one cluster of {} blocks{} fits on this GPU{}", spec->entry,
                     origin, cluster, smem ? fmt::format(" with {} bytes of shared memory each", smem) : "", hint);
    max_clusters = n;
    return unsigned(n);
}

void Kernel::launch_raw(unsigned grid, unsigned block, unsigned smem, CUstream stream, void** params,
                        bool overlapped, unsigned cluster, unsigned grid_y) const {
    if (grid == 0 || grid_y == 0) return;  // nothing to do (an empty batch or array)
    if (smem > smem_optin) {
        CU(cuFuncSetAttribute, fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(smem));
        smem_optin = smem;
    }
    note_in_flight(fmt::format("'{}' ({})", spec->entry, origin));
    CUresult r;
    const int priority = ScopedLaunchPriority::current();
    if (cluster != 0 && grid % cluster != 0)
        PTXLAB_THROW(Error, "internal error: kernel '{}' launched on {} blocks in clusters of {}", spec->entry, grid,
                     cluster);
    if (overlapped || priority != 0 || cluster != 0) {
        CUlaunchAttribute attrs[3]{};
        unsigned n = 0;
        if (overlapped) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n++].value.programmaticStreamSerializationAllowed = 1;
        }
        if (priority != 0) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
            attrs[n++].value.priority = priority;
        }
        if (cluster != 0) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = cluster;
            attrs[n].value.clusterDim.y = attrs[n].value.clusterDim.z = 1;
            ++n;
        }
        CUlaunchConfig cfg = launch_config_1d(grid, block, smem, stream);
        cfg.gridDimY = grid_y;
        cfg.attrs = attrs;
        cfg.numAttrs = n;
        r = driver().cuLaunchKernelEx(&cfg, fn, params, nullptr);
    } else {
        r = driver().cuLaunchKernel(fn, grid, grid_y, 1, block, 1, 1, smem, stream, params, nullptr);
    }
    if (r != CUDA_SUCCESS)
        throw CudaError(r, fmt::format("launch of kernel '{}' ({}) failed: cuLaunchKernel: {}", spec->entry,
                                       origin, cu_result_text(r)),
                        source_location(__FILE__, __LINE__));
}

// Why a set leaves `s` out: code for one compute capability only (hopper/densewgk: sm_90a) on
// another device, or such a file missing from the directory (a --ptx-dir of copies of ptx/*.ptx
// alone); the trainer then keeps its other kernels. Empty: it loads.
std::string kernel_absent_reason(const KernelSpec& s, KernelSource source, const DeviceInfo& dev,
                                 const KernelDirs& dirs) {
    if (s.only_cc == 0) return {};
    if (std::string why = kernel_arch_unfit(s, dev.cc_major, dev.cc_minor); !why.empty()) return why;
    const std::string path = source == KernelSource::Ptx ? kernel_ptx_path(dirs, s.file) : kernel_twin_path(dirs, s.file);
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) return {};
    return fmt::format("'{}' is left out: {} does not exist (optional: code for one GPU only)", s.entry, path);
}

KernelSet::KernelSet(KernelSource source, const DeviceInfo& dev, const KernelDirs& dirs,
                     const std::vector<std::string>& entries)
    : source_(source) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<const KernelSpec*> wanted;
    for (const auto& s : kernel_specs())
        if (entries.empty() || std::find(entries.begin(), entries.end(), s.entry) != entries.end())
            wanted.push_back(&s);
    for (const auto& e : entries) kernel_spec(e);  // unknown names are an error
    std::erase_if(wanted, [&](const KernelSpec* s) {
        std::string why = kernel_absent_reason(*s, source, dev, dirs);
        if (why.empty()) return false;
        absent_[s->entry] = std::move(why);
        return true;
    });
    // fused_forward, fused_step, conv_bwd_weights and tc_conv_bwd_weights run as 8-block thread-block clusters
    // (.reqnctapercluster), tc_step as one of 16 and fc3_step as clusters of 4: new in sm_90.
    if (dev.cc_major < 9 && std::any_of(wanted.begin(), wanted.end(), [](const KernelSpec* s) {
            return s->file == "fused" || s->file == "step" || s->file == "conv" || s->file == "tcwgrad" ||
                   s->file == "tcstep" || s->file == "dense" || s->file == "densetc" ||
                   s->file == "densestep" || s->file == "fc3step";
        }))
        PTXLAB_THROW(InputError,
                     "the fused kernels use thread-block clusters, which need sm_90 or newer; {} is {} "
                     "(use --kernels ptx)",
                     dev.name, dev.arch());

    std::vector<std::string> files;
    for (const auto* s : wanted)
        if (std::find(files.begin(), files.end(), s->file) == files.end()) files.push_back(s->file);

    for (const auto& stem : files) {
        SourceFile src;
        if (source == KernelSource::Ptx) {
            src = read_source_file(kernel_ptx_path(dirs, stem));
        } else {
            SourceFile cu = read_source_file(kernel_twin_path(dirs, stem));
            NvrtcOutput out = nvrtc_compile(cu, dev.virtual_arch());
            if (!out.log.empty()) logs_[cu.path] += "NVRTC log:\n" + out.log + "\n";
            src = {cu.path + " (NVRTC PTX)", out.ptx};
        }
        auto problems = check_against_specs(parse_ptx(src.text), src.path, stem);
        // Only the entries this set was asked for must be right.
        std::erase_if(problems, [&](const std::string& p) {
            return std::none_of(wanted.begin(), wanted.end(), [&](const KernelSpec* s) {
                return p.find("'" + s->entry + "'") != std::string::npos;
            });
        });
        if (!problems.empty()) {
            std::string msg;
            for (const auto& p : problems) msg += p + "\n";
            PTXLAB_THROW(PtxError, "{}", msg.substr(0, msg.size() - 1));
        }
        modules_.push_back(std::make_unique<Module>(src));
        if (!modules_.back()->info_log().empty()) logs_[src.path] += modules_.back()->info_log();
        for (const auto* s : wanted) {
            if (s->file != stem) continue;
            kernels_[s->entry] = Kernel{modules_.back()->function(s->entry), s, src.path};
        }
    }
    load_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

const Kernel& KernelSet::get(std::string_view entry) const {
    auto it = kernels_.find(entry);
    if (it != kernels_.end()) return it->second;
    if (auto a = absent_.find(entry); a != absent_.end()) PTXLAB_THROW(InputError, "{}", a->second);
    PTXLAB_THROW(Error, "internal error: kernel '{}' was not loaded", entry);
}

void KernelSet::alias(std::string_view name, std::string_view entry) {
    const Kernel k = get(entry);
    kernels_.insert_or_assign(std::string(name), k);
}

namespace {
constexpr const char* kTcBf16Names[] = {"tc_forward", "tc_grad_input", "tc_grad_weights"};
}

std::vector<std::string> with_precision(std::vector<std::string> entries, const KernelChoice& k) {
    if (!k.bf16) return entries;
    for (std::string& e : entries)
        for (const char* n : kTcBf16Names)
            if (e == n) e += "_bf16";
    return entries;
}

void use_precision(KernelSet& ks, const KernelChoice& k) {
    if (!k.bf16) return;
    for (const char* n : kTcBf16Names) {
        const std::string twin = std::string(n) + "_bf16";
        try {
            ks.get(twin);
        } catch (const Error&) {
            continue;  // not among the set's entries
        }
        ks.alias(n, twin);
    }
}

}  // namespace ptxlab
