// The OTLP encoder: spans into an ExportTraceServiceRequest with the classes protoc generates from the
// OpenTelemetry protos (opentelemetry-proto, pinned; scripts/setup.sh fetches them).
#include <algorithm>

#include <opentelemetry/proto/collector/trace/v1/trace_service.pb.h>  // generated (build/generated)
#include "serving/telemetry/otlp_exporter.h"

namespace kestrel {
namespace {

namespace otlp = opentelemetry::proto;

void set_value(otlp::common::v1::AnyValue* out, const AttributeValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) out->set_string_value(*s);
  else if (const auto* i = std::get_if<int64_t>(&v)) out->set_int_value(*i);
  else if (const auto* d = std::get_if<double>(&v)) out->set_double_value(*d);
  else if (const auto* b = std::get_if<bool>(&v)) out->set_bool_value(*b);
  else
    for (const auto& s : std::get<std::vector<std::string>>(v)) out->mutable_array_value()->add_values()->set_string_value(s);
}

template <class Repeated>
void add_attributes(Repeated* out, const std::vector<Attribute>& attributes) {
  for (const Attribute& a : attributes) {
    auto* kv = out->Add();
    kv->set_key(a.key);
    set_value(kv->mutable_value(), a.value);
  }
}

}  // namespace

bool otlp_supported() { return true; }

std::string encode_otlp_traces(const std::vector<Attribute>& resource, const std::vector<SpanData>& spans) {
  otlp::collector::trace::v1::ExportTraceServiceRequest request;
  auto* rs = request.add_resource_spans();
  add_attributes(rs->mutable_resource()->mutable_attributes(), resource);
  auto* ss = rs->add_scope_spans();
  ss->mutable_scope()->set_name("kestrel");
  for (const SpanData& s : spans) {
    auto* out = ss->add_spans();
    out->set_trace_id(s.trace_id.data(), s.trace_id.size());
    out->set_span_id(s.span_id.data(), s.span_id.size());
    if (std::any_of(s.parent_span_id.begin(), s.parent_span_id.end(), [](uint8_t b) { return b != 0; }))
      out->set_parent_span_id(s.parent_span_id.data(), s.parent_span_id.size());
    out->set_name(s.name);
    out->set_kind(s.kind == SpanData::Kind::Server ? otlp::trace::v1::Span::SPAN_KIND_SERVER
                                                   : otlp::trace::v1::Span::SPAN_KIND_INTERNAL);
    out->set_start_time_unix_nano(s.start_ns);
    out->set_end_time_unix_nano(s.end_ns);
    add_attributes(out->mutable_attributes(), s.attributes);
    for (const SpanEvent& e : s.events) {
      auto* ev = out->add_events();
      ev->set_name(e.name);
      ev->set_time_unix_nano(e.time_ns);
      add_attributes(ev->mutable_attributes(), e.attributes);
    }
    if (s.status != SpanData::Status::Unset) {
      out->mutable_status()->set_code(s.status == SpanData::Status::Ok ? otlp::trace::v1::Status::STATUS_CODE_OK
                                                                       : otlp::trace::v1::Status::STATUS_CODE_ERROR);
      if (!s.status_message.empty()) out->mutable_status()->set_message(s.status_message);
    }
  }
  return request.SerializeAsString();
}

}  // namespace kestrel
