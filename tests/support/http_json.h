#pragma once
// A JSON request that must succeed, for end-to-end tests of the server: the
// parsed answer, or null with a test failure naming the body and the reply.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kestrel::test {

inline nlohmann::json post_ok(httplib::Client& c, const std::string& path, const nlohmann::json& body) {
  auto r = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response") << " for " << body.dump();
  return r && r->status == 200 ? nlohmann::json::parse(r->body) : nlohmann::json();
}

// The payloads of a server-sent-events body's "data: " lines, in order.
inline std::vector<std::string> sse_data_lines(const std::string& body) {
  std::vector<std::string> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    at += 6;
    const size_t end = body.find('\n', at);
    out.push_back(body.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end;
  }
  return out;
}

}  // namespace kestrel::test
