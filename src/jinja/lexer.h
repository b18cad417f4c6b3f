#pragma once
// Template source to tokens, with the whitespace rules Hugging Face's
// renderer sets (trim_blocks, lstrip_blocks, `-`/`+` tag modifiers, one
// trailing newline of the source dropped, newlines normalised to "\n").
// {% raw %} bodies come out as text; comments vanish.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::jinja {

enum class TokenKind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Operator, End };

struct Token {
  TokenKind kind;
  std::string text;  // text, name, operator, or a string literal's decoded value
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Throws TemplateError("line N: ...") on an unterminated tag, string or raw block.
std::vector<Token> tokenize(std::string_view source);

}  // namespace kestrel::jinja
