// `kestrel serve` end to end: a real server process on loopback, driven by
// an HTTP client. Greedy text equals the in-process generator's; concurrent
// clients (streaming or not) get exactly what a single client gets; a table
// of bad requests gets 4xx errors naming the field while the server keeps
// serving; random bodies never crash it; prefix caching reports hits without
// changing results; /metrics parses as Prometheus text; SIGTERM drains.
#include <gmock/gmock.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "kv/kv_cache.h"
#include "prometheus_text.h"
#include "raw_http.h"
#include "runtime/generator.h"
#include "runtime/loaded_model.h"
#include "serve_process.h"
#include "sse_text.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using ::testing::HasSubstr;

using test::kStories;

json post(const httplib::Client& c_in, const std::string& path, const json& body, int* status = nullptr) {
  auto& c = const_cast<httplib::Client&>(c_in);
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response for " << body.dump();
    return {};
  }
  if (status) *status = r->status;
  return json::parse(r->body);
}

// The text of a streamed completion (deltas joined) and its final chunk.
std::string stream_text(httplib::Client& c, const std::string& path, json body, json* last = nullptr,
                        bool* done = nullptr) {
  body["stream"] = true;
  std::string raw;
  auto r = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return {};
  raw = r->body;
  return test::sse_text(raw, done, last);
}

// Every JSON chunk of a streamed answer, in order ([DONE] left out).
std::vector<json> sse_chunks(httplib::Client& c, const std::string& path, json body) {
  body["stream"] = true;
  auto r = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r);
  std::vector<json> chunks;
  if (!r) return chunks;
  for (size_t at = 0; (at = r->body.find("data: ", at)) != std::string::npos;) {
    const size_t end = r->body.find("\n\n", at);
    const std::string data = r->body.substr(at + 6, end - at - 6);
    at = end;
    if (data != "[DONE]") chunks.push_back(json::parse(data));
  }
  return chunks;
}

std::string reference_text(const std::string& model, const std::string& prompt, int max_tokens,
                           bool ignore_eos = false) {
  LoadOptions o;
  o.model_path = model;
  o.n_threads = 1;
  o.n_ctx = 256;
  LoadedModel e = LoadedModel::load(o);
  GenerationParams p;
  p.max_tokens = max_tokens;
  p.sampling.temperature = 0.0f;
  p.ignore_eos = ignore_eos;
  return generate(e, e.tokenizer->encode(prompt, true, false), p).text;
}

TEST(Server, CompletionsMatchTheGeneratorAndConcurrentClientsMatchASingleOne) {
  test::ServerProcess s({"-m", kStories, "-c", "256", "--max-batch-size", "8"});
  auto c = s.client();
  const std::vector<std::string> prompts = {"Once upon a time", "Lily and Tom", "The cat sat", "One day, a little"};
  std::vector<std::string> single;
  for (const auto& p : prompts) {
    int status = 0;
    const json r = post(c, "/v1/completions", {{"prompt", p}, {"max_tokens", 40}, {"temperature", 0}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_EQ(r["usage"]["completion_tokens"].get<int>() + r["usage"]["prompt_tokens"].get<int>(),
              r["usage"]["total_tokens"].get<int>());
    single.push_back(r["choices"][0]["text"]);
  }
  EXPECT_EQ(single[0], reference_text(kStories, prompts[0], 40));

  // 12 clients at once, half streaming: each gets exactly its single-client text.
  std::vector<std::string> got(12);
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; i++)
    clients.emplace_back([&, i] {
      auto cl = s.client();
      const json body = {{"prompt", prompts[i % 4]}, {"max_tokens", 40}, {"temperature", 0}};
      if (i % 2)
        got[i] = stream_text(cl, "/v1/completions", body);
      else
        got[i] = post(cl, "/v1/completions", body)["choices"][0]["text"];
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 12; i++) EXPECT_EQ(got[i], single[i % 4]) << "client " << i;
  EXPECT_THAT(s.log(), HasSubstr("40 generated tokens"));
}

// Speculation in the server's batches: concurrent greedy requests with
// repetitive prompts get exactly the text plain decoding gives, drafts are
// verified together in the batch, and the counters show up in /metrics.
// Returns the accepted-token counter.
double check_speculative_server(const std::string& model, const std::vector<std::string>& spec_args) {
  std::vector<std::string> args = {"-m", model, "-c", "256", "--max-batch-size", "8", "--draft-max", "6"};
  args.insert(args.end(), spec_args.begin(), spec_args.end());
  test::ServerProcess s(args);
  const std::vector<std::string> prompts = {
      "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little girl",
      "Tom had a red ball. Tom liked the red ball. Tom had a",
      "The cat sat on the mat. The dog sat on the mat. The cat sat on the",
      "One day, a little bird"};
  std::vector<std::string> want;
  for (const auto& p : prompts) {
    // As the server sends it: JSON with invalid UTF-8 (a random model's stray bytes) replaced.
    const std::string text = reference_text(model, p, 60, true);
    want.push_back(json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>());
  }
  std::vector<std::string> got(8);
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; i++)
    clients.emplace_back([&, i] {
      auto cl = s.client();
      const json body = {{"prompt", prompts[i % 4]}, {"max_tokens", 60}, {"temperature", 0}, {"ignore_eos", true}};
      got[i] = i % 2 ? stream_text(cl, "/v1/completions", body)
                     : post(cl, "/v1/completions", body)["choices"][0]["text"].get<std::string>();
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 8; i++) EXPECT_EQ(got[i], want[i % 4]) << spec_args[1] << ", client " << i;
  auto c = s.client();
  const auto m = c.Get("/metrics");
  EXPECT_TRUE(m);
  if (!m) return 0;
  const auto metrics = test::parse_prometheus(m->body);
  const double drafted = metrics.get("kestrel_spec_drafted_tokens_total"),
               accepted = metrics.get("kestrel_spec_accepted_tokens_total");
  EXPECT_GE(drafted, 0);
  EXPECT_GE(accepted, 0);
  if (drafted < 0 || accepted < 0) return 0;
  EXPECT_GT(drafted, 0) << spec_args[1];
  EXPECT_LE(accepted, drafted) << spec_args[1];
  return accepted;
}

TEST(Server, SpeculativeDecodingKeepsGreedyTextAndCountsDrafts) {
  EXPECT_GT(check_speculative_server(kStories, {"--spec", "ngram"}), 0);
  // The model as its own draft: batched drafting for all requests, almost all accepted.
  EXPECT_GT(check_speculative_server(kStories, {"--spec", "draft", "--draft-model", kStories}), 200);
  // A random MTP block drafts poorly, but every step drafts, verifies and rolls back.
  test::TempDir dir;
  check_speculative_server(test::write_synth_mtp_model(dir.file("mtp.gguf")), {"--spec", "mtp"});
  // DeepSeek-V4's MTP block reads and hands on 4 residual streams per row.
  check_speculative_server(test::write_synth_v4_model(dir.file("v4.gguf")), {"--spec", "mtp"});
}

TEST(Server, StreamingChatAndCompletionFormats) {
  test::ServerProcess s({"-m", kStories, "-c", "256"});
  auto c = s.client();
  const json chat = {
      {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}}},
      {"max_tokens", 12},
      {"temperature", 0}};
  int status = 0;
  const json full = post(c, "/v1/chat/completions", chat, &status);
  ASSERT_EQ(status, 200) << full.dump();
  EXPECT_EQ(full["object"], "chat.completion");
  EXPECT_EQ(full["choices"][0]["message"]["role"], "assistant");
  json last;
  bool done = false;
  EXPECT_EQ(stream_text(c, "/v1/chat/completions", chat, &last, &done), full["choices"][0]["message"]["content"]);
  EXPECT_TRUE(done);
  EXPECT_EQ(last["object"], "chat.completion.chunk");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(last.contains("usage")) << "usage is sent only when stream_options.include_usage asks for it";

  // stream_options.include_usage: usage exactly once, in a last chunk of its own with no choices.
  json with_usage = chat;
  with_usage["stream_options"] = {{"include_usage", true}};
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    json body = with_usage;
    if (std::string(path) == "/v1/completions") {
      body.erase("messages");
      body["prompt"] = "Once upon a time";
    }
    const auto chunks = sse_chunks(c, path, body);
    ASSERT_GE(chunks.size(), 2u) << path;
    int with_usage_field = 0;
    for (const auto& ch : chunks) with_usage_field += ch.contains("usage");
    EXPECT_EQ(with_usage_field, 1) << path;
    EXPECT_TRUE(chunks.back()["choices"].empty()) << path;
    EXPECT_EQ(chunks.back()["usage"]["completion_tokens"], 12) << path;
    EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "length") << path;
  }

  // Streamed completion logprobs: each token's text_offset counts the characters streamed before it.
  const auto lp_chunks = sse_chunks(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 10},
                                                           {"temperature", 0}, {"logprobs", 1}});
  size_t chars = 0, tokens = 0;
  for (const auto& ch : lp_chunks) {
    if (ch["choices"].empty() || ch["choices"][0]["logprobs"].is_null()) continue;
    const json& l = ch["choices"][0]["logprobs"];
    for (size_t k = 0; k < l["tokens"].size(); k++) {
      EXPECT_EQ(l["text_offset"][k].get<size_t>(), chars) << "token " << tokens;
      chars += l["tokens"][k].get<std::string>().size();  // ASCII stories: bytes = characters
      tokens++;
    }
  }
  EXPECT_EQ(tokens, 10u);

  // Logprobs: the chosen token's and the top 3, from a proper distribution.
  const json lp =
      post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}, {"temperature", 0}, {"logprobs", 3}});
  const json& l = lp["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 3u);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_LE(l["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(l["top_logprobs"][i].size(), 3u);
    // Greedy: the chosen token is the most likely one.
    double best = -1e9;
    for (const auto& [tok, v] : l["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(l["token_logprobs"][i].get<double>(), best, 1e-5);
  }
  // Stop strings end the text before them.
  const json st = post(c, "/v1/completions",
                       {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", "Lily"}});
  EXPECT_EQ(st["choices"][0]["finish_reason"], "stop");
  EXPECT_THAT(st["choices"][0]["text"].get<std::string>(), ::testing::Not(HasSubstr("Lily")));
  // /v1/models and /health.
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["data"][0]["id"], "stories260K.gguf");
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(Server, BadRequestsGetErrorsNamingTheFieldAndTheServerKeepsServing) {
  test::ServerProcess s({"-m", kStories, "-c", "128"});
  auto c = s.client();
  struct Bad {
    std::string path, body;
    int status;
    std::string param;
  };
  const std::string long_prompt(2000, 'a');
  const std::vector<Bad> table = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "[1, 2]", 400, ""},
      {"/v1/completions", R"({"max_tokens": 5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": ""})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 42})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, 99999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": -1})", 400, "max_tokens"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 500})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": 3})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "hi", "top_p": 1.5})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "hi", "n": 0})", 400, "n"},
      {"/v1/completions", R"({"prompt": "hi", "n": 2, "best_of": 3})", 400, "best_of"},
      {"/v1/completions", R"({"prompt": "hi", "stop": [1]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "hi", "presence_penalty": 9})", 400, "presence_penalty"},
      {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt": "hi", "priority": 1.5})", 400, "priority"},
      {"/v1/completions", R"({"prompt": "hi", "logprobs": 50})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt": "hi", "model": "gpt-9"})", 404, "model"},
      {"/v1/completions", R"({"prompt": ")" + long_prompt + R"("})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"x1": -100}})", 400, "logit_bias.x1"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"99999": -100}})", 400, "logit_bias.99999"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": {"5": 101}})", 400, "logit_bias.5"},
      {"/v1/completions", R"({"prompt": "hi", "logit_bias": [5]})", 400, "logit_bias"},
      {"/v1/completions", R"({"prompt": "hi", "suffix": "x"})", 400, "suffix"},
      {"/v1/completions", R"({"prompt": "hi", "best_of": 3})", 400, "best_of"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "best_of": 1})", 400, "best_of"},
      {"/v1/completions", R"({"prompt": "hi", "frobnicate": 1})", 400, "frobnicate"},
      {"/v1/completions", R"({"prompt": "hi", "stream": true, "stream_options": {"continuous_usage_stats": true}})",
       400, "stream_options.continuous_usage_stats"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}})",
       400, "response_format.type"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})",
       400, "response_format"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", 400,
       "tools[0]"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x", "audio": {"id": "a1"}}]})", 400,
       "messages[0].audio"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", 400,
       "messages[0].tool_calls"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}})",
       400, "chat_template_kwargs.messages"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", 400,
       "top_logprobs"},
  };
  for (const auto& b : table) {
    auto r = c.Post(b.path, b.body, "application/json");
    ASSERT_TRUE(r) << b.body;
    EXPECT_EQ(r->status, b.status) << b.body << " -> " << r->body;
    const json e = json::parse(r->body);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
    if (!b.param.empty()) {
      EXPECT_EQ(e["error"]["param"], b.param) << b.body;
    }
  }
  // What cannot change the output is accepted: the end user's id, explicit nulls.
  int ok_status = 0;
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}, {"user", "u-1"}, {"logit_bias", nullptr}}, &ok_status);
  EXPECT_EQ(ok_status, 200);
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}, {"best_of", 1}}, &ok_status);  // best_of = n
  EXPECT_EQ(ok_status, 200);
  // A million nested arrays (2 MB) is refused while it is read, not built.
  auto deep = c.Post("/v1/completions", "{\"prompt\": \"hi\", \"x\": " + std::string(1000000, '[') +
                                            std::string(1000000, ']') + "}", "application/json");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 400);
  EXPECT_NE(deep->body.find("deeper than 64 levels"), std::string::npos) << deep->body;
  auto nf = c.Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_TRUE(json::parse(nf->body).contains("error"));
  auto wrong_method = c.Get("/v1/completions");
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
  EXPECT_EQ(wrong_method->get_header_value("Allow"), "POST");
  EXPECT_TRUE(json::parse(wrong_method->body).contains("error"));
  auto head = c.Head("/health");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  auto big = c.Post("/v1/completions", std::string(5 << 20, 'x'), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  // Still serving.
  int status = 0;
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 5}}, &status);
  EXPECT_EQ(status, 200);
}

TEST(Server, RandomBodiesNeverCrashIt) {
  test::ServerProcess s({"-m", kStories, "-c", "128"});
  auto c = s.client();
  std::mt19937 rng(7);
  const std::vector<std::string> keys = {"prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "stop",
                                         "seed",   "stream",   "logprobs",   "priority",    "n",     "min_p", "model", "echo"};
  auto value = [&](int depth) -> json {
    switch (rng() % 8) {
      case 0:
        return static_cast<int64_t>(rng()) - (1ll << 31);
      case 1:
        return std::uniform_real_distribution<double>(-5, 5)(rng);
      case 2:
        return std::string(rng() % 20, static_cast<char>('a' + rng() % 26));
      case 3:
        return rng() % 2 == 0;
      case 4:
        return nullptr;
      case 5:
        return json::array({static_cast<int>(rng() % 600), "x"});
      case 6:
        return depth ? json::object() : json{{"role", "user"}, {"content", "hi"}};
      default:
        return static_cast<int>(rng() % 40);
    }
  };
  int ok = 0;
  for (int i = 0; i < 150; i++) {
    // A valid request with 0 to 3 fields replaced by random values.
    const bool chat = rng() % 2;
    json body = {{"max_tokens", 4}};
    if (chat)
      body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    else
      body["prompt"] = "Once";
    for (int k = static_cast<int>(rng() % 4); k > 0; k--) body[keys[rng() % keys.size()]] = value(0);
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    std::string raw = body.dump();
    if (rng() % 10 == 0) raw.resize(rng() % (raw.size() + 1));  // truncated JSON
    auto r = c.Post(path, raw, "application/json");
    ASSERT_TRUE(r) << "no response (crash?) for " << raw;
    EXPECT_TRUE(r->status == 200 || (r->status >= 400 && r->status < 500)) << r->status << " for " << raw;
    ok += r->status == 200;
  }
  EXPECT_GT(ok, 0);
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(Server, PrefixCacheHitsWithoutChangingResultsAndMetricsParse) {
  test::ServerProcess s({"-m", kStories, "-c", "256", "--kv-block-size", "8"});
  auto c = s.client();
  const std::string prefix = "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
  const json a = post(c, "/v1/completions", {{"prompt", prefix + "One day"}, {"max_tokens", 20}, {"temperature", 0}});
  const json b = post(c, "/v1/completions", {{"prompt", prefix + "One day"}, {"max_tokens", 20}, {"temperature", 0}});
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_GT(b["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 8);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);

  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_THAT(m->get_header_value("Content-Type"), HasSubstr("text/plain"));
  // Every line: a comment, or `name{labels} value` with a float value, the model's name on every
  // series (vLLM's model_name label); histograms cumulative.
  const auto parsed = test::parse_prometheus(m->body);
  EXPECT_EQ(parsed.bad_lines, 0) << m->body;
  EXPECT_EQ(parsed.without_model_name, 0) << m->body;
  EXPECT_EQ(parsed.model_name, "stories260K.gguf");
  const auto& values = parsed.values;
  for (const char* h : {"kestrel_time_to_first_token_seconds", "kestrel_e2e_request_latency_seconds"}) {
    double last_bucket = -1;
    int buckets = 0;
    std::vector<std::pair<double, double>> by_bound;  // map order is not bucket order: sorted by the bound
    for (const auto& [series, v] : values)
      if (series.rfind(std::string(h) + "_bucket{le=\"", 0) == 0) {
        const std::string le = series.substr(std::string(h).size() + 12, series.size() - std::string(h).size() - 14);
        by_bound.emplace_back(le == "+Inf" ? INFINITY : std::stod(le), v);
      }
    std::sort(by_bound.begin(), by_bound.end());
    for (const auto& [bound, v] : by_bound) {
      EXPECT_GE(v, last_bucket) << h << " le=" << bound;
      last_bucket = v;
      buckets++;
    }
    EXPECT_GT(buckets, 10) << h;
  }
  // The whole-request histogram reaches 10 minutes (a long answer on a CPU).
  EXPECT_EQ(values.count("kestrel_e2e_request_latency_seconds_bucket{le=\"600\"}"), 1u);
  EXPECT_GT(parsed.samples, 40);
  EXPECT_EQ(parsed.get("kestrel_requests_total{outcome=\"length\"}"), 2);
  EXPECT_EQ(parsed.get("kestrel_generation_tokens_total"), 40);
  // Prefix-cache counters count tokens: the hits are exactly the tokens the second request reused.
  EXPECT_EQ(parsed.get("kestrel_prefix_cache_hits_total"), b["usage"]["prompt_tokens_details"]["cached_tokens"].get<double>());
  EXPECT_EQ(std::fmod(parsed.get("kestrel_prefix_cache_queries_total"), 8.0), 0.0);  // whole blocks of 8 tokens
  EXPECT_GE(parsed.get("kestrel_prefix_cache_queries_total"), parsed.get("kestrel_prefix_cache_hits_total") * 2);
  EXPECT_EQ(parsed.get("kestrel_time_to_first_token_seconds_count"), 2);
  EXPECT_EQ(parsed.get("kestrel_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 2);
  EXPECT_GT(parsed.get("kestrel_kv_blocks"), 0);
}

TEST(Server, ADisconnectedStreamIsCancelledAndSigtermDrains) {
  test::ServerProcess s({"-m", kStories, "-c", "1024", "--shutdown-timeout", "5"});
  {
    // Start a long stream over a raw socket, read its first bytes, then drop the connection.
    const int fd = test::connect_local(s.port());
    ASSERT_GE(fd, 0);
    const std::string body =
        json{{"prompt", "Once"}, {"max_tokens", 1000}, {"temperature", 0.8}, {"stream", true}, {"ignore_eos", true}}
            .dump();
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_TRUE(test::send_all(fd, req));
    char buf[256];
    ASSERT_GT(read(fd, buf, sizeof buf), 0);
    close(fd);
  }
  auto c = s.client();
  bool cancelled = false;
  for (int i = 0; i < 50 && !cancelled; i++) {
    cancelled = test::parse_prometheus(c.Get("/metrics")->body).get("kestrel_requests_total{outcome=\"cancelled\"}") == 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(cancelled) << c.Get("/metrics")->body;
  EXPECT_EQ(s.terminate(10000), 0) << s.log();
  EXPECT_THAT(s.log(), HasSubstr("draining"));
}

TEST(Server, PreemptedRequestsRecomputeToTheSameText) {
  // A pool of 12 blocks of 16 tokens for 6 concurrent 60-token generations:
  // requests are preempted and recomputed, and still produce exactly the
  // single-client text. Profiled, with JSON request logs.
  test::TempDir dir;
  const std::string trace = dir.file("serve.json");
  const KvLayout l{5, 32, 32};  // stories260K: 5 layers, 4 KV heads of 8: 32-float K and V rows
  const double block_mib = 16.0 * l.n_layer * (l.k_width + l.v_width) * 4 / (1 << 20);
  test::ServerProcess s({"-m", kStories, "-c", "256", "--kv-cache-mem", std::to_string(12 * block_mib), "--log-format",
                         "json", "--profile", trace, "--max-queue", "64"});
  auto c = s.client();
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 60}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string single = post(c, "/v1/completions", body)["choices"][0]["text"];
  std::vector<std::string> got(6);
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; i++)
    ts.emplace_back([&, i] {
      auto cl = s.client();
      got[i] = post(cl, "/v1/completions", body)["choices"][0]["text"];
    });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 6; i++) EXPECT_EQ(got[i], single) << i;
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_GT(test::parse_prometheus(metrics).get("kestrel_preemptions_total"), 0);
  // A request that can never fit in the pool is refused up front, naming the field.
  int status = 0;
  const json never = post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 250}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(never["error"]["param"], "max_tokens");
  EXPECT_EQ(s.terminate(10000), 0);
  // One JSON line per request, and the operator trace.
  int json_lines = 0, rejected_lines = 0;
  std::istringstream log(s.log());
  for (std::string line; std::getline(log, line);)
    if (!line.empty() && line[0] == '{') {
      const json j = json::parse(line);
      if (j.contains("rejected")) {  // the refusal, logged with what the client was told
        EXPECT_EQ(j["param"], "max_tokens") << line;
        EXPECT_EQ(j["status"], 400) << line;
        rejected_lines++;
        continue;
      }
      EXPECT_TRUE(j.contains("ttft_ms") && j.contains("completion_tokens") && j.contains("priority"));
      // LoadedModel-side times: the first token came after arrival and no later than the end.
      EXPECT_GT(j["ttft_ms"].get<double>(), 0.0) << line;
      EXPECT_LE(j["ttft_ms"].get<double>(), j["e2e_ms"].get<double>()) << line;
      json_lines++;
    }
  EXPECT_EQ(json_lines, 7);
  EXPECT_EQ(rejected_lines, 1);
  EXPECT_THAT(test::read_text(trace), HasSubstr("traceEvents"));
}

TEST(Server, AFullQueueGets503WithRetryAfter) {
  test::ServerProcess s({"-m", kStories, "-c", "1024", "--max-queue", "1", "--max-batch-size", "1"});
  std::atomic<int> ok{0}, busy{0};
  std::atomic<bool> retry_after{true};
  std::vector<std::thread> ts;
  for (int i = 0; i < 12; i++)
    ts.emplace_back([&] {
      auto cl = s.client();
      // Long enough (~0.3 s each, one at a time) that the others arrive while the queue is full.
      auto r = cl.Post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 1000}, {"ignore_eos", true}}.dump(),
                       "application/json");
      if (!r) return;
      if (r->status == 200) ok++;
      if (r->status == 503) {
        busy++;
        retry_after = retry_after && r->has_header("Retry-After");
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(busy.load(), 1);
  EXPECT_TRUE(retry_after.load());
}

TEST(Server, ServesDeepseekModels) {
  const std::string model = test::shared("reference/llama.cpp/deepseek3-tiny.f32.gguf");
  test::ServerProcess s({"-m", model, "-c", "256"});
  auto c = s.client();
  const auto ref = test::read_json(test::shared("reference/llama.cpp/deepseek3-tiny.f32.json"));
  const json body = {
      {"prompt", ref["prompt_ids"]}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 0}, {"ignore_eos", true}};
  int status = 0;
  const json r = post(c, "/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  // The first tokens llama.cpp chose greedily for this prompt.
  LoadOptions o;
  o.model_path = model;
  o.n_threads = 1;
  LoadedModel e = LoadedModel::load(o);
  std::string want;
  for (int i = 0; i < 8; i++) want += e.tokenizer->token_to_piece(ref["greedy_ids"][i].get<int32_t>());
  std::string got;
  for (const auto& t : r["choices"][0]["logprobs"]["tokens"]) got += t.get<std::string>();
  EXPECT_EQ(got, want);
}

// The families of the compat set through the server: concurrent requests
// batched together (and, after the first, sharing the prompt's cached blocks,
// Gemma's sliding-window layers included) give the tokens `run` gives, which
// are llama.cpp's (tests/compat). Their text is compared: the logprobs'
// token strings hold back incomplete UTF-8 pieces of these random models.
TEST(Server, ServesEveryDecoderFamilyAsRunDoes) {
  const auto cells = test::read_json(test::shared("reference/compat/expected.json"))["cells"];
  // (cell, prompt) pairs whose first 12 steps have top-2 gaps of 0.03 or more.
  for (const auto& [cell, run] : std::vector<std::pair<std::string, int>>{
           {"gemma2.F16", 0}, {"gemma3.F16", 1}, {"qwen3moe.F16", 1}, {"phi3.F16", 0}, {"llama32.F16", 1}}) {
    SCOPED_TRACE(cell);
    const auto ref = cells[cell]["runs"][run];
    LoadOptions o = test::shared_engine("reference/compat/models/" + cell + ".gguf", 256);
    LoadedModel e = LoadedModel::load(o);
    GenerationParams p;
    p.max_tokens = 12;
    p.sampling.temperature = 0.0f;
    p.ignore_eos = true;
    const GenerationResult want = generate(e, ref["prompt"].get<std::vector<int32_t>>(), p);
    std::vector<int32_t> ids = ref["ids"].get<std::vector<int32_t>>();
    ids.resize(12);
    ASSERT_EQ(want.tokens, ids) << "run no longer gives llama.cpp's ids";

    test::ServerProcess s({"-m", test::compat_model(cell), "-c", "256", "--kv-block-size", "4"});
    const json body = {{"prompt", ref["prompt"]}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}};
    std::vector<std::thread> ts;
    std::vector<std::string> got(4);
    for (int i = 0; i < 4; i++)
      ts.emplace_back([&, i] {
        auto c = s.client();
        int status = 0;
        const json r = post(c, "/v1/completions", body, &status);
        ASSERT_EQ(status, 200) << r.dump();
        got[i] = r["choices"][0]["text"].get<std::string>();
      });
    for (auto& t : ts) t.join();
    // JSON carries invalid UTF-8 (bytes of these random models' pieces) as U+FFFD, as the server writes it.
    const std::string want_json = json(want.text).dump(-1, ' ', false, json::error_handler_t::replace);
    for (int i = 0; i < 4; i++) EXPECT_EQ(json(got[i]).dump(), want_json) << "client " << i;
  }
}

// A user's "</s>" is text by default (several tokens), the control token
// only with --allow-special-in-content (one token): usage counts them.
TEST(Server, ControlTokensInChatContentAreTextUnlessAllowed) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Once</s>"}}}}, {"max_tokens", 1}};
  auto prompt_tokens = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"-m", kStories, "-c", "128"};
    args.insert(args.end(), extra.begin(), extra.end());
    test::ServerProcess s(args);
    auto c = s.client();
    int status = 0;
    const json r = post(c, "/v1/chat/completions", body, &status);
    EXPECT_EQ(status, 200) << r.dump();
    return r["usage"]["prompt_tokens"].get<int64_t>();
  };
  const int64_t as_text = prompt_tokens({}), as_control = prompt_tokens({"--allow-special-in-content"});
  EXPECT_GE(as_text, as_control + 2) << "'</s>' should take several tokens as text, one as the control token";
}

}  // namespace
}  // namespace kestrel
