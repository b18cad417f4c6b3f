#include "jinja/json_value.h"

namespace kestrel::jinja {

Value from_json(const nlohmann::ordered_json& j, bool from_input) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      std::string s = j.get<std::string>();
      return Value(derived(std::move(s), from_input));
    }
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(from_json(x, from_input));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict items;
      items.reserve(j.size());
      for (const auto& [k, x] : j.items()) items.emplace_back(k, from_json(x, from_input));
      return Value::dict(std::move(items));
    }
    default:
      return Value::none();  // binary and discarded values do not occur in parsed JSON
  }
}

}  // namespace kestrel::jinja
