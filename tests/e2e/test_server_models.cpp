// Several models behind one server (serve --models-dir / --models-preset: serving/models/model_manager.h), through
// the stock clients (tests/e2e/openai_client/models.mjs): three synth models of three families and a corrupt file
// in a folder, --models-max 2, one model pinned by a preset. Each reply equals the same request to a server of that
// model alone; a load evicts the least recently used idle unpinned model; a pinned one and one with a request in
// flight are never evicted; the corrupt file fails only its own requests; Ollama's keep_alive 0 unloads the model
// and the server's resident memory drops; the metrics carry each model's series and pass promtool. Then
// --no-models-autoload, POST /models/load and /models/unload, idle unloads and keep_alive, a preset's aliases and
// adapters, the web page's model picker, and the start-up errors of presets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <map>
#include <set>
#include <thread>

#include "cli_process.h"
#include "http_json.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

const std::string kManagerClients = std::string(KESTREL_SOURCE_DIR) + "/tests/e2e/openai_client";

// Three tiny models of different families in dir/models (a llama of 64 MB, whose unload shows in the resident
// memory; b qwen3; c gemma3), a cut copy of a, and an adapter for a (dir/sql.gguf, outside the folder).
std::string make_manager_models(test::TempDir& dir) {
  const std::string models = dir.file("models");
  std::filesystem::create_directories(models);
  const std::vector<std::pair<std::string, std::string>> m = {{"a", "llama"}, {"b", "qwen3"}, {"c", "gemma3"}};
  for (size_t i = 0; i < m.size(); i++) {
    std::vector<std::string> args = {"synth", "--arch", m[i].second, "--preset", "tiny", "--type", "f32", "--seed",
                                     std::to_string(i + 1), "-o", models + "/" + m[i].first + ".gguf"};
    if (i == 0) args.insert(args.end(), {"--dim", "1024", "--layers", "4", "--lora", dir.file("sql.gguf")});
    const auto r = test::run_kestrel(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string whole = test::read_text(models + "/a.gguf");
  test::write_bytes(models + "/broken.gguf", whole.substr(0, whole.size() / 2));
  return models;
}

std::vector<json> reply_alone(const std::string& model, const std::vector<std::string>& prompts) {
  test::ServerProcess s({"-m", model, "-c", "4096", "--max-batch-size", "2"});
  auto c = s.client();
  std::vector<json> out;
  for (const auto& p : prompts) {
    const json r = test::post_ok(c, "/v1/completions",
                                 {{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 3}});
    const json& l = r["choices"][0]["logprobs"];
    out.push_back({{"tokens", l["tokens"]}, {"token_logprobs", l["token_logprobs"]}, {"top_logprobs", l["top_logprobs"]}});
  }
  return out;
}

TEST(ModelManager, SwitchEvictPinKeepAliveAndACorruptFileThroughTheStockClients) {
  test::TempDir dir;
  const std::string models = make_manager_models(dir);
  test::write_bytes(dir.file("preset.ini"), "version = 1\n[c]\npin = true\n");
  test::ServerProcess s({"--models-dir", models, "--models-preset", dir.file("preset.ini"), "--models-max", "2", "-c",
                         "4096", "--max-batch-size", "2"});
  int st = 0;
  const std::string out = test::shell("cd " + kManagerClients + " && KESTREL_URL=http://127.0.0.1:" +
                                          std::to_string(s.port()) + " KESTREL_PID=" + std::to_string(s.pid()) +
                                          " node models.mjs",
                                      &st);
  ASSERT_EQ(st, 0) << out << s.log();
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));

  EXPECT_EQ(seen["listed"], json({{"a", "unloaded"}, {"b", "unloaded"}, {"broken", "unloaded"}, {"c", "unloaded"}}));
  // c (pinned) and a; b evicts a although c was used less recently; a evicts b.
  EXPECT_EQ(seen["after_ca"]["a"], "loaded");
  EXPECT_EQ(seen["after_ca"]["c"], "loaded");
  EXPECT_EQ(seen["after_b"], json({{"a", "unloaded"}, {"b", "loaded"}, {"broken", "unloaded"}, {"c", "loaded"}}));
  EXPECT_EQ(seen["after_a"], json({{"a", "loaded"}, {"b", "unloaded"}, {"broken", "unloaded"}, {"c", "loaded"}}));
  // Every reply, models switched per request, equals that model's own server's.
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog"};
  std::map<std::string, std::vector<json>> own;
  for (const std::string m : {"a", "b", "c"}) own[m] = reply_alone(models + "/" + m + ".gguf", prompts);
  ASSERT_EQ(seen["replies"].size(), 10u);
  for (size_t i = 0; i < seen["replies"].size(); i++) {
    const std::string m = seen["replies"][i][0];
    EXPECT_EQ(seen["replies"][i][1], own[m][i < 4 ? 0 : 1]) << "reply " << i << " of model " << m;
  }
  std::set<std::string> distinct;
  for (const auto& [m, r] : own) distinct.insert(r[0].dump());
  EXPECT_EQ(distinct.size(), 3u) << "three models, three replies (their alternatives' logprobs at least)";
  // A model with a stream in flight is not evicted: the load that needs its room is refused, naming it.
  EXPECT_EQ(seen["busy"]["status"], 503) << seen["busy"];
  const std::string busy = seen["busy"]["message"];
  EXPECT_NE(busy.find("busy: b; pinned: c"), std::string::npos) << busy;
  EXPECT_EQ(seen["during_stream"]["b"], "loaded");
  EXPECT_EQ(seen["after_stream"]["a"], "loaded") << "b idle again, a loads in its room";
  EXPECT_EQ(seen["after_stream"]["b"], "unloaded");
  // The corrupt file: a 500 naming the file and the fault, again on the next request; a goes on.
  EXPECT_EQ(seen["broken"]["status"], 500);
  const std::string broken = seen["broken"]["message"];
  EXPECT_NE(broken.find("model 'broken' failed to load"), std::string::npos) << broken;
  EXPECT_NE(broken.find("broken.gguf"), std::string::npos) << broken;
  EXPECT_NE(broken.find("extends past the end of the file"), std::string::npos) << broken;
  EXPECT_EQ(seen["broken_again"]["message"], seen["broken"]["message"]);
  EXPECT_EQ(seen["after_broken"]["tokens"].size(), 8u);
  EXPECT_EQ(seen["with_broken"]["broken"], "unloaded:failed");
  EXPECT_EQ(seen["with_broken"]["a"], "loaded");
  EXPECT_EQ(seen["with_broken"]["c"], "loaded");
  // keep_alive 0: listed with its size and expiry before, gone after, and the memory is back.
  int64_t size_a = 0;
  for (const auto& m : seen["ps_before"])
    if (m["name"] == "a:latest") size_a = m["size"];
  const int64_t file_a = static_cast<int64_t>(std::filesystem::file_size(models + "/a.gguf"));
  EXPECT_GE(size_a, file_a) << seen["ps_before"];  // (its weights and KV pool)
  EXPECT_TRUE(seen["keep_alive_reply"].get<bool>());
  EXPECT_EQ(seen["ps_after"], json({"c:latest"}));
  EXPECT_EQ(seen["after_keep_alive"]["a"], "unloaded");
  const int64_t freed = seen["rss_loaded"].get<int64_t>() - seen["rss_unloaded"].get<int64_t>();
  EXPECT_GT(freed, file_a / 2) << "resident memory " << seen["rss_loaded"] << " -> " << seen["rss_unloaded"]
                               << " with a (its file " << file_a << " bytes) unloaded";
  std::fprintf(stderr, "keep_alive 0: resident memory %.1f -> %.1f MiB (a: file %.1f MiB, size %.1f MiB)\n",
               seen["rss_loaded"].get<double>() / (1 << 20), seen["rss_unloaded"].get<double>() / (1 << 20),
               static_cast<double>(file_a) / (1 << 20), static_cast<double>(size_a) / (1 << 20));
  // Metrics: the manager's series and each model's own (its model_name label), one family each, lint-free.
  const std::string metrics = seen["metrics"];
  test::write_bytes(dir.file("metrics.txt"), metrics);
  const std::string lint = test::shell("promtool check metrics < " + dir.file("metrics.txt"), &st);
  EXPECT_EQ(st, 0) << lint;
  EXPECT_EQ(lint, "");
  EXPECT_NE(metrics.find("kestrel_model_load_failures_total{model=\"broken\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kestrel_model_loads_total{model=\"a\"}"), std::string::npos);
  EXPECT_NE(metrics.find("kestrel_models_loaded 1"), std::string::npos);
  for (const std::string m : {"a", "b", "c"})
    EXPECT_NE(metrics.find("kestrel_prompt_tokens_total{model_name=\"" + m + "\"}"), std::string::npos) << m;
}

// A load under way shows in the model list (its stage); a request waiting for it when the server is told to stop
// gets a 503 (not a hang), and the server exits cleanly.
TEST(ModelManager, ALoadShowsItsStageAndItsWaitingRequestsAreAnsweredAtShutdown) {
  test::TempDir dir;
  const std::string models = make_manager_models(dir);
  std::string preload = "LD_PRELOAD=";
  preload.append(KESTREL_SLOW_OPEN_LIB);
  test::ServerProcess s({"--models-dir", models, "-c", "512"},
                        {preload, "KESTREL_TEST_SLOW_OPEN=b.gguf", "KESTREL_TEST_SLOW_OPEN_MS=1500"});
  auto c = s.client();
  int status = 0;
  std::string answer;
  std::thread waiting([&] {
    auto w = s.client();
    auto r = w.Post("/v1/completions", R"({"model":"b","prompt":"Once","max_tokens":2})", "application/json");
    status = r ? r->status : -1;
    answer = r ? r->body : "";
  });
  json b;
  for (int i = 0; i < 100 && b["status"]["value"] != "loading"; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    b = json::parse(c.Get("/v1/models/b")->body);
  }
  EXPECT_EQ(b["status"]["value"], "loading") << b;
  EXPECT_TRUE(b["status"].contains("stage")) << b;
  EXPECT_EQ(s.terminate(20000), 0) << s.log();
  waiting.join();
  EXPECT_EQ(status, 503) << answer;
  EXPECT_NE(answer.find("shutting down"), std::string::npos) << answer;
}

// The web chat page lists the models in its picker and asks the one chosen, which the server then loads.
TEST(ModelManager, TheWebPageAsksTheModelChosen) {
  ASSERT_TRUE(std::filesystem::exists(kManagerClients + "/node_modules/puppeteer-core/package.json"))
      << "the puppeteer-core npm package is missing: run scripts/setup.sh";
  test::TempDir dir;
  const std::string models = make_manager_models(dir);
  test::ServerProcess s({"--models-dir", models, "-c", "512"});
  int st = 0;
  const std::string out = test::shell(
      "cd " + kManagerClients + " && KESTREL_URL=http://127.0.0.1:" + std::to_string(s.port()) + "/ node webchat_models.mjs",
      &st);
  ASSERT_EQ(st, 0) << out << s.log();
  const json seen = json::parse(out.substr(out.rfind("\n{") == std::string::npos ? 0 : out.rfind("\n{") + 1));
  EXPECT_EQ(seen["options"], json({"a", "b", "broken", "c"}));
  EXPECT_EQ(seen["asked"], json({"b"}));
  EXPECT_EQ(seen["reply_class"], "msg assistant") << seen;
  EXPECT_EQ(seen["console_errors"], json::array());
  auto c = s.client();
  const json listed = json::parse(c.Get("/v1/models")->body);
  for (const auto& m : listed["data"]) EXPECT_EQ(m["status"]["value"], m["id"] == "b" ? "loaded" : "unloaded") << m;
}

// --no-models-autoload refuses an unloaded model until POST /models/load; /models/unload; a preset's idle-unload;
// Ollama's keep_alive (-1, a duration, a bad one); a preset's aliases and adapter modules; Ollama's
// load-only /api/generate; and the preset's start-up errors.
TEST(ModelManager, ExplicitLoadUnloadIdleUnloadAndPresetErrors) {
  test::TempDir dir;
  const std::string models = make_manager_models(dir);
  {
    test::write_bytes(dir.file("idle.ini"), "[c]\nidle-unload = 1\n[a]\nserved-model-name = first\nlora-modules = sql=" +
                                                dir.file("sql.gguf") + "\n");
    test::ServerProcess s({"--models-dir", models, "--models-preset", dir.file("idle.ini"), "--no-models-autoload",
                           "-c", "512"});
    auto c = s.client();
    const json ask = {{"model", "b"}, {"prompt", "Once"}, {"max_tokens", 2}};
    auto r = c.Post("/v1/completions", ask.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("--no-models-autoload"), std::string::npos) << r->body;
    r = c.Post("/models/load", R"({"model":"b"})", "application/json");
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["success"], true);
    r = c.Post("/models/load", R"({"model":"b"})", "application/json");
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("already running"), std::string::npos);
    test::post_ok(c, "/v1/completions", ask);
    r = c.Post("/models/load", R"({"model":"broken"})", "application/json");
    EXPECT_EQ(r->status, 500);
    EXPECT_NE(r->body.find("failed to load"), std::string::npos) << r->body;
    r = c.Post("/models/unload", R"({"model":"b"})", "application/json");
    EXPECT_EQ(r->status, 200) << r->body;
    r = c.Post("/models/load", R"({"model":"nope"})", "application/json");
    EXPECT_EQ(r->status, 404);
    // Ollama's load-only generate, then the preset's idle-unload = 1 unloads it.
    test::post_ok(c, "/models/load", {{"model", "c"}});
    const json load = test::post_ok(c, "/api/generate", {{"model", "c:latest"}});
    EXPECT_EQ(load["done_reason"], "load");
    std::string state;
    for (int i = 0; i < 60 && state != "unloaded"; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      state = json::parse(c.Get("/v1/models/c")->body)["status"]["value"];
    }
    EXPECT_EQ(state, "unloaded") << s.log();
    EXPECT_NE(s.log().find("model 'c': unloading (idle for 1 s)"), std::string::npos) << s.log();
    // Ollama's keep_alive: -1 keeps it past its idle time; a duration sets it.
    test::post_ok(c, "/models/load", {{"model", "c"}});
    test::post_ok(c, "/api/generate", {{"model", "c"}, {"keep_alive", -1}});
    std::this_thread::sleep_for(std::chrono::milliseconds(1600));
    EXPECT_EQ(json::parse(c.Get("/v1/models/c")->body)["status"]["value"], "loaded");
    const json ps = json::parse(c.Get("/api/ps")->body);
    ASSERT_EQ(ps["models"].size(), 1u) << ps;
    EXPECT_EQ(ps["models"][0]["name"], "c:latest");
    EXPECT_EQ(ps["models"][0]["expires_at"], "2318-01-01T00:00:00Z");  // (Ollama's "never")
    test::post_ok(c, "/api/generate", {{"model", "c"}, {"keep_alive", "300ms"}});
    for (int i = 0; i < 60 && state != "unloaded"; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      state = json::parse(c.Get("/v1/models/c")->body)["status"]["value"];
    }
    EXPECT_EQ(state, "unloaded");
    r = c.Post("/api/generate", R"({"model":"c","keep_alive":"5 parsecs"})", "application/json");
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("keep_alive"), std::string::npos) << r->body;
    // A preset's aliases and adapter modules: model a under three names, the adapter's its own reply.
    test::post_ok(c, "/models/load", {{"model", "a"}});
    const auto tokens = [&](const std::string& m) {
      return test::post_ok(c, "/v1/completions", {{"model", m}, {"prompt", "Once"}, {"max_tokens", 4}, {"logprobs", 3},
                                                  {"temperature", 0}})["choices"][0]["logprobs"];
    };
    EXPECT_EQ(tokens("first"), tokens("a"));
    EXPECT_NE(tokens("sql"), tokens("a"));
    EXPECT_EQ(json::parse(c.Get("/v1/models/sql")->body)["aliases"], json({"first", "sql"}));
  }
  const auto start = [&](const std::string& preset, const std::vector<std::string>& more = {}) {
    test::write_bytes(dir.file("p.ini"), preset);
    std::vector<std::string> args = {"serve", "--models-preset", dir.file("p.ini"), "--port", "0"};
    args.insert(args.end(), more.begin(), more.end());
    return test::run_kestrel(args);
  };
  auto r = start("[x]\nmodel = " + models + "/a.gguf\nport = 9\n");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("'port' is the whole server's flag"), std::string::npos) << r.err;
  r = start("[x]\nmodel = " + models + "/a.gguf\nctx-sise = 9\n");
  EXPECT_NE(r.err.find("'ctx-sise' is no flag of kestrel serve"), std::string::npos) << r.err;
  r = start("[x]\nctx-size = 9\n");
  EXPECT_NE(r.err.find("[x]: no model file"), std::string::npos) << r.err;
  r = start("[x]\nmodel = " + models + "/a.gguf\npin = maybe\n");
  EXPECT_NE(r.err.find("'maybe' is not true or false"), std::string::npos) << r.err;
  r = start("version = 2\n");
  EXPECT_NE(r.err.find("version 2 is not one this server reads"), std::string::npos) << r.err;
  r = start("[x]\nmodel = " + models + "/a.gguf\n", {"-m", models + "/a.gguf"});
  EXPECT_NE(r.err.find("give one or the other"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kestrel
