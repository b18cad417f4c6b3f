#include "serving/api/request_trace.h"

#include <fmt/format.h>

#include <algorithm>

namespace kestrel {
namespace {

uint64_t unix_ns(std::chrono::system_clock::time_point t) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

SpanData child(const SpanData& parent, std::string name, uint64_t start, uint64_t end) {
  SpanData s;
  s.trace_id = parent.trace_id;
  s.span_id = new_span_id();
  s.parent_span_id = parent.span_id;
  s.name = std::move(name);
  s.start_ns = start;
  s.end_ns = std::max(start, end);
  return s;
}

}  // namespace

std::shared_ptr<RequestTrace> RequestTrace::start(SpanExporter* exporter, const HttpRequest& req) {
  if (!exporter) return nullptr;
  const OtlpConfig& c = exporter->config();
  const std::optional<TraceContext> parent = parse_traceparent(req.header("traceparent"));
  TraceContext ctx;
  if (parent) {
    // parentbased_*: the client's decision; always_on/always_off: ours, in the client's trace.
    if (c.parent_sampling ? !parent->sampled : c.always_off) return nullptr;
    ctx = *parent;
  } else {
    if (c.always_off) return nullptr;
    ctx = new_trace();
  }
  return std::shared_ptr<RequestTrace>(new RequestTrace(exporter, req, ctx));
}

RequestTrace::RequestTrace(SpanExporter* exporter, const HttpRequest& req, TraceContext ctx)
    : exporter_(exporter), ctx_(ctx), server_id_(new_span_id()), method_(req.method), path_(req.path) {
  const auto since = std::chrono::steady_clock::now() - req.arrival;
  arrival_ns_ = unix_ns(std::chrono::system_clock::now() -
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(since));
}

uint64_t RequestTrace::at_ns(double ms) const {
  return arrival_ns_ + static_cast<uint64_t>(std::max(0.0, ms) * 1e6);
}

void RequestTrace::accepted(Ask ask, int choices, std::string response_id) {
  std::lock_guard lock(mutex_);
  ask_ = std::move(ask);
  choices_ = choices;
  response_id_ = std::move(response_id);
}

SpanData RequestTrace::server_span() const {
  SpanData s;
  s.trace_id = ctx_.trace_id;
  s.span_id = server_id_;
  s.parent_span_id = ctx_.parent;  // zero for a new trace
  s.kind = SpanData::Kind::Server;
  s.name = ask_.model.empty() ? ask_.operation : fmt::format("{} {}", ask_.operation, ask_.model);
  s.start_ns = arrival_ns_;
  s.attributes = {{"gen_ai.operation.name", ask_.operation},
                  {"gen_ai.provider.name", std::string("kestrel")},
                  {"http.request.method", method_},
                  {"url.path", path_}};
  if (!ask_.model.empty()) s.attributes.push_back({"gen_ai.request.model", ask_.model});
  return s;
}

void RequestTrace::choice_ended(const StreamEvent& end) {
  std::vector<SpanData> spans;
  {
    std::lock_guard lock(mutex_);
    ends_.push_back(end);
    if (static_cast<int>(ends_.size()) < choices_) return;
    SpanData server = server_span();
    auto& a = server.attributes;
    if (!ask_.response_model.empty()) a.push_back({"gen_ai.response.model", ask_.response_model});
    if (ask_.max_tokens >= 0) a.push_back({"gen_ai.request.max_tokens", ask_.max_tokens});
    if (ask_.temperature >= 0) a.push_back({"gen_ai.request.temperature", ask_.temperature});
    if (ask_.top_p >= 0) a.push_back({"gen_ai.request.top_p", ask_.top_p});
    if (!response_id_.empty()) a.push_back({"gen_ai.response.id", response_id_});
    if (choices_ > 1) a.push_back({"gen_ai.request.choice.count", static_cast<int64_t>(choices_)});
    std::vector<std::string> reasons;
    int64_t input = 0, output = 0, cached = 0;
    double e2e = 0, queue = 0, ttft = -1;
    std::string error;
    for (const StreamEvent& e : ends_) {
      reasons.push_back(e.finish_reason);
      input += e.prompt_tokens;
      output += e.completion_tokens;
      cached += e.cached_tokens;
      e2e = std::max(e2e, e.e2e_ms);
      queue = std::max(queue, e.queue_ms);
      if (e.ttft_ms >= 0) ttft = ttft < 0 ? e.ttft_ms : std::min(ttft, e.ttft_ms);
      if (e.finish_reason == "error" && error.empty()) error = e.error;
    }
    a.push_back({"gen_ai.response.finish_reasons", reasons});
    a.push_back({"gen_ai.usage.input_tokens", input});
    a.push_back({"gen_ai.usage.output_tokens", output});
    a.push_back({"gen_ai.usage.cache_read.input_tokens", cached});
    // vLLM's latency attributes, in seconds.
    a.push_back({"gen_ai.latency.time_in_queue", queue / 1000});
    if (ttft >= 0) a.push_back({"gen_ai.latency.time_to_first_token", ttft / 1000});
    a.push_back({"gen_ai.latency.e2e", e2e / 1000});
    a.push_back({"http.response.status_code", static_cast<int64_t>(200)});
    server.end_ns = at_ns(e2e);
    if (!error.empty()) {
      server.status = SpanData::Status::Error;
      server.status_message = error;
      a.push_back({"error.type", std::string("_OTHER")});
    }
    spans.push_back(server);
    // Per choice: queue, prefill (a child per step that computed prompt rows), decode.
    for (size_t i = 0; i < ends_.size(); i++) {
      const StreamEvent& e = ends_[i];
      const double prefill_end = e.ttft_ms >= 0 ? e.ttft_ms : e.e2e_ms;
      SpanData q = child(server, "queue", at_ns(0), at_ns(e.queue_ms));
      SpanData p = child(server, "prefill", at_ns(e.queue_ms), at_ns(prefill_end));
      p.attributes = {{"gen_ai.usage.input_tokens", e.prompt_tokens},
                      {"gen_ai.usage.cache_read.input_tokens", e.cached_tokens},
                      {"kestrel.prefill.steps", static_cast<int64_t>(e.prefill_steps_ms.size())}};
      double from = e.queue_ms;
      for (size_t k = 0; k < e.prefill_steps_ms.size(); k++) {
        SpanData step = child(p, "prefill step", at_ns(from), at_ns(e.prefill_steps_ms[k]));
        step.attributes = {{"kestrel.prefill.step", static_cast<int64_t>(k)}};
        from = e.prefill_steps_ms[k];
        spans.push_back(std::move(step));
      }
      if (ends_.size() > 1)
        for (SpanData* s : {&q, &p}) s->attributes.push_back({"gen_ai.response.choice.index", static_cast<int64_t>(i)});
      spans.push_back(std::move(q));
      spans.push_back(std::move(p));
      if (e.ttft_ms >= 0) {
        SpanData d = child(server, "decode", at_ns(e.ttft_ms), at_ns(e.e2e_ms));
        d.attributes = {{"gen_ai.usage.output_tokens", e.completion_tokens}};
        if (ends_.size() > 1) d.attributes.push_back({"gen_ai.response.choice.index", static_cast<int64_t>(i)});
        spans.push_back(std::move(d));
      }
    }
  }
  exporter_->submit(std::move(spans));
}

void RequestTrace::refused(const std::string& operation, int status, const std::string& error_type,
                           const std::string& message) {
  SpanData s;
  {
    std::lock_guard lock(mutex_);
    if (ask_.operation.empty()) ask_.operation = operation;
    s = server_span();
  }
  s.end_ns = unix_ns(std::chrono::system_clock::now());
  s.status = SpanData::Status::Error;
  s.status_message = message;
  s.attributes.push_back({"http.response.status_code", static_cast<int64_t>(status)});
  s.attributes.push_back({"error.type", error_type.empty() ? std::to_string(status) : error_type});
  exporter_->submit({std::move(s)});
}

}  // namespace kestrel
