#pragma once
// The server's metrics, kept in prometheus-cpp's registry and rendered by its
// text serializer (exposition format 0.0.4): counters end in _total, gauges
// do not, durations are histograms in seconds, every series carries the
// served model's model_name label (vLLM's convention). Three families:
//   kestrel_*            the engine's own (docs/metrics.md lists them);
//   kestrel_num_requests_running / _waiting, kestrel_kv_cache_usage_perc,
//   kestrel_prefix_cache_hit_rate
//                        vLLM's gauges under our prefix (what the Gateway API
//                        Inference Extension's endpoint picker and KEDA/HPA
//                        examples scale on);
//   gen_ai_server_*      OpenTelemetry's gen_ai model-server histograms, with
//                        the semantic conventions' buckets and attributes,
//                        Prometheus-translated (dots to underscores, unit "s"
//                        to _seconds).
// Thread-safe: the engine thread records, HTTP threads render.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kestrel {

// One finished request, as the gen_ai server metrics see it.
struct GenAiRequest {
  std::string operation;      // gen_ai.operation.name: chat, text_completion, embeddings, rerank
  std::string request_model;  // gen_ai.request.model: the name the client asked for (the served name if none)
  std::string error_type;     // error.type when the request ended in an error ("" otherwise)
  double duration_s = 0;      // arrival to the last event
  double ttft_s = -1;         // arrival to the first generated token (< 0: none)
  int64_t output_tokens = 0;
};

class ServerMetrics {
 public:
  // model_name: the model_name label on every series, and gen_ai.response.model (none when empty).
  explicit ServerMetrics(const std::string& model_name = "");
  ~ServerMetrics();

  // Each throws Error for a name it does not know (a typo must not make a series nobody reads).
  void observe(const std::string& histogram, double seconds);
  void add(const std::string& counter, double v = 1.0, const std::string& label = "");
  void set(const std::string& gauge, double v);
  // The gen_ai server histograms of one finished request (request duration always; time to first token and
  // time per output token for a request that did not fail).
  void observe_gen_ai(const GenAiRequest& r);
  std::string render() const;
  // This server's transport and model-manager series (kestrel_http_*, kestrel_model*) with every other series of
  // each model's own metrics (their model_name labels tell them apart), each family once.
  std::string render_with(const std::vector<const ServerMetrics*>& models) const;
  // A counter's current value (0 before the first add), for in-process readers.
  double counter(const std::string& name, const std::string& label = "") const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel
