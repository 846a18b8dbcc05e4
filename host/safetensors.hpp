// Checkpoints in the safetensors format (readable by the `safetensors` Python
// package and PyTorch): an 8-byte little-endian header length, a JSON header,
// then the raw little-endian float32 tensors.
//
// Tensor names follow torch.nn.Linear: fc1.weight [H][I], fc1.bias [H],
// fc2.weight [O][H], fc2.bias [O] (and fc3.* for 3 layers). The metadata holds
// "layers" ("784,128,10") and "format": "pt".
#pragma once

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
// safetensors file holding fcK.weight/fcK.bias F32 tensors of chained shapes).
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

}  // namespace ptxlab
