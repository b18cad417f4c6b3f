#pragma once
// Random-weight models of a chosen architecture and shape, for tests and
// benchmarks when real weights are not at hand.
#include <cstdint>
#include <string>

#include "core/ggml_types.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"

namespace kestrel {

struct SynthShape {
  std::string arch = "llama";  // llama | qwen2
  int64_t dim = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, ctx = 0;
};

// Presets: tiny, 1b (TinyLlama 1.1B shape), 7b (Llama-2-7B shape). Throws for others.
SynthShape synth_preset(const std::string& arch, const std::string& preset);

struct SynthOptions {
  SynthShape shape;
  GgmlType type = GgmlType::F16;
  uint64_t seed = 1;
  const GgufFile* vocab_from = nullptr;  // copy this tokenizer (its size sets the vocab)
  int n_threads = 1;
  std::string name = "kestrel-synth";
};

// Checks the shape and returns a writer that generates each tensor as it is
// written (deterministic for a seed, whatever the thread count).
GgufWriter synth_model(const SynthOptions& options);

}  // namespace kestrel
