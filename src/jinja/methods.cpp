// Python's str, dict and list methods that templates call (message.content.strip(),
// tool.items(), ...), with Python's semantics, and the iteration/len rules.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

// Python's format(value, spec) for the standard mini-language ([[fill]align][sign][0][width][,][.precision]
// [type]); what it does not implement (the '#' and '_' options, 'g'/'n' and precision-only general floats,
// nested fields) is refused by name rather than formatted another way.
TaintedString format_value(const Value& v, std::string_view spec) {
  if (spec.empty()) return to_str(v);
  size_t i = 0;
  char fill = ' ', align = 0, sign = '-';
  const auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) fill = spec[0], align = spec[1], i = 2;
  else if (is_align(spec[0])) align = spec[0], i = 1;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && (spec[i] == '#' || spec[i] == '_'))
    throw TemplateError(fmt::format("str.format: the '{}' option is not implemented", spec[i]));
  if (i < spec.size() && spec[i] == '0' && !align) fill = '0', align = '=', i++;
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + static_cast<size_t>(spec[i++] - '0');
  const bool grouping = i < spec.size() && spec[i] == ',';
  if (grouping) i++;
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    if (++i == spec.size() || !std::isdigit(static_cast<unsigned char>(spec[i]))) throw TemplateError("Format specifier missing precision");
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) precision = precision * 10 + (spec[i++] - '0');
  }
  const char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) throw TemplateError("Invalid format specifier");
  std::string body, prefix;
  bool numeric = false;
  if (v.is_string() && (type == 0 || type == 's')) {
    if (sign != '-' ) throw TemplateError("Sign not allowed in string format specifier");
    if (align == '=') throw TemplateError("'=' alignment not allowed in string format specifier");
    body = v.as_string();
    if (precision >= 0) {  // code points, not bytes
      size_t cut = 0;
      for (int n = 0; cut < body.size() && n < precision; n++)
        do cut++; while (cut < body.size() && (static_cast<unsigned char>(body[cut]) & 0xC0) == 0x80);
      body.resize(cut);
    }
  } else if ((v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
    if (precision >= 0) throw TemplateError("Precision not allowed in integer format specifier");
    // A bool formats as its int under any non-empty spec (format(True, '>4') is '   1').
    const int64_t n = v.kind() == Value::Kind::Bool ? (v.truthy() ? 1 : 0) : v.as_int();
    const uint64_t mag = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
    body = type == 'x' ? fmt::format("{:x}", mag) : type == 'X' ? fmt::format("{:X}", mag) : type == 'o' ? fmt::format("{:o}", mag)
         : type == 'b' ? fmt::format("{:b}", mag) : fmt::format("{}", mag);
    if (grouping && (type == 0 || type == 'd'))
      for (int p = static_cast<int>(body.size()) - 3; p > 0; p -= 3) body.insert(static_cast<size_t>(p), ",");
    prefix = n < 0 ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    numeric = true;
  } else if ((v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Float) && (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == '%')) {
    double x = v.as_number();
    if (type == '%') x *= 100;
    const int p = precision < 0 ? 6 : precision;
    const double mag = std::fabs(x);
    body = type == 'e' ? fmt::format("{:.{}e}", mag, p) : type == 'E' ? fmt::format("{:.{}E}", mag, p) : fmt::format("{:.{}f}", mag, p);
    if (std::isinf(x) || std::isnan(x)) body = std::isnan(x) ? "nan" : "inf";
    if (type == 'F' || type == 'E') std::transform(body.begin(), body.end(), body.begin(), [](char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); });
    if (grouping) {
      const size_t dot = std::min(body.find('.'), body.find_first_of("eE"));
      for (int q = static_cast<int>(std::min(dot, body.size())) - 3; q > 0; q -= 3) body.insert(static_cast<size_t>(q), ",");
    }
    if (type == '%') body += '%';
    prefix = std::signbit(x) && !std::isnan(x) ? "-" : sign == '+' ? "+" : sign == ' ' ? " " : "";
    numeric = true;
  } else {
    throw TemplateError(fmt::format("str.format: format spec '{}' for a {} value is not implemented", spec, type_name(v)));
  }
  if (!align) align = numeric ? '>' : '<';
  const size_t len = [](const std::string& t) { size_t n = 0; for (char c : t) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80; return n; }(prefix + body);
  std::string out;
  if (len >= width) {
    out = prefix + body;
  } else {
    const size_t pad = width - len;
    const std::string fill_s(1, fill);
    auto rep = [&](size_t n) { std::string r; for (size_t k = 0; k < n; k++) r += fill_s; return r; };
    if (align == '<') out = prefix + body + rep(pad);
    else if (align == '>') out = rep(pad) + prefix + body;
    else if (align == '^') out = rep(pad / 2) + prefix + body + rep(pad - pad / 2);
    else out = prefix + rep(pad) + body;  // '='
  }
  return derived(std::move(out), v.has_input());
}

// Python str.format: {}, {0}, {name}, {name.attr} / {name[key]}, !s / !r, and a format spec; {{ and }} are braces.
Value str_format(const TaintedString& s, const CallArgs& a) {
  const std::string& t = s.text;
  TaintedString out;
  size_t literal = 0;
  int auto_index = 0;
  bool manual = false, automatic = false;
  for (size_t i = 0; i < t.size(); i++) {
    if (t[i] == '}') {
      if (i + 1 < t.size() && t[i + 1] == '}') {
        tainted_append(out, tainted_substr(s, literal, i + 1));
        literal = ++i + 1;
        continue;
      }
      throw TemplateError("Single '}' encountered in format string");
    }
    if (t[i] != '{') continue;
    if (i + 1 < t.size() && t[i + 1] == '{') {
      tainted_append(out, tainted_substr(s, literal, i + 1));
      literal = ++i + 1;
      continue;
    }
    tainted_append(out, tainted_substr(s, literal, i));
    const size_t close = t.find('}', i + 1);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = t.substr(i + 1, close - i - 1);
    if (field.find('{') != std::string::npos) throw TemplateError("str.format: nested replacement fields are not implemented");
    std::string spec;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 's' && field[bang + 1] != 'r'))
        throw TemplateError("Unknown conversion specifier in format string");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    const size_t end_name = std::min(field.find('.'), field.find('['));
    const std::string head = field.substr(0, end_name);
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      size_t index;
      if (head.empty()) {
        if (manual) throw TemplateError("cannot switch from manual field specification to automatic field numbering");
        automatic = true;
        index = static_cast<size_t>(auto_index++);
      } else {
        if (automatic) throw TemplateError("cannot switch from automatic field numbering to manual field specification");
        manual = true;
        index = std::stoul(head);
      }
      if (index >= a.positional.size())
        throw TemplateError(fmt::format("Replacement index {} out of range for positional args tuple", index));
      v = a.positional[index];
    } else {
      const Value* k = nullptr;
      for (const auto& [name, x] : a.keyword)
        if (name == head) k = &x;
      if (!k) throw TemplateError(fmt::format("'{}'", head));  // Python's KeyError
      v = *k;
    }
    for (size_t p = std::min(end_name, field.size()); p < field.size();) {
      if (field[p] == '.') {
        const size_t q = std::min(field.find('.', p + 1), field.find('[', p + 1));
        v = get_attribute_path(v, field.substr(p + 1, q - p - 1));
        p = std::min(q, field.size());
      } else {
        const size_t q = field.find(']', p);
        if (q == std::string::npos) throw TemplateError("Missing ']' in format string");
        const std::string key = field.substr(p + 1, q - p - 1);
        v = get_attribute_path(v, key);
        p = q + 1;
      }
      if (v.is_undefined()) throw TemplateError(fmt::format("'{}' has no such field", field));
    }
    if (conversion == 'r') v = Value(derived(repr(v), v.has_input()));
    else if (conversion == 's') v = Value(to_str(v));
    tainted_append(out, format_value(v, spec));
    literal = close + 1;
    i = close;
  }
  tainted_append(out, tainted_substr(s, literal, t.size()));
  return Value(std::move(out));
}

std::optional<Value> string_method(const Value& obj, std::string_view name, const CallArgs& a) {
  const TaintedString& s = obj.as_tainted();
  const bool input = !s.input.empty();
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value(python_strip(s, optional_chars(a, name == "strip" ? "strip" : name == "lstrip" ? "lstrip" : "rstrip"),
                              name != "rstrip", name != "lstrip"));
  if (name == "split") return split(s, a, false);
  if (name == "format") return str_format(s, a);
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
        out.push_back(Value::tuple({k.value(), v}));
      else
        out.push_back(name == "keys" ? k.value() : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const Value* key = a.get(0, "key");
    if (!key) throw TemplateError("get expected at least 1 argument, got 0");
    const Value* fallback = a.get(1, "default");
    for (const auto& [k, v] : obj.as_dict())
      if (k.matches(*key)) return v;
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
      for (const auto& [k, x] : v.as_dict()) keys.push_back(k.value());
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
