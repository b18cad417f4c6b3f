#pragma once
// The requests a load test sends: random prompts of exact token lengths
// (calibrated against the server's /tokenize when it has one, else counted
// in words and reported as approximate), prompts from a JSONL file, or
// prompts sharing a long common prefix (to exercise prefix caching); each
// with a fixed output length and, optionally, a priority drawn from a mix.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loadtest/load_client.h"

namespace kestrel {

struct WorkloadOptions {
  int64_t num_prompts = 100;
  int64_t input_len = 128;   // prompt tokens (with BOS, as the server counts them)
  int64_t output_len = 64;   // max_tokens, with ignore_eos
  int64_t prefix_len = 0;    // > 0: every prompt starts with the same prefix of this many tokens
  std::string prompts_file;  // JSONL: {"prompt": ...} or {"messages": [...]} per line
  bool chat = false;
  std::string model;
  uint64_t seed = 0;
  double temperature = -1;  // >= 0: sent as 'temperature' (0: greedy, same text every run); < 0: the server's default
  std::vector<std::pair<int, double>> priority_mix;  // (priority, weight); empty: no priority field
};

struct PreparedRequest {
  nlohmann::json body;
  int priority = 0;
  int64_t prompt_tokens = 0;  // as calibrated (0: unknown)
};

// Throws Error naming the problem (unreadable file, bad line, bad lengths).
// note: what the caller should report (e.g. "lengths approximate").
std::vector<PreparedRequest> build_workload(const WorkloadOptions& o, LoadClient& client, std::string& note);

// n words of the workloads' small vocabulary (about a token each), drawn from rng.
std::string random_words(std::mt19937_64& rng, int64_t n);

// "0:0.8,-1:0.2" -> {(0, 0.8), (-1, 0.2)}; throws Error naming a bad entry.
std::vector<std::pair<int, double>> parse_priority_mix(const std::string& text);

}  // namespace kestrel
