#pragma once
// The grammar of a reply that is nothing but tool calls, written the way the
// model's format writes them (tool_calls.h), each call's arguments held to
// its function's parameters schema: tool_choice "required" or a named
// function becomes a guarantee instead of a hope. A marker that is a control
// token in a vocabulary ([TOOL_CALLS]) is matched by its spelling: the
// request writes it into its text, so the mask allows the token itself.
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
