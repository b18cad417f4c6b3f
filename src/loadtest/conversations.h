#pragma once
// The agent workload (`kestrel loadtest --conversations N --turns T`): N multi-turn chat conversations, each
// with a long system prompt of its own, taken turn by turn in rotation (conversation 1's turn 1, 2's turn 1, ...,
// then every conversation's turn 2), one request at a time, as an agent tool alternating between sessions does.
// Each turn re-sends the whole conversation so far: every earlier user message and the reply the server gave
// to it, then a new user message. What a prefix cache saves shows per turn: the prompt tokens the server
// reports cached (usage.prompt_tokens_details.cached_tokens, llama-server's timings.cache_n) and the time to
// the first token.
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadtest/load_client.h"

namespace kestrel {

struct ConversationOptions {
  int conversations = 3;
  int turns = 8;
  int64_t system_words = 1024;  // each conversation's system prompt (about a token a word)
  int64_t turn_words = 200;     // each new user message
  int64_t output_len = 64;      // max_tokens per reply
  std::string model;
  double temperature = 0;  // greedy by default: two runs give the same replies
  bool ignore_eos = true;  // replies of output_len tokens, so the conversations grow alike
  uint64_t seed = 0;
  double timeout_s = 600;
};

struct TurnRecord {
  int conversation = 0, turn = 0;  // from 0
  RequestRecord rec;
};

// Sends the conversations (stop: ends early with what was measured). A failed turn ends its conversation.
std::vector<TurnRecord> run_conversations(const Endpoint& ep, const ConversationOptions& o,
                                          const std::atomic<bool>& stop);

// Per turn over the conversations: TTFT p50 and p99 (ms), prompt tokens, cached fraction; and a table.
struct TurnSummary {
  int turn = 0;
  int64_t requests = 0, failed = 0, prompt_tokens = 0, cached_tokens = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double cached_fraction() const {
    return prompt_tokens > 0 ? static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens) : 0;
  }
};
std::vector<TurnSummary> summarize_turns(const std::vector<TurnRecord>& records, int turns);
std::string render_turns(const std::vector<TurnSummary>& turns);
nlohmann::json turns_json(const std::vector<TurnRecord>& records, const std::vector<TurnSummary>& turns);

}  // namespace kestrel
