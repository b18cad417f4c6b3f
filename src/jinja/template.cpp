// The tree-walking renderer: statements write to one output, expressions
// evaluate to Values with Python's semantics.
#include "jinja/template.h"

#include <fmt/format.h>

#include <cmath>

#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace kestrel::jinja {
namespace {

// Variables of one frame: the template's top level, a loop iteration, a macro call.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, x] : vars)
      if (k == name) {
        x = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

[[noreturn]] void fail_undefined(const Value& v) { throw TemplateError(v.undefined_name()); }

std::string name_hint(const Value& obj, std::string_view attr) {
  return fmt::format("'{} object' has no attribute '{}'", type_name(obj), attr);
}

// Python's floor division and modulo on integers.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

class Renderer {
 public:
  Renderer(const RenderOptions& o, const ValueDict& vars) : opt_(o), root_(std::make_shared<Scope>()) {
    install_globals();
    for (const auto& [k, v] : vars) {
      if (!k.is_string()) throw TemplateError("template variables are named by strings");
      root_->set(k.text, v);
    }
  }

  TaintedString run(const Body& body) {
    TaintedString out;
    if (exec(body, root_, out) != Flow::Normal) throw TemplateError("'break' or 'continue' outside a loop");
    return out;
  }

 private:
  // ---------------------------------------------------------------- statements
  void emit(TaintedString& out, const TaintedString& s) {
    if (out.text.size() + s.text.size() > opt_.limits.max_output_bytes)
      throw TemplateError(fmt::format("template output exceeds {} bytes", opt_.limits.max_output_bytes));
    tainted_append(out, s);
  }

  void step() {
    if (++steps_ > opt_.limits.max_steps)
      throw TemplateError(fmt::format("template ran more than {} loop iterations and calls", opt_.limits.max_steps));
  }

  Flow exec(const Body& body, const ScopePtr& scope, TaintedString& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, TaintedString& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        emit(out, TaintedString{s.text, {}});
        return Flow::Normal;
      case Stmt::Kind::Print:
        emit(out, to_str(eval(*s.exprs[0], scope)));
        return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.exprs.size(); i++)
          if (eval(*s.exprs[i], scope).truthy()) return exec(s.bodies[i], scope, out);
        return s.bodies.size() > s.exprs.size() ? exec(s.bodies.back(), scope, out) : Flow::Normal;
      case Stmt::Kind::For:
        return exec_for(s, scope, out);
      case Stmt::Kind::Set:
        exec_set(s, scope);
        return Flow::Normal;
      case Stmt::Kind::Macro:
        scope->set(s.text, make_macro(s, scope));
        return Flow::Normal;
      case Stmt::Kind::FilterBlock: {
        TaintedString inner;
        const Flow f = exec(s.bodies[0], scope, inner);
        emit(out, to_str(apply_filter(s.text, Value(std::move(inner)), s.args, scope)));
        return f;
      }
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Scope:
        return exec(s.bodies[0], scope, out);
    }
    return Flow::Normal;
  }

  static void bind(Scope& scope, const std::vector<std::string>& targets, const Value& item) {
    if (targets.size() == 1) {
      scope.set(targets[0], item);
      return;
    }
    const ValueList parts = iterate(item);
    if (parts.size() != targets.size())
      throw TemplateError(fmt::format("{} values to unpack (expected {}, got {})",
                                      parts.size() > targets.size() ? "too many" : "not enough", targets.size(),
                                      parts.size()));
    for (size_t i = 0; i < targets.size(); i++) scope.set(targets[i], parts[i]);
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope, TaintedString& out) {
    ValueList items = iterate(eval(*s.exprs[0], scope));
    if (s.exprs.size() > 1) {  // {% for x in xs if cond %}: the loop sees only the kept items
      ValueList kept;
      for (auto& item : items) {
        step();
        auto probe = std::make_shared<Scope>(Scope{scope, {}});
        bind(*probe, s.targets, item);
        if (eval(*s.exprs[1], probe).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return s.bodies.size() > 1 ? exec(s.bodies[1], scope, out) : Flow::Normal;
    const auto n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; i++) {
      step();
      auto iteration = std::make_shared<Scope>(Scope{scope, {}});
      bind(*iteration, s.targets, items[static_cast<size_t>(i)]);
      ValueDict loop = {{"index", Value(i + 1)},       {"index0", Value(i)},        {"revindex", Value(n - i)},
                        {"revindex0", Value(n - i - 1)}, {"first", Value(i == 0)},    {"last", Value(i == n - 1)},
                        {"length", Value(n)},            {"depth", Value(int64_t{1})}, {"depth0", Value(int64_t{0})}};
      if (i > 0) loop.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) loop.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
      loop.emplace_back("cycle", Value::function("cycle", [i](const CallArgs& a) {
                          if (a.positional.empty()) throw TemplateError("no items for cycling given");
                          return a.positional[static_cast<size_t>(i) % a.positional.size()];
                        }));
      iteration->set("loop", Value::dict(std::move(loop)));
      if (exec(s.bodies[0], iteration, out) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  void exec_set(const Stmt& s, const ScopePtr& scope) {
    Value v;
    if (!s.bodies.empty()) {
      TaintedString captured;
      exec(s.bodies[0], scope, captured);
      v = Value(std::move(captured));
    } else {
      v = eval(*s.exprs[0], scope);
    }
    if (!s.text.empty()) {  // {% set ns.attr = v %}
      const Value* ns = scope->find(s.targets[0]);
      if (!ns || !ns->is_namespace())
        throw TemplateError(fmt::format("cannot assign attribute on non-namespace object '{}'", s.targets[0]));
      for (auto& [k, x] : ns->namespace_items())
        if (k == s.text) {
          x = std::move(v);
          return;
        }
      ns->namespace_items().emplace_back(s.text, std::move(v));
      return;
    }
    bind(*scope, s.targets, v);
  }

  Value make_macro(const Stmt& s, const ScopePtr& defined_in) {
    return Value::function(s.text, [this, &s, defined_in](const CallArgs& args) {
      step();
      if (depth_ >= opt_.limits.max_call_depth)
        throw TemplateError(fmt::format("macro calls nested deeper than {}", opt_.limits.max_call_depth));
      if (args.positional.size() > s.params.size())
        throw TemplateError(fmt::format("macro '{}' takes not more than {} argument(s)", s.text, s.params.size()));
      auto frame = std::make_shared<Scope>(Scope{defined_in, {}});
      for (const auto& [k, v] : args.keyword)
        if (std::none_of(s.params.begin(), s.params.end(), [&](const MacroParam& p) { return p.name == k; }))
          throw TemplateError(fmt::format("macro '{}' takes no keyword argument '{}'", s.text, k));
      for (size_t i = 0; i < s.params.size(); i++) {
        const MacroParam& p = s.params[i];
        if (const Value* given = args.get(i, p.name))
          frame->set(p.name, *given);
        else if (p.default_value)
          frame->set(p.name, eval(*p.default_value, frame));
        else
          frame->set(p.name, Value::undefined(fmt::format("parameter '{}' was not provided", p.name)));
      }
      TaintedString out;
      depth_++;
      struct Leave {
        int& d;
        ~Leave() { d--; }
      } leave{depth_};
      exec(s.bodies[0], frame, out);
      return Value(std::move(out));
    });
  }

  // ---------------------------------------------------------------- expressions
  CallArgs eval_args(const CallSyntax& syntax, const ScopePtr& scope) {
    CallArgs a;
    for (const auto& e : syntax.positional) a.positional.push_back(eval(*e, scope));
    for (const auto& [k, e] : syntax.keyword) a.keyword.emplace_back(k, eval(*e, scope));
    return a;
  }

  Value apply_filter(const std::string& name, const Value& input, const CallSyntax& args, const ScopePtr& scope) {
    const FilterFunction f = find_filter(name);
    if (!f) throw TemplateError(fmt::format("No filter named '{}' found.", name));
    return f(input, eval_args(args, scope));
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope->find(e.name);
        return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
      }
      case Expr::Kind::GetAttr:
        return get_attr(eval(*e.children[0], scope), e.name);
      case Expr::Kind::GetItem:
        return get_item(eval(*e.children[0], scope), eval(*e.children[1], scope));
      case Expr::Kind::Slice:
        return slice(e, scope);
      case Expr::Kind::Call:
        return call(e, scope);
      case Expr::Kind::Filter:
        return apply_filter(e.name, eval(*e.children[0], scope), e.args, scope);
      case Expr::Kind::Test: {
        const TestFunction t = find_test(e.name);
        if (!t) throw TemplateError(fmt::format("line {}: No test named '{}' found.", e.line, e.name));
        return Value(t(eval(*e.children[0], scope), eval_args(e.args, scope)) != e.negated);
      }
      case Expr::Kind::Unary:
        return unary(e.name, eval(*e.children[0], scope));
      case Expr::Kind::Binary: {
        const Value a = eval(*e.children[0], scope);
        if (e.name == "and") return a.truthy() ? eval(*e.children[1], scope) : a;
        if (e.name == "or") return a.truthy() ? a : eval(*e.children[1], scope);
        return binary(e.name, a, eval(*e.children[1], scope));
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.children[0], scope);
        for (size_t i = 0; i < e.ops.size(); i++) {
          Value right = eval(*e.children[i + 1], scope);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::Conditional:
        if (eval(*e.children[1], scope).truthy()) return eval(*e.children[0], scope);
        return e.children[2] ? eval(*e.children[2], scope) : Value::undefined("the inline if had no else");
      case Expr::Kind::ListLiteral:
      case Expr::Kind::TupleLiteral: {
        ValueList items;
        for (const auto& c : e.children) items.push_back(eval(*c, scope));
        return e.kind == Expr::Kind::TupleLiteral ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Kind::DictLiteral: {
        ValueDict items;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          const Value k = eval(*e.children[i], scope);
          DictKey key = DictKey::from(k);
          Value v = eval(*e.children[i + 1], scope);
          auto it = std::find_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first.matches(k); });
          if (it != items.end())
            it->second = std::move(v);  // Python keeps the first key and its place, with the last value
          else
            items.emplace_back(std::move(key), std::move(v));
        }
        return Value::dict(std::move(items));
      }
    }
    return {};
  }

  static Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_dict()) {
      Value v = obj.get(name);
      return v.is_undefined() ? Value::undefined(name_hint(obj, name)) : v;
    }
    return Value::undefined(name_hint(obj, name));
  }

  static Value get_item(const Value& obj, const Value& key) {
    if (obj.is_undefined()) fail_undefined(obj);
    if (obj.is_dict() && key.is_string()) return get_attr(obj, key.as_string());
    if (obj.is_dict()) {  // jinja2's getitem: an unhashable key is a miss too
      Value v = obj.get(key);
      return v.is_undefined() ? Value::undefined(fmt::format("dict object has no element {}", repr(key))) : v;
    }
    if ((obj.is_list() || obj.is_string()) && (key.kind() == Value::Kind::Int || key.kind() == Value::Kind::Bool)) {
      const int64_t n = python_len(obj);
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("{} index out of range", type_name(obj)));
      if (obj.is_list()) return obj.as_list()[static_cast<size_t>(i)];
      const auto cps = code_point_offsets(obj.as_string());
      return Value(tainted_substr(obj.as_tainted(), cps[static_cast<size_t>(i)], cps[static_cast<size_t>(i) + 1]));
    }
    if (key.is_string()) return Value::undefined(name_hint(obj, key.as_string()));
    return Value::undefined(fmt::format("'{} object' has no item {}", type_name(obj), repr(key)));
  }

  Value slice(const Expr& e, const ScopePtr& scope) {
    const Value obj = eval(*e.children[0], scope);
    if (obj.is_undefined()) fail_undefined(obj);
    if (!obj.is_list() && !obj.is_string()) throw TemplateError(fmt::format("'{}' object is not subscriptable", type_name(obj)));
    const auto bound = [&](size_t i) -> std::optional<int64_t> {
      if (!e.children[i]) return std::nullopt;
      const Value v = eval(*e.children[i], scope);
      if (v.is_none()) return std::nullopt;
      if (v.kind() != Value::Kind::Int) throw TemplateError("slice indices must be integers or None");
      return v.as_int();
    };
    const std::optional<int64_t> b = bound(1), en = bound(2), st = bound(3);
    const int64_t step = st.value_or(1);
    if (step == 0) throw TemplateError("slice step cannot be zero");
    const int64_t n = python_len(obj);
    // Python's PySlice_AdjustIndices.
    const auto adjust = [&](std::optional<int64_t> x, int64_t dflt) {
      if (!x) return dflt;
      int64_t v = *x < 0 ? *x + n : *x;
      if (v < 0) v = step < 0 ? -1 : 0;
      if (v >= n) v = step < 0 ? n - 1 : n;
      return v;
    };
    const int64_t start = adjust(b, step < 0 ? n - 1 : 0), stop = adjust(en, step < 0 ? -1 : n);
    std::vector<int64_t> picks;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picks.push_back(i);
    if (obj.is_list()) {
      ValueList out;
      for (int64_t i : picks) out.push_back(obj.as_list()[static_cast<size_t>(i)]);
      return Value::list(std::move(out));
    }
    const auto cps = code_point_offsets(obj.as_string());
    if (step == 1)
      return Value(tainted_substr(obj.as_tainted(), cps[static_cast<size_t>(start)],
                                  cps[static_cast<size_t>(std::max(start, stop))]));
    TaintedString out;
    for (int64_t i : picks)
      tainted_append(out, tainted_substr(obj.as_tainted(), cps[static_cast<size_t>(i)], cps[static_cast<size_t>(i) + 1]));
    return Value(std::move(out));
  }

  Value call(const Expr& e, const ScopePtr& scope) {
    const Expr& callee = *e.children[0];
    if (callee.kind == Expr::Kind::GetAttr) {
      const Value obj = eval(*callee.children[0], scope);
      if (obj.is_undefined()) fail_undefined(obj);
      const CallArgs args = eval_args(e.args, scope);
      if (auto r = call_method(obj, callee.name, args)) return *r;
      const Value f = get_attr(obj, callee.name);
      if (f.is_function()) return f.call(args);
      if (f.is_undefined()) fail_undefined(f);
      throw TemplateError(fmt::format("'{}' object is not callable", type_name(f)));
    }
    const Value f = eval(callee, scope);
    if (f.is_undefined()) fail_undefined(f);
    if (!f.is_function()) throw TemplateError(fmt::format("'{}' object is not callable", type_name(f)));
    return f.call(eval_args(e.args, scope));
  }

  static Value unary(const std::string& op, const Value& v) {
    if (op == "not") return Value(!v.truthy());
    if (v.is_undefined()) fail_undefined(v);
    if (v.kind() == Value::Kind::Float) return Value(op == "-" ? -v.as_number() : v.as_number());
    if (v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool) return Value(op == "-" ? -v.as_int() : v.as_int());
    throw TemplateError(fmt::format("bad operand type for unary {}: '{}'", op, type_name(v)));
  }

  void check_size(size_t bytes) const {
    if (bytes > opt_.limits.max_output_bytes)
      throw TemplateError(fmt::format("a string built by the template exceeds {} bytes", opt_.limits.max_output_bytes));
  }
  void check_items(size_t items) const {
    if (items > opt_.limits.max_list_items)
      throw TemplateError(fmt::format("a list built by the template exceeds {} items", opt_.limits.max_list_items));
  }

  Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
      TaintedString s = to_str(a);
      const TaintedString t = to_str(b);
      check_size(s.text.size() + t.text.size());
      tainted_append(s, t);
      return Value(std::move(s));
    }
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    const auto integral = [](const Value& v) { return v.kind() == Value::Kind::Int || v.kind() == Value::Kind::Bool; };
    const bool ints = integral(a) && integral(b);
    const bool nums = (a.is_number() || integral(a)) && (b.is_number() || integral(b));
    if (op == "+") {
      if (ints) return Value(a.as_int() + b.as_int());
      if (nums) return Value(a.as_number() + b.as_number());
      if (a.is_string() && b.is_string()) {
        check_size(a.as_string().size() + b.as_string().size());
        TaintedString s = a.as_tainted();
        tainted_append(s, b.as_tainted());
        return Value(std::move(s));
      }
      if (a.is_list() && b.is_list()) {
        check_items(a.as_list().size() + b.as_list().size());
        ValueList items = a.as_list();
        items.insert(items.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(items));
      }
    } else if (op == "-") {
      if (ints) return Value(a.as_int() - b.as_int());
      if (nums) return Value(a.as_number() - b.as_number());
    } else if (op == "*") {
      if (ints) return Value(a.as_int() * b.as_int());
      if (nums) return Value(a.as_number() * b.as_number());
      const Value& seq = integral(a) ? b : a;
      const Value& count = integral(a) ? a : b;
      if (integral(count) && (seq.is_string() || seq.is_list())) {
        const int64_t k = std::max<int64_t>(0, count.as_int());
        if (seq.is_string()) {
          check_size(seq.as_string().size() * static_cast<size_t>(k));
          TaintedString s;
          for (int64_t i = 0; i < k; i++) tainted_append(s, seq.as_tainted());
          return Value(std::move(s));
        }
        check_items(seq.as_list().size() * static_cast<size_t>(k));
        ValueList items;
        for (int64_t i = 0; i < k; i++) items.insert(items.end(), seq.as_list().begin(), seq.as_list().end());
        return Value::list(std::move(items));
      }
    } else if (op == "/" || op == "//" || op == "%") {
      if (nums) {
        if (b.as_number() == 0) throw TemplateError(op == "/" ? "division by zero" : "integer division or modulo by zero");
        if (op == "/") return Value(a.as_number() / b.as_number());
        if (ints) return Value(op == "//" ? floor_div(a.as_int(), b.as_int()) : floor_mod(a.as_int(), b.as_int()));
        const double q = std::floor(a.as_number() / b.as_number());
        return Value(op == "//" ? q : a.as_number() - q * b.as_number());
      }
    } else if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t r = 1;
        for (int64_t i = 0; i < b.as_int() && i < 64; i++) r *= a.as_int();
        return Value(r);
      }
      if (nums) return Value(std::pow(a.as_number(), b.as_number()));
    }
    throw TemplateError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b)));
  }

  static bool contains(const Value& seq, const Value& x) {
    if (seq.is_string()) {
      if (!x.is_string()) throw TemplateError(fmt::format("'in <string>' requires string as left operand, not {}", type_name(x)));
      return seq.as_string().find(x.as_string()) != std::string::npos;
    }
    if (seq.is_dict()) {
      DictKey::from(x);  // unhashable: TypeError
      return !seq.get(x).is_undefined();
    }
    if (seq.is_list()) {
      for (const auto& v : seq.as_list())
        if (equals(v, x)) return true;
      return false;
    }
    if (seq.is_undefined()) return false;
    throw TemplateError(fmt::format("argument of type '{}' is not iterable", type_name(seq)));
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    if (a.is_undefined()) fail_undefined(a);
    if (b.is_undefined()) fail_undefined(b);
    if (op == "<") return less_than(a, b);
    if (op == ">") return less_than(b, a);
    if (op == "<=") return !less_than(b, a);
    return !less_than(a, b);  // >=
  }

  // ---------------------------------------------------------------- globals
  void install_globals() {
    root_->set("raise_exception", Value::function("raise_exception", [](const CallArgs& a) -> Value {
                 throw TemplateError(a.positional.empty() ? std::string() : to_str(a.positional[0]).text, true);
               }));
    root_->set("strftime_now", Value::function("strftime_now", [this](const CallArgs& a) {
                 const Value* f = a.get(0, "format");
                 if (!f || !f->is_string()) throw TemplateError("strftime_now() needs a format string");
                 std::tm tm{};
                 if (opt_.now) {
                   tm = *opt_.now;
                 } else {
                   const std::time_t t = std::time(nullptr);
                   localtime_r(&t, &tm);
                 }
                 std::string buf(256 + f->as_string().size() * 16, '\0');
                 const size_t n = std::strftime(buf.data(), buf.size(), f->as_string().c_str(), &tm);
                 buf.resize(n);
                 return Value(buf);
               }));
    root_->set("namespace", Value::function("namespace", [](const CallArgs& a) {
                 ValueDict items;
                 for (const auto& p : a.positional) {
                   if (!p.is_dict()) throw TemplateError("namespace() takes mappings and keyword arguments");
                   for (const auto& kv : p.as_dict()) items.push_back(kv);
                 }
                 for (const auto& kv : a.keyword) items.push_back(kv);
                 return Value::namespace_object(std::move(items));
               }));
    root_->set("dict", Value::function("dict", [](const CallArgs& a) {
                 ValueDict items;
                 for (const auto& p : a.positional)
                   if (p.is_dict())
                     for (const auto& kv : p.as_dict()) items.push_back(kv);
                 for (const auto& kv : a.keyword) items.push_back(kv);
                 return Value::dict(std::move(items));
               }));
    root_->set("range", Value::function("range", [this](const CallArgs& a) {
                 int64_t start = 0, stop = 0, step_by = 1;
                 const auto num = [](const Value& v) {
                   if (v.kind() != Value::Kind::Int && v.kind() != Value::Kind::Bool)
                     throw TemplateError(fmt::format("'{}' object cannot be interpreted as an integer", type_name(v)));
                   return v.as_int();
                 };
                 if (a.positional.size() == 1) {
                   stop = num(a.positional[0]);
                 } else if (a.positional.size() >= 2) {
                   start = num(a.positional[0]);
                   stop = num(a.positional[1]);
                   if (a.positional.size() > 2) step_by = num(a.positional[2]);
                 } else {
                   throw TemplateError("range expected at least 1 argument, got 0");
                 }
                 if (step_by == 0) throw TemplateError("range() arg 3 must not be zero");
                 ValueList items;
                 for (int64_t i = start; step_by > 0 ? i < stop : i > stop; i += step_by) {
                   step();
                   check_items(items.size() + 1);
                   items.emplace_back(i);
                 }
                 return Value::list(std::move(items));
               }));
  }

  const RenderOptions& opt_;
  ScopePtr root_;
  uint64_t steps_ = 0;
  int depth_ = 0;
};

// Unknown filters and tests are reported when the template is loaded, as jinja2 does, except inside an `if`
// (its conditions and branches) or a conditional expression: there jinja2 reports them only when evaluated
// (its compiler's "soft" frames). A for loop's body, a macro's and a filter block's start hard again.
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  soft = soft || e->kind == Expr::Kind::Conditional;
  if (!soft && e->kind == Expr::Kind::Filter && !find_filter(e->name))
    throw TemplateError(fmt::format("line {}: no filter named '{}'", e->line, e->name));
  if (!soft && e->kind == Expr::Kind::Test && !find_test(e->name))
    throw TemplateError(fmt::format("line {}: no test named '{}'", e->line, e->name));
  for (const auto& c : e->children) check_names(c.get(), soft);
  for (const auto& c : e->args.positional) check_names(c.get(), soft);
  for (const auto& [k, c] : e->args.keyword) check_names(c.get(), soft);
}

void check_names(const Body& body, bool soft) {
  for (const auto& s : body) {
    if (s->kind == Stmt::Kind::FilterBlock && !find_filter(s->text))
      throw TemplateError(fmt::format("line {}: no filter named '{}'", s->line, s->text));
    const bool soft_here = soft || s->kind == Stmt::Kind::If;
    const bool inner = s->kind == Stmt::Kind::For || s->kind == Stmt::Kind::Macro || s->kind == Stmt::Kind::FilterBlock;
    for (const auto& e : s->exprs) check_names(e.get(), soft_here);
    for (const auto& p : s->params) check_names(p.default_value.get(), false);
    for (const auto& a : s->args.positional) check_names(a.get(), false);
    for (const auto& [k, a] : s->args.keyword) check_names(a.get(), false);
    for (const auto& b : s->bodies) check_names(b, inner ? false : soft_here);
  }
}

}  // namespace

Template::Template(std::string_view source) {
  auto body = std::make_shared<Body>(parse(tokenize(source)));
  check_names(*body, false);
  body_ = std::move(body);
}

namespace {

bool reads_name(const Expr* e, std::string_view name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::Name && e->name == name) return true;
  for (const auto& c : e->children)
    if (reads_name(c.get(), name)) return true;
  for (const auto& c : e->args.positional)
    if (reads_name(c.get(), name)) return true;
  for (const auto& [k, c] : e->args.keyword)
    if (reads_name(c.get(), name)) return true;
  return false;
}

bool reads_name(const Body& body, std::string_view name) {
  for (const auto& s : body) {
    for (const auto& e : s->exprs)
      if (reads_name(e.get(), name)) return true;
    for (const auto& p : s->params)
      if (reads_name(p.default_value.get(), name)) return true;
    for (const auto& a : s->args.positional)
      if (reads_name(a.get(), name)) return true;
    for (const auto& b : s->bodies)
      if (reads_name(b, name)) return true;
  }
  return false;
}

}  // namespace

bool Template::reads(std::string_view name) const { return reads_name(*body_, name); }

TaintedString Template::render(const ValueDict& vars, const RenderOptions& options) const {
  return Renderer(options, vars).run(*body_);
}

std::tm parse_wall_time(const std::string& text) {
  std::tm tm{};
  for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"}) {
    tm = std::tm{};
    const char* end = strptime(text.c_str(), format, &tm);
    if (end && *end == '\0') {
      std::tm copy = tm;
      copy.tm_isdst = -1;
      timegm(&copy);  // fills in the weekday and day of the year
      tm.tm_wday = copy.tm_wday;
      tm.tm_yday = copy.tm_yday;
      return tm;
    }
  }
  throw Error(fmt::format("'{}' is not a time like 2026-01-15T10:30:00", text));
}

}  // namespace kestrel::jinja
