#pragma once
// The Walsh-Hadamard rotation of DeepSeek sparse attention's indexer queries and keys (model/mla_attention.cpp,
// model/arch/deepseek4.cpp) as a named operator (backend/operator.h); the transform is kernels/ops.h's
// walsh_hadamard (which the KV cache's rotated 4-bit rows also use).
#include <cstdint>

#include "backend/operator.h"

namespace kestrel::ops {

// In place: every block of `block` floats (a power of two) of n floats rotated.
struct HadamardArgs {
  Act x;
  int64_t n = 0;
  int block = 0;
};
extern const Op<HadamardArgs> hadamard;

}  // namespace kestrel::ops
