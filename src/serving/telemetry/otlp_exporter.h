#pragma once
// Spans to an OpenTelemetry collector over OTLP/HTTP with protobuf bodies (POST {endpoint}/v1/traces), off
// the request path: submit() only queues (a bounded queue; a span that finds it full is dropped and counted),
// and one thread sends batches every interval or when a batch fills. A collector that is down, slow or
// refusing costs each batch one timeout on that thread and nothing on any request; what could not be sent
// is dropped and counted (kestrel_otlp_spans_dropped_total{reason}).
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serving/telemetry/span.h"

namespace kestrel {

class ServerMetrics;

struct OtlpConfig {
  std::string endpoint;  // the traces URL: http://HOST:PORT/v1/traces ("" : tracing off)
  std::map<std::string, std::string> headers;  // sent with every export (authentication, tenancy)
  int timeout_ms = 10000;                      // one export's time, connect to answer
  std::vector<Attribute> resource;             // service.name, service.version, OTEL_RESOURCE_ATTRIBUTES
  bool parent_sampling = true;  // parentbased_always_on: a client's unsampled traceparent is not recorded
  bool always_off = false;      // always_off / parentbased_always_off: nothing but a sampled parent's (or nothing)
  size_t max_queue = 2048;      // spans waiting; beyond, dropped
  size_t max_batch = 512;       // spans per export
  int interval_ms = 1000;       // the longest a span waits for its batch
};

// The configuration from --otlp-endpoint (a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT; "" : none) and the
// standard environment: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _PROTOCOL (http/protobuf
// only), OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER (always_on, always_off,
// parentbased_always_on, parentbased_always_off), OTEL_SDK_DISABLED. Throws Error naming a value it does not
// implement (a gRPC protocol, an https endpoint, a ratio sampler, a malformed header list).
OtlpConfig otlp_config(const std::string& flag_endpoint, const std::string& service_version);

// The protobuf body of an export (ExportTraceServiceRequest); throws Error in a build without protobuf.
std::string encode_otlp_traces(const std::vector<Attribute>& resource, const std::vector<SpanData>& spans);
bool otlp_supported();  // this build encodes OTLP (protobuf and the OpenTelemetry protos were found)

class SpanExporter {
 public:
  SpanExporter(OtlpConfig config, ServerMetrics* metrics);
  ~SpanExporter();  // sends what is queued (within one timeout), then stops
  const OtlpConfig& config() const { return c_; }
  // Never blocks on the network.
  void submit(std::vector<SpanData> spans);

 private:
  void run();
  bool send(const std::vector<SpanData>& batch);
  void dropped(size_t n, const char* reason);
  OtlpConfig c_;
  ServerMetrics* metrics_;
  std::string host_, path_;
  int port_ = 80;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<SpanData> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kestrel
