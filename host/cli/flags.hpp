// Flags that several subcommands share, declared once so that each is checked the same way
// everywhere: a seed is a whole number in 0 .. 2^64 - 1, a device ordinal is >= 0, and an
// output path given as "" is an error, not "no output".
#pragma once

#include "ptx_text.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ptxlab::cli {

// --seed into `seed`; `given` (if not null) records whether it was on the command line.
// "-1", "1e3", "18446744073709551616" and "" are refused with the flag, the value and the range.
CLI::Option* add_seed_option(CLI::App* sub, uint64_t& seed, const std::string& help, bool* given = nullptr);

// For options that name a file or directory: "" is refused ("--data \"\"" would otherwise fall back to
// the default directory without a word).
extern const CLI::Validator kNonEmptyPath;

// --device into `device`, refused below 0 (which device exists is the driver's to say).
CLI::Option* add_device_option(CLI::App* sub, int& device);

// Output files of one command: each given path must be writable (files.hpp: require_output_file),
// and no two flags may name the same file (`--save x --log x` would write one file twice).
// A path that was given as "" is refused. Pairs of (flag, path); empty paths of flags not
// given are skipped, so pass only the flags that were given, or "" for those that were not.
struct OutputFlag {
    std::string flag, path;
    bool given = false;
    bool stream = false;  // written as it goes (a log): a character device such as /dev/null will do
};
void require_outputs(const std::vector<OutputFlag>& outputs);

// "k.ptx:scale" -> {"k.ptx", "scale"}; a name that is an existing file is a FILE, even with a ':'
// (sass, profile). An empty name after ':' is refused.
std::pair<std::string, std::string> split_target(const std::string& t);
// A parsed file's entries, "a, b, c" (for the message that names an unknown entry).
std::string entry_list(const PtxInfo& info);

}  // namespace ptxlab::cli
