#include "grammar/grammar_source.h"

#include <fmt/format.h>

#include "core/error.h"
#include "grammar/json_schema_grammar.h"

namespace kestrel {

std::shared_ptr<const Grammar> compile_gbnf(const std::string& gbnf, const std::string& source) {
  try {
    return std::make_shared<const Grammar>(Grammar::parse(gbnf));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
}

std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const std::string& source) {
  std::string gbnf;
  try {
    gbnf = json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  // What the converter writes always parses; were it not to, say so plainly.
  return compile_gbnf(gbnf, source + " (its grammar)");
}

}  // namespace kestrel
