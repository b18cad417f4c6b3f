#pragma once
// The text of a streamed OpenAI answer (server-sent events): each chunk's completion text or chat delta
// content joined, whether [DONE] ended it, and its last JSON chunk.
#include <nlohmann/json.hpp>
#include <string>

namespace kestrel::test {

inline std::string sse_text(const std::string& raw, bool* done = nullptr, nlohmann::json* last = nullptr) {
  std::string text;
  bool saw_done = false;
  for (size_t at = 0; (at = raw.find("data: ", at)) != std::string::npos;) {
    const size_t end = raw.find("\n\n", at);
    const std::string data = raw.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      saw_done = true;
      continue;
    }
    const nlohmann::json chunk = nlohmann::json::parse(data);
    if (chunk["choices"].empty()) continue;
    const nlohmann::json& ch = chunk["choices"][0];
    if (ch.contains("text")) text += ch["text"].get<std::string>();
    if (ch.contains("delta") && ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (last) *last = chunk;
  }
  if (done) *done = saw_done;
  return text;
}

}  // namespace kestrel::test
