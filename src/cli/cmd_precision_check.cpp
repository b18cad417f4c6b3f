// kestrel precision-check -m MODEL [-p TEXT]: each layer's relative error against float64.
#include <fmt/format.h>

#include <cmath>

#include "cli/commands.h"
#include "core/error.h"
#include "measure/precision_check.h"

namespace kestrel::cli {

void register_precision_check(CLI::App& app) {
  static LoadOptions eo;
  static std::string prompt = "Once upon a time, there was a little girl who loved to play in the garden with her dog.";
  static double warn = 1e-2;
  auto* cmd = add_command(
      app, "precision-check", "Per-layer relative error of the model as configured against float64 arithmetic", [] {
        LoadedModel e = [] {
          LoadOptions o = eo;
          o.wrap_backend = make_activation_recorder;
          return LoadedModel::load(o);
        }();
        const auto tokens = e.tokenizer->encode(prompt, true, false);
        const PrecisionReport r = precision_check(e, tokens);
        fmt::print("{} tokens, KV {}, {}\n\n", r.n_tokens, e.kv->layout().type_name(), e.backend->describe());
        const bool indexer = r.indexer;
        fmt::print("| layer | q after RoPE | attention | attn proj | FFN | residual |{}\n",
                   indexer ? " top-k as float64 |" : "");
        fmt::print("| ---: | ---: | ---: | ---: | ---: | ---: |{}\n", indexer ? " ---: |" : "");
        const auto num = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.2e}", v); };
        double worst = 0;
        int64_t differing = 0;
        for (const auto& l : r.layers) {
          fmt::print("| {} | {} | {} | {} | {} | {} |{}\n", l.layer, num(l.q_rope), num(l.attention), num(l.attn_proj),
                     num(l.ffn), num(l.residual),
                     indexer ? fmt::format(" {} of {} rows |", l.selected_same, l.selected_rows) : "");
          for (double v : {l.q_rope, l.attention, l.attn_proj, l.ffn, l.residual})
            if (!std::isnan(v)) worst = std::max(worst, v);
          differing += l.selected_rows - l.selected_same;
        }
        fmt::print("\nlogits: {:.2e}\nRoPE at position {}: max |cos/sin error| {:.2e}\n", r.logits, r.rope_position,
                   r.rope_max_error);
        if (worst > warn) fmt::print("warning: a relative error above {:g} (worst {:.2e})\n", warn, worst);
        if (differing > 0)
          fmt::print("note: {} indexer rows chose other positions than float64 (a near-tie moves a boundary "
                     "position; the branches' errors show its effect)\n",
                     differing);
        return 0;
      });
  cmd->add_option("-m,--model", eo.model_path, "GGUF model (any family kestrel runs)")->required();
  cmd->add_option("-p,--prompt", prompt, "Text to run (one batch)");
  cmd->add_option("-c,--ctx-size", eo.n_ctx, "Context length (0: the model's own; the RoPE check uses its end)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", eo.n_threads, "Threads (0: all cores)")->capture_default_str();
  cmd->add_option("--warn", warn, "Flag relative errors above this")->capture_default_str();
  cmd->add_flag(
      "--no-repack", [](int64_t) { eo.repack_weights = false; }, "Keep quantized weights in the file's layout (llama.cpp's row-dot arithmetic for batches too)");
  add_kv_type_options(cmd, eo.kv_type_k, eo.kv_type_v);
  add_device_option(cmd, eo);
  add_lora_options(cmd, eo);
}

}  // namespace kestrel::cli
