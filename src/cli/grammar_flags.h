#pragma once
// Structured-output flags of `run`: --grammar / --grammar-file (GBNF),
// --json-schema / --json-schema-file. At most one of them.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/read_file.h"
#include "grammar/grammar_source.h"

namespace kestrel::cli {

struct GrammarFlags {
  std::string gbnf, gbnf_file, schema, schema_file;
};

inline void add_grammar_options(CLI::App* cmd, GrammarFlags& g) {
  cmd->add_option("--grammar", g.gbnf, "Only generate text this GBNF grammar matches (llama.cpp's format)");
  cmd->add_option("--grammar-file", g.gbnf_file, "...the grammar read from FILE");
  cmd->add_option("-j,--json-schema", g.schema, "Only generate JSON valid against this JSON schema");
  cmd->add_option("--json-schema-file", g.schema_file, "...the schema read from FILE");
}

// The grammar asked for (null: none); throws Error naming the flag.
inline std::shared_ptr<const Grammar> grammar_from_flags(const GrammarFlags& g) {
  const int given = !g.gbnf.empty() + !g.gbnf_file.empty() + !g.schema.empty() + !g.schema_file.empty();
  if (given > 1) throw Error("give one of --grammar, --grammar-file, --json-schema, --json-schema-file");
  if (!g.gbnf.empty()) return compile_gbnf(g.gbnf, "--grammar");
  if (!g.gbnf_file.empty()) return compile_gbnf(read_whole_file(g.gbnf_file, "grammar file"), g.gbnf_file);
  if (g.schema.empty() && g.schema_file.empty()) return nullptr;
  const std::string source = g.schema.empty() ? g.schema_file : "--json-schema";
  const std::string text = g.schema.empty() ? read_whole_file(g.schema_file, "JSON schema file") : g.schema;
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", source, e.what()));
  }
  return compile_json_schema(schema, source);
}

}  // namespace kestrel::cli
