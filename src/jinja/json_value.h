#pragma once
// JSON documents (request bodies, --vars files) as template values, mapped as
// Python's json.load maps them: key order kept, integers stay int.
#include <nlohmann/json.hpp>

#include "jinja/value.h"

namespace kestrel::jinja {

// `from_input`: every string is marked as the caller's data (see TaintedString).
Value from_json(const nlohmann::ordered_json& j, bool from_input);

}  // namespace kestrel::jinja
