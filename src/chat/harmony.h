#pragma once
// OpenAI's harmony format (gpt-oss): a reply is a run of messages, each a header and a body,
//
//   [<|start|>assistant][ to=RECIPIENT]<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>TYPE | TYPE]<|message|>BODY
//   ended by <|end|>, <|return|>, <|call|> (or the next <|start|>),
//
// read as vLLM's and llama.cpp's harmony parsers do: the analysis channel is the reasoning, the final channel
// (and commentary with no recipient: preambles the user sees) the content, and a message to functions.NAME
// a tool call whose body is its JSON arguments. Text before any header (a reply that is not harmony) is content.
// Works on text as it streams: bodies are released as they come, a marker split across pieces held back.
#include <string>
#include <string_view>
#include <vector>

#include "chat/tool_calls.h"

namespace kestrel {

struct HarmonyPart {
  std::string reasoning, content;
  std::vector<ToolCall> calls;  // only from finish()
};

class HarmonyStream {
 public:
  HarmonyPart push(std::string_view text);
  // The end: the rest, and the calls (a call whose body is not a JSON object stays content, whole).
  HarmonyPart finish();

 private:
  enum class Body { Reasoning, Content, Call };
  void run(HarmonyPart& out, bool end);
  void emit(HarmonyPart& out, std::string_view text);
  void end_body(HarmonyPart& out);
  std::string held_;
  bool in_body_ = false;
  Body body_ = Body::Content;
  std::string name_, args_;
  std::vector<ToolCall> calls_;
};

}  // namespace kestrel
