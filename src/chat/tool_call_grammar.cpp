#include "chat/tool_call_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "grammar/json_schema_grammar.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

// A call's parameters object (what every format but JSON writes key by key) and its required keys.
std::set<std::string> required_keys(size_t i, const ojson& params, const char* format) {
  if (params.value("type", "object") != "object")
    throw Error(fmt::format("tools[{}].function.parameters: {} calls take an object of parameters", i, format));
  std::set<std::string> required;
  if (params.contains("required"))
    for (const auto& r : params["required"]) required.insert(r.get<std::string>());
  return required;
}

// A string enum's values as GBNF alternatives "a" | "b" (a value that is not a string: an Error naming it).
std::string enum_alternatives(size_t i, const std::string& key, const ojson& schema) {
  std::string alts;
  for (const auto& e : schema["enum"]) {
    if (!e.is_string()) throw Error(fmt::format("tools[{}].function.parameters.properties.{}.enum: not a string", i, key));
    alts += (alts.empty() ? "" : " | ") + gbnf_literal(e.get<std::string>());
  }
  return alts;
}

// One DSML invoke of tool i: its parameters in the schema's order (the required ones always, the others
// optional), a plain or enumerated string written as is (string="true", text without '<'), everything else
// as JSON valid against the property's schema (string="false").
std::string dsml_invoke(size_t i, const std::string& name, const ojson& params, std::string& rules) {
  const std::set<std::string> required = required_keys(i, params, "DSML");
  std::string body = gbnf_literal("<｜DSML｜invoke name=\"" + name + "\">\n");
  if (params.contains("properties")) {
    int k = 0;
    for (const auto& [key, schema] : params["properties"].items()) {
      const std::string open = "<｜DSML｜parameter name=\"" + key + "\" string=";
      std::string value;
      const bool plain_string = schema.is_object() && schema.value("type", "") == "string" &&
                                std::all_of(schema.items().begin(), schema.items().end(), [](const auto& kv) {
                                  return kv.key() == "type" || kv.key() == "description" || kv.key() == "title" ||
                                         kv.key() == "enum" || kv.key() == "examples" || kv.key() == "default";
                                });
      if (plain_string && schema.contains("enum")) {
        value = gbnf_literal(open + "\"true\">") + " ( " + enum_alternatives(i, key, schema) + " )";
      } else if (plain_string) {
        value = gbnf_literal(open + "\"true\">") + " [^<]*";
      } else {
        value = gbnf_literal(open + "\"false\">") + " " +
                json_schema_rules(schema, fmt::format("t{}-p{}-", i, k), rules);
      }
      const std::string param = value + " " + gbnf_literal("</｜DSML｜parameter>\n");
      body += required.count(key) ? " " + param : " ( " + param + " )?";
      k++;
    }
  }
  return body + " " + gbnf_literal("</｜DSML｜invoke>\n");
}

// One GLM call of tool i (GLM-4.6's layout): the name, then each parameter as an <arg_key>/<arg_value> pair in
// the schema's order (the required ones always, the others optional), a plain or enumerated string written as
// is (text without '<'), everything else as JSON valid against the property's schema.
std::string glm_call(size_t i, const std::string& name, const ojson& params, std::string& rules) {
  const std::set<std::string> required = required_keys(i, params, "GLM");
  std::string body = gbnf_literal("<tool_call>" + name);
  if (params.contains("properties")) {
    int k = 0;
    for (const auto& [key, schema] : params["properties"].items()) {
      const std::string open = "\n<arg_key>" + key + "</arg_key>\n<arg_value>";
      std::string value;
      const bool plain_string = schema.is_object() && schema.value("type", "") == "string" && !schema.contains("pattern") &&
                                !schema.contains("format") && !schema.contains("minLength") && !schema.contains("maxLength");
      if (plain_string && schema.contains("enum")) {
        value = "( " + enum_alternatives(i, key, schema) + " )";
      } else if (plain_string) {
        value = "[^<]*";
      } else {
        value = json_schema_rules(schema, fmt::format("t{}-g{}-", i, k), rules);
      }
      const std::string param = gbnf_literal(open) + " " + value + " " + gbnf_literal("</arg_value>");
      body += required.count(key) ? " " + param : " ( " + param + " )?";
      k++;
    }
  }
  return body + " " + gbnf_literal("\n</tool_call>");
}

// One Qwen3-Coder / Qwen3.5 call of tool i as the template writes it: <tool_call>\n<function=NAME>\n, each
// parameter as <parameter=KEY>\nVALUE\n</parameter>\n in the schema's order (the required ones always, the
// others optional), a plain or enumerated string as is (text without '<'), everything else as JSON valid
// against the property's schema; then </function>\n</tool_call>.
std::string qwen_call_rule(size_t i, const std::string& name, const ojson& params, std::string& rules) {
  const std::set<std::string> required = required_keys(i, params, "Qwen3-Coder");
  std::string body = gbnf_literal("<tool_call>\n<function=" + name + ">\n");
  if (params.contains("properties")) {
    int k = 0;
    for (const auto& [key, schema] : params["properties"].items()) {
      std::string value;
      const bool plain_string = schema.is_object() && schema.value("type", "") == "string" && !schema.contains("pattern") &&
                                !schema.contains("format") && !schema.contains("minLength") && !schema.contains("maxLength");
      if (plain_string && schema.contains("enum"))
        value = "( " + enum_alternatives(i, key, schema) + " )";
      else if (plain_string)
        value = "[^<]*";
      else
        value = json_schema_rules(schema, fmt::format("t{}-q{}-", i, k), rules);
      const std::string param = gbnf_literal("<parameter=" + key + ">\n") + " " + value + " " +
                                gbnf_literal("\n</parameter>\n");
      body += required.count(key) ? " " + param : " ( " + param + " )?";
      k++;
    }
  }
  return body + " " + gbnf_literal("</function>\n</tool_call>");
}

// Gemma 4's values in its own syntax (bare keys, strings between <|"|>), not held to a schema: what a nested
// object or array parameter is written with.
constexpr const char* kGemma4Values = R"(g4-value ::= g4-string | g4-dict | g4-array | json-number | json-boolean | json-null
g4-string ::= "<|\"|>" [^<]* "<|\"|>"
g4-dict ::= "{" ( g4-kv ( "," g4-kv )* )? "}"
g4-kv ::= [^:{}\[\],<]+ ":" g4-value
g4-array ::= "[" ( g4-value ( "," g4-value )* )? "]"
)";

// One Gemma 4 call of tool i as its template writes it: <|tool_call>call:NAME{...}<tool_call|> with the
// parameters in key order (the template sorts them), the required ones always and the others optional, commas
// between those present; a plain or enumerated string between <|"|> (text without '<'), a number, integer or
// boolean as JSON against its schema, anything else a Gemma 4 value (nested values are not held to the schema).
std::string gemma4_call(size_t i, const std::string& name, const ojson& params, std::string& rules) {
  const std::set<std::string> required = required_keys(i, params, "Gemma 4");
  std::map<std::string, ojson> props;  // sorted, as the template's dictsort
  if (params.contains("properties"))
    for (const auto& [key, schema] : params["properties"].items()) props.emplace(key, schema);
  std::vector<std::pair<std::string, bool>> items;  // expression, required
  int k = 0;
  for (const auto& [key, schema] : props) {
    const std::string type = schema.is_object() ? schema.value("type", "") : "";
    const bool string_enum =
        schema.is_object() && schema.contains("enum") && (type.empty() || type == "string") &&
        std::all_of(schema["enum"].begin(), schema["enum"].end(), [](const ojson& e) { return e.is_string(); });
    std::string value;
    if (string_enum) {
      value = gbnf_literal("<|\"|>") + " ( " + enum_alternatives(i, key, schema) + " ) " + gbnf_literal("<|\"|>");
    } else if (type == "string") {
      value = "g4-string";
    } else if (type == "number" || type == "integer" || type == "boolean") {
      value = json_schema_rules(schema, fmt::format("t{}-g{}-", i, k), rules);
    } else {
      value = "g4-value";
    }
    items.emplace_back(gbnf_literal(key + ":") + " " + value, required.count(key) > 0);
    k++;
  }
  // S(j): the items from j on, the first present without a comma; T(j): the same, each after a comma.
  const std::string prefix = fmt::format("t{}-g4", i);
  const size_t n = items.size();
  for (size_t j = n; j-- > 0;) {
    const std::string t_next = j + 1 < n ? fmt::format(" {}-t{}", prefix, j + 1) : "";
    const std::string s_next = j + 1 < n ? fmt::format("{}-s{}", prefix, j + 1) : "";
    const auto& [item, req] = items[j];
    rules += fmt::format("{}-t{} ::= {}{}\n", prefix, j,
                         req ? "\",\" " + item : "( \",\" " + item + " )?", t_next);
    if (req)
      rules += fmt::format("{}-s{} ::= {}{}\n", prefix, j, item, t_next);
    else if (s_next.empty())
      rules += fmt::format("{}-s{} ::= ( {} )?\n", prefix, j, item);
    else
      rules += fmt::format("{}-s{} ::= {}{} | {}\n", prefix, j, item, t_next, s_next);
  }
  return gbnf_literal("<|tool_call>call:" + name + "{") + (n > 0 ? " " + prefix + "-s0" : "") + " " +
         gbnf_literal("}<tool_call|>");
}

}  // namespace

std::string tool_call_gbnf(ToolCallFormat format, const ojson& tools, const std::string& only, bool parallel) {
  if (format == ToolCallFormat::None) throw Error("no tool-call format to constrain the reply to");
  std::string rules;
  std::vector<std::string> json_calls, deepseek_calls, dsml_calls, harmony_calls, args_calls, glm_calls, gemma4_calls,
      qwen_calls;
  // Llama 3's JSON calls carry "parameters"; the others "arguments".
  const std::string key = format == ToolCallFormat::Llama3Json ? "parameters" : "arguments";
  for (size_t i = 0; i < tools.size(); i++) {
    const ojson& f = tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const ojson params = f.contains("parameters") ? f["parameters"] : ojson{{"type", "object"}};
    std::string args;
    try {
      args = json_schema_rules(params, fmt::format("t{}-", i), rules);
    } catch (const Error& e) {
      throw Error(fmt::format("tools[{}].function.parameters: {}", i, e.what()));
    }
    json_calls.push_back(fmt::format("\"{{\" ws {} ws \":\" ws {} ws \",\" ws {} ws \":\" ws {} ws \"}}\"",
                                     gbnf_literal("\"name\""), gbnf_literal(ojson(name).dump()),
                                     gbnf_literal(ojson(key).dump()), args));
    deepseek_calls.push_back(fmt::format("{} \"\\n```json\\n\" {} \"\\n```\"", gbnf_literal(name), args));
    if (format == ToolCallFormat::Dsml) dsml_calls.push_back(dsml_invoke(i, name, params, rules));
    if (format == ToolCallFormat::Glm) glm_calls.push_back(glm_call(i, name, params, rules));
    if (format == ToolCallFormat::Gemma4) gemma4_calls.push_back(gemma4_call(i, name, params, rules));
    if (format == ToolCallFormat::QwenXml) qwen_calls.push_back(qwen_call_rule(i, name, params, rules));
    // Mistral's newer form (Ministral 3, Magistral, Devstral templates): [TOOL_CALLS]NAME[ARGS]{...}.
    args_calls.push_back(fmt::format("{} \"[ARGS]\" {}", gbnf_literal(name), args));
    // Harmony: the recipient, the channel and the arguments as gpt-oss's template writes a call.
    harmony_calls.push_back(fmt::format("{} {} {}", gbnf_literal(name),
                                        gbnf_literal("<|channel|>commentary json<|message|>"), args));
  }
  if (json_calls.empty()) throw Error(fmt::format("no tool is named '{}'", only));
  auto alternatives = [](const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& a : v) out += (out.empty() ? "" : " | ") + a;
    return out;
  };
  // More calls after the first (parallel_tool_calls), each after its separator.
  auto more = [&](const std::string& sep, const std::string& call) {
    return parallel ? " ( " + sep + " " + call + " )*" : std::string();
  };
  std::string root;
  switch (format) {
    case ToolCallFormat::Hermes:
      root = "root ::= hermes-call" + more("\"\\n\"", "hermes-call") + "\n" +
             "hermes-call ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
      break;
    case ToolCallFormat::Llama3Json:
      root = "root ::= call" + more("\"; \"", "call") + "\n";
      break;
    case ToolCallFormat::Mistral:
      // Either of the forms the templates write: a JSON array of calls (Mistral Small 3.x, Nemo), or each
      // call as NAME[ARGS]{...} after its own [TOOL_CALLS] (Ministral 3, Magistral, Devstral).
      root = "root ::= \"[TOOL_CALLS][\" call" + more("\", \"", "call") + " \"]\" | args-call" +
             more("\"\"", "args-call") + "\n" + "args-call ::= \"[TOOL_CALLS]\" ( " + alternatives(args_calls) + " )\n";
      break;
    case ToolCallFormat::DeepSeek:
      root = "root ::= \"<｜tool▁calls▁begin｜>\" ds-call" + std::string(parallel ? "+" : "") + " \"<｜tool▁calls▁end｜>\"\n" +
             "ds-call ::= \"<｜tool▁call▁begin｜>function<｜tool▁sep｜>\" ( " + alternatives(deepseek_calls) +
             " ) \"<｜tool▁call▁end｜>\"\n";
      break;
    case ToolCallFormat::Dsml:
      // V3.2 writes <｜DSML｜function_calls>, V4 <｜DSML｜tool_calls>: either block, the model's own.
      root = "root ::= ( \"<｜DSML｜function_calls>\\n\" dsml-calls \"</｜DSML｜function_calls>\" | "
             "\"<｜DSML｜tool_calls>\\n\" dsml-calls \"</｜DSML｜tool_calls>\" )\n" +
             std::string("dsml-calls ::= dsml-call") + (parallel ? "+" : "") + "\n" +
             "dsml-call ::= " + alternatives(dsml_calls) + "\n";
      break;
    case ToolCallFormat::Glm:
      root = "root ::= glm-call" + more("\"\\n\"", "glm-call") + "\n" + "glm-call ::= " + alternatives(glm_calls) + "\n";
      break;
    case ToolCallFormat::Gemma4:
      root = "root ::= g4-call" + more("\"\"", "g4-call") + "\n" + "g4-call ::= " + alternatives(gemma4_calls) + "\n" +
             kGemma4Values;
      break;
    case ToolCallFormat::QwenXml:
      root = "root ::= qwen-call" + more("\"\\n\"", "qwen-call") + "\n" + "qwen-call ::= " + alternatives(qwen_calls) + "\n";
      break;
    case ToolCallFormat::Harmony:
      // After the prompt's "<|start|>assistant"; one call per message (<|call|> ends the reply).
      root = "root ::= \" to=functions.\" ( " + alternatives(harmony_calls) + " )\n";
      break;
    case ToolCallFormat::None:
      break;
  }
  return root + "call ::= " + alternatives(json_calls) + "\n" + rules + json_grammar_primitives();
}

}  // namespace kestrel
