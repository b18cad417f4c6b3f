#pragma once
// The grammar a completion request asks for: OpenAI's response_format
// (json_object, json_schema with an optional strict), or llama.cpp's
// `grammar` (GBNF text). Compiled once per request; every error is a 400
// naming the field (and, for a schema, the keyword and where it is).
#include <memory>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace kestrel {

// Null when the body asks for no constraint. Throws ApiError.
std::shared_ptr<const Grammar> requested_grammar(const nlohmann::ordered_json& body);

}  // namespace kestrel
