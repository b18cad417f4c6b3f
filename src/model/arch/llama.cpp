// Llama 1/2/3 (also TinyLlama, Mistral, DeepSeek-LLM/Coder and the
// R1-Distill-Llama models): RoPE on adjacent pairs, optional q/k/v biases,
// Llama 3's `rope_freqs.weight` frequency divisors (loaded with the weights).
// Files with experts are Mixtral: softmax over the router, top-k, the chosen
// weights renormalised, each expert as wide as feed_forward_length.
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_llama_arch(HparamReader& h, const ModelOptions&) {
  ModelConfig c = read_decoder_basics(h, RopeStyle::Adjacent);
  if (h.int_or("expert_count", 0) > 0) read_routed_experts(h, c, c.n_ff, /*normalize=*/true);
  return c;
}

}  // namespace kestrel
