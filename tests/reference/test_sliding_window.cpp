// Sliding-window attention in the paged KV cache (Gemma 2: window 12 on
// layers 0 and 2; Gemma 3: window 8 on layers 0-4): the sliding layers keep
// their own block tables and release the blocks that left every query's
// window, and that changes nothing in the result — the same logits as a
// cache that keeps every block (attention masks the window either way) —
// while the sliding layers' blocks stop growing with the context.
#include <gmock/gmock.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "spec/ngram_proposer.h"
#include "test_support.h"

namespace kestrel {
namespace {

struct WindowRun {
  std::vector<float> logits;
  std::vector<int32_t> tokens;
  std::vector<int64_t> sliding_blocks, full_blocks;  // held by the sequence after each row
};

// n_prompt prompt tokens, then greedy generation, every logits row kept.
WindowRun run_model(const std::string& cell, bool release, int64_t max_batch, int spec_draft_max = 0, KvType kv = KvType::F32) {
  LoadOptions o = test::shared_engine("reference/compat/models/" + cell + ".gguf", 256);
  o.kv_block_size = 4;
  o.max_batch_tokens = max_batch;
  o.kv_type_k = o.kv_type_v = kv;
  LoadedModel e = LoadedModel::load(o);
  if (!release) {
    // The same cache without a sliding group: every layer keeps every block.
    KvLayout l = e.kv->layout();
    l.sliding.clear();
    e.kv = make_kv_cache(l, e.n_ctx, o);
  }
  EXPECT_EQ(e.kv->n_groups(), release ? 2 : 1);
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 47; i++) prompt.push_back(static_cast<int32_t>(3 + (i * 29) % 500));
  GenerationParams p;
  p.max_tokens = 60;
  p.sampling.temperature = 0.0f;
  p.all_logits = true;
  p.ignore_eos = true;
  p.spec_draft_max = spec_draft_max;
  NgramProposer ngram;
  p.proposer = &ngram;
  WindowRun r;
  GenerationCallbacks cb;
  cb.on_logits = [&](const float* row, int64_t n) {
    r.logits.insert(r.logits.end(), row, row + n);
    r.full_blocks.push_back(e.kv->held_blocks(0, 0));
    if (release) r.sliding_blocks.push_back(e.kv->held_blocks(0, 1));
  };
  r.tokens = generate(e, prompt, p, cb).tokens;
  return r;
}

TEST(SlidingWindow, ReleasingBlocksGivesTheSameLogitsAsKeepingThem) {
  for (const char* cell : {"gemma2.F16", "gemma3.F16"}) {
    SCOPED_TRACE(cell);
    for (int64_t batch : {512, 5}) {  // the prompt in one batch, or in chunks of 5 (the window moves between them)
      const WindowRun kept = run_model(cell, false, batch), released = run_model(cell, true, batch);
      EXPECT_EQ(released.tokens, kept.tokens) << "batch " << batch;
      EXPECT_EQ(released.logits, kept.logits) << "batch " << batch;
    }
  }
}

TEST(SlidingWindow, SlidingLayersHoldAWindowWhileFullLayersGrow) {
  const WindowRun r = run_model("gemma3.F16", true, 5);
  // Window 8, blocks of 4, batches of up to 5: at most ceil((8 - 1 + 5) / 4) + 1 blocks.
  const int64_t bound = (8 - 1 + 5 + 3) / 4 + 1;
  ASSERT_FALSE(r.sliding_blocks.empty());
  EXPECT_LE(*std::max_element(r.sliding_blocks.begin(), r.sliding_blocks.end()), bound);
  // Every position, full layers (seen after each step: the last one's end frees them).
  EXPECT_EQ(*std::max_element(r.full_blocks.begin(), r.full_blocks.end()), (48 + 60 - 1 + 3) / 4);
  // The cache itself: the sliding pool is sized for a window per sequence, not the context.
  LoadOptions o = test::shared_engine("reference/compat/models/gemma3.F16.gguf", 32768);
  o.kv_block_size = 16;
  LoadedModel e = LoadedModel::load(o);
  EXPECT_EQ(e.kv->n_group_blocks(0), 32768 / 16);
  EXPECT_LE(e.kv->n_group_blocks(1), (8 - 1 + 512 + 15) / 16 + 1);
  const KvLayout& l = e.kv->layout();
  EXPECT_LT(e.kv->bytes(), l.bytes_per_token() * 32768 / 4);  // 5 of 6 layers hold ~a window and a batch
}

TEST(SlidingWindow, SpeculativeRollbackAndQuantizedCachesKeepTheResult) {
  const WindowRun plain = run_model("gemma2.F16", true, 512);
  const WindowRun spec = run_model("gemma2.F16", true, 512, 4);
  EXPECT_EQ(spec.tokens, plain.tokens);
  const WindowRun kept = run_model("gemma2.F16", false, 512, 0, KvType::Q8_0);
  const WindowRun released = run_model("gemma2.F16", true, 512, 0, KvType::Q8_0);
  EXPECT_EQ(released.logits, kept.logits);
}

// DeepSeek-V4's cache (deepseek4 tiny: window 8, ratios 4, 0, 128, 4): every layer's raw keys and
// compressors' state live in the sliding group for the last 128 positions (the ratio-128 compressor's
// block), the compressed and indexer keys in the full group, one row per position. The 150-id prompt of the
// recorded cell in chunks of 16, then 16 greedy steps, give llama.cpp's ids while the window rows stay
// bounded and only the compressed keys grow.
TEST(SlidingWindow, DeepSeekV4KeepsRawKeysAndCompressorStateForAWindowOnly) {
  test::TempDir dir;
  LoadOptions o;
  o.model_path = test::write_synth_v4_model(dir.file("v4.gguf"));
  o.n_threads = 2;
  o.n_ctx = 512;
  o.kv_block_size = 4;
  o.max_batch_tokens = 16;
  LoadedModel e = LoadedModel::load(o);
  const KvLayout& l = e.kv->layout();
  EXPECT_EQ(l.n_layer, 4 + 3);  // a window layer each, a full layer per compressing layer
  EXPECT_EQ(l.n_sliding(), 4);
  EXPECT_EQ(l.sliding_window, 128);
  EXPECT_EQ(l.full_row_stride, 4);
  EXPECT_EQ(l.full_bytes_per_token(), 3 * (128 + 64) * 4 / 4);  // compressed key (f32 here) + indexer key, a row per 4
  EXPECT_EQ(l.sliding_bytes_per_token(), 4 * (128 + 4 * 128 + 4 * 64) * 4);  // raw key + compressors' state
  const nlohmann::json doc = test::read_json(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/synth_cells.json");
  nlohmann::json cell;
  for (const auto& c : doc["cells"])
    if (c["name"] == "deepseek4-tiny.f32") cell = c;
  ASSERT_FALSE(cell.is_null());
  GenerationParams p;
  p.max_tokens = 16;
  p.sampling.temperature = 0.0f;
  p.ignore_eos = true;
  p.all_logits = true;  // (each prompt chunk's rows too: the blocks held after every step)
  std::vector<int64_t> sliding, full;
  GenerationCallbacks cb;
  cb.on_logits = [&](const float*, int64_t) {
    sliding.push_back(e.kv->held_blocks(0, 1));
    full.push_back(e.kv->held_blocks(0, 0));
  };
  const auto prompt = cell["prompt"].get<std::vector<int32_t>>();
  EXPECT_EQ(generate(e, prompt, p, cb).tokens, cell["ids"].get<std::vector<int32_t>>());
  ASSERT_FALSE(sliding.empty());
  EXPECT_LE(*std::max_element(sliding.begin(), sliding.end()), (128 - 1 + 16 + 3) / 4 + 1);
  EXPECT_GT(*std::max_element(full.begin(), full.end()), (150 + 3) / 4);  // every position, growing
  o.kv_block_size = 6;  // a block must hold whole rows of the full group
  try {
    LoadedModel::load(o);
    ADD_FAILURE() << "a block of 6 positions was accepted";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), ::testing::HasSubstr("multiple of 4")) << err.what();
  }
}

}  // namespace
}  // namespace kestrel
