// API keys, the Host allow-list and CORS, as pure decisions on requests.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serving/http/access_policy.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

using ::testing::HasSubstr;

HttpRequest request(std::string method, std::string path, Headers headers) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.headers = std::move(headers);
  return r;
}

std::string header_of(const HttpResponse& r, const std::string& name) {
  for (const auto& [n, v] : r.headers)
    if (iequals_ascii(n, name)) return v;
  return "";
}

TEST(AccessPolicy, OpenByDefault) {
  const AccessPolicy open({});
  EXPECT_FALSE(open.check(request("POST", "/v1/completions", {{"Host", "anything"}})));
}

TEST(AccessPolicy, ApiKeysAreBearerTokensAndHealthStaysOpen) {
  AccessConfig c;
  c.api_keys = {"sk-one", "sk-two"};
  const AccessPolicy p(c);
  auto denied = p.check(request("POST", "/v1/chat/completions", {{"Host", "h"}}));
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(header_of(*denied, "WWW-Authenticate"), "Bearer");
  EXPECT_EQ(json::parse(denied->body)["error"]["code"], "invalid_api_key");
  EXPECT_THAT(denied->body, HasSubstr("Authorization: Bearer"));

  for (const char* wrong : {"Bearer sk-three", "Bearer sk-on", "Bearer sk-one2", "Basic sk-one", "sk-one", "Bearer "}) {
    denied = p.check(request("POST", "/v1/completions", {{"Authorization", wrong}}));
    ASSERT_TRUE(denied) << wrong;
    EXPECT_EQ(denied->status, 401) << wrong;
    EXPECT_THAT(denied->body, HasSubstr("not valid")) << wrong;
  }
  EXPECT_FALSE(p.check(request("POST", "/v1/completions", {{"Authorization", "Bearer sk-two"}})));
  EXPECT_FALSE(p.check(request("POST", "/v1/completions", {{"authorization", "bearer sk-one "}})));
  EXPECT_FALSE(p.check(request("GET", "/health", {})));
  EXPECT_FALSE(p.check(request("GET", "/metrics", {})));

  c.protect_metrics = true;
  const AccessPolicy strict(c);
  EXPECT_TRUE(strict.check(request("GET", "/metrics", {})));
  EXPECT_FALSE(strict.check(request("GET", "/metrics", {{"Authorization", "Bearer sk-one"}})));
  EXPECT_FALSE(strict.check(request("GET", "/health", {})));
}

TEST(AccessPolicy, HostsOutsideTheAllowListAre403) {
  AccessConfig c;
  c.allowed_hosts = {"localhost", "api.example.com:443"};
  const AccessPolicy p(c);
  EXPECT_FALSE(p.check(request("GET", "/health", {{"Host", "localhost:8080"}})));
  EXPECT_FALSE(p.check(request("GET", "/health", {{"Host", "LOCALHOST"}})));
  EXPECT_FALSE(p.check(request("GET", "/health", {{"Host", "api.example.com:443"}})));
  auto denied = p.check(request("GET", "/health", {{"Host", "evil.example:8080"}}));
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_THAT(denied->body, HasSubstr("Host 'evil.example:8080' is not served here"));
  EXPECT_TRUE(p.check(request("GET", "/health", {})));  // HTTP/1.0 without Host: not on the list either
}

TEST(AccessPolicy, CorsPreflightsAreAnsweredForAllowedOriginsOnly) {
  AccessConfig c;
  c.cors_origins = {"https://app.example"};
  c.api_keys = {"k"};
  const AccessPolicy p(c);
  const Headers preflight{{"Origin", "https://app.example"},
                          {"Access-Control-Request-Method", "POST"},
                          {"Access-Control-Request-Headers", "authorization, content-type"}};
  auto r = p.check(request("OPTIONS", "/v1/chat/completions", preflight));  // no key needed for a preflight
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(header_of(*r, "Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(header_of(*r, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_THAT(header_of(*r, "Access-Control-Allow-Methods"), HasSubstr("POST"));

  r = p.check(request("OPTIONS", "/v1/chat/completions",
                      {{"Origin", "https://evil.example"}, {"Access-Control-Request-Method", "POST"}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(header_of(*r, "Access-Control-Allow-Origin"), "");

  HttpResponse answer = json_response("{}");
  p.decorate(request("POST", "/v1/completions", {{"Origin", "https://app.example"}}), answer);
  EXPECT_EQ(header_of(answer, "Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(header_of(answer, "Vary"), "Origin");
  HttpResponse other = json_response("{}");
  p.decorate(request("POST", "/v1/completions", {{"Origin", "https://evil.example"}}), other);
  EXPECT_TRUE(other.headers.empty());
  // A 401 carries CORS headers too, so the browser can show it.
  r = p.check(request("POST", "/v1/completions", {{"Origin", "https://app.example"}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(header_of(*r, "Access-Control-Allow-Origin"), "https://app.example");
}

TEST(AccessPolicy, KeyFilesSkipCommentsAndBlankLinesAndMustHoldAKey) {
  test::TempDir dir;
  const std::string path = dir.file("keys");
  std::ofstream(path) << "# team keys\n\n  sk-a  \nsk-b\r\n";
  EXPECT_EQ(read_api_key_file(path), (std::vector<std::string>{"sk-a", "sk-b"}));
  std::ofstream(path) << "# nothing\n";
  EXPECT_THROW(read_api_key_file(path), Error);
  EXPECT_THROW(read_api_key_file(dir.file("missing")), Error);
}

}  // namespace
}  // namespace kestrel
