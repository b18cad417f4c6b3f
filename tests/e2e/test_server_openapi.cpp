// GET /openapi.json held to the routing table: every route the server answers is described and every described
// operation is served (an in-process server, its table read directly, so no route can hide); the document is
// OpenAPI 3.1 with every $ref resolving. Then the tokenizer endpoints in llama-server's and vLLM's shapes, which
// lm-eval-harness's remote tokenizer and loadtest read. (schemathesis fuzzes the document against a running
// server in tests/clients/openapi_test.py.)
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "chat/chat_template.h"
#include "http_json.h"
#include "runtime/loaded_model.h"
#include "serve_process.h"
#include "serving/api/api_routes.h"
#include "serving/api/openapi_document.h"
#include "serving/engine/metrics.h"
#include "serving/engine/serving_engine.h"
#include "serving/http/http_server.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

void collect_refs(const json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if (k == "$ref" && v.is_string()) out.push_back(v.get<std::string>());
      collect_refs(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_refs(v, out);
  }
}

TEST(OpenApi, TheDocumentDescribesEveryRouteAndNothingElse) {
  LoadedModel model = LoadedModel::load(test::shared_engine("models/stories260K.gguf", 256));
  ServerMetrics metrics("stories");
  ServingEngine engine(model, ServingConfig{}, metrics);
  HttpServerConfig hc;
  hc.port = 0;
  HttpServer server(metrics, hc);
  ApiConfig api;
  api.model_names = {"stories"};
  api.chat_template = std::make_shared<ChatTemplate>(ChatTemplate::from_model(*model.file, ""));
  server.serve(engine, std::move(api));

  const json doc = json::parse(openapi_json());
  EXPECT_EQ(doc["openapi"], "3.1.0");
  std::set<std::pair<std::string, std::string>> described, served;
  std::set<std::string> operation_ids;
  static const std::regex parameter(R"(\{[^}/]+\})");
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [method, op] : item.items()) {
      if (method == "parameters") continue;
      std::string upper = method;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      // A path parameter is the router's trailing "/*".
      described.emplace(upper, std::regex_replace(path, parameter, "*"));
      ASSERT_TRUE(op.contains("operationId")) << method << " " << path;
      EXPECT_TRUE(operation_ids.insert(op["operationId"].get<std::string>()).second) << op["operationId"];
      ASSERT_TRUE(op.contains("responses")) << method << " " << path;
      EXPECT_TRUE(op["responses"].contains("200")) << method << " " << path;
    }
  }
  for (const auto& r : server.routes()->routes()) served.emplace(r.method, r.path);
  for (const auto& route : served)
    EXPECT_TRUE(described.count(route)) << route.first << " " << route.second << " is served but not described";
  for (const auto& route : described)
    EXPECT_TRUE(served.count(route)) << route.first << " " << route.second << " is described but not served";
  EXPECT_GE(served.size(), 25u);

  std::vector<std::string> refs;
  collect_refs(doc, refs);
  EXPECT_FALSE(refs.empty());
  for (const auto& ref : refs) {
    ASSERT_EQ(ref.rfind("#/", 0), 0u) << ref;
    EXPECT_NO_THROW((void)doc.at(json::json_pointer(ref.substr(1)))) << ref << " does not resolve";
  }
}

TEST(OpenApi, ServedAtItsPathWithTheTokenizerEndpointsOfLlamaServerAndVllm) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();
  auto doc = c.Get("/openapi.json");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->status, 200);
  // The built-in document, with the served names as the values a model field may take.
  json served = json::parse(doc->body);
  EXPECT_EQ(served["components"]["schemas"]["ModelName"]["enum"],
            json::array({"stories260K.gguf", "stories260K.gguf:latest"}));
  served["components"]["schemas"]["ModelName"].erase("enum");
  EXPECT_EQ(served["components"]["schemas"]["TokenId"]["maximum"], 511);
  served["components"]["schemas"]["TokenId"].erase("maximum");
  EXPECT_EQ(served, json::parse(openapi_json()));

  const std::string text = "Once upon a time";
  // llama-server's shape: no BOS unless asked; vLLM's: BOS unless asked not to. The same ids otherwise.
  const auto plain = test::post_ok(c, "/tokenize", {{"content", text}})["tokens"].get<std::vector<int>>();
  const auto with_bos = test::post_ok(c, "/tokenize", {{"content", text}, {"add_special", true}});
  const auto vllm = test::post_ok(c, "/tokenize", {{"prompt", text}});
  const auto vllm_plain = test::post_ok(c, "/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  ASSERT_FALSE(plain.empty());
  EXPECT_NE(plain[0], 1);
  std::vector<int> bos_then = {1};
  bos_then.insert(bos_then.end(), plain.begin(), plain.end());
  EXPECT_EQ(with_bos["tokens"].get<std::vector<int>>(), bos_then);
  EXPECT_EQ(vllm["tokens"].get<std::vector<int>>(), bos_then);
  EXPECT_EQ(vllm["count"], bos_then.size());
  EXPECT_EQ(vllm["max_model_len"], 256);
  EXPECT_EQ(vllm_plain["tokens"].get<std::vector<int>>(), plain);
  // Special-token text is the token unless parse_special is false (llama-server's default: parsed).
  EXPECT_EQ(test::post_ok(c, "/tokenize", {{"content", "</s>"}})["tokens"], json::array({2}));
  EXPECT_GT(test::post_ok(c, "/tokenize", {{"content", "</s>"}, {"parse_special", false}})["tokens"].size(), 1u);
  const json pieces = test::post_ok(c, "/tokenize", {{"content", text}, {"with_pieces", true}})["tokens"];
  ASSERT_EQ(pieces.size(), plain.size());
  std::string joined;
  for (size_t i = 0; i < pieces.size(); i++) {
    EXPECT_EQ(pieces[i]["id"], plain[i]);
    joined += pieces[i]["piece"].get<std::string>();
  }
  EXPECT_NE(joined.find("time"), std::string::npos) << joined;
  // The text back under both names.
  const json back = test::post_ok(c, "/detokenize", {{"tokens", plain}});
  EXPECT_EQ(back["content"], back["prompt"]);
  EXPECT_NE(back["content"].get<std::string>().find(text), std::string::npos);
  // vLLM's /tokenizer_info: the special tokens' text (encoding eos_token gives the EOS id), the template, the context.
  auto info_r = c.Get("/tokenizer_info");
  ASSERT_TRUE(info_r);
  const json info = json::parse(info_r->body);
  EXPECT_EQ(info["bos_token"], "<s>");
  EXPECT_EQ(info["eos_token"], "</s>");
  EXPECT_EQ(info["model_max_length"], 256);
  EXPECT_TRUE(info["chat_template"].is_string());
  EXPECT_EQ(test::post_ok(c, "/tokenize", {{"prompt", info["eos_token"]}, {"add_special_tokens", false}})["tokens"],
            json::array({2}));
  // What is not understood is named.
  for (const json& bad : {json{{"content", text}, {"add_bos", true}}, json{{"content", 3}},
                          json{{"content", text}, {"add_special", "yes"}},
                          json{{"content", text}, {"add_special", true}, {"add_special_tokens", true}},
                          json{{"content", text}, {"model", "another-model"}}}) {
    auto r = c.Post("/tokenize", bad.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->status == 400 || r->status == 404) << bad << " -> " << r->status << " " << r->body;
    EXPECT_TRUE(json::parse(r->body)["error"].contains("message")) << r->body;
  }
  auto r = c.Post("/detokenize", json{{"tokens", {1, 2}}, {"skip", true}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "skip");
}


// What schemathesis found (tests/clients/openapi_test.py), each now answered as it should be.
TEST(OpenApi, WhatTheFuzzerFoundIsAnsweredAsItShouldBe) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  auto c = s.client();
  // A tool whose "type" is an object: was a 500 ("type must be string, but is object") on /apply-template and
  // /v1/chat/completions/input_tokens, a 400 with the library's words on /v1/chat/completions.
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"tools", {{{"type", json::object()}, {"function", {{"name", "f"}}}}}}};
  for (const char* path : {"/apply-template", "/v1/chat/completions/input_tokens", "/v1/chat/completions"}) {
    auto r = c.Post(path, body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path << " " << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["param"], "tools[0]") << path << " " << r->body;
  }
  // A top_p above 0 but below a float's smallest (5e-324) keeps the most likely token instead of being
  // refused as 0; 0 itself is still refused.
  const json tiny = test::post_ok(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"top_p", 5e-324}});
  const json greedy = test::post_ok(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(tiny["choices"][0]["text"], greedy["choices"][0]["text"]);
  auto zero = c.Post("/v1/completions", json{{"prompt", "x"}, {"top_p", 0}}.dump(), "application/json");
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->status, 400);
}

}  // namespace
}  // namespace kestrel
