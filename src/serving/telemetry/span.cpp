#include "serving/telemetry/span.h"

#include <algorithm>
#include <random>

namespace kestrel {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // (upper case is not valid trace context)
}

template <size_t N>
bool read_hex(std::string_view s, std::array<uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  bool any = false;
  for (size_t i = 0; i < N; i++) {
    const int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
    any = any || out[i] != 0;
  }
  return any;  // all zeros is invalid
}

std::mt19937_64& rng() {
  thread_local std::mt19937_64 g{std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)};
  return g;
}

template <size_t N>
void random_bytes(std::array<uint8_t, N>& out) {
  do {
    for (size_t i = 0; i < N; i += 8) {
      const uint64_t v = rng()();
      for (size_t j = 0; j < 8 && i + j < N; j++) out[i + j] = static_cast<uint8_t>(v >> (8 * j));
    }
  } while (std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0; }));
}

}  // namespace

std::optional<TraceContext> parse_traceparent(std::string_view h) {
  // version "-" trace-id "-" parent-id "-" flags; version ff is invalid; version 00 has nothing after.
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  const int v1 = hex_digit(h[0]), v0 = hex_digit(h[1]);
  if (v1 < 0 || v0 < 0 || (v1 == 15 && v0 == 15)) return std::nullopt;
  if (v1 == 0 && v0 == 0 && h.size() != 55) return std::nullopt;
  if (h.size() > 55 && h[55] != '-') return std::nullopt;
  TraceContext c;
  std::array<uint8_t, 1> flags{};
  if (!read_hex(h.substr(3, 32), c.trace_id) || !read_hex(h.substr(36, 16), c.parent)) return std::nullopt;
  const int f1 = hex_digit(h[53]), f0 = hex_digit(h[54]);
  if (f1 < 0 || f0 < 0) return std::nullopt;
  flags[0] = static_cast<uint8_t>(f1 * 16 + f0);
  c.sampled = (flags[0] & 1) != 0;
  c.remote_parent = true;
  return c;
}

TraceContext new_trace() {
  TraceContext c;
  random_bytes(c.trace_id);
  return c;
}

SpanId new_span_id() {
  SpanId s;
  random_bytes(s);
  return s;
}

std::string hex(const uint8_t* bytes, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; i++) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

}  // namespace kestrel
