#include "serving/engine/metrics.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace kestrel {
namespace {

const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                             0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0, 120.0};
// Whole requests and queueing run for minutes on a CPU (a long answer, a busy server): up to 10 minutes.
const std::vector<double> kRequestBuckets = {0.01, 0.025, 0.05, 0.1,  0.25,  0.5,   1.0,   2.5,  5.0,
                                             10.0, 20.0,  30.0, 60.0, 120.0, 240.0, 480.0, 600.0};

// A label value in the exposition format: backslash, quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) { return fmt::format("{}", v); }

}  // namespace

ServerMetrics::ServerMetrics(const std::string& model_name)
    : model_label_(model_name.empty() ? "" : fmt::format("model_name=\"{}\"", label_value(model_name))) {
  auto hist = [&](const char* name, const char* help, const std::vector<double>& bounds = kLatencyBuckets) {
    Histogram& h = histograms_[name];
    h.help = help;
    h.bounds = bounds;
    h.counts.assign(h.bounds.size() + 1, 0);
  };
  hist("kestrel_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.");
  hist("kestrel_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.");
  hist("kestrel_e2e_request_latency_seconds", "Time from a request's arrival to its last token.", kRequestBuckets);
  hist("kestrel_request_queue_time_seconds", "Time a request waited before its first step.", kRequestBuckets);
  auto counter = [&](const char* name, const char* help, const char* label = "") {
    counters_[name] = {help, label, {}};
  };
  counter("kestrel_prompt_tokens_total", "Prompt tokens received.");
  counter("kestrel_generation_tokens_total", "Tokens generated.");
  counter("kestrel_requests_total", "Finished requests by outcome.", "outcome");
  counter("kestrel_api_requests_total", "Generation requests received, by endpoint (the API they speak).", "endpoint");
  counter("kestrel_preemptions_total", "Running requests preempted for KV blocks (recomputed later).");
  counter("kestrel_pipelined_steps_total",
          "Steps started while another was still in flight (pipelining across pipeline-parallel stages).");
  counter("kestrel_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache (in full blocks).");
  counter("kestrel_prefix_cache_hits_total", "Prompt tokens found in the prefix cache (not recomputed).");
  counter("kestrel_http_errors_total",
          "Requests and connections refused by the transport (malformed, too_large, unsupported, timeout, denied, "
          "connection_limit, tls_handshake).",
          "reason");
  counter("kestrel_spec_drafts_total", "Speculative decoding: decode steps of a request that carried a draft.");
  counter("kestrel_spec_drafted_tokens_total", "Speculative decoding: tokens drafted (prompt lookup).");
  counter("kestrel_spec_accepted_tokens_total", "Speculative decoding: drafted tokens the model confirmed.");
  counter("kestrel_grammar_requests_total", "Requests decoded under a grammar (response_format, grammar, forced tool calls).");
  counter("kestrel_grammar_masks_total", "Grammar token masks applied (one per sampled token of such requests).");
  counter("kestrel_grammar_mask_seconds_total", "Time spent computing and applying grammar token masks.");
  auto gauge = [&](const char* name, const char* help) { gauges_[name] = {help, "", {{"", 0.0}}}; };
  gauge("kestrel_requests_running", "Requests holding KV blocks and being stepped.");
  gauge("kestrel_requests_waiting", "Requests arrived and not yet run (being parsed, or queued for their first step).");
  gauge("kestrel_http_connections", "Open client connections.");
  gauge("kestrel_http_requests_in_progress", "Requests read and not yet answered.");
  gauge("kestrel_kv_blocks_used", "KV cache blocks held by requests.");
  gauge("kestrel_kv_blocks_total", "KV cache blocks in the pool.");
  gauge("kestrel_recurrent_state_slots_used", "Recurrent-state slots held by requests (linear-attention models).");
  gauge("kestrel_recurrent_state_slots_total", "Recurrent-state slots in the pool (linear-attention models; 0: none).");
  gauge("kestrel_recurrent_state_bytes", "Bytes of recurrent state: every slot's, its checkpoint and the prefix snapshots.");
  gauge("kestrel_batch_size", "Requests in the last step.");
  gauge("kestrel_batch_tokens", "Tokens in the last step.");
}

void ServerMetrics::observe(const std::string& name, double seconds) {
  std::lock_guard lock(mutex_);
  auto it = histograms_.find(name);
  if (it == histograms_.end()) throw Error("metrics: unknown histogram " + name);
  Histogram& h = it->second;
  const size_t b = std::lower_bound(h.bounds.begin(), h.bounds.end(), seconds) - h.bounds.begin();
  h.counts[b]++;
  h.sum += seconds;
  h.count++;
}

void ServerMetrics::add(const std::string& name, double v, const std::string& label) {
  std::lock_guard lock(mutex_);
  auto it = counters_.find(name);
  if (it == counters_.end()) throw Error("metrics: unknown counter " + name);
  it->second.values[label] += v;
}

double ServerMetrics::counter(const std::string& name, const std::string& label) const {
  std::lock_guard lock(mutex_);
  auto it = counters_.find(name);
  if (it == counters_.end()) throw Error("metrics: unknown counter " + name);
  auto v = it->second.values.find(label);
  return v == it->second.values.end() ? 0.0 : v->second;
}

void ServerMetrics::set(const std::string& name, double v) {
  std::lock_guard lock(mutex_);
  auto it = gauges_.find(name);
  if (it == gauges_.end()) throw Error("metrics: unknown gauge " + name);
  it->second.values[""] = v;
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  // The labels of one series: the model's (on every series, vLLM's convention), then its own.
  const auto labels = [&](const std::string& own) {
    std::string all = model_label_;
    if (!own.empty()) all += (all.empty() ? "" : ",") + own;
    return all.empty() ? std::string() : "{" + all + "}";
  };
  auto family = [&](const std::string& name, const Family& f, const char* type) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    if (f.values.empty()) out += fmt::format("{}{} 0\n", name, labels(""));
    for (const auto& [label, v] : f.values)
      out += fmt::format("{}{} {}\n", name,
                         labels(label.empty() ? "" : fmt::format("{}=\"{}\"", f.label_name, label_value(label))), number(v));
  };
  for (const auto& [name, f] : counters_) family(name, f, "counter");
  for (const auto& [name, f] : gauges_) family(name, f, "gauge");
  for (const auto& [name, h] : histograms_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, h.help, name);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); i++) {
      cumulative += h.counts[i];
      out += fmt::format("{}_bucket{} {}\n", name, labels(fmt::format("le=\"{}\"", number(h.bounds[i]))), cumulative);
    }
    cumulative += h.counts.back();
    out += fmt::format("{}_bucket{} {}\n{}_sum{} {}\n{}_count{} {}\n", name, labels("le=\"+Inf\""), cumulative, name,
                       labels(""), number(h.sum), name, labels(""), h.count);
  }
  return out;
}

}  // namespace kestrel
