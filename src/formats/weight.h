#pragma once
// A weight tensor as the kernels see it: where its bytes are, in which GGUF
// format, and its shape. ne[0] is the input (row) length, ne[1] the rows.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/ggml_types.h"

namespace kestrel {

struct PackedWeight;  // kernels/packed_q8.h

struct Weight {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;
  const void* data = nullptr;
  size_t nbytes = 0;
  // The same matrix repacked by the backend at load into the layout its
  // kernels prefer (null: the kernels read `data` as stored in the file).
  std::shared_ptr<const PackedWeight> packed{};
  // Set when `data` is not the file's: a matrix cut out of one (a rank's
  // columns, weight_columns) keeps its bytes alive here.
  std::shared_ptr<const void> owner{};
  // A routed expert's matrix (a slice of ffn_*_exps): llama.cpp multiplies those with ggml_mul_mat_id, which
  // takes its row dots at every batch size, where a plain matrix's batches go to its GEMM (llamafile's
  // tinyBLAS) with its own summation order; the kernels that follow llama.cpp's order tell them apart.
  bool routed_expert = false;

  bool present() const { return data != nullptr; }
  int64_t cols() const { return ne.empty() ? 0 : ne[0]; }
  int64_t rows() const { return ne.size() < 2 ? 1 : ne[1]; }
  size_t row_stride() const { return row_bytes(type, cols()); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_stride(); }
};

// Rows [r0, r0 + n) of a matrix, as a matrix of its own (no copy).
inline Weight weight_rows(const Weight& w, int64_t r0, int64_t n, const std::string& name) {
  return Weight{name, w.type, {w.cols(), n}, w.row(r0), static_cast<size_t>(n) * w.row_stride(), nullptr,
                w.owner};
}

// Columns [c0, c0 + n) of every row, copied into a matrix of its own; c0
// and n must be whole blocks of the type (Error naming the tensor if not).
Weight weight_columns(const Weight& w, int64_t c0, int64_t n, const std::string& name);

// Matrix i of a 3-D tensor ne = {cols, rows, count} (one expert or one head), no copy.
inline Weight weight_slice(const Weight& w, int64_t i, const std::string& name) {
  return weight_rows(Weight{w.name, w.type, {w.ne[0], w.ne[1] * w.ne[2]}, w.data, w.nbytes, nullptr, w.owner}, i * w.ne[1],
                     w.ne[1], name);
}

}  // namespace kestrel
