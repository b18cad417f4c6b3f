// What no client can do to the server (issue 18): slow clients holding
// thousands of connections, oversized chunked bodies, deeply nested JSON,
// connection bursts, ambiguous framing; and the access options (API keys,
// TLS) through curl. Each test starts its own `kestrel serve` on loopback.
#include <gmock/gmock.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "raw_http.h"
#include "prometheus_text.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

using test::kStories;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A metric's value from a /metrics scrape (the first sample whose line starts with `series`).
double metric(httplib::Client& c, const std::string& series) {
  auto r = c.Get("/metrics");
  if (!r) return -1;
  return test::parse_prometheus(r->body).get(series);
}

// One short completion; its latency in ms, or -1 if it did not succeed.
double timed_completion(httplib::Client& c) {
  const auto t0 = Clock::now();
  auto r = c.Post("/v1/completions", json{{"prompt", "Once upon"}, {"max_tokens", 8}}.dump(), "application/json");
  if (!r || r->status != 200) return -1;
  return ms_since(t0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

TEST(Reliability, AThousandSlowClientsDoNotStopFiftyNormalRequests) {
  ASSERT_TRUE(test::allow_open_files(4096)) << "this test needs 1100 open files (ulimit -n)";
  // Deadlines longer than the test: the slow connections stay open, held, not timed out.
  test::ServerProcess s({"-m", kStories, "-c", "128", "--header-timeout", "120", "--idle-timeout", "120"});
  auto c = s.client();
  std::vector<double> before;
  for (int i = 0; i < 10; i++) before.push_back(timed_completion(c));

  // Each slow client has sent part of a head and adds a header line now and then (slowloris).
  std::vector<int> slow;
  for (int i = 0; i < 1000; i++) {
    const int fd = test::connect_local(s.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    test::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n");
    slow.push_back(fd);
  }
  std::atomic<bool> attacking{true};
  std::thread dribble([&] {
    for (int round = 0; attacking; round++) {
      for (int fd : slow) test::send_all(fd, "X-Slow-" + std::to_string(round) + ": 1\r\n");
      for (int i = 0; i < 10 && attacking; i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  EXPECT_GE(metric(c, "kestrel_http_connections"), 1000);  // all held at once

  // 50 requests from 5 clients while the slow ones hold their connections.
  std::vector<double> during(50, -1);
  std::vector<std::thread> clients;
  for (int k = 0; k < 5; k++)
    clients.emplace_back([&, k] {
      auto cl = s.client();
      for (int i = 0; i < 10; i++) during[k * 10 + i] = timed_completion(cl);
    });
  for (auto& t : clients) t.join();
  attacking = false;
  dribble.join();
  for (int fd : slow) close(fd);

  for (size_t i = 0; i < during.size(); i++) {
    EXPECT_GE(during[i], 0) << "request " << i << " failed";
    EXPECT_LT(during[i], 5000) << "request " << i << " took " << during[i] << " ms";
  }
  RecordProperty("median_ms_before", std::to_string(median(before)));
  RecordProperty("median_ms_during", std::to_string(median(during)));
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(Reliability, ChunkedAndNestedBodiesAreRefusedWithBoundedMemory) {
  test::ServerProcess s({"-m", kStories, "-c", "128"});
  auto c = s.client();
  // Chunked, 8 MiB (the limit is 4 MiB): refused as it is read.
  const std::string chunk = std::string("100000\r\n") + std::string(0x100000, 'a') + "\r\n";
  std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 8; i++) chunked += chunk;
  chunked += "0\r\n\r\n";
  // A million nested arrays in a field nobody reads (2 MB).
  const std::string nested_body = "{\"prompt\": \"hi\", \"x\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  const std::string nested = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
                             std::to_string(nested_body.size()) + "\r\n\r\n" + nested_body;

  auto attack = [&](int n, std::vector<int>& statuses) {
    // Ten at a time, as concurrent attackers would.
    for (int done = 0; done < n; done += 10) {
      std::vector<std::thread> ts;
      for (int i = done; i < std::min(n, done + 10); i++)
        ts.emplace_back([&, i] { statuses[i] = test::status_of(test::raw_exchange(s.port(), i % 2 ? chunked : nested)); });
      for (auto& t : ts) t.join();
    }
  };
  std::vector<int> warm(10), statuses(100);
  attack(10, warm);  // the allocator's arenas and the workers warm up
  const int64_t rss0 = test::resident_bytes(s.pid());
  attack(100, statuses);
  const int64_t rss1 = test::resident_bytes(s.pid());
  for (int i = 0; i < 100; i++) EXPECT_EQ(statuses[i], i % 2 ? 413 : 400) << "attack " << i;
  EXPECT_GE(timed_completion(c), 0);
#if defined(__SANITIZE_ADDRESS__)
  // (The refusals above were checked; the memory figure is not the server's.)
  GTEST_SKIP() << "under ASan, resident memory is its quarantine of freed blocks (+" << (rss1 - rss0) / 1000000
               << " MB here), not the server's";
#endif
  EXPECT_LT(rss1 - rss0, 50 << 20) << "resident memory grew from " << rss0 << " to " << rss1 << " bytes";
  RecordProperty("rss_growth_bytes", std::to_string(rss1 - rss0));
}

TEST(Reliability, APromptTooLongByItsBytesIsRefusedBeforeTokenizing) {
  test::ServerProcess s({"-m", kStories, "-c", "128"});
  auto c = s.client();
  const std::string huge(4000000, 'a');  // 4 MB: tokenizing it would take seconds
  const auto t0 = Clock::now();
  auto r = c.Post("/v1/completions", json{{"prompt", huge}, {"max_tokens", 1}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["code"], "context_length_exceeded");
  EXPECT_THAT(e["message"].get<std::string>(), HasSubstr("the prompt has 4000000 bytes, so at least"));
  r = c.Post("/v1/chat/completions", json{{"messages", {{{"role", "user"}, {"content", huge}}}}}.dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "messages");
  RecordProperty("ms_for_two_refusals", std::to_string(ms_since(t0)));
  // A body over 4 KiB is parsed on a worker, not where it arrived; the answer is the same as inline.
  const json small = {{"prompt", "Once upon"}, {"max_tokens", 6}, {"temperature", 0}};
  json large = small;
  large["user"] = std::string(6000, 'u');
  auto inline_answer = c.Post("/v1/completions", small.dump(), "application/json");
  auto offloaded_answer = c.Post("/v1/completions", large.dump(), "application/json");
  ASSERT_TRUE(inline_answer && offloaded_answer);
  EXPECT_EQ(offloaded_answer->status, 200) << offloaded_answer->body;
  EXPECT_EQ(json::parse(offloaded_answer->body)["choices"][0]["text"],
            json::parse(inline_answer->body)["choices"][0]["text"]);
  large["stream"] = true;
  auto streamed = c.Post("/v1/completions", large.dump(), "application/json");
  ASSERT_TRUE(streamed);
  EXPECT_THAT(streamed->body, HasSubstr("data: [DONE]"));
}

// A client that hangs up before its (non-streamed) answer is ready: the
// request is cancelled, not generated to the end for nobody.
TEST(Reliability, AClientThatHangsUpBeforeItsWholeAnswerCancelsIt) {
  test::ServerProcess s({"-m", kStories, "-c", "1024"});
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 1000}, {"ignore_eos", true}}.dump();
  const int fd = test::connect_local(s.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(test::send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  close(fd);
  auto c = s.client();
  double cancelled = 0;
  for (int i = 0; i < 50 && cancelled < 1; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancelled = metric(c, "kestrel_requests_total{outcome=\"cancelled\"}");
  }
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(metric(c, "kestrel_requests_total{outcome=\"length\"}"), -1);  // no request ran to max_tokens
  EXPECT_LT(metric(c, "kestrel_generation_tokens_total"), 1000);
  // A pipelined second request on one connection is still read and answered after the first.
  const std::string one = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two = "POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 15\r\n\r\n"
                          "{\"content\":\"a\"}";
  const std::string both = test::raw_exchange(s.port(), one + two);
  EXPECT_THAT(both, HasSubstr("{\"status\":\"ok\"}"));
  EXPECT_THAT(both, HasSubstr("\"tokens\""));
}

TEST(Reliability, ABurstOf500ConnectionsIsServedOrRefusedNeverReset) {
  ASSERT_TRUE(test::allow_open_files(2048)) << "this test needs 600 open files (ulimit -n)";
  test::ServerProcess s({"-m", kStories, "-c", "128", "--max-queue", "32"});
  const std::string body = json{{"prompt", "Once"}, {"max_tokens", 4}}.dump();
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  std::vector<int> fds;
  for (int i = 0; i < 500; i++) {
    const int fd = test::connect_local(s.port());
    ASSERT_GE(fd, 0) << "connection " << i << " refused: the listen queue overflowed";
    fds.push_back(fd);
  }
  for (int fd : fds) ASSERT_TRUE(test::send_all(fd, request));
  int ok = 0, busy = 0;
  for (size_t i = 0; i < fds.size(); i++) {
    bool reset = false;
    const std::string r = test::read_until_close(fds[i], 30000, &reset);
    close(fds[i]);
    EXPECT_FALSE(reset) << "connection " << i << " was reset";
    const int status = test::status_of(r);
    EXPECT_TRUE(status == 200 || status == 503) << "connection " << i << ": " << r.substr(0, 200);
    if (status == 503) {
      EXPECT_THAT(r, HasSubstr("Retry-After: 1"));
    }
    ok += status == 200;
    busy += status == 503;
  }
  EXPECT_GE(ok, 32);
  RecordProperty("served", ok);
  RecordProperty("refused_503", busy);
}

TEST(Reliability, AmbiguousFramingIsRefusedAndTheServerKeepsServing) {
  test::ServerProcess s({"-m", kStories, "-c", "128"});
  const std::string body = R"({"content":"a"})";
  struct Case {
    std::string name, request;
    int status;
  };
  const std::vector<Case> cases = {
      {"two Content-Lengths", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-Length: 15\r\n\r\n" + body, 400},
      {"conflicting Content-Lengths", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\nContent-Length: 16\r\n\r\n" + body, 400},
      {"Transfer-Encoding with Content-Length", "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 15\r\n\r\n0\r\n\r\n", 400},
      {"a signed length", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: +15\r\n\r\n" + body, 400},
      {"NUL in a header", std::string("GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n", 42), 400},
      {"no Host", "GET /health HTTP/1.1\r\n\r\n", 400},
      {"two Hosts", "GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"an unknown coding", "POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"HTTP/2 in text", "GET /health HTTP/2.0\r\nHost: x\r\n\r\n", 400},
      {"a target that is not a path", "GET health HTTP/1.1\r\nHost: x\r\n\r\n", 400},
      {"an unknown expectation", "POST /tokenize HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 15\r\n\r\n" + body, 417},
      {"300,000 header bytes", "GET /health HTTP/1.1\r\nHost: x\r\nX: " + std::string(300000, 'a') + "\r\n\r\n", 431},
      {"150 header fields", [] {
         std::string r = "GET /health HTTP/1.1\r\nHost: x\r\n";
         for (int i = 0; i < 150; i++) r += "X-" + std::to_string(i) + ": y\r\n";
         return r + "\r\n";
       }(), 431},
      {"a body beyond the limit", "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5000000\r\n\r\n" + std::string(5000000, 'a'), 413},
  };
  for (const auto& k : cases) {
    const std::string r = test::raw_exchange(s.port(), k.request);
    EXPECT_EQ(test::status_of(r), k.status) << k.name << ": " << r.substr(0, 300);
    EXPECT_THAT(r, HasSubstr("\"error\"")) << k.name;
  }
  // What is well-formed still works: chunked, HTTP/1.0, 100-continue, HEAD.
  EXPECT_THAT(test::raw_exchange(s.port(), "POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: "
                                           "chunked\r\n\r\nf\r\n" + body + "\r\n0\r\n\r\n"),
              HasSubstr("\"tokens\""));
  EXPECT_EQ(test::status_of(test::raw_exchange(s.port(), "GET /health HTTP/1.0\r\n\r\n")), 200);
  const std::string cont = test::raw_exchange(s.port(), "POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                                        "Expect: 100-continue\r\nContent-Length: 15\r\n\r\n" + body);
  EXPECT_EQ(cont.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK", 0), 0u) << cont;
  const std::string head = test::raw_exchange(s.port(), "HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(test::status_of(head), 200);
  EXPECT_THAT(head, HasSubstr("Content-Length: 15"));
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");  // no body
}

TEST(Reliability, ConnectionsBeyondTheCapGet503AndSlowHeadsAreDropped) {
  test::ServerProcess s({"-m", kStories, "-c", "128", "--max-connections", "8", "--header-timeout", "1"});
  std::vector<int> idle;
  for (int i = 0; i < 8; i++) idle.push_back(test::connect_local(s.port()));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // accepted
  const std::string refused = test::raw_exchange(s.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(test::status_of(refused), 503) << refused;
  EXPECT_THAT(refused, HasSubstr("Retry-After: 1"));
  EXPECT_THAT(refused, HasSubstr("too many connections"));
  // The idle ones sent nothing within the header deadline: dropped.
  const auto t0 = Clock::now();
  for (int fd : idle) {
    EXPECT_EQ(test::read_until_close(fd, 5000), "");
    close(fd);
  }
  EXPECT_LT(ms_since(t0), 4000);
  // So is a head that never ends, however it dribbles.
  const int slow = test::connect_local(s.port());
  test::send_all(slow, "GET /health HTTP/1.1\r\n");
  const auto t1 = Clock::now();
  for (int i = 0; i < 40 && ms_since(t1) < 3000; i++) {
    if (!test::send_all(slow, "X: y\r\n")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(test::read_until_close(slow, 3000), "");
  close(slow);
  EXPECT_LT(ms_since(t1), 3500);
  auto c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_GE(metric(c, "kestrel_http_errors_total{reason=\"timeout\"}"), 9);
  EXPECT_GE(metric(c, "kestrel_http_errors_total{reason=\"connection_limit\"}"), 1);
}

// stdout of a shell command, and its exit status.
using test::shell;

TEST(Security, ApiKeyAndTlsThroughCurl) {
  test::TempDir dir;
  const std::string cert = dir.file("cert.pem"), key = dir.file("key.pem"), keys = dir.file("keys");
  int st = 0;
  const std::string made = shell("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
                                 "subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert, &st);
  ASSERT_EQ(st, 0) << made;
  std::ofstream(keys) << "# test keys\nsk-second\n";
  test::ServerProcess s({"-m", kStories, "-c", "128", "--api-key", "sk-first", "--api-key-file", keys,
                         "--ssl-cert-file", cert, "--ssl-key-file", key, "--cors-origin", "https://app.example"});
  const std::string base = "https://127.0.0.1:" + std::to_string(s.port());
  const std::string curl = "curl -s --max-time 20 --cacert " + cert + " ";
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3})";
  auto code_of = [&](const std::string& args) {
    return shell(curl + "-o /dev/null -w '%{http_code}' " + args);
  };
  EXPECT_EQ(code_of(base + "/health"), "200");  // open
  EXPECT_EQ(code_of(base + "/metrics"), "200");
  EXPECT_EQ(code_of("-X POST -d '" + chat + "' " + base + "/v1/chat/completions"), "401");
  EXPECT_EQ(code_of("-H 'Authorization: Bearer sk-wrong' -X POST -d '" + chat + "' " + base + "/v1/chat/completions"),
            "401");
  const std::string answer =
      shell(curl + "-H 'Authorization: Bearer sk-second' -X POST -d '" + chat + "' " + base + "/v1/chat/completions");
  const json a = json::parse(answer);
  EXPECT_EQ(a["object"], "chat.completion") << answer;
  EXPECT_EQ(a["usage"]["completion_tokens"], 3);
  const std::string streamed = shell(curl + "-N -H 'Authorization: Bearer sk-first' -X POST -d '" +
                                     R"({"prompt":"Once","max_tokens":3,"stream":true})" + "' " + base + "/v1/completions");
  EXPECT_THAT(streamed, HasSubstr("data: [DONE]"));
  // A browser's preflight from the allowed origin, with no key.
  const std::string preflight = shell(curl + "-i -X OPTIONS -H 'Origin: https://app.example' -H "
                                      "'Access-Control-Request-Method: POST' " + base + "/v1/chat/completions");
  EXPECT_THAT(preflight, HasSubstr("HTTP/1.1 204"));
  EXPECT_THAT(preflight, HasSubstr("Access-Control-Allow-Origin: https://app.example"));
  // Plain HTTP to the TLS port gets no answer; a client that does not trust the certificate refuses it.
  EXPECT_NE(shell("curl -s --max-time 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:" + std::to_string(s.port()) +
                  "/health"),
            "200");
  shell("curl -s --max-time 5 " + base + "/health", &st);
  EXPECT_NE(st, 0);  // self-signed, not in the system store
}

// The official OpenAI client (npm `openai`, installed by scripts/setup.sh)
// over HTTPS with an API key: listing models, a chat answer, a streamed
// chat, structured output, a completion, and a wrong key seen as its AuthenticationError.
TEST(Security, TheOpenAiClientWorksWithAKeyOverTls) {
  const std::string client_dir = std::string(KESTREL_SOURCE_DIR) + "/tests/e2e/openai_client";
  ASSERT_TRUE(std::filesystem::exists(client_dir + "/node_modules/openai/package.json"))
      << "the openai npm package is missing: run scripts/setup.sh";
  test::TempDir dir;
  const std::string cert = dir.file("cert.pem"), key = dir.file("key.pem");
  int st = 0;
  const std::string made = shell("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -addext "
                                 "subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert, &st);
  ASSERT_EQ(st, 0) << made;
  test::ServerProcess s({"-m", kStories, "-c", "512", "--api-key", "sk-test", "--ssl-cert-file", cert,
                         "--ssl-key-file", key, "--served-model-name", "stories"});
  const std::string out = shell("cd " + client_dir + " && NODE_EXTRA_CA_CERTS=" + cert + " KESTREL_KEY=sk-test " +
                                    "KESTREL_URL=https://127.0.0.1:" + std::to_string(s.port()) + "/v1 node client.mjs",
                                &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind('{', out.find("\"models\"")) ));
  EXPECT_EQ(seen["models"], json::array({"stories"}));
  EXPECT_EQ(seen["chat"]["object"], "chat.completion");
  EXPECT_EQ(seen["chat"]["tokens"], 4);
  EXPECT_GE(seen["stream"]["chunks"], 3);  // the role, tokens, the end
  EXPECT_EQ(seen["stream_usage"]["chunks"], 1);
  EXPECT_EQ(seen["stream_usage"]["choices"], 0);
  EXPECT_EQ(seen["stream_usage"]["tokens"], 4);
  EXPECT_EQ(seen["card"]["id"], "stories");
  EXPECT_EQ(seen["card"]["object"], "model");
  EXPECT_EQ(seen["agent"]["tokens"], 3);
  EXPECT_EQ(seen["tools"]["finish"], "length");
  EXPECT_TRUE(seen["tools"]["calls"].is_null());
  EXPECT_EQ(seen["structured"]["finish"], "stop");
  ASSERT_TRUE(seen["structured"]["parsed"].is_object()) << seen["structured"];
  EXPECT_EQ(seen["structured"]["parsed"].size(), 2u);
  EXPECT_TRUE(seen["structured"]["parsed"]["raining"].is_boolean());
  EXPECT_TRUE(seen["structured"]["parsed"]["chance"].is_number_integer());
  EXPECT_EQ(seen["completion"]["object"], "text_completion");
  EXPECT_EQ(seen["completion"]["tokens"], 3);
  EXPECT_EQ(seen["wrong_key"]["status"], 401);
  EXPECT_EQ(seen["wrong_key"]["name"], "AuthenticationError");
  EXPECT_EQ(seen["wrong_key"]["code"], "invalid_api_key");
}

// A tiny model of `arch` with a DeepSeek tokenizer and the family's real template, through the official
// OpenAI client: a chat, a streamed chat, and a tool-call round trip in the template's format (tool_choice
// "required": the reply held to its form of a call — DSML's <｜DSML｜...>, harmony's to=functions.NAME — read
// back as tool_calls, whole and as streamed deltas, then the tool's answer).
void tool_round_trip(const std::string& arch, const std::string& chat_template, const std::string& format,
                     const std::string& call_body = "") {
  const std::string client_dir = std::string(KESTREL_SOURCE_DIR) + "/tests/e2e/openai_client";
  ASSERT_TRUE(std::filesystem::exists(client_dir + "/node_modules/openai/package.json"))
      << "the openai npm package is missing: run scripts/setup.sh";
  test::TempDir dir;
  const std::string model = dir.file(arch + ".gguf");
  const auto made = test::run_kestrel({"synth", "--arch", arch, "--preset", "tiny", "--type", "f32",
                                       "--vocab-from", test::shared("vocab/ggml-vocab-deepseek-llm.gguf"), "-o", model});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  test::ServerProcess s({"-m", model, "-c", "4096", "--chat-template",
                         test::shared("templates/" + chat_template)});
  EXPECT_THAT(s.log(), HasSubstr("tool calls read as " + format));
  int st = 0;
  const std::string body = call_body.empty() ? "" : "KESTREL_CALL_BODY='" + call_body + "' ";
  const std::string out = shell("cd " + client_dir + " && " + body + "KESTREL_URL=http://127.0.0.1:" +
                                    std::to_string(s.port()) + "/v1 node tool_round_trip.mjs",
                                &st);
  ASSERT_EQ(st, 0) << out;
  const json seen = json::parse(out.substr(out.rfind('{', out.find("\"chat\""))));
  EXPECT_GE(seen["chat"]["tokens"], 1);
  EXPECT_THAT(seen["chat"]["text"].get<std::string>(), ::testing::Not(HasSubstr("<|channel|>")));  // harmony's structure read
  EXPECT_GE(seen["stream"]["chunks"], 2);
  EXPECT_EQ(seen["call"]["finish"], "tool_calls") << seen;
  EXPECT_EQ(seen["call"]["n"], 1) << seen;
  EXPECT_EQ(seen["call"]["name"], "get_weather");
  ASSERT_TRUE(seen["call"]["args"].is_object()) << seen;
  EXPECT_TRUE(seen["call"]["args"]["city"] == "Paris" || seen["call"]["args"]["city"] == "Lyon") << seen;
  EXPECT_TRUE(seen["call"]["args"]["metric"].is_boolean()) << seen;
  EXPECT_EQ(seen["stream_call"]["finish"], "tool_calls") << seen;
  EXPECT_EQ(seen["stream_call"]["name"], "get_weather");
  EXPECT_EQ(seen["stream_call"]["args"], seen["call"]["args"]);  // greedy: the same call, in deltas
  EXPECT_GE(seen["answer"]["tokens"], 1);
}

// DeepSeek-V3.2 (`deepseek32`): its sparse attention selects from the fifth position on (top-k 4).
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInDsmlWithDeepseekV32) {
  tool_round_trip("deepseek32", "deepseek-ai-DeepSeek-V3.2.jinja", "dsml");
}

// DeepSeek-V4 (`deepseek4`): hyper-connections, a window of 8 raw keys and top-3 compressed blocks.
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInDsmlWithDeepseekV4) {
  tool_round_trip("deepseek4", "deepseek-ai-DeepSeek-V4.jinja", "dsml");
}

// gpt-oss (`gpt-oss`): sinks, windows of 8, biased experts; harmony channels, the call as its template writes
// one (" to=functions.NAME<|channel|>commentary json<|message|>{...}").
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInHarmonyWithGptOss) {
  tool_round_trip("gpt-oss", "openai-gpt-oss-120b.jinja", "harmony");
}

// GLM-4.5 MoE (`glm4moe`) with GLM-4.6's template: <tool_call>NAME<arg_key>…</arg_key><arg_value>…</arg_value>.
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInGlmXmlWithGlm45) {
  tool_round_trip("glm4moe", "GLM-4.6.jinja", "glm");
}

// Mistral 3 (`mistral3`) with Mistral Small 3.2's template: [TOOL_CALLS] calls.
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInMistralFormWithMistral3) {
  tool_round_trip("mistral3", "Mistral-Small-3.2-24B-Instruct-2506.jinja", "mistral");
}

// Gemma 4 (`gemma4`) with Gemma-4-31B-it's template: <|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>,
// the tool's answer back as its <|tool_response> block.
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInGemma4FormWithGemma4) {
  tool_round_trip("gemma4", "google-gemma-4-31B-it.jinja", "gemma4");
}

// Qwen3.5 (`qwen35`: Gated DeltaNet layers with their recurrent state per request) with Qwen3.5's template:
// <tool_call><function=NAME><parameter=KEY>…</parameter></function></tool_call>. The template opens thinking in
// the prompt by default, where a forced call cannot start: the forced calls turn it off (enable_thinking).
TEST(StockClients, TheOpenAiClientChatsAndCallsToolsInQwenXmlWithQwen35) {
  tool_round_trip("qwen35", "Qwen3.5-4B.jinja", "qwen3_coder", R"({"chat_template_kwargs":{"enable_thinking":false}})");
}

TEST(Security, APortInUseIsAnErrorAndABadCertificateIsNamed) {
  test::ServerProcess first({"-m", kStories, "-c", "128"});
  const test::CliResult busy = test::run_kestrel({"serve", "-m", kStories, "-c", "128", "--port", std::to_string(first.port())});
  EXPECT_NE(busy.exit_code, 0);
  EXPECT_THAT(busy.err, HasSubstr("cannot listen on 127.0.0.1:" + std::to_string(first.port())));
  EXPECT_THAT(busy.err, HasSubstr("in use"));
  test::TempDir dir;
  const std::string junk = dir.file("junk.pem");
  std::ofstream(junk) << "not a certificate\n";
  const test::CliResult bad =
      test::run_kestrel({"serve", "-m", kStories, "--port", "0", "--ssl-cert-file", junk, "--ssl-key-file", junk});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("cannot use the TLS certificate '" + junk + "'"));
  const test::CliResult half = test::run_kestrel({"serve", "-m", kStories, "--port", "0", "--ssl-cert-file", junk});
  EXPECT_NE(half.exit_code, 0);
  EXPECT_THAT(half.err, HasSubstr("needs both --ssl-cert-file and --ssl-key-file"));
}

}  // namespace
}  // namespace kestrel
