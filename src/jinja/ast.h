#pragma once
// The parsed template: expressions and statements as plain trees.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace kestrel::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct CallSyntax {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    Literal,    // value
    Name,       // name
    GetAttr,    // a.name
    GetItem,    // a[b]
    Slice,      // a[b:c:d] (children may be null)
    Call,       // a(args)
    Filter,     // a | name(args)
    Test,       // a is [not] name(args)
    Unary,      // op a   (-, +, not)
    Binary,     // a op b (+ - * / // % ** ~ and or)
    Compare,    // a op1 b op2 c ... (== != < > <= >= in notin)
    Conditional,  // a if b else c  (c may be null: undefined)
    ListLiteral,
    TupleLiteral,
    DictLiteral,  // items as key, value pairs in children
  };
  Kind kind;
  int line = 0;
  Value value;                    // Literal
  std::string name;               // Name, GetAttr, Filter, Test; the operator of Unary/Binary
  std::vector<std::string> ops;   // Compare
  std::vector<ExprPtr> children;  // operands
  CallSyntax args;                // Call, Filter, Test
  bool negated = false;           // Test
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    Text,      // text
    Print,     // {{ expr }}
    If,        // conditions[i] → bodies[i]; bodies.back() is else when bodies.size() > conditions.size()
    For,       // for targets in expr [if filter]: bodies[0], else bodies[1]
    Set,       // set targets = expr | set ns.attr = expr | set name %}body{% endset
    Macro,     // macro name(params): bodies[0]
    FilterBlock,  // filter name(args): bodies[0]
    Break,
    Continue,
    Scope,     // bodies[0] run as is ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;                  // Text; Macro, FilterBlock name; Set: namespace attribute
  std::vector<std::string> targets;  // For, Set
  std::vector<ExprPtr> exprs;        // Print: value; If: conditions; For: iterable, filter?; Set: value, ns?
  std::vector<Body> bodies;
  std::vector<MacroParam> params;    // Macro
  CallSyntax args;                   // FilterBlock
};

}  // namespace kestrel::jinja
