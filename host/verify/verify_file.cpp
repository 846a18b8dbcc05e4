#include "verify_file.hpp"

#include "tensormap.hpp"

#include "files.hpp"
#include "json_number.hpp"
#include "rng.hpp"
#include "verify.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace ptxlab {

Contract read_contract_file(const std::string& path, SourceFile* src_out) {
    SourceFile src = read_source_file(path);
    const PtxInfo info = parse_ptx(src.text);
    ContractParse cp = parse_contract(src);
    if (!cp.contract && cp.problems.empty())
        PTXLAB_THROW(InputError,
                     "{}: no contract header: `verify FILE.ptx` and `bench FILE.ptx` need a `// @contract ... // @end` "
                     "block saying how to run the kernel (see `ptxlab new NAME` for an example, or the lessons in ptx/lessons)",
                     path);
    throw_if_problems(src, cp.problems);
    throw_if_problems(src, check_contract(*cp.contract, info));
    if (src_out) *src_out = std::move(src);
    return *cp.contract;
}

Contract preflight_contract_file(const std::string& path, const std::string& arch_flag, const std::string& shape_flag) {
    SourceFile src;
    const Contract c = read_contract_file(path, &src);
    throw_if_problems(src, check_contract_values(c, contract_shapes(c, shape_flag)));

    // The PTX as nvJitLink assembles it (the same diagnostics as `ptxlab check`).
    std::string arch = arch_flag;
    if (arch.empty()) {
        const std::string target = parse_ptx(src.text).target;
        const auto& archs = supported_archs();
        arch = assembly_arch(std::find(archs.begin(), archs.end(), target) != archs.end() ? target : "sm_90", target);
    }
    const AssemblyResult res = assemble_offline(src, arch);
    if (!res.ok) {
        std::string diags;
        for (const auto& d : res.diagnostics)
            if (d.severity != "warning") diags += format_diagnostic(src, d);
        while (!diags.empty() && diags.back() == '\n') diags.pop_back();
        PTXLAB_THROW(InputError, "{} does not assemble for {}:\n{}", path, arch, diags);
    }

    // The twin: there, a regular file, compiling with NVRTC, with the contract's parameter list.
    const std::string twin = c.twin_path();
    if (const std::string why = unusable_file_reason(twin); !why.empty())
        throw_if_problems(src, {{c.twin_line, "error", fmt::format("the twin {} {}", twin, why)}});
    NvrtcOutput out;
    try {
        out = nvrtc_compile(read_source_file(twin), virtual_arch_of(arch));
    } catch (const InputError& e) {
        PTXLAB_THROW(InputError, "{}:{}: error: the twin {} does not compile:\n{}", path, c.twin_line, twin, e.what());
    }
    throw_if_problems(src, check_contract_twin(c, parse_ptx(out.ptx), twin));
    return c;
}

ContractKernels load_contract_kernels(const std::string& path, const DeviceInfo& dev) {
    ContractKernels k;
    k.contract = read_contract_file(path, &k.src);
    const SourceFile cu = read_source_file(k.contract.twin_path());
    NvrtcOutput out = nvrtc_compile(cu, dev.virtual_arch());
    if (!out.log.empty()) fmt::print(stderr, "{}: warning: NVRTC log:\n{}\n", cu.path, out.log);
    throw_if_problems(k.src, check_contract_twin(k.contract, parse_ptx(out.ptx), cu.path));
    k.twin_origin = cu.path + " (NVRTC)";
    k.ptx_module = std::make_unique<Module>(k.src);
    k.twin_module = std::make_unique<Module>(SourceFile{k.twin_origin, out.ptx});
    k.ptx = k.ptx_module->function(k.contract.entry);
    k.twin = k.twin_module->function(k.contract.entry);
    return k;
}

std::vector<ShapeVars> contract_shapes(const Contract& c, const std::string& shape_flag) {
    if (shape_flag.empty()) return c.shapes;
    return {parse_shape(shape_flag, c, "--shape")};
}

// ---- Buffers -----------------------------------------------------------------------------

struct ContractBuffers::Impl {
    const Contract* c = nullptr;
    ShapeVars shape;
    LaunchShape launch;
    std::vector<size_t> lengths;                 // per param (0 for scalars)
    std::vector<std::vector<uint32_t>> inputs;   // per param: the words uploaded (buffers with a range)
    std::vector<DeviceBuffer> bufs;              // per param (empty for scalars)
    std::vector<uint64_t> args;                  // per param: the argument's bytes
    mutable std::vector<CUfunction> opted_in;    // functions whose dynamic shared memory limit was raised
    std::vector<CUtensorMap> maps;               // per param: tensor maps (the others unused)
};

namespace {
// Above 48 KiB of dynamic shared memory a launch must opt in: the function's limit is raised to
// `shared` after checking the device's limit per block (less the function's static shared memory).
void opt_in_shared(CUfunction fn, const std::string& origin, unsigned shared, const Contract& c, const ShapeVars& s) {
    CUdevice dev = 0;
    CU(cuCtxGetDevice, &dev);
    int optin = 0, static_bytes = 0;
    CU(cuDeviceGetAttribute, &optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
    CU(cuFuncGetAttribute, &static_bytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn);
    if (int64_t(shared) + static_bytes > optin)
        PTXLAB_THROW(InputError,
                     "{}:{}: shared = `{}` is {} B at {}; with the {} B of static shared memory of '{}' ({}) that is "
                     "past this device's limit of {} B per block (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)",
                     c.path, c.shared_line, c.shared, shared, shape_text(s), static_bytes, c.entry, origin, optin);
    CU(cuFuncSetAttribute, fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(shared));
}

// A contract's `tensormap(...)` parameter: cuTensorMapEncodeTiled over its buffer as uploaded.
CUtensorMap encode_tensor_map(const Contract& c, const ContractParam& p, const ShapeVars& shape, CUdeviceptr base) {
    const TensorMapShape t = tensor_map_shape(c, p, shape);
    const ElemType e = c.params[t.buffer].type;
    const CUtensorMapDataType type = e == ElemType::F32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                     : e == ElemType::U32 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                                          : CU_TENSOR_MAP_DATA_TYPE_INT32;
    try {
        return encode_tensor_map_2d(type, base, t.rows, t.cols, uint64_t(t.cols) * 4, t.box_rows, t.box_cols,
                                    t.swizzle128);
    } catch (const CudaError& err) {
        PTXLAB_THROW(InputError, "{}:{}: tensor map '{}' ({} x {} of '{}', box {} x {}) at {}: {}", c.path, p.line, p.name,
                     t.rows, t.cols, p.tmap_of, t.box_rows, t.box_cols, shape_text(shape), err.what());
    }
}

}  // namespace

ContractBuffers::ContractBuffers(const Contract& c, const ShapeVars& shape, uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.c = &c;
    m.shape = shape;
    m.launch = ptxlab::launch_shape(c, shape);
    Rng rng(seed);
    for (const auto& p : c.params) {
        uint64_t arg = 0;
        size_t n = 0;
        std::vector<uint32_t> words;
        if (p.buffer()) {
            n = buffer_length(c, p, shape);
            if (p.role != ParamRole::Out) {
                words.resize(n);
                for (auto& w : words) {
                    if (p.type == ElemType::F32)
                        w = std::bit_cast<uint32_t>(rng.uniform(float(p.lo), float(p.hi)));
                    else
                        w = static_cast<uint32_t>(int64_t(p.lo) + int64_t(rng.below(uint64_t(p.hi - p.lo) + 1)));
                }
            }
            m.bufs.emplace_back((n + 2 * kGuardFloats) * 4, p.name);
        } else {
            m.bufs.emplace_back();
            if (p.role == ParamRole::Scalar) arg = scalar_bits(c, p, shape);
        }
        m.lengths.push_back(n);
        m.inputs.push_back(std::move(words));
        m.args.push_back(arg);
    }
    reset();
    // The buffers' addresses are fixed now: the tensor maps that describe them.
    m.maps.resize(c.params.size());
    for (size_t i = 0; i < c.params.size(); ++i)
        if (c.params[i].role == ParamRole::TensorMap) {
            const size_t of = tensor_map_shape(c, c.params[i], shape).buffer;
            m.maps[i] = encode_tensor_map(c, c.params[i], shape, CUdeviceptr(m.args[of]));
        }
}

ContractBuffers::~ContractBuffers() = default;

const LaunchShape& ContractBuffers::launch_shape() const { return impl_->launch; }

void ContractBuffers::reset() {
    Impl& m = *impl_;
    for (size_t i = 0; i < m.c->params.size(); ++i) {
        const ContractParam& p = m.c->params[i];
        if (!p.buffer()) continue;
        std::vector<uint32_t> words(m.lengths[i] + 2 * kGuardFloats, kGuard);
        if (p.role == ParamRole::Out) std::fill_n(words.begin() + kGuardFloats, m.lengths[i], kPoison);
        else std::copy(m.inputs[i].begin(), m.inputs[i].end(), words.begin() + kGuardFloats);
        m.bufs[i].upload(words);
        m.args[i] = m.bufs[i].ptr() + kGuardFloats * 4;
    }
}

void ContractBuffers::launch(CUfunction fn, const std::string& origin, CUstream s) const {
    const Impl& m = *impl_;
    std::vector<void*> params;
    for (size_t i = 0; i < m.args.size(); ++i)
        params.push_back(m.c->params[i].role == ParamRole::TensorMap ? static_cast<void*>(const_cast<CUtensorMap*>(&m.maps[i]))
                                                                      : static_cast<void*>(const_cast<uint64_t*>(&m.args[i])));
    const auto& l = m.launch;
    if (l.shared > kSharedWithoutOptIn && std::find(m.opted_in.begin(), m.opted_in.end(), fn) == m.opted_in.end()) {
        opt_in_shared(fn, origin, l.shared, *m.c, m.shape);
        m.opted_in.push_back(fn);
    }
    note_in_flight(fmt::format("'{}' ({})", m.c->entry, origin));
    CUresult r;
    if (l.cluster[0] == 0) {
        r = driver().cuLaunchKernel(fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared,
                                    s, params.data(), nullptr);
    } else {
        // The contract's `cluster`: thread-block clusters through the launch attribute (sm_90).
        CUlaunchAttribute attr{};
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = l.cluster[0];
        attr.value.clusterDim.y = l.cluster[1];
        attr.value.clusterDim.z = l.cluster[2];
        CUlaunchConfig cfg{};
        cfg.gridDimX = l.grid[0], cfg.gridDimY = l.grid[1], cfg.gridDimZ = l.grid[2];
        cfg.blockDimX = l.block[0], cfg.blockDimY = l.block[1], cfg.blockDimZ = l.block[2];
        cfg.sharedMemBytes = l.shared;
        cfg.hStream = s;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        r = driver().cuLaunchKernelEx(&cfg, fn, params.data(), nullptr);
    }
    if (r != CUDA_SUCCESS)
        throw CudaError(r, fmt::format("launch of '{}' ({}) failed: {}: {}", m.c->entry, origin,
                                    l.cluster[0] ? "cuLaunchKernelEx (clusters)" : "cuLaunchKernel", cu_result_text(r)),
                        source_location(__FILE__, __LINE__));
}

// ---- verify ------------------------------------------------------------------------------

namespace {

// What one side (PTX or twin) left in every buffer.
std::vector<std::vector<uint32_t>> run_side(const ContractBuffers& b, CUfunction fn, const std::string& origin,
                                            const Stream& stream) {
    const_cast<ContractBuffers&>(b).reset();
    b.launch(fn, origin, stream.get());
    try {
        stream.synchronize();
    } catch (const CudaError& e) {
        PTXLAB_THROW(Error, "kernel '{}' ({}) failed while running: {}", b.impl().c->entry, origin, e.what());
    }
    std::vector<std::vector<uint32_t>> out;
    for (const auto& buf : b.impl().bufs) out.push_back(buf.bytes() ? buf.download_vector<uint32_t>() : std::vector<uint32_t>{});
    return out;
}

std::string show(uint32_t w, ElemType t) {
    if (t == ElemType::F32) return fmt::format("{:.9g} (0x{:08x})", std::bit_cast<float>(w), w);
    if (t == ElemType::S32) return fmt::format("{}", int32_t(w));
    return fmt::format("{}", w);
}

// The distance between two elements: ULPs for floats, the difference for integers.
uint64_t distance(uint32_t a, uint32_t b, ElemType t) {
    if (t == ElemType::F32) return ulp_distance(std::bit_cast<float>(a), std::bit_cast<float>(b));
    const int64_t x = t == ElemType::S32 ? int64_t(int32_t(a)) : int64_t(a), y = t == ElemType::S32 ? int64_t(int32_t(b)) : int64_t(b);
    return uint64_t(x > y ? x - y : y - x);
}

bool within(uint32_t a, uint32_t b, ElemType t, const Contract& c) {
    if (a == b) return true;
    if (c.compare == CompareKind::Bitwise) return false;
    if (c.compare == CompareKind::Ulp) return distance(a, b, t) <= uint64_t(c.tolerance);
    if (t != ElemType::F32) return distance(a, b, t) == 0;
    const double x = std::bit_cast<float>(a), y = std::bit_cast<float>(b);
    return std::fabs(x - y) <= c.tolerance * std::max(std::fabs(x), std::fabs(y));
}

struct BufferReport {
    size_t unwritten_ptx = 0, unwritten_twin = 0, differing = 0, outside = 0, overrun = 0, input_changed = 0;
    uint64_t max_dist = 0;
    std::vector<std::string> notes;
    bool pass() const { return !unwritten_ptx && !unwritten_twin && !outside && !overrun && !input_changed; }
};

// Guard bands of both sides, and for an input buffer whether either side changed it.
void check_guards(BufferReport& r, const ContractParam& p, const std::vector<uint32_t>& input,
                  const std::vector<uint32_t>* sides[2], size_t n, size_t max, const std::vector<int64_t>& extents) {
    const char* who[] = {"ptx", "twin"};
    for (int s = 0; s < 2; ++s) {
        const auto& w = *sides[s];
        size_t before = 0, after = 0;
        for (size_t g = 0; g < kGuardFloats; ++g) {
            before += w[g] != kGuard;
            after += w[kGuardFloats + n + g] != kGuard;
        }
        if (before || after) {
            r.overrun += before + after;
            r.notes.push_back(fmt::format("{}: {} wrote out of bounds: {} words before it, {} past its end", p.name,
                                          who[s], before, after));
        }
        if (p.role != ParamRole::In) continue;
        for (size_t i = 0; i < n; ++i)
            if (w[kGuardFloats + i] != input[i]) {
                if (r.input_changed++ < max)
                    r.notes.push_back(fmt::format("{}: {} changed this input (the contract says `in`; use `inout`)",
                                                  element_name(p.name, extents, i), who[s]));
            }
    }
}

// `extents`: the buffer's coordinates (buffer_extents), so that a message names C[3][17], not C[1553].
BufferReport compare_buffer(const Contract& c, const ContractParam& p, const std::vector<uint32_t>& input,
                            const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, size_t n, size_t max,
                            const std::vector<int64_t>& extents) {
    BufferReport r;
    const std::vector<uint32_t>* sides[2] = {&a, &b};
    check_guards(r, p, input, sides, n, max, extents);
    if (p.role == ParamRole::In) return r;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t x = a[kGuardFloats + i], y = b[kGuardFloats + i];
        const bool ua = p.role == ParamRole::Out && x == kPoison, ub = p.role == ParamRole::Out && y == kPoison;
        r.unwritten_ptx += ua;
        r.unwritten_twin += ub;
        std::string problem;
        if (ua || ub) {
            problem = fmt::format("{}: unwritten by {}", element_name(p.name, extents, i),
                                  ua && ub ? "both" : ua ? "ptx" : "twin");
        } else if (x != y) {
            ++r.differing;
            const uint64_t d = distance(x, y, p.type);
            r.max_dist = std::max(r.max_dist, d);
            if (!within(x, y, p.type, c)) {
                ++r.outside;
                problem = fmt::format("{}: ptx {} twin {} ({} {})", element_name(p.name, extents, i), show(x, p.type),
                                      show(y, p.type),
                                      d == UINT64_MAX ? std::string("NaN") : std::to_string(d),
                                      p.type == ElemType::F32 ? "ulp" : "apart");
            }
        }
        if (!problem.empty() && r.notes.size() < max) r.notes.push_back(problem);
    }
    return r;
}

}  // namespace

int verify_file(const std::string& path, const Context& ctx, const FileVerifyOptions& opt) {
    ContractKernels k = load_contract_kernels(path, ctx.info());
    const Contract& c = k.contract;
    const auto shapes = contract_shapes(c, opt.shape);
    fmt::print("verify {}: entry '{}' against {}, seed {} (repeat with --seed {})\n", path, c.entry, k.twin_origin,
               opt.seed, opt.seed);
    fmt::print("        PASS = every output written, none out of bounds, inputs untouched, outputs {}{}\n",
               c.compare_text(), c.why.empty() ? "" : " (" + c.why + ")");
    std::fflush(stdout);
    Stream stream;
    int failed = 0;
    for (size_t si = 0; si < shapes.size(); ++si) {
        ContractBuffers b(c, shapes[si], opt.seed * 0x9e3779b97f4a7c15ull + si);
        const auto got_ptx = run_side(b, k.ptx, path, stream);
        const auto got_twin = run_side(b, k.twin, k.twin_origin, stream);
        bool shape_ok = true;
        for (size_t i = 0; i < c.params.size(); ++i) {
            const ContractParam& p = c.params[i];
            if (!p.buffer()) continue;
            const size_t n = b.impl().lengths[i];
            BufferReport r = compare_buffer(c, p, b.impl().inputs[i], got_ptx[i], got_twin[i], n, opt.max_mismatches,
                                            buffer_extents(p, shapes[si]));
            if (p.role == ParamRole::In && r.pass()) continue;
            shape_ok = shape_ok && r.pass();
            const std::string dist = r.max_dist == UINT64_MAX ? std::string("NaN") : std::to_string(r.max_dist);
            fmt::print("{:<14} {:<22} {:<6} {:>9} elements  differ {:<6} max {} {:<5} unwritten {}/{}  {}\n", c.entry,
                       shape_text(shapes[si]), p.name, n, r.differing, p.type == ElemType::F32 ? "ULP" : "diff", dist,
                       r.unwritten_ptx, r.unwritten_twin, r.pass() ? "PASS" : "FAIL");
            for (const auto& note : r.notes) fmt::print("    {}\n", note);
        }
        failed += !shape_ok;
        std::fflush(stdout);
    }
    fmt::print("verify {}: {} shape{} passed, {} failed (seed {})\n", path, shapes.size() - size_t(failed),
               shapes.size() == 1 ? "" : "s", failed, opt.seed);
    return failed;
}

// ---- bench -------------------------------------------------------------------------------

namespace {

// Median microseconds per launch: warm-up, then 15 samples of 20 back-to-back launches each.
double time_launches(const ContractBuffers& b, CUfunction fn, const std::string& origin, const Stream& stream) {
    for (int w = 0; w < 3; ++w) b.launch(fn, origin, stream.get());
    stream.synchronize();
    std::vector<double> us;
    Event start, stop;
    for (int rep = 0; rep < 15; ++rep) {
        start.record(stream.get());
        for (int i = 0; i < 20; ++i) b.launch(fn, origin, stream.get());
        stop.record(stream.get());
        stream.synchronize();
        us.push_back(1000.0 * stop.since(start) / 20);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
}

}  // namespace

FileBenchResult bench_file(const std::string& path, const Context& ctx, const std::string& shape, uint64_t seed) {
    ContractKernels k = load_contract_kernels(path, ctx.info());
    const Contract& c = k.contract;
    FileBenchResult r{path, c.entry, ctx.info().name, ctx.info().arch(), {}};
    fmt::print("bench {}: entry '{}' and its twin on {} ({}); median of 15 x 20 launches after warm-up\n", path,
               c.entry, ctx.info().name, ctx.info().arch());
    if (c.bytes.empty() && c.flops.empty())
        fmt::print("        (the contract gives no `bytes` or `flops`: times only)\n");
    Stream stream;
    for (const auto& s : contract_shapes(c, shape)) {
        ContractBuffers b(c, s, seed);
        const double bytes = c.bytes.empty() ? 0 : eval_expr(c.bytes, s).value();
        const double flops = c.flops.empty() ? 0 : eval_expr(c.flops, s).value();
        for (int side = 0; side < 2; ++side) {
            const double us = time_launches(b, side ? k.twin : k.ptx, side ? k.twin_origin : path, stream);
            std::string rates;
            if (bytes > 0) rates += fmt::format("  {:8.1f} GB/s", bytes / us / 1e3);
            if (flops > 0) rates += fmt::format("  {:8.1f} GFLOP/s", flops / us / 1e3);
            fmt::print("{:<14} {:<22} {:<4} {:10.2f} us{}\n", c.entry, shape_text(s), side ? "twin" : "ptx", us, rates);
            r.rows.push_back({s, side ? "twin" : "ptx", us, bytes, flops});
        }
        std::fflush(stdout);
    }
    return r;
}

std::string file_bench_json(const FileBenchResult& r) {
    nlohmann::ordered_json j;  // the keys in this order, as the text report lists them
    j["file"] = r.path;
    j["entry"] = r.entry;
    j["device"] = r.device;
    j["arch"] = r.arch;
    j["timing"] = "median of 15 x 20 launches after warm-up";
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& row : r.rows) {
        nlohmann::ordered_json shape = nlohmann::ordered_json::object();
        for (const auto& [name, value] : row.shape) shape[name] = value;
        auto rate = [&](double amount) { return amount > 0 && row.us > 0 ? rounded_json(amount / row.us / 1e3, 3) : nullptr; };
        j["rows"].push_back({{"shape", shape},
                             {"side", row.side},
                             {"us", rounded_json(row.us, 4)},
                             {"bytes", row.bytes > 0 ? rounded_json(row.bytes, 0) : nullptr},
                             {"flops", row.flops > 0 ? rounded_json(row.flops, 0) : nullptr},
                             {"gbps", rate(row.bytes)},
                             {"gflops", rate(row.flops)}});
    }
    // A device name or path that is not UTF-8 is written with U+FFFD where its bad bytes were.
    return j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace ptxlab
