// stories260K against the original llama2.c program's own outputs
// (../shared/reference/stories260K): every greedy id, logits within 1e-4.
#include <fmt/format.h>

#include "gguf/llama2c_import.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "test_support.h"

namespace kestrel {
namespace {

using test::shared;

constexpr float kLogitTolerance = 1e-4f;

struct CaseResult {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // every position's row, prompt first
};

CaseResult run_case(LoadedModel& e, const nlohmann::json& c) {
  const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
  GenerationParams p;
  p.max_tokens = static_cast<int64_t>(c["greedy_ids_after_prompt"].size());
  p.sampling.temperature = 0.0f;
  p.all_logits = true;
  p.ignore_eos = true;
  CaseResult r;
  GenerationCallbacks cb;
  cb.on_logits = [&](const float* row, int64_t n) { r.logits.insert(r.logits.end(), row, row + n); };
  r.ids = generate(e, prompt, p, cb).tokens;
  return r;
}

void check_all_cases(LoadedModel& e, const std::string& source) {
  const auto ref = test::read_json(shared("reference/stories260K/stories260K_greedy.json"));
  ASSERT_GE(ref.size(), 3u);
  for (const auto& [name, c] : ref.items()) {
    SCOPED_TRACE(source + " case " + name);
    // The tokenizer must produce the reference's prompt ids from the text.
    EXPECT_EQ(e.tokenizer->encode(c["prompt"].get<std::string>(), true, false), c["prompt_ids"].get<std::vector<int32_t>>());
    const CaseResult r = run_case(e, c);
    EXPECT_EQ(r.ids, c["greedy_ids_after_prompt"].get<std::vector<int32_t>>());
    const auto want = test::read_f32(shared("reference/stories260K/" + c["logits_file"].get<std::string>()));
    const size_t rows = c["logits_rows"].get<size_t>(), vocab = c["vocab"].get<size_t>();
    ASSERT_EQ(want.size(), rows * vocab);
    ASSERT_GE(r.logits.size(), want.size());
    float max_diff = 0.0f;
    for (size_t i = 0; i < want.size(); i++) max_diff = std::max(max_diff, std::fabs(want[i] - r.logits[i]));
    EXPECT_LT(max_diff, kLogitTolerance) << "max |logit difference| over " << rows << " rows";
  }
}

LoadOptions options_for(const std::string& model) {
  LoadOptions o;
  o.model_path = model;
  o.n_threads = 2;
  return o;
}

TEST(Stories260K, MatchesLlama2cFromCheckpointImportedOnTheFly) {
  LoadOptions o = options_for(shared("models/stories260K.bin"));
  o.llama2c_tokenizer = shared("models/tok512.bin");
  LoadedModel e = LoadedModel::load(o);
  EXPECT_EQ(e.n_ctx, 512);
  check_all_cases(e, "llama2.c checkpoint");
}

TEST(Stories260K, MatchesLlama2cFromConvertedGguf) {
  test::TempDir dir;
  const std::string out = dir.file("stories260K.gguf");
  {
    const MappedFile ckpt = MappedFile::open(shared("models/stories260K.bin"));
    const MappedFile tok = MappedFile::open(shared("models/tok512.bin"));
    llama2c_to_gguf(ckpt, tok, {}).write_file(out);
  }
  LoadedModel e = LoadedModel::load(options_for(out));
  check_all_cases(e, "converted GGUF");
}

TEST(Stories260K, MatchesWithEveryThreadCountAndBatchSize) {
  // Prefill split into small batches and run on one thread must not change results.
  LoadOptions o = options_for(shared("models/stories260K.bin"));
  o.llama2c_tokenizer = shared("models/tok512.bin");
  o.n_threads = 1;
  o.max_batch_tokens = 3;
  LoadedModel e = LoadedModel::load(o);
  const auto ref = test::read_json(shared("reference/stories260K/stories260K_greedy.json"));
  const auto& c = ref["lily"];
  EXPECT_EQ(run_case(e, c).ids, c["greedy_ids_after_prompt"].get<std::vector<int32_t>>());
}

TEST(Stories260K, LlamaCppConvertedGgufTellsTheSameStory) {
  // Written by llama.cpp's own converter (context_length 128 in its metadata).
  LoadOptions o = options_for(shared("models/stories260K.gguf"));
  o.n_ctx = 512;
  LoadedModel e = LoadedModel::load(o);
  const auto ref = test::read_json(shared("reference/stories260K/stories260K_greedy.json"));
  const auto& c = ref["once"];
  EXPECT_EQ(e.tokenizer->encode(c["prompt"].get<std::string>(), true, false), c["prompt_ids"].get<std::vector<int32_t>>());
  const CaseResult r = run_case(e, c);
  EXPECT_EQ(r.ids, c["greedy_ids_after_prompt"].get<std::vector<int32_t>>());
  GenerationParams p;
  p.max_tokens = 60;
  p.sampling.temperature = 0.0f;
  const auto text = generate(e, c["prompt_ids"].get<std::vector<int32_t>>(), p).text;
  EXPECT_EQ(text, c["text_printed_by_reference"].get<std::string>().substr(16, text.size()));
}

}  // namespace
}  // namespace kestrel
