#include "loadtest/workload.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"

namespace kestrel {

using json = nlohmann::json;

namespace {

const char* const kWords[] = {
    "the",   "little", "cat",   "sat",    "on",    "mat",    "and",     "dog",  "ran",    "to",     "park",
    "one",   "day",    "girl",  "named",  "lily",  "saw",    "big",     "red",  "ball",   "she",    "was",
    "very",  "happy",  "they",  "played", "all",   "with",   "friend",  "tree", "bird",   "sky",    "sun",
    "water", "house",  "mom",   "said",   "look",  "at",     "this",    "good", "time",   "went",   "home",
    "blue",  "small",  "boy",   "tom",    "liked", "fun",    "toy",     "car",  "fast",   "slow",   "green",
    "under", "over",   "after", "before", "where", "when",   "because", "then", "there",  "here",   "new",
    "old",   "warm",   "cold",  "kind",   "nice",  "shared", "found",   "lost", "garden", "flower", "rain"};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string words(std::mt19937_64& rng, int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; i++) {
    if (i) s += ' ';
    s += kWords[rng() % kNumWords];
  }
  return s;
}

}  // namespace

std::string random_words(std::mt19937_64& rng, int64_t n) { return words(rng, n); }

namespace {

// Random text of exactly `target` tokens after `prefix` (or the closest the
// words allow), counting with the server's tokenizer.
std::string calibrated(LoadClient& c, std::mt19937_64& rng, const std::string& prefix, int64_t target, double ratio,
                       int64_t& got) {
  int64_t n = std::max<int64_t>(1, std::llround(static_cast<double>(target) / ratio));
  std::vector<std::string> pool;
  for (int64_t i = 0; i < n + 64; i++) pool.push_back(kWords[rng() % kNumWords]);
  auto text = [&](int64_t k) {
    std::string s = prefix;
    for (int64_t i = 0; i < k; i++) s += (s.empty() ? "" : " ") + pool[static_cast<size_t>(i)];
    return s;
  };
  int64_t best_n = n, best_diff = INT64_MAX;
  for (int iter = 0; iter < 40; iter++) {
    const auto count = c.count_tokens(text(n));
    if (!count) break;
    const int64_t diff = *count - target;
    if (std::llabs(diff) < std::llabs(best_diff)) best_diff = diff, best_n = n, got = *count;
    if (diff == 0) break;
    n = std::clamp<int64_t>(n - (diff > 0 ? std::max<int64_t>(1, std::llround(diff / ratio / 2))
                                          : -std::max<int64_t>(1, std::llround(-diff / ratio / 2))),
                            1, static_cast<int64_t>(pool.size()));
  }
  if (best_diff == INT64_MAX || best_diff == 0) return text(best_n);
  // Word boundaries overshoot by a token or two: replace the last one or two
  // words with short fillers until the count is exact.
  static const char* const kFillers[] = {"a", "i", "o", "x", "y", "z", "at", "on", "to", "it", "is", "up", "we", "so"};
  for (int drop = 1; drop <= 2; drop++) {
    if (best_n - drop < 1) break;
    const std::string base = text(best_n - drop);
    for (const char* f1 : kFillers) {
      for (const char* f2 : kFillers) {
        const std::string t = drop == 1 ? base + " " + f1 : base + " " + f1 + " " + f2;
        const auto count = c.count_tokens(t);
        if (count && *count == target) {
          got = *count;
          return t;
        }
        if (drop == 1) break;  // one filler: f2 unused
      }
    }
  }
  return text(best_n);
}

}  // namespace

std::vector<std::pair<int, double>> parse_priority_mix(const std::string& text) {
  std::vector<std::pair<int, double>> mix;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    try {
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      const int p = std::stoi(item.substr(0, colon));
      const double w = std::stod(item.substr(colon + 1));
      if (!(w > 0)) throw std::invalid_argument("weight");
      mix.push_back({p, w});
    } catch (const std::exception&) {
      throw Error(fmt::format("--priority-mix entry '{}' is not PRIORITY:WEIGHT with a positive weight", item));
    }
  }
  if (mix.empty()) throw Error("--priority-mix is empty");
  return mix;
}

std::vector<PreparedRequest> build_workload(const WorkloadOptions& o, LoadClient& client, std::string& note) {
  if (o.num_prompts <= 0) throw Error(fmt::format("--num-prompts {} must be positive", o.num_prompts));
  if (o.output_len <= 0) throw Error(fmt::format("--output-len {} must be positive", o.output_len));
  std::mt19937_64 rng(o.seed);
  std::vector<std::string> prompts;
  std::vector<std::vector<int64_t>> token_prompts;  // completions with a tokenizer: exact ids
  std::vector<json> messages;
  std::vector<int64_t> lengths;
  if (!o.prompts_file.empty()) {
    std::ifstream in(o.prompts_file);
    if (!in) throw Error(fmt::format("{}: cannot read the prompts file", o.prompts_file));
    std::vector<json> lines;
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      line_no++;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        lines.push_back(json::parse(line));
      } catch (const std::exception& e) {
        throw Error(fmt::format("{}:{}: not JSON: {}", o.prompts_file, line_no, e.what()));
      }
      const json& j = lines.back();
      if (!(j.is_string() || (j.is_object() && (j.contains("prompt") || j.contains("messages")))))
        throw Error(fmt::format("{}:{}: expected a string, {{\"prompt\": ...}} or {{\"messages\": [...]}}",
                                o.prompts_file, line_no));
    }
    if (lines.empty()) throw Error(fmt::format("{}: no prompts", o.prompts_file));
    for (int64_t i = 0; i < o.num_prompts; i++) {
      const json& j = lines[static_cast<size_t>(i) % lines.size()];
      if (j.is_string())
        prompts.push_back(j.get<std::string>());
      else if (j.contains("prompt"))
        prompts.push_back(j["prompt"].get<std::string>());
      else
        prompts.push_back(""), messages.resize(prompts.size()), messages.back() = j["messages"];
      lengths.push_back(0);
    }
    note = fmt::format("prompts from {} ({} lines, used in turn)", o.prompts_file, lines.size());
  } else {
    if (o.input_len <= 0) throw Error(fmt::format("--input-len {} must be positive", o.input_len));
    if (o.prefix_len < 0 || o.prefix_len >= o.input_len)
      throw Error(fmt::format("--shared-prefix {} must be below --input-len {}", o.prefix_len, o.input_len));
    const std::string sample = words(rng, 64);
    const auto sample_ids = client.tokenize(sample, true);
    if (!sample_ids) {
      // No tokenizer endpoint: one word per token, and say so.
      const std::string prefix = o.prefix_len ? words(rng, o.prefix_len) : "";
      for (int64_t i = 0; i < o.num_prompts; i++) {
        prompts.push_back(prefix + (prefix.empty() ? "" : " ") + words(rng, o.input_len - o.prefix_len));
        lengths.push_back(0);
      }
      note = "the server has no /tokenize: prompts are --input-len words, their token counts approximate";
    } else if (!o.chat) {
      // Completions take token ids: tokenize random words and cut at exactly
      // input_len (the shared prefix is then shared token for token).
      const double ratio = std::max(0.2, static_cast<double>(sample_ids->size()) / 64.0);
      auto ids_of = [&](int64_t n, bool special) {
        std::vector<int64_t> ids;
        while (static_cast<int64_t>(ids.size()) < n) {
          const auto more = client.tokenize(words(rng, static_cast<int64_t>(n / ratio) + 8), special && ids.empty());
          if (!more || more->empty()) throw Error("the server's /tokenize stopped answering");
          ids.insert(ids.end(), more->begin(), more->end());
        }
        ids.resize(static_cast<size_t>(n));
        return ids;
      };
      const std::vector<int64_t> prefix = ids_of(o.prefix_len, true);
      for (int64_t i = 0; i < o.num_prompts; i++) {
        std::vector<int64_t> ids = prefix;
        const auto rest = ids_of(o.input_len - o.prefix_len, prefix.empty());
        ids.insert(ids.end(), rest.begin(), rest.end());
        token_prompts.push_back(std::move(ids));
        prompts.push_back("");
        lengths.push_back(o.input_len);
      }
      note = fmt::format("every prompt is exactly {} tokens (token ids from the server's /tokenize)", o.input_len);
      if (o.prefix_len) note += fmt::format("; all share the first {}", o.prefix_len);
    } else {
      // Chat: text, sized with the server's tokenizer (the chat template adds its own tokens).
      const double ratio = std::max(0.2, static_cast<double>(sample_ids->size()) / 64.0);
      int64_t got = 0;
      const std::string prefix = o.prefix_len ? calibrated(client, rng, "", o.prefix_len, ratio, got) : "";
      int64_t off = 0;
      for (int64_t i = 0; i < o.num_prompts; i++) {
        got = 0;
        prompts.push_back(calibrated(client, rng, prefix, o.input_len, ratio, got));
        lengths.push_back(got);
        off += std::llabs(got - o.input_len);
      }
      note = fmt::format("message texts within {:.2f} tokens of {} on average, before the chat template's own tokens",
                         static_cast<double>(off) / static_cast<double>(o.num_prompts), o.input_len);
      if (o.prefix_len) note += fmt::format("; all share a {}-token prefix", o.prefix_len);
    }
  }

  double total_weight = 0;
  for (const auto& [p, w] : o.priority_mix) total_weight += w;
  std::vector<PreparedRequest> out;
  for (size_t i = 0; i < prompts.size(); i++) {
    PreparedRequest r;
    json& b = r.body;
    if (!o.model.empty()) b["model"] = o.model;
    if (o.chat)
      b["messages"] = i < messages.size() && !messages[i].is_null()
                          ? messages[i]
                          : json::array({{{"role", "user"}, {"content", prompts[i]}}});
    else if (i < token_prompts.size())
      b["prompt"] = token_prompts[i];
    else
      b["prompt"] = prompts[i];
    b["max_tokens"] = o.output_len;
    b["ignore_eos"] = true;
    if (o.temperature >= 0) b["temperature"] = o.temperature;
    b["stream"] = true;
    b["stream_options"] = {{"include_usage", true}};
    if (!o.priority_mix.empty()) {
      double x = std::uniform_real_distribution<double>(0, total_weight)(rng);
      r.priority = o.priority_mix.back().first;
      for (const auto& [p, w] : o.priority_mix) {
        if (x < w) {
          r.priority = p;
          break;
        }
        x -= w;
      }
      b["priority"] = r.priority;
    }
    r.prompt_tokens = lengths[i];
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kestrel
