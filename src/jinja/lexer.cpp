#include "jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "jinja/value.h"
#include "tokenizer/utf8.h"

namespace kestrel::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string normalise_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); i++) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') i++;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the previous match ended a line (jinja's lstrip rule)
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text));
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting) && line_start < text.size() &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_start), text.end(), is_space))
          text.resize(line_start);
      }
      emit_text(std::move(text));
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        comment();
      } else if (kind == '%' && raw_block()) {
        // the raw body was emitted as text
      } else {
        tag_body(kind == '{');
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({TokenKind::End, "", 0, 0, line_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw TemplateError(fmt::format("line {}: {}", line_at(at), what));
  }
  // Positions mostly move forward: lines are counted from the last answer.
  int line_at(size_t at) const {
    at = std::min(at, src_.size());
    if (at < line_pos_) line_pos_ = 0, line_ = 1;
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(line_pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    line_pos_ = at;
    return line_;
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); i++)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  void emit_text(std::string text) {
    if (text.empty()) return;
    tokens_.push_back({TokenKind::Text, std::move(text), 0, 0, line_at(pos_)});
  }

  // After a block/comment end: `-` strips all following whitespace; trim_blocks one newline.
  void after_block_end(bool minus, bool plus) {
    if (minus) {
      while (pos_ < src_.size() && is_space(src_[pos_])) pos_++;
    } else if (!plus && pos_ < src_.size() && src_[pos_] == '\n') {
      pos_++;
    }
  }

  void comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(pos_, "unterminated comment");
    const bool minus = end > pos_ && src_[end - 1] == '-', plus = end > pos_ && src_[end - 1] == '+';
    pos_ = end + 2;
    after_block_end(minus, plus);
  }

  // {% raw %} ... {% endraw %}: the body is text, tags inside it are not read.
  bool raw_block() {
    size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) p++;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p + 3])) || src_[p + 3] == '_')))
      return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) p++;
    const bool minus = src_.compare(p, 3, "-%}") == 0;
    if (!minus && src_.compare(p, 2, "%}") != 0) fail(p, "expected '%}' after 'raw'");
    pos_ = p + (minus ? 3 : 2);
    if (minus)
      while (pos_ < src_.size() && is_space(src_[pos_])) pos_++;
    for (size_t q = pos_; (q = src_.find("{%", q)) != std::string::npos; q += 2) {
      size_t r = q + 2;
      const bool strip = r < src_.size() && src_[r] == '-';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) r++;
      while (r < src_.size() && is_space(src_[r])) r++;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_space(src_[r])) r++;
      const bool end_minus = src_.compare(r, 3, "-%}") == 0, end_plus = src_.compare(r, 3, "+%}") == 0;
      if (!end_minus && !end_plus && src_.compare(r, 2, "%}") != 0) fail(r, "expected '%}' after 'endraw'");
      std::string body = src_.substr(pos_, q - pos_);
      if (strip)
        while (!body.empty() && is_space(body.back())) body.pop_back();
      emit_text(std::move(body));
      pos_ = r + (end_minus || end_plus ? 3 : 2);
      after_block_end(end_minus, end_plus);
      return true;
    }
    fail(pos_, "missing {% endraw %}");
  }

  void tag_body(bool variable) {
    const size_t opened = pos_ - 2;
    const int line = line_at(pos_);
    tokens_.push_back({variable ? TokenKind::VarBegin : TokenKind::BlockBegin, "", 0, 0, line});
    const char close = variable ? '}' : '%';
    std::string brackets;  // open (, [, { — jinja2 does not end a tag inside them
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) pos_++;
      if (pos_ >= src_.size()) fail(opened, variable ? "'{{' is never closed by '}}'" : "'{%' is never closed by '%}'");
      // The end tag is looked for before operators, as jinja does ("}}" ends the tag even inside braces).
      if (!brackets.empty()) {
        const char c = src_[pos_];
        if (c == '(' || c == '[' || c == '{') brackets += c;
        if (c == ')' || c == ']' || c == '}') brackets.pop_back();
        expression_token();
        continue;
      }
      const bool minus = src_.compare(pos_, 3, std::string("-") + close + "}") == 0;
      const bool plus = !variable && src_.compare(pos_, 3, "+%}") == 0;
      if (minus || plus || (src_[pos_] == close && pos_ + 1 < src_.size() && src_[pos_ + 1] == '}')) {
        pos_ += (minus || plus) ? 3 : 2;
        tokens_.push_back({variable ? TokenKind::VarEnd : TokenKind::BlockEnd, "", 0, 0, line_at(pos_)});
        if (variable) {
          if (minus)
            while (pos_ < src_.size() && is_space(src_[pos_])) pos_++;
        } else {
          after_block_end(minus, plus);
        }
        return;
      }
      if (src_[pos_] == '(' || src_[pos_] == '[' || src_[pos_] == '{') brackets += src_[pos_];
      expression_token();
    }
  }

  void expression_token() {
    const char c = src_[pos_];
    const int line = line_at(pos_);
    if (c == '\'' || c == '"') {
      tokens_.push_back({TokenKind::String, string_literal(), 0, 0, line});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      number(line);
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t b = pos_;
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) pos_++;
      tokens_.push_back({TokenKind::Name, src_.substr(b, pos_ - b), 0, 0, line});
    } else {
      static const char* const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
                                        ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
      for (const char* op : ops) {
        if (src_.compare(pos_, std::strlen(op), op) == 0) {
          pos_ += std::strlen(op);
          tokens_.push_back({TokenKind::Operator, op, 0, 0, line});
          return;
        }
      }
      fail(pos_, fmt::format("unexpected character '{}'", c));
    }
  }

  void number(int line) {
    const size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) pos_++;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      pos_++;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) p++;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text = src_.substr(b, pos_ - b);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t{is_float ? TokenKind::Float : TokenKind::Int, text, 0, 0, line};
    if (is_float)
      t.float_value = std::stod(text);
    else
      t.int_value = std::stoll(text);
    tokens_.push_back(std::move(t));
  }

  // A quoted literal with Python's escapes.
  std::string string_literal() {
    const char quote = src_[pos_];
    const size_t start = pos_++;
    std::string out;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      if (src_[pos_] != '\\') {
        out += src_[pos_++];
        continue;
      }
      if (++pos_ >= src_.size()) break;
      const char e = src_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (pos_ + n > src_.size()) fail(pos_, "truncated \\" + std::string(1, e) + " escape");
          const std::string hex = src_.substr(pos_, n);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) fail(pos_, "bad \\" + std::string(1, e) + " escape");
          out += utf8_encode(static_cast<uint32_t>(std::stoul(hex, nullptr, 16)));
          pos_ += n;
          break;
        }
        default:
          out += '\\';
          out += e;
      }
    }
    if (pos_ >= src_.size()) fail(start, "unterminated string");
    pos_++;
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  mutable size_t line_pos_ = 0;
  mutable int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(normalise_newlines(source)).run(); }

}  // namespace kestrel::jinja
