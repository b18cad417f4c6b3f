#pragma once
// Importance matrices in llama.cpp's GGUF imatrix format: for every weight
// matrix, the sum over calibration tokens of each input channel's square
// (`<weight>.in_sum2`, F32 [n_per_row, n_mat]) and the tokens summed
// (`<weight>.counts`, F32 [1, n_mat]); n_mat > 1 for merged MoE experts (one
// row per expert, each over the tokens routed to it). Metadata:
// general.type "imatrix", imatrix.datasets, imatrix.chunk_count,
// imatrix.chunk_size. A channel's importance is in_sum2 / counts: the mean
// square of the activation it multiplies, which is what the quantizers'
// weighted fits weigh errors by (block_formats.h, quantize_row).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "quant/calibration.h"

namespace kestrel {

struct ImportanceEntry {
  int64_t n_per_row = 0, n_mat = 1;
  std::vector<float> in_sum2;  // n_mat x n_per_row
  std::vector<float> counts;   // n_mat
};

struct ImportanceMatrix {
  std::map<std::string, ImportanceEntry> entries;  // by weight name, e.g. "blk.0.attn_q.weight"
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0, chunk_size = 0;

  // Matrix `mat`'s importance per input channel (in_sum2 / counts), or an
  // empty vector when the matrix has no entry or saw no tokens (an expert
  // the text never reached): the caller quantizes it unweighted.
  std::vector<float> importance(const std::string& weight, int64_t mat = 0) const;
};

// From calibration statistics: every matrix input the model read, the
// per-expert slices of merged tensors ("<name>.weight.<i>") gathered into
// one entry; the output head only with `with_output` (llama.cpp leaves it out too).
ImportanceMatrix importance_from_calibration(const CalibrationStats& stats, const std::string& dataset,
                                             uint32_t chunk_count, uint32_t chunk_size, bool with_output = false);

void write_imatrix(const ImportanceMatrix& m, const std::string& path);
// Throws Error naming the file and the problem (not an imatrix, mismatched sums and counts, ...).
ImportanceMatrix read_imatrix(const std::string& path);

}  // namespace kestrel
