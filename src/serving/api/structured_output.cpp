#include "serving/api/structured_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "grammar/grammar_source.h"
#include "grammar/json_schema_grammar.h"
#include "serving/api/openai_api.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

std::shared_ptr<const Grammar> compiled(const std::string& param, const std::function<std::shared_ptr<const Grammar>()>& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw bad_request(param, e.what());
  }
}

std::shared_ptr<const Grammar> from_response_format(const ojson& rf) {
  if (!rf.is_object()) throw bad_request("response_format", "'response_format' must be an object");
  if (!rf.contains("type") || !rf["type"].is_string())
    throw bad_request("response_format.type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string type = rf["type"].get<std::string>();
  auto only = [&](std::initializer_list<const char*> keys, const ojson& obj, const std::string& where) {
    for (const auto& [k, v] : obj.items())
      if (std::none_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; }))
        throw bad_request(where + "." + k, fmt::format("unknown field '{}.{}'", where, k));
  };
  if (type == "text") {
    only({"type"}, rf, "response_format");
    return nullptr;
  }
  if (type == "json_object") {
    // llama.cpp's extension: a schema given here too.
    only({"type", "schema"}, rf, "response_format");
    if (rf.contains("schema"))
      return compiled("response_format.schema", [&] { return compile_json_schema(rf["schema"], "response_format.schema"); });
    return compiled("response_format", [] { return compile_gbnf(json_object_gbnf(), "response_format"); });
  }
  if (type == "json_schema") {
    only({"type", "json_schema"}, rf, "response_format");
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
      throw bad_request("response_format.json_schema", "'response_format.json_schema' must be an object");
    const ojson& js = rf["json_schema"];
    only({"name", "description", "schema", "strict"}, js, "response_format.json_schema");
    if (js.contains("name") && !js["name"].is_string())
      throw bad_request("response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
    // strict or not, the output is held to the schema: decoding cannot leave it.
    if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
      throw bad_request("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
    const std::string where = "response_format.json_schema.schema";
    if (!js.contains("schema"))
      return compiled(where, [] { return compile_gbnf(json_object_gbnf(), "response_format"); });
    return compiled(where, [&] { return compile_json_schema(js["schema"], where); });
  }
  throw bad_request("response_format.type",
                    fmt::format("'response_format.type' \"{}\" is not one of \"text\", \"json_object\", \"json_schema\"", type));
}

}  // namespace

std::shared_ptr<const Grammar> requested_grammar(const ojson& body, const std::string& tool_grammar) {
  const bool has_format = body.contains("response_format") && !body["response_format"].is_null();
  const bool has_grammar = body.contains("grammar") && !body["grammar"].is_null();
  if (has_format && has_grammar)
    throw bad_request("grammar", "give 'response_format' or 'grammar', not both");
  if (!tool_grammar.empty()) {
    if (has_format || has_grammar)
      throw bad_request("tool_choice", "'tool_choice' \"required\" or a named function already constrains the reply: "
                                       "no 'response_format' or 'grammar' with it");
    return compiled("tool_choice", [&] { return compile_gbnf(tool_grammar, "tool_choice"); });
  }
  if (has_grammar) {
    if (!body["grammar"].is_string()) throw bad_request("grammar", "'grammar' must be a string (GBNF)");
    return compiled("grammar", [&] { return compile_gbnf(body["grammar"].get<std::string>(), "grammar"); });
  }
  if (has_format) return from_response_format(body["response_format"]);
  return nullptr;
}

}  // namespace kestrel
