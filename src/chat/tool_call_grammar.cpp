#include "chat/tool_call_grammar.h"

#include <fmt/format.h>

#include "core/error.h"
#include "grammar/json_schema_grammar.h"

namespace kestrel {

using json = nlohmann::ordered_json;

std::string tool_call_gbnf(ToolCallFormat format, const json& tools, const std::string& only, bool parallel) {
  if (format == ToolCallFormat::None) throw Error("no tool-call format to constrain the reply to");
  if (format == ToolCallFormat::Dsml)
    throw Error("tool_choice 'required' or a named function is not implemented for DeepSeek's DSML tool calls (use 'auto')");
  std::string rules;
  std::vector<std::string> json_calls, deepseek_calls;
  // Llama 3's JSON calls carry "parameters"; the others "arguments".
  const std::string key = format == ToolCallFormat::Llama3Json ? "parameters" : "arguments";
  for (size_t i = 0; i < tools.size(); i++) {
    const json& f = tools[i]["function"];
    const std::string name = f["name"].get<std::string>();
    if (!only.empty() && name != only) continue;
    const json params = f.contains("parameters") ? f["parameters"] : json{{"type", "object"}};
    std::string args;
    try {
      args = json_schema_rules(params, fmt::format("t{}-", i), rules);
    } catch (const Error& e) {
      throw Error(fmt::format("tools[{}].function.parameters: {}", i, e.what()));
    }
    json_calls.push_back(fmt::format("\"{{\" ws {} ws \":\" ws {} ws \",\" ws {} ws \":\" ws {} ws \"}}\"",
                                     gbnf_literal("\"name\""), gbnf_literal(json(name).dump()),
                                     gbnf_literal(json(key).dump()), args));
    deepseek_calls.push_back(fmt::format("{} \"\\n```json\\n\" {} \"\\n```\"", gbnf_literal(name), args));
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
      root = "root ::= \"[TOOL_CALLS][\" call" + more("\", \"", "call") + " \"]\"\n";
      break;
    case ToolCallFormat::DeepSeek:
      root = "root ::= \"<｜tool▁calls▁begin｜>\" ds-call" + std::string(parallel ? "+" : "") + " \"<｜tool▁calls▁end｜>\"\n" +
             "ds-call ::= \"<｜tool▁call▁begin｜>function<｜tool▁sep｜>\" ( " + alternatives(deepseek_calls) +
             " ) \"<｜tool▁call▁end｜>\"\n";
      break;
    case ToolCallFormat::None:
    case ToolCallFormat::Dsml:
      break;
  }
  return root + "call ::= " + alternatives(json_calls) + "\n" + rules + json_grammar_primitives();
}

}  // namespace kestrel
