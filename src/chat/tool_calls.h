#pragma once
// A model's reply read for function calls, in the formats the supported
// families are trained to write (the same ones vLLM's and llama.cpp's parsers
// read):
//   hermes       <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (Qwen2.5/3, QwQ, Hermes, our chatml)
//   llama3_json  {"name": ..., "parameters": {...}}, optionally after <|python_tag|>, several joined by ';'
//   deepseek     <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>  (V3, R1; V3.1: NAME<｜tool▁sep｜>{...})
//   mistral      [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]  or  [TOOL_CALLS]NAME[ARGS]{...}
//   dsml         <｜DSML｜function_calls> (V3.2) or <｜DSML｜tool_calls> (V4) holding
//                <｜DSML｜invoke name="NAME"><｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>
//                ...</｜DSML｜invoke>: string="true" values as written, the others JSON
//   glm          <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call> (GLM-4.5/4.6/4.7, with
//                or without newlines between): values that read as JSON taken as JSON, the others as strings
//   harmony      (gpt-oss) a message to functions.NAME: [ to=functions.NAME]<|channel|>commentary[ to=functions.NAME]
//                [<|constrain|>]json<|message|>{...}<|call|>; the reply's channels split by chat/harmony.h
//   gemma4       <|tool_call>call:NAME{key:value,...}<tool_call|> (Gemma 4): keys bare, strings between <|"|>,
//                numbers, true/false/null, [...] and {...} of the same; read into JSON
// A reply whose calls do not parse stays content, whole: nothing is dropped.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

enum class ToolCallFormat { None, Hermes, Llama3Json, DeepSeek, Mistral, Dsml, Harmony, Glm, Gemma4, QwenXml };

// "hermes", ... ; nullopt for an unknown name. "none" is None.
std::optional<ToolCallFormat> tool_call_format_from_name(const std::string& name);
const char* tool_call_format_name(ToolCallFormat f);
const char* tool_call_format_names();  // for messages
// The format a chat template renders tool calls in, from its markers (None if it shows none).
ToolCallFormat detect_tool_call_format(std::string_view template_source);

struct ToolCall {
  std::string id;         // "call_…" (Mistral: 9 letters and digits, as its template requires)
  std::string name;
  std::string arguments;  // JSON text of an object, as the OpenAI API carries it
};

struct ToolCallReply {
  std::optional<std::string> content;  // the text around the calls; nullopt when there is none
  std::vector<ToolCall> calls;
};

// A fresh id for a call: "call_" and 24 letters and digits (Mistral: 9 letters and digits, as its template requires).
std::string new_call_id(ToolCallFormat f);

// The marker texts a format's calls are written with (the reply parser must see
// them: where a vocabulary has them as control tokens, they are rendered).
std::vector<std::string_view> tool_call_markers(ToolCallFormat format);

// The whole reply read at once. Ids are drawn fresh for each call.
ToolCallReply parse_tool_calls(ToolCallFormat format, std::string_view text);

// The same on a streamed reply: text before anything that may begin a call
// is released as content at once; from there on it is held and read at the end.
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format) : format_(format) {}
  // Content that can be released now.
  std::string push(std::string_view text);
  // The end: the rest of the content, and the calls.
  ToolCallReply finish();

 private:
  ToolCallFormat format_;
  std::string held_;
  bool holding_ = false;  // a call may have begun
  bool any_text_ = false;  // non-space text was released (llama3_json calls are a whole reply)
};

}  // namespace kestrel
