// Checkpoints of any --model (safetensors.hpp save_model_safetensors / load_model_checkpoint):
// a CNN round-trips bit for bit under PyTorch's names and shapes, the MLP format is unchanged,
// and a file whose tensors do not fit its spec is refused with the tensor and both shapes.
#include "../../helpers.hpp"
#include "error.hpp"
#include "model.hpp"
#include "recipe.hpp"
#include "safetensors.hpp"

#include <doctest/doctest.h>

#include <algorithm>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {


// The JSON header of a safetensors file, as text.
std::string header_of(const std::vector<uint8_t>& bytes) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[size_t(i)]) << (8 * i);
    return {bytes.begin() + 8, bytes.begin() + 8 + long(n)};
}

// `bytes` with the first `from` replaced by `to` (the same length, so every offset stays).
std::vector<uint8_t> patched(std::vector<uint8_t> bytes, const std::string& from, const std::string& to) {
    REQUIRE(from.size() == to.size());
    auto it = std::search(bytes.begin(), bytes.end(), from.begin(), from.end());
    REQUIRE(it != bytes.end());
    std::copy(to.begin(), to.end(), it);
    return bytes;
}

std::string refusal(const std::vector<uint8_t>& bytes) {
    try {
        parse_model_checkpoint("ck", bytes);
    } catch (const InputError& e) {
        return e.what();
    }
    return {};
}

}  // namespace

TEST_CASE("model checkpoint: the CNN round-trips bit for bit under nn.Sequential's names and PyTorch's shapes") {
    TempDir t;
    const Model m = parse_model("cnn");
    const std::vector<float> p = init_model_params(m, Init::Torch, 3);
    const ExtraTensors extra = {{"optimizer.m", std::vector<float>(m.param_count, 0.5f)}};
    save_model_safetensors(t.file("cnn.safetensors"), m, p, {{"seed", "3"}}, extra);
    const auto bytes = read_bytes(t.file("cnn.safetensors"));
    const std::string h = header_of(bytes);
    // The state_dict of tools/ptxlab_model.py's nn.Sequential: conv [out, in, kh, kw], fc [out, in]
    // with in = 64 * 7 * 7 = 3136 (the NCHW flatten), in layer order.
    const char* want[] = {"\"conv1.weight\":{\"dtype\":\"F32\",\"shape\":[32,1,3,3],\"data_offsets\":[0,1152]}",
                          "\"conv1.bias\":{\"dtype\":\"F32\",\"shape\":[32],\"data_offsets\":[1152,1280]}",
                          "\"conv2.weight\":{\"dtype\":\"F32\",\"shape\":[64,32,3,3],",
                          "\"conv2.bias\":{\"dtype\":\"F32\",\"shape\":[64],",
                          "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[128,3136],",
                          "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[128],",
                          "\"fc2.weight\":{\"dtype\":\"F32\",\"shape\":[10,128],",
                          "\"fc2.bias\":{\"dtype\":\"F32\",\"shape\":[10],",
                          "\"model\":\"conv32,pool,conv64,pool,fc128,fc10\"", "\"input\":\"1x28x28\"",
                          "\"format\":\"pt\"", "\"seed\":\"3\""};
    for (const char* w : want) {
        CAPTURE(w);
        CHECK(h.find(w) != std::string::npos);
    }
    CHECK(h.find("pool1") == std::string::npos);  // a pool layer has no tensor
    CHECK(h.find("\"layers\"") == std::string::npos);
    // The data: the flat layout as it is (conv1.weight first), then the extra tensor.
    CHECK(bytes.size() == 8 + h.size() + 4 * (2 * m.param_count));

    const ModelCheckpoint ck = load_model_checkpoint(t.file("cnn.safetensors"));
    CHECK(ck.model.text() == m.text());
    CHECK(ck.model.param_count == m.param_count);
    CHECK(ck.params == p);
    CHECK(ck.extra == extra);
    CHECK(ck.metadata.at("seed") == "3");
    // The MLP loader refuses it, naming the model.
    CHECK_THROWS_WITH_AS(load_checkpoint(t.file("cnn.safetensors")),
                         doctest::Contains("holds the model 'conv32,pool,conv64,pool,fc128,fc10'"), InputError);
}

TEST_CASE("model checkpoint: bn layers round-trip with their running statistics and num_batches_tracked (I64)") {
    TempDir t;
    const Model m = parse_model("conv8,bn,pool,fc16,bn,fc10");
    const std::vector<float> p = init_model_params(m, Init::Torch, 3);
    std::vector<float> run(m.buffer_count);
    for (size_t i = 0; i < run.size(); ++i) run[i] = 0.25f + float(i) / 7.0f;
    save_model_safetensors(t.file("bn.safetensors"), m, p, {}, {}, run, 1234);
    const auto bytes = read_bytes(t.file("bn.safetensors"));
    const std::string h = header_of(bytes);
    for (const char* w : {"\"bn1.weight\":{\"dtype\":\"F32\",\"shape\":[8],", "\"bn1.bias\":{\"dtype\":\"F32\",\"shape\":[8],",
                          "\"bn1.running_mean\":{\"dtype\":\"F32\",\"shape\":[8],",
                          "\"bn1.running_var\":{\"dtype\":\"F32\",\"shape\":[8],",
                          "\"bn1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],",
                          "\"bn2.running_var\":{\"dtype\":\"F32\",\"shape\":[16],",
                          "\"bn2.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],"}) {
        CAPTURE(w);
        CHECK(h.find(w) != std::string::npos);
    }
    CHECK(bytes.size() == 8 + h.size() + 4 * (m.param_count + m.buffer_count) + 8 * 2);
    const ModelCheckpoint ck = load_model_checkpoint(t.file("bn.safetensors"));
    CHECK(ck.params == p);
    CHECK(ck.buffers == run);
    CHECK(ck.batches_tracked == 1234);
    // Without buffers given: the initial ones (mean 0, var 1), 0 steps.
    save_model_safetensors(t.file("init.safetensors"), m, p);
    const ModelCheckpoint ik = load_model_checkpoint(t.file("init.safetensors"));
    CHECK(ik.buffers == m.initial_buffers());
    CHECK(ik.batches_tracked == 0);
    // The reader's rules stay: a running_var of the wrong shape, a counter that is not I64, or one
    // missing are refused by name.
    auto with = [&](const std::string& from, const std::string& to) { return refusal(patched(bytes, from, to)); };
    CHECK(with("\"bn1.num_batches_tracked\":{\"dtype\":\"I64\"", "\"bn1.num_batches_tracked\":{\"dtype\":\"F64\"")
              .find("dtype F64 is not supported") != std::string::npos);
    CHECK(with("\"bn1.running_mean\":{\"dtype\":\"F32\"", "\"bn1.running_mean\":{\"dtype\":\"I64\"")
              .find("dtype I64 is not supported") != std::string::npos);
    CHECK(with("\"bn2.running_var\"", "\"bn2.running_vax\"").find("needs the tensor 'bn2.running_var' [16]") !=
          std::string::npos);
}

TEST_CASE("model checkpoint: fc-only models of 2 and 3 layers keep the MLP format, other models their spec") {
    TempDir t;
    const Model mlp = parse_model("fc16,fc10");
    const std::vector<float> p = init_model_params(mlp, Init::HeNormal, 5);
    save_model_safetensors(t.file("a.safetensors"), mlp, p);
    save_safetensors(t.file("b.safetensors"), init_params({784, 16, 10}, Init::HeNormal, 5));
    CHECK(read_bytes(t.file("a.safetensors")) == read_bytes(t.file("b.safetensors")));  // byte for byte
    const ModelCheckpoint ck = load_model_checkpoint(t.file("b.safetensors"));
    CHECK(ck.model.text() == "fc16,fc10");
    CHECK(ck.model.layers.front().in == kMnistInput);
    CHECK(ck.params == p);
    CHECK(uses_mlp_format(parse_model("fc32,fc16,fc10")));
    // Four fc layers are past the MLP kernels: written with their spec, read back as such.
    const Model deep = parse_model("fc32,fc16,fc12,fc10", Shape3{1, 4, 5});
    CHECK_FALSE(uses_mlp_format(deep));
    const std::vector<float> q = init_model_params(deep, Init::Torch, 1);
    save_model_safetensors(t.file("d.safetensors"), deep, q);
    const ModelCheckpoint dk = load_model_checkpoint(t.file("d.safetensors"));
    CHECK(dk.model.text() == deep.text());
    CHECK(dk.model.layers.front().in == Shape3{1, 4, 5});
    CHECK(dk.params == q);
}

TEST_CASE("model checkpoint: a file whose tensors do not fit its spec is refused, naming the tensor") {
    TempDir t;
    const Model m = parse_model("conv8,pool,fc10");
    save_model_safetensors(t.file("c.safetensors"), m, init_model_params(m, Init::Torch, 2), {},
                           {{"optimizer.m", std::vector<float>(4, 1.0f)}});
    const auto bytes = read_bytes(t.file("c.safetensors"));
    CHECK(refusal(bytes).empty());
    CHECK(refusal(patched(bytes, "conv8,pool", "conv9,pool")) ==
          "ck: tensor 'conv1.weight' has the shape [8, 1, 3, 3]; the model 'conv9,pool,fc10' needs [9, 1, 3, 3]");
    CHECK(refusal(patched(bytes, "fc1.bias", "fc1.biax")) ==
          "ck: the model 'conv8,pool,fc10' needs the tensor 'fc1.bias' [10], which the file lacks");
    CHECK(refusal(patched(bytes, "optimizer.m", "optimizez.m")) ==
          "ck: tensor 'optimizez.m' is not a parameter of the model 'conv8,pool,fc10'");
    CHECK(refusal(patched(bytes, "pool,fc10", "pool,fc11")).find("its metadata 'model' is not a model") !=
          std::string::npos);
    CHECK(refusal(patched(bytes, "1x28x28", "1x28y28")) ==
          "ck: its metadata 'input' is '1x28y28', not CxHxW (e.g. 1x28x28)");
    for (const char* input : {"-1x28x2", "0x28x28", "1x28x2x", "1x28x2 ", "+1x28x2"}) {
        CAPTURE(input);
        CHECK(refusal(patched(bytes, "1x28x28", input)) ==
              fmt::format("ck: its metadata 'input' is '{}', not CxHxW (e.g. 1x28x28)", input));
    }
}

TEST_CASE("model checkpoint: its metadata cannot make a model larger than its tensors") {
    // The image at most 2^20 values: 1024x1024x2 would make any layer's sizes overflow-prone.
    const std::string conv = R"({"__metadata__":{"model":"conv8,pool,fc10","input":"INPUT"}})";
    CHECK(refusal(safetensors_bytes(edited(conv, "INPUT", "1024x1024x2"), 0)) ==
          "ck: its metadata 'input' is '1024x1024x2': 2097152 values an image, at most 1048576");
    CHECK(refusal(safetensors_bytes(edited(conv, "INPUT", "4294967296x1x1"), 0)) ==
          "ck: its metadata 'input' is '4294967296x1x1', not CxHxW (e.g. 1x28x28)");
    // A spec of 2.7e13 parameters over an empty file: refused for its first missing tensor, before
    // the parameters are allocated.
    const std::string huge = R"({"__metadata__":{"model":"conv1048576k5,fc10","input":"1048576x1x1"}})";
    CHECK(refusal(safetensors_bytes(huge, 0)) == "ck: the model 'conv1048576k5,fc10' needs the tensor 'conv1.weight' "
                                                 "[1048576, 1048576, 5, 5], which the file lacks");
    // One network: a spec and an MLP's layers both is refused.
    CHECK(refusal(safetensors_bytes(R"({"__metadata__":{"model":"fc16,fc10","layers":"784,16,10"}})", 0)) ==
          "ck: its metadata names both the model 'fc16,fc10' and the layers '784,16,10'; a checkpoint holds one network");
    // An MLP checkpoint whose network no model takes (2^20 + 1 inputs), named as the file's.
    const std::string wide = R"({"fc1.weight":{"dtype":"F32","shape":[1,1048577],"data_offsets":[0,4194308]},)"
                             R"("fc1.bias":{"dtype":"F32","shape":[1],"data_offsets":[4194308,4194312]},)"
                             R"("fc2.weight":{"dtype":"F32","shape":[10,1],"data_offsets":[4194312,4194352]},)"
                             R"("fc2.bias":{"dtype":"F32","shape":[10],"data_offsets":[4194352,4194392]}})";
    CHECK(refusal(safetensors_bytes(wide, 4194392)) ==
          "ck: its tensors are not a model ptxlab takes: --model 'fc1,fc10': layer 1 'fc1' flattens 1x1x1048577 = "
          "1048577 inputs (at most 1048576)");
}

TEST_CASE("model checkpoint: eval takes a CNN checkpoint to the data and the GPU, and refuses what the conv kernels cannot run") {
    TempDir t;
    const Model m = parse_model("cnn");
    save_model_safetensors(t.file("cnn.safetensors"), m, init_model_params(m, Init::Torch, 1));
    const std::string nogpu = "PTXLAB_LIBCUDA=/nonexistent/libcuda.so.1 ";
    RunResult r = run_command(nogpu + ptxlab_cmd("eval --data /nonexistent --load " + t.file("cnn.safetensors")));
    CHECK(r.code == 2);
    CHECK(r.output.find("data directory '/nonexistent' does not exist") != std::string::npos);
    RunResult k = run_command(nogpu + ptxlab_cmd("eval --kernels fast --load " + t.file("cnn.safetensors")));
    CHECK(k.code == 2);
    CHECK(k.output.find("a CNN checkpoint runs on the conv kernels") != std::string::npos);
    // fused (FP32, as train --model takes it) goes on to the data and the GPU.
    RunResult f = run_command(nogpu + ptxlab_cmd("eval --kernels fused --data /nonexistent --load " +
                                                 t.file("cnn.safetensors")));
    CHECK(f.code == 2);
    CHECK(f.output.find("data directory '/nonexistent' does not exist") != std::string::npos);
    save_model_safetensors(t.file("tanh.safetensors"), m, init_model_params(m, Init::Torch, 1),
                           {{"train.activation", "tanh"}});
    // Any activation is taken (act.ptx): the data directory is what stops this one.
    RunResult a = run_command(nogpu + ptxlab_cmd("eval --data /nonexistent --load " + t.file("tanh.safetensors")));
    CHECK(a.code == 2);
    CHECK(a.output.find("data directory '/nonexistent' does not exist") != std::string::npos);
}

TEST_CASE("model checkpoint: tools/ptxlab_model.py reads ptxlab's checkpoints and refuses bad specs with ptxlab's words") {
    if (run_command("python3 -c 'import json, struct'").code != 0) {
        MESSAGE("python3 not found: the Python side is not checked here");
        return;
    }
    const std::string tool = "python3 " + fixture("../../tools/ptxlab_model.py");
    REQUIRE(run_command(tool + " --self-test").code == 0);
    TempDir t;
    // The module's state_dict names and shapes, in the data's order, for a CNN, a deep fc model
    // and an MLP checkpoint.
    for (const char* spec : {"cnn", "conv8k5,pool,conv4k1,pool,fc16,fc10", "fc32,fc16,fc12,fc10", "fc16,fc10",
                             "conv8,bn,pool,conv4,bn,pool,fc16,bn,fc10"}) {
        CAPTURE(spec);
        const Model m = parse_model(spec);
        save_model_safetensors(t.file("m.safetensors"), m, init_model_params(m, Init::Torch, 1), {},
                               {{"optimizer.m", std::vector<float>(m.param_count, 0.0f)}});
        RunResult r = run_command(tool + " --check-checkpoint " + t.file("m.safetensors"));
        CHECK(r.code == 0);
        CHECK(r.output.find("model " + m.text() + ": matches the module") != std::string::npos);
    }
    // A checkpoint whose tensors do not fit its spec fails there too.
    const Model m = parse_model("conv8,pool,fc10");
    save_model_safetensors(t.file("c.safetensors"), m, init_model_params(m, Init::Torch, 2));
    auto bytes = read_bytes(t.file("c.safetensors"));
    write_bytes(t.file("bad.safetensors"), patched(bytes, "conv8,pool", "conv9,pool"));
    RunResult bad = run_command(tool + " --check-checkpoint " + t.file("bad.safetensors"));
    CHECK(bad.code == 1);
    CHECK(bad.output.find("conv1.weight is F32 [8, 1, 3, 3], the spec needs F32 [9, 1, 3, 3]") != std::string::npos);
    // The same refusal as host/reference/model.cpp, word for word.
    for (const char* spec : {"conv32,relu,fc10", "fc128,conv8,fc10", "pool,pool,pool,fc10", "conv8,pool", "conv8k4,fc10",
                             "fc0,fc10", "conv8x,fc10", "conv8,,fc10", "cnn,fc10", "fc99999999,fc10"}) {
        CAPTURE(spec);
        std::string want;
        try {
            parse_model(spec);
        } catch (const InputError& e) {
            want = e.what();
        }
        REQUIRE(!want.empty());
        RunResult r = run_command(tool + " --shapes '" + spec + "'");
        CHECK(r.code == 2);
        CHECK(r.output == "ptxlab_model: " + want + "\n");
    }
}
