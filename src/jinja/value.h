#pragma once
// The values a Jinja template computes with, with Python's semantics (what
// Hugging Face's reference renderer, jinja2, gives templates): undefined,
// none, bool, int, float, str (UTF-8, indexed by code point), list, and dict
// (insertion-ordered; string keys, or Python's other hashable ones), plus callables (macros, globals,
// loop.cycle).
//
// A string also records which of its bytes came from the caller's data (chat
// messages, tools) rather than from the template: the renderer returns those
// spans so the tokenizer can keep a user's "<|im_end|>" as text.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::jinja {

// A template failed: a syntax error, a type error, or a limit hit. From
// raise_exception(msg), what() is msg exactly and raised is true.
struct TemplateError : Error {
  explicit TemplateError(const std::string& what, bool raised_by_template = false)
      : Error(what), raised(raised_by_template) {}
  bool raised;
};

class Value;
using ValueList = std::vector<Value>;

// A dict key as Python has it: a string (JSON's only kind, and nearly every template's), or another hashable
// value (int, float, bool, None, or a tuple of them) kept as itself: {1: 'a'}, {none: 0}; 1, 1.0 and true are
// one key, as in Python.
struct DictKey {
  std::string text;                    // a string key
  std::shared_ptr<const Value> other;  // a key that is not a string (text is then empty)
  DictKey(std::string s) : text(std::move(s)) {}  // NOLINT: string keys are the common case (brace lists)
  DictKey(const char* s) : text(s) {}             // NOLINT
  // The key a value makes; a TemplateError for an unhashable one (a list, a dict).
  static DictKey from(const Value& v);
  bool is_string() const { return !other; }
  Value value() const;
  // Python's key equality with a value.
  bool matches(const Value& v) const;
};
inline bool operator==(const DictKey& k, std::string_view s) { return k.is_string() && std::string_view(k.text) == s; }
using ValueDict = std::vector<std::pair<DictKey, Value>>;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The keyword named `name`, else positional[index], else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};
using NativeFunction = std::function<Value(const CallArgs&)>;

// A string with the byte ranges that came from the caller's input.
struct TaintedString {
  std::string text;
  std::vector<TextSpan> input;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  Value() = default;  // undefined
  static Value undefined(std::string name) {
    Value v;
    v.undefined_name_ = std::make_shared<const std::string>(std::move(name));
    return v;
  }
  static Value none() { return Value(Kind::None); }
  Value(bool b) : kind_(Kind::Bool), int_(b) {}  // NOLINT: Python-like literals
  Value(int64_t i) : kind_(Kind::Int), int_(i) {}  // NOLINT
  Value(int i) : kind_(Kind::Int), int_(i) {}      // NOLINT
  Value(double f) : kind_(Kind::Float), float_(f) {}  // NOLINT
  Value(std::string s, std::vector<TextSpan> input = {});  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}          // NOLINT
  explicit Value(TaintedString s);
  static Value list(ValueList items);
  // A list that prints as a Python tuple: (a, b) — dict items, tuple literals.
  static Value tuple(ValueList items);
  static Value dict(ValueDict items);
  // A dict whose attributes templates may assign ({% set ns.x = ... %}).
  static Value namespace_object(ValueDict items);
  static Value function(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Dict && is_namespace_; }
  bool is_tuple() const { return kind_ == Kind::List && is_tuple_; }
  bool is_function() const { return kind_ == Kind::Function; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }
  double as_number() const { return kind_ == Kind::Float ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_->text; }
  const TaintedString& as_tainted() const { return *str_; }
  const ValueList& as_list() const { return *list_; }
  const ValueDict& as_dict() const { return *dict_; }
  ValueDict& namespace_items() const { return *dict_; }  // only for namespaces
  const std::string& undefined_name() const;
  const std::string& function_name() const { return fn_->first; }
  Value call(const CallArgs& args) const { return fn_->second(args); }

  // Python truthiness.
  bool truthy() const;
  // The dict's value for `key`, or undefined.
  Value get(std::string_view key) const;
  Value get(const std::string& key) const { return get(std::string_view(key)); }
  Value get(const char* key) const { return get(std::string_view(key)); }
  Value get(const Value& key) const;
  // Whether any string inside came from the caller's input.
  bool has_input() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  Kind kind_ = Kind::Undefined;
  bool is_namespace_ = false;
  bool is_tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const TaintedString> str_;
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const std::pair<std::string, NativeFunction>> fn_;
  std::shared_ptr<const std::string> undefined_name_;
};

// Python's type name, for error messages ("'int' object ...").
const char* type_name(const Value& v);
// Python str(v) (undefined → ""); its spans mark caller input.
TaintedString to_str(const Value& v);
// Python repr(v).
std::string repr(const Value& v);
// Python ==, and < for numbers, strings and lists (a TemplateError otherwise).
bool equals(const Value& a, const Value& b);
bool less_than(const Value& a, const Value& b);
// Python's repr of a float (shortest round-trip: 1.0, 0.1, 1e-05, 1e+16).
std::string python_float_repr(double f);

// Code-point view of a UTF-8 string: byte offset of each code point, plus the end.
std::vector<size_t> code_point_offsets(std::string_view s);

// A substring of a tainted string (bytes [begin, end)), its spans clipped.
TaintedString tainted_substr(const TaintedString& s, size_t begin, size_t end);
// Appends b to a, shifting b's spans.
void tainted_append(TaintedString& a, const TaintedString& b);
// New text computed from `from`: wholly input if any of `from` was.
TaintedString derived(std::string text, bool from_input);

}  // namespace kestrel::jinja
