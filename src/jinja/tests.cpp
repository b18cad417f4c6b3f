// jinja2's built-in tests (`x is defined`, `selectattr('type', 'equalto', 'function')`).
#include <fmt/format.h>

#include <cctype>

#include "jinja/builtins.h"

namespace kestrel::jinja {
namespace {

const Value& operand(const CallArgs& a, const char* test) {
  if (a.positional.empty()) throw TemplateError(fmt::format("test '{}' needs an argument", test));
  return a.positional[0];
}

bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Bool; }
bool t_true(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Bool && v.as_bool(); }
bool t_false(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Bool && !v.as_bool(); }
bool t_integer(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Int; }
bool t_float(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Float; }
// Python's bool is a number, as in jinja2.
bool t_number(const Value& v, const CallArgs&) { return v.is_number() || v.kind() == Value::Kind::Bool; }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, const CallArgs&) { return v.is_dict() && !v.is_namespace(); }
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
}
bool t_sequence(const Value& v, const CallArgs&) { return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()); }
bool t_callable(const Value& v, const CallArgs&) { return v.is_function(); }
bool t_eq(const Value& v, const CallArgs& a) { return equals(v, operand(a, "equalto")); }
bool t_ne(const Value& v, const CallArgs& a) { return !equals(v, operand(a, "ne")); }
bool t_lt(const Value& v, const CallArgs& a) { return less_than(v, operand(a, "lt")); }
bool t_gt(const Value& v, const CallArgs& a) { return less_than(operand(a, "gt"), v); }
bool t_le(const Value& v, const CallArgs& a) { return !less_than(operand(a, "le"), v); }
bool t_ge(const Value& v, const CallArgs& a) { return !less_than(v, operand(a, "ge")); }
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = operand(a, "sameas");
  // Python identity: singletons (None, True, False) only; Kestrel values have no other identity.
  if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
  if (v.kind() == Value::Kind::Bool && o.kind() == Value::Kind::Bool) return v.as_bool() == o.as_bool();
  return false;
}
bool t_in(const Value& v, const CallArgs& a) {
  const Value& seq = operand(a, "in");
  if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
  if (seq.is_dict()) return !seq.get(v).is_undefined();
  for (const auto& x : iterate(seq))
    if (equals(x, v)) return true;
  return false;
}
bool t_odd(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Int && (v.as_int() % 2) != 0; }
bool t_even(const Value& v, const CallArgs&) { return v.kind() == Value::Kind::Int && (v.as_int() % 2) == 0; }
bool t_divisibleby(const Value& v, const CallArgs& a) {
  const int64_t d = operand(a, "divisibleby").as_int();
  if (d == 0) throw TemplateError("integer division or modulo by zero");
  return v.as_int() % d == 0;
}
bool t_lower(const Value& v, const CallArgs&) { return v.is_string() && call_method(v, "islower", {})->truthy(); }
bool t_upper(const Value& v, const CallArgs&) { return v.is_string() && call_method(v, "isupper", {})->truthy(); }
bool t_filter(const Value& v, const CallArgs&) { return v.is_string() && find_filter(v.as_string()) != nullptr; }
bool t_test(const Value& v, const CallArgs&) { return v.is_string() && find_test(v.as_string()) != nullptr; }
bool t_escaped(const Value&, const CallArgs&) { return false; }

struct NamedTest {
  const char* name;
  TestFunction fn;
};
constexpr NamedTest kTests[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none},       {"boolean", t_boolean},
    {"true", t_true},       {"false", t_false},         {"integer", t_integer}, {"float", t_float},
    {"number", t_number},   {"string", t_string},       {"mapping", t_mapping}, {"iterable", t_iterable},
    {"sequence", t_sequence}, {"callable", t_callable}, {"eq", t_eq},           {"equalto", t_eq},
    {"==", t_eq},           {"ne", t_ne},               {"!=", t_ne},           {"lt", t_lt},
    {"lessthan", t_lt},     {"<", t_lt},                {"gt", t_gt},           {"greaterthan", t_gt},
    {">", t_gt},            {"le", t_le},               {"<=", t_le},           {"ge", t_ge},
    {">=", t_ge},           {"sameas", t_sameas},       {"in", t_in},           {"odd", t_odd},
    {"even", t_even},       {"divisibleby", t_divisibleby}, {"lower", t_lower}, {"upper", t_upper},
    {"filter", t_filter},   {"test", t_test},           {"escaped", t_escaped},
};

}  // namespace

TestFunction find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (name == t.name) return t.fn;
  return nullptr;
}

}  // namespace kestrel::jinja
