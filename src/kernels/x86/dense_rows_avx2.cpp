// kernels/dense_rows.h's kernels compiled for AVX2 (the compiler vectorizes dense_rows_impl.h's loops).
#include "kernels/dense_rows.h"
#include "kernels/dense_rows_impl.h"

namespace kestrel {

const DenseRows& avx2_dense_rows() {
  static const DenseRows t{"avx2", dense_rows_impl::scores, dense_rows_impl::softmax};
  return t;
}

}  // namespace kestrel
