#include "flags.hpp"

#include "error.hpp"
#include "files.hpp"

#include <charconv>
#include <filesystem>

namespace fs = std::filesystem;

namespace ptxlab::cli {

CLI::Option* add_seed_option(CLI::App* sub, uint64_t& seed, const std::string& help, bool* given) {
    // Read as text: CLI11 turns "-1" into 2^64 - 1 for an unsigned 64-bit value.
    CLI::Option* opt = sub->add_option_function<std::string>(
            "--seed",
            [&seed, given](const std::string& v) {
                uint64_t x = 0;
                const char* end = v.data() + v.size();
                const auto [ptr, ec] = std::from_chars(v.data(), end, x);
                const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
                if (!digits || ec == std::errc::invalid_argument || ptr != end)
                    PTXLAB_THROW(InputError, "--seed must be a whole number from 0 to 18446744073709551615 (2^64 - 1), "
                                             "got '{}'", v);
                if (ec == std::errc::result_out_of_range)
                    PTXLAB_THROW(InputError, "--seed {} is too large: seeds go from 0 to 18446744073709551615 (2^64 - 1)",
                                 v);
                seed = x;
                if (given) *given = true;
            },
            help);
    // A seed with a fixed default shows it; one that is fresh each run (given != nullptr) does not.
    return given ? opt : opt->default_str(std::to_string(seed));
}

const CLI::Validator kNonEmptyPath(
    [](std::string& v) { return v.empty() ? std::string("is an empty path: give a file or directory name") : std::string(); },
    "PATH");

CLI::Option* add_device_option(CLI::App* sub, int& device) {
    return sub
        ->add_option_function<long long>(
            "--device",
            [&device](long long v) {
                if (v < 0 || v > 1024)
                    PTXLAB_THROW(InputError, "--device must be a CUDA device ordinal (0, 1, ...), got {}", v);
                device = static_cast<int>(v);
            },
            "CUDA device ordinal")
        ->default_str(std::to_string(device));
}

void require_outputs(const std::vector<OutputFlag>& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
        const OutputFlag& a = outputs[i];
        if (!a.given) continue;
        require_output_file(a.path, a.flag, a.stream);
        std::error_code ec;
        const fs::path pa = fs::weakly_canonical(fs::absolute(a.path, ec), ec);
        for (size_t j = 0; j < i; ++j) {
            const OutputFlag& b = outputs[j];
            if (!b.given) continue;
            std::error_code ec2;
            const fs::path pb = fs::weakly_canonical(fs::absolute(b.path, ec2), ec2);
            const bool same = (!ec && !ec2 && pa == pb) || a.path == b.path;
            if (same && !(a.stream && b.stream && fs::exists(pa, ec) && !fs::is_regular_file(pa, ec)))
                PTXLAB_THROW(InputError, "{} and {} both name {}: each output needs its own file", b.flag, a.flag, a.path);
        }
    }
}

std::pair<std::string, std::string> split_target(const std::string& t) {
    std::error_code ec;
    const size_t colon = t.rfind(':');
    if (fs::exists(t, ec) || colon == std::string::npos || colon == 0) return {t, ""};
    if (colon + 1 == t.size())
        PTXLAB_THROW(InputError, "'{}': the entry name after ':' is empty (give {} for every entry, or {}ENTRY)", t,
                     t.substr(0, colon), t);
    return {t.substr(0, colon), t.substr(colon + 1)};
}

std::string entry_list(const PtxInfo& info) {
    std::string s;
    for (const auto& e : info.entries) s += (s.empty() ? "" : ", ") + e.name;
    return s;
}

}  // namespace ptxlab::cli
