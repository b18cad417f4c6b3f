// The linear-attention hybrids (qwen35: Gated DeltaNet layers with a recurrent state per sequence) under the
// serving machinery, against llama.cpp's ids recorded in tests/reference/synth_cells.json for the same file
// (qwen35-tiny.f32, seed 1: a 150-id prompt, 16 tokens): a prefix-cache hit restores the state snapshot taken
// at the prompt's last block boundary; requests preempted for blocks recompute from their start; both give
// llama.cpp's ids. (Speculative decoding's rollback: test_speculative.cpp; interleaved sequences in one step:
// test_model_batches.cpp; the kernels: tests/unit/test_gated_delta_net.cpp.)
#include <gtest/gtest.h>

#include <map>

#include "runtime/generator.h"
#include "runtime/step_executor.h"
#include "test_support.h"

namespace kestrel {
namespace {

nlohmann::json cell(const std::string& name) {
  const nlohmann::json doc = test::read_json(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/synth_cells.json");
  for (const auto& c : doc["cells"])
    if (c["name"] == name) return c;
  ADD_FAILURE() << "no cell " << name;
  return {};
}

// The qwen35 tiny file of the cell (seed 1, F32), blocks of 16, a context of 512.
LoadOptions tiny_qwen35(const test::TempDir& dir) {
  LoadOptions o = test::shared_engine("", 512);
  o.model_path = test::write_synth_preset(dir.file("qwen35.gguf"), "qwen35", "tiny");
  o.kv_block_size = 16;
  return o;
}

TEST(LinearAttention, APrefixHitRestoresTheStateSnapshotAndGivesLlamaCppsIds) {
  test::TempDir dir;
  const nlohmann::json c = cell("qwen35-tiny.f32");
  ASSERT_FALSE(c.is_null());
  LoadOptions o = tiny_qwen35(dir);
  LoadedModel e = LoadedModel::load(o);
  ASSERT_GT(e.kv->layout().n_recurrent, 0);
  const auto prompt = c["prompt"].get<std::vector<int32_t>>();
  const auto want = c["ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(prompt.size(), 150u);
  GenerationParams p;
  p.max_tokens = static_cast<int64_t>(want.size());
  p.sampling.temperature = 0.0f;
  p.ignore_eos = true;
  p.prefix_cache = true;
  EXPECT_EQ(generate(e, prompt, p).tokens, want);
  const int64_t hits = e.kv->prefix_stats().hit_blocks;
  EXPECT_EQ(hits, 0);
  // Again: the first 144 positions (9 blocks) come from the cache, the state from the snapshot at 144.
  EXPECT_EQ(generate(e, prompt, p).tokens, want);
  EXPECT_EQ(e.kv->prefix_stats().hit_blocks - hits, 9);
  // A prompt that shares 100 positions has no snapshot at its shared blocks' end (96): nothing is shared, and
  // its ids are a fresh engine's.
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 100);
  for (int i = 0; i < 20; i++) other.push_back(3 + 7 * i);
  const auto before = e.kv->prefix_stats().hit_blocks;
  const auto shared_run = generate(e, other, p).tokens;
  EXPECT_EQ(e.kv->prefix_stats().hit_blocks, before);
  LoadedModel fresh = LoadedModel::load(o);
  EXPECT_EQ(shared_run, generate(fresh, other, p).tokens);
}

TEST(LinearAttention, PreemptedRequestsRecomputeToLlamaCppsIds) {
  test::TempDir dir;
  const nlohmann::json c = cell("qwen35-tiny.f32");
  ASSERT_FALSE(c.is_null());
  LoadOptions o = tiny_qwen35(dir);
  o.n_seq_max = 2;
  KvLayout l;
  {
    LoadedModel probe = LoadedModel::load(o);
    l = probe.kv->layout();
  }
  // 16 blocks: two 166-position requests (11 blocks each) cannot both finish; their prefills in chunks of 64
  // run side by side until one needs a block and the later one is preempted.
  o.kv_cache_bytes = 16 * 16 * l.bytes_per_token() + 2 * l.state_bytes_per_seq();
  LoadedModel e = LoadedModel::load(o);
  ASSERT_EQ(e.kv->n_blocks(), 16);
  ExecConfig xc;
  xc.scheduler.max_batch_tokens = 128;
  xc.scheduler.prefill_chunk = 64;
  xc.scheduler.max_batch_size = 2;
  StepExecutor exec(e, xc);
  const auto prompt = c["prompt"].get<std::vector<int32_t>>();
  const auto want = c["ids"].get<std::vector<int32_t>>();
  for (int id = 1; id <= 2; id++) {
    auto r = std::make_unique<Request>();
    r->id = id;
    r->seq = id;
    r->arrival_ms = id;
    r->params.prompt = prompt;
    r->params.max_tokens = static_cast<int64_t>(want.size());
    r->params.sampling.temperature = 0.0f;
    r->params.ignore_eos = true;
    r->params.prefix_cache = false;  // recompute from position 0
    exec.add(std::move(r));
  }
  std::map<int64_t, std::vector<int32_t>> got;
  int preempted = 0, finished = 0;
  for (int step = 0; step < 500 && finished < 2; step++) {
    const StepReport rep = exec.step(step);
    ASSERT_TRUE(rep.ran);
    preempted += rep.preempted;
    for (const RequestOutput& out : rep) {
      for (const TokenOutput& t : out.tokens) got[out.id].push_back(t.token);
      finished += out.finished;
    }
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(got[1], want);
  EXPECT_EQ(got[2], want);
}

}  // namespace
}  // namespace kestrel
