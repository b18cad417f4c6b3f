// kestrel perplexity -m MODEL -f TEXT [-c 512]: llama.cpp's perplexity method.
#include <fmt/format.h>

#include <fstream>

#include "cli/commands.h"
#include "cli/parallel_flags.h"
#include "core/error.h"
#include "measure/perplexity.h"

namespace kestrel::cli {

void register_perplexity(CLI::App& app) {
  static LoadOptions eo;
  static std::string text_path;
  static int64_t ctx = 512, chunks = 0;
  static std::string save_path, base_path;
  static ParallelFlags parallel;
  auto* cmd = add_command(app, "perplexity", "Perplexity of a text, by llama.cpp's method (comparable figures)", [] {
    std::ifstream in(text_path, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot read the text", text_path));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LoadOptions o = eo;
    o.n_ctx = std::max(o.n_ctx, ctx);
    o.max_batch_tokens = std::min<int64_t>(o.max_batch_tokens, ctx);
    apply_parallel_flags(parallel, o);
    LoadedModel e = LoadedModel::load(o);
    if (e.is_follower()) return e.follow_leader(), 0;
    fmt::print(stderr, "perplexity: {} tokens in chunks of {}, the second half of each scored\n",
               e.tokenizer->encode(text, true, false).size(), ctx);
    PerplexityOptions po;
    po.n_ctx = ctx;
    po.max_chunks = chunks;
    po.save_logprobs = save_path;
    po.kl_base = base_path;
    const PerplexityResult r = perplexity(e, text, po, [](int64_t c, int64_t, double ppl) {
      fmt::print("[{}]{:.4f},", c + 1, ppl);
      std::fflush(stdout);
    });
    fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.4f} ({} chunks, {} scored tokens)\n", r.ppl, r.ppl_err,
               r.n_chunks, r.n_scored);
    if (r.has_kl)
      fmt::print(
          "KL divergence vs {}: mean {:.6f}, median {:.6f}, P99 {:.6f}, max {:.6f}; same top token {:.2f}%; "
          "base PPL {:.4f}, delta PPL {:+.4f}\n",
          base_path, r.kld_mean, r.kld_median, r.kld_p99, r.kld_max, 100.0 * r.top1_agreement, r.base_ppl,
          r.ppl - r.base_ppl);
    return 0;
  });
  cmd->add_option("-m,--model", eo.model_path, "GGUF model")->required();
  cmd->add_option("-f,--file", text_path, "Text file")->required();
  cmd->add_option("-c,--ctx", ctx, "Tokens per chunk")->capture_default_str();
  cmd->add_option("--chunks", chunks, "At most this many chunks (0: all)")->capture_default_str();
  cmd->add_option("-t,--threads", eo.n_threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("--save-logprobs,--save-logits", save_path,
                  "Write every scored token's log-probabilities (a base for --kl-divergence)");
  cmd->add_option("--kl-divergence", base_path,
                  "Compare with log-probabilities saved from another model (same text and -c)");
  cmd->add_flag(
      "--no-repack", [](int64_t) { eo.repack_weights = false; }, "Keep quantized weights in the file's layout (llama.cpp's row-dot arithmetic for batches too)");
  add_device_option(cmd, eo);
  add_mla_option(cmd, eo.mla);
  add_kv_type_options(cmd, eo.kv_type_k, eo.kv_type_v);
  add_parallel_options(cmd, parallel);
}

}  // namespace kestrel::cli
