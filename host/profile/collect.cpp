#include "collect.hpp"

#include "nvdisasm.hpp"

#include <deque>
#include <filesystem>

namespace ptxlab {

SassSource loaded_source(const SourceFile& src) {
    AssemblyResult none;
    none.line_info_path = src.path;
    return make_sass_source(src, none);
}

namespace {

struct Listing {
    std::vector<SassFunction> functions;
    std::string error;
};

// The file an instruction's line info names (innermost frame first), "" when none.
std::string named_file(const SassFunction& f) {
    for (const auto& ins : f.code)
        if (!ins.frames.empty()) return ins.frames.front().file;
    return "";
}

class Sources {
public:
    explicit Sources(const std::vector<SourceFile>& given) {
        for (const auto& s : given) sources_.push_back(loaded_source(s));
    }
    // The PTX source `file` names, or null (with `why`).
    const SassSource* find(const std::string& file, std::string& why) {
        if (file.empty()) {
            why = "its SASS carries no line info";
            return nullptr;
        }
        for (const auto& s : sources_)
            if (same_file(file, s.path) || same_file(file, s.line_info_path)) return &s;
        if (std::filesystem::path(file).extension() != ".ptx") {
            why = fmt::format("its line info names {}, not a PTX file (an NVRTC twin?)", file);
            return nullptr;
        }
        try {
            sources_.push_back(loaded_source(read_source_file(file)));
            return &sources_.back();
        } catch (const Error& e) {
            why = fmt::format("its line info names {}, which cannot be read: {}", file, e.what());
            return nullptr;
        }
    }

private:
    std::deque<SassSource> sources_;
};

}  // namespace

void add_offline_cubins(SampleRun& run, const std::vector<SourceFile>& sources, const std::string& arch,
                        const std::function<uint64_t(const std::string&)>& crc, std::vector<std::string>& notes) {
    std::map<uint64_t, std::string> missing;  // CRC -> a function sampled in it
    for (const auto& r : run.records)
        if (!run.cubins.count(r.cubin_crc)) missing[r.cubin_crc] = r.function;
    for (const auto& [want, function] : missing)
        for (const auto& src : sources) {
            if (!parse_ptx(src.text).find(function)) continue;
            const AssemblyResult res = assemble_offline(src, arch, AssembleOptions{.line_info = true, .cubin = true});
            if (!res.ok || res.cubin.empty()) continue;
            run.cubins[want] = res.cubin;
            const uint64_t got = crc(res.cubin);
            if (got != want)
                notes.push_back(fmt::format("the cubin the driver loaded for {} was not captured; its listing is "
                                            "nvJitLink's assembly of {} for {} (CRC {:#x}, the samples' {:#x}): where "
                                            "the two assemblers differ, samples may sit on the wrong instruction",
                                            function, src.path, arch, got, want));
            break;
        }
}

Profile build_profile(const SampleRun& run, const std::string& nvdisasm, const std::vector<SourceFile>& sources) {
    Profile p;
    p.period = run.period;
    p.dropped = run.dropped_samples;
    p.non_user = run.non_user_samples;
    p.cupti_total = run.total_samples;
    p.ranges = run.ranges;
    p.hardware_buffer_full = run.hardware_buffer_full;
    std::map<std::pair<uint64_t, std::string>, std::vector<const PcRecord*>> groups;
    for (const auto& r : run.records) groups[{r.cubin_crc, r.function}].push_back(&r);
    std::map<uint64_t, Listing> listings;
    Sources known(sources);
    for (const auto& [key, records] : groups) {
        const auto& [crc, name] = key;
        const auto cubin = run.cubins.find(crc);
        if (cubin == run.cubins.end()) {
            p.kernels.push_back(profile_kernel(name, records, nullptr, nullptr,
                                               fmt::format("the cubin it ran from (CRC {:#x}) was not seen loading: "
                                                           "samples without a listing",
                                                           crc)));
            continue;
        }
        Listing& l = listings[crc];
        if (l.functions.empty() && l.error.empty()) {
            try {
                l.functions = parse_nvdisasm(run_nvdisasm(nvdisasm, cubin->second, fmt::format("{}'s module", name)));
            } catch (const Error& e) {
                l.error = e.what();
            }
        }
        const SassFunction* f = nullptr;
        for (const auto& fn : l.functions)
            if (fn.name == name) f = &fn;
        if (!f) {
            p.kernels.push_back(profile_kernel(
                name, records, nullptr, nullptr,
                l.error.empty() ? "nvdisasm's listing of its cubin has no function of this name" : l.error));
            continue;
        }
        std::string why;
        const SassSource* src = known.find(named_file(*f), why);
        p.kernels.push_back(profile_kernel(name, records, f, src, why));
    }
    finish_profile(p);
    return p;
}

}  // namespace ptxlab
