#pragma once
// Control vectors in llama.cpp's form (common_control_vector_load; ../shared/specs/multimodal-lora-router.md B.2):
// GGUF files of F32 vectors `direction.L` (n_embd each, L >= 1), each file scaled by its strength and summed
// into one vector per layer in file order (dst += src * strength); layer L's is added to the residual stream at the
// end of layer L (build_cvec: after the FFN's residual, Gemma 4's output scale, DeepSeek-V4's hyper-connection
// post-mix: every stream) when start <= L <= end (default 1 .. n_layer). Layer 0 is never changed.
#include <cstdint>
#include <string>
#include <vector>

namespace kestrel {

struct ControlVectorFile {
  std::string path;
  float scale = 1.0f;
};

struct ControlVector {
  int64_t n_embd = 0;
  int n_layer = 0;
  std::vector<float> rows;     // n_layer x n_embd
  std::vector<uint8_t> given;  // per layer: a direction applies there
  // Layer il's vector, or null where none applies.
  const float* layer(int il) const {
    return il >= 0 && il < n_layer && given[static_cast<size_t>(il)] ? rows.data() + il * n_embd : nullptr;
  }
};

// The files summed for a model of n_layer layers of width n_embd, applied on layers [start, end] (0: llama.cpp's
// defaults, 1 and n_layer; an end past the last layer is the last). Errors name the file and tensor: a name that is
// not direction.L (L from 1), a tensor that is not a 1-D F32 vector of n_embd, a layer the model does not have, a
// metadata key a control vector does not have; and a range holding none of the model's layers.
ControlVector load_control_vectors(const std::vector<ControlVectorFile>& files, int64_t n_embd, int n_layer, int start,
                                   int end);

// A random control vector for a model (kestrel synth --control-vector): direction.1 .. direction.{n_layer - 1}, values
// of this standard deviation, with cvector-generator's keys (controlvector.model_hint, controlvector.layer_count).
void write_synth_control_vector(const std::string& path, const std::string& arch, int64_t n_embd, int n_layer,
                                uint64_t seed, float stddev);

}  // namespace kestrel
