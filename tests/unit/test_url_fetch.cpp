// serve --allow-media-urls' fetcher (serving/http/url_fetch.h) against a local HTTP server: the body of a 200, a
// redirect followed (relative and absolute), and each refusal named: too many redirects, a body over the limit
// (announced or not), a deadline over a slow answer, another status, a bad URL, an unreachable TLS host.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>

#include "serving/http/url_fetch.h"

namespace kestrel {
namespace url_fetch_test {

class Host {
 public:
  Host() {
    svr_.Get("/ok", [](const httplib::Request&, httplib::Response& res) { res.set_content("0123456789", "image/png"); });
    svr_.Get("/rel", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ok", 301); });
    svr_.Get("/abs", [this](const httplib::Request&, httplib::Response& res) { res.set_redirect(url("/rel"), 307); });
    svr_.Get("/loop", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/loop", 302); });
    svr_.Get("/big", [](const httplib::Request&, httplib::Response& res) { res.set_content(std::string(101, 'x'), "image/png"); });
    svr_.Get("/chunked", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("image/png", [](size_t offset, httplib::DataSink& sink) {
        if (offset >= 1000) {
          sink.done();
          return true;
        }
        const std::string part(50, 'y');
        sink.write(part.data(), part.size());
        return true;
      });
    });
    svr_.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      res.set_content("late", "image/png");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~Host() {
    svr_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

 private:
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

std::string error_of(const std::string& url, const UrlFetchLimits& l) {
  try {
    fetch_url(url, l);
  } catch (const UrlFetchError& e) {
    return e.what();
  }
  return "";
}

TEST(UrlFetch, BodiesRedirectsAndEveryRefusalNamed) {
  Host host;
  UrlFetchLimits l;
  l.max_bytes = 100;
  l.timeout_s = 0.5;
  EXPECT_EQ(fetch_url(host.url("/ok"), l), "0123456789");
  EXPECT_EQ(fetch_url(host.url("/rel"), l), "0123456789");
  EXPECT_EQ(fetch_url(host.url("/abs"), l), "0123456789");  // absolute, then relative: two hops
  EXPECT_NE(error_of(host.url("/loop"), l).find("more than 3 redirects"), std::string::npos);
  EXPECT_NE(error_of(host.url("/big"), l).find("more than 100 bytes"), std::string::npos) << error_of(host.url("/big"), l);
  EXPECT_NE(error_of(host.url("/chunked"), l).find("more than 100 bytes"), std::string::npos)
      << error_of(host.url("/chunked"), l);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(error_of(host.url("/slow"), l).find("no answer within 0.5 s"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.4);  // not the host's 1.5 s
  EXPECT_NE(error_of(host.url("/missing"), l).find("answered 404"), std::string::npos);
  EXPECT_NE(error_of("ftp://127.0.0.1/x", l).find("not an http:// or https:// URL"), std::string::npos);
  EXPECT_NE(error_of("http://user:pw@127.0.0.1/x", l).find("credentials"), std::string::npos);
  EXPECT_NE(error_of("https://127.0.0.1:1/x", l), "");  // nothing listens: refused, named
}

}  // namespace url_fetch_test
}  // namespace kestrel
