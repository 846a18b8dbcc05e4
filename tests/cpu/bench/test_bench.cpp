// bench --json: the results under their keys, in the tables' order, the numbers rounded as the
// tables show them; a NaN (a timing that failed) is null, and the text is JSON whatever the
// device's name holds.
#include "bench.hpp"
#include "compile.hpp"
#include "headline.hpp"
#include "ptx_text.hpp"
#include "verify_file.hpp"
#include "../../helpers.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace ptxlab;
using ptxlab::test::run_command;
using ptxlab::test::RunResult;

TEST_CASE("bench: --json holds every result under its key, rounded as the tables show it") {
    BenchResult r;
    r.device = "NVIDIA H100 \"80GB\"\t\xff";  // a quote, a tab and a byte that is not UTF-8
    r.copy_gbps = 2987.65432;
    r.fma_gflops = 51234.5;
    r.floors.push_back({"grid barrier", "a grid-wide barrier", 0.987654});
    r.kernels.push_back({"fused", "fused_forward", 64, 3.456789, 1234567.4, 2.0e9 + 0.6, 357.1234, 578.98765, 12.3456});
    r.steps.push_back({"fused/split", 256, 937, 41.234567, std::nan(""), });
    r.targets.push_back({"fused", true, 1234.5678, 0.9812345678, 3, 2811, 401.0004, 88.8888, 12.0});
    r.headline.push_back({"MLP step", "us", 9.876543, 480.12346, std::nullopt});
    BenchOptions opt;
    opt.target = 0.98;
    const std::string text = bench_json(r, opt);
    CAPTURE(text);
    REQUIRE(text.back() == '\n');
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"device", "copy_gbps", "fma_gflops", "floors", "target", "kernels", "steps",
                                           "headline", "to_target"});
    CHECK(j["device"] == "NVIDIA H100 \"80GB\"\t\xef\xbf\xbd");  // the bad byte became U+FFFD
    CHECK(j["copy_gbps"] == 2987.654);
    CHECK(j["fma_gflops"] == 51234.5);
    CHECK(j["target"] == 0.98);
    REQUIRE(j["floors"].size() == 1);
    CHECK(j["floors"][0].dump() == "{\"name\":\"grid barrier\",\"us\":0.9877,\"what\":\"a grid-wide barrier\"}");
    REQUIRE(j["kernels"].size() == 1);
    const auto& k = j["kernels"][0];
    CHECK(k.dump() == "{\"set\":\"fused\",\"kernel\":\"fused_forward\",\"batch\":64,\"us\":3.4568,\"bytes\":1234567,"
                      "\"flops\":2000000001,\"gbps\":357.123,\"gflops\":578.988,\"roofline_pct\":12.346}");
    REQUIRE(j["steps"].size() == 1);
    CHECK(j["steps"][0].dump() == "{\"set\":\"fused/split\",\"batch\":256,\"steps\":937,\"gpu_us_per_step\":41.2346,"
                                  "\"wall_us_per_step\":null}");
    REQUIRE(j["headline"].size() == 1);
    CHECK(j["headline"][0].dump() == "{\"figure\":\"MLP step\",\"unit\":\"us\",\"ptxlab\":9.8765,"
                                     "\"torch_eager\":480.1235,\"torch_graph\":null}");
    REQUIRE(j["to_target"].size() == 1);
    CHECK(j["to_target"][0].dump() == "{\"set\":\"fused\",\"reached\":true,\"train_ms\":1234.568,\"epochs\":3,"
                                      "\"steps\":2811,\"accuracy\":0.981235,\"median_epoch_ms\":401.0,\"jit_ms\":88.889,"
                                      "\"data_ms\":12.0}");
    // No rows: empty arrays.
    const auto empty = nlohmann::json::parse(bench_json(BenchResult{}, opt));
    CHECK(empty["kernels"].empty());
    CHECK(empty["floors"].empty());
    CHECK(empty["to_target"].empty());
}

TEST_CASE("bench: the floor probes assemble for sm_90 and hold the entries measure_floors launches") {
    const SourceFile src = read_source_file(floors_path(KernelDirs::from_environment()));
    const AssemblyResult res = assemble_offline(src, "sm_90");
    for (const auto& d : res.diagnostics) MESSAGE(d.message);
    REQUIRE(res.ok);
    const PtxInfo info = parse_ptx(src.text);
    for (const char* e : {"floor_empty", "floor_grid_barrier", "floor_cluster_barrier", "floor_cluster_barrier_store",
                          "floor_dsmem_chain", "floor_mma_chain", "floor_l2_chain"}) {
        CAPTURE(e);
        CHECK(info.find(e) != nullptr);
    }
    // The probes are not network kernels: the kernel directory's pairs (check, verify, train) skip them.
    for (const auto& p : find_kernel_pairs(KernelDirs::from_environment())) CHECK(p.stem != "floors");
}

TEST_CASE("bench: --headline reads PyTorch's step times and time to target from torch_reference's output") {
    const std::string text = "torch 2.11.0+cu130 on NVIDIA H100 80GB HBM3: model fc128,fc10 relu, ...\n"
                             "final test accuracy 98.01 % (test loss 0.06) after 4075 steps; training 5.12 s\n"
                             "reached 98.00 % at step 4075 (epoch 5) after 5120 ms of training\n"
                             "per step at batch 64 (ce, nesterov): eager 480.1 us, CUDA graph 100.4 us\n";
    const TorchFigures f = parse_torch_reference(text);
    REQUIRE(f.step_eager_us);
    CHECK(*f.step_eager_us == doctest::Approx(480.1));
    REQUIRE(f.step_graph_us);
    CHECK(*f.step_graph_us == doctest::Approx(100.4));
    REQUIRE(f.ms_to_target);
    CHECK(*f.ms_to_target == doctest::Approx(5120));
    // A run that did not reach the target, or printed no timing: those figures are absent, not 0.
    const TorchFigures none = parse_torch_reference("did not reach 99.00 %\n");
    CHECK_FALSE(none.ms_to_target);
    CHECK_FALSE(none.step_graph_us);
}

TEST_CASE("bench --models: PyTorch's step beside each model, from torch_reference.py's own flags") {
    // The arguments bench passes (run_torch adds --seed, --time-steps 1000, --stop-at-target and
    // --data): torch_reference.py must take them for an fc list and for cnn, or PyTorch's rows
    // would silently be a usage error's note.
    // The batch is --model-batch's (64 by default).
    CHECK(torch_model_step_args("fc256,fc128,fc10", 64) ==
          std::vector<std::string>{"--model", "fc256,fc128,fc10", "--max-steps", "20", "--batch", "64"});
    for (const std::string spec : {"fc256,fc128,fc10", "cnn", "conv16k5,pool,conv32,pool,fc64,fc10"}) {
        std::string args;
        for (const std::string& a : torch_model_step_args(spec, 64)) args += "'" + a + "', ";
        const RunResult r = run_command(
            "python3 -c \"import sys; sys.path.insert(0, '" PTXLAB_SOURCE_DIR "/tools'); import torch_reference as t; "
            "a = t.parse_args([" + args + "'--seed', '1', '--time-steps', '1000', '--stop-at-target']); "
            "print('parsed', a.model, a.max_steps, a.time_steps, a.batch)\"");
        CAPTURE(r.output);
        CHECK(r.code == 0);
        CHECK(r.output.find("parsed " + spec + " 20 1000 64") != std::string::npos);
    }
    std::string args;
    for (const std::string& a : torch_model_step_args("fc1024,fc1024,fc10", 4096)) args += "'" + a + "', ";
    const RunResult r = run_command(
        "python3 -c \"import sys; sys.path.insert(0, '" PTXLAB_SOURCE_DIR "/tools'); import torch_reference as t; "
        "a = t.parse_args([" + args + "'--seed', '1']); print('parsed', a.model, a.batch)\"");
    CAPTURE(r.output);
    CHECK(r.output.find("parsed fc1024,fc1024,fc10 4096") != std::string::npos);
}

TEST_CASE("bench FILE.ptx --json: a row per shape and side, rates from the contract's bytes and flops, null without") {
    FileBenchResult r;
    r.path = "mine/saxpy.ptx";
    r.entry = "saxpy";
    r.device = "NVIDIA H100";
    r.arch = "sm_90";
    r.rows.push_back({{{"N", 1000000}}, "ptx", 12.345678, 12e6, 2e6});
    r.rows.push_back({{{"N", 1000000}}, "twin", 12.5, 12e6, 2e6});
    r.rows.push_back({{{"M", 3}, {"N", 7}}, "ptx", 1.5, 0, 0});
    const std::string text = file_bench_json(r);
    CAPTURE(text);
    REQUIRE(text.back() == '\n');
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"file", "entry", "device", "arch", "timing", "rows"});
    CHECK(j["entry"] == "saxpy");
    REQUIRE(j["rows"].size() == 3);
    const auto& a = j["rows"][0];
    CHECK(a["shape"]["N"] == 1000000);
    CHECK(a["side"] == "ptx");
    CHECK(a["us"] == 12.3457);
    CHECK(a["bytes"] == 12000000);
    CHECK(a["gbps"] == 972.0);     // 12e6 B / 12.345678 us = 972.000 GB/s
    CHECK(a["gflops"] == 162.0);   // 2e6 / 12.345678 us
    CHECK(j["rows"][1]["side"] == "twin");
    const auto& c = j["rows"][2];
    CHECK(c["shape"]["M"] == 3);
    CHECK(c["shape"]["N"] == 7);
    CHECK(c["bytes"].is_null());
    CHECK(c["gbps"].is_null());
    CHECK(c["gflops"].is_null());
}
