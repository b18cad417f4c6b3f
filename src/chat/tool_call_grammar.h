#pragma once
// The grammar of a reply that is nothing but tool calls, written the way the
// model's format writes them (tool_calls.h), each call's arguments held to
// its function's parameters schema: tool_choice "required" or a named
// function becomes a guarantee instead of a hope. Marker texts that are
// control tokens in a vocabulary are spelt in text tokens here (the reply
// parser reads text, so the calls parse the same).
#include <nlohmann/json.hpp>
#include <string>

#include "chat/tool_calls.h"

namespace kestrel {

// tools: OpenAI's [{"type": "function", "function": {...}}] (checked). only:
// a function name ("": any). parallel: one call or several. Throws Error
// naming the tool whose parameters cannot be enforced.
std::string tool_call_gbnf(ToolCallFormat format, const nlohmann::ordered_json& tools, const std::string& only,
                           bool parallel);

}  // namespace kestrel
