#pragma once
// Activation-aware weight scaling (AWQ, Lin et al., 2023): a few input
// channels carry much larger activations than the rest, and rounding errors
// in their weights cost the most. For each input site (q/k/v, gate/up, down,
// the attention output, the output head) the weights' columns are multiplied
// by s_c = mean|x_c|^α (normalised) and the operation that produces the
// input is divided by s — the RMSNorm weights before q/k/v, gate/up and the
// output head; the rows of ffn_up before ffn_down; the rows (and bias) of
// attn_v before attn_output, with s shared by the query heads of one KV
// group. The model's function is unchanged in exact arithmetic; only the
// rounding moves. α is searched per site over 0, 0.1, ..., 1 for the least
// squared output error on sampled calibration inputs (α = 0 is plain
// round-to-nearest, so the search never does worse on those samples).
// Llama-family and Qwen2 names; other sites are left unscaled.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "formats/ggml_types.h"
#include "gguf/gguf.h"
#include "quant/calibration.h"

namespace kestrel {

struct AwqResult {
  std::map<std::string, std::vector<float>> tensors;      // changed tensors, as float32
  std::map<std::string, std::vector<float>> input_scale;  // weight -> s (its input is now x / s)
  std::vector<std::string> report;                        // one line per scaled site
};

// type_of(name): the type each matrix will be written in. fixed_alpha >= 0
// skips the search and scales every site with that alpha.
AwqResult awq_scale(const GgufFile& in, const CalibrationStats& stats,
                    const std::function<GgmlType(const std::string&)>& type_of, int n_threads, double fixed_alpha = -1);

}  // namespace kestrel
