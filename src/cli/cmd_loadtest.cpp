// kestrel loadtest --url http://127.0.0.1:8080 --concurrency 8 --num-prompts 200 --input-len 128 --output-len 64:
// latency percentiles and throughput of any OpenAI-compatible server under load.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "loadtest/conversations.h"
#include "loadtest/load_report.h"
#include "loadtest/load_runner.h"

namespace kestrel::cli {

using json = nlohmann::json;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_loadtest_sigint(int) { g_stop = true; }

struct LoadFlags {
  std::string url = "http://127.0.0.1:8080", api = "completions", model, api_key, prompts_file, priority_mix, slo,
              sweep_rate, sweep_concurrency, json_path, plot_path, request_rate = "inf";
  int concurrency = 0, max_concurrency = 256;
  int64_t num_prompts = 100, input_len = 128, output_len = 64, prefix_len = 0, server_pid = 0;
  double burstiness = 1.0, max_duration = 600, timeout = 60, temperature = -1;
  uint64_t seed = 0;
  bool markdown = false;
  // The agent workload (loadtest/conversations.h).
  int conversations = 0, turns = 8;
  int64_t system_len = 1024, turn_len = 200;
};

// --conversations N --turns T: the agent workload, turn by turn.
int run_agent(const LoadFlags& f, const Endpoint& ep) {
  if (f.conversations > 256) throw Error(fmt::format("--conversations {} is out of range (1 to 256)", f.conversations));
  if (f.turns < 1 || f.turns > 1000) throw Error(fmt::format("--turns {} is out of range (1 to 1000)", f.turns));
  if (f.system_len < 1 || f.turn_len < 1 || f.output_len < 1)
    throw Error("--system-len, --turn-len and --output-len must be positive");
  ConversationOptions o;
  o.conversations = f.conversations;
  o.turns = f.turns;
  o.system_words = f.system_len;
  o.turn_words = f.turn_len;
  o.output_len = f.output_len;
  o.model = f.model;
  o.temperature = f.temperature >= 0 ? f.temperature : 0;
  o.seed = f.seed;
  o.timeout_s = f.timeout;
  fmt::print(stderr, "loadtest: {} conversations x {} turns to {}/v1/chat/completions (system {} words, {} words a "
             "turn, {} tokens a reply)\n", o.conversations, o.turns, f.url, o.system_words, o.turn_words, o.output_len);
  signal(SIGINT, on_loadtest_sigint);
  const auto records = run_conversations(ep, o, g_stop);
  const auto turns = summarize_turns(records, o.turns);
  fmt::print("{}", render_turns(turns));
  int64_t failed = 0;
  for (const auto& r : records) failed += !r.rec.ok;
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    out << turns_json(records, turns).dump(2) << "\n";
    if (!out) throw Error(fmt::format("cannot write {}", f.json_path));
  }
  if (failed > 0) {
    for (const auto& r : records)
      if (!r.rec.ok) fmt::print(stderr, "loadtest: conversation {} turn {}: {} {}\n", r.conversation + 1, r.turn + 1,
                                r.rec.error, r.rec.error_detail);
    return 1;
  }
  return 0;
}

std::vector<double> parse_list(const std::string& s, const char* flag) {
  std::vector<double> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !(v > 0)) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw Error(fmt::format("{} '{}': '{}' is not a positive number", flag, s, item));
    }
  }
  return out;
}

Slo parse_slo(const std::string& s) {
  Slo slo;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    double v = 0;
    try {
      v = std::stod(item.substr(colon + 1));
    } catch (const std::exception&) {
      v = -1;
    }
    const std::string k = colon == std::string::npos ? item : item.substr(0, colon);
    if (colon == std::string::npos || !(v > 0) || (k != "ttft" && k != "tpot" && k != "e2e"))
      throw Error(fmt::format("--slo entry '{}' is not ttft:MS, tpot:MS or e2e:MS", item));
    (k == "ttft" ? slo.ttft_ms : k == "tpot" ? slo.tpot_ms : slo.e2e_ms) = v;
  }
  return slo;
}

// Peak resident memory (KiB) and CPU seconds of a local process, from /proc.
struct ProcUsage {
  int64_t peak_rss_kib = -1;
  double cpu_s = -1;
};
ProcUsage proc_usage(int64_t pid) {
  ProcUsage u;
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) u.peak_rss_kib = std::stoll(line.substr(6));
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = all.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(all.substr(close + 2));
    std::string f;
    std::vector<std::string> fields;
    while (rest >> f) fields.push_back(f);
    if (fields.size() > 13)
      u.cpu_s = (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return u;
}

int run(LoadFlags& f) {
  if (f.api != "completions" && f.api != "chat")
    throw Error(fmt::format("--api '{}' is not completions or chat", f.api));
  if (f.concurrency < 0 || f.concurrency > 4096)
    throw Error(fmt::format("--concurrency {} is out of range (1 to 4096)", f.concurrency));
  if (f.max_concurrency < 1 || f.max_concurrency > 4096)
    throw Error(fmt::format("--max-concurrency {} is out of range (1 to 4096)", f.max_concurrency));
  if (!(f.timeout > 0)) throw Error(fmt::format("--timeout {} must be positive", f.timeout));
  if (!(f.max_duration > 0)) throw Error(fmt::format("--max-duration {} must be positive", f.max_duration));
  if (f.server_pid < 0) throw Error("--server-pid must be positive");
  Endpoint ep = parse_url(f.url);
  ep.api_key = f.api_key;
  const Slo slo = f.slo.empty() ? Slo{} : parse_slo(f.slo);
  double rate = 0;
  if (f.request_rate != "inf") rate = parse_list(f.request_rate, "--request-rate").at(0);
  if (!f.sweep_rate.empty() && !f.sweep_concurrency.empty())
    throw Error("give --sweep-rate or --sweep-concurrency, not both");

  if (f.conversations < 0) throw Error("--conversations must not be negative");
  if (f.conversations > 0) return run_agent(f, ep);

  WorkloadOptions w;
  w.num_prompts = f.num_prompts;
  w.input_len = f.input_len;
  w.output_len = f.output_len;
  w.prefix_len = f.prefix_len;
  w.prompts_file = f.prompts_file;
  w.chat = f.api == "chat";
  w.model = f.model;
  w.seed = f.seed;
  w.temperature = f.temperature;
  if (!f.priority_mix.empty()) w.priority_mix = parse_priority_mix(f.priority_mix);
  LoadClient probe(ep, f.timeout);
  std::string note;
  const auto requests = build_workload(w, probe, note);
  fmt::print(stderr, "loadtest: {} requests to {}{}; {}\n", requests.size(), f.url,
             w.chat ? "/v1/chat/completions" : "/v1/completions", note);

  RunOptions ro;
  ro.path = w.chat ? "/v1/chat/completions" : "/v1/completions";
  ro.concurrency = f.concurrency;
  ro.request_rate = rate;
  ro.burstiness = f.burstiness;
  ro.max_concurrency = f.max_concurrency;
  ro.max_duration_s = f.max_duration;
  ro.timeout_s = f.timeout;
  ro.seed = f.seed;

  // Points: one, or a sweep over rates or client counts.
  std::vector<std::pair<std::string, RunOptions>> plan;
  if (!f.sweep_rate.empty()) {
    for (double r : parse_list(f.sweep_rate, "--sweep-rate")) {
      RunOptions o = ro;
      o.concurrency = 0;
      o.request_rate = r;
      plan.push_back({fmt::format("{:g} req/s", r), o});
    }
  } else if (!f.sweep_concurrency.empty()) {
    for (double c : parse_list(f.sweep_concurrency, "--sweep-concurrency")) {
      RunOptions o = ro;
      o.concurrency = static_cast<int>(c);
      plan.push_back({fmt::format("c={}", o.concurrency), o});
    }
  } else {
    plan.push_back({ro.concurrency > 0 ? fmt::format("c={}", ro.concurrency)
                    : rate > 0         ? fmt::format("{:g} req/s", rate)
                                       : "all at once",
                    ro});
  }

  signal(SIGINT, on_loadtest_sigint);
  const ProcUsage before = f.server_pid ? proc_usage(f.server_pid) : ProcUsage{};
  std::vector<SweepPoint> points;
  json doc = {{"url", f.url}, {"api", f.api}, {"workload", note}, {"points", json::array()}};
  for (const auto& [label, o] : plan) {
    const RunResult r = run_load(ep, requests, o, g_stop);
    SweepPoint p;
    p.load = label;
    p.load_value = o.concurrency > 0 ? o.concurrency : o.request_rate;
    p.summary = summarize(r.records, r.duration_s, slo);
    fmt::print("{}", render_summary(p.summary, "Serving Benchmark Result (" + label + ")", slo));
    // max_tokens with ignore_eos should give exactly output_len tokens; say so when the server did otherwise.
    int64_t short_or_long = 0;
    for (const auto& rec : r.records) short_or_long += rec.ok && rec.output_tokens != f.output_len;
    if (short_or_long > 0)
      fmt::print("note: {} of {} requests generated other than {} tokens (the server may ignore 'ignore_eos'); "
                 "throughput counts the tokens actually generated\n",
                 short_or_long, p.summary.completed, f.output_len);
    // Per priority class, when there is a mix.
    json classes = json::object();
    for (const auto& [prio, weight] : w.priority_mix) {
      std::vector<RequestRecord> sub;
      for (const auto& rec : r.records)
        if (rec.priority == prio) sub.push_back(rec);
      const LoadSummary s = summarize(sub, r.duration_s, slo);
      fmt::print("{}", render_summary(s, fmt::format("priority {} ({} requests)", prio, sub.size()), slo));
      classes[std::to_string(prio)] = summary_json(s);
    }
    json recs = json::array();
    for (const auto& rec : r.records) recs.push_back(record_json(rec));
    doc["points"].push_back({{"load", label},
                             {"summary", summary_json(p.summary)},
                             {"by_priority", classes},
                             {"interrupted", r.interrupted},
                             {"requests", recs}});
    points.push_back(std::move(p));
    if (r.interrupted) {
      fmt::print(stderr, "loadtest: interrupted; the figures above cover what was measured\n");
      break;
    }
  }
  if (f.server_pid) {
    const ProcUsage after = proc_usage(f.server_pid);
    if (after.peak_rss_kib < 0)
      fmt::print(stderr, "loadtest: cannot read /proc/{} (not a local process?)\n", f.server_pid);
    else {
      fmt::print("server pid {}: peak resident memory {:.1f} MiB, CPU time during the test {:.2f} s\n", f.server_pid,
                 static_cast<double>(after.peak_rss_kib) / 1024.0, after.cpu_s - before.cpu_s);
      doc["server"] = {{"pid", f.server_pid},
                       {"peak_rss_mib", static_cast<double>(after.peak_rss_kib) / 1024.0},
                       {"cpu_s", after.cpu_s - before.cpu_s}};
    }
  }
  if (f.markdown || points.size() > 1) fmt::print("\n{}", render_markdown(points));
  if (!f.json_path.empty()) {
    std::ofstream out(f.json_path);
    if (!out) throw Error(fmt::format("{}: cannot write", f.json_path));
    out << doc.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  if (!f.plot_path.empty()) {
    std::ofstream out(f.plot_path);
    if (!out) throw Error(fmt::format("{}: cannot write", f.plot_path));
    out << render_sweep_svg(points, "kestrel loadtest: " + f.url);
    fmt::print(stderr, "loadtest: plot -> {}\n", f.plot_path);
  }
  int64_t failed = 0;
  for (const auto& p : points) failed += p.summary.failed;
  return failed > 0 && points.back().summary.completed == 0 ? 1 : 0;
}

}  // namespace

void register_loadtest(CLI::App& app) {
  static LoadFlags f;
  auto* cmd =
      add_command(app, "loadtest", "Latency percentiles and throughput of an OpenAI-compatible server under load",
                  [] { return run(f); });
  cmd->add_option("--url", f.url, "Server base URL (http://HOST:PORT)")->capture_default_str();
  cmd->add_option("--api", f.api, "completions or chat")->capture_default_str();
  cmd->add_option("--model", f.model, "The 'model' field to send (default: none)");
  cmd->add_option("--api-key", f.api_key, "Bearer token to send");
  cmd->add_option("--concurrency", f.concurrency, "Closed loop: this many clients (0: open loop at --request-rate)")
      ->capture_default_str();
  cmd->add_option("--request-rate", f.request_rate, "Open loop: requests per second (inf: all at once)")
      ->capture_default_str();
  cmd->add_option("--burstiness", f.burstiness, "Gamma shape of the arrival gaps (1: Poisson; lower: burstier)")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", f.max_concurrency, "Open loop: requests in flight at most")
      ->capture_default_str();
  cmd->add_option("--num-prompts", f.num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--input-len", f.input_len, "Prompt tokens (exact with a server /tokenize)")->capture_default_str();
  cmd->add_option("--output-len", f.output_len, "Tokens to generate (max_tokens with ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--shared-prefix", f.prefix_len, "Tokens of a prefix common to every prompt (prefix caching)")
      ->capture_default_str();
  cmd->add_option("--prompts-file", f.prompts_file,
                  "JSONL prompts: a string, {\"prompt\": ...} or {\"messages\": [...]} per line");
  cmd->add_option("--priority-mix", f.priority_mix,
                  "Request priorities and weights, e.g. \"0:0.8,-1:0.2\" (metrics per class)");
  cmd->add_option("--conversations", f.conversations,
                  "Agent workload: this many multi-turn chat conversations, taken turn by turn in rotation, each turn "
                  "re-sending the conversation so far (reports cached prompt tokens and TTFT per turn)");
  cmd->add_option("--turns", f.turns, "Agent workload: turns per conversation")->capture_default_str();
  cmd->add_option("--system-len", f.system_len, "Agent workload: words of each conversation's system prompt")
      ->capture_default_str();
  cmd->add_option("--turn-len", f.turn_len, "Agent workload: words of each new user message")->capture_default_str();
  cmd->add_option("--slo", f.slo, "Goodput bounds, e.g. ttft:500,tpot:50 (ms)");
  cmd->add_option("--sweep-rate", f.sweep_rate, "Run at each of these request rates, e.g. 1,2,4,8");
  cmd->add_option("--sweep-concurrency", f.sweep_concurrency, "Run at each of these client counts, e.g. 1,8,32");
  cmd->add_option("--max-duration", f.max_duration, "Seconds after which no request starts (per point)")
      ->capture_default_str();
  cmd->add_option("--timeout", f.timeout, "Seconds a request may take (a stall counts as a timeout error)")
      ->capture_default_str();
  cmd->add_option("--temperature", f.temperature, "Sampling temperature to send (0: greedy; default: the server's)")
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--seed", f.seed, "Seed for prompts, arrivals and the priority mix")->capture_default_str();
  cmd->add_option("--server-pid", f.server_pid, "A local server's pid: report its peak memory and CPU time");
  cmd->add_option("--json", f.json_path, "Write every request's record and the aggregates to FILE");
  cmd->add_flag("--markdown", f.markdown, "Also print a Markdown table");
  cmd->add_option("--plot", f.plot_path, "Write latency-vs-load as SVG (heatmap of load x percentile, P99 curves)");
}

}  // namespace kestrel::cli
