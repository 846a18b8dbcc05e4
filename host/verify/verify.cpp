// ptxlab verify's runs: each case's harness (from its kernel's row in the registry,
// registry.hpp) on the GPU, the PTX and the twin on the same inputs, and their outputs compared.
#include "verify.hpp"

#include "registry.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "verify_harness.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace ptxlab {

uint64_t ulp_distance(float a, float b) {
    if (std::isnan(a) || std::isnan(b))
        return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ? 0 : UINT64_MAX;
    auto ordered = [](float f) {
        int64_t i = std::bit_cast<int32_t>(f);
        return i < 0 ? int64_t(INT32_MIN) - i : i;  // monotonic in f, with -0 == +0
    };
    int64_t d = ordered(a) - ordered(b);
    return static_cast<uint64_t>(d < 0 ? -d : d);
}

using namespace verify_detail;

namespace {

// The entry's row in the registry (registry.hpp) makes the case's harness.
Harness make_harness(const VerifyCase& c, Rng& rng) {
    validate_case(c);
    return kernel_row(c.entry).harness(c, rng);
}

// A harness's tensors on the GPU: inputs uploaded, outputs poisoned, each between two
// guard bands (kGuardFloats words of kGuard before and after).
struct DeviceTensors {
    std::vector<DeviceBuffer> bufs;
    std::map<std::string, CUdeviceptr> ptrs;
    explicit DeviceTensors(const Harness& h) {
        for (const auto& t : h.tensors) {
            std::vector<float> words(t.count() + 2 * kGuardFloats, std::bit_cast<float>(kGuard));
            if (t.role == Role::Out) std::fill_n(words.begin() + kGuardFloats, t.count(), std::bit_cast<float>(kPoison));
            else std::copy(t.data.begin(), t.data.end(), words.begin() + kGuardFloats);
            bufs.emplace_back(words.size() * sizeof(float), t.name);
            bufs.back().upload(words);
            ptrs[t.name] = bufs.back().ptr() + kGuardFloats * sizeof(float);
        }
    }
};

// What one run of a kernel left: its outputs by name, and the out-of-bounds writes found
// in the guard bands (one line per tensor).
struct RunOutput {
    std::map<std::string, std::vector<float>> out;
    size_t overrun = 0;
    std::vector<std::string> overruns;
};

// Runs one kernel on the harness's inputs.
RunOutput run_once(const Kernel& k, const Harness& h, const Stream& stream) {
    DeviceTensors d(h);
    h.launch(k, d.ptrs, stream.get());
    try {
        stream.synchronize();
    } catch (const CudaError& e) {
        PTXLAB_THROW(Error, "kernel '{}' ({}) failed while running: {}", k.spec->entry, k.origin, e.what());
    }
    RunOutput r;
    for (size_t i = 0; i < h.tensors.size(); ++i) {
        const Tensor& t = h.tensors[i];
        auto words = d.bufs[i].download_vector<float>();
        size_t before = 0, after = 0, last = 0;
        for (size_t g = 0; g < kGuardFloats; ++g) {
            before += std::bit_cast<uint32_t>(words[g]) != kGuard;
            if (std::bit_cast<uint32_t>(words[kGuardFloats + t.count() + g]) != kGuard) ++after, last = g + 1;
        }
        if (before || after) {
            r.overrun += before + after;
            r.overruns.push_back(fmt::format("{}: {} wrote out of bounds: {} word{} in the {} words before it, {} in "
                                             "the {} after it (the last {} past its end)",
                                             t.name, k.origin, before, before == 1 ? "" : "s", kGuardFloats, after,
                                             kGuardFloats, last));
        }
        if (t.role != Role::In)
            r.out[t.name].assign(words.begin() + long(kGuardFloats), words.begin() + long(kGuardFloats + t.count()));
    }
    return r;
}

std::string index_text(const std::string& name, const std::vector<size_t>& dims, size_t flat) {
    std::vector<size_t> idx(dims.size());
    for (size_t d = dims.size(); d-- > 0;) {
        idx[d] = flat % dims[d];
        flat /= dims[d];
    }
    std::string s = name;
    for (auto i : idx) s += fmt::format("[{}]", i);
    return s;
}

std::string coords(const Tensor& t, size_t flat) {
    for (auto p = t.parts.rbegin(); p != t.parts.rend(); ++p)
        if (flat >= p->offset) return index_text(p->name, p->dims, flat - p->offset);
    return index_text(t.name, t.dims, flat);
}

std::string show(float f) { return fmt::format("{:.9g} (0x{:08x})", f, std::bit_cast<uint32_t>(f)); }

}  // namespace

struct PreparedCase::Impl {
    Harness h;
    std::optional<DeviceTensors> d;
};

PreparedCase::PreparedCase(const VerifyCase& c, uint64_t seed) : impl_(std::make_unique<Impl>()) {
    Rng rng(seed);
    impl_->h = make_harness(c, rng);
    impl_->d.emplace(impl_->h);
}

PreparedCase::~PreparedCase() = default;

void PreparedCase::launch(const Kernel& k, CUstream s) const { impl_->h.launch(k, impl_->d->ptrs, s); }

namespace {
// A case whose kernel the set left out (code for another device): skipped, with the reason.
CaseResult skipped_case(const VerifyCase& c, const KernelSet& ks) {
    CaseResult r;
    r.c = c;
    r.skipped = ks.absent_reason(c.entry);
    if (r.skipped.empty()) ks.get(c.entry);  // not asked for: an internal error, raised by get
    return r;
}
}  // namespace

std::vector<CaseResult> run_verify(const Context& ctx, const std::vector<VerifyCase>& cases, const VerifyOptions& opt,
                                   const std::function<void(const CaseResult&)>& on_result) {
    std::set<std::string> entries;
    for (const auto& c : cases) entries.insert(c.entry);
    std::vector<std::string> list(entries.begin(), entries.end());
    KernelSet ptx(KernelSource::Ptx, ctx.info(), opt.ptx_dirs, list);
    KernelSet ref(KernelSource::Reference, ctx.info(), opt.reference_dirs, list);
    Stream stream;

    std::vector<CaseResult> results;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
        const VerifyCase& c = cases[ci];
        if (!ptx.has(c.entry)) {  // code for another device (KernelSet left it out)
            results.push_back(skipped_case(c, ptx));
            if (on_result) on_result(results.back());
            continue;
        }
        Rng rng(opt.seed * 0x9e3779b97f4a7c15ull + ci);  // fresh inputs per case, reproducible from the seed
        Harness h = make_harness(c, rng);
        const RunOutput run_ptx = run_once(ptx.get(c.entry), h, stream);
        const RunOutput run_ref = run_once(ref.get(c.entry), h, stream);
        const auto& got_ptx = run_ptx.out;
        const auto& got_ref = run_ref.out;

        CaseResult r;
        r.c = c;
        r.overrun_ptx = run_ptx.overrun;
        r.overrun_ref = run_ref.overrun;
        for (const auto* run : {&run_ptx, &run_ref})
            for (const auto& m : run->overruns) r.mismatches.push_back(m);
        for (const auto& t : h.tensors) {
            if (t.role == Role::In) continue;
            const auto& a = got_ptx.at(t.name);
            const auto& b = got_ref.at(t.name);
            const Bounded& e = h.expected.at(t.name);
            for (size_t i = 0; i < a.size(); ++i) {
                ++r.elements;
                const uint32_t ab = std::bit_cast<uint32_t>(a[i]), bb = std::bit_cast<uint32_t>(b[i]);
                const bool un_a = t.role == Role::Out && ab == kPoison;
                const bool un_b = t.role == Role::Out && bb == kPoison;
                r.unwritten_ptx += un_a;
                r.unwritten_ref += un_b;
                std::string problem;
                if (un_a || un_b) {
                    problem = fmt::format("{}: unwritten by {}", coords(t, i),
                                          un_a && un_b ? "both" : (un_a ? "ptx" : "reference"));
                } else if (ab != bb) {
                    ++r.differing;
                    const uint64_t u = ulp_distance(a[i], b[i]);
                    r.max_ulp = std::max(r.max_ulp, u);
                    r.max_abs = std::max(r.max_abs, double(std::fabs(a[i] - b[i])));
                    problem = fmt::format("{}: ptx {} reference {} ({} ulp)", coords(t, i), show(a[i]), show(b[i]),
                                          u == UINT64_MAX ? std::string("NaN") : std::to_string(u));
                }
                if (std::isinf(e.e[i])) {
                    ++r.kink_skipped;
                } else if (!un_a && !un_b) {
                    // An integer tensor (bits) must equal its reference exactly.
                    const bool ok_a = t.bits ? ab == uint32_t(e.v[i]) : within_bound(a[i], e.v[i], e.e[i]);
                    const bool ok_b = t.bits ? bb == uint32_t(e.v[i]) : within_bound(b[i], e.v[i], e.e[i]);
                    r.f64_fail_ptx += !ok_a;
                    r.f64_fail_ref += !ok_b;
                    for (float g : {a[i], b[i]}) {
                        if (t.bits) break;  // integers: compared exactly above
                        double err = std::fabs(double(g) - e.v[i]);
                        if (e.e[i] > 0) r.worst_of_bound = std::max(r.worst_of_bound, err / e.e[i]);
                        else if (err > 0) r.worst_of_bound = INFINITY;
                    }
                    if (problem.empty() && (!ok_a || !ok_b))
                        problem = fmt::format("{}: ptx {} reference {} float64 {:.9g} (bound {:.3g})", coords(t, i),
                                              show(a[i]), show(b[i]), e.v[i], e.e[i]);
                }
                if (!problem.empty() && r.mismatches.size() < opt.max_mismatches) r.mismatches.push_back(problem);
            }
        }
        if (on_result) on_result(r);
        results.push_back(std::move(r));
    }
    return results;
}

std::string format_result(const CaseResult& r) {
    if (!r.skipped.empty()) return fmt::format("{:<13} {:<32} SKIPPED: {}", r.c.entry, shape_text(r.c), r.skipped);
    std::string f64 = r.f64_fail_ptx || r.f64_fail_ref
                          ? fmt::format("f64 FAIL (ptx {}, reference {})", r.f64_fail_ptx, r.f64_fail_ref)
                          : fmt::format("f64 ok (worst {:.2f} of bound)", r.worst_of_bound);
    if (r.kink_skipped)
        f64 += fmt::format(", {} the reference cannot tell skipped (a ReLU kink, a pool's near-tie)", r.kink_skipped);
    const std::string ulp = r.max_ulp == UINT64_MAX ? std::string("NaN") : std::to_string(r.max_ulp);
    std::string line = fmt::format("{:<13} {:<32} max|diff| {:<9.3g} max ULP {:<4} unwritten {}/{}  {}  {}", r.c.entry,
                                   shape_text(r.c), r.max_abs, ulp, r.unwritten_ptx, r.unwritten_ref, f64,
                                   r.pass() ? "PASS" : "FAIL");
    for (const auto& m : r.mismatches) line += "\n    " + m;
    return line;
}

}  // namespace ptxlab
