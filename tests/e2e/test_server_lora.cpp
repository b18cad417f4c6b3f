// LoRA adapters in the server through the stock clients (tests/e2e/openai_client/lora.mjs): a synth Llama with a
// global adapter (--lora) and four served as models (--lora-modules a|b|c|d=FILE). 16 concurrent requests over the
// five names answer as they do one at a time (requests with different adapters share steps); each adapter gives
// its own reply; an adapter's model name works from the OpenAI, Anthropic and Ollama clients; a request's `lora`
// field equals the adapter's model name; POST /lora-adapters turns the global adapter off; bad ids and lists are
// 400s naming the field. The arithmetic itself is checked against llama.cpp by tests/reference/test_lora_cells.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli_process.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

const std::string kClients = std::string(KESTREL_SOURCE_DIR) + "/tests/e2e/openai_client";

TEST(ServerLora, AdaptersAsModelsAndPerRequestThroughTheStockClients) {
  test::TempDir dir;
  const std::string model = dir.file("llama.gguf");
  std::vector<std::string> files;
  for (int i = 0; i < 5; i++) {
    files.push_back(dir.file("lora" + std::to_string(i) + ".gguf"));
    const auto r = test::run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "--seed", "2",
                                      "-o", model, "--lora", files.back(), "--lora-seed", std::to_string(11 + i),
                                      "--lora-rank", i % 2 ? "8" : "4", "--lora-alpha", i % 2 ? "16" : "0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  test::ServerProcess s({"-m", model, "-c", "2048", "--served-model-name", "tiny", "--lora", files[0],
                         "--lora-modules", "a=" + files[1], "--lora-modules", "b=" + files[2], "--lora-modules",
                         "c=" + files[3], "--lora-modules", "d=" + files[4], "--max-batch-size", "16"});
  int st = 0;
  const std::string out = test::shell(
      "cd " + kClients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) + " node lora.mjs", &st);
  ASSERT_EQ(st, 0) << out << s.log();
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));

  EXPECT_EQ(seen["models"], json({"tiny", "a", "b", "c", "d"}));
  ASSERT_EQ(seen["together"].size(), 16u);
  EXPECT_EQ(seen["together"], seen["alone"]) << "requests with different adapters in one batch";
  // Each adapter its own reply.
  std::set<std::string> replies;
  for (const auto& [m, text] : seen["per_model"].items()) replies.insert(text.get<std::string>());
  EXPECT_EQ(replies.size(), 5u) << seen["per_model"];
  // One adapter, three clients.
  EXPECT_EQ(seen["chat_anthropic"], seen["chat_openai"]);
  EXPECT_EQ(seen["raw_ollama"], seen["per_model"]["b"]);
  // The `lora` field: adapter a by id is model a, on /v1/completions and /completion; [] is no adapter.
  EXPECT_EQ(seen["field_a"], seen["per_model"]["a"]);
  EXPECT_EQ(seen["completion_a"], seen["per_model"]["a"]);
  EXPECT_NE(seen["field_none"], seen["per_model"]["tiny"]) << "the global adapter changed nothing";
  // The list: the global adapter at 1, the modules at 0 with their names; POST turns the global one off.
  ASSERT_EQ(seen["adapters"].size(), 5u);
  EXPECT_EQ(seen["adapters"][0]["scale"], 1.0);
  EXPECT_EQ(seen["adapters"][0]["path"], files[0]);
  EXPECT_EQ(seen["adapters"][2]["name"], "b");
  EXPECT_EQ(seen["adapters"][2]["scale"], 0.0);
  EXPECT_EQ(seen["post"]["status"], 200);
  EXPECT_EQ(seen["post"]["body"]["success"], true);
  EXPECT_EQ(seen["adapters_after"][0]["scale"], 0.0);
  EXPECT_EQ(seen["after_post"], seen["field_none"]);
  // Refusals name the field.
  EXPECT_EQ(seen["bad_id"]["status"], 400);
  EXPECT_NE(seen["bad_id"]["message"].get<std::string>().find("no adapter 99"), std::string::npos) << seen["bad_id"];
  EXPECT_EQ(seen["bad_field"]["status"], 400);
  EXPECT_EQ(seen["bad_field"]["body"]["error"]["param"], "lora[0].scale") << seen["bad_field"];
  EXPECT_EQ(seen["bad_post"]["status"], 400);
  EXPECT_EQ(seen["bad_post"]["body"]["error"]["param"], "body") << seen["bad_post"];
  // Per-adapter metrics: adapter b ran the 3 concurrent-batch requests of its name twice (6), its per-model story,
  // two chats and the raw generate: 10; each request's seconds counted.
  const std::string metrics = seen["metrics"];
  const auto value = [&](const std::string& series, const std::string& adapter) {
    const std::regex re(series + "\\{[^}]*adapter=\"" + adapter + "\"[^}]*\\} ([0-9.e+]+)");
    std::smatch m;
    return std::regex_search(metrics, m, re) ? std::stod(m[1]) : -1.0;
  };
  EXPECT_EQ(value("kestrel_lora_requests_total", "b"), 10.0) << metrics;
  EXPECT_GT(value("kestrel_lora_request_seconds_total", "b"), 0.0);
  const double tokens = value("kestrel_lora_generation_tokens_total", "b");
  EXPECT_GT(tokens, 0.0);
  EXPECT_LE(tokens, 10 * 8.0);  // (at most 8 each; a reply may end at an end token)
}

// Adapter flags that cannot work are start-up errors naming them.
TEST(ServerLora, BadAdapterFlagsAreStartupErrors) {
  test::TempDir dir;
  const std::string model = dir.file("llama.gguf"), other = dir.file("qwen3.gguf");
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "-o", model}).exit_code, 0);
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "qwen3", "--preset", "tiny", "--type", "f32", "-o", other, "--lora",
                               dir.file("q.lora")})
                .exit_code,
            0);
  const auto wrong = test::run_kestrel({"serve", "-m", model, "--lora", dir.file("q.lora"), "--port", "0"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("is for architecture 'qwen3', the model is 'llama'"), std::string::npos) << wrong.err;
  const auto bad_module = test::run_kestrel({"serve", "-m", model, "--lora-modules", "nofile", "--port", "0"});
  EXPECT_NE(bad_module.exit_code, 0);
  EXPECT_NE(bad_module.err.find("--lora-modules 'nofile': expected NAME=FILE"), std::string::npos) << bad_module.err;
  const auto bad_scale = test::run_kestrel({"run", "-m", model, "--lora-scaled", dir.file("q.lora") + ":x", "-p", "a"});
  EXPECT_NE(bad_scale.exit_code, 0);
  EXPECT_NE(bad_scale.err.find("is not a number"), std::string::npos) << bad_scale.err;
}

}  // namespace
}  // namespace kestrel
