// What an operator's tools see of `kestrel serve` (docs/deploy.md): liveness and readiness through a slow
// load and a drain, and the metrics as Prometheus' own linter and a real Prometheus server read them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "http_json.h"
#include "prometheus_text.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// A load that takes `ms` longer (the model file's open() waits: tests/support/slow_open.cpp).
std::vector<std::string> slow_load_env(int ms) {
  // (Appended, not `std::string("...") + LIB`: with the library's path of some lengths GCC 12 warns falsely
  // (-Warray-bounds) about the inlined concatenation.)
  std::string preload = "LD_PRELOAD=";
  preload.append(KESTREL_SLOW_OPEN_LIB);
  return {preload, "KESTREL_TEST_SLOW_OPEN=stories260K.gguf", "KESTREL_TEST_SLOW_OPEN_MS=" + std::to_string(ms)};
}

std::string header(const httplib::Result& r, const std::string& name) {
  return r && r->has_header(name) ? r->get_header_value(name) : "";
}

// Polls GET /ready until it answers 200 (the body) or `seconds` pass (null).
json wait_ready(httplib::Client& c, int seconds) {
  for (int i = 0; i < seconds * 20; i++) {
    auto r = c.Get("/ready");
    if (r && r->status == 200) return json::parse(r->body);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return nullptr;
}

std::string tool(const std::string& name) {
  const std::string path = test::shell("command -v " + name);
  return path.empty() ? "" : path.substr(0, path.find('\n'));
}

TEST(ServerOperations, ReadyTellsTheLoadsStageWhileHealthAnswersAndTheApiWaits) {
  test::ServerProcess s({"-m", test::kStories, "-c", "256"}, slow_load_env(2500), /*wait_ready=*/false);
  ASSERT_GT(s.port(), 0);
  auto c = s.client();
  // Loading: the process answers (liveness), is not ready, and says what it is doing.
  auto ready = c.Get("/ready");
  ASSERT_TRUE(ready) << s.log();
  EXPECT_EQ(ready->status, 503) << ready->body;
  const json loading = json::parse(ready->body);
  EXPECT_EQ(loading["status"], "loading");
  EXPECT_EQ(loading["stage"], "reading the model file");
  EXPECT_THAT(loading["reason"].get<std::string>(), HasSubstr("the model is loading"));
  EXPECT_GE(loading["elapsed_seconds"].get<double>(), 0);
  EXPECT_EQ(header(ready, "Retry-After"), "5");
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "loading");
  // The API's routes answer 503 (not a refused connection, not a 404) naming the stage.
  auto early = c.Post("/v1/completions", json{{"prompt", "Once"}, {"max_tokens", 2}}.dump(), "application/json");
  ASSERT_TRUE(early);
  EXPECT_EQ(early->status, 503);
  EXPECT_EQ(json::parse(early->body)["error"]["code"], "model_loading") << early->body;
  EXPECT_THAT(early->body, HasSubstr("reading the model file"));
  EXPECT_EQ(header(early, "Retry-After"), "5");
  EXPECT_EQ(c.Get("/v1/models")->status, 503);
  EXPECT_EQ(c.Get("/metrics")->status, 200);  // scrapes see the server from its start
  // The image's HEALTHCHECK command reads the same: alive, not ready.
  const std::string port = std::to_string(s.port());
  int status = -1;
  EXPECT_THAT(test::shell(std::string(KESTREL_BINARY) + " probe --port " + port, &status), HasSubstr("200 "));
  EXPECT_EQ(status, 0);
  EXPECT_THAT(test::shell(std::string(KESTREL_BINARY) + " probe --path /ready --port " + port, &status),
              HasSubstr("503 "));
  EXPECT_EQ(status, 1);
  // Loaded and warmed: ready, with each stage and its time.
  const json done = wait_ready(c, 30);
  ASSERT_FALSE(done.is_null()) << s.log();
  EXPECT_EQ(done["status"], "ready");
  std::vector<std::string> stages;
  double reading = -1;
  for (const auto& st : done["stages"]) {
    stages.push_back(st["stage"]);
    if (st["stage"] == "reading the model file") reading = st["seconds"];
  }
  EXPECT_THAT(stages, ::testing::ElementsAre("starting", "reading the model file", "loading weights",
                                             "reading the tokenizer", "allocating the KV cache", "warming up"));
  EXPECT_GE(reading, 2.4);  // the slowed open
  EXPECT_GE(done["startup_seconds"].get<double>(), reading);
  EXPECT_EQ(json::parse(c.Get("/health")->body)["status"], "ok");
  test::post_ok(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_EQ(s.terminate(10000), 0) << s.log();
}

TEST(ServerOperations, ASignalWhileLoadingStopsAtOnce) {
  test::ServerProcess s({"-m", test::kStories, "-c", "256"}, slow_load_env(20000), /*wait_ready=*/false);
  ASSERT_GT(s.port(), 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.terminate(5000), 0) << s.log();  // not after the 20 s load
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_THAT(s.log(), HasSubstr("while loading: stopped"));
}

TEST(ServerOperations, DrainingIsNotReadyButAlive) {
  // A model slow enough (f32, 8 layers of 512) that a 400-token answer is still running when SIGTERM comes.
  test::TempDir dir;
  const std::string model = dir.file("slow.gguf");
  const auto made = test::run_kestrel({"synth", "--arch", "llama", "--dim", "512", "--layers", "8", "--ffn", "1536",
                                       "--type", "f32", "-o", model});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  test::ServerProcess s({"-m", model, "-c", "512", "--shutdown-timeout", "60"});
  auto c = s.client();
  std::thread client([&] {
    auto cl = s.client();
    const json answer = test::post_ok(cl, "/v1/completions",
                                      {{"prompt", "a"}, {"max_tokens", 400}, {"ignore_eos", true}, {"temperature", 0}});
    EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");  // finished, not cut off by the drain
  });
  // Running, then the signal.
  for (int i = 0; i < 200; i++) {
    if (test::parse_prometheus(c.Get("/metrics")->body).get("kestrel_num_requests_running") == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(s.pid(), SIGTERM);
  json draining;
  for (int i = 0; i < 100 && draining.is_null(); i++) {
    auto r = c.Get("/ready");
    if (r && r->status == 503) draining = json::parse(r->body);
    else std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(draining.is_null()) << s.log();
  EXPECT_EQ(draining["status"], "draining");
  EXPECT_THAT(draining["reason"].get<std::string>(), HasSubstr("signal 15"));
  auto health = c.Get("/health");
  if (health) {  // (the listener closes once the last request is done)
    EXPECT_EQ(health->status, 200);
    EXPECT_EQ(json::parse(health->body)["status"], "draining");
  }
  client.join();
  int status = -1;
  for (int i = 0; i < 500 && !s.exited(&status); i++) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(status, 0) << s.log();
}

// Every API through which a generation or an embedding can be asked, once, so that each metric family has
// series; then the exposition as promtool (Prometheus' own linter) reads it.
TEST(ServerOperations, MetricsPassPromtoolAndCarryTheGenAiAndVllmSeries) {
  const std::string promtool = tool("promtool");
  ASSERT_FALSE(promtool.empty()) << "promtool is missing: run scripts/setup.sh (Debian's prometheus package)";
  test::ServerProcess s({"-m", test::kStories, "-c", "256", "--pooling", "mean"});
  auto c = s.client();
  test::post_ok(c, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}});
  test::post_ok(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 4}, {"model", "stories260K.gguf"}});
  test::post_ok(c, "/v1/embeddings", {{"input", "Once upon"}});
  const std::string body = c.Get("/metrics")->body;
  test::TempDir dir;
  test::write_bytes(dir.file("metrics.txt"), body);
  int status = -1;
  const std::string lint = test::shell(promtool + " check metrics < " + dir.file("metrics.txt"), &status);
  EXPECT_EQ(status, 0) << lint;
  EXPECT_EQ(lint, "") << lint;  // no lint problem at all (promtool prints each)
  const auto parsed = test::parse_prometheus(body);
  EXPECT_EQ(parsed.bad_lines, 0);
  EXPECT_EQ(parsed.without_model_name, 0);
  // The semantic conventions' names, attributes and bucket boundaries.
  const std::string chat = "gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"kestrel\","
                           "gen_ai_request_model=\"stories260K.gguf\",gen_ai_response_model=\"stories260K.gguf\"";
  const std::string completion = "gen_ai_operation_name=\"text_completion\",gen_ai_provider_name=\"kestrel\","
                                 "gen_ai_request_model=\"stories260K.gguf\",gen_ai_response_model=\"stories260K.gguf\"";
  const std::string embeddings = "gen_ai_operation_name=\"embeddings\",gen_ai_provider_name=\"kestrel\","
                                 "gen_ai_request_model=\"stories260K.gguf\",gen_ai_response_model=\"stories260K.gguf\"";
  EXPECT_EQ(parsed.get("gen_ai_server_request_duration_seconds_count{" + chat + "}"), 1) << body;
  EXPECT_EQ(parsed.get("gen_ai_server_request_duration_seconds_count{" + completion + "}"), 1);
  EXPECT_EQ(parsed.get("gen_ai_server_request_duration_seconds_count{" + embeddings + "}"), 1);
  EXPECT_EQ(parsed.get("gen_ai_server_request_duration_seconds_bucket{" + chat + ",le=\"81.92\"}"), 1);
  EXPECT_EQ(parsed.get("gen_ai_server_time_to_first_token_seconds_bucket{" + chat + ",le=\"7.5\"}"), 1);
  EXPECT_EQ(parsed.get("gen_ai_server_time_to_first_token_seconds_count{" + embeddings + "}"), -1);  // no token
  EXPECT_EQ(parsed.get("gen_ai_server_time_per_output_token_seconds_bucket{" + completion + ",le=\"0.075\"}"), 1);
  // vLLM's gauges under our prefix, and the pool's size as a gauge without a counter's suffix.
  for (const char* g : {"kestrel_num_requests_running", "kestrel_num_requests_waiting", "kestrel_kv_cache_usage_perc",
                        "kestrel_prefix_cache_hit_rate"})
    EXPECT_GE(parsed.get(g), 0) << g;
  EXPECT_GT(parsed.get("kestrel_kv_blocks"), 0);
  EXPECT_EQ(parsed.get("kestrel_kv_blocks_total"), -1);
  EXPECT_THAT(body, HasSubstr("# TYPE kestrel_recurrent_state_slots gauge"));
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// A real Prometheus server scrapes a running `kestrel serve` and answers queries over what it scraped.
TEST(ServerOperations, APrometheusServerScrapesIt) {
  const std::string prometheus = tool("prometheus");
  ASSERT_FALSE(prometheus.empty()) << "prometheus is missing: run scripts/setup.sh (Debian's prometheus package)";
  test::ServerProcess s({"-m", test::kStories, "-c", "256"});
  auto c = s.client();
  test::post_ok(c, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}});
  test::TempDir dir;
  test::write_bytes(dir.file("prometheus.yml"), "global:\n  scrape_interval: 1s\nscrape_configs:\n"
                                                "  - job_name: kestrel\n    static_configs:\n"
                                                "      - targets: ['127.0.0.1:" + std::to_string(s.port()) + "']\n");
  const int port = free_port();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::freopen(dir.file("prometheus.log").c_str(), "w", stderr);
    const std::string config = "--config.file=" + dir.file("prometheus.yml");
    const std::string storage = "--storage.tsdb.path=" + dir.file("data");
    const std::string listen = "--web.listen-address=127.0.0.1:" + std::to_string(port);
    execl(prometheus.c_str(), prometheus.c_str(), config.c_str(), storage.c_str(), listen.c_str(), nullptr);
    _exit(127);
  }
  httplib::Client p("127.0.0.1", port);
  p.set_read_timeout(5, 0);
  // A query's single value, or -1 while it has none.
  const auto value = [&](const std::string& promql) -> double {
    auto r = p.Get("/api/v1/query", httplib::Params{{"query", promql}}, httplib::Headers{});
    if (!r || r->status != 200) return -1;
    const json j = json::parse(r->body);
    if (j["data"]["result"].empty()) return -1;
    return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
  };
  double up = -1, waiting = -1, chats = -1;
  for (int i = 0; i < 300 && (up != 1 || waiting < 0 || chats != 1); i++) {
    up = value("up{job=\"kestrel\"}");
    waiting = value("kestrel_num_requests_waiting");
    chats = value("sum(gen_ai_server_request_duration_seconds_count{gen_ai_operation_name=\"chat\"})");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(up, 1) << test::read_text(dir.file("prometheus.log"));
  EXPECT_EQ(waiting, 0);
  EXPECT_EQ(chats, 1);
  EXPECT_GT(value("kestrel_kv_blocks{job=\"kestrel\"}"), 0);
  // The scrape's own health, as Prometheus reports it: no error from parsing the exposition.
  auto targets = p.Get("/api/v1/targets");
  ASSERT_TRUE(targets);
  const json t = json::parse(targets->body)["data"]["activeTargets"][0];
  EXPECT_EQ(t["health"], "up");
  EXPECT_EQ(t["lastError"], "");
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace kestrel
