#pragma once
// Tokens to statement trees, with jinja2's operator precedence.
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace kestrel::jinja {

// Throws TemplateError("line N: ...") naming what was expected.
Body parse(const std::vector<Token>& tokens);

}  // namespace kestrel::jinja
