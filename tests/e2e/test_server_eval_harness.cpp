// What evaluation harnesses ask of /v1/completions, through `kestrel serve`:
// echo with prompt logprobs (the prompt's tokens scored by the model, the
// first one null), max_tokens 0, lists of prompts as choices in order, and
// the exact bodies lm-eval-harness's `local-completions` model sends for
// loglikelihood and generate_until, read back as it reads them.
// References: the perplexity module (llama.cpp's method, itself checked
// against llama.cpp's figures in tests/reference/test_perplexity.cpp) and
// llama.cpp's own PPL of stories260K on ../shared/eval/stories.txt.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "http_json.h"
#include "measure/perplexity.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

// lm-eval-harness's LocalCompletionsAPI.parse_logprobs: choices sorted by index, the continuation's logprobs are
// token_logprobs[ctxlen:-1] (the last entry is the one generated token), greedy when each equals its top entry.
std::vector<std::pair<double, bool>> lm_eval_parse_logprobs(const json& out, const std::vector<size_t>& ctxlens,
                                                            bool generated_one) {
  std::vector<json> choices(out["choices"].begin(), out["choices"].end());
  std::sort(choices.begin(), choices.end(), [](const json& a, const json& b) { return a["index"] < b["index"]; });
  std::vector<std::pair<double, bool>> res;
  for (size_t i = 0; i < choices.size(); i++) {
    const json& lp = choices[i]["logprobs"];
    const size_t end = lp["token_logprobs"].size() - (generated_one ? 1 : 0);
    double sum = 0;
    bool greedy = true;
    for (size_t k = ctxlens[i]; k < end; k++) {
      const double tok = lp["token_logprobs"][k].get<double>();
      sum += tok;
      double best = -1e30;
      for (const auto& [name, v] : lp["top_logprobs"][k].items()) best = std::max(best, v.get<double>());
      if (tok != best) greedy = false;
    }
    res.emplace_back(sum, greedy);
  }
  return res;
}

class EvalHarness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine_ = new LoadedModel(LoadedModel::load(test::shared_engine("models/stories260K.gguf", 256)));
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  static std::vector<int32_t> tokens(const std::string& text) { return engine_->tokenizer->encode(text, true, false); }
  static LoadedModel* engine_;
};
LoadedModel* EvalHarness::engine_ = nullptr;

TEST_F(EvalHarness, EchoedLogprobsAreThePerplexityModulesAndLlamaCppsPerplexity) {
  const std::string text = test::read_text(test::shared("eval/stories.txt"));
  const std::vector<int32_t> all = tokens(text);
  constexpr size_t kCtx = 128, kChunks = 20;
  ASSERT_GE(all.size(), kCtx * kChunks);
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();

  // The first chunk alone against the perplexity module's figure for it: the sum of the scored half's logprobs
  // is its negative log-likelihood.
  const PerplexityResult one = perplexity(*engine_, text, kCtx, 1);
  std::vector<int32_t> chunk(all.begin(), all.begin() + kCtx);
  const json first = test::post_ok(c, "/v1/completions",
                          {{"prompt", chunk}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}, {"temperature", 0}});
  const json& lp = first["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), kCtx);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // nothing before the first token
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(first["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(first["usage"]["completion_tokens"], 0);
  EXPECT_EQ(first["usage"]["prompt_tokens"], kCtx);
  double nll = 0;
  for (size_t k = kCtx / 2 + 1; k < kCtx; k++) nll -= lp["token_logprobs"][k].get<double>();
  const double n_scored = static_cast<double>(kCtx - kCtx / 2 - 1);
  EXPECT_NEAR(std::exp(nll / n_scored), one.ppl, 1e-4 * one.ppl);

  // Every chunk, as one request of 20 prompts (choices in prompt order), against llama.cpp's 5.1168.
  json prompts = json::array();
  for (size_t k = 0; k < kChunks; k++) {
    std::vector<int32_t> p(all.begin() + static_cast<std::ptrdiff_t>(k * kCtx),
                           all.begin() + static_cast<std::ptrdiff_t>((k + 1) * kCtx));
    p[0] = engine_->tokenizer->vocab().bos;  // each chunk starts with BOS, as llama.cpp's perplexity runs it
    prompts.push_back(p);
  }
  const json every = test::post_ok(c, "/v1/completions",
                          {{"prompt", prompts}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}, {"temperature", 0}});
  ASSERT_EQ(every["choices"].size(), kChunks);
  double total = 0;
  for (size_t k = 0; k < kChunks; k++) {
    const json& ch = every["choices"][k];
    EXPECT_EQ(ch["index"], k);
    EXPECT_EQ(ch["logprobs"]["tokens"].size(), kCtx);
    for (size_t i = kCtx / 2 + 1; i < kCtx; i++) total -= ch["logprobs"]["token_logprobs"][i].get<double>();
  }
  EXPECT_NEAR(std::exp(total / (n_scored * kChunks)), 5.1168, 5e-4);
  EXPECT_EQ(every["usage"]["prompt_tokens"], kCtx * kChunks);  // every prompt counted
}

TEST_F(EvalHarness, EchoGivesThePromptTextOffsetsAndThenTheCompletion) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();
  const std::string prompt = "Once upon a time, there was a little";
  const json plain = test::post_ok(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 2}});
  const json echoed = test::post_ok(c, "/v1/completions",
                           {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 2}, {"echo", true}});
  const std::string completion = plain["choices"][0]["text"];
  EXPECT_EQ(echoed["choices"][0]["text"], prompt + completion);
  const json& lp = echoed["choices"][0]["logprobs"];
  const size_t n_prompt = tokens(prompt).size();
  ASSERT_EQ(lp["tokens"].size(), n_prompt + 6);
  EXPECT_EQ(lp["tokens"][0], "<s>");  // the BOS the prompt was given
  // Offsets index the echoed text: each token's text starts where its offset says.
  for (size_t k = 1; k < lp["tokens"].size(); k++) {
    const auto at = lp["text_offset"][k].get<size_t>();
    std::string tok = lp["tokens"][k];
    if (k == 1 && tok[0] == ' ') tok.erase(0, 1);  // SentencePiece's dummy-prefix space, not in the text
    EXPECT_EQ(echoed["choices"][0]["text"].get<std::string>().substr(at, tok.size()), tok) << k;
  }
  // The generated part equals the plain request's logprobs.
  for (size_t k = 0; k < 6; k++) {
    EXPECT_EQ(lp["tokens"][n_prompt + k], plain["choices"][0]["logprobs"]["tokens"][k]);
    EXPECT_NEAR(lp["token_logprobs"][n_prompt + k].get<double>(),
                plain["choices"][0]["logprobs"]["token_logprobs"][k].get<double>(), 1e-5);
  }
  EXPECT_EQ(echoed["usage"], plain["usage"]);

  // Echo without logprobs: the text alone; streamed, the chunks add up to the same.
  const json text_only = test::post_ok(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(text_only["choices"][0]["text"], prompt + completion);
  EXPECT_TRUE(text_only["choices"][0]["logprobs"].is_null());
  auto r = c.Post("/v1/completions",
                  json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"echo", true}, {"logprobs", 1}, {"stream", true}}.dump(),
                  "application/json");
  ASSERT_TRUE(r);
  std::string streamed;
  size_t streamed_tokens = 0;
  for (const auto& line : test::sse_data_lines(r->body)) {
    if (line == "[DONE]") break;
    const json chunk = json::parse(line);
    streamed += chunk["choices"][0]["text"].get<std::string>();
    if (chunk["choices"][0]["logprobs"].is_object()) streamed_tokens += chunk["choices"][0]["logprobs"]["tokens"].size();
  }
  EXPECT_EQ(streamed, prompt + completion);
  EXPECT_EQ(streamed_tokens, n_prompt + 6);
}

// The bodies lm-eval-harness's local-completions model sends (lm_eval/models/openai_completions.py,
// LocalCompletionsAPI._create_payload), read as its parse_logprobs and parse_generations read them.
TEST_F(EvalHarness, LmEvalHarnessLoglikelihoodAndGenerateUntilBodies) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256", "--served-model-name", "stories"});
  auto c = s.client();
  const std::vector<int32_t> context = tokens("Once upon a time, there was a little girl named");
  // The greedy continuation (and its logprobs) from a plain completion: a different computation (decode rows,
  // sampling-time logprobs) than the echoed prompt rows.
  const json greedy = test::post_ok(c, "/v1/completions", {{"prompt", context}, {"max_tokens", 3}, {"temperature", 0},
                                                  {"logprobs", 1}, {"return_tokens_as_token_ids", true}});
  std::vector<int32_t> cont_greedy;
  double greedy_sum = 0;
  for (size_t k = 0; k < 3; k++) {
    cont_greedy.push_back(std::stoi(greedy["choices"][0]["logprobs"]["tokens"][k].get<std::string>().substr(9)));
    greedy_sum += greedy["choices"][0]["logprobs"]["token_logprobs"][k].get<double>();
  }
  std::vector<int32_t> cont_other = cont_greedy;
  cont_other[1] = tokens(" dog").back();  // not what the model would say
  ASSERT_NE(cont_other[1], cont_greedy[1]);

  std::vector<json> bodies;
  json prompts = json::array();
  for (const auto* cont : {&cont_greedy, &cont_other}) {
    std::vector<int32_t> p = context;
    p.insert(p.end(), cont->begin(), cont->end());
    prompts.push_back(p);
  }
  const std::vector<size_t> ctxlens = {context.size(), context.size()};
  // Today's payload (max_tokens 1, the generated token's entry dropped by [ctxlen:-1]) and the older one (max_tokens 0).
  for (const int max_tokens : {1, 0}) {
    const json body = {{"model", "stories"}, {"prompt", prompts}, {"temperature", 0}, {"max_tokens", max_tokens},
                       {"logprobs", 1},      {"seed", 1234},      {"echo", true}};
    const auto res = lm_eval_parse_logprobs(test::post_ok(c, "/v1/completions", body), ctxlens, max_tokens == 1);
    ASSERT_EQ(res.size(), 2u);
    EXPECT_NEAR(res[0].first, greedy_sum, 1e-4) << max_tokens;
    EXPECT_TRUE(res[0].second) << max_tokens;
    EXPECT_LT(res[1].first, res[0].first) << max_tokens;
    EXPECT_FALSE(res[1].second) << max_tokens;
  }

  // generate_until: a batch of prompts with the task's `until` and the end-of-text string as stops (more than
  // OpenAI's four), max_gen_toks, temperature 0, seed.
  const std::vector<std::string> texts = {"Once upon a time", "The little dog"};
  json gen_prompts = json::array();
  for (const auto& t : texts) gen_prompts.push_back(tokens(t));
  const json stop = {"\n\n", "Question:", ".", "<|im_end|>", "</s>"};
  const json gen = test::post_ok(c, "/v1/completions", {{"prompt", gen_prompts}, {"model", "stories"}, {"max_tokens", 48},
                                               {"temperature", 0}, {"stop", stop}, {"seed", 1234}});
  std::vector<std::string> got(texts.size());
  for (const auto& ch : gen["choices"]) got[ch["index"].get<size_t>()] = ch["text"];  // parse_generations
  for (size_t i = 0; i < texts.size(); i++) {
    const json alone = test::post_ok(c, "/v1/completions", {{"prompt", texts[i]}, {"max_tokens", 48}, {"temperature", 0}, {"stop", stop}});
    EXPECT_EQ(got[i], alone["choices"][0]["text"]) << i;
    EXPECT_EQ(got[i].find('.'), std::string::npos) << got[i];
  }
}

// OpenAI's chat logprobs carry each token's UTF-8 bytes, alternatives too: together they are the reply.
TEST_F(EvalHarness, ChatLogprobEntriesCarryTheirBytes) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();
  const json r = test::post_ok(c, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                                                  {"max_tokens", 12}, {"temperature", 0}, {"logprobs", true},
                                                  {"top_logprobs", 3}, {"ignore_eos", true}});
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 12u);
  std::string joined;
  auto text_of = [](const json& bytes) {
    std::string out;
    for (const auto& b : bytes) out += static_cast<char>(b.get<int>());
    return out;
  };
  for (const auto& t : content) {
    EXPECT_EQ(text_of(t["bytes"]), t["token"].get<std::string>());
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    for (const auto& alt : t["top_logprobs"]) EXPECT_EQ(text_of(alt["bytes"]), alt["token"].get<std::string>());
    joined += text_of(t["bytes"]);
  }
  // The reply is the tokens' bytes (SentencePiece's leading space after the prompt aside).
  const std::string reply = r["choices"][0]["message"]["content"];
  EXPECT_NE(joined.find(reply.substr(reply.find_first_not_of(' '))), std::string::npos) << joined << " | " << reply;
}

// A reply ended by the end-of-generation token lists that token last in its logprobs, as vLLM does (no text, not
// counted as a completion token): lm-eval-harness scores a continuation as token_logprobs[ctxlen:-1], taking the
// last entry for the generated token. Without it, a continuation the model would end after lost its own last
// token from the score (found by running the real harness: 2 of 32 items off by up to 9 nats).
TEST_F(EvalHarness, AReplyEndedByEosListsTheEosTokenLastInItsLogprobs) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();
  // (No BOS: lm-eval's token arrays have none; with one, this model goes on.)
  const std::vector<int32_t> prompt = engine_->tokenizer->encode("They played all day and had a lot of fun.", false, false);
  const json r = test::post_ok(c, "/v1/completions", {{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 1},
                                            {"temperature", 0}});
  const json& choice = r["choices"][0];
  ASSERT_EQ(choice["finish_reason"], "stop") << r;  // the model ends the story here: EOS is its greedy token
  const json& lp = choice["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), prompt.size() + 1) << lp;
  // (This model's stories end at BOS, its end-of-generation token as llama2.c's sampler had it.)
  EXPECT_TRUE(lp["tokens"].back() == "<s>" || lp["tokens"].back() == "</s>") << lp["tokens"].back();
  const double eos = lp["token_logprobs"].back().get<double>();
  EXPECT_LT(eos, 0.0);
  EXPECT_EQ(lp["top_logprobs"].back().begin().value().get<double>(), eos);  // greedy: its own top entry
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  // The text is the prompt's alone; the prompt's last token keeps its own logprob.
  EXPECT_EQ(choice["text"].get<std::string>().find("fun.") + 4, choice["text"].get<std::string>().size());
  const json alone = test::post_ok(c, "/v1/completions", {{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 0}});
  const json& prompt_lp = alone["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(prompt_lp.size(), prompt.size());
  EXPECT_NEAR(lp["token_logprobs"][prompt.size() - 1].get<double>(), prompt_lp.back().get<double>(), 1e-6);
  // Without logprobs, nothing of it shows.
  const json plain = test::post_ok(c, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}});
  EXPECT_EQ(plain["choices"][0]["text"], "");
}

TEST_F(EvalHarness, BadPromptListsAreRefusedByName) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "64", "--max-queue", "8"});
  auto c = s.client();
  auto check = [&](const json& body, const std::string& param, const std::string& words,
                   const std::string& path = "/v1/completions") {
    auto r = c.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], param) << r->body;
    EXPECT_NE(e["message"].get<std::string>().find(words), std::string::npos) << r->body;
  };
  check({{"prompt", json::array()}}, "prompt", "must be");
  check({{"prompt", {"fine", ""}}}, "prompt[1]", "empty");
  check({{"prompt", {"fine", 3}}}, "prompt[1]", "must be");
  check({{"prompt", {{1, 2}, {1, 999999}}}}, "prompt[1]", "token ids");
  check({{"prompt", {"a", "b", "c"}}, {"n", 3}}, "prompt", "queue");
  check({{"prompt", {"short", std::string(400, 'x')}}}, "prompt[1]", "context");
  check({{"prompt", "x"}, {"max_tokens", -1}}, "max_tokens", "out of range");
  check({{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"echo", true}}, "echo", "unknown field",
        "/v1/chat/completions");
}

}  // namespace
}  // namespace kestrel
