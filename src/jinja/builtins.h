#pragma once
// jinja2's built-in filters and tests, Python's str/dict methods, and
// transformers' tojson, over jinja::Value.
#include <optional>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace kestrel::jinja {

// Text a filter or method may build (center, indent, '*' repetition), so a
// template cannot ask for gigabytes in one call.
constexpr size_t kMaxBuiltString = size_t{64} << 20;

using FilterFunction = Value (*)(const Value& input, const CallArgs& args);
using TestFunction = bool (*)(const Value& input, const CallArgs& args);

// nullptr when jinja2 has no such filter / test (or Kestrel does not implement it).
FilterFunction find_filter(std::string_view name);
TestFunction find_test(std::string_view name);

// obj.name(args) for Python's non-mutating str, dict and list methods;
// nullopt when `obj` has no such method. Mutating ones (append, pop, update)
// throw, as jinja2's immutable sandbox does.
std::optional<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) with Python's
// output; indent < 0 is None.
struct JsonStyle {
  bool ensure_ascii = false;
  std::string indent;  // the per-level indent text
  bool pretty = false;  // indent given (even "" puts items on their own lines)
  std::string item_separator = ", ", key_separator = ": ";
  bool sort_keys = false;
};
std::string json_dumps(const Value& v, const JsonStyle& style);

// Python str.strip/lstrip/rstrip (chars empty: whitespace), on bytes then re-clipped spans.
TaintedString python_strip(const TaintedString& s, const std::optional<std::string>& chars, bool left, bool right);

// The attribute path "a.b" of v (dict keys, list indices), undefined when absent.
Value get_attribute_path(const Value& v, std::string_view path);

// Iteration as a for loop sees it: list items, dict keys, string characters,
// nothing for undefined; a TemplateError otherwise.
ValueList iterate(const Value& v);

// Python's len(): code points of a string, items of a list or dict.
int64_t python_len(const Value& v);

}  // namespace kestrel::jinja
