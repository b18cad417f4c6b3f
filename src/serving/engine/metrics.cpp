#include "serving/engine/metrics.h"

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <vector>

#include "core/error.h"

namespace kestrel {
namespace {

using Buckets = std::vector<double>;

const Buckets kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                 0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0, 120.0};
// Whole requests and queueing run for minutes on a CPU (a long answer, a busy server): up to 10 minutes.
const Buckets kRequestBuckets = {0.01, 0.025, 0.05, 0.1,  0.25,  0.5,   1.0,   2.5,  5.0,
                                 10.0, 20.0,  30.0, 60.0, 120.0, 240.0, 480.0, 600.0};
// The gen_ai semantic conventions' explicit bucket boundaries (docs/gen-ai/gen-ai-metrics.md, v1.41.0).
const Buckets kGenAiRequestDuration = {0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64,
                                       1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92};
const Buckets kGenAiTimePerOutputToken = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
const Buckets kGenAiTimeToFirstToken = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                        0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};
// gen_ai.provider.name: the conventions' well-known values name hosted providers; a self-hosted server is
// its own telemetry flavour (a custom value, as the conventions allow).
constexpr const char* kProvider = "kestrel";

}  // namespace

struct ServerMetrics::Impl {
  prometheus::Registry registry;
  prometheus::Labels constant;  // model_name
  std::string model_name;
  struct Counter {
    prometheus::Family<prometheus::Counter>* family = nullptr;
    std::string label_name;                  // "" : one series
    prometheus::Counter* only = nullptr;     // that series
  };
  struct Histogram {
    prometheus::Family<prometheus::Histogram>* family = nullptr;
    prometheus::Histogram* only = nullptr;
  };
  // Built in the constructor and never changed after: looked up without a lock.
  std::map<std::string, Counter> counters;
  std::map<std::string, prometheus::Gauge*> gauges;
  std::map<std::string, Histogram> histograms;
  prometheus::Family<prometheus::Histogram>*gen_ai_duration = nullptr, *gen_ai_ttft = nullptr, *gen_ai_tpot = nullptr;

  void histogram(const std::string& name, const std::string& help, const Buckets& buckets) {
    auto& f = prometheus::BuildHistogram().Name(name).Help(help).Labels(constant).Register(registry);
    histograms[name] = {&f, &f.Add({}, buckets)};
  }
  // known: label values whose series exist from the start, at 0 (a family without a series is left out of
  // the exposition, and a rate over a series that appears later misses its first count).
  void counter(const std::string& name, const std::string& help, const std::string& label = "",
               const std::vector<std::string>& known = {}) {
    auto& f = prometheus::BuildCounter().Name(name).Help(help).Labels(constant).Register(registry);
    counters[name] = {&f, label, label.empty() ? &f.Add({}) : nullptr};
    for (const std::string& v : known) f.Add({{label, v}});
  }
  void gauge(const std::string& name, const std::string& help) {
    gauges[name] = &prometheus::BuildGauge().Name(name).Help(help).Labels(constant).Register(registry).Add({});
  }
  prometheus::Family<prometheus::Histogram>* gen_ai(const std::string& name, const std::string& help) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Labels(constant).Register(registry);
  }
  const Counter& find_counter(const std::string& name) const {
    auto it = counters.find(name);
    if (it == counters.end()) throw Error("metrics: unknown counter " + name);
    return it->second;
  }
};

ServerMetrics::ServerMetrics(const std::string& model_name) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.model_name = model_name;
  if (!model_name.empty()) m.constant = {{"model_name", model_name}};
  m.histogram("kestrel_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.",
              kLatencyBuckets);
  m.histogram("kestrel_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.",
              kLatencyBuckets);
  m.histogram("kestrel_e2e_request_latency_seconds", "Time from a request's arrival to its last token.",
              kRequestBuckets);
  m.histogram("kestrel_request_queue_time_seconds", "Time a request waited before its first step.", kRequestBuckets);
  m.counter("kestrel_prompt_tokens_total", "Prompt tokens received.");
  m.counter("kestrel_generation_tokens_total", "Tokens generated.");
  m.counter("kestrel_requests_total", "Finished requests by outcome.", "outcome");
  m.counter("kestrel_lora_requests_total", "Finished requests by the LoRA adapter they ran (each of a set).", "adapter");
  m.counter("kestrel_lora_request_seconds_total",
            "Arrival-to-end seconds of the finished requests by LoRA adapter (over the count: the mean latency).",
            "adapter");
  m.counter("kestrel_lora_generation_tokens_total", "Tokens generated by LoRA adapter.", "adapter");
  m.counter("kestrel_api_requests_total", "Generation requests received, by endpoint (the API they speak).",
            "endpoint");
  m.counter("kestrel_preemptions_total", "Running requests preempted for KV blocks (recomputed later).");
  m.counter("kestrel_pipelined_steps_total",
            "Steps started while another was still in flight (pipelining across pipeline-parallel stages).");
  const std::vector<std::string> tiers = {"ram", "disk"};
  m.counter("kestrel_prefix_cache_tier_hits_total", "Prefix blocks found in a lower tier of the prefix cache.", "tier",
            tiers);
  m.counter("kestrel_prefix_cache_tier_misses_total",
            "Lookups of a prefix block the pool lacked that a lower tier lacked too (a bad disk entry included).",
            "tier", tiers);
  m.counter("kestrel_prefix_cache_tier_promotions_total", "Disk entries read back into the RAM tier.", "tier", tiers);
  m.counter("kestrel_prefix_cache_tier_evictions_total", "Entries a tier dropped to stay within its size.", "tier",
            tiers);
  m.counter("kestrel_prefix_cache_tier_writes_total", "Entries written to the disk tier.", "tier", tiers);
  m.counter("kestrel_prefix_cache_tier_corrupt_total",
            "Disk entries found bad on reading (cut short, a flipped bit, another format): deleted, recomputed.",
            "tier", tiers);
  m.counter("kestrel_prefix_cache_tier_dropped_total",
            "Entries a tier did not take (larger than it, or the disk writer's queue full).", "tier", tiers);
  m.counter("kestrel_prefix_cache_tier_load_seconds_total", "Time spent reading hits back from a tier.", "tier",
            tiers);
  m.gauge("kestrel_prefix_cache_ram_bytes", "Bytes held by the prefix cache's RAM tier.");
  m.gauge("kestrel_prefix_cache_ram_limit_bytes", "The RAM tier's size limit (--cache-ram; 0: off).");
  m.gauge("kestrel_prefix_cache_ram_entries", "Entries in the RAM tier.");
  m.gauge("kestrel_prefix_cache_disk_bytes", "Bytes of the disk tier's files.");
  m.gauge("kestrel_prefix_cache_disk_limit_bytes", "The disk tier's size limit (--cache-disk; 0: off).");
  m.gauge("kestrel_prefix_cache_disk_entries", "Entries in the disk tier.");
  m.counter("kestrel_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache (in full blocks).");
  m.counter("kestrel_prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not recomputed).");
  m.counter("kestrel_http_errors_total",
            "Requests and connections refused by the transport (malformed, too_large, unsupported, timeout, "
            "denied, connection_limit, tls_handshake).",
            "reason", {"malformed", "too_large", "unsupported", "timeout", "denied", "connection_limit", "tls_handshake"});
  m.counter("kestrel_spec_drafts_total", "Speculative decoding: decode steps of a request that carried a draft.");
  m.counter("kestrel_spec_drafted_tokens_total", "Speculative decoding: tokens drafted (prompt lookup).");
  m.counter("kestrel_spec_accepted_tokens_total", "Speculative decoding: drafted tokens the model confirmed.");
  m.counter("kestrel_grammar_requests_total",
            "Requests decoded under a grammar (response_format, grammar, forced tool calls).");
  m.counter("kestrel_grammar_masks_total", "Grammar token masks applied (one per sampled token of such requests).");
  m.counter("kestrel_grammar_mask_seconds_total", "Time spent computing and applying grammar token masks.");
  m.counter("kestrel_media_images_total", "Images in requests (serve --mmproj), each time one is sent.");
  m.counter("kestrel_media_encoded_total",
            "Images run through the projector's encoder (an image repeated in one request is encoded once).");
  m.counter("kestrel_media_tokens_total", "Prompt rows the requests' images became (their encoder's output).");
  m.counter("kestrel_media_encode_seconds_total", "Time spent encoding images (on the engine thread, between steps).");
  m.counter("kestrel_otlp_spans_exported_total", "Trace spans the OTLP exporter delivered to the collector.");
  m.counter("kestrel_otlp_spans_dropped_total",
            "Trace spans dropped: the exporter's queue was full, or the collector could not take them.", "reason",
            {"queue_full", "export_failed"});
  // The model manager's (serve --models-dir / --models-preset; serving/models/model_manager.h).
  m.gauge("kestrel_models_loaded", "Models loaded and serving (the model manager's).");
  m.gauge("kestrel_models_loaded_bytes", "Memory the loaded models take: weights, KV pool and projector (the model manager's).");
  m.counter("kestrel_model_loads_total", "Models loaded, by model (the model manager's).", "model");
  m.counter("kestrel_model_load_failures_total", "Model loads that failed, by model (the model manager's).", "model");
  m.counter("kestrel_model_load_seconds_total",
            "Seconds spent loading, by model (over kestrel_model_loads_total: the mean load time).", "model");
  m.counter("kestrel_model_unloads_total", "Models unloaded (evicted, idle, asked), by model (the model manager's).",
            "model");
  m.gauge("kestrel_requests_running", "Requests holding KV blocks and being stepped.");
  m.gauge("kestrel_requests_waiting",
          "Requests arrived and not yet run (being parsed, or queued for their first step).");
  m.gauge("kestrel_http_connections", "Open client connections.");
  m.gauge("kestrel_http_requests_in_progress", "Requests read and not yet answered.");
  m.gauge("kestrel_kv_blocks_used", "KV cache blocks held by requests.");
  m.gauge("kestrel_kv_blocks", "KV cache blocks in the pool.");
  m.gauge("kestrel_recurrent_state_slots_used", "Recurrent-state slots held by requests (linear-attention models).");
  m.gauge("kestrel_recurrent_state_slots", "Recurrent-state slots in the pool (linear-attention models; 0: none).");
  m.gauge("kestrel_recurrent_state_bytes",
          "Bytes of recurrent state: every slot's, its checkpoint and the prefix snapshots.");
  m.gauge("kestrel_batch_size", "Requests in the last step.");
  m.gauge("kestrel_batch_tokens", "Tokens in the last step.");
  // vLLM's names (vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
  // vllm:gpu_prefix_cache_hit_rate) under our prefix.
  m.gauge("kestrel_num_requests_running", "Requests being stepped (vLLM's num_requests_running).");
  m.gauge("kestrel_num_requests_waiting", "Requests waiting for their first step (vLLM's num_requests_waiting).");
  m.gauge("kestrel_kv_cache_usage_perc",
          "Fraction of the KV cache's blocks held by requests, 0 to 1 (vLLM's kv_cache_usage_perc).");
  m.gauge("kestrel_prefix_cache_hit_rate",
          "Fraction of the prompt tokens looked up in the prefix cache that were found, since start, 0 to 1 "
          "(vLLM's gpu_prefix_cache_hit_rate; rate() of the _hits_total and _queries_total counters gives it "
          "over a window).");
  m.gen_ai_duration = m.gen_ai("gen_ai_server_request_duration_seconds",
                               "Generative AI server request duration such as time-to-last byte or last output "
                               "token (gen_ai.server.request.duration).");
  m.gen_ai_ttft = m.gen_ai("gen_ai_server_time_to_first_token_seconds",
                           "Time to generate first token for successful responses (gen_ai.server.time_to_first_token).");
  m.gen_ai_tpot = m.gen_ai("gen_ai_server_time_per_output_token_seconds",
                           "Time per output token generated after the first token for successful responses "
                           "(gen_ai.server.time_per_output_token).");
}

ServerMetrics::~ServerMetrics() = default;

void ServerMetrics::observe(const std::string& name, double seconds) {
  auto it = impl_->histograms.find(name);
  if (it == impl_->histograms.end()) throw Error("metrics: unknown histogram " + name);
  it->second.only->Observe(seconds);
}

void ServerMetrics::add(const std::string& name, double v, const std::string& label) {
  const Impl::Counter& c = impl_->find_counter(name);
  if (c.label_name.empty() != label.empty())
    throw Error(fmt::format("metrics: counter {} {}", name,
                            label.empty() ? "needs its label " + c.label_name : "has no label (given " + label + ")"));
  (c.only ? *c.only : c.family->Add({{c.label_name, label}})).Increment(v);
}

double ServerMetrics::counter(const std::string& name, const std::string& label) const {
  const Impl::Counter& c = impl_->find_counter(name);
  if (c.only) return c.only->Value();
  const prometheus::Labels wanted = {{c.label_name, label}};
  if (!c.family->Has(wanted)) return 0;
  return c.family->Add(wanted).Value();
}

void ServerMetrics::set(const std::string& name, double v) {
  auto it = impl_->gauges.find(name);
  if (it == impl_->gauges.end()) throw Error("metrics: unknown gauge " + name);
  it->second->Set(v);
}

void ServerMetrics::observe_gen_ai(const GenAiRequest& r) {
  Impl& m = *impl_;
  prometheus::Labels labels = {{"gen_ai_operation_name", r.operation}, {"gen_ai_provider_name", kProvider}};
  if (!r.request_model.empty()) labels["gen_ai_request_model"] = r.request_model;
  if (!m.model_name.empty()) labels["gen_ai_response_model"] = m.model_name;
  prometheus::Labels with_error = labels;
  if (!r.error_type.empty()) with_error["error_type"] = r.error_type;
  m.gen_ai_duration->Add(with_error, kGenAiRequestDuration).Observe(r.duration_s);
  if (!r.error_type.empty()) return;  // the per-token histograms are of successful responses
  if (r.ttft_s >= 0) m.gen_ai_ttft->Add(labels, kGenAiTimeToFirstToken).Observe(r.ttft_s);
  if (r.ttft_s >= 0 && r.output_tokens > 1)
    m.gen_ai_tpot->Add(labels, kGenAiTimePerOutputToken)
        .Observe((r.duration_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
}

std::string ServerMetrics::render() const {
  return prometheus::TextSerializer().Serialize(impl_->registry.Collect());
}

std::string ServerMetrics::render_with(const std::vector<const ServerMetrics*>& models) const {
  // A family named twice in one exposition is an error to Prometheus: each model's series join its family.
  const auto servers = [](const std::string& name) {
    return name.rfind("kestrel_http_", 0) == 0 || name.rfind("kestrel_model", 0) == 0;
  };
  std::vector<prometheus::MetricFamily> out;
  std::map<std::string, size_t> at;
  const auto take = [&](const ServerMetrics& from, bool server) {
    for (auto& f : from.impl_->registry.Collect()) {
      if (servers(f.name) != server) continue;
      auto [it, fresh] = at.emplace(f.name, out.size());
      if (fresh)
        out.push_back(std::move(f));
      else
        for (auto& m : f.metric) out[it->second].metric.push_back(std::move(m));
    }
  };
  take(*this, true);
  for (const ServerMetrics* m : models) take(*m, false);
  return prometheus::TextSerializer().Serialize(out);
}

}  // namespace kestrel
