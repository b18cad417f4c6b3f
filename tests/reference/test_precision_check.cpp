// precision-check: the float64 reference (written independently of the
// engine's kernels) agrees with the float32 engine to float32 rounding on
// every decoder family — the engine itself matches llama.cpp to 1e-4
// (test_llamacpp_reference, test_compat), so the reference is anchored to
// llama.cpp too —
// and the report then shows precision lost where it is lost: a quantized KV
// cache first in the attention output, RoPE angles at long positions.
#include <gtest/gtest.h>

#include <cmath>

#include "model/family.h"
#include "core/error.h"
#include "measure/precision_check.h"
#include "model/arch/deepseek4.h"
#include "cli_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

LoadedModel recorder_engine(const std::string& model, KvType kv = KvType::F32, int64_t n_ctx = 0) {
  LoadOptions o = test::shared_engine(model, n_ctx);
  o.kv_type_k = o.kv_type_v = kv;
  o.wrap_backend = make_activation_recorder;
  return LoadedModel::load(o);
}

std::vector<int32_t> prompt(const LoadedModel& e) {
  return e.tokenizer->encode("Once upon a time, there was a little girl who loved to play in the garden.", true, false);
}

TEST(PrecisionCheck, Float32ModelsAgreeWithTheFloat64Reference) {
  for (const char* model : {"models/stories260K.gguf", "reference/llama.cpp/llama-tiny.f32.gguf",
                            "reference/llama.cpp/qwen2-tiny.f32.gguf"}) {
    LoadedModel e = recorder_engine(model);
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

// The families of the compat set (their F16 weights widened to F32, so that
// only the arithmetic differs): Llama 3's rope_freqs, Qwen3's q/k norms,
// Mixtral's and Qwen3-MoE's experts, Phi-3's fused matrices and LongRoPE,
// Gemma's soft-caps, windows, post norms and two RoPE bases all go through
// the float64 reference. Gemma's FFN evaluates GELU as llama.cpp does (an
// fp16 table), which the reference does not: a few 1e-4 there.
TEST(PrecisionCheck, EveryDecoderFamilyAgreesWithTheFloat64Reference) {
  test::TempDir dir;
  for (const char* family : {"llama32", "qwen25", "qwen3", "mixtral", "qwen3moe", "phi3", "gemma2", "gemma3", "r1qwen"}) {
    SCOPED_TRACE(family);
    LoadOptions o;
    o.model_path = test::widen_to_f32(test::compat_model(std::string(family) + ".F16"), dir.file("f32.gguf"));
    o.n_threads = 2;
    o.n_ctx = 512;
    o.wrap_backend = make_activation_recorder;
    LoadedModel e = LoadedModel::load(o);
    std::vector<int32_t> tokens;
    for (int i = 0; i < 40; i++) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % 500));
    const PrecisionReport r = precision_check(e, tokens);
    // The fp16 GELU's difference enters at layer 0's FFN and carries on.
    const bool gelu = family_of(e.model->config().arch).recipe.ffn_act == FfnActivation::Gelu;
    for (const auto& l : r.layers) {
      const double after_gelu = gelu ? 5e-3 : 2e-5, before = l.layer == 0 ? 2e-5 : after_gelu;
      EXPECT_LT(l.q_rope, before) << "layer " << l.layer;
      EXPECT_LT(l.attention, before) << "layer " << l.layer;
      EXPECT_LT(l.attn_proj, before) << "layer " << l.layer;
      EXPECT_LT(l.ffn, after_gelu) << "layer " << l.layer;
      EXPECT_LT(l.residual, after_gelu) << "layer " << l.layer;
    }
    EXPECT_LT(r.logits, gelu ? 5e-3 : 2e-5);
  }
}

TEST(PrecisionCheck, AQuantizedKvCacheShowsUpFirstInTheAttentionOutput) {
  LoadedModel f32 = recorder_engine("models/stories260K.gguf");
  LoadedModel q8 = recorder_engine("models/stories260K.gguf", KvType::Q8_0);
  LoadedModel q4 = recorder_engine("models/stories260K.gguf", KvType::Q4);
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
  LoadedModel short_ctx = recorder_engine("models/stories260K.gguf", KvType::F32, 128);
  LoadedModel long_ctx = recorder_engine("models/stories260K.gguf", KvType::F32, 32768);
  const PrecisionReport a = precision_check(short_ctx, prompt(short_ctx));
  const PrecisionReport b = precision_check(long_ctx, prompt(long_ctx));
  EXPECT_EQ(b.rope_position, 32767);
  EXPECT_LT(a.rope_max_error, 1e-5);
  EXPECT_GT(b.rope_max_error, 10 * a.rope_max_error);
}

// The MLA families: llama.cpp's own DeepSeek-V2-Lite and V3 files (softmax and sigmoid routing, expert
// groups, the selection bias, YaRN), and synth's V3.2 (the lightning indexer with a top-k of 4 under a
// 40-token prompt: the reference selects in double, per head, without the Hadamard rotation), GLM-5
// (shared-indexer layers, adjacent-pair RoPE in the indexer) and Mistral Small 4 (the query temperature) — the engine attends absorbed or decompressed, the reference per head
// with rebuilt keys; and every indexer row picks the positions float64 picks.
TEST(PrecisionCheck, TheMlaFamiliesAgreeWithTheFloat64Reference) {
  test::TempDir dir;
  const std::string ds32 = dir.file("ds32.gguf"), m4 = dir.file("m4.gguf"), glm = dir.file("glm.gguf");
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "deepseek32", "--preset", "tiny", "--type", "f32", "-o", ds32})
                .exit_code, 0);
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "mistral4", "--preset", "tiny", "--type", "f32", "-o", m4})
                .exit_code, 0);
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "glm-dsa", "--preset", "tiny", "--type", "f32", "-o", glm})
                .exit_code, 0);
  for (const std::string& model : {test::shared("reference/llama.cpp/deepseek2-lite-tiny.f32.gguf"),
                                  test::shared("reference/llama.cpp/deepseek3-tiny.f32.gguf"), ds32, m4, glm}) {
    for (const char* mode : {"absorbed", "decompressed"}) {
      SCOPED_TRACE(model + " " + mode);
      LoadOptions o;
      o.model_path = model;
      o.n_threads = 2;
      o.n_ctx = 256;
      o.mla = std::string(mode) == "absorbed" ? MlaAttention::Absorbed : MlaAttention::Decompressed;
      o.wrap_backend = make_activation_recorder;
      LoadedModel e = LoadedModel::load(o);
      std::vector<int32_t> tokens;
      for (int i = 0; i < 40; i++) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % e.model->config().n_vocab));
      const PrecisionReport r = precision_check(e, tokens);
      const auto& ix = e.model->config().mla.indexer;
      for (const auto& l : r.layers) {
        const bool indexed = ix.n_head > 0 && !ix.shares(l.layer);  // GLM-5's layers 1 and 3 reuse a choice
        EXPECT_TRUE(std::isnan(l.q_rope) && std::isnan(l.attention)) << "not compared for MLA";
        EXPECT_LT(l.attn_proj, 2e-5) << "layer " << l.layer;
        EXPECT_LT(l.ffn, 2e-5) << "layer " << l.layer;
        EXPECT_LT(l.residual, 2e-5) << "layer " << l.layer;
        EXPECT_GT(l.residual, 0.0) << "float32 cannot be exact";
        EXPECT_EQ(l.selected_rows, indexed ? 40 - ix.top_k : 0) << "layer " << l.layer;
        EXPECT_EQ(l.selected_same, l.selected_rows) << "layer " << l.layer;
      }
      EXPECT_LT(r.logits, 2e-5);
    }
  }
}

// A synth preset (float32) through precision-check at n_tokens tokens (40); n_layer gets its layer count, config
// (when given) its configuration. (A synth that fails leaves no file, and the load throws.)
PrecisionReport synth_precision(test::TempDir& dir, const std::string& arch, const std::string& preset, int& n_layer,
                                int n_tokens = 40, ModelConfig* config = nullptr) {
  const std::string model = dir.file(arch + "-" + preset + ".gguf");
  EXPECT_EQ(test::run_kestrel({"synth", "--arch", arch, "--preset", preset, "--type", "f32", "-o", model}).exit_code, 0);
  LoadOptions o;
  o.model_path = model;
  o.n_threads = 2;
  o.n_ctx = 256;
  o.wrap_backend = make_activation_recorder;
  LoadedModel e = LoadedModel::load(o);
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_tokens; i++) tokens.push_back(static_cast<int32_t>((i * 37 + 11) % e.model->config().n_vocab));
  n_layer = e.model->config().n_layer;
  if (config) *config = e.model->config();
  return precision_check(e, tokens);
}

// The GQA families synth writes (no public file of theirs at hand), their tiny presets at 40 tokens: gpt-oss's
// sinks, biases, windows of 8, YaRN, softmax over the chosen experts' logits and clamped SwiGLU; Mistral 3's
// YaRN log multiplier and query temperature (from position 16); GLM-4.5's q/k norms, partial RoPE, sigmoid
// routing with the selection bias and shared expert; Llama 4's RoPE-free fourth layer, q/k norms after RoPE,
// top-1 experts weighting their input on every second layer.
TEST(PrecisionCheck, SynthGqaFamiliesAgreeWithTheFloat64Reference) {
  test::TempDir dir;
  for (const std::string& arch : std::vector<std::string>{"gpt-oss", "mistral3", "glm4moe", "llama4"}) {
    SCOPED_TRACE(arch);
    int n_layer = 0;
    const PrecisionReport r = synth_precision(dir, arch, "tiny", n_layer);
    ASSERT_EQ(r.layers.size(), static_cast<size_t>(n_layer));
    for (const auto& l : r.layers) {
      EXPECT_LT(l.q_rope, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.attention, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.attn_proj, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.ffn, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.residual, 2e-5) << "layer " << l.layer;
      EXPECT_GT(l.residual, 0.0) << "float32 cannot be exact";
    }
    EXPECT_LT(r.logits, 2e-5);
  }
}

// The linear-attention hybrids' tiny presets at 150 tokens (the Gated DeltaNet's chunked form: chunks of 64,
// 64, 22): the recurrence's output ("attention") of every Gated DeltaNet block and the gated attention blocks'
// queries and outputs against the float64 definition (measured 2e-7 .. 7e-7).
TEST(PrecisionCheck, LinearAttentionHybridsAgreeWithTheFloat64Reference) {
  test::TempDir dir;
  for (const std::string& arch : std::vector<std::string>{"qwen35", "qwen35moe", "qwen3next"}) {
    SCOPED_TRACE(arch);
    int n_layer = 0;
    const PrecisionReport r = synth_precision(dir, arch, "tiny", n_layer, 150);
    ASSERT_EQ(r.layers.size(), static_cast<size_t>(n_layer));
    for (const auto& l : r.layers) {
      const bool linear = std::isnan(l.q_rope);
      EXPECT_EQ(linear, (l.layer + 1) % 4 != 0) << "layer " << l.layer;
      if (!linear) {
        EXPECT_LT(l.q_rope, 2e-5) << "layer " << l.layer;
      }
      EXPECT_LT(l.attention, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.attn_proj, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.ffn, 2e-5) << "layer " << l.layer;
      EXPECT_LT(l.residual, 2e-5) << "layer " << l.layer;
      EXPECT_GT(l.residual, 0.0) << "float32 cannot be exact";
    }
    EXPECT_LT(r.logits, 2e-5);
  }
}

// Gemma 4, both tiny presets at 40 tokens: sliding layers of 16-dim heads (2 KV heads, window 8) and full ones of
// 32 (1 KV head, a quarter rotated by rope_freqs), unscaled scores, the weightless v norm; layers 9-11 reading
// layers 7 and 8's caches; per-layer embeddings; double-wide FFNs; the output scales; tiny-moe's experts beside
// the dense FFN with their router norm, GeGLU and per-expert scales, v from k on its full layers. Layer 0's
// attention to 2e-5; GELU's fp16 table (llama.cpp's; the reference's GELU is exact) from its FFN on, within
// Gemma 2/3's bound (5e-3; measured 1.8e-3 at most).
TEST(PrecisionCheck, Gemma4AgreesWithTheFloat64Reference) {
  test::TempDir dir;
  for (const std::string preset : {"tiny", "tiny-moe"}) {
    SCOPED_TRACE(preset);
    int n_layer = 0;
    const PrecisionReport r = synth_precision(dir, "gemma4", preset, n_layer);
    ASSERT_EQ(r.layers.size(), static_cast<size_t>(n_layer));
    for (const auto& l : r.layers) {
      const double before = l.layer == 0 ? 2e-5 : 5e-3;
      EXPECT_LT(l.q_rope, before) << "layer " << l.layer;
      EXPECT_LT(l.attention, before) << "layer " << l.layer;
      EXPECT_LT(l.attn_proj, before) << "layer " << l.layer;
      EXPECT_LT(l.ffn, 5e-3) << "layer " << l.layer;
      EXPECT_LT(l.residual, 5e-3) << "layer " << l.layer;
      EXPECT_GT(l.residual, 0.0) << "float32 cannot be exact";
    }
    EXPECT_LT(r.logits, 5e-3);
  }
}

// DeepSeek-V4: 140 tokens, past the first block of 128 (the ratio-128 layer attends to it) and 35 blocks of 4
// (the indexed layers choose 3 from the 16th token on): the streams, the compressed keys, the chosen blocks.
TEST(PrecisionCheck, DeepSeekV4AgreesWithTheFloat64Reference) {
  test::TempDir dir;
  int n_layer = 0;
  ModelConfig c;
  const PrecisionReport r = synth_precision(dir, "deepseek4", "tiny", n_layer, 140, &c);
  ASSERT_EQ(r.layers.size(), static_cast<size_t>(n_layer));
  const Dsv4Config& v = dsv4_config(c);
  for (const auto& l : r.layers) {
    EXPECT_LT(l.attn_proj, 2e-5) << "layer " << l.layer;
    EXPECT_LT(l.ffn, 2e-5) << "layer " << l.layer;
    EXPECT_LT(l.residual, 2e-5) << "layer " << l.layer;
    EXPECT_GT(l.residual, 0.0) << "float32 cannot be exact";
    // Rows with more than top_k completed blocks: from position 4 * (top_k + 1) - 1 on.
    const int64_t choosing = v.ratios[l.layer] == 4 ? 140 - (4 * (v.idx_top_k + 1) - 1) : 0;
    EXPECT_EQ(l.selected_rows, choosing) << "layer " << l.layer;
    EXPECT_EQ(l.selected_same, l.selected_rows) << "layer " << l.layer;
  }
  EXPECT_LT(r.logits, 2e-5);
}

TEST(PrecisionCheck, OversizedPromptsAreClearErrors) {
  LoadedModel e = recorder_engine("models/stories260K.gguf", KvType::F32, 16);
  EXPECT_THROW(precision_check(e, std::vector<int32_t>(40, 1)), Error);
  EXPECT_THROW(precision_check(e, {}), Error);
}

}  // namespace
}  // namespace kestrel
