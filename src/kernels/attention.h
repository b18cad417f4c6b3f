#pragma once
// Causal attention of a batch of query tokens over a paged KV cache.
// Flash-style: keys and values stream once per tile of query rows with an
// online softmax, so no score matrix is materialised. A tile is up to 16
// (token, head) rows that share a KV head and a sequence: for GQA that is the
// query heads of one group, so each key is read once for all of them. When
// there are too few (token, head) rows to keep the threads busy (decode with
// few heads), the positions are split into chunks across threads and the
// partial softmaxes merged (flash-decoding).
#include <cstdint>

#include "core/thread_pool.h"
#include "kernels/kv_format.h"

namespace kestrel {

// One layer's K and V storage, addressed by block tables: token at position p
// of a sequence lives in slot table[p / block_size] * block_size + p % block_size.
// Rows are stored in k_format / v_format (kv_format.h); attention dequantizes the one
// head it reads, never a whole copy.
struct PagedKvLayerView {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_stride = 0;  // bytes between consecutive slots
  int64_t v_stride = 0;
  int block_size = 0;
  KvRowFormat k_format, v_format;

  // Float32 rows of k_floats / v_floats elements.
  static PagedKvLayerView f32(const float* k, const float* v, int64_t k_floats, int64_t v_floats, int block_size) {
    return {k, v, k_floats * 4, v_floats * 4, block_size, KvRowFormat(), KvRowFormat()};
  }
  // The slot of position p of the sequence with this block table.
  int64_t slot(const int32_t* table, int32_t p) const {
    return static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
  }
  const uint8_t* k_row(int64_t slot) const { return static_cast<const uint8_t*>(k) + slot * k_stride; }
  // The value rows read as key rows (a layer whose V row holds other keys: V3.2's indexer keys, V4's
  // compressed keys and state), from `floats` into each row — an offset only float32 rows may take.
  PagedKvLayerView values_as_keys(int64_t floats = 0) const {
    PagedKvLayerView r = *this;
    r.k = static_cast<const uint8_t*>(v) + floats * static_cast<int64_t>(sizeof(float));
    r.k_stride = v_stride;
    r.k_format = v_format;
    return r;
  }
  const uint8_t* v_row(int64_t slot) const { return static_cast<const uint8_t*>(v) + slot * v_stride; }
};

struct AttentionBatch {
  int64_t n_tokens = 0;
  const float* q = nullptr;  // [n_tokens][n_head * head_dim]
  float* out = nullptr;      // [n_tokens][n_head * value_dim()]
  const int32_t* positions = nullptr;
  const int32_t* const* block_tables = nullptr;  // per token: its sequence's table
  // Per token the last position it attends to (null: its own; a media span attended both ways: the span's last).
  const int32_t* horizons = nullptr;
  int32_t last(int64_t t) const { return horizons ? horizons[t] : positions[t]; }
};

struct AttentionShape {
  int n_head = 0;
  int n_kv_head = 0;
  int head_dim = 0;  // query and key dims per head
  float scale = 1.0f;
  int v_dim = 0;  // value dims per head; 0: head_dim. (MLA attends over a
                  // latent: keys of latent + rope dims, values the latent alone,
                  // read from the keys' own rows.)
  // Sliding-window attention: the query at position p sees keys p - window + 1
  // .. p (llama.cpp's rule: p - j < window); 0: every earlier position.
  int32_t window = 0;
  // Attention logit soft-cap (Gemma 2): score = softcap * tanh(score / softcap),
  // after the scale; 0: none.
  float softcap = 0.0f;
  // Attention sinks (gpt-oss, DeepSeek-V4): one logit per head that joins the softmax's denominator and
  // attends to nothing (ggml_soft_max_ext's sinks); null: none.
  const float* sinks = nullptr;
  // Chunked attention (Llama 4): the query at p sees only the keys of its own chunk, p - p % chunk .. p; 0: none.
  int32_t chunk = 0;
  int value_dim() const { return v_dim > 0 ? v_dim : head_dim; }
  // The first position the query at `pos` attends to.
  int32_t first_position(int32_t pos) const {
    if (chunk > 0) return pos - pos % chunk;
    return window > 0 && pos + 1 > window ? pos + 1 - window : 0;
  }
};

enum class AttentionKernel {
  Best,    // 16-row tiles (AVX-512; AVX2: two 8-lane passes; attention_tile.h) where the head size allows, else per row
  PerRow,  // each (token, head) on its own with the dot-kernel table: the reference path
};

// Token t attends to positions first_position(positions[t])..last(t) of its own sequence.
void attention_paged(ThreadPool& pool, const PagedKvLayerView& kv, const AttentionBatch& batch,
                     const AttentionShape& shape, AttentionKernel kernel = AttentionKernel::Best);

}  // namespace kestrel
