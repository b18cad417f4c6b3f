// The kestrel binary end to end: each subcommand's happy path and the
// bad-input cases, which must exit non-zero with a message naming the problem.
#include <gmock/gmock.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include "cli_process.h"
#include "gguf/gguf.h"
#include "hw/cpu_features.h"
#include "hw/limits.h"
#include "hw/tuning.h"
#include "test_support.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using test::CliResult;
using test::run_kestrel;

const std::string kStoriesBin = test::shared("models/stories260K.bin");
const std::string kTok = test::shared("models/tok512.bin");

TEST(Cli, HelpListsEverySubcommand) {
  const auto r = run_kestrel({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* cmd : {"run", "serve", "loadtest", "perplexity", "quantize", "info", "tokenize", "convert", "synth", "hw", "bench", "profile-report", "tune"}) {
    EXPECT_THAT(r.out, HasSubstr(cmd));
    EXPECT_EQ(run_kestrel({cmd, "--help"}).exit_code, 0) << cmd;
  }
}

TEST(Cli, RunFromLlama2cCheckpointStreamsTextAndSummary) {
  const auto r = run_kestrel({"run", "-m", kStoriesBin, "--tokenizer", kTok, "-p", "Once upon a time", "-n", "30",
                              "--temp", "0", "--print-ids", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Once upon a time, there was a little girl named Lily."));
  EXPECT_THAT(r.out, HasSubstr("ids: 432 383 286 261 376"));
  EXPECT_THAT(r.err, HasSubstr("prompt 5 tokens, generated 30 tokens"));
  EXPECT_THAT(r.err, HasSubstr("prefill"));
  EXPECT_THAT(r.err, HasSubstr("decode"));
}

TEST(Cli, ConvertThenInfoTokenizeAndDumpLogits) {
  test::TempDir dir;
  const std::string gguf = dir.file("s.gguf");
  auto r = run_kestrel({"convert", "--llama2c", kStoriesBin, "--tokenizer", kTok, "-o", gguf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_kestrel({"info", gguf});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("llama.context_length"));
  EXPECT_THAT(r.out, HasSubstr("blk.4.ffn_down.weight"));
  r = run_kestrel({"tokenize", "-m", gguf, "Once upon a time"});
  EXPECT_EQ(r.out, "1 403 407 261 378\n");
  r = run_kestrel({"tokenize", "-m", gguf, "--pieces", "--no-bos", "Once"});
  EXPECT_THAT(r.out, HasSubstr("403 ' Once'"));

  const std::string logits = dir.file("l.f32");
  r = run_kestrel({"run", "-m", gguf, "--prompt-ids", "1 403 407 261 378", "-n", "10", "--temp", "0", "--dump-logits", logits});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = test::read_f32(logits);
  ASSERT_EQ(got.size(), (5u + 9u) * 512u);  // every prompt position and every generated token but the last
  const auto want = test::read_f32(test::shared("reference/stories260K/once.logits.f32"));
  for (size_t i = 0; i < got.size(); i++) ASSERT_NEAR(got[i], want[i], 1e-4) << "logit " << i;

  // Mapping the file instead of loading it changes nothing but speed.
  const std::string mapped = dir.file("m.f32");
  r = run_kestrel({"run", "-m", gguf, "--mmap", "--prompt-ids", "1 403 407 261 378", "-n", "10", "--temp", "0", "--dump-logits", mapped});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_text(mapped), test::read_text(logits));
}

TEST(Cli, ConvertQuantizedFallsBackForOddRowsAndSaysSo) {
  test::TempDir dir;
  const auto r = run_kestrel(
      {"convert", "--llama2c", kStoriesBin, "--tokenizer", kTok, "--type", "q8_0", "-o", dir.file("q.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("blk.0.ffn_down.weight rows do not divide into 32-element blocks; stored as F16"));
  const GgufFile f = GgufFile::open(dir.file("q.gguf"));
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->type, GgmlType::F16);
  const auto run = run_kestrel({"run", "-m", dir.file("q.gguf"), "-p", "Once upon a time", "-n", "20", "--temp", "0"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("Once upon a time, there was a little girl"));
}

TEST(Cli, SynthWritesARunnableModel) {
  test::TempDir dir;
  auto r = run_kestrel({"synth", "--arch", "llama", "--preset", "tiny", "--type", "q8_0", "--layers", "3", "-o", dir.file("t.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f = GgufFile::open(dir.file("t.gguf"));
  EXPECT_EQ(f.get_int("llama.block_count"), 3);
  EXPECT_EQ(f.find_tensor("blk.2.attn_q.weight")->type, GgmlType::Q8_0);
  r = run_kestrel({"run", "-m", dir.file("t.gguf"), "-p", "hello there", "-n", "8", "--seed", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generated 8 tokens"));

  // --no-repack: the file-layout kernels give the same logits up to summation order.
  const std::vector<std::string> greedy = {"run", "-m", dir.file("t.gguf"), "--prompt-ids", "1 5 9 13", "-n", "4", "--temp", "0"};
  auto with = [&](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  ASSERT_EQ(run_kestrel(with(greedy, {"--dump-logits", dir.file("packed.f32")})).exit_code, 0);
  r = run_kestrel(with(greedy, {"--no-repack", "--dump-logits", dir.file("plain.f32")}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto packed = test::read_f32(dir.file("packed.f32")), plain = test::read_f32(dir.file("plain.f32"));
  ASSERT_EQ(packed.size(), plain.size());
  ASSERT_FALSE(plain.empty());
  for (size_t i = 0; i < plain.size(); i++) ASSERT_NEAR(packed[i], plain[i], 0.05f) << i;

  // Same seed, same file.
  ASSERT_EQ(run_kestrel({"synth", "--preset", "tiny", "--type", "q8_0", "--layers", "3", "-o", dir.file("u.gguf")}).exit_code, 0);
  EXPECT_EQ(test::read_text(dir.file("t.gguf")), test::read_text(dir.file("u.gguf")));

  // A real tokenizer copied in: it tokenizes like the original.
  const std::string spm = test::shared("vocab/ggml-vocab-llama-spm.gguf");
  r = run_kestrel({"synth", "--arch", "qwen2", "--preset", "tiny", "--vocab-from", spm, "-o", dir.file("v.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_kestrel({"tokenize", "-m", dir.file("v.gguf"), "Hello world"}).out, run_kestrel({"tokenize", "-m", spm, "Hello world"}).out);
  EXPECT_EQ(run_kestrel({"run", "-m", dir.file("v.gguf"), "-p", "Hello", "-n", "4"}).exit_code, 0);
}

// Every family synth writes (tiny shapes) loads under the strict loader,
// runs with speculation, quantizes (routers stay F32), and passes
// precision-check at float32 rounding (the float64 reference).
TEST(Cli, SynthEveryFamilyRunsQuantizesAndChecks) {
  test::TempDir dir;
  for (const char* arch : {"llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3", "gemma2", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string f32 = dir.file(std::string(arch) + ".gguf"), q8 = dir.file(std::string(arch) + ".q8.gguf");
    auto r = run_kestrel({"synth", "--arch", arch, "--preset", "tiny", "--type", "f32", "-o", f32});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(std::string("(") + arch + " F32"));
    r = run_kestrel({"run", "-m", f32, "-p", "Once upon a time", "-n", "24", "--temp", "0", "-c", "128", "--spec", "ngram"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("generated 24 tokens"));
    r = run_kestrel({"quantize", f32, q8, "--type", "q8_0"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const GgufFile q = GgufFile::open(q8);
    int routers = 0;
    for (const auto& t : q.tensors()) {
      if (t.name.find("ffn_gate_inp.weight") == std::string::npos) continue;
      EXPECT_EQ(t.type, GgmlType::F32) << t.name;
      routers++;
    }
    EXPECT_EQ(routers > 0, std::string(arch).find("moe") != std::string::npos);
    EXPECT_EQ(run_kestrel({"run", "-m", q8, "-p", "Once", "-n", "4", "-c", "64"}).exit_code, 0);
    r = run_kestrel({"precision-check", "-m", f32, "-c", "128"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("logits: "));
  }
  // Real shapes are checked, not written: a wrong preset names the known ones.
  EXPECT_THAT(run_kestrel({"synth", "--arch", "qwen3", "--preset", "7b", "-o", dir.file("x.gguf")}).err,
              HasSubstr("not one of tiny, 0.6b, 4b, 8b for qwen3"));
}

// Known limits in a private cache, so roofline arithmetic can be checked exactly.
// The cached bandwidth the fixture stores: no machine these tests run on
// measures it (10.0 did: a loaded 2-core VM probes 10-11 GB/s, and a fresh
// probe that rounds to the cached figure made --measure look ignored).
constexpr double kCachedBandwidthGbs = 1234.5;

class CliWithLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("KESTREL_CACHE_DIR", dir_.file("cache").c_str(), 1);
    MeasuredLimits l;
    l.threads = 1;
    l.read_bandwidth_gbs = kCachedBandwidthGbs;
    l.f32_fma_gflops = 100.0;
    l.int8_dot_gops = 1000.0;
    l.f32_isa = l.int8_isa = "test";
    l.measured_at = "2026-01-01T00:00:00Z";
    store_limits(l);
  }
  void TearDown() override { unsetenv("KESTREL_CACHE_DIR"); }
  test::TempDir dir_;
};

TEST_F(CliWithLimits, HwReportsFeaturesKernelsAndCachedLimits) {
  const auto r = run_kestrel({"hw", "--json", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["isa"].contains("avx2"));
  EXPECT_GE(j["cores"].get<int>(), 1);
  EXPECT_GE(j["threads"].get<int>(), 1);
  EXPECT_TRUE(j["kernels"].contains("Q4_0"));
  EXPECT_EQ(j["limits"]["read_bandwidth_gbs"].get<double>(), kCachedBandwidthGbs);
  // The named operators and where each has a kernel: every family's own operator is listed (the binary links them
  // all), sigmoid_gate and the hyper-connection fold and spread with their Vulkan kernels, gated_delta_net with
  // the host kernel alone.
  std::map<std::string, std::vector<std::string>> ops;
  for (const auto& op : j["operators"]) ops[op["name"]] = op["kernels"].get<std::vector<std::string>>();
  for (const char* name : {"sigmoid_gate", "hyper_collapse", "hyper_expand"})
    EXPECT_EQ(ops[name], (std::vector<std::string>{"host", "vulkan"})) << name;
  EXPECT_EQ(ops["gated_delta_net"], (std::vector<std::string>{"host"}));
  for (const char* name : {"hyper_mix", "compress_blocks", "hadamard", "indexer_top_k"})
    EXPECT_TRUE(ops.count(name)) << name;
  const auto text = run_kestrel({"hw", "-t", "1"});
  EXPECT_THAT(text.out, HasSubstr("read bandwidth"));
  EXPECT_THAT(text.out, HasSubstr("kernels:"));
  EXPECT_THAT(text.out, HasSubstr("sigmoid_gate (host, vulkan)"));
}

// `hw` lists the Vulkan devices the loader reports, as vulkaninfo (vulkan-tools, the independent reader)
// lists them: the same names in order and, per device, the same subgroup size, compute shared memory,
// storage-buffer range and cooperative-matrix extension. In CI that is lavapipe (scripts/setup.sh).
TEST(CliVulkan, HwListsTheDevicesVulkaninfoReports) {
  int status = 0;
  const std::string info = test::shell("vulkaninfo 2>/dev/null", &status);
  ASSERT_EQ(status, 0) << "vulkaninfo failed (scripts/setup.sh installs vulkan-tools and mesa-vulkan-drivers)";
  // vulkaninfo's per-device blocks start at "GPUn:"; the first value of each field in a block is that device's.
  std::vector<std::map<std::string, std::string>> want;
  std::istringstream lines(info);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("GPU", 0) == 0 && !line.empty() && line.back() == ':') {
      want.emplace_back();
      continue;
    }
    if (want.empty()) continue;
    if (line.find("VK_KHR_cooperative_matrix ") != std::string::npos) want.back()["coopmat"] = "true";
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    std::string key = line.substr(0, eq);
    key.erase(0, key.find_first_not_of(" \t"));
    key.erase(key.find_last_not_of(" \t") + 1);
    want.back().emplace(key, line.substr(eq + 3));  // the first value kept
  }
  ASSERT_FALSE(want.empty()) << "vulkaninfo listed no device:\n" << info.substr(0, 2000);
  const auto r = run_kestrel({"hw", "--json", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto devices = nlohmann::json::parse(r.out)["vulkan"]["devices"];
  ASSERT_EQ(devices.size(), want.size()) << r.out;
  for (size_t i = 0; i < want.size(); i++) {
    const auto& d = devices[i];
    std::cout << "[ vulkan   ] " << d["name"].get<std::string>() << ", subgroup " << d["subgroup_size"] << "\n";
    EXPECT_EQ(d["name"].get<std::string>(), want[i]["deviceName"]);
    EXPECT_EQ(std::to_string(d["subgroup_size"].get<uint32_t>()), want[i]["subgroupSize"]);
    EXPECT_EQ(std::to_string(d["max_shared_memory"].get<uint32_t>()), want[i]["maxComputeSharedMemorySize"]);
    EXPECT_EQ(std::to_string(d["max_storage_buffer"].get<uint64_t>()), want[i]["maxStorageBufferRange"]);
    EXPECT_EQ(d["cooperative_matrix"].get<bool>(), want[i].count("coopmat") > 0);
  }
  const auto text = run_kestrel({"hw", "-t", "1"});
  EXPECT_THAT(text.out, HasSubstr("vulkan:     [0] " + want[0]["deviceName"]));
}

// KESTREL_ISA=amx runs the tile kernels where the tiles are usable (hw says which), and is refused by name
// with the reason where they are not.
TEST_F(CliWithLimits, IsaAmxRunsTheTilesOrSaysWhyNot) {
  setenv("KESTREL_ISA", "amx", 1);
  const auto r = run_kestrel({"hw", "-t", "1"});
  unsetenv("KESTREL_ISA");
  std::cout << "[ cpu      ] amx: " << amx_state().detail << "\n";
  if (amx_state().usable && cpu_features().avx512vnni) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("kernels:    amx"));
    EXPECT_THAT(r.out, HasSubstr("tdpbsud"));
  } else {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.err, HasSubstr("KESTREL_ISA=amx requested, but this CPU/build supports at most"));
    EXPECT_THAT(r.err, HasSubstr(amx_state().detail));
  }
}

TEST_F(CliWithLimits, BenchReportsLlamaBenchFieldsAndTheRoofline) {
  const std::string model = dir_.file("m.gguf");
  ASSERT_EQ(run_kestrel({"synth", "--preset", "tiny", "--type", "q8_0", "-o", model}).exit_code, 0);
  const auto r = run_kestrel({"bench", "-m", model, "-p", "16", "-n", "8", "-r", "2", "-t", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 2u);
  // Weight bytes per decoded token, counted independently from the file.
  const GgufFile f = GgufFile::open(model);
  double weight_bytes = 0, params = 0;
  for (const auto& t : f.tensors()) {
    params += static_cast<double>(t.n_elements());
    if (t.ne.size() >= 2 && t.name != "token_embd.weight") weight_bytes += static_cast<double>(t.nbytes);
  }
  for (const auto& row : rows) {
    for (const char* key : {"model_filename", "model_type", "model_size", "model_n_params", "n_threads", "n_prompt",
                            "n_gen", "avg_ts", "stddev_ts", "roofline_ts", "roofline_fraction"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_EQ(row["model_filename"], model);
    EXPECT_EQ(row["n_threads"], 1);
    EXPECT_EQ(row["model_n_params"].get<double>(), params);
    EXPECT_EQ(row["samples_ts"].size(), 2u);
    EXPECT_GT(row["avg_ts"].get<double>(), 0.0);
    EXPECT_NEAR(row["roofline_fraction"].get<double>(), row["avg_ts"].get<double>() / row["roofline_ts"].get<double>(), 1e-9);
  }
  EXPECT_EQ(rows[0]["n_prompt"], 16);
  EXPECT_EQ(rows[1]["n_gen"], 8);
  EXPECT_EQ(rows[1]["weight_bytes_per_token"].get<double>(), weight_bytes);
  EXPECT_NEAR(rows[1]["roofline_ts"].get<double>(), kCachedBandwidthGbs * 1e9 / weight_bytes,
              1e-6);  // the cached bandwidth over the weights
  // Prefill of int8 weights is held to the int8 peak: 1000 GOP/s over the FLOPs per token.
  EXPECT_NEAR(rows[0]["roofline_ts"].get<double>(), 1000e9 / rows[0]["flops_per_token"].get<double>(), 1e-6);

  const auto md = run_kestrel({"bench", "-m", model, "-p", "8", "-n", "0", "-r", "1", "-t", "1"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_THAT(md.out, HasSubstr("| pp8 |"));
  EXPECT_THAT(md.out, HasSubstr("of roofline"));
  const auto csv = run_kestrel({"bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "-t", "1", "--csv"});
  EXPECT_THAT(csv.out, HasSubstr("model_filename,model_type"));
  EXPECT_NE(run_kestrel({"bench", "-m", model, "-o", "xml"}).exit_code, 0);
  // -d: decode after a cached prompt of that many tokens (llama-bench's depth), one row per depth.
  const auto deep = run_kestrel({"bench", "-m", model, "-p", "0", "-n", "4", "-d", "0,24", "-r", "2", "-t", "1", "-o", "jsonl"});
  ASSERT_EQ(deep.exit_code, 0) << deep.err;
  std::vector<nlohmann::json> tg;
  std::istringstream lines(deep.out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') tg.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(tg.size(), 2u) << deep.out;
  EXPECT_EQ(tg[0]["test"], "tg4");
  EXPECT_EQ(tg[0]["n_depth"], 0);
  EXPECT_EQ(tg[1]["test"], "tg4@d24");
  EXPECT_EQ(tg[1]["n_depth"], 24);
  EXPECT_GT(tg[1]["avg_ts"].get<double>(), 0.0);
}

// A roofline fraction above 1.0 means the cached limits are wrong (measured on a busy machine): bench says so
// and how to measure again, in the table, in JSON and on stderr; within the limits it says nothing.
TEST_F(CliWithLimits, BenchWarnsWhenFasterThanStaleLimits) {
  const std::string model = dir_.file("m.gguf");
  ASSERT_EQ(run_kestrel({"synth", "--preset", "tiny", "--type", "q8_0", "-o", model}).exit_code, 0);
  const auto fine = run_kestrel({"bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "-t", "1"});
  ASSERT_EQ(fine.exit_code, 0) << fine.err;
  EXPECT_THAT(fine.out + fine.err, Not(HasSubstr("warning")));

  MeasuredLimits slow;  // a machine a thousand times slower than any that runs this
  slow.threads = 1;
  slow.read_bandwidth_gbs = 0.001;
  slow.f32_fma_gflops = slow.int8_dot_gops = 0.001;
  slow.f32_isa = slow.int8_isa = "test";
  slow.measured_at = "2026-01-02T03:04:05Z";
  store_limits(slow);
  const auto md = run_kestrel({"bench", "-m", model, "-p", "8", "-n", "4", "-r", "1", "-t", "1"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_THAT(md.out, HasSubstr("warning: tg4 ran at"));
  EXPECT_THAT(md.out, HasSubstr("cached limits (measured 2026-01-02T03:04:05Z) look stale"));
  EXPECT_THAT(md.out, HasSubstr("kestrel hw --measure"));
  EXPECT_THAT(md.err, HasSubstr("bench: warning: pp8 ran at"));
  const auto js = run_kestrel({"bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "-t", "1", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const auto rows = nlohmann::json::parse(js.out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0]["roofline_fraction"].get<double>(), 1.0);
  EXPECT_THAT(rows[0]["warning"].get<std::string>(), HasSubstr("look stale"));
}

// The V2-Lite form (no query bottleneck) still carries attention.q_lora_rank, 0: llama.cpp's loader requires
// the key unless the layer count is a Lite model's (checked 2026-12-03: llama.cpp de3ff81 loads the tiny file
// and its greedy ids for "3 17 42 99" equal ours, 458 89 439 260 492 47 6 433).
TEST(Cli, DeepseekLiteSynthWritesQLoraRankZero) {
  test::TempDir dir;
  const std::string model = dir.file("lite.gguf");
  auto r = run_kestrel({"synth", "--arch", "deepseek2", "--preset", "tiny", "--type", "f32", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f = GgufFile::open(model);
  ASSERT_NE(f.find("deepseek2.attention.q_lora_rank"), nullptr) << "llama.cpp refuses a non-Lite layer count without it";
  EXPECT_EQ(f.get_int("deepseek2.attention.q_lora_rank"), 0);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q_a.weight"), nullptr);
  EXPECT_NE(f.find_tensor("blk.0.attn_q.weight"), nullptr);
}

TEST_F(CliWithLimits, DeepseekSynthRunsBothMlaModesAndBenchCountsRoutedExperts) {
  const std::string model = dir_.file("ds.gguf");
  // f32: the two MLA modes then differ by summation order only (with Q8_0
  // they quantize different intermediates: ~0.03 apart).
  auto r = run_kestrel({"synth", "--arch", "deepseek2", "--preset", "tiny-v3", "--type", "f32", "-o", model});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const GgufFile f = GgufFile::open(model);
  EXPECT_EQ(f.get_string("general.architecture"), "deepseek2");
  EXPECT_EQ(f.get_int("deepseek2.expert_group_count"), 4);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_up_exps.weight")->ne, (std::vector<int64_t>{64, 32, 16}));

  // The two ways of running MLA give the same logits (up to rounding).
  const std::vector<std::string> greedy = {"run", "-m", model, "--prompt-ids", "1 5 9 13 17 21", "-n", "4", "--temp", "0"};
  for (const char* mode : {"absorbed", "decompressed"}) {
    auto args = greedy;
    args.insert(args.end(), {"--mla", mode, "--dump-logits", dir_.file(std::string(mode) + ".f32")});
    r = run_kestrel(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const auto a = test::read_f32(dir_.file("absorbed.f32")), d = test::read_f32(dir_.file("decompressed.f32"));
  ASSERT_EQ(a.size(), d.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); i++) ASSERT_NEAR(a[i], d[i], 1e-4f) << i;
  EXPECT_NE(run_kestrel({"run", "-m", model, "-p", "x", "--mla", "sideways"}).exit_code, 0);

  // Decode reads the routed experts' share only: 4 of 16 experts' bytes.
  r = run_kestrel({"bench", "-m", model, "-p", "0", "-n", "4", "-r", "1", "-t", "1", "--json", "--profile", dir_.file("p.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out);
  double bytes = 0;
  for (const auto& t : f.tensors()) {
    if (t.ne.size() < 2 || t.name == "token_embd.weight") continue;
    bytes += static_cast<double>(t.nbytes) * (t.name.find("_exps.") != std::string::npos ? 4.0 / 16.0 : 1.0);
  }
  EXPECT_NEAR(rows[0]["weight_bytes_per_token"].get<double>(), bytes, 16.0);
  EXPECT_THAT(rows[0]["model_type"].get<std::string>(), HasSubstr("active"));
  r = run_kestrel({"profile-report", dir_.file("p.json")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("expert load"));
  EXPECT_THAT(r.out, HasSubstr("moe_route"));
}

TEST(Cli, QuantizeKeepsTheGreedyTextAtQ8_0AndPerplexityMeasuresTheCost) {
  test::TempDir dir;
  const std::string f32 = test::shared("models/stories260K.gguf");
  auto greedy = [&](const std::string& m) {
    return run_kestrel({"run", "-m", m, "-p", "Once upon a time", "-n", "100", "--temp", "0"}).out;
  };
  auto ppl = [&](const std::string& m) {
    const auto r = run_kestrel({"perplexity", "-m", m, "-f", test::shared("eval/stories.txt"), "-c", "128"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const auto at = r.out.find("PPL = ");
    return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + 6));
  };
  const std::string base_text = greedy(f32);
  const double base_ppl = ppl(f32);
  EXPECT_NEAR(base_ppl, 5.1168, 1e-3);  // llama.cpp's figure for this model and text
  for (const char* type : {"q8_0", "q4_0"}) {
    const std::string out = dir.file(std::string(type) + ".gguf");
    const auto r = run_kestrel({"quantize", f32, out, "--type", type});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("blk.4.ffn_down.weight rows do not divide"));  // 172 columns
    const GgufFile q = GgufFile::open(out);
    EXPECT_EQ(type_name(q.find_tensor("blk.0.attn_q.weight")->type), std::string(type) == "q8_0" ? "Q8_0" : "Q4_0");
    EXPECT_EQ(q.find_tensor("blk.4.ffn_down.weight")->type, GgmlType::F16);
    EXPECT_EQ(q.get_string("tokenizer.ggml.model"), "llama");  // metadata copied
    const double p = ppl(out);
    if (std::string(type) == "q8_0") {
      EXPECT_EQ(greedy(out), base_text);       // 100 greedy tokens unchanged
      EXPECT_NEAR(p, base_ppl, 0.03);          // measured: 5.1292
    } else {
      EXPECT_GT(p, base_ppl);                  // 4 bits cost something...
      EXPECT_LT(p, base_ppl * 1.15);           // ...but not much (measured: 5.6420, +10%)
    }
  }
  EXPECT_THAT(run_kestrel({"quantize", f32, dir.file("x.gguf"), "--type", "tq1_0"}).err, HasSubstr("--type 'tq1_0'"));
  // stories260K's 64-wide rows hold no 256-block: IQ2_XXS falls back to IQ4_NL as in llama-quantize,
  // which then needs no importance matrix.
  EXPECT_THAT(run_kestrel({"quantize", f32, dir.file("x.gguf"), "--type", "iq2_xxs"}).err,
              HasSubstr("blk.0.attn_q.weight rows do not divide into the type's blocks; stored as IQ4_NL"));
  EXPECT_THAT(run_kestrel({"quantize", f32, dir.file("x.gguf"), "--mix", "q9_k"}).err, HasSubstr("--mix 'q9_k' is not one of"));
  EXPECT_THAT(run_kestrel({"quantize", f32, f32, "--type", "q8_0"}).err, HasSubstr("overwrite the input"));
}

TEST(Cli, QuantizationMethodsKvTypesAndPrecisionCheckEndToEnd) {
  test::TempDir dir;
  const std::string f32 = test::shared("models/stories260K.gguf");
  const std::string calib = std::string(KESTREL_SOURCE_DIR) + "/tests/data/calib-stories.txt";
  // AWQ + GPTQ with calibration: reports what it did, writes a loadable file.
  auto r = run_kestrel({"quantize", f32, dir.file("g.gguf"), "--type", "q4_0", "--method", "awq+gptq", "--calib", calib,
                    "--calib-ctx", "64"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("calibration over"));
  EXPECT_THAT(r.err, HasSubstr("awq blk.0.attn_q.weight: alpha"));
  EXPECT_EQ(run_kestrel({"run", "-m", dir.file("g.gguf"), "-p", "Once", "-n", "8", "--temp", "0"}).exit_code, 0);
  // Mixed precision prints its plan.
  r = run_kestrel({"quantize", f32, dir.file("m.gguf"), "--calib", calib, "--calib-ctx", "64", "--target-kld", "0.05",
               "--types", "q4_0,q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| blk.0.ffn_gate.weight |"));
  EXPECT_THAT(r.out, HasSubstr("predicted KLD"));
  // Bad combinations name the problem.
  EXPECT_THAT(run_kestrel({"quantize", f32, dir.file("x.gguf"), "--method", "gptq"}).err, HasSubstr("--calib"));
  EXPECT_THAT(run_kestrel({"quantize", f32, dir.file("x.gguf"), "--method", "best"}).err, HasSubstr("--method 'best'"));
  EXPECT_THAT(run_kestrel({"quantize", f32, dir.file("x.gguf"), "--target-size", "12Q", "--calib", calib}).err,
              HasSubstr("--target-size '12Q'"));
  // KV types: run reports bytes per token; a bad type is named.
  r = run_kestrel({"run", "-m", f32, "-p", "Once", "-n", "8", "--temp", "0", "--kv-type-k", "q8_0", "--kv-type-v", "q4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("KV q8_0/q4 ("));
  EXPECT_THAT(run_kestrel({"run", "-m", f32, "-p", "Once", "--kv-type", "q5"}).err, HasSubstr("KV type 'q5'"));
  r = run_kestrel({"info", f32, "--kv-memory", "1M"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  q4     8.00 bits/value"));  // heads of 8: groups of 8 with a scale and a minimum
  // precision-check prints every layer and the logits.
  r = run_kestrel({"precision-check", "-m", f32, "--kv-type", "q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| 4 | "));
  EXPECT_THAT(r.out, HasSubstr("logits: "));
  // MLA: the branches and residual compared; the per-head query and attention columns are not ("-").
  r = run_kestrel({"precision-check", "-m", test::shared("reference/llama.cpp/deepseek3-tiny.f32.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| 0 | - | - | "));
}

TEST(Cli, BenchSpecComparesSpeculativeWithPlainDecodingPerDraftLength) {
  test::TempDir dir;
  const std::string prompt = dir.file("p.txt");
  test::write_bytes(prompt, "Once upon a time, there was a little girl named Lily. She liked to play. "
                            "Once upon a time, there was a little girl named Lily. She");
  const std::string m = test::shared("models/stories260K.gguf");
  auto r = run_kestrel({"bench", "-m", m, "--spec", "ngram", "--spec-prompt", prompt, "-n", "32", "-r", "1", "--draft-max",
                    "2,4", "--spec-batch", "1,3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("| batch | draft max | plain t/s | speculative t/s | speed-up | accepted |"));
  for (const char* row : {"\n| 1 | 2 | ", "\n| 1 | 4 | ", "\n| 3 | 2 | ", "\n| 3 | 4 | "}) EXPECT_THAT(r.out, HasSubstr(row));
  // The model as its own draft, 4 requests at once through the serving engine: nearly all accepted.
  r = run_kestrel({"bench", "-m", m, "--spec", "draft", "--draft-model", m, "--spec-prompt", prompt, "-n", "16", "-r", "1",
               "--draft-max", "3", "--spec-batch", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch row;
  ASSERT_TRUE(std::regex_search(r.out, row, std::regex(R"(\n\| 4 \| 3 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x \| ([0-9.]+)%)")))
      << r.out;
  EXPECT_GT(std::stod(row[1]), 90.0);
  // run with the model as its own draft: (nearly) every drafted token accepted, reported in the summary.
  r = run_kestrel({"run", "-m", m, "-p", "Once upon a time", "-n", "20", "--temp", "0", "--spec", "draft", "--draft-model", m});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch rate;
  ASSERT_TRUE(std::regex_search(r.err, rate, std::regex(R"(speculation \(draft\): \d+ drafts, \d+ drafted, \d+ accepted \(([0-9.]+)%\))")))
      << r.err;
  EXPECT_GT(std::stod(rate[1]), 90.0);
  EXPECT_THAT(run_kestrel({"run", "-m", m, "-p", "Once", "--spec", "draft"}).err, HasSubstr("--draft-model"));
  r = run_kestrel({"run", "-m", m, "-p", "Once upon a time", "-n", "40", "--temp", "0", "--spec", "ngram", "--spec-governed"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("speculation (ngram):"));
  EXPECT_THAT(run_kestrel({"bench", "-m", m, "--spec", "ngram"}).err, HasSubstr("--spec-prompt"));
  EXPECT_THAT(run_kestrel({"bench", "-m", m, "--spec", "draft", "--spec-prompt", prompt}).err, HasSubstr("--draft-model"));
  EXPECT_THAT(run_kestrel({"run", "-m", m, "-p", "Once", "--spec", "mtp"}).err,
              HasSubstr("no multi-token-prediction layers"));
  // DeepSeek-V3-like model with an MTP block: drafts every step (a random block: few accepted).
  const std::string ds = dir.file("mtp.gguf");
  ASSERT_EQ(run_kestrel({"synth", "--arch", "deepseek2", "--preset", "tiny-v3", "--mtp", "1", "--type", "f32", "-o", ds}).exit_code, 0);
  r = run_kestrel({"run", "-m", ds, "--prompt-ids", "1 5 9 5 9 5", "-n", "24", "--temp", "0", "--spec", "mtp",
               "--draft-max", "3", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(std::regex_search(r.err, rate, std::regex(R"(speculation \(mtp\): (\d+) drafts)"))) << r.err;
  EXPECT_GT(std::stoi(rate[1]), 0);
  EXPECT_THAT(run_kestrel({"run", "-m", ds, "-p", "Once", "--spec", "mtp", "--draft-model", ds}).err,
              HasSubstr("deepseek2 models carry their multi-token-prediction block in the model file"));
  EXPECT_THAT(run_kestrel({"run", "-m", m, "-p", "Once", "--spec", "ngram", "--draft-model", m}).err,
              HasSubstr("--spec draft and --draft-model FILE go together"));
  // DeepSeek-V4 as llama.cpp's converter publishes it: the MTP block in a file of its own, named by
  // --draft-model with --spec mtp (the ids against llama.cpp's: SynthCells); a file of another model is refused.
  const std::string v4 = dir.file("v4.gguf"), v4_mtp = dir.file("mtp-v4.gguf"), other = dir.file("v4-wide.gguf");
  ASSERT_EQ(run_kestrel({"synth", "--arch", "deepseek4", "--type", "f32", "-o", v4, "--mtp-file", v4_mtp}).exit_code, 0);
  r = run_kestrel({"run", "-m", v4, "--prompt-ids", "1 5 9 5 9 5", "-n", "24", "--temp", "0", "--spec", "mtp",
                   "--draft-max", "3", "--ignore-eos"});
  EXPECT_THAT(r.err, HasSubstr("no multi-token-prediction layers (no `nextn` blocks; where the block ships in a "
                               "file of its own, name it: --spec mtp --draft-model")) << "the trunk file has none";
  r = run_kestrel({"run", "-m", v4, "--prompt-ids", "1 5 9 5 9 5", "-n", "24", "--temp", "0", "--spec", "mtp",
                   "--draft-model", v4_mtp, "--draft-max", "3", "--ignore-eos"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(std::regex_search(r.err, rate, std::regex(R"(speculation \(mtp\): (\d+) drafts)"))) << r.err;
  EXPECT_GT(std::stoi(rate[1]), 0);
  ASSERT_EQ(run_kestrel({"synth", "--arch", "deepseek4", "--type", "f32", "--dim", "128", "-o", other, "--mtp-file",
                         other + ".mtp"}).exit_code, 0);
  EXPECT_THAT(run_kestrel({"run", "-m", v4, "-p", "Once", "--spec", "mtp", "--draft-model", other + ".mtp"}).err,
              HasSubstr("embedding_length is 128 where the model's is 64 (not this model's MTP file)"));
  EXPECT_THAT(run_kestrel({"synth", "--arch", "deepseek2", "--preset", "tiny-v3", "--mtp", "1", "-o", other,
                           "--mtp-file", other + ".mtp"}).err,
              HasSubstr("deepseek2 models keep their MTP block in the model file"));
}

TEST_F(CliWithLimits, BenchMeasureProbesTheLimitsAgain) {
  // The cached limits say 1234.5 GB/s; --measure must replace them with this machine's.
  const std::string model = dir_.file("m.gguf");
  ASSERT_EQ(run_kestrel({"synth", "--preset", "tiny", "--type", "q8_0", "-o", model}).exit_code, 0);
  const auto r = run_kestrel({"bench", "-m", model, "-p", "0", "-n", "4", "-r", "3", "-t", "1", "--measure", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("bench: limits now: read"));
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_THAT(rows[0]["roofline_basis"].get<std::string>(), Not(HasSubstr("read bandwidth 1234.5 GB/s")));
  // Each repetition against the bandwidth probed just before it; the row's
  // fraction is the median of the repetitions' fractions.
  const auto ts = rows[0]["samples_ts"].get<std::vector<double>>();
  const auto roof = rows[0]["samples_roofline_ts"].get<std::vector<double>>();
  ASSERT_EQ(ts.size(), 3u);
  ASSERT_EQ(roof.size(), 3u);
  std::vector<double> fractions;
  for (size_t i = 0; i < 3; i++) {
    EXPECT_GT(roof[i], 0.0);
    fractions.push_back(ts[i] / roof[i]);
  }
  std::sort(fractions.begin(), fractions.end());
  EXPECT_NEAR(rows[0]["roofline_fraction"].get<double>(), fractions[1], 1e-9);
  EXPECT_THAT(rows[0]["roofline_basis"].get<std::string>(), HasSubstr("median of 3 probes"));
  const auto hw = nlohmann::json::parse(run_kestrel({"hw", "--json", "-t", "1"}).out);
  EXPECT_NE(hw["limits"]["read_bandwidth_gbs"].get<double>(), kCachedBandwidthGbs);  // and stored for later runs
}

TEST_F(CliWithLimits, TuneStoresTheWinnersThatHwThenReports) {
  EXPECT_THAT(run_kestrel({"hw", "--json"}).out, HasSubstr("derived from the"));
  const auto r = run_kestrel({"tune", "--tokens", "8", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("best: q8 token chunk"));
  // The tile crossover: measured where the tiles run, else said why not (and the default kept).
  const bool tiles = amx_state().usable && selected_isa() == IsaLevel::Amx;
  EXPECT_THAT(r.out, HasSubstr(tiles ? "tile crossover: batches of" : "tile crossover: nothing to measure"));
  const auto j = nlohmann::json::parse(run_kestrel({"hw", "--json"}).out);
  if (!tiles) {
    EXPECT_EQ(j["tuning"]["tile_min_tokens"].get<int64_t>(), Tuning{}.tile_min_tokens);
  }
  EXPECT_THAT(j["tuning"]["source"].get<std::string>(), HasSubstr(dir_.file("cache")));
  const int64_t chunk = j["tuning"]["q8_token_chunk"];
  EXPECT_TRUE(chunk == 16 || chunk == 32 || chunk == 64 || chunk == 128 || chunk == 256) << chunk;
  // A run with the tuned file gives the same tokens as the reference.
  const auto run = run_kestrel({"run", "-m", kStoriesBin, "--tokenizer", kTok, "--prompt-ids", "1 403 407 261 378",
                                "-n", "5", "--temp", "0", "--print-ids"});
  EXPECT_THAT(run.out, HasSubstr("ids: 432 383 286 261 376"));
  EXPECT_NE(run_kestrel({"tune", "--tokens", "1"}).exit_code, 0);
}

TEST(Cli, ProfileThenReport) {
  test::TempDir dir;
  const std::string trace = dir.file("p.json");
  auto r = run_kestrel({"run", "-m", kStoriesBin, "--tokenizer", kTok, "-p", "Once", "-n", "5", "--profile", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_kestrel({"profile-report", trace, "--svg", dir.file("h.svg")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("matmul ffn_gate+ffn_up+swiglu"));
  EXPECT_THAT(r.out, HasSubstr("GB/s"));
  EXPECT_THAT(test::read_text(dir.file("h.svg")), HasSubstr("<svg"));
  EXPECT_NE(run_kestrel({"profile-report", dir.file("missing.json")}).exit_code, 0);
}

struct BadCase {
  std::vector<std::string> args;
  std::string message;
};

TEST(Cli, BadInputGivesAClearErrorAndNonZeroExit) {
  test::TempDir dir;
  test::write_bytes(dir.file("junk.gguf"), "GGUF\x03\0\0\0garbage");
  test::write_bytes(dir.file("notgguf.bin"), "hello");
  const std::string gguf = test::shared("models/stories260K.gguf");
  const std::vector<BadCase> cases = {
      {{"run", "-m", "/nonexistent.gguf", "-p", "x"}, "/nonexistent.gguf: model file does not exist"},
      {{"run", "-m", dir.file("junk.gguf"), "-p", "x"}, "invalid GGUF"},
      {{"run", "-m", dir.file("notgguf.bin"), "-p", "x"}, "not a GGUF file"},
      {{"run", "-m", kStoriesBin, "--tokenizer", dir.file("notgguf.bin"), "-p", "x"}, "llama2.c tokenizer ends inside"},
      {{"run", "-m", dir.file("notgguf.bin"), "--tokenizer", kTok, "-p", "x"}, "not a llama2.c checkpoint"},
      {{"run", "-m", gguf}, "no prompt"},
      {{"run", "-m", gguf, "-p", "", "--no-bos"}, "prompt is empty"},
      {{"run", "-m", gguf, "-c", "8", "-p", "Once upon a time there was a girl named Lily who liked cats"},
       "context holds 8"},
      {{"run", "-m", gguf, "-p", "x", "--temp", "-1"}, "temperature = -1 is out of range"},
      {{"run", "-m", gguf, "-p", "x", "--top-p", "1.5"}, "top_p = 1.5 is out of range"},
      {{"run", "-m", gguf, "-p", "x", "--min-p", "-0.1"}, "min_p"},
      {{"run", "-m", gguf, "-p", "x", "--repeat-penalty", "0"}, "repeat_penalty"},
      {{"run", "-m", gguf, "-p", "x", "-n", "-5"}, "-n -5 must not be negative"},
      {{"run", "-m", gguf, "-p", "x", "-t", "-3"}, "thread count -3 is out of range"},
      {{"run", "-m", gguf, "--prompt-ids", "1 two 3"}, "'two' is not a token id"},
      {{"run", "-m", gguf, "--prompt-ids", "1 99999"}, "token id 99999 is outside the vocabulary"},
      {{"run", "-m", gguf, "-p", "x", "--temp", "abc"}, "temp"},
      {{"info", "/nonexistent.gguf"}, "/nonexistent.gguf: cannot open"},
      {{"tokenize", "-m", dir.file("junk.gguf"), "x"}, "invalid GGUF"},
      {{"convert", "--llama2c", kStoriesBin, "--tokenizer", kTok, "--type", "q9", "-o", dir.file("x.gguf")},
       "--type 'q9'"},
      {{"synth", "--preset", "huge", "-o", dir.file("x.gguf")}, "--preset 'huge' is not one of tiny, 1b, 7b"},
      {{"synth", "--arch", "gpt5", "-o", dir.file("x.gguf")}, "--arch 'gpt5' is not supported"},
      {{"synth", "--heads", "5", "-o", dir.file("x.gguf")}, "--dim 64 is not divisible by --heads 5"},
      {{"serve", "-m", "/nonexistent.gguf"}, "/nonexistent.gguf: model file does not exist"},
      {{"serve", "-m", gguf, "--port", "70000"}, "--port 70000 is out of range"},
      {{"serve", "-m", gguf, "--scheduling-policy", "lottery"}, "--scheduling-policy 'lottery'"},
      {{"serve", "-m", gguf, "--chat-template", "alpaca"}, "--chat-template 'alpaca'"},
      {{"serve", "-m", gguf, "--max-batch-size", "0"}, "--max-batch-size 0 is out of range"},
      {{"serve", "-m", gguf, "--spec", "mtp", "--port", "0"}, "no multi-token-prediction layers"},
      {{"serve", "-m", gguf, "--spec", "draft", "--port", "0"}, "--spec draft and --draft-model FILE go together"},
      {{"serve", "-m", gguf, "--spec", "medusa"}, "--spec: medusa not in {none,ngram,draft,mtp}"},
      {{"serve", "-m", gguf, "--host", "203.0.113.7", "--port", "18099"}, "cannot listen on 203.0.113.7:18099"},
      {{"frobnicate"}, "frobnicate"},
  };
  for (const auto& c : cases) {
    const auto r = run_kestrel(c.args);
    std::string shown;
    for (const auto& a : c.args) shown += a + " ";
    EXPECT_NE(r.exit_code, 0) << shown;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << shown;
    EXPECT_THAT(r.err, Not(HasSubstr("terminate called"))) << shown;
    EXPECT_LT(r.exit_code, 128) << shown << ": killed by a signal";
  }
}

}  // namespace
}  // namespace kestrel
