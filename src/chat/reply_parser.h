#pragma once
// A chat reply as the client receives it: the model's text split into
// reasoning (<think>…</think>, --reasoning-format), content, and tool calls
// (when the request offered tools), incrementally for streams. One parser per
// reply; push() what the engine releases, finish() at the end.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/harmony.h"
#include "chat/reasoning.h"
#include "chat/tool_calls.h"

namespace kestrel {

struct ReplyPart {
  std::string reasoning, content;
  std::vector<ToolCall> calls;  // only from finish()
};

class ReplyParser {
 public:
  // reasoning: nullopt leaves <think> text in the content; else whether the
  // prompt opened a <think>. tools: the format calls are read in (None: no
  // tools offered; harmony: the reply's channels, tools or not, its analysis
  // the reasoning — or content, with reasoning nullopt). parallel: false keeps only the first call.
  ReplyParser(std::optional<bool> reasoning, ToolCallFormat tools, bool parallel, ReasoningTags tags = kThinkTags);
  ReplyPart push(std::string_view text);
  // The last piece of text (may be empty) and the end: everything held back, and the calls.
  ReplyPart finish(std::string_view last_text = {});

 private:
  std::optional<ReasoningSplitter> reasoning_;
  std::optional<ToolCallStream> tools_;
  std::optional<HarmonyStream> harmony_;
  bool split_ = false;  // harmony: analysis as reasoning
  bool parallel_;
};

}  // namespace kestrel
