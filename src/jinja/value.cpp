#include "jinja/value.h"

#include <fmt/format.h>

#include <algorithm>

#include <charconv>
#include <cmath>

#include "tokenizer/utf8.h"

namespace kestrel::jinja {

const Value* CallArgs::get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return index < positional.size() ? &positional[index] : nullptr;
}

Value::Value(std::string s, std::vector<TextSpan> input) : kind_(Kind::String) {
  str_ = std::make_shared<const TaintedString>(TaintedString{std::move(s), std::move(input)});
}

Value::Value(TaintedString s) : kind_(Kind::String) { str_ = std::make_shared<const TaintedString>(std::move(s)); }

Value Value::list(ValueList items) {
  Value v(Kind::List);
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::tuple(ValueList items) {
  Value v = list(std::move(items));
  v.is_tuple_ = true;
  return v;
}

Value Value::dict(ValueDict items) {
  Value v(Kind::Dict);
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}

Value Value::namespace_object(ValueDict items) {
  Value v = dict(std::move(items));
  v.is_namespace_ = true;
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v(Kind::Function);
  v.fn_ = std::make_shared<const std::pair<std::string, NativeFunction>>(std::move(name), std::move(fn));
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string unnamed = "value";
  return undefined_name_ ? *undefined_name_ : unnamed;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
    case Kind::Int:
      return int_ != 0;
    case Kind::Float:
      return float_ != 0;
    case Kind::String:
      return !str_->text.empty();
    case Kind::List:
      return !list_->empty();
    case Kind::Dict:
      return is_namespace_ || !dict_->empty();
    case Kind::Function:
      return true;
  }
  return false;
}

Value Value::get(std::string_view key) const {
  if (kind_ == Kind::Dict)
    for (const auto& [k, v] : *dict_)
      if (k == key) return v;
  return undefined(std::string(key));
}

Value Value::get(const Value& key) const {
  if (key.is_string()) return get(std::string_view(key.as_string()));
  if (kind_ == Kind::Dict)
    for (const auto& [k, v] : *dict_)
      if (k.matches(key)) return v;
  return undefined(repr(key));
}

DictKey DictKey::from(const Value& v) {
  if (v.is_string()) return DictKey(v.as_string());
  const bool hashable = v.is_none() || v.is_number() || v.kind() == Value::Kind::Bool ||
                        (v.is_tuple() && std::all_of(v.as_list().begin(), v.as_list().end(), [](const Value& x) {
                           return x.is_string() || x.is_none() || x.is_number() || x.kind() == Value::Kind::Bool;
                         }));
  if (!hashable) throw TemplateError(fmt::format("unhashable type: '{}'", type_name(v)));
  DictKey k("");
  k.other = std::make_shared<const Value>(v);
  return k;
}

Value DictKey::value() const { return other ? *other : Value(text); }

bool DictKey::matches(const Value& v) const {
  if (v.is_string()) return is_string() && text == v.as_string();
  return other && equals(*other, v);
}

bool Value::has_input() const {
  switch (kind_) {
    case Kind::String:
      return !str_->input.empty();
    case Kind::List:
      for (const auto& v : *list_)
        if (v.has_input()) return true;
      return false;
    case Kind::Dict:
      for (const auto& [k, v] : *dict_)
        if (v.has_input()) return true;
      return false;
    default:
      return false;
  }
}

const char* type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return "list";
    case Value::Kind::Dict:
      return v.is_namespace() ? "Namespace" : "dict";
    case Value::Kind::Function:
      return "function";
  }
  return "?";
}

std::string python_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  if (f == 0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (char c : sci.substr(negative ? 1 : 0, e - (negative ? 1 : 0)))
    if (c != '.') digits += c;
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exponent);
  const int decpt = exponent + 1;  // digits d1d2... = 0.d1d2... × 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    // (Appended piece by piece: GCC 12 misreads a temporary string's operator+ here as overlapping copies.)
    if (decpt <= 0) {
      out.append("0.").append(static_cast<size_t>(-decpt), '0').append(digits);
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out.append(digits).append(static_cast<size_t>(decpt) - digits.size(), '0').append(".0");
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt)).append(".").append(digits, static_cast<size_t>(decpt));
    }
    return out;
  }
  out.append(digits, 0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
}

namespace {
std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += ch;
    }
  }
  return out + quote;
}
}  // namespace

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::String:
      return repr_string(v.as_string());
    case Value::Kind::List: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.as_list().size(); i++) out += (i ? ", " : "") + repr(v.as_list()[i]);
      if (v.is_tuple()) return out + (v.as_list().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::Dict: {
      std::string out = v.is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, x] : v.as_dict()) {
        out += (first ? "" : ", ") + (k.is_string() ? repr_string(k.text) : repr(*k.other)) + ": " + repr(x);
        first = false;
      }
      return out + (v.is_namespace() ? "}>" : "}");
    }
    default:
      return to_str(v).text;
  }
}

TaintedString to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::None:
      return {"None", {}};
    case Value::Kind::Bool:
      return {v.as_bool() ? "True" : "False", {}};
    case Value::Kind::Int:
      return {std::to_string(v.as_int()), {}};
    case Value::Kind::Float:
      return {python_float_repr(v.as_number()), {}};
    case Value::Kind::String:
      return v.as_tainted();
    case Value::Kind::Function:
      return {"<function " + v.function_name() + ">", {}};
    default:
      return derived(repr(v), v.has_input());
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() || a.kind() == Value::Kind::Bool) {
    if (!(b.is_number() || b.kind() == Value::Kind::Bool)) return false;
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float) return a.as_number() == b.as_number();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); i++)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto &x = a.as_dict(), &y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x)
        if (!equals(v, b.get(k.value()))) return false;
      return true;
    }
    default:
      return false;
  }
}

bool less_than(const Value& a, const Value& b) {
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::Bool; };
  if (numeric(a) && numeric(b)) {
    if (a.kind() == Value::Kind::Float || b.kind() == Value::Kind::Float) return a.as_number() < b.as_number();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order = code point order
  if (a.is_list() && b.is_list()) {
    const auto &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); i++) {
      if (less_than(x[i], y[i])) return true;
      if (less_than(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  throw TemplateError(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a), type_name(b)));
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t pos = 0; pos < s.size();) {
    offsets.push_back(pos);
    utf8_next(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

TaintedString tainted_substr(const TaintedString& s, size_t begin, size_t end) {
  TaintedString out{s.text.substr(begin, end - begin), {}};
  for (const auto& span : s.input) {
    const size_t b = std::max(span.begin, begin), e = std::min(span.end, end);
    if (b < e) out.input.push_back({b - begin, e - begin});
  }
  return out;
}

void tainted_append(TaintedString& a, const TaintedString& b) {
  const size_t shift = a.text.size();
  for (const auto& span : b.input) {
    if (!a.input.empty() && a.input.back().end == span.begin + shift)
      a.input.back().end = span.end + shift;
    else
      a.input.push_back({span.begin + shift, span.end + shift});
  }
  a.text += b.text;
}

TaintedString derived(std::string text, bool from_input) {
  TaintedString out{std::move(text), {}};
  if (from_input && !out.text.empty()) out.input.push_back({0, out.text.size()});
  return out;
}

}  // namespace kestrel::jinja
