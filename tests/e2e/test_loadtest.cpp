// kestrel loadtest: the percentile, throughput and goodput arithmetic on
// timelines with known answers; arrival processes; the tool end to end
// against a real `kestrel serve`; and misbehaving servers (errors, dropped
// connections, stalls, unterminated streams) reported as errors, never hangs.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <atomic>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "core/error.h"
#include "loadtest/load_client.h"
#include "loadtest/load_report.h"
#include "loadtest/load_runner.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {
using ::testing::HasSubstr;

TEST(LoadStats, PercentilesInterpolateBetweenClosestRanks) {
  std::vector<double> v;
  for (int i = 100; i >= 1; i--) v.push_back(i);  // unsorted on purpose
  const Percentiles p = percentiles(v);
  EXPECT_EQ(p.n, 100);
  EXPECT_DOUBLE_EQ(p.mean, 50.5);
  EXPECT_DOUBLE_EQ(p.median, 50.5);
  EXPECT_NEAR(p.p90, 90.1, 1e-9);  // numpy.percentile(1..100, 90)
  EXPECT_NEAR(p.p99, 99.01, 1e-9);
  EXPECT_NEAR(p.p999, 99.901, 1e-9);
  EXPECT_DOUBLE_EQ(percentile({7.0}, 99), 7.0);
  EXPECT_EQ(percentiles({}).n, 0);
}

TEST(LoadStats, ThroughputTpotErrorsAndGoodputOnAKnownTimeline) {
  // Three good requests of 11 tokens each, over a 2-second test, and two failures.
  std::vector<RequestRecord> rs;
  const double ttft[] = {0.1, 0.2, 0.4}, e2e[] = {1.1, 1.2, 2.4};
  for (int i = 0; i < 3; i++) {
    RequestRecord r;
    r.ok = true;
    r.ttft_s = ttft[i];
    r.e2e_s = e2e[i];
    r.prompt_tokens = 20;
    r.output_tokens = 11;
    r.itl_s.assign(10, (e2e[i] - ttft[i]) / 10);
    rs.push_back(r);
  }
  RequestRecord bad;
  bad.error = "timeout";
  rs.push_back(bad);
  bad.error = "http 5xx";
  rs.push_back(bad);
  Slo slo;
  slo.ttft_ms = 250;  // the third misses it
  const LoadSummary s = summarize(rs, 2.0, slo);
  EXPECT_EQ(s.completed, 3);
  EXPECT_EQ(s.failed, 2);
  EXPECT_EQ(s.errors.at("timeout"), 1);
  EXPECT_EQ(s.errors.at("http 5xx"), 1);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 33.0 / 2);
  EXPECT_DOUBLE_EQ(s.total_throughput, 93.0 / 2);
  EXPECT_NEAR(s.tpot_ms.mean, (100.0 + 100.0 + 200.0) / 3, 1e-9);  // (e2e - ttft) / 10
  EXPECT_NEAR(s.ttft_ms.median, 200.0, 1e-9);
  EXPECT_EQ(s.itl_ms.n, 30);
  EXPECT_NEAR(s.e2e_ms.p99, 1200 + (2400 - 1200) * 0.98, 1e-6);
  EXPECT_EQ(s.slo_met, 2);
  EXPECT_DOUBLE_EQ(s.goodput, 1.0);
  EXPECT_THAT(render_summary(s, "t", slo), HasSubstr("Goodput"));
}

TEST(LoadRunner, ArrivalsArePoissonAtTheRateAndBurstierWithASmallShape) {
  for (double shape : {1.0, 0.25}) {
    const auto t = arrival_times(20000, 10.0, shape, 3);
    std::vector<double> gaps;
    for (size_t i = 1; i < t.size(); i++) gaps.push_back(t[i] - t[i - 1]);
    const Percentiles p = percentiles(gaps);
    double var = 0;
    for (double g : gaps) var += (g - p.mean) * (g - p.mean);
    const double cv = std::sqrt(var / static_cast<double>(gaps.size())) / p.mean;
    EXPECT_NEAR(p.mean, 0.1, 0.005) << shape;               // the rate
    EXPECT_NEAR(cv, 1.0 / std::sqrt(shape), 0.1) << shape;  // gamma: cv = 1/sqrt(shape)
  }
  EXPECT_EQ(arrival_times(5, 0, 1, 1), std::vector<double>(5, 0.0));  // all at once
}

// A server that misbehaves in one way per path.
class BadServer {
 public:
  BadServer() {
    auto stream = [](httplib::Response& res, int mode) {
      res.set_chunked_content_provider("text/event-stream", [mode](size_t, httplib::DataSink& sink) {
        const std::string chunk = "data: {\"choices\": [{\"text\": \"x\", \"index\": 0}]}\n\n";
        sink.write(chunk.data(), chunk.size());
        if (mode == 0) return false;  // drop the connection after one chunk
        if (mode == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // stall
        if (mode == 2) {                                                              // end without [DONE]
          sink.done();
          return true;
        }
        return true;
      });
    };
    svr_.Post("/drop/v1/completions", [=](const httplib::Request&, httplib::Response& res) { stream(res, 0); });
    svr_.Post("/stall/v1/completions", [=](const httplib::Request&, httplib::Response& res) { stream(res, 1); });
    svr_.Post("/nodone/v1/completions", [=](const httplib::Request&, httplib::Response& res) { stream(res, 2); });
    svr_.Post("/fail/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content("{\"error\": {\"message\": \"boom\"}}", "application/json");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~BadServer() {
    svr_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

TEST(LoadRunner, MisbehavingServersAreReportedAsErrorsNotHangs) {
  BadServer bad;
  std::vector<PreparedRequest> reqs(3);
  for (auto& r : reqs) r.body = {{"prompt", "hi"}, {"max_tokens", 4}, {"stream", true}};
  const std::atomic<bool> stop{false};
  RunOptions o;
  o.concurrency = 2;
  o.timeout_s = 1.0;
  const auto t0 = std::chrono::steady_clock::now();
  const std::pair<const char*, const char*> cases[] = {
      {"/fail", "http 5xx"}, {"/drop", "connection"}, {"/stall", "timeout"}, {"/nodone", "stream"}};
  for (const auto& [prefix, kind] : cases) {
    const RunResult r = run_load(parse_url(fmt::format("http://127.0.0.1:{}{}", bad.port(), prefix)), reqs, o, stop);
    ASSERT_EQ(r.records.size(), 3u) << prefix;
    for (const auto& rec : r.records) {
      EXPECT_FALSE(rec.ok) << prefix;
      EXPECT_EQ(rec.error, kind) << prefix << ": " << rec.error_detail;
    }
  }
  // Nobody listening at all.
  const RunResult none = run_load(parse_url("http://127.0.0.1:1"), reqs, o, stop);
  for (const auto& rec : none.records) EXPECT_EQ(rec.error, "connection");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  EXPECT_THROW(parse_url("https://example.com"), Error);
}

// A server that answers the first request on each connection (kept alive) and closes the connection on the
// second one without a byte of answer: the race a client loses when a server closes an idle connection as the
// client reuses it (llama-server: 7 of 48 loadtest requests failed so within a millisecond of sending). The
// client cannot see the close coming (the socket looks alive when it sends).
class ClosesOnReuse {
 public:
  // answer_first false: every request is closed unanswered.
  explicit ClosesOnReuse(bool answer_first = true) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    listen(listener_, 16);
    socklen_t len = sizeof a;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, answer_first] {
      for (int fd; (fd = accept(listener_, nullptr, nullptr)) >= 0;) {
        for (int request = 0; request < 2 && read_request(fd); request++) {
          received_++;
          if (request == 1 || !answer_first) break;  // the reuse: closed unanswered
          const std::string body = "data: {\"choices\": [{\"text\": \"x\", \"index\": 0}]}\n\ndata: [DONE]\n\n";
          const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
                                   std::to_string(body.size()) + "\r\n\r\n";
          answered_++;  // (before the answer leaves: the client may check the count as soon as it has read it)
          (void)!write(fd, (head + body).data(), head.size() + body.size());
        }
        close(fd);
      }
    });
  }
  ~ClosesOnReuse() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  int port() const { return port_; }
  int answered() const { return answered_; }
  int received() const { return received_; }

 private:
  // One request: the head, then Content-Length bytes of body.
  static bool read_request(int fd) {
    std::string in;
    char buf[4096];
    size_t need = std::string::npos;
    while (need == std::string::npos || in.size() < need) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
      const size_t head_end = in.find("\r\n\r\n");
      if (need == std::string::npos && head_end != std::string::npos) {
        std::smatch m;
        const std::string head = in.substr(0, head_end);
        static const std::regex length("Content-Length: ([0-9]+)", std::regex::icase);
        need = head_end + 4 + (std::regex_search(head, m, length) ? std::stoul(m[1]) : 0);
      }
    }
    return true;
  }
  int listener_ = -1, port_ = 0;
  std::atomic<int> answered_{0}, received_{0};
  std::thread thread_;
};

// Such a failure (before any byte of an answer, on a reused connection) means the request never reached the
// server: the client reconnects and resends it once instead of counting a connection error against the server.
TEST(LoadClient, ResendsARequestWhoseKeptAliveConnectionTheServerClosedUnanswered) {
  ClosesOnReuse server;
  LoadClient client(parse_url(fmt::format("http://127.0.0.1:{}", server.port())), 10.0);
  const nlohmann::json body = {{"prompt", "Once upon a time"}, {"max_tokens", 2}, {"stream", true}};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; i++) {
    const RequestRecord r = client.stream("/v1/completions", body, t0);
    EXPECT_TRUE(r.ok) << i << ": " << r.error << " " << r.error_detail;
  }
  EXPECT_EQ(server.answered(), 3);  // the 2nd and 3rd on a fresh connection, after the reused one was closed on them
  EXPECT_EQ(server.received(), 5);
  // A fresh connection failing so is not retried: that is the server's failure, reported.
  ClosesOnReuse never(false);
  LoadClient fresh(parse_url(fmt::format("http://127.0.0.1:{}", never.port())), 10.0);
  const RequestRecord r = fresh.stream("/v1/completions", body, t0);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "connection");
  EXPECT_EQ(never.received(), 1);
}

std::string run_tool(const std::vector<std::string>& args, int* exit_code) {
  test::TempDir d;
  std::string cmd = KESTREL_BINARY;
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " > " + d.file("out") + " 2>&1";
  const int st = std::system(cmd.c_str());
  *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
  return test::read_text(d.file("out"));
}

TEST(LoadTest, AgainstARealServerWithExactLengthsPrioritiesAndASweep) {
  test::ServerProcess s({"-m", test::shared("models/stories260K.gguf"), "-c", "256"});
  ASSERT_NE(s.port(), 0);
  test::TempDir d;
  const std::string url = fmt::format("http://127.0.0.1:{}", s.port());
  int code = 0;
  std::string out = run_tool({"loadtest", "--url", url, "--concurrency", "4", "--num-prompts", "20", "--input-len",
                              "24", "--output-len", "16", "--priority-mix", "0:0.5,-1:0.5", "--json", d.file("r.json"),
                              "--server-pid", std::to_string(s.pid()), "--slo", "ttft:10000",
                              // greedy: the same text every run (sampled, a token whose text is held back
                              // — a lone UTF-8 byte, a control token under ignore_eos — streams no chunk)
                              "--temperature", "0"},
                             &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("exactly 24 tokens"));
  EXPECT_THAT(out, HasSubstr("Successful requests:                              20"));
  EXPECT_THAT(out, HasSubstr("priority -1"));
  EXPECT_THAT(out, HasSubstr("peak resident memory"));
  const json j = json::parse(test::read_text(d.file("r.json")));
  const json& pt = j["points"][0];
  EXPECT_EQ(pt["summary"]["completed"], 20);
  EXPECT_EQ(pt["summary"]["slo_met"], 20);
  ASSERT_EQ(pt["requests"].size(), 20u);
  for (const auto& r : pt["requests"]) {
    EXPECT_TRUE(r["ok"].get<bool>());
    EXPECT_EQ(r["prompt_tokens"], 24);  // exact, as the server counted it
    EXPECT_EQ(r["output_tokens"], 16);  // ignore_eos honoured
    EXPECT_EQ(r["itl_s"].size(), 15u);  // one chunk per token
    EXPECT_LE(r["ttft_s"].get<double>(), r["e2e_s"].get<double>());
  }
  // A sweep over client counts, with the latency-vs-load plot.
  out = run_tool({"loadtest", "--url", url, "--api", "chat", "--sweep-concurrency", "1,4", "--num-prompts", "8",
                  "--input-len", "30", "--output-len", "8", "--plot", d.file("p.svg"), "--shared-prefix", "20"},
                 &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("| c=1 |"));
  EXPECT_THAT(out, HasSubstr("| c=4 |"));
  const std::string svg = test::read_text(d.file("p.svg"));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("TTFT p99"));
  // Bad flags are clear errors.
  out = run_tool({"loadtest", "--url", "ftp://x"}, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("is not http://HOST[:PORT]"));
  out = run_tool({"loadtest", "--url", url, "--slo", "speed:3"}, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("--slo entry 'speed:3'"));
  out = run_tool({"loadtest", "--url", url, "--temperature", "3"}, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("--temperature"));
}

}  // namespace
}  // namespace kestrel
