// A batch is a list of (sequence, token, position) rows: several sequences of
// different lengths, prefilled in interleaved chunks and then decoded
// together, must give every row the logits that sequence gets alone. Run on
// the llama.cpp reference models (Llama, and DeepSeek with each way of
// running MLA attention) and the compat set's families (Qwen3's norms, the
// MoE routing per token, Phi-3, Gemma's sliding windows, whose layers keep
// their own block tables), whose single-sequence logits match llama.cpp.
#include <gtest/gtest.h>

#include <map>

#include "model/family.h"
#include "core/error.h"
#include "runtime/loaded_model.h"
#include "cli_process.h"
#include "test_support.h"
#include "model/batch_io.h"

namespace kestrel {
namespace {

struct Case {
  const char* model;
  MlaAttention mla;
  bool compat = false;  // ../shared/reference/compat/models/<model>.gguf, widened to F32
  const char* synth = nullptr;  // or `kestrel synth --arch <synth> --preset tiny` (prompt ids of our own)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " mla " << static_cast<int>(c.mla); }

class MixedBatches : public ::testing::TestWithParam<Case> {};

// Runs `batch` and returns its logits rows keyed by (sequence, position).
std::map<std::pair<int, int>, std::vector<float>> run(LoadedModel& e, const Batch& b) {
  const int64_t nv = e.model->config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(b.n_logit_rows() * nv));
  test::forward_alone(e, b, logits.data());
  std::map<std::pair<int, int>, std::vector<float>> rows;
  int64_t r = 0;
  for (int64_t i = 0; i < b.size(); i++) {
    if (!b.want_logits[i]) continue;
    rows[{b.seq_ids[i], b.positions[i]}].assign(logits.begin() + r * nv, logits.begin() + (r + 1) * nv);
    r++;
  }
  return rows;
}

TEST_P(MixedBatches, EachRowMatchesItsSequenceRunAlone) {
  const Case c = GetParam();
  const std::string base = test::shared(std::string("reference/llama.cpp/") + c.model);
  std::vector<int32_t> prompt;
  if (c.synth) {
    for (int i = 0; i < 18; i++) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % 500));
  } else if (c.compat) {  // the set's first prompt and llama.cpp's continuation of it
    const auto run = test::read_json(test::shared("reference/compat/expected.json"))["cells"][c.model]["runs"][0];
    prompt = run["prompt"].get<std::vector<int32_t>>();
    for (int32_t id : run["ids"].get<std::vector<int32_t>>()) prompt.push_back(id);
  } else {
    prompt = test::read_json(base + ".json")["prompt_ids"].get<std::vector<int32_t>>();
  }
  // F32 weights: F16 ones meet activations rounded to F16 (as in llama.cpp),
  // which turns the float rounding of a batched kernel's other summation
  // order into 1e-3 steps; what is tested here is which rows meet which.
  test::TempDir dir;
  LoadOptions o;
  o.model_path = c.compat ? test::widen_to_f32(test::compat_model(c.model), dir.file("f32.gguf")) : base + ".gguf";
  if (c.synth) {
    o.model_path = dir.file("synth.gguf");
    ASSERT_EQ(test::run_kestrel({"synth", "--arch", c.synth, "--preset", "tiny", "--type", "f32", "-o", o.model_path})
                  .exit_code, 0);
  }
  o.n_threads = 2;
  o.n_ctx = 64;
  o.n_seq_max = 3;
  o.mla = c.mla;
  LoadedModel e = LoadedModel::load(o);

  // Three sequences: prompts of 6, 11 and 18 tokens (prefixes of the
  // reference prompt, so sequences 0 and 1 share their first tokens), then
  // 3 decoded tokens each.
  const int lengths[3] = {6, 11, 18};
  auto token = [&](int s, int p) { return p < lengths[s] ? prompt[p] : static_cast<int32_t>(100 + 37 * s + p); };
  const int total[3] = {lengths[0] + 3, lengths[1] + 3, lengths[2] + 3};
  std::map<std::pair<int, int>, std::vector<float>> together;

  std::map<std::pair<int, int>, std::vector<float>> alone;
  for (int s = 0; s < 3; s++) {
    Batch b;
    for (int p = 0; p < lengths[s]; p++) b.add(token(s, p), p, s, true);
    alone.merge(run(e, b));
    for (int p = lengths[s]; p < total[s]; p++) {
      b.clear();
      b.add(token(s, p), p, s, true);
      alone.merge(run(e, b));
    }
    e.kv->remove(s);
  }

  // Together: prefill in two interleaved chunks of uneven sizes, then decode
  // all three sequences in each step.
  const int chunk1[3] = {4, 2, 9};
  auto interleaved = [&](const int* from, const int* to) {
    Batch b;
    for (int i = 0; i < 18; i++)
      for (int s = 0; s < 3; s++)
        if (from[s] + i < to[s]) b.add(token(s, from[s] + i), from[s] + i, s, true);
    return b;
  };
  const int zero[3] = {0, 0, 0};
  together.merge(run(e, interleaved(zero, chunk1)));
  together.merge(run(e, interleaved(chunk1, lengths)));
  for (int step = 0; step < 3; step++) {
    const int from[3] = {lengths[0] + step, lengths[1] + step, lengths[2] + step};
    const int to[3] = {from[0] + 1, from[1] + 1, from[2] + 1};
    const Batch b = interleaved(from, to);
    ASSERT_EQ(b.size(), 3);
    together.merge(run(e, b));
  }

  ASSERT_EQ(together.size(), alone.size());
  float worst = 0.0f;
  for (const auto& [key, want] : alone) {
    const auto& got = together.at(key);
    for (size_t i = 0; i < want.size(); i++) worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  // Gemma's GELU rounds its input to fp16 (llama.cpp's table): the same
  // amplification of summation-order rounding, within 2e-3 (1e-6 with an
  // exact GELU).
  const bool gelu = family_of(e.model->config().arch).recipe.ffn_act == FfnActivation::Gelu;
  EXPECT_LT(worst, gelu ? 3e-3f : 1e-4f) << "largest logit difference between batched and alone";
}

INSTANTIATE_TEST_SUITE_P(Models, MixedBatches,
                         ::testing::Values(Case{"llama-tiny.f32", MlaAttention::Auto},
                                           Case{"deepseek2-lite-tiny.f32", MlaAttention::Absorbed},
                                           Case{"deepseek3-tiny.f32", MlaAttention::Absorbed},
                                           Case{"deepseek3-tiny.f32", MlaAttention::Decompressed},
                                           // DeepSeek-V3.2 and GLM-5 (top-k 4): rows past 4 positions
                                           // attend to their indexer's choice, chunks and sequences mixed.
                                           Case{"deepseek32-tiny", MlaAttention::Auto, false, "deepseek32"},
                                           Case{"glm-dsa-tiny", MlaAttention::Auto, false, "glm-dsa"},
                                           // DeepSeek-V4: blocks of 4 completed across the chunks (their
                                           // compressor state read back from the cache), top-k 3 of them.
                                           Case{"deepseek4-tiny", MlaAttention::Auto, false, "deepseek4"},
                                           // gpt-oss: windows of 8 (sinks) moving across chunks and sequences.
                                           Case{"gpt-oss-tiny", MlaAttention::Auto, false, "gpt-oss"},
                                           Case{"mistral3-tiny", MlaAttention::Auto, false, "mistral3"},
                                           Case{"glm4moe-tiny", MlaAttention::Auto, false, "glm4moe"},
                                           Case{"llama4-tiny", MlaAttention::Auto, false, "llama4"},
                                           // Gemma 4: layers 9-11 read layers 7 and 8's caches (written by
                                           // the same step's earlier layers), per-layer embeddings by row.
                                           Case{"gemma4-tiny", MlaAttention::Auto, false, "gemma4"},
                                           // Linear attention: rows of three sequences interleaved (sorted
                                           // by sequence for the recurrence), states carried across steps.
                                           Case{"qwen35-tiny", MlaAttention::Auto, false, "qwen35"},
                                           Case{"qwen3next-tiny", MlaAttention::Auto, false, "qwen3next"},
                                           Case{"llama32.F16", MlaAttention::Auto, true},
                                           Case{"qwen3moe.F16", MlaAttention::Auto, true},
                                           Case{"mixtral.F16", MlaAttention::Auto, true},
                                           Case{"phi3.F16", MlaAttention::Auto, true},
                                           Case{"gemma2.F16", MlaAttention::Auto, true},
                                           Case{"gemma3.F16", MlaAttention::Auto, true}),
                         [](const auto& info) {
                           std::string n =
                               std::string(info.param.model) + "_" + std::to_string(static_cast<int>(info.param.mla));
                           for (auto& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// The model never allocates: a row at a position its sequence does not
// hold is an error naming it, not a silent reservation.
TEST(ModelForward, ARowWithoutAnAllocatedSlotIsAnErrorNamingIt) {
  LoadOptions o;
  o.model_path = test::shared("models/stories260K.gguf");
  o.n_threads = 1;
  o.n_ctx = 32;
  LoadedModel e = LoadedModel::load(o);
  std::vector<float> logits(static_cast<size_t>(e.model->config().n_vocab));
  Batch b;
  b.add(1, 0, 0, true);
  BatchPlacement place(1);
  try {
    place_batch(b, *e.kv, e.model->config().n_vocab, place);
    ADD_FAILURE() << "placing the batch allocated position 0 itself";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("position 0 of sequence 0 has no KV slot"), std::string::npos) << err.what();
  }
  EXPECT_EQ(e.kv->length(0), 0);
  test::allocate_by_hand(b, *e.kv);  // what the scheduler does
  EXPECT_EQ(e.kv->length(0), 1);
  place_batch(b, *e.kv, e.model->config().n_vocab, place);
  e.model->forward(b, place, e.kv->store(), logits.data());  // now it runs
}

}  // namespace
}  // namespace kestrel
