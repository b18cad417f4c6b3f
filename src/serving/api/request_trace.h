#pragma once
// One API request's spans (docs/deploy.md, "Traces"), following OpenTelemetry's gen_ai conventions: a SERVER
// span named "{gen_ai.operation.name} {gen_ai.request.model}" with the request's and the response's gen_ai
// attributes, usage and latencies, continuing the client's W3C traceparent when it sent one; under it, per
// choice, the time in the queue, the prefill (one child span per prefill step: chunked prefill) and the
// decode. Built when the request's last choice ends and handed to the exporter (which never blocks).
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serving/engine/serving_engine.h"
#include "serving/http/http_types.h"
#include "serving/telemetry/otlp_exporter.h"

namespace kestrel {

class RequestTrace {
 public:
  // What the request asked (gen_ai.request.*); values < 0 are left out.
  struct Ask {
    std::string operation;      // gen_ai.operation.name
    std::string model;          // gen_ai.request.model
    std::string response_model; // gen_ai.response.model (the served name)
    int64_t max_tokens = -1;
    double temperature = -1, top_p = -1;
  };
  // Null when tracing is off or the client's traceparent says its trace is not sampled (the sampler decides).
  static std::shared_ptr<RequestTrace> start(SpanExporter* exporter, const HttpRequest& req);

  // Once the request was accepted: what it asked, its choices, the id its answer carries ("" : none).
  void accepted(Ask ask, int choices, std::string response_id);
  // A choice's end event (usage, times from arrival, finish reason, prefill steps); the last sends the spans.
  void choice_ended(const StreamEvent& end);
  // The request was refused before it ran (status, the error's type): one SERVER span with an error status.
  void refused(const std::string& operation, int status, const std::string& error_type, const std::string& message);

 private:
  RequestTrace(SpanExporter* exporter, const HttpRequest& req, TraceContext ctx);
  uint64_t at_ns(double ms_from_arrival) const;
  SpanData server_span() const;
  SpanExporter* exporter_;
  TraceContext ctx_;
  SpanId server_id_;
  std::string method_, path_;
  uint64_t arrival_ns_ = 0;  // Unix time of the request's arrival
  std::mutex mutex_;
  Ask ask_;
  std::string response_id_;
  int choices_ = 0;
  std::vector<StreamEvent> ends_;
};

}  // namespace kestrel
