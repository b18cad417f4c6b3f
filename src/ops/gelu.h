#pragma once
// GELU (tanh form) of every element, in place, as a named operator (backend/operator.h): a vision tower's
// plain (ungated) FFN activation (mmproj/vit.h; ggml_gelu). Evaluated as ggml's CPU backend does: through the
// fp16 table of ops.h's gelu_fp16_table (the input rounded to fp16, the table's value), x itself at or above
// 10 and 0 at or below -10, so the results are llama.cpp's to the bit.
#include <cstdint>

#include "backend/operator.h"

namespace kestrel {

// The reference.
void gelu_rows(float* x, int64_t n);

namespace ops {
struct GeluArgs {
  Act x;
  int64_t n = 0;
};
extern const Op<GeluArgs> gelu;
}  // namespace ops

}  // namespace kestrel
