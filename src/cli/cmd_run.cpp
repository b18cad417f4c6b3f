// kestrel run -m MODEL -p PROMPT -n N: generate text, streaming it to stdout,
// then a one-line summary on stderr.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/commands.h"
#include "cli/parallel_flags.h"
#include "cli/grammar_flags.h"
#include "cli/mmproj_flags.h"
#include "core/error.h"
#include "spec/spec_source.h"
#include "runtime/loaded_model.h"
#include "runtime/generator.h"
#include "mmproj/media_prompt.h"

namespace kestrel::cli {
namespace {

struct RunFlags {
  LoadOptions engine;
  std::string prompt, prompt_file, prompt_ids, dump_logits, profile;
  bool prompt_given = false;
  int64_t n_predict = 128;
  GenerationParams gen;
  int64_t seed = -1;
  bool print_ids = false, no_bos = false, parse_special = false;
  std::string spec = "none", draft_model;
  int draft_max = 8;
  bool spec_governed = false;
  GrammarFlags grammar;
  ParallelFlags parallel;
  std::string mmproj;
  ImageTokenLimits image_tokens;
  std::vector<std::string> images;
};

// -p with --image: the images' rows where the prompt has media markers (one per image; none: all first, as
// llama-mtmd-cli puts them), tokenized as llama.cpp's mtmd does.
MediaPrompt media_prompt(RunFlags& f, LoadedModel& e, Mmproj& mm) {
  std::string text = f.prompt;
  if (text.find(kMediaMarker) == std::string::npos)
    for (size_t i = 0; i < f.images.size(); i++) text = kMediaMarker + text;
  std::vector<MediaInput> in;
  for (const std::string& path : f.images)
    in.push_back(media_input_from_file(path, mm.audio() ? mm.audio()->sample_rate() : 16000));
  MediaPromptOptions o;
  o.add_special = !f.no_bos;
  return build_media_prompt(*e.tokenizer, encoders_of(mm), text, in, o);
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::istringstream in(s);
  std::string tok;
  while (in >> tok) {
    try {
      size_t used = 0;
      const long v = std::stol(tok, &used);
      if (used != tok.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(tok);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw Error(fmt::format("--prompt-ids: '{}' is not a token id", tok));
    }
  }
  return ids;
}

int run(RunFlags& f) {
  if (!f.prompt_file.empty()) {
    std::ifstream in(f.prompt_file, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot read prompt file", f.prompt_file));
    f.prompt.assign(std::istreambuf_iterator<char>(in), {});
    f.prompt_given = true;
  }
  if (!f.prompt_given && f.prompt_ids.empty())
    throw Error("no prompt: give -p TEXT, -f FILE or --prompt-ids \"1 2 3\"");
  if (f.n_predict < 0) throw Error(fmt::format("-n {} must not be negative", f.n_predict));
  f.gen.max_tokens = f.n_predict;
  f.gen.spec_draft_max = f.spec == "none" ? 0 : f.draft_max;
  f.gen.spec_governed = f.spec_governed;
  check_draft_model_flags(f.spec, f.draft_model);
  f.gen.sampling.seed = f.seed >= 0 ? static_cast<uint64_t>(f.seed) : std::random_device{}();
  f.gen.sampling.validate();  // before the (slow) model load
  f.gen.grammar = grammar_from_flags(f.grammar);

  f.engine.profile = !f.profile.empty();
  f.engine.load_mtp = f.spec == "mtp";
  f.engine.mtp_model = mtp_model_of(f.spec, f.draft_model);
  apply_parallel_flags(f.parallel, f.engine);
  LoadedModel e = LoadedModel::load(f.engine);
  if (e.is_follower()) return follow_leader(e, f.profile);
  std::unique_ptr<Mmproj> mm = load_mmproj(f.mmproj, f.image_tokens, e);
  f.gen.lora = e.default_lora();
  if (!f.images.empty() && !mm) throw Error("--image/--audio needs the model's projector: --mmproj FILE");
  if (!f.images.empty() && !f.prompt_ids.empty())
    throw Error("--image/--audio takes a text prompt (-p or -f), not --prompt-ids");
  MediaPrompt media;
  if (!f.images.empty()) {
    media = media_prompt(f, e, *mm);
    f.gen.media = media.media;
    fmt::print(stderr, "[kestrel] {} media inputs: {} tokens, encoded in {:.2f} s ({})\n", f.images.size(),
               media.media_tokens, media.encode_seconds,
               mm->vision() && mm->audio() ? mm->vision()->describe() + "; " + mm->audio()->describe()
               : mm->vision()             ? mm->vision()->describe()
                                          : mm->audio()->describe());
  }
  std::vector<int32_t> prompt = !f.images.empty() ? media.tokens
                                : f.prompt_ids.empty() ? e.tokenizer->encode(f.prompt, !f.no_bos, f.parse_special)
                                                       : parse_ids(f.prompt_ids);
  if (prompt.empty()) throw Error("the prompt is empty after tokenization; give some text or --prompt-ids");
  std::unique_ptr<SpecSource> spec;
  if (f.spec != "none") {
    LoadOptions d;
    d.model_path = f.draft_model;
    d.n_threads = f.engine.n_threads;
    spec = std::make_unique<SpecSource>(f.spec, e, d);
    spec->attach(f.gen);
  }

  std::unique_ptr<FILE, int (*)(FILE*)> dump(nullptr, &std::fclose);
  if (!f.dump_logits.empty()) {
    dump.reset(std::fopen(f.dump_logits.c_str(), "wb"));
    if (!dump) throw Error(fmt::format("{}: cannot create logits file", f.dump_logits));
    f.gen.all_logits = true;
  }
  GenerationCallbacks cb;
  cb.on_text = [](const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  int64_t rows = 0;
  if (dump) {
    cb.on_logits = [&](const float* row, int64_t n) {
      if (std::fwrite(row, sizeof(float), static_cast<size_t>(n), dump.get()) != static_cast<size_t>(n))
        throw Error(fmt::format("{}: write failed", f.dump_logits));
      rows++;
    };
  }
  if (f.prompt_given) fmt::print("{}", f.prompt);
  std::fflush(stdout);
  const GenerationResult r = generate(e, prompt, f.gen, cb);
  fmt::print("\n");
  if (f.print_ids) {
    std::string ids;
    for (size_t i = 0; i < r.tokens.size(); i++) ids += (i ? " " : "") + std::to_string(r.tokens[i]);
    fmt::print("ids: {}\n", ids);
  }
  std::fflush(stdout);
  if (e.profiler) {
    e.profiler->write_chrome_trace(f.profile);
    fmt::print(stderr, "[kestrel] profile: {} events -> {} (kestrel profile-report {})\n", e.profiler->events().size(),
               f.profile, f.profile);
  }
  const double pp = r.prefill_seconds > 0 ? r.n_prompt / r.prefill_seconds : 0.0;
  const double tg = r.decode_seconds > 0 ? static_cast<double>(r.tokens.size()) / r.decode_seconds : 0.0;
  fmt::print(stderr,
             "\n[kestrel] prompt {} tokens, generated {} tokens (stop: {}), prefill {:.1f} tok/s, decode {:.1f} tok/s, "
             "seed {}, KV {} ({}), {}{}\n",
             r.n_prompt, r.tokens.size(), r.stop_reason, pp, tg, f.gen.sampling.seed, e.kv->layout().type_name(),
             e.kv->layout().describe_bytes(), e.backend->describe(),
             dump ? fmt::format(", {} logits rows -> {}", rows, f.dump_logits) : "");
  if (f.gen.spec_draft_max > 0)
    fmt::print(stderr, "[kestrel] speculation ({}): {} drafts, {} drafted, {} accepted ({:.1f}%)\n", f.spec, r.spec_steps,
               r.spec_drafted, r.spec_accepted,
               r.spec_drafted ? 100.0 * static_cast<double>(r.spec_accepted) / static_cast<double>(r.spec_drafted) : 0.0);
  if (f.gen.grammar) {
    const GrammarStats& g = r.grammar;
    const double per_token_ms = g.masks ? 1e3 * g.mask_seconds / static_cast<double>(g.masks) : 0.0;
    fmt::print(stderr,
               "[kestrel] grammar: {} masks, {:.3f} ms each ({:.1f}% of decoding), {:.0f}% from the cache, {} trie "
               "nodes walked\n",
               g.masks, per_token_ms, r.decode_seconds > 0 ? 100.0 * g.mask_seconds / r.decode_seconds : 0.0,
               g.masks ? 100.0 * static_cast<double>(g.cache_hits) / static_cast<double>(g.masks) : 0.0, g.trie_nodes);
  }
  if (e.comm) {
    const AllReduceStats s = e.comm->all_reduce_stats();
    const double run_s = r.prefill_seconds + r.decode_seconds;
    fmt::print(stderr,
               "[kestrel] {}, {}: {} all-reduces of {:.1f} KiB on average, {:.1f} ms blocked in them ({:.1f}% of the "
               "run); {} of them overlapped with compute, {:.1f} ms of those exposed\n",
               f.parallel.spec, e.comm->describe(), s.calls, s.calls ? s.bytes / 1024.0 / s.calls : 0.0, 1e3 * s.seconds,
               run_s > 0 ? 100 * s.seconds / run_s : 0.0, s.overlapped_calls, 1e3 * s.overlapped_seconds);
    if (s.exchanges)
      fmt::print(stderr,
                 "[kestrel] expert sums by all-to-all: {} exchanges, {:.1f} KiB sent on average (rows and "
                 "all-gather), {:.1f} ms blocked in them ({:.1f}% of the run)\n",
                 s.exchanges, s.exchange_bytes / 1024.0 / s.exchanges, 1e3 * s.exchange_seconds,
                 run_s > 0 ? 100 * s.exchange_seconds / run_s : 0.0);
  }
  return 0;
}

}  // namespace

void register_run(CLI::App& app) {
  static RunFlags f;
  auto* cmd = add_command(app, "run", "Generate text from a prompt", [] { return run(f); });
  cmd->add_option("-m,--model", f.engine.model_path, "GGUF model (or llama2.c checkpoint with --tokenizer)")->required();
  cmd->add_option("--tokenizer", f.engine.llama2c_tokenizer, "llama2.c tokenizer.bin: -m is then a llama2.c checkpoint, imported on the fly");
  cmd->add_option("-p,--prompt", f.prompt, "Prompt text")->each([](const std::string&) { f.prompt_given = true; });
  cmd->add_option("-f,--file", f.prompt_file, "Read the prompt from a file");
  cmd->add_option("--prompt-ids", f.prompt_ids, "Start from these token ids instead of text, e.g. \"1 403 407\"");
  cmd->add_option("-n,--n-predict", f.n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("-t,--threads", f.engine.n_threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("-c,--ctx-size", f.engine.n_ctx, "Context length (0: the model's own)")->capture_default_str();
  cmd->add_option("-b,--batch-size", f.engine.max_batch_tokens, "Prompt tokens per forward step")->capture_default_str();
  add_sampling_options(cmd, f.gen.sampling);
  cmd->add_option("-s,--seed", f.seed, "Random seed (-1: random; printed in the summary)")->capture_default_str();
  add_grammar_options(cmd, f.grammar);
  cmd->add_option("--stop", f.gen.stop, "Stop string (repeatable); the output ends before it");
  cmd->add_flag("--ignore-eos", f.gen.ignore_eos, "Keep generating past end-of-sequence");
  cmd->add_flag("--no-bos", f.no_bos, "Do not add BOS to the prompt");
  cmd->add_flag("--parse-special", f.parse_special, "Turn special-token text in the prompt into its token");
  cmd->add_flag("--print-ids", f.print_ids, "Print the generated token ids after the text");
  cmd->add_option("--mmproj", f.mmproj, "The model's multimodal projector (llama.cpp's mmproj GGUF) for --image/--audio");
  add_image_token_options(cmd, f.image_tokens);
  cmd->add_option("--image,--audio", f.images,
                  "An image (PNG, JPEG, GIF, WebP) or audio file (WAV, FLAC, MP3) for the prompt (repeatable; the two "
                  "names are one list, as llama-mtmd-cli's); each goes where -p has the marker <__media__>, or all "
                  "before the text when it has none");
  cmd->add_option("--dump-logits", f.dump_logits, "Write float32 logits for every position (row-major) to FILE");
  cmd->add_flag("--log-fusion", f.engine.log_fusion, "Print which fused operators are applied");
  cmd->add_option("--spec", f.spec,
                  "Speculative decoding: none, ngram (prompt lookup), draft (--draft-model), mtp (the model's own "
                  "multi-token-prediction block: DeepSeek-V3, V3.2, V4, GLM-5, GLM-4.5)")
      ->check(CLI::IsMember({"none", "ngram", "draft", "mtp"}))
      ->capture_default_str();
  cmd->add_option("--draft-model", f.draft_model,
                  "With --spec draft: a smaller GGUF model sharing the vocabulary; with --spec mtp: the file the MTP "
                  "block ships in when not in the model's (DeepSeek-V4's mtp-*.gguf)");
  cmd->add_option("--draft-max", f.draft_max, "Most drafted tokens per step with --spec")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_flag("--spec-governed", f.spec_governed,
                "With --spec: stop drafting for a while when it measures slower than plain decoding");
  add_device_option(cmd, f.engine);
  add_lora_options(cmd, f.engine);
  add_control_vector_options(cmd, f.engine);
  add_mla_option(cmd, f.engine.mla);
  add_kv_type_options(cmd, f.engine.kv_type_k, f.engine.kv_type_v);
  add_parallel_options(cmd, f.parallel);
  cmd->add_flag("--no-repack", [](int64_t) { f.engine.repack_weights = false; },
                "Keep quantized weights in the file's layout (llama.cpp's row-dot arithmetic for batches too, slower)");
  cmd->add_flag("--mmap", f.engine.use_mmap, "Map the model file instead of loading it into huge pages (faster start, slower decode)");
  cmd->add_option("--profile", f.profile, "Record every operator's time per layer as a Chrome trace (Perfetto) in FILE.json");
}

}  // namespace kestrel::cli
