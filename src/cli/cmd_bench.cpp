// kestrel bench -m MODEL -p 512 -n 128 -t 2 -r 5: prefill and decode speed,
// each against the machine's measured roofline (like llama-bench).
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/median.h"
#include "hw/cpu_features.h"
#include "cli/mmproj_flags.h"
#include "mmproj/media_prompt.h"
#include "runtime/generator.h"
#include "cli/parallel_flags.h"
#include "core/error.h"
#include "hw/limits.h"
#include "measure/bench.h"
#include "measure/spec_bench.h"
#include "measure/batch_spec_bench.h"

namespace kestrel::cli {
namespace {

struct BenchFlags {
  std::vector<std::string> models;
  std::vector<int64_t> n_prompt{512}, n_gen{128}, batch{512}, depth{0};
  std::vector<int> threads{0};
  int reps = 5;
  std::string output = "md", profile;
  bool json = false, csv = false, use_mmap = false, log_fusion = false, no_repack = false, measure = false;
  MlaAttention mla = MlaAttention::Auto;
  LoadOptions placement;  // --device, --gpu-layers, --cpu-moe, --gpu-memory
  KvType kv_type_k = KvType::F32, kv_type_v = KvType::F32;
  std::string spec = "none", spec_prompt, draft_model;
  std::vector<int> draft_max = {1, 2, 4, 8};
  std::vector<int> spec_batch = {1};
  bool spec_governed = false;
  ParallelFlags parallel;
  std::string mmproj, image, image_prompt = "Describe this image.";
  ImageTokenLimits image_tokens;
};

// bench --mmproj --image: the image's encode time and the time to the first token of a prompt holding it (the
// encode, the prefill of the image's rows and the text, one token), medians of -r runs after one warm-up.
int run_media(BenchFlags& f) {
  if (f.models.size() != 1 || f.image.empty()) throw Error("--mmproj measures one model (-m) and one --image");
  const int n_threads = f.threads.empty() || f.threads[0] <= 0 ? default_thread_count() : f.threads[0];
  LoadOptions o;
  o.model_path = f.models[0];
  o.n_threads = n_threads;
  o.max_batch_tokens = f.batch.empty() ? 512 : f.batch[0];
  o.n_ctx = 2048;
  o.use_mmap = f.use_mmap;
  o.profile = !f.profile.empty();
  LoadedModel e = LoadedModel::load(o);
  auto mm = load_mmproj(f.mmproj, f.image_tokens, e);
  const MediaInput in = media_input_from_file(f.image, mm->audio() ? mm->audio()->sample_rate() : 16000);
  const MediaEncoders encoders = encoders_of(*mm);
  if (in.audio ? !encoders.audio : !encoders.vision)
    throw Error(fmt::format("{}: this mmproj has no {} encoder", f.image, in.audio ? "audio" : "vision"));
  std::vector<double> encode_ms, ttft_ms;
  int64_t tokens = 0, prompt = 0;
  for (int r = 0; r <= f.reps; r++) {  // (run 0: the warm-up)
    auto t0 = std::chrono::steady_clock::now();
    const MediaEmbeddings rows = in.audio ? encoders.audio->encode(in.samples) : encoders.vision->encode(in.image);
    const double enc = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tokens = rows.n_tokens;
    t0 = std::chrono::steady_clock::now();
    const MediaPrompt p = build_media_prompt(*e.tokenizer, encoders, kMediaMarker + f.image_prompt, {in});
    GenerationParams g;
    g.max_tokens = 1;
    g.sampling.temperature = 0;
    g.media = p.media;
    generate(e, p.tokens, g);
    const double ttft = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    prompt = static_cast<int64_t>(p.tokens.size());
    if (r == 0) continue;
    encode_ms.push_back(enc);
    ttft_ms.push_back(ttft);
  }
  fmt::print("| model | mmproj | threads | image tokens | prompt tokens | encode ms | TTFT ms |\n|---|---|---|---|---|---|---|\n");
  fmt::print("| {} | {} | {} | {} | {} | {:.1f} | {:.1f} |\n", f.models[0], f.mmproj, n_threads, tokens, prompt,
             median(encode_ms), median(ttft_ms));
  fmt::print(stderr, "bench: {} ({}), {} runs; {}\n", in.audio ? encoders.audio->describe() : encoders.vision->describe(),
             e.backend->describe(), f.reps,
             cpu_features().brand);
  if (e.profiler) {
    e.profiler->write_chrome_trace(f.profile);
    fmt::print(stderr, "bench: profile -> {}\n", f.profile);
  }
  return 0;
}

// bench --spec: plain vs speculative greedy decoding of one prompt, per
// draft length; at batch sizes above 1, that many requests at once through
// the serving engine, each continuing the prompt from a different offset.
int run_spec(BenchFlags& f) {
  if (f.spec_prompt.empty()) throw Error("--spec needs --spec-prompt FILE (the text to continue)");
  check_draft_model_flags(f.spec, f.draft_model);
  if (f.models.size() != 1) throw Error("--spec measures one model (-m) at a time");
  std::ifstream in(f.spec_prompt, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read the prompt", f.spec_prompt));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t n_gen = f.n_gen.empty() || f.n_gen[0] <= 0 ? 128 : f.n_gen[0];
  const int max_batch = *std::max_element(f.spec_batch.begin(), f.spec_batch.end());
  LoadOptions o;
  o.model_path = f.models[0];
  o.n_threads = f.threads.empty() ? 0 : f.threads[0];
  set_placement(o, f.placement);
  o.kv_type_k = f.kv_type_k;
  o.kv_type_v = f.kv_type_v;
  o.n_ctx = static_cast<int64_t>(text.size()) + n_gen + 2;  // a token covers at least one byte (+ BOS)
  o.n_seq_max = max_batch;
  o.load_mtp = f.spec == "mtp";
  o.mtp_model = mtp_model_of(f.spec, f.draft_model);
  LoadedModel e = LoadedModel::load(o);
  const auto prompt = e.tokenizer->encode(text, true, false);
  if (static_cast<int64_t>(prompt.size()) + n_gen > e.n_ctx)
    throw Error(fmt::format("the prompt ({} tokens) plus -n {} exceed the context {}", prompt.size(), n_gen, e.n_ctx));
  LoadOptions d = o;
  d.model_path = f.draft_model;
  d.load_mtp = false;
  d.mtp_model.clear();
  const SpecSource source(f.spec, e, d);
  fmt::print("{} ({} tokens of prompt, {} generated, greedy, median of {}), speculation: {}{}\n", f.models[0],
             prompt.size(), n_gen, f.reps, f.spec, f.spec == "draft" ? " with " + f.draft_model : "");
  fmt::print("batch > 1: that many requests at once through the serving engine, t/s summed over them\n\n");
  fmt::print("| batch | draft max | plain t/s | speculative t/s | speed-up | accepted | tokens per draft step |\n");
  fmt::print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const int batch : f.spec_batch) {
    std::vector<SpecBenchRow> rows;
    if (batch == 1) {
      rows = run_spec_bench(e, prompt, n_gen, f.draft_max, f.reps, source, f.spec_governed);
    } else {
      std::vector<std::vector<int32_t>> prompts;
      for (int i = 0; i < batch; i++)
        prompts.push_back(e.tokenizer->encode(text.substr(text.size() * i / (2 * static_cast<size_t>(batch))), true, false));
      rows = run_batch_spec_bench(e, prompts, n_gen, f.draft_max, f.reps, {source.proposer(), f.spec_governed});
    }
    for (const auto& r : rows)
      fmt::print("| {} | {} | {:.1f} | {:.1f} | {:.2f}x | {:.1f}% | {:.2f} |\n", batch, r.draft_max, r.plain_ts,
                 r.spec_ts, r.plain_ts > 0 ? r.spec_ts / r.plain_ts : 0.0, 100 * r.acceptance, r.tokens_per_step);
    std::fflush(stdout);
  }
  return 0;
}

std::string mib(int64_t b) { return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20)); }

nlohmann::json to_json(const BenchResult& r) {
  return {{"model_filename", r.model_filename},
          {"model_type", r.model_type},
          {"model_size", r.model_size},
          {"model_n_params", r.model_n_params},
          {"n_threads", r.n_threads},
          {"n_batch", r.n_batch},
          {"n_prompt", r.test.n_prompt},
          {"n_gen", r.test.n_gen},
          {"n_depth", r.test.depth},
          {"test", r.test.name},
          {"avg_ts", r.avg_ts},
          {"stddev_ts", r.stddev_ts},
          {"samples_ts", r.samples_ts},
          {"samples_roofline_ts", r.samples_roofline_ts},
          {"backends", r.backend},
          {"kernel_isa", r.kernel_isa},
          {"roofline_ts", r.roofline_ts},
          {"roofline_fraction", r.roofline_fraction},
          {"roofline_basis", r.roofline_basis},
          {"weight_bytes_per_token", r.weight_bytes_per_token},
          {"flops_per_token", r.flops_per_token},
          {"kv_type", r.kv_type},
          {"kv_bytes_per_token", r.kv_bytes_per_token},
          {"warning", r.warning}};
}

void print_results(const std::vector<BenchResult>& rs, const std::string& format) {
  for (const auto& r : rs)
    if (!r.warning.empty()) fmt::print(stderr, "bench: warning: {}\n", r.warning);
  if (format == "json") {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : rs) arr.push_back(to_json(r));
    fmt::print("{}\n", arr.dump(2));
  } else if (format == "jsonl") {
    for (const auto& r : rs) fmt::print("{}\n", to_json(r).dump());
  } else if (format == "csv") {
    fmt::print("model_filename,model_type,model_size,model_n_params,n_threads,n_batch,n_prompt,n_gen,avg_ts,stddev_ts,"
               "roofline_ts,roofline_fraction,kernel_isa\n");
    for (const auto& r : rs)
      fmt::print("\"{}\",\"{}\",{},{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{}\n", r.model_filename, r.model_type,
                 r.model_size, r.model_n_params, r.n_threads, r.n_batch, r.test.n_prompt, r.test.n_gen, r.avg_ts,
                 r.stddev_ts, r.roofline_ts, r.roofline_fraction, r.kernel_isa);
  } else {
    fmt::print("| model | size | params | threads | kernels | KV cache | test | t/s | roofline t/s | of roofline |\n");
    fmt::print("| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |\n");
    for (const auto& r : rs)
      fmt::print("| {} | {} | {:.2f} B | {} | {} | {} ({}) | {} | {:.2f} ± {:.2f} | {:.1f} | {:.1f}% |\n",
                 r.model_type, mib(r.model_size), static_cast<double>(r.model_n_params) / 1e9, r.n_threads,
                 r.kernel_isa, r.kv_type, r.kv_bytes, r.test.name, r.avg_ts,
                 r.stddev_ts, r.roofline_ts, 100.0 * r.roofline_fraction);
    fmt::print("\nrooflines:\n");
    for (const auto& r : rs) fmt::print("  {} {}: {}\n", r.model_type, r.test.name, r.roofline_basis);
    for (const auto& r : rs)
      if (!r.warning.empty()) fmt::print("\nwarning: {}\n", r.warning);
  }
}

int run(BenchFlags& f) {
  if (f.spec != "none" && !f.parallel.spec.empty()) throw Error("--spec and --parallel cannot be combined in bench");
  if (f.spec != "none") return run_spec(f);
  if (!f.mmproj.empty()) return run_media(f);
  LoadOptions parallel;
  apply_parallel_flags(f.parallel, parallel);
  std::string format = f.json ? "json" : f.csv ? "csv" : f.output;
  if (format != "md" && format != "json" && format != "jsonl" && format != "csv")
    throw Error(fmt::format("-o '{}' is not one of md, json, jsonl, csv", format));
  if (f.reps <= 0 || f.reps > 1000) throw Error(fmt::format("-r {} is out of range (1 to 1000)", f.reps));
  for (auto p : f.n_prompt) if (p < 0) throw Error(fmt::format("-p {} must not be negative", p));
  for (auto n : f.n_gen) if (n < 0) throw Error(fmt::format("-n {} must not be negative", n));
  for (auto b : f.batch) if (b <= 0) throw Error(fmt::format("-b {} must be positive", b));
  std::vector<BenchResult> results;
  for (const auto& model : f.models) {
    for (int threads : f.threads) {
      const int n_threads = threads > 0 ? threads : default_thread_count();
      // --measure: probe the limits again now and before every repetition (the
      // machine may be shared), instead of taking the cached ones.
      std::unique_ptr<LimitProbe> probe = f.measure ? std::make_unique<LimitProbe>(n_threads) : nullptr;
      MeasuredLimits limits = probe ? measure_limits(*probe) : cached_or_measured_limits(n_threads);
      if (f.measure) {
        store_limits(limits);
        fmt::print(stderr, "bench: limits now: read {:.1f} GB/s, f32 {:.0f} GFLOP/s, int8 {:.0f} GOP/s, bf16 {:.0f} GFLOP/s\n",
                   limits.read_bandwidth_gbs, limits.f32_fma_gflops, limits.int8_dot_gops, limits.bf16_dot_gflops);
      }
      for (int64_t batch : f.batch) {
        LoadOptions o;
        o.model_path = model;
        o.n_threads = n_threads;
        set_placement(o, f.placement);
        o.max_batch_tokens = batch;
        int64_t need = 1;
        for (auto p : f.n_prompt) need = std::max(need, p);
        for (auto n : f.n_gen)
          for (auto d : f.depth) need = std::max(need, n + d);
        o.n_ctx = need;
        o.profile = !f.profile.empty();
        o.use_mmap = f.use_mmap;
        o.log_fusion = f.log_fusion;
        o.repack_weights = !f.no_repack;
        o.mla = f.mla;
        o.kv_type_k = f.kv_type_k;
        o.kv_type_v = f.kv_type_v;
        o.comm = parallel.comm;
        LoadedModel e = LoadedModel::load(o);
        if (e.is_follower()) {  // rank 0 measures; this rank runs its share of each step
          follow_leader(e, f.profile);
          continue;
        }
        for (auto p : f.n_prompt)
          if (p > 0) results.push_back(run_bench(e, model, {fmt::format("pp{}", p), p, 0}, f.reps, limits, probe.get()));
        for (auto d : f.depth)
          for (auto n : f.n_gen)
            if (n > 0)
              results.push_back(run_bench(e, model, {d > 0 ? fmt::format("tg{}@d{}", n, d) : fmt::format("tg{}", n), 0, n, d},
                                          f.reps, limits, probe.get()));
        fmt::print(stderr, "bench: {} t={} b={} done\n", model, n_threads, batch);
        if (e.profiler) {
          // One trace per run; with a grid, later configurations overwrite earlier ones.
          e.profiler->write_chrome_trace(f.profile);
          fmt::print(stderr, "bench: profile -> {}\n", f.profile);
        }
      }
    }
  }
  if (parallel.comm && parallel.comm->rank() != 0) return 0;  // the results are rank 0's to print
  print_results(results, format);
  return 0;
}

}  // namespace

void register_bench(CLI::App& app) {
  static BenchFlags f;
  auto* cmd = add_command(app, "bench", "Measure prefill and decode speed against the machine's roofline", [] { return run(f); });
  cmd->add_option("-m,--model", f.models, "GGUF model(s); comma-separated or repeated")->required()->delimiter(',');
  cmd->add_option("-p,--n-prompt", f.n_prompt, "Prompt lengths for prefill tests (0: none)")->delimiter(',')->capture_default_str();
  cmd->add_option("-n,--n-gen", f.n_gen, "Generation lengths for decode tests (0: none)")->delimiter(',')->capture_default_str();
  cmd->add_option("-t,--threads", f.threads, "Thread counts (0: all cores)")->delimiter(',')->capture_default_str();
  cmd->add_option("-d,--depth", f.depth,
                  "Decode tests after this many tokens already in the context (their prefill not timed), as "
                  "llama-bench's -d")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", f.batch, "Prompt tokens per forward step")->delimiter(',')->capture_default_str();
  cmd->add_option("-r,--repetitions", f.reps, "Repetitions of each test")->capture_default_str();
  cmd->add_option("-o,--output", f.output, "Output format: md, json, jsonl, csv")->capture_default_str();
  cmd->add_flag("--json", f.json, "Same as -o json");
  cmd->add_flag("--csv", f.csv, "Same as -o csv");
  cmd->add_flag("--log-fusion", f.log_fusion, "Print which fused operators are applied");
  add_device_option(cmd, f.placement);
  add_mla_option(cmd, f.mla);
  add_kv_type_options(cmd, f.kv_type_k, f.kv_type_v);
  add_parallel_options(cmd, f.parallel);
  cmd->add_option("--spec", f.spec, "Measure speculative against plain decoding instead: ngram, draft or mtp")
      ->check(CLI::IsMember({"none", "ngram", "draft", "mtp"}));
  cmd->add_option("--spec-prompt", f.spec_prompt, "With --spec: the text to continue (a repetitive one suits ngram)");
  cmd->add_option("--draft-model", f.draft_model, "With --spec draft: the draft model; with --spec mtp: the MTP block's "
                  "own file (DeepSeek-V4's mtp-*.gguf)");
  cmd->add_flag("--spec-governed", f.spec_governed,
                "With --spec: let the governor stop drafting while it measures slower, as run/serve "
                "--spec-governed do (default: draft as the adaptive length allows: the raw curve)");
  cmd->add_option("--spec-batch", f.spec_batch, "With --spec: requests decoding at once (e.g. 1,8)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  cmd->add_option("--draft-max", f.draft_max, "With --spec: draft lengths to try (the curve)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--measure", f.measure, "Measure the machine's limits again (not the cached ones), and the limit each row is held to before every repetition");
  cmd->add_flag("--no-repack", f.no_repack, "Keep quantized weights in the file's layout (llama.cpp's row-dot arithmetic for batches too, slower)");
  cmd->add_flag("--mmap", f.use_mmap, "Map the model file instead of loading it into huge pages (faster start, slower decode)");
  cmd->add_option("--mmproj", f.mmproj, "Measure an image or audio file instead (with --image/--audio): its encode time and the time to "
                                        "the first token of a prompt holding it");
  cmd->add_option("--image,--audio", f.image, "With --mmproj: the image or audio file (WAV, FLAC, MP3)");
  cmd->add_option("--image-prompt", f.image_prompt, "With --mmproj: the text after the image")->capture_default_str();
  add_image_token_options(cmd, f.image_tokens);
  cmd->add_option("--profile", f.profile, "Record every operator's time per layer as a Chrome trace in FILE.json");
}

}  // namespace kestrel::cli
