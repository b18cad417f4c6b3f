#pragma once
// A JSON request that must succeed, for end-to-end tests of the server: the
// parsed answer, or null with a test failure naming the body and the reply.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>

namespace kestrel::test {

inline nlohmann::json post_ok(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
  auto r = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response") << " for " << body.dump();
  return r && r->status == 200 ? nlohmann::json::parse(r->body) : nlohmann::json();
}

}  // namespace kestrel::test
