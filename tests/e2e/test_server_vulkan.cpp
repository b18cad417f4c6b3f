// `kestrel run` and `kestrel serve` on the Vulkan device (lavapipe in CI): the same answers as the CPU
// backend's, streamed chat, 8 concurrent requests, a cancelled stream, and the errors for a bad --device.
#include <gmock/gmock.h>
#include <httplib.h>
#include <unistd.h>

#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "cli_process.h"
#include "prometheus_text.h"
#include "raw_http.h"
#include "serve_process.h"
#include "sse_text.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
using test::kStories;
using ::testing::HasSubstr;
using ::testing::Not;

// The answer's text: a streamed one's deltas joined, or the whole one's.
std::string answer(httplib::Client& c, const std::string& path, json body, bool stream) {
  body["stream"] = stream;
  auto r = c.Post(path, body.dump(), "application/json");
  if (!r || r->status != 200) {
    ADD_FAILURE() << path << ": " << (r ? r->body : "no response");
    return {};
  }
  if (!stream) {
    const json j = json::parse(r->body)["choices"][0];
    return j.contains("message") ? j["message"]["content"].get<std::string>() : j["text"].get<std::string>();
  }
  bool done = false;
  const std::string text = test::sse_text(r->body, &done);
  EXPECT_TRUE(done) << path << " stream did not end with [DONE]";
  return text;
}

// The command with more flags after its own (--device vulkan, ...).
test::CliResult run_with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return test::run_kestrel(args);
}

// The command on the CPU backend and on Vulkan device 0, both succeeding (callers: ASSERT_NO_FATAL_FAILURE).
struct CpuAndDevice {
  test::CliResult cpu, gpu;
};
void on_cpu_and_device(const std::vector<std::string>& args, CpuAndDevice* r) {
  r->cpu = test::run_kestrel(args);
  r->gpu = run_with(args, {"--device", "vulkan"});
  ASSERT_EQ(r->cpu.exit_code, 0) << r->cpu.err;
  ASSERT_EQ(r->gpu.exit_code, 0) << r->gpu.err;
}

TEST(VulkanServe, AnswersAsTheCpuBackendDoesConcurrentlyAndStreamedAndCancels) {
  const std::vector<json> requests = {
      {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}},
      {{"prompt", "Lily and Tom"}, {"max_tokens", 40}, {"temperature", 0}},
      {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 24}, {"temperature", 0}},
      {{"prompt", "The cat sat"}, {"max_tokens", 40}, {"temperature", 0}}};
  auto path = [](const json& r) { return r.contains("messages") ? "/v1/chat/completions" : "/v1/completions"; };
  std::vector<std::string> want;
  {
    test::ServerProcess cpu({"-m", kStories, "-c", "256"});
    auto c = cpu.client();
    for (const auto& r : requests) want.push_back(answer(c, path(r), r, false));
  }
  test::ServerProcess s({"-m", kStories, "-c", "1024", "--max-batch-size", "8", "--device", "vulkan"});
  EXPECT_THAT(s.log(), HasSubstr("Vulkan device 0"));
  // 8 clients at once, half streaming (the chat among them): each gets the CPU backend's text.
  std::vector<std::string> got(8);
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; i++)
    clients.emplace_back([&, i] {
      auto cl = s.client();
      got[i] = answer(cl, path(requests[i % 4]), requests[i % 4], i % 2 == 1 || i % 4 == 2);
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 8; i++) EXPECT_EQ(got[i], want[i % 4]) << "client " << i << " on " << s.log();

  // A stream dropped after its first bytes is cancelled, and the server goes on serving.
  const int fd = test::connect_local(s.port());
  ASSERT_GE(fd, 0);
  const std::string body =
      json{{"prompt", "Once"}, {"max_tokens", 900}, {"temperature", 0.8}, {"stream", true}, {"ignore_eos", true}}
          .dump();
  ASSERT_TRUE(test::send_all(fd,
                             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Content-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body));
  char buf[256];
  ASSERT_GT(read(fd, buf, sizeof buf), 0);
  close(fd);
  auto c = s.client();
  bool cancelled = false;
  for (int i = 0; i < 100 && !cancelled; i++) {
    cancelled =
        test::parse_prometheus(c.Get("/metrics")->body).get("kestrel_requests_total{outcome=\"cancelled\"}") == 1;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(cancelled) << c.Get("/metrics")->body;
  EXPECT_EQ(answer(c, path(requests[0]), requests[0], false), want[0]);
}

// What sits above the backend runs the same on the device: speculative decoding verified in the batch (a draft
// model: several rows per request per step), chunked prefill (8 prompt tokens per request per step), prefix
// caching (a prompt seen before reuses its cached blocks) and priorities, three clients at once: each answer is
// the CPU server's (which runs none of them).
TEST(VulkanServe, SpeculationChunkedPrefillPrefixCacheAndPrioritiesAnswerAsTheCpu) {
  const std::string prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside. One day, Lily";
  const std::vector<json> requests = {
      {{"prompt", prompt}, {"max_tokens", 40}, {"temperature", 0}},
      {{"prompt", prompt + " saw a"}, {"max_tokens", 30}, {"temperature", 0}, {"priority", 5}},
      {{"prompt", "The cat sat"}, {"max_tokens", 30}, {"temperature", 0}, {"priority", -1}}};
  std::vector<std::string> want;
  {
    test::ServerProcess cpu({"-m", kStories, "-c", "256"});
    auto c = cpu.client();
    for (const auto& r : requests) want.push_back(answer(c, "/v1/completions", r, false));
  }
  test::ServerProcess s({"-m", kStories, "-c", "512", "--device", "vulkan", "--spec", "draft", "--draft-model",
                         kStories, "--prefill-chunk", "8"});
  std::vector<std::string> got(requests.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < requests.size(); i++)
    clients.emplace_back([&, i] {
      auto cl = s.client();
      got[i] = answer(cl, "/v1/completions", requests[i], i == 1);
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < requests.size(); i++) EXPECT_EQ(got[i], want[i]) << "request " << i << " on " << s.log();
  auto c = s.client();
  const auto again = c.Post("/v1/completions", requests[0].dump(), "application/json");
  ASSERT_TRUE(again && again->status == 200);
  const json j = json::parse(again->body);
  EXPECT_EQ(j["choices"][0]["text"], want[0]);
  EXPECT_GE(j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 16) << again->body;
  const auto m = test::parse_prometheus(c.Get("/metrics")->body);
  EXPECT_GT(m.get("kestrel_spec_accepted_tokens_total"), 40) << "the draft model's tokens were verified on the device";
  EXPECT_GT(m.get("kestrel_prefix_cache_hits_total"), 0);
}

// Sampling from the device's top-k draws what the host draws from whole rows: on one Vulkan server, a sampled
// request (top-k 40, top-p, a seed) answers as the same request asking for logprobs, whose rows come down whole
// (the logprobs read them) and which the host samples from the full row.
TEST(VulkanServe, SamplingFromTheDevicesTopKDrawsWhatWholeRowsDraw) {
  test::ServerProcess s({"-m", kStories, "-c", "512", "--device", "vulkan"});
  auto c = s.client();
  for (const int seed : {7, 8, 9}) {
    json r = {{"prompt", "Once upon a time"},
              {"max_tokens", 40},
              {"temperature", 0.9},
              {"top_k", 40},
              {"top_p", 0.95},
              {"seed", seed}};
    const std::string top_k = answer(c, "/v1/completions", r, false);
    r["logprobs"] = 1;
    const std::string whole = answer(c, "/v1/completions", r, false);
    EXPECT_EQ(top_k, whole) << "seed " << seed;
    EXPECT_FALSE(top_k.empty());
  }
}

// --gpu-memory bounds everything the backend allocates. A request that needs more device memory than is left
// (every row of a 300-token prompt's logits, echoed with logprobs, staged for the host) fails alone with an error
// naming the limit; the server goes on answering the others as a server without the limit does.
TEST(VulkanServe, ARequestPastTheDeviceMemoryLimitFailsAloneAndTheServerGoesOn) {
  const std::string model = test::shared("reference/llama.cpp/llama-tiny.f32.gguf");
  auto with = [&](const std::string& limit) {
    return std::vector<std::string>{"-m", model, "-c", "1024", "--device", "vulkan", "--gpu-memory", limit};
  };
  const json short_req = {{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}};
  double in_use = 0;
  std::string want;
  {
    test::ServerProcess s(with("1G"));
    const std::string log = s.log();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("([0-9.]+) MiB of device memory in use of --gpu-memory"))) << log;
    in_use = std::stod(m[1]);
    auto c = s.client();
    want = answer(c, "/v1/completions", short_req, false);
    ASSERT_FALSE(want.empty());
  }
  // Room for a short request's staging and scratch (12 MiB), not for 256 rows of 32000 logits (31 MiB).
  std::ostringstream limit;
  limit << std::fixed << std::setprecision(1) << in_use + 12 << "M";
  test::ServerProcess s(with(limit.str()));
  auto c = s.client();
  EXPECT_EQ(answer(c, "/v1/completions", short_req, false), want);
  std::string prompt;
  for (int i = 0; i < 150; i++) prompt += "hello world ";
  const json echo = {{"prompt", prompt}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 1}, {"temperature", 0}};
  const auto r = c.Post("/v1/completions", echo.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500) << r->body;
  EXPECT_THAT(r->body, HasSubstr("out of Vulkan device memory: --gpu-memory " +
                                 limit.str().substr(0, limit.str().size() - 1) + " MiB is used up"));
  EXPECT_THAT(r->body, HasSubstr("staging memory"));
  EXPECT_EQ(answer(c, "/v1/completions", short_req, true), want);
  EXPECT_EQ(answer(c, "/v1/completions", short_req, false), want);
}

TEST(VulkanRun, GreedyTextEqualsTheCpuBackendsAndBadDevicesAreNamed) {
  const std::vector<std::string> args = {"run", "-m", kStories, "-p", "Once upon a time", "-n", "30", "--temp", "0"};
  const test::CliResult cpu = test::run_kestrel(args);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  auto on = [&](const std::string& device) { return run_with(args, {"--device", device}); };
  const test::CliResult gpu = on("vulkan");
  ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
  EXPECT_EQ(gpu.out, cpu.out);
  EXPECT_THAT(gpu.err, HasSubstr("Vulkan device 0"));
  // Greedy: each step's argmax taken on the device, only the ids downloaded (30 rows: the prompt's last, then
  // 29 decode steps). A penalty rewrites the logits first: those rows come down and the host samples.
  EXPECT_THAT(gpu.err, HasSubstr("greedy ids of 30 logits rows taken on the device"));
  std::vector<std::string> penalised = args;
  penalised.insert(penalised.end(), {"--repeat-penalty", "1.3"});
  CpuAndDevice pen;
  ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(penalised, &pen));
  EXPECT_EQ(pen.gpu.out, pen.cpu.out);
  EXPECT_NE(pen.gpu.out, cpu.out) << "the penalty changed nothing: a weak check";
  EXPECT_THAT(pen.gpu.err, Not(HasSubstr("greedy ids of")));
  // Sampled: each step's top-k taken on the device, the host drawing from those 40 candidates.
  std::vector<std::string> sampled = args;
  sampled.back() = "0.8";  // --temp
  sampled.insert(sampled.end(), {"--seed", "7", "--top-k", "40"});
  const test::CliResult gpu_sampled = run_with(sampled, {"--device", "vulkan"});
  ASSERT_EQ(gpu_sampled.exit_code, 0) << gpu_sampled.err;
  EXPECT_THAT(gpu_sampled.err, HasSubstr("the top-k of 30 logits rows taken on the device"));
  // The KV cache's quantized rows written and read on the device: the CPU backend's text.
  for (const std::string kv : {"fp8", "q4"}) {
    std::vector<std::string> quantized = args;
    quantized.insert(quantized.end(), {"--kv-type", kv});
    CpuAndDevice q;
    ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(quantized, &q));
    EXPECT_EQ(q.gpu.out, q.cpu.out) << kv;
  }
  const test::CliResult bad = on("cuda");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("--device cuda: expected cpu, vulkan or vulkan:N"));
  const test::CliResult missing = on("vulkan:9");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("--device vulkan:9: there are"));
}

// Perplexity over every position's logits (the output head over whole chunks, into host memory) on the device:
// the CPU's figure.
TEST(VulkanRun, PerplexityEqualsTheCpuBackends) {
  const std::vector<std::string> args = {"perplexity", "-m", kStories, "-f", test::shared("eval/stories.txt"),
                                         "-c",         "128"};
  auto ppl = [](const test::CliResult& r) {  // "Final estimate: PPL = 5.1171 +/- ..."
    const std::string s = r.out + r.err;
    const size_t at = s.find("PPL = ");
    return at == std::string::npos ? -1.0 : std::stod(s.substr(at + 6));
  };
  CpuAndDevice r;
  ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(args, &r));
  const test::CliResult &cpu = r.cpu, &gpu = r.gpu;
  ASSERT_GT(ppl(cpu), 1.0) << cpu.out << cpu.err;
  EXPECT_NEAR(ppl(gpu), ppl(cpu), 1e-3 * ppl(cpu));
}

// The device's arithmetic is as precise as the CPU backend's against float64 (precision-check's independent
// float64 decoder): each layer's relative error on the residual stream and the logits' stay within 1.25x the
// CPU's (+1e-4), on an F16 dense model, a Q4_K_M one and an F16 MoE one.
TEST(VulkanRun, PrecisionAgainstFloat64MatchesTheCpuBackends) {
  // The figures of a precision-check table: each layer's last column (the residual stream), then the logits'.
  auto errors = [](const std::string& out) {
    std::vector<double> e;
    std::istringstream in(out);
    std::smatch m;
    for (std::string line; std::getline(in, line);) {
      if (std::regex_match(line, m, std::regex(R"(\| \d+ \|.* ([0-9.e+-]+) \|)"))) e.push_back(std::stod(m[1]));
      if (std::regex_match(line, m, std::regex(R"(logits: ([0-9.e+-]+))"))) e.push_back(std::stod(m[1]));
    }
    return e;
  };
  for (const std::string name : {"llama32.F16", "llama32.Q4_K_M", "qwen3moe.F16"}) {
    const std::vector<std::string> args = {"precision-check", "-m",
                                           test::shared("reference/compat/models/" + name + ".gguf"), "-c", "512"};
    CpuAndDevice r;
    ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(args, &r));
    const test::CliResult &cpu = r.cpu, &gpu = r.gpu;
    EXPECT_THAT(gpu.out, HasSubstr("Vulkan device 0"));
    const auto want = errors(cpu.out), got = errors(gpu.out);
    ASSERT_GE(want.size(), 3u) << cpu.out;
    ASSERT_EQ(got.size(), want.size()) << gpu.out;
    for (size_t i = 0; i < got.size(); i++)
      EXPECT_LE(got[i], 1.25 * want[i] + 1e-4)
          << name << (i + 1 == got.size() ? " logits" : " layer " + std::to_string(i)) << "\n"
          << gpu.out << "\n"
          << cpu.out;
  }
}

// A model larger than the device memory it may use: the load fails naming the weight that did not fit; with
// --gpu-layers the first layers run on the device, the rest on the CPU, and the text is the CPU backend's
// (whose ids on this file are llama.cpp's: compat_reference_set). `info` reports the split.
TEST(VulkanRun, GpuLayersSplitAModelTooBigForTheDeviceAndGiveTheSameText) {
  const std::string model = test::shared("reference/compat/models/llama32.F16.gguf");
  const std::vector<std::string> args = {"run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp", "0"};
  auto with = [&](const std::vector<std::string>& more) { return run_with(args, more); };
  const test::CliResult cpu = with({});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  const test::CliResult all = with({"--device", "vulkan", "--gpu-memory", "2M"});
  EXPECT_NE(all.exit_code, 0);
  EXPECT_THAT(all.err, HasSubstr("out of Vulkan device memory: --gpu-memory 2.0 MiB is used up ("));
  EXPECT_THAT(all.err, HasSubstr("): weight blk."));
  EXPECT_THAT(all.err, HasSubstr("fewer --gpu-layers"));
  // --gpu-memory counts the KV cache and activations too (the whole model needs 13.3 MiB at -c 512, its first
  // layer 10.2 MiB).
  for (const std::string layers : {"0", "1"}) {
    const test::CliResult split =
        with({"--device", "vulkan", "-c", "512", "--gpu-memory", "12M", "--gpu-layers", layers});
    ASSERT_EQ(split.exit_code, 0) << split.err;
    EXPECT_EQ(split.out, cpu.out) << "--gpu-layers " << layers;
  }
  // At the model's own context (131072) a layer's KV pool is 32 MiB: the load names it.
  const test::CliResult kv = with({"--device", "vulkan", "--gpu-memory", "12M", "--gpu-layers", "1"});
  EXPECT_NE(kv.exit_code, 0);
  EXPECT_THAT(kv.err, HasSubstr("KV cache keys of layer 0 (a smaller context, -c, or fewer --gpu-layers need less)"));
  const test::CliResult info = test::run_kestrel({"info", model, "--device", "vulkan", "--gpu-layers", "1"});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out,
              HasSubstr("layers 0-0 on the device; layers 1-2, the embedding and the output head on the CPU"));
  EXPECT_THAT(info.out, HasSubstr("weights on the device: 1.1 MiB of 3.7 MiB"));
  const test::CliResult cpu_only = with({"--gpu-layers", "1"});
  EXPECT_NE(cpu_only.exit_code, 0);
  EXPECT_THAT(cpu_only.err, HasSubstr("need --device vulkan"));
}

// DeepSeek's MLA on the device (the absorbed form: per-head products, attention over the latent rows whose
// values are their first kv_lora floats) and decompressed: the CPU backend's text.
// The experts that are not plain SwiGLU run on the device: gpt-oss's biased, clamped SwiGLU (MXFP4 experts,
// softmax over the chosen), Gemma 4's GeGLU experts, DeepSeek-V4's clamped SwiGLU with hash-routed layers
// (synth's files, whose ids llama.cpp gives: synth_cells), its hyper-connections' fold and spread on the device.
// Greedy ids equal the CPU backend's.
TEST(VulkanRun, BiasedClampedAndGegluExpertFamiliesGiveTheCpuIds) {
  test::TempDir dir;
  for (const auto& [arch, preset] : std::vector<std::pair<std::string, std::string>>{
           {"gpt-oss", "tiny"}, {"gemma4", "tiny-moe"}, {"deepseek4", "tiny"}}) {
    const std::string model = dir.file(arch + ".gguf");
    ASSERT_EQ(test::run_kestrel({"synth", "--arch", arch, "--preset", preset, "-o", model}).exit_code, 0) << arch;
    const std::vector<std::string> args = {"run", "-m",     model, "-p",          "Hello there", "-n",
                                           "16",  "--temp", "0",   "--print-ids", "-c",          "256"};
    CpuAndDevice r;
    ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(args, &r));
    const test::CliResult &cpu = r.cpu, &gpu = r.gpu;
    EXPECT_EQ(gpu.out, cpu.out) << arch;
    EXPECT_THAT(gpu.err, HasSubstr("token-layers MoE-routed on the device")) << arch;
    // DeepSeek-V4's hyper-connection fold and spread (ops/hyper_connection.h) by their Vulkan kernels.
    if (arch == "deepseek4") {
      EXPECT_THAT(gpu.err, HasSubstr("named operators run by their Vulkan kernels"));
    }
  }
}

// The families whose sigmoid gate (ops/sigmoid_gate.h) runs by its Vulkan kernel: Qwen3.5's gated attention
// (beside its Gated DeltaNet blocks, whose operator has no Vulkan kernel and runs on the CPU) and Qwen2-MoE's
// shared-expert gate give the CPU's ids with the gate on the device.
TEST(VulkanRun, SigmoidGatedFamiliesGiveTheCpuIdsWithTheGateOnTheDevice) {
  test::TempDir dir;
  for (const std::string arch : {"qwen35", "qwen2moe"}) {
    const std::string model = dir.file(arch + ".gguf");
    ASSERT_EQ(test::run_kestrel({"synth", "--arch", arch, "--preset", "tiny", "-o", model}).exit_code, 0) << arch;
    const std::vector<std::string> args = {"run", "-m",     model, "-p",          "Hello there", "-n",
                                           "16",  "--temp", "0",   "--print-ids", "-c",          "256"};
    CpuAndDevice r;
    ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(args, &r));
    EXPECT_EQ(r.gpu.out, r.cpu.out) << arch;
    EXPECT_THAT(r.gpu.err, HasSubstr("named operators run by their Vulkan kernels")) << arch;
  }
}

TEST(VulkanRun, DeepseekMlaGivesTheCpuText) {
  test::TempDir dir;
  const std::string model = dir.file("ds.gguf");
  ASSERT_EQ(
      test::run_kestrel({"synth", "--arch", "deepseek2", "--preset", "tiny", "--type", "f16", "-o", model}).exit_code,
      0);
  for (const std::string mla : {"absorbed", "decompressed"}) {
    const std::vector<std::string> args = {"run", "-m",  model,   "-p", "Once upon a time", "-n", "20", "--temp", "0",
                                           "-c",  "512", "--mla", mla};
    CpuAndDevice r;
    ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(args, &r));
    const test::CliResult &cpu = r.cpu, &gpu = r.gpu;
    EXPECT_EQ(gpu.out, cpu.out) << mla;
  }
  // DeepSeek-V3.2's sparse attention (the indexer on the CPU; the picked latent rows gathered and attended on
  // the device): a prompt longer than the tiny preset's top-k of 4.
  const std::string sparse = dir.file("ds32.gguf");
  ASSERT_EQ(test::run_kestrel({"synth", "--arch", "deepseek32", "--preset", "tiny", "-o", sparse}).exit_code, 0);
  const std::vector<std::string> args = {"run", "-m", sparse,   "-p", "Hello there, how are you today my friend",
                                         "-n",  "16", "--temp", "0",  "--print-ids",
                                         "-c",  "256"};
  CpuAndDevice r;
  ASSERT_NO_FATAL_FAILURE(on_cpu_and_device(args, &r));
  const test::CliResult &cpu = r.cpu, &gpu = r.gpu;
  EXPECT_EQ(gpu.out, cpu.out) << "deepseek32";
}

// A MoE model's experts on the device (each expert's tokens as one matrix) and under --cpu-moe on the CPU:
// both give the CPU backend's text.
TEST(VulkanRun, MoeExpertsOnTheDeviceOrTheCpuGiveTheSameText) {
  const std::string model = test::shared("reference/compat/models/qwen3moe.F16.gguf");
  const std::vector<std::string> args = {"run", "-m", model, "-p", "Once upon a time", "-n", "24", "--temp", "0"};
  const test::CliResult cpu = test::run_kestrel(args);
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  for (const std::vector<std::string>& more :
       {std::vector<std::string>{"--device", "vulkan"}, std::vector<std::string>{"--device", "vulkan", "--cpu-moe"}}) {
    const test::CliResult gpu = run_with(args, more);
    ASSERT_EQ(gpu.exit_code, 0) << gpu.err;
    EXPECT_EQ(gpu.out, cpu.out) << more.back();
    EXPECT_THAT(gpu.err, HasSubstr("token-layers MoE-routed on the device")) << more.back();
  }
}

}  // namespace
}  // namespace kestrel
