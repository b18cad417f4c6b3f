// Python's str, dict and list methods that templates call (message.content.strip(),
// tool.items(), ...), with Python's semantics, and the iteration/len rules.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "jinja/builtins.h"

namespace kestrel::jinja {
namespace {

bool is_py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string arg_string(const CallArgs& a, size_t i, std::string_view name, std::string_view method) {
  const Value* v = a.get(i, name);
  if (!v || !v->is_string())
    throw TemplateError(fmt::format("{}() argument '{}' must be str", method, name));
  return v->as_string();
}

std::optional<std::string> optional_chars(const CallArgs& a, std::string_view method) {
  const Value* v = a.get(0, "chars");
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  if (!v->is_string()) throw TemplateError(fmt::format("{} arg must be None or str", method));
  return v->as_string();
}

// Python str.split / rsplit.
Value split(const TaintedString& s, const CallArgs& a, bool from_right) {
  const Value* sep_v = a.get(0, "sep");
  const Value* max_v = a.get(1, "maxsplit");
  int64_t maxsplit = max_v && max_v->kind() == Value::Kind::Int ? max_v->as_int() : -1;
  ValueList parts;
  const std::string& t = s.text;
  if (!sep_v || sep_v->is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace yields nothing.
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < t.size();) {
      while (i < t.size() && is_py_space(t[i])) i++;
      if (i == t.size()) break;
      size_t j = i;
      while (j < t.size() && !is_py_space(t[j])) j++;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
      if (from_right) {
        const size_t keep = words.size() - static_cast<size_t>(maxsplit);
        size_t b = 0;
        while (b < t.size() && is_py_space(t[b])) b++;
        words.erase(words.begin(), words.begin() + static_cast<std::ptrdiff_t>(keep - 1));
        words.front().first = b;
      } else {
        size_t e = t.size();
        while (e > 0 && is_py_space(t[e - 1])) e--;
        words.resize(static_cast<size_t>(maxsplit) + 1);
        words.back().second = e;
      }
    }
    for (auto [b, e] : words) parts.emplace_back(tainted_substr(s, b, e));
    return Value::list(std::move(parts));
  }
  if (!sep_v->is_string()) throw TemplateError("split() argument 'sep' must be str or None");
  const std::string& sep = sep_v->as_string();
  if (sep.empty()) throw TemplateError("empty separator");
  std::vector<size_t> cuts;  // start of each separator
  if (!from_right) {
    for (size_t p = t.find(sep); p != std::string::npos && (maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit);
         p = t.find(sep, p + sep.size()))
      cuts.push_back(p);
  } else {
    size_t end = t.size();
    while (maxsplit < 0 || static_cast<int64_t>(cuts.size()) < maxsplit) {
      if (end < sep.size()) break;
      const size_t p = t.rfind(sep, end - sep.size());
      if (p == std::string::npos) break;
      cuts.push_back(p);
      end = p;
    }
    std::reverse(cuts.begin(), cuts.end());
  }
  size_t b = 0;
  for (size_t c : cuts) {
    parts.emplace_back(tainted_substr(s, b, c));
    b = c + sep.size();
  }
  parts.emplace_back(tainted_substr(s, b, t.size()));
  return Value::list(std::move(parts));
}

bool affix_matches(const std::string& t, const Value& affix, bool start) {
  const auto one = [&](const std::string& x) {
    return x.size() <= t.size() && t.compare(start ? 0 : t.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_string()) return one(affix.as_string());
  if (affix.is_list()) {
    for (const auto& x : affix.as_list())
      if (x.is_string() && one(x.as_string())) return true;
    return false;
  }
  throw TemplateError(fmt::format("{}with first arg must be str or a tuple of str, not {}", start ? "start" : "end",
                                  type_name(affix)));
}

std::optional<Value> string_method(const Value& obj, std::string_view name, const CallArgs& a) {
  const TaintedString& s = obj.as_tainted();
  const bool input = !s.input.empty();
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value(python_strip(s, optional_chars(a, name == "strip" ? "strip" : name == "lstrip" ? "lstrip" : "rstrip"),
                              name != "rstrip", name != "lstrip"));
  if (name == "split") return split(s, a, false);
  if (name == "rsplit") return split(s, a, true);
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.get(0, "prefix");
    if (!affix) throw TemplateError(std::string(name) + "() takes at least 1 argument (0 given)");
    return Value(affix_matches(s.text, *affix, name == "startswith"));
  }
  if (name == "replace") {
    const std::string from = arg_string(a, 0, "old", name), to = arg_string(a, 1, "new", name);
    const Value* count_v = a.get(2, "count");
    int64_t count = count_v && count_v->kind() == Value::Kind::Int ? count_v->as_int() : -1;
    std::string out;
    if (from.empty()) {
      // Python inserts `to` between every character (and at both ends).
      const auto cps = code_point_offsets(s.text);
      for (size_t i = 0; i + 1 < cps.size(); i++) {
        if (count < 0 || static_cast<int64_t>(i) < count) out += to;
        out.append(s.text, cps[i], cps[i + 1] - cps[i]);
      }
      if (count < 0 || static_cast<int64_t>(cps.size()) - 1 < count) out += to;
    } else {
      size_t p = 0;
      for (size_t q; (count < 0 || count-- > 0) && (q = s.text.find(from, p)) != std::string::npos; p = q + from.size())
        out.append(s.text, p, q - p) += to;
      out.append(s.text, p);
    }
    if (out.size() > kMaxBuiltString) throw TemplateError("replace() result too large");
    return Value(derived(std::move(out), input));
  }
  if (name == "upper" || name == "lower") {
    std::string out = s.text;
    for (char& c : out) c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
    return Value(TaintedString{std::move(out), s.input});
  }
  if (name == "title" || name == "capitalize") {
    std::string out = s.text;
    bool word_start = true;
    for (size_t i = 0; i < out.size(); i++) {
      const auto c = static_cast<unsigned char>(out[i]);
      const bool alpha = std::isalpha(c) != 0;
      if (name == "title")
        out[i] = static_cast<char>(alpha && word_start ? std::toupper(c) : std::tolower(c));
      else
        out[i] = static_cast<char>(i == 0 ? std::toupper(c) : std::tolower(c));
      word_start = !alpha;
    }
    return Value(TaintedString{std::move(out), s.input});
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    const std::string sub = arg_string(a, 0, "sub", name);
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(code_point_offsets(s.text).size()));
      int64_t n = 0;
      for (size_t p = s.text.find(sub); p != std::string::npos; p = s.text.find(sub, p + sub.size())) n++;
      return Value(n);
    }
    const size_t p = name == "rfind" ? s.text.rfind(sub) : s.text.find(sub);
    if (p == std::string::npos) {
      if (name == "index") throw TemplateError("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(code_point_offsets(s.text.substr(0, p)).size() - 1));
  }
  if (name == "join") {
    const Value* items = a.get(0, "iterable");
    if (!items) throw TemplateError("join() takes exactly one argument (0 given)");
    TaintedString out;
    bool first = true;
    for (const auto& x : iterate(*items)) {
      if (!x.is_string()) throw TemplateError(fmt::format("sequence item: expected str instance, {} found", type_name(x)));
      if (!first) tainted_append(out, s);
      tainted_append(out, x.as_tainted());
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "islower" ||
      name == "isupper") {
    if (s.text.empty()) return Value(false);
    const auto all = [&](auto pred) { return std::all_of(s.text.begin(), s.text.end(), [&](char c) { return pred(static_cast<unsigned char>(c)) != 0; }); };
    if (name == "isdigit") return Value(all([](int c) { return std::isdigit(c); }));
    if (name == "isalpha") return Value(all([](int c) { return std::isalpha(c); }));
    if (name == "isalnum") return Value(all([](int c) { return std::isalnum(c); }));
    if (name == "isspace") return Value(all([](int c) { return std::isspace(c); }));
    const bool upper = name == "isupper";
    bool cased = false;
    for (char ch : s.text) {
      const auto c = static_cast<unsigned char>(ch);
      if (upper ? std::islower(c) : std::isupper(c)) return Value(false);
      cased |= std::isalpha(c) != 0;
    }
    return Value(cased);
  }
  if (name == "splitlines") {
    ValueList lines;
    size_t b = 0;
    for (size_t i = 0; i < s.text.size(); i++) {
      if (s.text[i] == '\n' || s.text[i] == '\r') {
        lines.emplace_back(tainted_substr(s, b, i));
        if (s.text[i] == '\r' && i + 1 < s.text.size() && s.text[i + 1] == '\n') i++;
        b = i + 1;
      }
    }
    if (b < s.text.size()) lines.emplace_back(tainted_substr(s, b, s.text.size()));
    return Value::list(std::move(lines));
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& obj, std::string_view name, const CallArgs& a) {
  if (name == "items" || name == "keys" || name == "values") {
    ValueList out;
    for (const auto& [k, v] : obj.as_dict()) {
      if (name == "items")
        out.push_back(Value::tuple({Value(k), v}));
      else
        out.push_back(name == "keys" ? Value(k) : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const Value* key = a.get(0, "key");
    if (!key) throw TemplateError("get expected at least 1 argument, got 0");
    const Value* fallback = a.get(1, "default");
    if (key->is_string())
      for (const auto& [k, v] : obj.as_dict())
        if (k == key->as_string()) return v;
    return fallback ? *fallback : Value::none();
  }
  if (name == "copy") return Value::dict(obj.as_dict());
  return std::nullopt;
}

}  // namespace

TaintedString python_strip(const TaintedString& s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto strip_me = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_py_space(c); };
  size_t b = 0, e = s.text.size();
  if (left)
    while (b < e && strip_me(s.text[b])) b++;
  if (right)
    while (e > b && strip_me(s.text[e - 1])) e--;
  return tainted_substr(s, b, e);
}

std::optional<Value> call_method(const Value& obj, std::string_view name, const CallArgs& args) {
  static const char* const mutating[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse",
                                         "update", "setdefault", "popitem", "add", "discard"};
  if (obj.is_list() || (obj.is_dict() && !obj.is_namespace()))
    for (const char* m : mutating)
      if (name == m)
        throw TemplateError(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
  if (obj.is_string()) return string_method(obj, name, args);
  if (obj.is_dict() && !obj.is_namespace()) return dict_method(obj, name, args);
  if (obj.is_list() && (name == "index" || name == "count")) {
    const Value* x = args.get(0, "value");
    if (!x) throw TemplateError(std::string(name) + "() takes exactly one argument");
    int64_t n = 0;
    for (size_t i = 0; i < obj.as_list().size(); i++) {
      if (!equals(obj.as_list()[i], *x)) continue;
      if (name == "index") return Value(static_cast<int64_t>(i));
      n++;
    }
    if (name == "index") throw TemplateError(fmt::format("{} is not in list", repr(*x)));
    return Value(n);
  }
  return std::nullopt;
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
      return v.as_list();
    case Value::Kind::Dict: {
      ValueList keys;
      for (const auto& [k, x] : v.as_dict()) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      const auto cps = code_point_offsets(v.as_string());
      for (size_t i = 0; i + 1 < cps.size(); i++) chars.emplace_back(tainted_substr(v.as_tainted(), cps[i], cps[i + 1]));
      return chars;
    }
    default:
      throw TemplateError(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

int64_t python_len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return static_cast<int64_t>(code_point_offsets(v.as_string()).size() - 1);
    case Value::Kind::List:
      return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::Dict:
      return static_cast<int64_t>(v.as_dict().size());
    default:
      throw TemplateError(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

Value get_attribute_path(const Value& v, std::string_view path) {
  Value cur = v;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string_view part = path.substr(0, dot);
    if (cur.is_dict()) {
      cur = cur.get(part);
    } else if (cur.is_list() && !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      const size_t i = std::stoul(std::string(part));
      cur = i < cur.as_list().size() ? cur.as_list()[i] : Value::undefined(std::string(part));
    } else {
      return Value::undefined(fmt::format("'{}' has no attribute '{}'", type_name(cur), part));
    }
    path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
  }
  return cur;
}

}  // namespace kestrel::jinja
