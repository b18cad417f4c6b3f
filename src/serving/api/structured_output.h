#pragma once
// The grammar a completion request asks for: OpenAI's response_format
// (json_object, json_schema with an optional strict), or llama.cpp's
// `grammar` (GBNF text). Compiled once per request; every error is a 400
// naming the field (and, for a schema, the keyword and where it is).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"

namespace kestrel {

// Null when the body asks for no constraint. tool_grammar: the GBNF of a
// forced tool call (tool_choice "required" or named; "" for none), which
// excludes the other two. Throws ApiError.
std::shared_ptr<const Grammar> requested_grammar(const nlohmann::ordered_json& body, const std::string& tool_grammar);

}  // namespace kestrel
