// bench --json: the results under their keys, in the tables' order, the numbers rounded as the
// tables show them; a NaN (a timing that failed) is null, and the text is JSON whatever the
// device's name holds.
#include "bench.hpp"
#include "verify_file.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

using namespace ptxlab;

TEST_CASE("bench: --json holds every result under its key, rounded as the tables show it") {
    BenchResult r;
    r.device = "NVIDIA H100 \"80GB\"\t\xff";  // a quote, a tab and a byte that is not UTF-8
    r.copy_gbps = 2987.65432;
    r.fma_gflops = 51234.5;
    r.kernels.push_back({"fused", "fused_forward", 64, 3.456789, 1234567.4, 2.0e9 + 0.6, 357.1234, 578.98765, 12.3456});
    r.steps.push_back({"fused/split", 256, 937, 41.234567, std::nan(""), });
    r.targets.push_back({"fused", true, 1234.5678, 0.9812345678, 3, 2811, 401.0004, 88.8888, 12.0});
    BenchOptions opt;
    opt.target = 0.98;
    const std::string text = bench_json(r, opt);
    CAPTURE(text);
    REQUIRE(text.back() == '\n');
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    CHECK(keys == std::vector<std::string>{"device", "copy_gbps", "fma_gflops", "target", "kernels", "steps", "to_target"});
    CHECK(j["device"] == "NVIDIA H100 \"80GB\"\t\xef\xbf\xbd");  // the bad byte became U+FFFD
    CHECK(j["copy_gbps"] == 2987.654);
    CHECK(j["fma_gflops"] == 51234.5);
    CHECK(j["target"] == 0.98);
    REQUIRE(j["kernels"].size() == 1);
    const auto& k = j["kernels"][0];
    CHECK(k.dump() == "{\"set\":\"fused\",\"kernel\":\"fused_forward\",\"batch\":64,\"us\":3.4568,\"bytes\":1234567,"
                      "\"flops\":2000000001,\"gbps\":357.123,\"gflops\":578.988,\"roofline_pct\":12.346}");
    REQUIRE(j["steps"].size() == 1);
    CHECK(j["steps"][0].dump() == "{\"set\":\"fused/split\",\"batch\":256,\"steps\":937,\"gpu_us_per_step\":41.2346,"
                                  "\"wall_us_per_step\":null}");
    REQUIRE(j["to_target"].size() == 1);
    CHECK(j["to_target"][0].dump() == "{\"set\":\"fused\",\"reached\":true,\"train_ms\":1234.568,\"epochs\":3,"
                                      "\"steps\":2811,\"accuracy\":0.981235,\"median_epoch_ms\":401.0,\"jit_ms\":88.889,"
                                      "\"data_ms\":12.0}");
    // No rows: empty arrays.
    const auto empty = nlohmann::json::parse(bench_json(BenchResult{}, opt));
    CHECK(empty["kernels"].empty());
    CHECK(empty["to_target"].empty());
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
