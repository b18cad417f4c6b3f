#pragma once
// Small UTF-8 helpers shared by the tokenizers and the streaming decoder.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kestrel {

// Length of the UTF-8 sequence a lead byte announces (1 for invalid bytes).
inline size_t utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

inline std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else if (cp < 0x800) { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Decodes one code point at s[pos], advancing pos; invalid bytes decode as themselves.
inline uint32_t utf8_next(std::string_view s, size_t& pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  const size_t n = utf8_len(lead);
  if (n == 1 || pos + n > s.size()) { pos++; return lead; }
  uint32_t cp = lead & (0x7F >> n);
  for (size_t i = 1; i < n; i++) {
    const auto c = static_cast<unsigned char>(s[pos + i]);
    if ((c & 0xC0) != 0x80) { pos++; return lead; }
    cp = (cp << 6) | (c & 0x3F);
  }
  pos += n;
  return cp;
}

// Whether byte c may follow lead at position k (1..3) of its sequence (Unicode's table 3-7 of
// well-formed UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF).
inline bool utf8_may_follow(unsigned char lead, size_t k, unsigned char c) {
  if (k == 1) {
    if (lead == 0xE0) return c >= 0xA0 && c <= 0xBF;
    if (lead == 0xED) return c >= 0x80 && c <= 0x9F;
    if (lead == 0xF0) return c >= 0x90 && c <= 0xBF;
    if (lead == 0xF4) return c >= 0x80 && c <= 0x8F;
  }
  return (c & 0xC0) == 0x80;
}

// Whether s is well-formed UTF-8 throughout (utf8_may_follow's table; a lone continuation or invalid lead fails).
inline bool utf8_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto lead = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_len(lead);
    if ((lead >= 0x80 && n == 1) || lead == 0xC0 || lead == 0xC1 || lead > 0xF4 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; k++)
      if (!utf8_may_follow(lead, k, static_cast<unsigned char>(s[i + k]))) return false;
    i += n;
  }
  return true;
}

// Accumulates streamed bytes and releases only complete UTF-8 characters, so a
// multi-byte character split across two tokens is never printed in halves.
// Ill-formed bytes are released as soon as they are known to be: a
// sequence cut short ends its piece and the byte that cut it starts the
// next, so a receiver that replaces each ill-formed part (JSON with
// replacement) sees the same parts whatever the pieces were.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes) {
    pending_ += bytes;
    size_t complete = 0, i = 0;
    while (i < pending_.size()) {
      const auto lead = static_cast<unsigned char>(pending_[i]);
      const size_t n = lead >= 0xC2 && lead <= 0xF4 ? utf8_len(lead) : 1;  // others stand alone
      size_t k = 1;
      while (k < n && i + k < pending_.size() && utf8_may_follow(lead, k, static_cast<unsigned char>(pending_[i + k])))
        k++;
      if (k < n && i + k == pending_.size()) break;  // well-formed so far: wait for the rest
      i += k;  // a whole character, or an ill-formed prefix cut before the byte that breaks it
      complete = i;
    }
    std::string out = pending_.substr(0, complete);
    pending_.erase(0, complete);
    return out;
  }
  // Whatever is left at the end (an incomplete sequence) is flushed as is.
  std::string flush() { return std::exchange(pending_, {}); }

 private:
  std::string pending_;
};

}  // namespace kestrel
