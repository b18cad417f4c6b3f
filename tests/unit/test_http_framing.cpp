// Strict request framing (RFC 9112) on parsed heads: what a smuggling proxy
// could read differently is refused with the status the RFC gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "serving/http/http_framing.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

std::optional<FramingProblem> check(Headers fields, int version = 11,
                                    std::string_view target = "/v1/completions") {
  return framing_problem({version, target, &fields}, 100);
}

TEST(HttpFraming, AnOrdinaryRequestPasses) {
  EXPECT_FALSE(check({{"Host", "localhost:8080"}, {"Content-Length", "42"}, {"Content-Type", "application/json"}}));
  EXPECT_FALSE(check({{"host", "h"}, {"transfer-encoding", "Chunked"}}));
  EXPECT_FALSE(check({}, 10, "/health"));  // HTTP/1.0 needs no Host
  EXPECT_FALSE(check({{"Host", "h"}}, 11, "*"));
  EXPECT_FALSE(check({{"Host", "h"}}, 11, "http://h:1/health?x=1"));
}

TEST(HttpFraming, AmbiguousLengthsAreRefused) {
  auto p = check({{"Host", "h"}, {"Content-Length", "5"}, {"Content-Length", "5"}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 400);
  EXPECT_THAT(p->message, HasSubstr("more than one Content-Length"));
  for (const char* bad : {"+65", "-1", " 5", "5,5", "0x10", "", "1234567890123456789"}) {
    p = check({{"Host", "h"}, {"Content-Length", bad}});
    ASSERT_TRUE(p) << bad;
    EXPECT_EQ(p->status, 400);
    EXPECT_THAT(p->message, HasSubstr("is not a decimal number")) << bad;
  }
  p = check({{"Host", "h"}, {"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}});
  ASSERT_TRUE(p);
  EXPECT_THAT(p->message, HasSubstr("both Content-Length and Transfer-Encoding"));
  p = check({{"Host", "h"}, {"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}});
  ASSERT_TRUE(p);
  EXPECT_THAT(p->message, HasSubstr("more than one Transfer-Encoding"));
  p = check({{"Transfer-Encoding", "chunked"}}, 10);
  ASSERT_TRUE(p);
  EXPECT_THAT(p->message, HasSubstr("HTTP/1.0"));
}

TEST(HttpFraming, UnknownCodingsAre501AndVersionsBeyondOneOne505) {
  auto p = check({{"Host", "h"}, {"Transfer-Encoding", "gzip, chunked"}});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 501);
  p = check({{"Host", "h"}}, 20);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 505);
}

TEST(HttpFraming, HostMustBeThereOnceAndValuesHoldNoControlBytes) {
  auto p = check({});
  ASSERT_TRUE(p);
  EXPECT_THAT(p->message, HasSubstr("without Host"));
  p = check({{"Host", "a"}, {"Host", "b"}});
  ASSERT_TRUE(p);
  EXPECT_THAT(p->message, HasSubstr("more than one Host"));
  p = check({{"Host", "h"}, {"X-A", std::string("a\0b", 3)}});
  ASSERT_TRUE(p);
  EXPECT_THAT(p->message, HasSubstr("'X-A' holds a control character"));
  EXPECT_FALSE(check({{"Host", "h"}, {"X-A", "tab\there"}}));
}

TEST(HttpFraming, TooManyFieldsAre431AndTargetsMustBePaths) {
  Headers many{{"Host", "h"}};
  for (int i = 0; i < 100; i++) many.emplace_back("X-" + std::to_string(i), "v");
  auto p = check(many);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 431);
  p = check({{"Host", "h"}}, 11, "health");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 400);
}

TEST(HttpFraming, TargetPathDropsQueryAndAuthority) {
  EXPECT_EQ(target_path("/v1/models?x=1"), "/v1/models");
  EXPECT_EQ(target_path("/health#frag"), "/health");
  EXPECT_EQ(target_path("http://h:8080/metrics?a"), "/metrics");
  EXPECT_EQ(target_path("https://h"), "/");
  EXPECT_EQ(target_path("*"), "*");
}

TEST(HttpFraming, TheQueryStringAndItsParameters) {
  EXPECT_EQ(target_query("/slots/0?action=save#x"), "action=save");
  EXPECT_EQ(target_query("/health"), "");
  HttpRequest r;
  r.query = target_query("/slots/1?a=1&action=re%73tore&name=a+b%2Fc&flag");
  EXPECT_EQ(r.query_param("action"), "restore");
  EXPECT_EQ(r.query_param("name"), "a b/c");
  EXPECT_EQ(r.query_param("a"), "1");
  EXPECT_EQ(r.query_param("flag"), "");
  EXPECT_EQ(r.query_param("missing"), "");
  r.query = "x=%zz%4";  // malformed escapes stay as they are
  EXPECT_EQ(r.query_param("x"), "%zz%4");
}

}  // namespace
}  // namespace kestrel
