#pragma once
// A grammar compiled from what a user gave (GBNF text or a JSON schema),
// errors prefixed with where it came from (a flag, a request field).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"

namespace kestrel {

std::shared_ptr<const Grammar> compile_gbnf(const std::string& gbnf, const std::string& source);
std::shared_ptr<const Grammar> compile_json_schema(const nlohmann::ordered_json& schema, const std::string& source);

}  // namespace kestrel
