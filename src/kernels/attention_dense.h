#pragma once
// Attention of many queries over one set of float keys and values that every query sees whole (a vision tower's
// patches attending to each other: mmproj/vit.h), as llama.cpp's encoder computes it without flash attention:
// per head and block of 64 queries, the scores against the keys (outer-product blocks over the keys transposed,
// kernels/dense_rows.h), each row's softmax (scaled, its maximum subtracted), the outputs by a GEMM (V^T . p) on
// the float GEMM tiles (gemm_float.h). For SigLIP's 4096 patches it took 0.9 s a layer where the paged kernel's
// online softmax took 1.35 s (2 threads, AVX-512); shorter or masked calls stay with the paged kernel.
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/attention.h"

namespace kestrel {

// Runs it and returns true when it applies: float GEMM tiles on this CPU, at least 64 queries, every query's last
// position len - 1 (no window, chunk, soft-cap or sinks), keys and values of one size; else false (nothing done).
bool attention_dense_gemm(ThreadPool& pool, const float* k, const float* v, int64_t k_width, int64_t v_width,
                          int64_t len, const AttentionBatch& b, const AttentionShape& s);

}  // namespace kestrel
