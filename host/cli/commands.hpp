// Subcommands of the ptxlab executable: each file holds an options struct,
// a setup function that declares the flags, and a run function.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace ptxlab::cli {

// The command chosen on the command line; main() runs it and maps exceptions to exit codes.
using Command = std::function<int()>;

void setup_check(CLI::App& app, Command& chosen);
void setup_data(CLI::App& app, Command& chosen);
void setup_verify(CLI::App& app, Command& chosen);
// `prepare` (profile --train): set by the parse, as `chosen` is, to the first half of train's
// command: every check train makes before the GPU is touched (the same code: the flags, the
// outputs, --resume's checkpoint, the data), which returns the second half, the run itself. The
// run calls `between_chunks` after each chunk of steps, once the GPU has finished it
// (TrainConfig::between_chunks; empty: nothing).
using TrainRun = std::function<int(const std::function<void()>& between_chunks)>;
using PrepareCommand = std::function<TrainRun()>;
void setup_train(CLI::App& app, Command& chosen, PrepareCommand* prepare = nullptr);
void setup_eval(CLI::App& app, Command& chosen);
void setup_bench(CLI::App& app, Command& chosen);
void setup_new(CLI::App& app, Command& chosen);
void setup_sass(CLI::App& app, Command& chosen);
void setup_profile(CLI::App& app, Command& chosen);

}  // namespace ptxlab::cli
