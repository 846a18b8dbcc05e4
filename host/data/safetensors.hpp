// Checkpoints in the safetensors format (readable by the `safetensors` Python
// package and PyTorch): an 8-byte little-endian header length, a JSON header,
// then the raw little-endian float32 tensors.
//
// Tensor names follow torch.nn.Linear: fc1.weight [H][I], fc1.bias [H],
// fc2.weight [O][H], fc2.bias [O] (and fc3.* for 3 layers). The metadata holds
// "layers" ("784,128,10") and "format": "pt". Models with conv layers: see
// save_model_safetensors below.
#pragma once

#include "model.hpp"
#include "reference.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ptxlab {

// Extra flat F32 tensors beside the model's, named "optimizer.NAME" (train --resume's optimizer
// state); readers that only want the model skip them.
using ExtraTensors = std::map<std::string, std::vector<float>>;

// Writes to a temporary file beside `path` and renames it into place, so a
// crash never leaves a half-written checkpoint.
void save_safetensors(const std::string& path, const NetParams& net,
                      const std::map<std::string, std::string>& metadata = {}, const ExtraTensors& extra = {});

// Reads and validates a checkpoint written by save_safetensors (or any
// safetensors file holding fcK.weight/fcK.bias F32 tensors of chained shapes). The header is
// JSON (nlohmann-json) under the format's rules: no key twice, at most 8 levels deep, only
// strings and whole numbers >= 0 as values, string metadata, tensor entries of dtype, shape and
// data_offsets only, element counts that fit a 64-bit byte count, the tensors' bytes covering
// the data without gaps or overlaps. The metadata's "layers", when there, names the tensors'
// network. Any failure is an InputError naming the file and the problem.
NetParams load_safetensors(const std::string& path);
// The same from bytes in memory (used by load_safetensors and tests).
NetParams parse_safetensors(const std::string& path, const std::vector<uint8_t>& bytes);

// Everything a checkpoint holds: the model, the "optimizer.*" tensors and the metadata.
struct Checkpoint {
    NetParams net;
    ExtraTensors extra;
    std::map<std::string, std::string> metadata;
};
Checkpoint load_checkpoint(const std::string& path);
Checkpoint parse_checkpoint(const std::string& path, const std::vector<uint8_t>& bytes);

// ---- Checkpoints of any --model (model.hpp) ----
// A 2- or 3-layer fc-only model is written as above (the MLP format, unchanged). Any other
// model holds each conv and fc layer's tensors under model.hpp's layer names, in PyTorch's
// layout: conv1.weight [out][in][k][k], conv1.bias [out], fc1.weight [out][in] (`in` the
// flattened NCHW input, c * H * W + y * W + x), fc1.bias [out], bn1.weight [C], bn1.bias [C],
// ...; pool layers have none. After the parameters, each bn layer's buffers: bn1.running_mean
// [C], bn1.running_var [C] (F32) and bn1.num_batches_tracked [] (I64, the one tensor that is
// not F32: the training steps taken, as PyTorch counts them).
// These are the state_dict keys of tools/ptxlab_model.py's nn.Sequential, whose children are
// named conv1, conv1_act, pool1, flatten, fc1, ... The metadata holds "model" (the spec, e.g.
// conv32,pool,conv64,pool,fc128,fc10), "input" ("1x28x28") and "format": "pt". Reading checks
// every tensor against the spec (name and shape; nothing missing, nothing else but
// optimizer.*): a mismatch is an InputError naming the tensor and both shapes.
struct ModelCheckpoint {
    Model model;
    std::vector<float> params;   // the model's flat layout
    std::vector<float> buffers;  // its bn layers' running statistics (model.hpp's buffer layout)
    int64_t batches_tracked = 0; // their num_batches_tracked (0 without bn layers)
    ExtraTensors extra;
    std::map<std::string, std::string> metadata;
};
// True when `m` is written in the MLP format (fc-only with 2 or 3 layers).
bool uses_mlp_format(const Model& m);
// buffers: the bn layers' running statistics (empty: their initial values), batches_tracked
// their num_batches_tracked.
void save_model_safetensors(const std::string& path, const Model& m, const std::vector<float>& params,
                            const std::map<std::string, std::string>& metadata = {}, const ExtraTensors& extra = {},
                            const std::vector<float>& buffers = {}, int64_t batches_tracked = 0);
// Reads either kind: an MLP checkpoint becomes its fc-only model.
ModelCheckpoint load_model_checkpoint(const std::string& path);
ModelCheckpoint parse_model_checkpoint(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace ptxlab
