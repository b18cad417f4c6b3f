// precision-check: the float64 reference (written independently of the
// engine's kernels) agrees with the float32 engine to float32 rounding on
// llama and qwen2 models — the engine itself matches llama.cpp to 1e-4
// (test_llamacpp_reference), so the reference is anchored to llama.cpp too —
// and the report then shows precision lost where it is lost: a quantized KV
// cache first in the attention output, RoPE angles at long positions.
#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/precision_check.h"
#include "test_support.h"

namespace kestrel {
namespace {

Engine recorder_engine(const std::string& model, KvType kv = KvType::F32, int64_t n_ctx = 0) {
  EngineOptions o = test::shared_engine(model, n_ctx);
  o.kv_type_k = o.kv_type_v = kv;
  o.wrap_backend = make_activation_recorder;
  return Engine::load(o);
}

std::vector<int32_t> prompt(const Engine& e) {
  return e.tokenizer->encode("Once upon a time, there was a little girl who loved to play in the garden.", true, false);
}

TEST(PrecisionCheck, Float32ModelsAgreeWithTheFloat64Reference) {
  for (const char* model : {"models/stories260K.gguf", "reference/llama.cpp/llama-tiny.f32.gguf",
                            "reference/llama.cpp/qwen2-tiny.f32.gguf"}) {
    Engine e = recorder_engine(model);
    const PrecisionReport r = precision_check(e, prompt(e));
    ASSERT_EQ(static_cast<int>(r.layers.size()), e.model->config().n_layer) << model;
    for (const auto& l : r.layers) {
      EXPECT_LT(l.q_rope, 1e-5) << model << " layer " << l.layer;
      EXPECT_LT(l.attention, 1e-5) << model << " layer " << l.layer;
      EXPECT_LT(l.attn_proj, 1e-5) << model << " layer " << l.layer;
      EXPECT_LT(l.ffn, 1e-5) << model << " layer " << l.layer;
      EXPECT_LT(l.residual, 1e-5) << model << " layer " << l.layer;
      EXPECT_GT(l.residual, 0.0) << model << ": float32 cannot be exact";
    }
    EXPECT_LT(r.logits, 1e-5) << model;
  }
}

TEST(PrecisionCheck, AQuantizedKvCacheShowsUpFirstInTheAttentionOutput) {
  Engine f32 = recorder_engine("models/stories260K.gguf");
  Engine q8 = recorder_engine("models/stories260K.gguf", KvType::Q8_0);
  Engine q4 = recorder_engine("models/stories260K.gguf", KvType::Q4);
  const PrecisionReport a = precision_check(f32, prompt(f32));
  const PrecisionReport b = precision_check(q8, prompt(q8));
  const PrecisionReport c = precision_check(q4, prompt(q4));
  // Layer 0: queries do not depend on the cache; its attention output does.
  EXPECT_LT(b.layers[0].q_rope, 1e-5);
  EXPECT_GT(b.layers[0].attention, 100 * a.layers[0].attention);
  EXPECT_GT(c.layers[0].attention, 5 * b.layers[0].attention);
  EXPECT_GT(c.logits, b.logits);
}

TEST(PrecisionCheck, RopeAnglesLosePrecisionAtLongPositions) {
  Engine short_ctx = recorder_engine("models/stories260K.gguf", KvType::F32, 128);
  Engine long_ctx = recorder_engine("models/stories260K.gguf", KvType::F32, 32768);
  const PrecisionReport a = precision_check(short_ctx, prompt(short_ctx));
  const PrecisionReport b = precision_check(long_ctx, prompt(long_ctx));
  EXPECT_EQ(b.rope_position, 32767);
  EXPECT_LT(a.rope_max_error, 1e-5);
  EXPECT_GT(b.rope_max_error, 10 * a.rope_max_error);
}

TEST(PrecisionCheck, OtherArchitecturesAndOversizedPromptsAreClearErrors) {
  Engine ds = recorder_engine("reference/llama.cpp/deepseek3-tiny.f32.gguf");
  EXPECT_THROW(precision_check(ds, {1, 2, 3}), Error);
  Engine e = recorder_engine("models/stories260K.gguf", KvType::F32, 16);
  EXPECT_THROW(precision_check(e, std::vector<int32_t>(40, 1)), Error);
  EXPECT_THROW(precision_check(e, {}), Error);
}

}  // namespace
}  // namespace kestrel
