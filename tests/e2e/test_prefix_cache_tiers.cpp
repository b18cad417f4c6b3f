// The prefix cache's tiers end to end: `kestrel loadtest --conversations` (the agent workload) against servers
// whose KV pool holds about one conversation, with and without the RAM tier, and one whose pool holds them all;
// the disk tier across a restart, with bad files; GET /cache and the per-tier metrics. Replies are compared with
// the unlimited pool's (greedy): a tier may only save work, never change an answer.
#include <gmock/gmock.h>
#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "serve_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// A synth model of the architecture with the stories vocabulary (about 3 tokens a workload word) and a 4K context.
std::string synth_model(const std::string& arch) {
  static std::map<std::string, std::string> made;
  if (auto it = made.find(arch); it != made.end()) return it->second;
  const std::string path =
      (fs::temp_directory_path() / fmt::format("kestrel-tiers-{}-{}.gguf", arch, getpid())).string();
  const auto r = test::run_kestrel({"synth", "--arch", arch, "--preset", "tiny", "--type", "f32", "--ctx", "4096",
                                    "--vocab-from", test::kStories, "-o", path});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  static bool registered = false;
  if (!registered) {
    registered = true;
    std::atexit([] {
      for (const auto& [a, p] : made) fs::remove(p);
    });
  }
  return made[arch] = path;
}

// --kv-cache-mem (MiB) giving each model a pool of about 100 blocks of 16: one conversation of ~1300 tokens, not
// three.
std::string one_conversation_pool(const std::string& arch) {
  return arch == "qwen35" ? "2.0" : arch == "gpt-oss" ? "1.6" : "0.8";
}

struct AgentRun {
  json turns, requests;
};

// 3 conversations x 4 turns: a 400-word system prompt each (~1000 tokens), 10 words a turn, 16-token replies.
AgentRun agent_workload(const test::ServerProcess& s, int conversations = 3, int turns = 4) {
  test::TempDir dir;
  const auto r = test::run_kestrel({"loadtest", "--url", fmt::format("http://127.0.0.1:{}", s.port()),
                                    "--conversations", std::to_string(conversations), "--turns", std::to_string(turns),
                                    "--system-len", "400", "--turn-len", "10", "--output-len", "16", "--json",
                                    dir.file("run.json")});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const json j = test::read_json(dir.file("run.json"));
  return {j["turns"], j["requests"]};
}

json cache_of(const test::ServerProcess& s) {
  auto c = s.client();
  const auto res = c.Get("/cache");
  EXPECT_TRUE(res && res->status == 200);
  return res ? json::parse(res->body) : json();
}

void expect_same_replies(const AgentRun& a, const AgentRun& b, const std::string& what) {
  ASSERT_EQ(a.requests.size(), b.requests.size()) << what;
  for (size_t i = 0; i < a.requests.size(); i++) {
    EXPECT_TRUE(a.requests[i]["ok"].get<bool>()) << what << " " << a.requests[i];
    EXPECT_EQ(a.requests[i]["reply"], b.requests[i]["reply"]) << what << ": request " << i;
    EXPECT_EQ(a.requests[i]["prompt_tokens"], b.requests[i]["prompt_tokens"]) << what << ": request " << i;
  }
}

class AgentWorkload : public ::testing::TestWithParam<std::string> {};

TEST_P(AgentWorkload, TheRamTierKeepsWhatThePoolCannotAndChangesNoReply) {
  const std::string arch = GetParam();
  const std::string model = synth_model(arch);
  test::ServerProcess tiered({"-m", model, "--kv-cache-mem", one_conversation_pool(arch), "--max-batch-size", "4"});
  test::ServerProcess pool_only({"-m", model, "--kv-cache-mem", one_conversation_pool(arch), "--max-batch-size", "4",
                                 "--cache-ram", "0"});
  test::ServerProcess unlimited({"-m", model, "--kv-cache-mem", "64", "--max-batch-size", "4", "--cache-ram", "0"});
  const AgentRun a = agent_workload(tiered), b = agent_workload(pool_only), c = agent_workload(unlimited);
  expect_same_replies(a, c, arch + " with tiers");
  expect_same_replies(b, c, arch + " without tiers");
  ASSERT_EQ(a.turns.size(), 4u);
  // The pool holds about one conversation, not three (or the test would prove nothing).
  const json cache = cache_of(tiered);
  const int64_t pool_tokens = cache["pool"]["blocks"].get<int64_t>() * cache["block_tokens"].get<int64_t>();
  const int64_t last_prompt = a.requests.back()["prompt_tokens"];
  EXPECT_LT(pool_tokens, 2 * last_prompt) << cache;
  EXPECT_GE(pool_tokens, last_prompt) << cache;
  // gpt-oss's template renders a past assistant turn without its analysis channel once a later turn follows, so
  // its prompts share less with the turn before (the same with an unlimited pool: the template's doing).
  const double floor = arch == "gpt-oss" ? 0.8 : 0.9;
  for (size_t t = 1; t < a.turns.size(); t++) {
    // From turn 2 on, >= 90% of every prompt comes from the cache with the tiers...
    EXPECT_GE(a.turns[t]["cached_fraction"].get<double>(), floor) << arch << " turn " << t + 1 << ": " << a.turns;
    // ...as much as an unlimited pool keeps (a model with recurrent layers keeps its state at as many block
    // boundaries as it has state slots: without a tier, alternating conversations push each other's out)...
    if (arch != "qwen35") {
      EXPECT_EQ(a.turns[t]["cached_tokens"], c.turns[t]["cached_tokens"]) << arch << " turn " << t + 1;
    }
    // ...and without the tiers the pool's evictions lose most of it.
    EXPECT_LT(b.turns[t]["cached_fraction"].get<double>(), 0.5) << arch << " turn " << t + 1 << ": " << b.turns;
  }
  EXPECT_GT(cache["pool"]["tier_hit_tokens"].get<int64_t>(), 2000) << cache;
  EXPECT_GT(cache["ram"]["hits"].get<int64_t>(), 0) << cache;
  EXPECT_LE(cache["ram"]["bytes"].get<int64_t>(), cache["ram"]["limit_bytes"].get<int64_t>());
  EXPECT_FALSE(cache["disk"]["enabled"].get<bool>());
}

// llama: full attention; qwen35: recurrent-state snapshots; gpt-oss: sliding-window blocks (window 8).
INSTANTIATE_TEST_SUITE_P(Families, AgentWorkload, ::testing::Values("llama", "qwen35", "gpt-oss"));

TEST(PrefixCacheTiers, TheDiskTierServesAConversationAfterARestartAndSurvivesBadFiles) {
  const std::string model = synth_model("llama");
  test::TempDir dir;
  const std::string cache_dir = dir.file("cache");
  const std::vector<std::string> args = {"-m", model, "--kv-cache-mem", "0.8", "--cache-dir", cache_dir,
                                         "--cache-disk", "64"};
  AgentRun first;
  {
    test::ServerProcess s(args);
    first = agent_workload(s, 1, 3);
    EXPECT_EQ(s.terminate(10000), 0) << s.log();  // the disk writer finishes its queue on the way out
  }
  test::ServerProcess unlimited({"-m", model, "--kv-cache-mem", "64", "--cache-ram", "0"});
  const AgentRun reference = agent_workload(unlimited, 1, 3);
  expect_same_replies(first, reference, "first run");
  std::string folder;
  {
    test::ServerProcess s(args);
    EXPECT_THAT(s.log(), ::testing::ContainsRegex("disk [0-9]+ MiB of 64 MiB in [^ ]+ \\([1-9][0-9]* entries\\)"));
    const AgentRun again = agent_workload(s, 1, 3);
    expect_same_replies(again, reference, "after a restart");
    for (const json& t : again.turns)  // every turn, the first included: seen before the restart
      EXPECT_GE(t["cached_fraction"].get<double>(), 0.9) << again.turns;
    const json cache = cache_of(s);
    EXPECT_GT(cache["disk"]["hits"].get<int64_t>(), 50) << cache;
    EXPECT_EQ(cache["disk"]["corrupt"], 0);
    folder = cache["disk"]["folder"];
    // The metrics say the same.
    auto c = s.client();
    const auto m = c.Get("/metrics");
    ASSERT_TRUE(m && m->status == 200);
    EXPECT_THAT(m->body, ::testing::ContainsRegex("kestrel_prefix_cache_tier_hits_total\\{[^}]*tier=\"disk\"[^}]*\\} [1-9]"));
    EXPECT_THAT(m->body, ::testing::ContainsRegex("kestrel_prefix_cache_disk_limit_bytes\\{[^}]*\\} 67108864\n"));
    EXPECT_EQ(s.terminate(10000), 0);
  }
  // Bad files: a flipped bit in a third of the entries, another third cut short.
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ".kvb") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 30u);
  for (size_t i = 0; i < files.size(); i++) {
    std::string b = test::read_text(files[i].string());
    if (i % 3 == 0) b[b.size() - 5] ^= 0x40;
    if (i % 3 == 1) b.resize(b.size() - 7);
    test::write_bytes(files[i].string(), b);
  }
  test::ServerProcess s(args);
  const AgentRun bad = agent_workload(s, 1, 3);
  expect_same_replies(bad, reference, "with bad files");  // answered right: the bad entries recomputed
  const json cache = cache_of(s);
  EXPECT_GT(cache["disk"]["corrupt"].get<int64_t>(), 0) << cache;
}

// --cache-type q8_0: the tiers' entries converted from the pool's f32, ~3.5x smaller; the workload is served
// from them as before (their accuracy cost is measured by scripts/cache-type-accuracy.py: docs/serving.md).
TEST(PrefixCacheTiers, EntriesInASmallerTypeTakeLessRamAndStillServe) {
  const std::string model = synth_model("llama");
  test::ServerProcess same({"-m", model, "--kv-cache-mem", "0.8", "--max-batch-size", "4"});
  test::ServerProcess small({"-m", model, "--kv-cache-mem", "0.8", "--max-batch-size", "4", "--cache-type", "q8_0"});
  EXPECT_THAT(small.log(), ::testing::HasSubstr("(entries in q8_0)"));
  const AgentRun a = agent_workload(same), b = agent_workload(small);
  for (size_t t = 1; t < b.turns.size(); t++)
    EXPECT_GE(b.turns[t]["cached_fraction"].get<double>(), 0.9) << "turn " << t + 1 << ": " << b.turns;
  for (size_t i = 0; i < 3; i++) EXPECT_EQ(a.requests[i]["reply"], b.requests[i]["reply"]);  // turn 1: no tier yet
  const json ca = cache_of(same), cb = cache_of(small);
  ASSERT_GT(ca["ram"]["entries"].get<int64_t>(), 0);
  ASSERT_GT(cb["ram"]["entries"].get<int64_t>(), 0);
  const double per_a = ca["ram"]["bytes"].get<double>() / ca["ram"]["entries"].get<double>();
  const double per_b = cb["ram"]["bytes"].get<double>() / cb["ram"]["entries"].get<double>();
  EXPECT_LT(per_b, 0.35 * per_a) << per_a << " " << per_b;
}

TEST(PrefixCacheTiers, TheStartLineAndBadFlagsSayWhatTheTiersAre) {
  const std::string model = synth_model("llama");
  test::ServerProcess s({"-m", model, "--cache-ram", "64"});
  EXPECT_THAT(s.log(), ::testing::HasSubstr("prefix cache tiers: RAM 64 MiB"));
  const json cache = cache_of(s);
  EXPECT_EQ(cache["ram"]["limit_bytes"], 64 << 20);
  EXPECT_TRUE(cache["ram"]["enabled"].get<bool>());
  test::ServerProcess off({"-m", model, "--cache-ram", "0"});
  EXPECT_THAT(off.log(), ::testing::HasSubstr("prefix cache in the KV pool only"));
  for (const auto& [flags, error] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--cache-ram", "lots"}, "--cache-ram 'lots' is not a size"},
           {{"--cache-warm"}, "--cache-warm needs --cache-dir"},
           {{"--cache-type", "q9"}, "--cache-type 'q9' is not"},
           {{"--cache-type", "q8_0", "--cache-ram", "0"}, "--cache-type needs a RAM or disk tier"},
           {{"--cache-dir", "/proc/no-such/cache"}, "cannot create"},
       }) {
    std::vector<std::string> args = {"serve", "-m", model, "--port", "0"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = test::run_kestrel(args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, ::testing::HasSubstr(error)) << fmt::format("{}", fmt::join(flags, " "));
  }
}

TEST(PrefixCacheTiers, CacheWarmReadsTheDiskTierIntoRamAtStart) {
  const std::string model = synth_model("llama");
  test::TempDir dir;
  const std::vector<std::string> args = {"-m", model, "--kv-cache-mem", "0.8", "--cache-dir", dir.file("cache")};
  {
    test::ServerProcess s(args);
    agent_workload(s, 1, 2);
    EXPECT_EQ(s.terminate(10000), 0);
  }
  std::vector<std::string> warm = args;
  warm.push_back("--cache-warm");
  test::ServerProcess s(warm);
  EXPECT_THAT(s.log(), ::testing::ContainsRegex("prefix cache: [1-9][0-9]* entries read from"));
  const json cache = cache_of(s);
  EXPECT_GT(cache["ram"]["entries"].get<int64_t>(), 50) << cache;
  EXPECT_EQ(cache["disk"]["promotions"], cache["ram"]["entries"]);
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

json chat_once(const test::ServerProcess& s, const std::string& system) {
  auto c = s.client();
  const json body = {{"messages", {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", "go on"}}}},
                     {"max_tokens", 8}, {"temperature", 0}};
  const auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  return r ? json::parse(r->body) : json();
}

json slot_post(const test::ServerProcess& s, const std::string& target, const json& body, int* status) {
  auto c = s.client();
  const auto r = c.Post(target, body.is_null() ? "" : body.dump(), "application/json");
  *status = r ? r->status : 0;
  return r ? json::parse(r->body) : json();
}

// llama-server's slot save and restore, over the prefix cache: a slot's cached prefix written to a file, read
// by another server process (an empty pool) into its RAM tier, and the same request then served from it.
TEST(PrefixCacheSlots, ASavedSlotRestoresIntoAFreshServerAndServesItsPrefix) {
  const std::string model = synth_model("llama");
  test::TempDir dir;
  const std::string slots = dir.file("slots");
  std::string system;
  for (int i = 0; i < 150; i++) system += i % 3 ? "lily saw a big red ball " : "tom went home ";
  json first;
  int st = 0;
  {
    test::ServerProcess s({"-m", model, "--slot-save-path", slots, "--max-batch-size", "2"});
    first = chat_once(s, system);
    const json saved = slot_post(s, "/slots/0?action=save", {{"filename", "story.slot"}}, &st);
    ASSERT_EQ(st, 200) << saved;
    EXPECT_EQ(saved["id_slot"], 0);
    EXPECT_EQ(saved["filename"], "story.slot");
    const int64_t prompt = first["usage"]["prompt_tokens"];
    EXPECT_EQ(saved["n_saved"].get<int64_t>(), prompt + first["usage"]["completion_tokens"].get<int64_t>());
    EXPECT_GE(saved["n_cached"].get<int64_t>(), prompt - 16) << saved;
    EXPECT_GT(saved["n_written"].get<int64_t>(), 100000);
    EXPECT_TRUE(fs::exists(slots + "/story.slot"));
    // Refusals, in llama-server's terms.
    EXPECT_EQ(slot_post(s, "/slots/7?action=save", {{"filename", "x"}}, &st)["error"]["message"].get<std::string>().rfind("Invalid slot ID", 0), 0u);
    EXPECT_EQ(st, 400);
    slot_post(s, "/slots/0?action=fly", {{"filename", "x"}}, &st);
    EXPECT_EQ(st, 400);
    slot_post(s, "/slots/0?action=save", {{"filename", "../x"}}, &st);
    EXPECT_EQ(st, 400);
    slot_post(s, "/slots/0?action=restore", {{"filename", "none.slot"}}, &st);
    EXPECT_EQ(st, 404);
    // (schemathesis found these two: an unknown field ended the process, a long name failed the write)
    EXPECT_THAT(slot_post(s, "/slots/0?action=save", {{"filename", "y"}, {"extra", 1}}, &st)["error"]["message"].get<std::string>(),
                ::testing::HasSubstr("extra"));
    EXPECT_EQ(st, 400);
    slot_post(s, "/slots/0?action=save", {{"filename", std::string(255, 'n')}}, &st);
    EXPECT_EQ(st, 200);
    // Erase forgets the slot's tokens; a second erase has nothing.
    EXPECT_EQ(slot_post(s, "/slots/1?action=erase", nullptr, &st)["n_erased"], 0);
    EXPECT_EQ(st, 200);
  }
  {
    test::ServerProcess s({"-m", model, "--slot-save-path", slots, "--max-batch-size", "2"});
    const json restored = slot_post(s, "/slots/1?action=restore", {{"filename", "story.slot"}}, &st);
    ASSERT_EQ(st, 200) << restored;
    EXPECT_GT(restored["n_restored"].get<int64_t>(), 0);
    const json again = chat_once(s, system);
    EXPECT_EQ(again["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]);
    const int64_t prompt = again["usage"]["prompt_tokens"];
    EXPECT_GE(again["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), prompt - 16) << again["usage"];
    EXPECT_EQ(slot_post(s, "/slots/1?action=erase", nullptr, &st)["n_erased"], restored["n_restored"]);
  }
  // Another model (another seed: other weights, the same shapes) refuses the file by name; so does a damaged one.
  const std::string other = dir.file("other.gguf");
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--type", "f32", "--ctx", "4096",
                               "--vocab-from", test::kStories, "--seed", "2", "-o", other}).exit_code, 0);
  test::ServerProcess o({"-m", other, "--slot-save-path", slots});
  EXPECT_THAT(slot_post(o, "/slots/0?action=restore", {{"filename", "story.slot"}}, &st)["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("saved by another model"));
  EXPECT_EQ(st, 400);
  std::string b = test::read_text(slots + "/story.slot");
  b[b.size() / 2] ^= 1;
  test::write_bytes(slots + "/bent.slot", b);
  test::ServerProcess s({"-m", model, "--slot-save-path", slots});
  EXPECT_THAT(slot_post(s, "/slots/0?action=restore", {{"filename", "bent.slot"}}, &st)["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("cut short or altered"));
  EXPECT_EQ(st, 400);
  test::ServerProcess none({"-m", model});
  EXPECT_THAT(slot_post(none, "/slots/0?action=save", {{"filename", "x"}}, &st)["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("--slot-save-path"));
  EXPECT_EQ(st, 501);
}

}  // namespace
}  // namespace kestrel
