// Checkpoints: round trip, and bad files refused with a clear message.
#include "../../helpers.hpp"
#include "error.hpp"
#include "rng.hpp"
#include "safetensors.hpp"
#include "train.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
std::string load_error(const std::vector<uint8_t>& bytes) {
    try {
        parse_safetensors("ckpt", bytes);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

// The header of a valid 2-1-1 MLP checkpoint with 20 data bytes, for the cases to edit.
const std::string kTiny =
    R"({"__metadata__":{"format":"pt"},"fc1.weight":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
    R"("fc1.bias":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
    R"("fc2.weight":{"dtype":"F32","shape":[1,1],"data_offsets":[12,16]},)"
    R"("fc2.bias":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})";

// The refusal of kTiny with `from` replaced by `to` ("" when it loads).
std::string tiny_error(const std::string& from, const std::string& to, size_t data_bytes = 20) {
    return load_error(safetensors_bytes(edited(kTiny, from, to), data_bytes));
}
}  // namespace

TEST_CASE("safetensors: a 2- and a 3-layer model round-trip bit for bit") {
    for (auto sizes : {std::vector<unsigned>{784, 128, 10}, std::vector<unsigned>{20, 7, 5, 3}}) {
        TempDir t;
        NetParams net = init_params(sizes, Init::Notebook, 77);
        save_safetensors(t.file("m.safetensors"), net, {{"note", "a \"quoted\" value"}});
        NetParams back = load_safetensors(t.file("m.safetensors"));
        CHECK(back.sizes == sizes);
        REQUIRE(back.W.size() == net.W.size());
        for (size_t l = 0; l < net.W.size(); ++l) {
            CHECK(back.W[l] == net.W[l]);
            CHECK(back.b[l] == net.b[l]);
        }
        // No temporary file is left behind.
        size_t files = 0;
        for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(t.path)) ++files;
        CHECK(files == 1);
        // The header is 8-byte aligned JSON naming the tensors as torch.nn.Linear does.
        auto bytes = read_bytes(t.file("m.safetensors"));
        uint64_t hlen = 0;
        for (int i = 0; i < 8; ++i) hlen |= uint64_t(bytes[size_t(i)]) << (8 * i);
        CHECK(hlen % 8 == 0);
        std::string header(bytes.begin() + 8, bytes.begin() + 8 + long(hlen));
        CHECK(header.find("\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(sizes[1]) + "," +
                          std::to_string(sizes[0]) + "]") != std::string::npos);
    }
}

TEST_CASE("safetensors: bad checkpoints are refused") {
    TempDir t;
    NetParams net = init_params({6, 4, 3}, Init::HeUniform, 5);
    save_safetensors(t.file("m.safetensors"), net);
    const auto good = read_bytes(t.file("m.safetensors"));

    CHECK(load_error({1, 2, 3}).find("too short") != std::string::npos);
    auto truncated = good;
    truncated.resize(good.size() - 5);
    CHECK(load_error(truncated).find("outside the") != std::string::npos);
    auto huge = good;
    huge[7] = 0x40;
    CHECK(load_error(huge).find("does not fit") != std::string::npos);
    auto garbage = good;
    garbage[9] = '!';
    CHECK(load_error(garbage).find("bad safetensors header") != std::string::npos);

    auto replace = [&](const std::string& from, const std::string& to) {
        std::string s(good.begin(), good.end());
        auto pos = s.find(from);
        REQUIRE(pos != std::string::npos);
        s.replace(pos, from.size(), to);
        return std::vector<uint8_t>(s.begin(), s.end());
    };
    CHECK(load_error(replace("\"F32\"", "\"F16\"")).find("dtype F16 is not supported") != std::string::npos);
    CHECK(load_error(replace("fc2.bias", "fc2.bias")).empty());
    CHECK(load_error(replace("fc2.bias", "fc9.bias")).find("must both be present") != std::string::npos);
    // [6,4] keeps the byte count but no longer matches the bias.
    CHECK(load_error(replace("\"shape\":[4,6]", "\"shape\":[6,4]")).find("must be [out][in]") != std::string::npos);
    // A second layer whose input does not chain to the first one's output.
    CHECK(load_error(replace("\"shape\":[3,4]", "\"shape\":[4,3]")).find("must be [out][in]") != std::string::npos);
    // Two tensors sharing bytes (fc1.bias moved onto fc1.weight's bytes), a gap, trailing bytes, a key twice.
    const std::string overlap = load_error(replace("\"data_offsets\":[96,112]", "\"data_offsets\":[80, 96]"));
    CAPTURE(overlap);
    CHECK(overlap.find("overlap; each tensor needs its own bytes") != std::string::npos);
    CHECK(load_error(replace("\"data_offsets\":[0,96]", "\"data_offsets\":[0,80]")).find("holds 80 bytes") !=
          std::string::npos);
    auto trailing = good;
    trailing.insert(trailing.end(), {0, 0, 0, 0});
    CHECK(load_error(trailing).find("the last 4 data bytes (from 172) belong to no tensor") != std::string::npos);
    CHECK(load_error(replace("fc2.bias", "fc1.bias")).find("appears twice") != std::string::npos);

    const std::string missing = "checkpoint '" + t.file("missing.safetensors") + "' does not exist";
    CHECK_THROWS_WITH_AS(load_safetensors(t.file("missing.safetensors")), doctest::Contains(missing.c_str()),
                         InputError);
    CHECK_THROWS_WITH_AS(load_safetensors(t.path.string()), doctest::Contains("is a directory"), InputError);
    REQUIRE(mkfifo(t.file("fifo").c_str(), 0600) == 0);
    CHECK_THROWS_WITH_AS(load_safetensors(t.file("fifo")), doctest::Contains("is a FIFO, not a regular file"),
                         InputError);
}

TEST_CASE("safetensors: a training checkpoint holds the optimizer state and the position, and refuses another recipe") {
    TempDir t;
    TrainConfig cfg;  // the default recipe: Nesterov, one buffer of optimizer state
    TrainResult r;
    r.model = init_params({784, 16, 10}, Init::Torch, 11);
    r.end.model = r.model;
    r.end.state1.resize(784 * 16 + 16 + 16 * 10 + 10);
    for (size_t i = 0; i < r.end.state1.size(); ++i) r.end.state1[i] = float(i) * 0.25f - 3.0f;
    r.end.step = 1000;
    r.end.epoch = 2;
    r.end.k = 63;
    r.end.epoch_rng = 0xfedcba9876543210ull;
    r.end.reached = true;
    r.end.target_step = 900;
    r.end.train_ms = 12.345678901234;
    r.end.train_ms_to_target = 11.5;
    cfg.layers = {784, 16, 10};
    save_training_checkpoint(t.file("c.safetensors"), cfg, r);

    ResumeState back = load_training_checkpoint(t.file("c.safetensors"), cfg);
    CHECK(back.model.W == r.model.W);
    CHECK(back.model.b == r.model.b);
    CHECK(back.state1 == r.end.state1);
    CHECK(back.state2.empty());
    CHECK(back.step == 1000);
    CHECK(back.epoch == 2);
    CHECK(back.k == 63);
    CHECK(back.epoch_rng == 0xfedcba9876543210ull);
    CHECK(back.reached);
    CHECK(back.target_step == 900);
    CHECK(back.train_ms == 12.345678901234);
    CHECK(back.train_ms_to_target == 11.5);
    // The model alone still loads (eval, PyTorch): the optimizer tensors are skipped.
    NetParams m = load_safetensors(t.file("c.safetensors"));
    CHECK(m.W == r.model.W);

    TrainConfig other = cfg;
    other.lr = 0.05f;
    CHECK_THROWS_WITH_AS(load_training_checkpoint(t.file("c.safetensors"), other),
                         doctest::Contains("was trained with lr 0.1, this run asks for lr 0.05"), InputError);
    other = cfg;
    other.optim.kind = OptimKind::Adam;
    CHECK_THROWS_WITH_AS(load_training_checkpoint(t.file("c.safetensors"), other),
                         doctest::Contains("was trained with optimizer nesterov"), InputError);
    // A plain model file is not a training checkpoint.
    save_safetensors(t.file("m.safetensors"), r.model);
    CHECK_THROWS_WITH_AS(load_training_checkpoint(t.file("m.safetensors"), cfg),
                         doctest::Contains("was not written by ptxlab train --save"), InputError);
}

TEST_CASE("safetensors: the header is JSON, with the format's rules on top") {
    CHECK(tiny_error("", "").empty());
    // Escapes are decoded: fc1.w\u0065ight is fc1.weight.
    CHECK(tiny_error("\"fc1.weight\"", "\"fc1.w\\u0065ight\"").empty());
    // JSON errors name the byte of the file: the header starts at byte 8.
    CHECK(tiny_error("{\"__metadata__\"", "{!__metadata__\"").find("bad safetensors header at byte 9: ") == 6);
    CHECK(tiny_error("\"pt\"", "\"p\xff\"").find("ill-formed UTF-8") != std::string::npos);
    const std::string trailing = load_error(safetensors_bytes(kTiny + " x", 20));
    CAPTURE(trailing);
    CHECK(trailing.find(fmt::format("bad safetensors header at byte {}: ", 8 + kTiny.size() + 1)) != std::string::npos);
    CHECK(trailing.find("expected end of input") != std::string::npos);
    CHECK(load_error(safetensors_bytes(kTiny + "        ", 20)).empty());  // spaces pad the header
    CHECK(load_error(safetensors_bytes("[]", 0)) == "ckpt: the header is not a JSON object");

    // No key twice in one object (JSON allows it; a second value would silently win).
    CHECK(tiny_error("\"format\":\"pt\"", "\"format\":\"pt\",\"format\":\"pt2\"") ==
          "ckpt: bad safetensors header: the key 'format' appears twice in '__metadata__'");
    CHECK(tiny_error("\"dtype\":\"F32\",\"shape\":[1,2]", "\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1,2]") ==
          "ckpt: bad safetensors header: the key 'dtype' appears twice in 'fc1.weight'");
    CHECK(tiny_error("\"fc1.weight\"", "\"__metadata__\":{},\"fc1.weight\"") ==
          "ckpt: bad safetensors header: the key '__metadata__' appears twice in the top level");
    CHECK(tiny_error("\"fc2.weight\"", "\"fc1.bias\"") == "ckpt: bad safetensors header: tensor 'fc1.bias' appears twice");

    // Values: objects, arrays, strings and whole numbers >= 0 only.
    for (const char* v : {"true", "null", "-1", "1.5", "1e2", "18446744073709551616"}) {
        CAPTURE(v);
        const std::string e = tiny_error("\"shape\":[1,2]", fmt::format("\"shape\":[1,{}]", v));
        CHECK(e.find("ckpt: bad safetensors header: ") == 0);
        CHECK(e.find(" at 'fc1.weight/shape' is not taken") != std::string::npos);
    }
    CHECK(tiny_error("\"shape\":[1,2]", "\"shape\":[1,-2]").find(": -2 at 'fc1.weight/shape'") != std::string::npos);
    // At most 8 levels below the top: the shape array is level 2, so 5 arrays in it put the 1 at
    // level 8 (it parses, and is no number), 6 put it at level 9.
    CHECK(tiny_error("\"shape\":[1,2]", "\"shape\":[[[[[[1]]]]]]") ==
          "ckpt: tensor 'fc1.weight': shape holds a non-number");
    CHECK(tiny_error("\"shape\":[1,2]", "\"shape\":[[[[[[[1]]]]]]]") ==
          "ckpt: bad safetensors header: nested too deeply at 'fc1.weight/shape' (at most 8 levels)");

    // The metadata maps strings to strings; an entry holds dtype, shape and data_offsets only.
    CHECK(tiny_error("\"format\":\"pt\"", "\"format\":5") == "ckpt: __metadata__ 'format' is 5, not a string");
    CHECK(tiny_error("\"__metadata__\":{", "\"__metadata__\":[{").find("bad safetensors header") == 6);
    CHECK(tiny_error("{\"format\":\"pt\"}", "[\"pt\"]") == "ckpt: __metadata__ is not an object");
    CHECK(tiny_error("\"dtype\":\"F32\",\"shape\":[1,2]", "\"dtype\":\"F32\",\"fuzz\":\"x\",\"shape\":[1,2]") ==
          "ckpt: tensor 'fc1.weight': unknown field 'fuzz' (an entry holds dtype, shape and data_offsets)");
    CHECK(tiny_error("{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]}", "[1]") ==
          "ckpt: tensor 'fc1.weight': entry is not an object");
    CHECK(tiny_error("\"dtype\":\"F32\",\"shape\":[1,2]", "\"dtype\":32,\"shape\":[1,2]") ==
          "ckpt: tensor 'fc1.weight': no dtype");
    CHECK(tiny_error("\"shape\":[1,2]", "\"shape\":\"1,2\"") == "ckpt: tensor 'fc1.weight': no shape");
    CHECK(tiny_error("\"shape\":[1,2]", "\"shape\":[1,\"2\"]") == "ckpt: tensor 'fc1.weight': shape holds a non-number");
    CHECK(tiny_error("[0,8]", "[0,8,8]") == "ckpt: tensor 'fc1.weight': data_offsets must be [begin, end]");
    CHECK(tiny_error("[0,8]", "[0,\"8\"]") == "ckpt: tensor 'fc1.weight': bad data_offsets");
}

TEST_CASE("safetensors: element counts are checked products, and a file without fc tensors says what it holds") {
    // [2^30, 2^30, 4] floats are 2^64 bytes, which would wrap to 0 and pass for data_offsets [0, 0].
    const std::string big = R"(,"optimizer.big":{"dtype":"F32","shape":[1073741824,1073741824,4],"data_offsets":[20,20]}})";
    CHECK(tiny_error("]}}", "]}" + big) ==
          "ckpt: tensor 'optimizer.big': shape [1073741824, 1073741824, 4] has too many elements");
    CHECK(tiny_error("]}}", "]}" + edited(big, "4]", "1073741824,1073741824]")).find("has too many elements") !=
          std::string::npos);
    // 2^60 elements fit: their bytes are simply not there.
    CHECK(tiny_error("]}}", "]}" + edited(big, ",4]", "]")) ==
          "ckpt: tensor 'optimizer.big': holds 0 bytes but its shape needs 4611686018427387904");
    CHECK(tiny_error("]}}", "]}" + edited(big, "[1073741824,", "[1073741825,")) ==
          "ckpt: tensor 'optimizer.big': dimension too large");
    // A zero dimension makes no elements, however large the others: an empty tensor.
    const auto empty = parse_checkpoint("ckpt", safetensors_bytes(edited(kTiny, "]}}", "]}" + edited(big, ",4]", ",4,0]")), 20));
    REQUIRE(empty.extra.count("optimizer.big") == 1);
    CHECK(empty.extra.at("optimizer.big").empty());

    // No fc1: the file's tensors are named instead of a layer count.
    CHECK(load_error(safetensors_bytes(R"({"optimizer.state1":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)) ==
          "ckpt: no fc1.weight / fc1.bias tensors: not a ptxlab checkpoint? it holds: optimizer.state1");
    CHECK(load_error(safetensors_bytes(R"({"__metadata__":{}})", 0)) ==
          "ckpt: no fc1.weight / fc1.bias tensors: not a ptxlab checkpoint? it holds: no tensors");
    std::string many = "{";
    for (int i = 0; i < 10; ++i) many += fmt::format(R"({}"t{}":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}})", i ? "," : "", i, 4 * i, 4 * i + 4);
    CHECK(load_error(safetensors_bytes(many + "}", 40)) ==
          "ckpt: no fc1.weight / fc1.bias tensors: not a ptxlab checkpoint? it holds: t0, t1, t2, t3, t4, t5, t6, t7, "
          "... (10 tensors in all)");
    CHECK(tiny_error(R"(,"fc2.weight":{"dtype":"F32","shape":[1,1],"data_offsets":[12,16]},"fc2.bias":{"dtype":"F32","shape":[1],"data_offsets":[16,20]})",
                     "", 12) == "ckpt: found 1 layer (fc1.weight, fc1.bias, ...); ptxlab models have 2 or 3");

    // The metadata's "layers" names the network the tensors hold.
    CHECK(tiny_error("\"format\":\"pt\"", "\"format\":\"pt\",\"layers\":\"2,1,1\"").empty());
    CHECK(tiny_error("\"format\":\"pt\"", "\"format\":\"pt\",\"layers\":\"784,128,10\"") ==
          "ckpt: its metadata 'layers' is '784,128,10' but its tensors hold the network 2,1,1 (fc1.weight [1, 2], ...)");
}

TEST_CASE("safetensors: train --resume and eval refuse a training checkpoint that disagrees with its own metadata") {
    TempDir t;
    TrainConfig cfg;  // the default recipe: Nesterov, one buffer of optimizer state; 5 epochs
    cfg.layers = {784, 16, 10};
    const size_t P = 784 * 16 + 16 + 16 * 10 + 10;
    TrainResult r;
    r.model = init_params(cfg.layers, Init::Torch, 11);
    r.end.state1.assign(P, 0.5f);
    r.end.step = 1000;  // 63 steps into epoch 2: 937 steps an epoch
    r.end.epoch = 2;
    r.end.k = 63;
    r.end.reached = true;
    r.end.target_step = 900;
    r.end.train_ms = 12.5;
    r.end.train_ms_to_target = 11.5;
    save_training_checkpoint(t.file("c.safetensors"), cfg, r);
    const Checkpoint good = load_checkpoint(t.file("c.safetensors"));
    const std::string path = t.file("e.safetensors");

    // The checkpoint with metadata entries changed ("-": removed) and the optimizer tensors
    // `extra`: what train --resume and eval's check say ("" when they take it).
    struct Said {
        std::string resume, eval;
    };
    auto refusals = [&](const std::map<std::string, std::string>& changes, const ExtraTensors& extra) {
        std::map<std::string, std::string> meta = good.metadata;
        for (const auto& [k, v] : changes) {
            if (v == "-") meta.erase(k);
            else meta[k] = v;
        }
        save_safetensors(path, good.net, meta, extra);
        Said s;
        try {
            load_training_checkpoint(path, cfg);
        } catch (const InputError& e) {
            s.resume = e.what();
        }
        try {
            check_checkpoint_metadata(path, load_model_checkpoint(path));
        } catch (const InputError& e) {
            s.eval = e.what();
        }
        return s;
    };
    // The same refusal from both, with the path cut off.
    auto refusal = [&](const std::map<std::string, std::string>& changes, const ExtraTensors& extra) {
        const Said s = refusals(changes, extra);
        CHECK(s.resume == s.eval);
        return s.eval.starts_with(path + ": ") ? s.eval.substr(path.size() + 2) : s.eval;
    };
    auto meta = [&](const std::string& key, const std::string& value) { return refusal({{key, value}}, good.extra); };
    const ExtraTensors state1 = good.extra;

    CHECK(refusal({}, state1).empty());
    CHECK(meta("train.layers", "784,128,10") ==
          "its metadata 'train.layers' is '784,128,10' but its tensors hold the network 784,16,10");

    // The optimizer state: the buffers the optimizer named keeps, one float per parameter each.
    CHECK(refusal({}, {}) == "its optimizer nesterov keeps 1 state buffer of 12730 floats, but it has no tensor "
                             "'optimizer.state1'");
    CHECK(refusal({}, {{"optimizer.state1", std::vector<float>(P - 1)}}) ==
          "tensor 'optimizer.state1' holds 12729 floats; its optimizer nesterov keeps one per parameter, 12730");
    CHECK(refusal({}, {{"optimizer.state1", std::vector<float>(P)}, {"optimizer.state2", std::vector<float>(P)}}) ==
          "tensor 'optimizer.state2' is not a state buffer of its optimizer nesterov (which keeps 1)");
    CHECK(refusal({}, {{"optimizer.m", std::vector<float>(P)}}).find("has no tensor 'optimizer.state1'") !=
          std::string::npos);
    CHECK(meta("train.optimizer", "adam (betas 0.9, 0.999, eps 1e-08), weight decay 0") ==
          "its optimizer adam keeps 2 state buffers of 12730 floats, but it has no tensor 'optimizer.state2'");
    CHECK(meta("train.optimizer", "sgd, weight decay 0") ==
          "tensor 'optimizer.state1' is not a state buffer of its optimizer sgd (which keeps 0)");
    CHECK(meta("train.optimizer", "lbfgs").find("its metadata 'train.optimizer' is 'lbfgs', which names no optimizer") == 0);

    // The position: inside the schedule, and one a run reaches.
    CHECK(meta("resume.epoch", "77") == "its metadata 'resume.epoch' is 77, outside the 5 epochs of its schedule "
                                        "('train.epochs')");
    CHECK(meta("resume.epoch", "0").find("its metadata 'resume.epoch' is 0, outside the 5 epochs") == 0);
    const std::string adds_up = "its position does not add up: ";
    CHECK(meta("resume.k", "999999999") ==
          adds_up + "1000 steps done ('resume.step') at step 999999999 of epoch 2 ('resume.k', 'resume.epoch'); a run "
                    "has then done (epoch - 1) x (its steps an epoch, at least k) + k");
    CHECK(meta("resume.k", "500").empty());              // epoch 2 done: 500 steps an epoch
    CHECK(meta("resume.k", "501").find(adds_up) == 0);   // 499 steps an epoch, and step 501 of one
    CHECK(meta("resume.epoch", "3").find(adds_up) == 0);  // 937 steps are not 2 whole epochs
    CHECK(meta("resume.epoch", "1").find(adds_up) == 0);  // epoch 1: the steps done are k
    CHECK(refusal({{"resume.epoch", "3"}, {"resume.step", "1937"}}, state1).empty());  // 937 steps an epoch
    CHECK(refusal({{"resume.epoch", "5"}, {"resume.k", "937"}, {"resume.step", "4685"}}, state1).empty());  // the end
    CHECK(meta("resume.target_step", "1001").find("its target entries do not add up: reached 1, at step 1001") == 0);
    CHECK(meta("resume.train_ms_to_target", "13").find("its target entries do not add up") == 0);
    CHECK(meta("resume.reached", "0").find("its target entries do not add up: reached 0, at step 900") == 0);

    // Every entry a number in range.
    for (const char* v : {"1000x", "-1", "", " 1000", "+1000", "1e3", "0x10"}) {
        CAPTURE(v);
        CHECK(meta("resume.step", v) == fmt::format("its metadata 'resume.step' is '{}', not a whole number", v));
    }
    CHECK(meta("resume.step", "4294967296") == "its metadata 'resume.step' is 4294967296, past 4294967295");
    CHECK(meta("resume.k", "99999999999999999999") == "its metadata 'resume.k' is 99999999999999999999, past 4294967295");
    CHECK(meta("resume.epoch_rng", "18446744073709551616") ==
          "its metadata 'resume.epoch_rng' is 18446744073709551616, past 18446744073709551615");
    CHECK(meta("resume.epoch_rng", "18446744073709551615").empty());
    CHECK(meta("resume.reached", "2") == "its metadata 'resume.reached' is 2, past 1");
    for (const char* v : {"nan", "-1", "inf", "1e999", "12.5ms", ""}) {
        CAPTURE(v);
        CHECK(meta("resume.train_ms", v) ==
              fmt::format("its metadata 'resume.train_ms' is '{}', not a time in ms (a finite number >= 0)", v));
    }
    CHECK(meta("train.epochs", "five") == "its metadata 'train.epochs' is 'five', not a whole number");
    CHECK(meta("resume.k", "-") ==
          "its metadata has no 'resume.k' (a train --save checkpoint has every resume.* entry)");
    CHECK(meta("train.epochs", "-") == "its metadata has resume.* entries but no 'train.epochs'");

    // Without resume.* entries a file is a model: eval takes it, train --resume does not.
    std::map<std::string, std::string> no_position;
    for (const auto& [k, v] : good.metadata)
        if (k.starts_with("resume.")) no_position[k] = "-";
    const Said model = refusals(no_position, state1);
    CHECK(model.eval.empty());
    CHECK(model.resume == "--resume: " + path + " has no 'resume.step' entry: it was not written by ptxlab train --save");
}

TEST_CASE("train: a resumed state is checked against the run and its data before the GPU") {
    TrainConfig cfg;
    cfg.layers = {4, 3, 10};
    cfg.batch = 2;
    Split train;  // 10 images of 2x2: 5 steps an epoch
    train.count = 10;
    train.rows = train.cols = 2;
    ResumeState rs;
    rs.model.sizes = cfg.layers;
    rs.state1.assign(4 * 3 + 3 + 3 * 10 + 10, 0.0f);
    rs.epoch = 2;
    rs.k = 3;
    rs.step = 8;
    cfg.resume = &rs;
    auto refusal = [&] {
        try {
            cfg.validate(train);
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(refusal().empty());
    rs.step = 9;
    CHECK(refusal() == "--resume: the checkpoint's position (epoch 2, step 3 of 5, 9 steps done) does not fit 5 epochs "
                       "of 5 steps (10 training samples in batches of 2)");
    rs.k = 4;
    CHECK(refusal().empty());
    rs = {rs.model, {}, rs.state1, {}, 25, 5, 5};  // the whole schedule done
    CHECK(refusal().empty());
    rs.k = 6;
    rs.step = 26;
    CHECK(refusal().find("--resume: the checkpoint's position (epoch 5, step 6 of 5, 26 steps done)") == 0);
    rs = {rs.model, {}, rs.state1, {}, 30, 6, 5};
    CHECK(refusal().find("--resume: the checkpoint's position (epoch 6, step 5 of 5") == 0);
    rs = {rs.model, {}, rs.state1, {}, 8, 2, 3};
    rs.model.sizes = {4, 5, 10};
    CHECK(refusal() == "--resume: the checkpoint's network is 4,5,10, this run's 4,3,10");
    rs.model.sizes = cfg.layers;
    rs.state1.pop_back();
    CHECK(refusal() == "--resume: the checkpoint holds 54 floats of optimizer state 1; nesterov (momentum 0.9) needs 55");
    rs.state1.push_back(0.0f);
    rs.state2 = rs.state1;
    CHECK(refusal() == "--resume: the checkpoint holds 55 floats of optimizer state 2; nesterov (momentum 0.9) needs 0");
}
