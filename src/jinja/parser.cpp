#include "jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>

namespace kestrel::jinja {
namespace {

// Nesting beyond this is refused rather than risking the parser's stack.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    std::string end;
    return parse_body({}, end);
  }

 private:
  // ---- token helpers
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(std::string_view op) const { return cur().kind == TokenKind::Operator && cur().text == op; }
  bool is_name(std::string_view n) const { return cur().kind == TokenKind::Name && cur().text == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    i_++;
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    i_++;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError(fmt::format("line {}: {}", cur().line, what));
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case TokenKind::End: return "end of template";
      case TokenKind::BlockEnd: return "'%}'";
      case TokenKind::VarEnd: return "'}}'";
      case TokenKind::String: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::Name) fail(fmt::format("expected a name, got {}", describe(cur())));
    return t_[i_++].text;
  }
  void expect(TokenKind k, const char* what) {
    if (cur().kind != k) fail(fmt::format("expected {}, got {}", what, describe(cur())));
    i_++;
  }
  void expect_block_end() { expect(TokenKind::BlockEnd, "'%}'"); }

  ExprPtr node(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = cur().line;
    return e;
  }

  // ---- statements
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& which) {
    const std::string outer = expecting_;
    expecting_ = ends.size() ? std::string(*(ends.end() - 1)) : "";
    struct Restore {
      std::string& slot;
      std::string value;
      ~Restore() { slot = value; }
    } restore{expecting_, outer};
    Body body;
    for (;;) {
      const Token& tok = cur();
      if (tok.kind == TokenKind::End) {
        if (ends.size() != 0) fail(fmt::format("missing '{{% {} %}}'", *(ends.end() - 1)));
        return body;
      }
      if (tok.kind == TokenKind::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Text;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        i_++;
      } else if (tok.kind == TokenKind::VarBegin) {
        i_++;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Print;
        s->line = tok.line;
        s->exprs.push_back(parse_tuple(true));
        expect(TokenKind::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (tok.kind == TokenKind::BlockBegin) {
        const Token& name = peek();
        if (name.kind == TokenKind::Name && std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          i_ += 2;
          which = name.text;
          return body;
        }
        i_++;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    auto s = std::make_unique<Stmt>();
    s->line = cur().line;
    const std::string tag = expect_name();
    std::string end;
    if (tag == "if") {
      s->kind = Stmt::Kind::If;
      s->exprs.push_back(parse_tuple(true));
      expect_block_end();
      for (;;) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}, end));
        if (end == "elif") {
          s->exprs.push_back(parse_tuple(true));
          expect_block_end();
        } else if (end == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}, end));
          break;
        } else {
          break;
        }
      }
    } else if (tag == "for") {
      s->kind = Stmt::Kind::For;
      s->targets = parse_targets();
      if (!skip_name("in")) fail("expected 'in' in for loop, got " + describe(cur()));
      s->exprs.push_back(parse_tuple(false));
      if (skip_name("if")) s->exprs.push_back(parse_expression(true));
      if (is_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      s->bodies.push_back(parse_body({"else", "endfor"}, end));
      if (end == "else") {
        expect_block_end();
        s->bodies.push_back(parse_body({"endfor"}, end));
      }
    } else if (tag == "set") {
      s->kind = Stmt::Kind::Set;
      if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == ".") {
        s->targets.push_back(expect_name());
        i_++;
        s->text = expect_name();
      } else {
        s->targets = parse_targets();
      }
      if (skip_op("=")) {
        s->exprs.push_back(parse_tuple(true));
      } else {
        if (s->targets.size() != 1 || !s->text.empty()) fail("a block set takes one name");
        expect_block_end();
        s->bodies.push_back(parse_body({"endset"}, end));
      }
    } else if (tag == "macro") {
      s->kind = Stmt::Kind::Macro;
      s->text = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (skip_op(")")) break;
        MacroParam p{expect_name(), nullptr};
        if (skip_op("=")) p.default_value = parse_expression(true);
        s->params.push_back(std::move(p));
      }
      expect_block_end();
      s->bodies.push_back(parse_body({"endmacro"}, end));
    } else if (tag == "filter") {
      s->kind = Stmt::Kind::FilterBlock;
      s->text = expect_name();
      if (is_op("(")) s->args = parse_call_args();
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}, end));
    } else if (tag == "break" || tag == "continue") {
      s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
    } else if (tag == "generation") {
      s->kind = Stmt::Kind::Scope;
      expect_block_end();
      s->bodies.push_back(parse_body({"endgeneration"}, end));
    } else {
      i_--;
      const bool closing = tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else";
      if (closing)
        fail(expecting_.empty() ? fmt::format("unexpected '{}' (no block is open)", tag)
                                : fmt::format("unexpected '{}' (the open block ends with '{}')", tag, expecting_));
      fail(fmt::format("unsupported or unknown tag '{}'", tag));
    }
    expect_block_end();
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      if (paren && is_op(")")) break;
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  // ---- expressions (jinja2's precedence, loosest first)
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) p_.fail("expression nested too deeply");
    }
    ~Depth() { p_.depth_--; }
    Parser& p_;
  };

  // An expression, or a tuple "a, b" where the grammar allows one.
  ExprPtr parse_tuple(bool with_condexpr) {
    auto first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tuple = node(Expr::Kind::TupleLiteral);
    tuple->children.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind == TokenKind::BlockEnd || cur().kind == TokenKind::VarEnd || is_op(")")) break;
      tuple->children.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Depth d(*this);
    if (!with_condexpr) return parse_or();
    auto e = parse_or();
    while (skip_name("if")) {
      auto c = node(Expr::Kind::Conditional);
      c->children.push_back(std::move(e));
      c->children.push_back(parse_or());
      c->children.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = node(Expr::Kind::Binary);
    e->name = std::move(op);
    e->children.push_back(std::move(a));
    e->children.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    auto e = parse_and();
    while (skip_name("or")) e = binary("or", std::move(e), parse_and());
    return e;
  }
  ExprPtr parse_and() {
    auto e = parse_not();
    while (skip_name("and")) e = binary("and", std::move(e), parse_not());
    return e;
  }
  ExprPtr parse_not() {
    Depth d(*this);
    if (skip_name("not")) {
      auto e = node(Expr::Kind::Unary);
      e->name = "not";
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    auto first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    for (;;) {
      std::string op;
      if (cur().kind == TokenKind::Operator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" || cur().text == "<=" ||
           cur().text == ">=")) {
        op = t_[i_++].text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().kind == TokenKind::Name && peek().text == "in") {
        i_ += 2;
        op = "notin";
      } else {
        break;
      }
      ops.push_back(op);
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(Expr::Kind::Compare);
    e->ops = std::move(ops);
    e->children.push_back(std::move(first));
    for (auto& r : rest) e->children.push_back(std::move(r));
    return e;
  }
  ExprPtr parse_math1() {
    auto e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = t_[i_++].text;
      e = binary(op, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    auto e = parse_math2();
    while (skip_op("~")) e = binary("~", std::move(e), parse_math2());
    return e;
  }
  ExprPtr parse_math2() {
    auto e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = t_[i_++].text;
      e = binary(op, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    auto e = parse_unary(true);
    while (skip_op("**")) e = binary("**", std::move(e), parse_unary(true));
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth d(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::Unary);
      e->name = t_[i_++].text;
      e->children.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filter_expr(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    Depth d(*this);
    const Token& tok = cur();
    if (tok.kind == TokenKind::Name) {
      i_++;
      auto e = node(Expr::Kind::Literal);
      if (tok.text == "true" || tok.text == "True") {
        e->value = true;
      } else if (tok.text == "false" || tok.text == "False") {
        e->value = false;
      } else if (tok.text == "none" || tok.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::Name;
        e->name = tok.text;
      }
      return e;
    }
    if (tok.kind == TokenKind::String) {
      std::string s;
      while (cur().kind == TokenKind::String) s += t_[i_++].text;  // adjacent literals join
      auto e = node(Expr::Kind::Literal);
      e->value = Value(std::move(s));
      return e;
    }
    if (tok.kind == TokenKind::Int || tok.kind == TokenKind::Float) {
      auto e = node(Expr::Kind::Literal);
      e->value = tok.kind == TokenKind::Int ? Value(tok.int_value) : Value(tok.float_value);
      i_++;
      return e;
    }
    if (skip_op("(")) {
      if (skip_op(")")) return node(Expr::Kind::TupleLiteral);
      auto e = parse_expression(true);
      if (is_op(",")) {
        auto tuple = node(Expr::Kind::TupleLiteral);
        tuple->children.push_back(std::move(e));
        while (skip_op(",") && !is_op(")")) tuple->children.push_back(parse_expression(true));
        e = std::move(tuple);
      }
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = node(Expr::Kind::ListLiteral);
      while (!skip_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (skip_op("]")) break;
        e->children.push_back(parse_expression(true));
      }
      return e;
    }
    if (skip_op("{")) {
      auto e = node(Expr::Kind::DictLiteral);
      while (!skip_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (skip_op("}")) break;
        e->children.push_back(parse_expression(true));
        expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      return e;
    }
    fail("unexpected " + describe(tok));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (skip_op(".")) {
        if (cur().kind == TokenKind::Int) {
          auto g = node(Expr::Kind::GetItem);
          auto index = node(Expr::Kind::Literal);
          index->value = Value(t_[i_++].int_value);
          g->children.push_back(std::move(e));
          g->children.push_back(std::move(index));
          e = std::move(g);
          continue;
        }
        auto g = node(Expr::Kind::GetAttr);
        g->name = expect_name();
        g->children.push_back(std::move(e));
        e = std::move(g);
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        auto c = node(Expr::Kind::Call);
        c->args = parse_call_args();
        c->children.push_back(std::move(e));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target) {
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (colons < 2 && skip_op(":")) {
      colons++;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression(true);
    }
    expect_op("]");
    auto e = node(colons ? Expr::Kind::Slice : Expr::Kind::GetItem);
    e->children.push_back(std::move(target));
    e->children.push_back(std::move(parts[0]));
    if (colons) {
      e->children.push_back(std::move(parts[1]));
      e->children.push_back(std::move(parts[2]));
    }
    return e;
  }

  CallSyntax parse_call_args() {
    expect_op("(");
    CallSyntax args;
    while (!skip_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) expect_op(",");
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == "=") {
        std::string key = t_[i_].text;
        i_ += 2;
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail("positional argument after a keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    return args;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (skip_op("|")) {
        auto f = node(Expr::Kind::Filter);
        f->name = expect_name();
        if (is_op("(")) f->args = parse_call_args();
        f->children.push_back(std::move(e));
        e = std::move(f);
      } else if (skip_name("is")) {
        auto t = node(Expr::Kind::Test);
        t->negated = skip_name("not");
        t->name = expect_name();
        if (is_op("(")) {
          t->args = parse_call_args();
        } else if ((cur().kind == TokenKind::Name || cur().kind == TokenKind::String || cur().kind == TokenKind::Int ||
                    cur().kind == TokenKind::Float || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") && !is_name("in") &&
                   !is_name("is") && !is_name("not")) {
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        t->children.push_back(std::move(e));
        e = std::move(t);
      } else if (is_op("(")) {
        auto c = node(Expr::Kind::Call);
        c->args = parse_call_args();
        c->children.push_back(std::move(e));
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  std::string expecting_;  // the end tag of the innermost open block
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace kestrel::jinja
