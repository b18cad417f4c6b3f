// Qwen2 / Qwen2.5 and the DeepSeek-R1-Distill-Qwen models: the Llama layer
// with q/k/v biases (loaded whenever the file has them) and RoPE on halves (NeoX).
#include "model/arch/architectures.h"
#include "model/decoder_config.h"

namespace kestrel {

ModelConfig read_qwen2_arch(HparamReader& h, const ModelOptions&) { return read_decoder_basics(h, RopeStyle::NeoX); }

}  // namespace kestrel
