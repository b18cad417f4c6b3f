// Request bodies are parsed with bounds checked while they are read: deep
// nesting and huge value counts are 400s naming the problem, before the
// document is built.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "serving/api/openai_api.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string error_of(const std::string& body) {
  try {
    parse_body(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.message;
  }
  return "";
}

TEST(OpenAiBody, NestingAndSizeAreBoundedWhileParsing) {
  EXPECT_EQ(error_of("{\"a\": " + nested(kMaxJsonDepth - 1) + "}"), "");  // at the limit
  EXPECT_THAT(error_of("{\"a\": " + nested(kMaxJsonDepth) + "}"), HasSubstr("deeper than 64 levels"));
  EXPECT_THAT(error_of(nested(1000000)), HasSubstr("deeper than 64 levels"));  // the 2 MB attack
  std::string many = "[";
  for (int64_t i = 0; i <= kMaxJsonValues; i++) many += i ? ",0" : "0";
  EXPECT_THAT(error_of(many + "]"), HasSubstr("more than 1048576 JSON values"));
  EXPECT_THAT(error_of("{\"a\": [1, 2"), HasSubstr("not valid JSON"));
  EXPECT_EQ(parse_body("{\"prompt\": \"hi\", \"n\": [1, {\"x\": null}]}")["n"][1]["x"], nullptr);
}

}  // namespace
}  // namespace kestrel
