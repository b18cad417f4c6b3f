// jinja2's built-in filters (the ones chat templates use, and their common
// neighbours), with jinja2 3.1's argument names and defaults.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "jinja/builtins.h"
#include "jinja/json_value.h"

namespace kestrel::jinja {
namespace {

const Value* arg(const CallArgs& a, size_t i, std::string_view name) { return a.get(i, name); }

bool arg_bool(const CallArgs& a, size_t i, std::string_view name, bool fallback) {
  const Value* v = arg(a, i, name);
  return v ? v->truthy() : fallback;
}

std::optional<std::string> arg_opt_string(const CallArgs& a, size_t i, std::string_view name) {
  const Value* v = arg(a, i, name);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  return to_str(*v).text;
}

// The arguments after the first `skip` positional ones (select's test args, map's filter args).
CallArgs rest_args(const CallArgs& a, size_t skip) {
  CallArgs r;
  for (size_t i = skip; i < a.positional.size(); i++) r.positional.push_back(a.positional[i]);
  r.keyword = a.keyword;
  return r;
}

// transformers' from_json: Python's json.loads of a string (tool-call arguments sent as JSON text); its
// strings keep the input's taint.
Value f_from_json(const Value& v, const CallArgs&) {
  if (!v.is_string())
    throw TemplateError(fmt::format("from_json: the JSON object must be str, bytes or bytearray, not {}", type_name(v)));
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(v.as_string());
  } catch (const nlohmann::json::parse_error& e) {
    throw TemplateError(fmt::format("from_json: not JSON: {}", e.what()));
  }
  return from_json(j, v.has_input());
}

Value f_tojson(const Value& v, const CallArgs& a) {
  JsonStyle st;
  st.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  if (const Value* indent = arg(a, 1, "indent"); indent && !indent->is_none() && !indent->is_undefined()) {
    st.pretty = true;
    st.indent = indent->is_string() ? indent->as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    st.item_separator = ",";
  }
  if (const Value* sep = arg(a, 2, "separators"); sep && sep->is_list() && sep->as_list().size() == 2) {
    st.item_separator = to_str(sep->as_list()[0]).text;
    st.key_separator = to_str(sep->as_list()[1]).text;
  }
  st.sort_keys = arg_bool(a, 3, "sort_keys", false);
  return Value(derived(json_dumps(v, st), v.has_input()));
}

Value f_length(const Value& v, const CallArgs&) { return Value(python_len(v)); }
Value f_string(const Value& v, const CallArgs&) { return Value(to_str(v)); }

Value f_trim(const Value& v, const CallArgs& a) {
  return Value(python_strip(to_str(v), arg_opt_string(a, 0, "chars"), true, true));
}

Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw TemplateError(fmt::format("Can only get item pairs from a mapping, not {}", type_name(v)));
  ValueList out;
  for (const auto& [k, x] : v.as_dict()) out.push_back(Value::tuple({k.value(), x}));
  return Value::list(std::move(out));
}

Value f_list(const Value& v, const CallArgs&) { return Value::list(iterate(v)); }

Value f_join(const Value& v, const CallArgs& a) {
  const TaintedString sep = arg(a, 0, "d") ? to_str(*arg(a, 0, "d")) : TaintedString{};
  const auto attribute = arg_opt_string(a, 1, "attribute");
  TaintedString out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) tainted_append(out, sep);
    tainted_append(out, to_str(attribute ? get_attribute_path(item, *attribute) : item));
    first = false;
  }
  return Value(std::move(out));
}

// select/reject/selectattr/rejectattr share one loop. As in jinja2 (select_or_reject, do_map: `if value:`), a
// falsy value (none, undefined, an empty sequence, 0, "") yields nothing, before the arguments are even read.
Value select_items(const Value& v, const CallArgs& a, bool by_attribute, bool keep_matching) {
  if (!v.truthy()) return Value::list({});
  std::string attribute;
  size_t next = 0;
  if (by_attribute) {
    const Value* at = arg(a, 0, "attribute");
    if (!at) throw TemplateError("selectattr/rejectattr need an attribute name");
    attribute = to_str(*at).text;
    next = 1;
  }
  TestFunction test = nullptr;
  CallArgs test_args;
  if (next < a.positional.size()) {
    const std::string name = to_str(a.positional[next]).text;
    test = find_test(name);
    if (!test) throw TemplateError(fmt::format("No test named '{}'.", name));
    test_args = rest_args(a, next + 1);
  }
  ValueList out;
  for (const auto& item : iterate(v)) {
    const Value subject = by_attribute ? get_attribute_path(item, attribute) : item;
    const bool hit = test ? test(subject, test_args) : subject.truthy();
    if (hit == keep_matching) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) { return select_items(v, a, false, true); }
Value f_reject(const Value& v, const CallArgs& a) { return select_items(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_items(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_items(v, a, true, false); }

Value f_map(const Value& v, const CallArgs& a) {
  if (!v.truthy()) return Value::list({});
  ValueList out;
  if (const auto attribute = arg_opt_string(a, 99, "attribute")) {
    const Value* fallback = arg(a, 99, "default");
    for (const auto& item : iterate(v)) {
      Value x = get_attribute_path(item, *attribute);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty()) throw TemplateError("map() needs a filter name or attribute=");
  const std::string name = to_str(a.positional[0]).text;
  const FilterFunction f = find_filter(name);
  if (!f) throw TemplateError(fmt::format("No filter named '{}'.", name));
  const CallArgs fa = rest_args(a, 1);
  for (const auto& item : iterate(v)) out.push_back(f(item, fa));
  return Value::list(std::move(out));
}

// Python's str.splitlines boundaries that matter in text: \n, \r\n, \r, \v, \f, \x1c-\x1e.
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t i = 0; i < s.size(); i++) {
    const char c = s[i];
    if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= '\x1c' && c <= '\x1e')) {
      lines.push_back(s.substr(b, i - b));
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') i++;
      b = i + 1;
    }
  }
  if (b < s.size()) lines.push_back(s.substr(b));
  return lines;
}

// What jinja2 raises where an undefined value is used as more than an empty string or sequence.
[[noreturn]] void undefined_used(const Value& v) {
  throw TemplateError(v.undefined_name().empty() ? std::string("value is undefined") : v.undefined_name());
}

Value f_indent(const Value& v, const CallArgs& a) {
  // jinja2 appends "\n" to the value: anything but a string fails there.
  if (v.is_undefined()) undefined_used(v);
  if (!v.is_string()) throw TemplateError(fmt::format("indent() needs a string, not '{}'", type_name(v)));
  const Value* w = arg(a, 0, "width");
  std::string pad = w && w->is_string() ? w->as_string() : std::string(static_cast<size_t>(std::clamp<int64_t>(w ? w->as_int() : 4, 0, 4096)), ' ');
  const bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
  const TaintedString s = to_str(v);
  const auto lines = split_lines(s.text + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); i++) {
    if (i) out += '\n';
    if (i > 0 && (blank || !lines[i].empty())) out += pad;
    out += lines[i];
    if (out.size() > kMaxBuiltString) throw TemplateError("indent() result too large");
  }
  if (first) out = pad + out;
  return Value(derived(std::move(out), !s.input.empty()));
}

Value f_replace(const Value& v, const CallArgs& a) {
  CallArgs m;
  m.positional = {arg(a, 0, "old") ? *arg(a, 0, "old") : Value(""), arg(a, 1, "new") ? *arg(a, 1, "new") : Value("")};
  if (const Value* c = arg(a, 2, "count"); c && !c->is_none()) m.positional.push_back(*c);
  m.positional[0] = Value(to_str(m.positional[0]));
  m.positional[1] = Value(to_str(m.positional[1]));
  return *call_method(Value(to_str(v)), "replace", m);
}

std::string fold_case(const Value& v) {
  std::string s = v.as_string();
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Value f_unique(const Value& v, const CallArgs& a) {
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const auto attribute = arg_opt_string(a, 1, "attribute");
  ValueList out, seen;
  for (const auto& item : iterate(v)) {
    Value key = attribute ? get_attribute_path(item, *attribute) : item;
    if (!case_sensitive && key.is_string()) key = Value(fold_case(key));
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value string_method_filter(const Value& v, const char* method) { return *call_method(Value(to_str(v)), method, {}); }
Value f_upper(const Value& v, const CallArgs&) { return string_method_filter(v, "upper"); }
Value f_lower(const Value& v, const CallArgs&) { return string_method_filter(v, "lower"); }
Value f_title(const Value& v, const CallArgs&) { return string_method_filter(v, "title"); }
Value f_capitalize(const Value& v, const CallArgs&) { return string_method_filter(v, "capitalize"); }

Value f_first(const Value& v, const CallArgs&) {
  const ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}
Value f_last(const Value& v, const CallArgs&) {
  const ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_default(const Value& v, const CallArgs& a) {
  const Value fallback = arg(a, 0, "default_value") ? *arg(a, 0, "default_value") : Value("");
  const bool boolean = arg_bool(a, 1, "boolean", false);
  return v.is_undefined() || (boolean && !v.truthy()) ? fallback : v;
}

Value f_int(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) undefined_used(v);
  const Value fallback = arg(a, 0, "default") ? *arg(a, 0, "default") : Value(int64_t{0});
  if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) return Value(v.as_int());
  if (v.kind() == Value::Kind::Float) return Value(static_cast<int64_t>(v.as_number()));
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string t = python_strip(v.as_tainted(), std::nullopt, true, true).text;
      const int64_t i = std::stoll(t, &used);
      if (used == t.size()) return Value(i);
      const double d = std::stod(t, &used);
      if (used == t.size()) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value f_float(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) undefined_used(v);
  const Value fallback = arg(a, 0, "default") ? *arg(a, 0, "default") : Value(0.0);
  if (v.is_number() || v.kind() == Value::Kind::Bool) return Value(v.as_number());
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string t = python_strip(v.as_tainted(), std::nullopt, true, true).text;
      const double d = std::stod(t, &used);
      if (used == t.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value f_abs(const Value& v, const CallArgs&) {
  if (v.kind() == Value::Kind::Float) return Value(std::fabs(v.as_number()));
  if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
  throw TemplateError(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
}

Value f_round(const Value& v, const CallArgs& a) {
  const Value* p = arg(a, 0, "precision");
  const int64_t precision = p ? p->as_int() : 0;
  const std::string method = arg_opt_string(a, 1, "method").value_or("common");
  const bool integer = v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool;
  if (!integer && v.kind() != Value::Kind::Float)
    throw TemplateError(fmt::format("type {} doesn't define __round__ method", type_name(v)));
  // Python's round(int, n) stays an int (to tens for a negative n, halves to even); floor and ceil divide: a float.
  if (integer && method == "common") {
    if (precision >= 0) return Value(v.as_int());
    const double unit = std::pow(10.0, static_cast<double>(-precision));
    return Value(static_cast<int64_t>(std::nearbyint(static_cast<double>(v.as_int()) / unit) * unit));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_number() * scale;
  // Python's round() halves to even (round(2.5) == 2).
  const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value(r / scale);
}

Value f_reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    const auto cps = code_point_offsets(v.as_string());
    std::string out;
    for (size_t i = cps.size() - 1; i > 0; i--) out.append(v.as_string(), cps[i - 1], cps[i] - cps[i - 1]);
    return Value(derived(std::move(out), v.has_input()));
  }
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(const Value& v, const CallArgs& a) {
  const bool reverse = arg_bool(a, 0, "reverse", false), case_sensitive = arg_bool(a, 1, "case_sensitive", false);
  const auto attribute = arg_opt_string(a, 2, "attribute");
  ValueList items = iterate(v);
  const auto key = [&](const Value& x) {
    Value k = attribute ? get_attribute_path(x, *attribute) : x;
    return !case_sensitive && k.is_string() ? Value(fold_case(k)) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value::list(std::move(items));
}

Value f_sum(const Value& v, const CallArgs& a) {
  const auto attribute = arg_opt_string(a, 0, "attribute");
  Value total = arg(a, 1, "start") ? *arg(a, 1, "start") : Value(int64_t{0});
  for (const auto& item : iterate(v)) {
    const Value x = attribute ? get_attribute_path(item, *attribute) : item;
    if (!x.is_number() || !total.is_number()) throw TemplateError("sum() of non-numbers");
    total = total.kind() == Value::Kind::Float || x.kind() == Value::Kind::Float ? Value(total.as_number() + x.as_number())
                                                                                 : Value(total.as_int() + x.as_int());
  }
  return total;
}

Value extreme(const Value& v, const CallArgs& a, bool want_max) {
  const ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const auto attribute = arg_opt_string(a, 1, "attribute");
  const auto key = [&](const Value& x) {
    Value k = attribute ? get_attribute_path(x, *attribute) : x;
    return !case_sensitive && k.is_string() ? Value(fold_case(k)) : k;
  };
  const Value* best = &items[0];
  for (const auto& x : items)
    if (want_max ? less_than(key(*best), key(x)) : less_than(key(x), key(*best))) best = &x;
  return *best;
}
Value f_min(const Value& v, const CallArgs& a) { return extreme(v, a, false); }
Value f_max(const Value& v, const CallArgs& a) { return extreme(v, a, true); }

Value f_safe(const Value& v, const CallArgs&) { return v; }

Value f_escape(const Value& v, const CallArgs&) {
  const TaintedString s = to_str(v);
  std::string out;
  for (char c : s.text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(derived(std::move(out), !s.input.empty()));
}

Value f_center(const Value& v, const CallArgs& a) {
  const TaintedString s = to_str(v);
  const int64_t width = std::min<int64_t>(arg(a, 0, "width") ? arg(a, 0, "width")->as_int() : 80, 1 << 20);
  const int64_t len = python_len(Value(s.text));
  if (width <= len) return Value(s);
  const int64_t total = width - len, left = total / 2 + (total & width & 1);  // Python's str.center split
  return Value(derived(std::string(static_cast<size_t>(left), ' ') + s.text + std::string(static_cast<size_t>(total - left), ' '),
                       !s.input.empty()));
}

// jinja2 counts the runs of word characters (\w+) of the value's text: "[]" has none, "a-b" two.
Value f_wordcount(const Value& v, const CallArgs&) {
  const std::string text = to_str(v).text;
  int64_t words = 0;
  bool in_word = false;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const bool word = std::isalnum(c) || c == '_' || c >= 0x80;  // (non-ASCII text counted as word characters)
    if (word && !in_word) words++;
    in_word = word;
  }
  return Value(words);
}

Value f_attr(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) undefined_used(v);
  const auto name = arg_opt_string(a, 0, "name");
  return v.is_dict() && name ? v.get(std::string_view(*name)) : Value::undefined(name.value_or("attribute"));
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  if (v.is_undefined()) undefined_used(v);
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const bool by_value = arg_opt_string(a, 1, "by").value_or("key") == "value";
  const bool reverse = arg_bool(a, 2, "reverse", false);
  ValueList items = f_items(v, {}).as_list();
  const auto key = [&](const Value& kv) {
    Value k = kv.as_list()[by_value ? 1 : 0];
    return !case_sensitive && k.is_string() ? Value(fold_case(k)) : k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? less_than(key(y), key(x)) : less_than(key(x), key(y));
  });
  return Value::list(std::move(items));
}

struct NamedFilter {
  const char* name;
  FilterFunction fn;
};
constexpr NamedFilter kFilters[] = {
    {"tojson", f_tojson},     {"from_json", f_from_json}, {"length", f_length},       {"count", f_length},      {"string", f_string},
    {"trim", f_trim},         {"items", f_items},         {"list", f_list},         {"join", f_join},
    {"select", f_select},     {"reject", f_reject},       {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr},
    {"map", f_map},           {"indent", f_indent},       {"replace", f_replace},   {"unique", f_unique},
    {"upper", f_upper},       {"lower", f_lower},         {"title", f_title},       {"capitalize", f_capitalize},
    {"first", f_first},       {"last", f_last},           {"default", f_default},   {"d", f_default},
    {"int", f_int},           {"float", f_float},         {"abs", f_abs},           {"round", f_round},
    {"reverse", f_reverse},   {"sort", f_sort},           {"sum", f_sum},           {"min", f_min},
    {"max", f_max},           {"safe", f_safe},           {"escape", f_escape},     {"e", f_escape},
    {"center", f_center},     {"wordcount", f_wordcount}, {"attr", f_attr},         {"dictsort", f_dictsort},
};

}  // namespace

FilterFunction find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (name == f.name) return f.fn;
  return nullptr;
}

}  // namespace kestrel::jinja
