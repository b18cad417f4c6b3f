#pragma once
// JSON Schema -> GBNF: a grammar whose every match is a JSON text that
// validates against the schema. Keywords that would constrain the value in a
// way the grammar cannot express (pattern, minimum, multipleOf, allOf, ...)
// are refused with an Error naming them and where they are — never dropped,
// which would let through values the schema forbids. Annotations (title,
// description, default, examples, ...) change nothing and are accepted.
// Properties come in the schema's order; optional ones may be left out; no
// property the schema does not name is generated (additionalProperties only
// allows more, so leaving them out is always valid).
#include <nlohmann/json.hpp>
#include <string>

namespace kestrel {

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema);
// The same, for a grammar holding several schemas: the expression matching
// the schema's values; its rules (names starting with prefix) are appended to
// rules. The grammar needs json_grammar_primitives() once, and a root.
std::string json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix, std::string& rules);
std::string json_grammar_primitives();
// Any JSON object (OpenAI's response_format "json_object").
std::string json_object_gbnf();
// A GBNF string literal for these bytes ("..." with escapes).
std::string gbnf_literal(const std::string& text);

}  // namespace kestrel
