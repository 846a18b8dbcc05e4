// The ptxlab executable: help, the no-GPU behaviour, data, and flag validation.
#include "../../helpers.hpp"
#include "error.hpp"
#include "optimizers.hpp"
#include "safetensors.hpp"
#include "train.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

using namespace ptxlab::test;

TEST_CASE("cli: --help lists the commands and the exit codes") {
    RunResult r = run_command(ptxlab_cmd("--help"));
    CHECK(r.code == 0);
    for (const char* c : {"check", "data", "verify", "train", "eval"}) CHECK(r.output.find(c) != std::string::npos);
    CHECK(r.output.find("Exit codes") != std::string::npos);
    RunResult none = run_command(ptxlab_cmd(""));
    CHECK(none.code == 2);
}

TEST_CASE("cli: commands that need a GPU fail fast with one sentence when there is no driver") {
    const std::string env = "PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 ";
    TempDir t;  // eval reads its checkpoint before it looks for a GPU: give it a real one
    ptxlab::save_safetensors(t.file("m.safetensors"), ptxlab::init_params({784, 16, 10}, ptxlab::Init::Torch, 1));
    write_tiny_mnist(t.path.string());  // train and eval read the data first: this needs no MNIST
    const std::string data = " --data " + t.path.string();
    const std::string eval = "eval --load " + t.file("m.safetensors") + data, train = "train" + data;
    for (const char* cmd : {train.c_str(), "verify", eval.c_str()}) {
        CAPTURE(cmd);
        RunResult r = run_command(env + ptxlab_cmd(cmd));
        CHECK(r.code == 3);
        CHECK(r.output.find("ptxlab: no NVIDIA driver found (/nonexistent/libcuda.so.1") != std::string::npos);
        CHECK(r.output.find("terminate") == std::string::npos);
    }
    // The toolkit's stub library is recognised as such.
    RunResult stub = run_command("PTXLAB_LIBCUDA=" CUDA_STUB_LIBCUDA " " + ptxlab_cmd(train));
    CHECK(stub.code == 3);
    CHECK(stub.output.find("stub library") != std::string::npos);
}

TEST_CASE("cli: bad training flags are rejected with the reason before any GPU work") {
    struct Case {
        const char* flags;
        const char* reason;
    };
    for (Case c : {Case{"--batch 0", "--batch must be at least 1"},
                   Case{"--lr -1", "--lr must be a positive finite number"},
                   Case{"--lr nan", "--lr"},
                   Case{"--lr 0", "--lr must be a positive"},
                   Case{"--target 1.5", "--target must be in (0, 1]"},
                   Case{"--target 0", "--target must be in (0, 1]"},
                   Case{"--layers 784,0,10", "out of range"},
                   Case{"--layers 784,10", "has 2 sizes; give 3 to 17"},
                   Case{"--layers 784,64,32,16,10 --kernels ptx", "networks of 4 fc layers train on the model trainer's dense kernels only"},
                   Case{"--layers 100,64,32,16,10", "the model trainer takes MNIST's 28x28 images, 784 inputs, not 100"},
                   Case{"--layers 784,128,10,", "'' is not a whole number (in '784,128,10,')"},
                   Case{"--hidden 0", "--hidden must be at least 1"},
                   Case{"--kernels fastest", "unknown kernel set 'fastest'"},
                   Case{"--kernels tc-bf16 --activation tanh", "--kernels tc-bf16 runs ReLU hidden layers"},
                   Case{"--kernels fast --layers 784,64,32,10", "--kernels fast runs 2-layer networks (I,H,O); for --layers 784,64,32,10 use --kernels tc"},
                   Case{"--loss hinge", "unknown loss 'hinge'"},
                   Case{"--preset colab", "unknown preset 'colab'"},
                   Case{"--epochs 0", "--epochs must be at least 1"},
                   Case{"--optimizer lbfgs", "unknown optimizer 'lbfgs'"},
                   Case{"--schedule linear", "unknown schedule 'linear'"},
                   Case{"--init zeros", "unknown init 'zeros'"},
                   Case{"--momentum 1", "--momentum"},
                   Case{"--beta2 1", "--beta2"},
                   Case{"--eps 0", "--eps"},
                   Case{"--warmup 1", "--warmup"},
                   Case{"--schedule step --gamma 2", "--gamma"},
                   Case{"--step-every -1", "--step-every"},
                   Case{"--evals-per-epoch 0", "--evals-per-epoch must be at least 1"}}) {
        CAPTURE(c.flags);
        RunResult r = run_command("PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 " + ptxlab_cmd(std::string("train ") + c.flags));
        CHECK(r.code == 2);
        CHECK(r.output.find(c.reason) != std::string::npos);
    }
}

TEST_CASE("cli: train --help's optimizer lines come from the optimizer table") {
    RunResult r = run_command(ptxlab_cmd("train --help"));
    REQUIRE(r.code == 0);
    CHECK(r.output.find(ptxlab::optimizer_help() + ": PyTorch's update rules") != std::string::npos);
    CHECK(r.output.find(ptxlab::optimizers_with(ptxlab::kFlagMomentum) + ": the momentum") != std::string::npos);
    CHECK(r.output.find("L2 weight decay (adamw: decoupled)") != std::string::npos);
    CHECK(r.output.find(ptxlab::optimizers_with(ptxlab::kFlagAlpha) + ": the smoothing constant") != std::string::npos);
    for (const ptxlab::OptimizerRow& row : ptxlab::optimizer_rows()) CHECK(r.output.find(row.torch) != std::string::npos);
}

TEST_CASE("cli: data validates a dataset and reports a missing one with how to fetch it") {
    RunResult missing = run_command(ptxlab_cmd("data /nonexistent/mnist"));
    CHECK(missing.code == 2);
    CHECK(missing.output.find("tools/fetch_mnist.sh") != std::string::npos);
}

TEST_CASE("cli: a dataset that does not fit --layers, or is smaller than a batch, is refused") {
    // 12 images of 10x10 pixels with labels 0..9 (what a non-MNIST IDX dataset gives).
    ptxlab::Split split;
    split.count = 12;
    split.rows = split.cols = 10;
    split.images.assign(12 * 100, 0.5f);
    for (uint8_t i = 0; i < 12; ++i) split.labels.push_back(i % 10);
    ptxlab::TrainConfig cfg;
    cfg.batch = 4;
    cfg.layers = {784, 128, 10};
    CHECK_THROWS_WITH_AS(cfg.validate(split),
                         doctest::Contains("the network takes 784 inputs but the images have 10x10 = 100 pixels "
                                           "(--layers 784,128,10)"),
                         ptxlab::InputError);
    cfg.layers = {100, 16, 10};
    CHECK_NOTHROW(cfg.validate(split));
    cfg.layers = {100, 16, 7};
    CHECK_THROWS_WITH_AS(cfg.validate(split), doctest::Contains("7 outputs but the labels have 10 classes"),
                         ptxlab::InputError);
    cfg.layers = {100, 16, 10};
    cfg.batch = 13;
    CHECK_THROWS_WITH_AS(cfg.validate(split), doctest::Contains("--batch 13 is larger than the training set (12 samples)"),
                         ptxlab::InputError);
}

TEST_CASE("cli: verify --list names the optimizer variants and refuses shapes a kernel cannot take") {
    RunResult all = run_command(ptxlab_cmd("verify --list"));
    CAPTURE(all.output);
    CHECK(all.code == 0);
    for (const char* line : {"batch_mean    N=100352 B=64", "optim_sgd     N=101770 variant=2 (nesterov)",
                             "optim_sgd     N=1 variant=0 (plain)", "optim_adam    N=101770 variant=2 (adamw)",
                             "optim_rmsprop N=1000 variant=1 (+wd)"})
        CHECK(all.output.find(line) != std::string::npos);
    CHECK(all.output.find("update") == std::string::npos);
    // Variant 0 is a valid shape number; an unknown variant, or a batch of 0, is an input error (exit 2).
    RunResult zero = run_command(ptxlab_cmd("verify --kernel optim_sgd --shape 1000,0 --list"));
    CHECK(zero.code == 0);
    CHECK(zero.output.find("optim_sgd     N=1000 variant=0 (plain)") != std::string::npos);
    RunResult bad = run_command(ptxlab_cmd("verify --kernel optim_adam --shape 1000,5 --list"));
    CHECK(bad.code == 2);
    CHECK(bad.output.find("kernel 'optim_adam' has variants 0..4 (0 adam, 1 adam+wd, 2 adamw, 3 nadam, 4 nadam+wd), got 5") !=
          std::string::npos);
    // The one-launch steps take every optimizer code of recipe.hpp's table, nadam (6) the last.
    RunResult nadam = run_command(ptxlab_cmd("verify --kernel fused_step --shape 64,784,128,10,1,6,0 --list"));
    CHECK(nadam.code == 0);
    CHECK(nadam.output.find("optim=6 (nadam)") != std::string::npos);
    RunResult no_code = run_command(ptxlab_cmd("verify --kernel tc_step --shape 64,784,128,10,1,7 --list"));
    CHECK(no_code.code == 2);
    CHECK(no_code.output.find("the optimizer code must be one of 0 sgd, 1 momentum, 2 nesterov, 3 adam, 4 adamw, "
                              "5 rmsprop, 6 nadam, got 7") != std::string::npos);
    RunResult empty = run_command(ptxlab_cmd("verify --kernel batch_mean --shape 1000,0 --list"));
    CHECK(empty.code == 2);
    CHECK(empty.output.find("shape sizes must be >= 1") != std::string::npos);
}

TEST_CASE("train config: the step schedule's interval, and times in milliseconds") {
    ptxlab::TrainConfig cfg;  // the default recipe: cross-entropy, Nesterov, one-cycle
    cfg.schedule.kind = ptxlab::ScheduleKind::Step;
    cfg.epochs = 9;
    CHECK(cfg.schedule_for(100).step_every == 300);  // a third of the epochs
    cfg.step_every_epochs = 2.5;
    CHECK(cfg.schedule_for(100).step_every == 250);
    cfg.schedule.step_every = 7;  // set in steps: kept
    CHECK(cfg.schedule_for(100).step_every == 7);
    CHECK(cfg.schedule_for(100).kind == ptxlab::ScheduleKind::Step);

    CHECK(ptxlab::format_ms(48.345) == "48.3 ms");
    CHECK(ptxlab::format_ms(0.51234) == "0.512 ms");
    CHECK(ptxlab::format_ms(5.0) == "5.00 ms");
    CHECK(ptxlab::format_ms(123.6) == "124 ms");
    CHECK(ptxlab::format_ms(1234.4) == "1234 ms");
}

TEST_CASE("cli: eval checks its checkpoint, data and flags before it looks for a GPU") {
    const std::string env = "PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 ";
    RunResult missing = run_command(env + ptxlab_cmd("eval --load /nonexistent/m.safetensors"));
    CHECK(missing.code == 2);
    CHECK(missing.output.find("does not exist") != std::string::npos);
    TempDir t;
    ptxlab::save_safetensors(t.file("m.safetensors"), ptxlab::init_params({100, 16, 10}, ptxlab::Init::Torch, 1));
    write_tiny_mnist(t.path.string());  // a 28x28 dataset without MNIST
    RunResult shape = run_command(env + ptxlab_cmd("eval --load " + t.file("m.safetensors") + " --data " + t.path.string()));
    CHECK(shape.code == 2);
    CHECK(shape.output.find("the checkpoint's network is 100,16,10") != std::string::npos);
    RunResult device = run_command(env + ptxlab_cmd("eval --device -1 --load " + t.file("m.safetensors")));
    CHECK(device.code == 2);
    CHECK(device.output.find("--device must be a CUDA device ordinal (0, 1, ...), got -1") != std::string::npos);
    RunResult dir = run_command(env + ptxlab_cmd("train --ptx-dir /nonexistent/ptx"));
    CHECK(dir.code == 2);
    CHECK(dir.output.find("--ptx-dir '/nonexistent/ptx' does not exist") != std::string::npos);
}

// CLI11 from 2.2 on refuses a positional and an option of one name in a subcommand, at start-up,
// for every command (OptionAlreadyAdded: `profile`'s positional was "target" beside train's
// --target, and every ptxlab command aborted when built with CLI11 2.7.2). The CLI11 here (2.1)
// allows it, so the names are compared from each subcommand's --help.
TEST_CASE("cli: no subcommand has a positional of the same name as one of its options") {
    for (const char* sub : {"check", "data", "verify", "train", "eval", "bench", "new", "sass", "profile"}) {
        CAPTURE(sub);
        const RunResult r = run_command(ptxlab_cmd(std::string(sub) + " --help"));
        REQUIRE(r.code == 0);
        std::vector<std::string> positionals, options;
        std::istringstream in(r.output);
        std::string line;
        bool in_positionals = false;
        while (std::getline(in, line)) {
            if (line.rfind("Positionals:", 0) == 0) {
                in_positionals = true;
                continue;
            }
            if (line.empty() || line[0] != ' ') in_positionals = false;
            std::istringstream words(line);
            std::string first;
            words >> first;
            if (in_positionals && !first.empty() && first[0] != '-') positionals.push_back(first);
            for (size_t at = first.find("--"); at != std::string::npos; at = first.find("--", at + 2))
                options.push_back(first.substr(at + 2, first.find(',', at) - at - 2));
        }
        CHECK(!options.empty());
        for (const std::string& p : positionals) {
            CAPTURE(p);
            CHECK(std::find(options.begin(), options.end(), p) == options.end());
        }
    }
}
