#include "grammar/json_schema_grammar.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <set>

#include "core/error.h"

namespace kestrel {

using ojson = nlohmann::ordered_json;

namespace {

// The JSON building blocks. Whitespace is bounded, one space or a line break
// and its indent (llama.cpp's rule: a model that keeps writing spaces would
// otherwise never have to stop), and so are a number's digits (an exponent of
// two digits: 2e607 is JSON, but beyond a double, and parsers refuse it).
const char* kPrimitives = R"(ws ::= | " " | "\n" [ \t]{0,20}
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-string ws ":" ws json-value ws ( "," ws json-string ws ":" ws json-value ws )* )? "}"
json-array ::= "[" ws ( json-value ws ( "," ws json-value ws )* )? "]"
json-string ::= "\"" json-char* "\""
json-char ::= [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-number ::= json-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
json-boolean ::= "true" | "false"
json-null ::= "null"
)";

// Keywords that only describe (or that this converter reads where they apply).
const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$id", "$comment", "default",
                                            "examples", "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};

class SchemaConverter {
 public:
  // prefix: the rule names' (several schemas may share one grammar).
  SchemaConverter(const ojson& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  // The expression for the whole schema; its rules are appended to rules.
  std::string convert(std::string& rules) {
    const std::string top = visit(root_, "#");
    for (const auto& [name, body] : rules_) rules += name + " ::= " + body + "\n";
    return top;
  }

 private:
  [[noreturn]] static void refuse(const std::string& path, const std::string& what) {
    throw Error(fmt::format("json schema at {}: {}", path, what));
  }
  std::string add_rule(const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    const std::string name = fmt::format("{}s{}", prefix_, rules_.size());
    rules_[name] = body;
    by_body_[body] = name;
    return name;
  }
  static std::string literal_of(const ojson& value) { return gbnf_literal(value.dump()); }

  // A GBNF expression (usually a rule name) for the values the schema allows.
  std::string visit(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema 'false' allows no value");
      return "json-value";
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    std::set<std::string> used;  // keywords read below
    auto has = [&](const char* k) {
      if (!s.contains(k)) return false;
      used.insert(k);
      return true;
    };
    std::string expr;
    if (has("$ref")) {
      expr = ref(s["$ref"], path);
    } else if (has("const")) {
      used.insert("type");  // the value is given: its type says nothing more
      expr = literal_of(s["const"]);
    } else if (has("enum")) {
      used.insert("type");
      if (!s["enum"].is_array() || s["enum"].empty()) refuse(path + "/enum", "must be a non-empty array");
      std::string alts;
      for (const ojson& v : s["enum"]) alts += (alts.empty() ? "" : " | ") + literal_of(v);
      expr = add_rule(alts);
    } else if (has("anyOf") || has("oneOf")) {
      // oneOf is read as anyOf: the branches of the schemas people write for
      // tools and answers (object kinds, a value or null) do not overlap.
      const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
      const ojson& branches = s[key];
      if (!branches.is_array() || branches.empty()) refuse(path + "/" + key, "must be a non-empty array");
      std::string alts;
      for (size_t i = 0; i < branches.size(); i++)
        alts += (alts.empty() ? "" : " | ") + visit(branches[i], fmt::format("{}/{}/{}", path, key, i));
      expr = add_rule(alts);
    } else {
      expr = typed(s, path, used);
    }
    for (const auto& [k, v] : s.items()) {
      if (used.count(k) || kAnnotations.count(k)) continue;
      refuse(path, fmt::format("keyword '{}' is not supported in constrained decoding (it would be ignored)", k));
    }
    return expr;
  }

  std::string ref(const ojson& r, const std::string& path) {
    if (!r.is_string()) refuse(path + "/$ref", "must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    if (target.rfind("#", 0) != 0) refuse(path + "/$ref", fmt::format("'{}': only references inside the schema (#/...)", target));
    ojson::json_pointer ptr;
    try {
      ptr = ojson::json_pointer(target.substr(1));
    } catch (const std::exception&) {
      refuse(path + "/$ref", fmt::format("'{}' is not a JSON pointer", target));
    }
    if (!root_.contains(ptr)) refuse(path + "/$ref", fmt::format("'{}' points at nothing", target));
    // Named before it is visited: a schema may refer to itself (trees, lists).
    const std::string name = fmt::format("{}ref{}", prefix_, refs_.size());
    refs_[target] = name;
    rules_[name] = visit(root_.at(ptr), target);
    return name;
  }

  std::string typed(const ojson& s, const std::string& path, std::set<std::string>& used) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      used.insert("type");
      const ojson& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const ojson& x : t) {
          if (!x.is_string()) refuse(path + "/type", "must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      else refuse(path + "/type", "must be a string or an array of strings");
    } else if (s.contains("properties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems")) {
      types.push_back("array");
    } else {
      return "json-value";
    }
    std::string alts;
    for (const std::string& t : types) {
      std::string e;
      if (t == "object") e = object(s, path, used);
      else if (t == "array") e = array(s, path, used);
      else if (t == "string") e = string(s, path, used);
      else if (t == "integer") e = "json-integer";
      else if (t == "number") e = "json-number";
      else if (t == "boolean") e = "json-boolean";
      else if (t == "null") e = "json-null";
      else refuse(path + "/type", fmt::format("unknown type '{}'", t));
      alts += (alts.empty() ? "" : " | ") + e;
    }
    return types.size() == 1 ? alts : add_rule(alts);
  }

  std::string object(const ojson& s, const std::string& path, std::set<std::string>& used) {
    std::vector<std::pair<std::string, std::string>> props;  // name, value expression
    std::set<std::string> required;
    if (s.contains("required")) {
      used.insert("required");
      if (!s["required"].is_array()) refuse(path + "/required", "must be an array of names");
      for (const ojson& r : s["required"]) {
        if (!r.is_string()) refuse(path + "/required", "must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      used.insert("properties");
      if (!s["properties"].is_object()) refuse(path + "/properties", "must be an object");
      for (const auto& [name, sub] : s["properties"].items())
        props.emplace_back(name, visit(sub, path + "/properties/" + name));
    }
    std::string extra = "json-value";  // what a required name missing from properties may hold
    if (s.contains("additionalProperties")) {
      used.insert("additionalProperties");
      const ojson& a = s["additionalProperties"];
      if (a.is_object()) extra = visit(a, path + "/additionalProperties");
      else if (!a.is_boolean()) refuse(path + "/additionalProperties", "must be a boolean or a schema");
    }
    for (const std::string& r : required) {
      const bool declared = std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == r; });
      if (declared) continue;
      if (s.contains("additionalProperties") && s["additionalProperties"] == false)
        refuse(path + "/required", fmt::format("'{}' is required but not in properties, and no other is allowed", r));
      props.emplace_back(r, extra);
    }
    if (props.empty()) {  // no names given: any object, or one whose values all follow additionalProperties
      const bool none = s.contains("additionalProperties") && s["additionalProperties"] == false;
      if (none) return add_rule("\"{\" ws \"}\"");
      if (extra == "json-value") return "json-object";
      const std::string kv = "json-string ws \":\" ws " + extra + " ws";
      return add_rule("\"{\" ws ( " + kv + " ( \",\" ws " + kv + " )* )? \"}\"");
    }
    // body(i, first): the properties from i on; first: none written yet (no comma).
    const size_t n = props.size();
    std::map<std::pair<size_t, bool>, std::string> memo;
    std::function<std::string(size_t, bool)> body = [&](size_t i, bool first) -> std::string {
      if (i == n) return "";
      if (auto it = memo.find({i, first}); it != memo.end()) return it->second;
      const std::string kv = (first ? "" : "\",\" ws ") + gbnf_literal(ojson(props[i].first).dump()) + " ws \":\" ws " +
                             props[i].second + " ws";
      const std::string rest = body(i + 1, false);
      std::string b;
      if (required.count(props[i].first)) {
        b = kv + (rest.empty() ? "" : " " + rest);
      } else {
        const std::string skip = body(i + 1, first);
        b = "( " + kv + (rest.empty() ? "" : " " + rest) + " | " + skip + " )";
      }
      return memo[{i, first}] = add_rule(b);
    };
    const std::string inner = body(0, true);
    return add_rule("\"{\" ws " + inner + " \"}\"");
  }

  // A minimum and a maximum count (0 and -1 when absent), each 0..limit, min <= max.
  static std::pair<int64_t, int64_t> bounds(const ojson& s, const std::string& path, std::set<std::string>& used,
                                            const char* min_key, const char* max_key, int64_t limit) {
    int64_t v[2] = {0, -1};
    const char* keys[2] = {min_key, max_key};
    for (int i = 0; i < 2; i++) {
      if (!s.contains(keys[i])) continue;
      used.insert(keys[i]);
      const ojson& x = s[keys[i]];
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > limit)
        refuse(path + "/" + keys[i], fmt::format("must be an integer from 0 to {}", limit));
      v[i] = x.get<int64_t>();
    }
    if (v[1] >= 0 && v[1] < v[0]) refuse(path, fmt::format("{} is below {}", max_key, min_key));
    return {v[0], v[1]};
  }

  std::string array(const ojson& s, const std::string& path, std::set<std::string>& used) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      used.insert("prefixItems");
      if (!s["prefixItems"].is_array()) refuse(path + "/prefixItems", "must be an array of schemas");
      for (size_t i = 0; i < s["prefixItems"].size(); i++)
        prefix.push_back(visit(s["prefixItems"][i], fmt::format("{}/prefixItems/{}", path, i)));
    }
    std::string item;  // "" : no item after the prefix
    if (s.contains("items")) {
      used.insert("items");
      const ojson& it = s["items"];
      if (!(it.is_boolean() && !it.get<bool>())) item = visit(it, path + "/items");
    } else if (prefix.empty()) {
      item = "json-value";
    }
    const auto [min, max_items] = bounds(s, path, used, "minItems", "maxItems", 1000);
    int64_t max = max_items;
    const auto n_prefix = static_cast<int64_t>(prefix.size());
    if (item.empty()) max = max < 0 ? n_prefix : std::min(max, n_prefix);
    if (min > max && max >= 0) refuse(path, "minItems asks for more items than the schema allows");
    const bool unbounded = max < 0;
    const int64_t slots = unbounded ? std::max(min, n_prefix) : max;  // items written one by one
    auto element = [&](int64_t k) { return k < n_prefix ? prefix[static_cast<size_t>(k)] : item; };
    const std::string more = unbounded ? add_rule("\",\" ws " + item + " ws") : "";
    // tail(k): the items from k on, the first k written (so a comma comes first);
    // once an optional one is left out, so are the rest.
    std::function<std::string(int64_t)> tail = [&](int64_t k) -> std::string {
      if (k == slots) return unbounded && slots > 0 ? more + "*" : "";
      const std::string seq = (k > 0 ? "\",\" ws " : "") + element(k) + " ws " + tail(k + 1);
      return add_rule(k < min ? seq : "( " + seq + " )?");
    };
    const std::string items = slots == 0 && unbounded ? "( " + item + " ws " + more + "* )?" : tail(0);
    return add_rule("\"[\" ws " + items + " \"]\"");
  }

  std::string string(const ojson& s, const std::string& path, std::set<std::string>& used) {
    const auto [min, max] = bounds(s, path, used, "minLength", "maxLength", 4096);
    if (min == 0 && max < 0) return "json-string";
    return add_rule(max < 0 ? fmt::format("\"\\\"\" json-char{{{},}} \"\\\"\"", min)
                            : fmt::format("\"\\\"\" json-char{{{},{}}} \"\\\"\"", min, max));
  }

  const ojson& root_;
  std::string prefix_;
  std::map<std::string, std::string> rules_;    // name -> body
  std::map<std::string, std::string> by_body_;  // body -> name (one rule per distinct body)
  std::map<std::string, std::string> refs_;     // $ref -> rule name
};

}  // namespace

std::string gbnf_literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_schema_rules(const ojson& schema, const std::string& prefix, std::string& rules) {
  return SchemaConverter(schema, prefix).convert(rules);
}

std::string json_grammar_primitives() { return kPrimitives; }

std::string json_schema_to_gbnf(const ojson& schema) {
  std::string rules;
  const std::string top = json_schema_rules(schema, "", rules);
  return "root ::= " + top + "\n" + rules + kPrimitives;
}

std::string json_object_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

}  // namespace kestrel
