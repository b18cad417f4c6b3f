#pragma once
// The row kernels of kernels/attention_dense.h: a block of queries' scores against keys stored transposed, and the
// softmax of rows (scaled, each row's maximum subtracted, exp by Cephes' polynomial, exp_cephes.h). One source
// (dense_rows_impl.h) compiled for the baseline, AVX2 and AVX-512 (x86/dense_rows_*.cpp), where the compiler
// vectorizes it; the best for this CPU (isa_dispatch.h) through dense_rows_kernels().
#include <cstdint>

#include "hw/cpu_features.h"

namespace kestrel {

inline constexpr int64_t kScoreBlock = 64;  // the keys a block of scores takes

struct DenseRows {
  const char* isa;
  // s[t][j] = sum over d < hd of q[t][d] * kt[d][j], for t < nq, j < len (kt: hd rows of ldk floats, ldk >= len a
  // multiple of kScoreBlock, what lies past len read but not used; s: nq rows of len floats).
  void (*scores)(const float* q, int64_t nq, int hd, const float* kt, int64_t ldk, int64_t len, float* s);
  // Row i of p (len floats): softmax(scale * row), in place.
  void (*softmax)(float* p, int64_t rows, int64_t len, float scale);
};
const DenseRows& dense_rows_kernels(IsaLevel isa = selected_isa());

}  // namespace kestrel
