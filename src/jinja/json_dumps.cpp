// Python's json.dumps, as transformers' tojson calls it: keys in insertion
// order, ", " / ": " separators, non-ASCII kept unless ensure_ascii.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "jinja/builtins.h"
#include "tokenizer/utf8.h"

namespace kestrel::jinja {
namespace {

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t pos = 0; pos < s.size();) {
    const auto c = static_cast<unsigned char>(s[pos]);
    if (c >= 0x80) {
      const size_t start = pos;
      const uint32_t cp = utf8_next(s, pos);
      if (!ensure_ascii) {
        out.append(s, start, pos - start);
      } else if (cp >= 0x10000) {
        const uint32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        out += fmt::format("\\u{:04x}", cp);
      }
      continue;
    }
    pos++;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f))
          out += fmt::format("\\u{:04x}", c);
        else
          out += static_cast<char>(c);
    }
  }
  out += '"';
}

void dump(std::string& out, const Value& v, const JsonStyle& st, int level) {
  const auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; i++) out += st.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::Float: {
      const double f = v.as_number();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity") : python_float_repr(f);
      return;
    }
    case Value::Kind::String:
      dump_string(out, v.as_string(), st.ensure_ascii);
      return;
    case Value::Kind::List: {
      const auto& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); i++) {
        if (i) out += st.item_separator;
        if (st.pretty) newline(level + 1);
        dump(out, items[i], st, level + 1);
      }
      if (st.pretty) newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<DictKey, Value>*> items;
      for (const auto& kv : v.as_dict()) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (st.sort_keys)  // Python sorts the keys themselves: str with int is its TypeError
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
          if (a->first.is_string() && b->first.is_string()) return a->first.text < b->first.text;
          if (a->first.is_string() != b->first.is_string())
            throw TemplateError("'<' not supported between instances of 'str' and another key type");
          return less_than(a->first.value(), b->first.value());
        });
      out += '{';
      for (size_t i = 0; i < items.size(); i++) {
        if (i) out += st.item_separator;
        if (st.pretty) newline(level + 1);
        const DictKey& k = items[i]->first;
        if (k.is_string()) {
          dump_string(out, k.text, st.ensure_ascii);
        } else {  // json.dumps writes int, float, bool and None keys as strings
          const Value& x = *k.other;
          if (x.is_tuple()) throw TemplateError("keys must be str, int, float, bool or None, not tuple");
          std::string text = x.is_none() ? "null" : x.kind() == Value::Kind::Bool ? (x.as_bool() ? "true" : "false") : json_dumps(x, {});
          dump_string(out, text, st.ensure_ascii);
        }
        out += st.key_separator;
        dump(out, items[i]->second, st, level + 1);
      }
      if (st.pretty) newline(level);
      out += '}';
      return;
    }
    default:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

}  // namespace

std::string json_dumps(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(out, v, style, 0);
  return out;
}

}  // namespace kestrel::jinja
