#include "kernels/dense_rows.h"

#include "kernels/dense_rows_impl.h"
#include "kernels/isa_dispatch.h"

namespace kestrel {

const DenseRows& avx2_dense_rows();    // kernels/x86/dense_rows_avx2.cpp
const DenseRows& avx512_dense_rows();  // kernels/x86/dense_rows_avx512.cpp

const DenseRows& dense_rows_kernels(IsaLevel isa) {
  static const DenseRows scalar{"scalar", dense_rows_impl::scores, dense_rows_impl::softmax};
  return best_table<DenseRows>(isa, scalar, KESTREL_SIMD_TABLE(avx2_dense_rows), KESTREL_SIMD_TABLE(avx512_dense_rows));
}

}  // namespace kestrel
