#include "chat/reply_parser.h"

namespace kestrel {

ReplyParser::ReplyParser(std::optional<bool> reasoning, ToolCallFormat tools, bool parallel, ReasoningTags tags)
    : parallel_(parallel) {
  if (tools == ToolCallFormat::Harmony) {
    harmony_.emplace();
    split_ = reasoning.has_value();
    return;
  }
  if (reasoning) reasoning_.emplace(*reasoning, tags);
  if (tools != ToolCallFormat::None) tools_.emplace(tools);
}

ReplyPart ReplyParser::push(std::string_view text) {
  ReplyPart out;
  if (harmony_) {
    HarmonyPart h = harmony_->push(text);
    out.reasoning = split_ ? std::move(h.reasoning) : std::string();
    out.content = split_ ? std::move(h.content) : h.reasoning + h.content;
    return out;
  }
  std::string content(text);
  if (reasoning_) {
    SplitText s = reasoning_->push(text);
    out.reasoning = std::move(s.reasoning);
    content = std::move(s.content);
  }
  out.content = tools_ ? tools_->push(content) : std::move(content);
  return out;
}

ReplyPart ReplyParser::finish(std::string_view last_text) {
  ReplyPart out = push(last_text);
  if (harmony_) {
    HarmonyPart h = harmony_->finish();
    out.reasoning += split_ ? h.reasoning : std::string();
    out.content += split_ ? h.content : h.reasoning + h.content;
    out.calls = std::move(h.calls);
    if (!parallel_ && out.calls.size() > 1) out.calls.resize(1);
    return out;
  }
  std::string content;
  if (reasoning_) {
    SplitText s = reasoning_->finish();
    out.reasoning += s.reasoning;
    content = std::move(s.content);
  }
  if (!tools_) {
    out.content += content;
    return out;
  }
  out.content += tools_->push(content);
  ToolCallReply r = tools_->finish();
  if (r.content) out.content += *r.content;
  out.calls = std::move(r.calls);
  if (!parallel_ && out.calls.size() > 1) out.calls.resize(1);  // parallel_tool_calls: false
  return out;
}

}  // namespace kestrel
