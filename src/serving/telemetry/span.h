#pragma once
// One finished span, as the exporter sends it (OTLP's Span, without links): W3C trace context ids, a name,
// a kind, start and end in Unix nanoseconds, attributes, events and a status.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kestrel {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// A request's place in a trace: the trace it belongs to, the span it continues (the client's, from its
// traceparent header; zero for a new trace) and whether the trace is recorded.
struct TraceContext {
  TraceId trace_id{};
  SpanId parent{};
  bool sampled = true;
  bool remote_parent = false;  // the parent came from the client
};

// W3C Trace Context (https://www.w3.org/TR/trace-context/): "00-<32 hex>-<16 hex>-<2 hex>" (a later version
// may carry more after a '-'). Nothing for a header that is absent or malformed (a new trace is started,
// as the recommendation says), or whose ids are all zeros.
std::optional<TraceContext> parse_traceparent(std::string_view header);
// A new trace (random id), sampled.
TraceContext new_trace();
SpanId new_span_id();
std::string hex(const uint8_t* bytes, size_t n);

using AttributeValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

struct SpanEvent {
  std::string name;
  uint64_t time_ns = 0;
  std::vector<Attribute> attributes;
};

struct SpanData {
  enum class Kind { Internal = 1, Server = 2 };
  enum class Status { Unset = 0, Ok = 1, Error = 2 };
  TraceId trace_id{};
  SpanId span_id{}, parent_span_id{};  // parent zero: a root span
  std::string name;
  Kind kind = Kind::Internal;
  uint64_t start_ns = 0, end_ns = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  Status status = Status::Unset;
  std::string status_message;
};

}  // namespace kestrel
