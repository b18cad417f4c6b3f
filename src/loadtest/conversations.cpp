#include "loadtest/conversations.h"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "loadtest/workload.h"

namespace kestrel {

using json = nlohmann::json;

std::vector<TurnRecord> run_conversations(const Endpoint& ep, const ConversationOptions& o,
                                          const std::atomic<bool>& stop) {
  std::mt19937_64 rng(o.seed);
  struct Conversation {
    json messages = json::array();
    bool failed = false;
  };
  std::vector<Conversation> convs(static_cast<size_t>(o.conversations));
  for (size_t c = 0; c < convs.size(); c++)
    convs[c].messages.push_back({{"role", "system"}, {"content", random_words(rng, o.system_words)}});
  LoadClient client(ep, o.timeout_s);
  const auto start = std::chrono::steady_clock::now();
  std::vector<TurnRecord> out;
  for (int t = 0; t < o.turns && !stop; t++) {
    for (size_t c = 0; c < convs.size() && !stop; c++) {
      Conversation& conv = convs[c];
      if (conv.failed) continue;
      conv.messages.push_back({{"role", "user"}, {"content", random_words(rng, o.turn_words)}});
      json body = {{"messages", conv.messages},
                   {"max_tokens", o.output_len},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}},
                   {"temperature", o.temperature}};
      if (o.ignore_eos) body["ignore_eos"] = true;
      if (!o.model.empty()) body["model"] = o.model;
      TurnRecord tr{static_cast<int>(c), t, client.stream("/v1/chat/completions", body, start)};
      tr.rec.index = static_cast<int64_t>(out.size());
      if (tr.rec.ok)
        conv.messages.push_back({{"role", "assistant"}, {"content", tr.rec.text}});
      else
        conv.failed = true;
      out.push_back(std::move(tr));
    }
  }
  return out;
}

std::vector<TurnSummary> summarize_turns(const std::vector<TurnRecord>& records, int turns) {
  std::vector<TurnSummary> out;
  for (int t = 0; t < turns; t++) {
    TurnSummary s;
    s.turn = t;
    std::vector<double> ttft;
    for (const TurnRecord& r : records) {
      if (r.turn != t) continue;
      s.requests++;
      if (!r.rec.ok) {
        s.failed++;
        continue;
      }
      s.prompt_tokens += r.rec.prompt_tokens;
      s.cached_tokens += r.rec.cached_tokens;
      ttft.push_back(r.rec.ttft_s * 1000);
    }
    if (s.requests == 0) break;
    const Percentiles p = percentiles(ttft);
    s.ttft_p50_ms = p.median;
    s.ttft_p99_ms = p.p99;
    out.push_back(s);
  }
  return out;
}

std::string render_turns(const std::vector<TurnSummary>& turns) {
  std::string s = fmt::format("{:>5} {:>9} {:>7} {:>14} {:>8} {:>14} {:>14}\n", "turn", "requests", "failed",
                              "prompt tokens", "cached", "TTFT p50 ms", "TTFT p99 ms");
  for (const TurnSummary& t : turns)
    s += fmt::format("{:>5} {:>9} {:>7} {:>14.0f} {:>7.1f}% {:>14.1f} {:>14.1f}\n", t.turn + 1, t.requests, t.failed,
                     t.requests > t.failed ? static_cast<double>(t.prompt_tokens) / static_cast<double>(t.requests - t.failed) : 0.0,
                     100 * t.cached_fraction(), t.ttft_p50_ms, t.ttft_p99_ms);
  return s;
}

json turns_json(const std::vector<TurnRecord>& records, const std::vector<TurnSummary>& turns) {
  json out = {{"turns", json::array()}, {"requests", json::array()}};
  for (const TurnSummary& t : turns)
    out["turns"].push_back({{"turn", t.turn + 1},
                            {"requests", t.requests},
                            {"failed", t.failed},
                            {"prompt_tokens", t.prompt_tokens},
                            {"cached_tokens", t.cached_tokens},
                            {"cached_fraction", t.cached_fraction()},
                            {"ttft_p50_ms", t.ttft_p50_ms},
                            {"ttft_p99_ms", t.ttft_p99_ms}});
  for (const TurnRecord& r : records)
    out["requests"].push_back({{"conversation", r.conversation + 1},
                               {"turn", r.turn + 1},
                               {"ok", r.rec.ok},
                               {"error", r.rec.error_detail},
                               {"ttft_ms", r.rec.ttft_s * 1000},
                               {"e2e_ms", r.rec.e2e_s * 1000},
                               {"prompt_tokens", r.rec.prompt_tokens},
                               {"cached_tokens", r.rec.cached_tokens},
                               {"output_tokens", r.rec.output_tokens},
                               {"reply", r.rec.text}});
  return out;
}

}  // namespace kestrel
