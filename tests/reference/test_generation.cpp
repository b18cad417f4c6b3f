// Generation on the real stories260K model: stop strings, EOS, context
// limits, seeded sampling, streaming text that never splits a character.
#include <gmock/gmock.h>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/step_executor.h"
#include "test_support.h"
#include "tokenizer/utf8.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

class Generation : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions o;
    o.model_path = test::shared("models/stories260K.bin");
    o.llama2c_tokenizer = test::shared("models/tok512.bin");
    o.n_threads = 2;
    engine_ = new LoadedModel(LoadedModel::load(o));
  }
  static void TearDownTestSuite() { delete engine_; }
  static std::vector<int32_t> prompt(const std::string& text) { return engine_->tokenizer->encode(text, true, false); }
  static LoadedModel* engine_;
};
LoadedModel* Generation::engine_ = nullptr;

TEST_F(Generation, StopStringEndsTheOutputBeforeIt) {
  GenerationParams p;
  p.sampling.temperature = 0.0f;
  p.max_tokens = 100;
  const auto full = generate(*engine_, prompt("Once upon a time"), p);
  ASSERT_THAT(full.text, HasSubstr(" Lily."));
  p.stop = {"Lily"};
  std::string streamed;
  GenerationCallbacks cb;
  cb.on_text = [&](const std::string& s) { streamed += s; };
  const auto r = generate(*engine_, prompt("Once upon a time"), p, cb);
  EXPECT_EQ(r.stop_reason, "stop");
  EXPECT_EQ(r.text, full.text.substr(0, full.text.find("Lily")));
  EXPECT_EQ(streamed, r.text);  // nothing of the stop string was streamed
}

// The runtime decides the end, not the front: a request through the step executor alone (no generator, no
// server) with a stop string ends there with FinishReason::Stop, its text cut before the stop string, the
// stop string named, no token after the one that completed it, and its record gone.
TEST_F(Generation, TheExecutorEndsARequestAtItsStopString) {
  GenerationParams g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = 100;
  const auto full = generate(*engine_, prompt("Once upon a time"), g);
  ASSERT_THAT(full.text, HasSubstr(" Lily."));
  engine_->kv->erase(0);
  ExecConfig xc;
  xc.scheduler.max_batch_tokens = engine_->model->max_batch_tokens();
  xc.scheduler.prefill_chunk = engine_->model->max_batch_tokens();
  StepExecutor exec(*engine_, xc);
  auto req = std::make_unique<Request>();
  req->id = 7;
  req->params.prompt = prompt("Once upon a time");
  req->params.sampling.temperature = 0.0f;
  req->params.max_tokens = 100;
  req->params.text = true;
  req->params.stop = {"Lily"};
  exec.add(std::move(req));
  std::string text;
  std::vector<int32_t> tokens;
  bool finished = false;
  for (int step = 0; step < 200 && !finished; step++)
    for (const RequestOutput& out : exec.step(0)) {
      for (const TokenOutput& t : out.tokens) text += t.text, tokens.push_back(t.token);
      if (!out.finished) continue;
      finished = true;
      EXPECT_EQ(out.finish, FinishReason::Stop);
      EXPECT_EQ(out.stop_string, "Lily");
      text += out.end_text;
    }
  ASSERT_TRUE(finished);
  EXPECT_EQ(text, full.text.substr(0, full.text.find("Lily")));
  ASSERT_LE(tokens.size(), full.tokens.size());
  EXPECT_EQ(tokens, std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + static_cast<std::ptrdiff_t>(tokens.size())));
  const std::string upto = engine_->tokenizer->decode(tokens);
  EXPECT_THAT(upto, HasSubstr("Lily")) << "the last token completed the stop string";
  EXPECT_EQ(exec.record(7), nullptr);
}

TEST_F(Generation, SameSeedSameTextAcrossRuns) {
  GenerationParams p;
  p.sampling.temperature = 1.0f;
  p.sampling.seed = 1234;
  p.max_tokens = 40;
  const auto a = generate(*engine_, prompt("Lily and Tom"), p);
  const auto b = generate(*engine_, prompt("Lily and Tom"), p);
  EXPECT_EQ(a.tokens, b.tokens);
  p.sampling.seed = 99;
  EXPECT_NE(generate(*engine_, prompt("Lily and Tom"), p).tokens, a.tokens);
}

TEST_F(Generation, EndsAtEndOfSequenceOrAGeneratedBos) {
  // TinyStories ends a story by emitting BOS (id 1); sampling finds one soon.
  GenerationParams p;
  p.sampling.temperature = 1.0f;
  p.max_tokens = 400;
  const Vocab& v = engine_->tokenizer->vocab();
  int ended = 0;
  for (uint64_t seed = 1; seed <= 5; seed++) {
    p.sampling.seed = seed;
    const auto r = generate(*engine_, prompt("Once upon a time"), p);
    if (r.stop_reason != "eos") continue;
    ended++;
    EXPECT_LT(r.tokens.size(), 400u);
    for (int32_t t : r.tokens) EXPECT_FALSE(v.is_end_of_generation(t));
  }
  EXPECT_GT(ended, 0);
  EXPECT_TRUE(v.is_end_of_generation(v.bos));
  EXPECT_TRUE(v.is_end_of_generation(v.eos));
}

TEST_F(Generation, StopsAtContextEnd) {
  GenerationParams p;
  p.sampling.temperature = 0.0f;
  p.max_tokens = 10000;
  p.ignore_eos = true;
  const auto r = generate(*engine_, prompt("Once"), p);
  EXPECT_EQ(r.stop_reason, "context");
  EXPECT_EQ(r.n_prompt + static_cast<int64_t>(r.tokens.size()), engine_->n_ctx + 1);
}

TEST_F(Generation, BadInputsAreClearErrors) {
  GenerationParams p;
  try {
    generate(*engine_, {}, p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("prompt is empty"));
  }
  try {
    generate(*engine_, std::vector<int32_t>(600, 5), p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("600 tokens but the context holds 512"));
  }
  try {
    generate(*engine_, {1, 9999}, p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("token id 9999 is outside the vocabulary"));
  }
  p.sampling.top_p = 2.0f;
  EXPECT_THROW(generate(*engine_, {1}, p), Error);
}

TEST(Utf8Stream, NeverSplitsACharacter) {
  Utf8Stream s;
  const std::string euro = "\xE2\x82\xAC";  // 3 bytes
  EXPECT_EQ(s.push(euro.substr(0, 1)), "");
  EXPECT_EQ(s.push(euro.substr(1, 1)), "");
  EXPECT_EQ(s.push(euro.substr(2, 1) + "a\xF0\x9F"), euro + "a");
  EXPECT_EQ(s.push("\x98\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(s.push("\xE2"), "");
  EXPECT_EQ(s.flush(), "\xE2");  // an unfinished character is flushed at the end
}

// A random model's bytes: JSON-replacing each streamed piece gives the whole text's replacement, whatever
// the pieces (nlohmann's replacement restarts at the byte that broke a sequence, as the stream cuts there).
TEST(Utf8Stream, IllFormedBytesAreCutWhereAWholeStringDecoderCutsThem) {
  const std::string text = "Iooj\xD0\xF1\xAC 'a\xE0\x80\xBF b\xED\xA0\x80 \xC0\xAF\xF5\x80 \xF4\x90 \xE2\x82\xAC \xF0\x9F";
  auto replaced = [](const std::string& s) {
    return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const std::string whole = replaced(text);
  for (size_t step : {1, 2, 3, 5}) {
    Utf8Stream s;
    std::string out;
    for (size_t i = 0; i < text.size(); i += step) {
      const std::string piece = s.push(text.substr(i, step));
      out += replaced(piece).substr(1, replaced(piece).size() - 2);  // without the quotes
    }
    const std::string rest = s.flush();
    out += replaced(rest).substr(1, replaced(rest).size() - 2);
    EXPECT_EQ("\"" + out + "\"", whole) << "pieces of " << step;
  }
  Utf8Stream s;
  EXPECT_EQ(s.push("\xD0"), "");          // may still be a character
  EXPECT_EQ(s.push("\xF1"), "\xD0");      // no longer: cut before the byte that broke it
  EXPECT_EQ(s.push("\x80\x80\x80"), "\xF1\x80\x80\x80");
}

TEST(Tokenizers, ByteFallbackDecodesMultibyteCharactersAcrossTokens) {
  LoadOptions o;
  o.model_path = test::shared("reference/llama.cpp/llama-tiny.f32.gguf");
  LoadedModel e = LoadedModel::load(o);
  const std::string text = "caf\xC3\xA9 \xF0\x9F\xA6\x99";  // "café 🦙": the emoji needs byte tokens
  const auto ids = e.tokenizer->encode(text, false, false);
  Utf8Stream s;
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = s.push(e.tokenizer->token_to_piece(id));
    // Every streamed chunk is whole UTF-8 characters.
    for (size_t i = 0; i < piece.size();) {
      const size_t n = utf8_len(static_cast<unsigned char>(piece[i]));
      ASSERT_LE(i + n, piece.size());
      i += n;
    }
    out += piece;
  }
  EXPECT_EQ(out, " " + text);
}

TEST(Tokenizers, SpecialTokensOnlyWhenAskedFor) {
  LoadOptions o;
  o.model_path = test::shared("reference/llama.cpp/llama-tiny.f32.gguf");
  LoadedModel e = LoadedModel::load(o);
  EXPECT_EQ(e.tokenizer->encode("<s>", false, true), std::vector<int32_t>{1});
  const auto plain = e.tokenizer->encode("<s>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(e.tokenizer->decode(plain), " <s>");
  EXPECT_EQ(e.tokenizer->token_to_piece(1), "");
  EXPECT_EQ(e.tokenizer->token_to_piece(1, true), "<s>");
}

}  // namespace
}  // namespace kestrel
