#pragma once
// The sizes read from metadata must be those of the file's own tensors.
// The weight loader would refuse a mismatch too, but naming only a tensor;
// this names the metadata key that is wrong (embedding_length, head counts,
// feed_forward_length, block_count), before anything is sized from it.
#include "model/hparams_reader.h"
#include "model/model.h"

namespace kestrel {

// per_head_projections: the family has blk.N.attn_q / attn_k with n_head /
// n_head_kv heads of head_dim (not MLA's low-rank projections).
void check_config_against_tensors(const HparamReader& h, const ModelConfig& c, bool per_head_projections);

}  // namespace kestrel
